// The reconciliation queue: side-effecting commands a crash interrupted after they may have had
// their effect. Nothing re-runs them; a person checks the site and says what happened — the
// effect happened (applied) or it did not (no_side_effect) — with a note, and the task goes on.

import { ApiError, call, type BapEvent } from "../api";
import { announce, facts, h, when } from "../dom";
import type { View } from "./view";

interface Reconciliation {
  reconciliation_id: string;
  task_id: string;
  command_id: string;
  operation: string;
  state: string;
  opened_at: string;
  resolution?: string;
  note?: string;
  resolved_by?: string;
}

export function reconciliations(main: HTMLElement): View {
  const list = h("div", { id: "reconciliations" });
  main.replaceChildren(h("h1", {}, "Reconciliation"),
    h("p", { class: "muted" }, "Commands a crash interrupted after they may have had their effect. They never run again: check the site, then say what happened."),
    list);

  async function load(): Promise<void> {
    const res = await call<{ reconciliations: Reconciliation[] }>("GET", "/console/api/reconciliations");
    for (const el of list.querySelectorAll<HTMLElement>("[data-reconciliation]:not([data-settled])")) {
      if (!res.reconciliations.some((r) => r.reconciliation_id === el.dataset["reconciliation"])) el.remove();
    }
    for (const r of res.reconciliations) {
      if (!list.querySelector(`[data-reconciliation="${r.reconciliation_id}"]`)) list.append(render(r));
    }
    list.querySelector(".empty")?.remove();
    if (!list.querySelector("[data-reconciliation]")) list.append(h("p", { class: "empty" }, "No interrupted command waits for you."));
  }
  const refresh = () => void load().catch((e: unknown) => announce(String(e)));
  refresh();
  return {
    onEvent(e: BapEvent) {
      if (e.type.startsWith("reconciliation.")) refresh();
    },
    close() {},
  };
}

function render(r: Reconciliation): HTMLElement {
  const id = r.reconciliation_id;
  const name = `outcome-${id}`;
  const radio = (value: string, label: string) => {
    const input = h("input", { type: "radio", name, value, id: `${name}-${value}` });
    return h("div", {}, input, " ", h("label", { for: `${name}-${value}`, class: "inline" }, label));
  };
  const note = h("textarea", { id: `note-${id}`, required: true, maxlength: "2000" });
  const out = h("p", { class: "result", hidden: true, role: "status" });
  const settle = h("button", { type: "submit", class: "primary" }, "Settle");
  const form = h("form", {},
    h("fieldset", {}, h("legend", {}, "What happened?"), radio("applied", "The effect happened (applied)"), radio("no_side_effect", "It did not happen (no side effect)")),
    h("label", { for: `note-${id}` }, "Note: what you found"), note,
    h("div", { class: "buttons" }, settle), out);
  const card = h("article", { class: "card", "data-reconciliation": id, "aria-label": `Reconciliation ${id}` },
    h("h2", {}, `Interrupted ${r.operation}`),
    facts([["Task", h("a", { href: `#/tasks/${r.task_id}` }, r.task_id)], ["Command", h("code", {}, r.command_id)], ["Opened", when(r.opened_at)]]),
    form);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const chosen = form.querySelector<HTMLInputElement>(`input[name="${name}"]:checked`);
    if (!chosen) {
      out.hidden = false;
      out.className = "result bad";
      out.textContent = "Choose what happened.";
      return;
    }
    settle.disabled = true;
    card.dataset["settled"] = "sending";
    call<{ reconciliation: Reconciliation }>("POST", `/console/api/reconciliations/${id}/resolve`, { outcome: chosen.value, note: note.value.trim() })
      .then((res) => {
        out.className = "result ok";
        out.textContent = `Settled as ${res.reconciliation.resolution ?? chosen.value} by ${res.reconciliation.resolved_by ?? "you"}`;
        announce(out.textContent);
      })
      .catch((err: unknown) => {
        delete card.dataset["settled"];
        settle.disabled = false;
        out.className = "result bad";
        out.textContent = err instanceof ApiError ? `Refused: ${err.problem.detail} (${err.problem.code})` : String(err);
      })
      .finally(() => (out.hidden = false));
  });
  return card;
}
