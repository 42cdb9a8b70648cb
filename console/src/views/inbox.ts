// The approvals inbox: every pending approval with the task's goal, the exact held request (method,
// URL, what the act aimed at, the keyed digest), the hold-time screenshot and the time left; Approve
// and Deny with an optional note. New holds and decisions arrive over the event stream.

import { ApiError, bytes, call, type Approval, type BapEvent, type Target, type Task } from "../api";
import { announce, append, facts, h, left, when } from "../dom";
import type { View } from "./view";

export function inbox(main: HTMLElement): View {
  const list = h("div", { id: "approvals" });
  main.replaceChildren(h("h1", {}, "Approvals"), h("p", { class: "muted" }, "Held actions wait here until you decide. The agent cannot answer them."), list);
  const goals = new Map<string, string>();
  const targets = new Map<string, Target>();
  const timers: number[] = [];
  let loading: Promise<void> | null = null;
  let again = false;

  async function load(): Promise<void> {
    const res = await call<{ approvals: Approval[] }>("GET", "/bap/v1/approvals?state=pending&limit=100");
    for (const a of res.approvals) {
      if (!goals.has(a.task_id)) {
        try {
          goals.set(a.task_id, (await call<{ task: Task }>("GET", `/bap/v1/tasks/${a.task_id}`)).task.goal);
        } catch {
          goals.set(a.task_id, "");
        }
      }
      if (a.held_request && !targets.has(a.approval_id) && !list.querySelector(`[data-approval="${a.approval_id}"]`)) {
        const t = await target(a);
        if (t) targets.set(a.approval_id, t);
      }
    }
    timers.splice(0).forEach((t) => clearInterval(t));
    const open = new Set(Array.from(list.querySelectorAll<HTMLElement>("[data-approval]"), (el) => el.dataset["approval"] ?? ""));
    const keep = new Set(res.approvals.map((a) => a.approval_id));
    // A card decided here stays, with its result, until the page is left; others go once closed.
    for (const id of open) if (!keep.has(id)) list.querySelector(`[data-approval="${id}"]:not([data-decided])`)?.remove();
    for (const a of res.approvals) {
      let card = list.querySelector<HTMLElement>(`[data-approval="${a.approval_id}"]`);
      if (!card) {
        card = render(a, goals.get(a.task_id) ?? "", targets.get(a.approval_id));
        list.append(card);
      }
      const clock = card.querySelector<HTMLElement>(".left");
      if (clock) {
        const tick = () => (clock.textContent = left(a.expires_at));
        tick();
        timers.push(window.setInterval(tick, 1000));
      }
    }
    list.querySelector(".empty")?.remove();
    if (list.querySelector("[data-approval]") === null) list.append(h("p", { class: "empty" }, "Nothing waits for a decision."));
  }

  // One load at a time; events during a load ask for one more.
  function refresh(): void {
    if (loading) {
      again = true;
      return;
    }
    loading = load()
      .catch((e: unknown) => announce(e instanceof Error ? e.message : String(e)))
      .finally(() => {
        loading = null;
        if (again) {
          again = false;
          refresh();
        }
      });
  }

  refresh();
  return {
    onEvent(e: BapEvent) {
      if (e.type === "approval.requested" || e.type === "approval.resolved") refresh();
    },
    close() {
      timers.forEach((t) => clearInterval(t));
    },
  };
}

// target reads what the held act aimed at from the approval.requested event of its task's history.
async function target(a: Approval): Promise<Target | undefined> {
  try {
    const res = await call<{ events: BapEvent[] }>("GET", `/bap/v1/tasks/${a.task_id}/events?limit=1000`);
    for (const e of res.events) {
      const t = e.data["target"];
      if (e.type === "approval.requested" && e.data["approval_id"] === a.approval_id && t && typeof t === "object") return t as Target;
    }
  } catch {
    // shown without it
  }
  return undefined;
}

function render(a: Approval, goal: string, tg: Target | undefined): HTMLElement {
  const hr = a.held_request;
  const titleId = `t-${a.approval_id}`;
  const note = h("textarea", { id: `note-${a.approval_id}`, name: "note", maxlength: "1000" });
  const out = h("p", { class: "result", hidden: true, role: "status" });
  const decide = async (decision: "approve" | "deny", buttons: HTMLButtonElement[]) => {
    buttons.forEach((b) => (b.disabled = true));
    card.dataset["decided"] = "sending"; // its approval.resolved may arrive before this answer
    const body: { decision: string; reason?: string } = { decision };
    if (note.value.trim()) body.reason = note.value.trim();
    try {
      const res = await call<{ approval: Approval; action_receipt?: { outcome: string } }>("POST", `/bap/v1/approvals/${a.approval_id}/resolve`, body, true);
      card.dataset["decided"] = res.approval.state;
      out.className = "result ok";
      out.textContent = `${res.approval.state === "approved" ? "Approved" : "Denied"} by ${res.approval.resolved_by ?? "you"}` +
        (res.action_receipt ? `; the held action ran: ${res.action_receipt.outcome}` : "");
      announce(out.textContent);
    } catch (e: unknown) {
      out.className = "result bad";
      out.textContent = e instanceof ApiError ? `Refused: ${e.problem.detail} (${e.problem.code})` : String(e);
      delete card.dataset["decided"];
      buttons.forEach((b) => (b.disabled = false));
    }
    out.hidden = false;
  };
  const approve = h("button", { type: "button", class: "approve" }, "Approve");
  const deny = h("button", { type: "button", class: "deny" }, "Deny");
  approve.addEventListener("click", () => void decide("approve", [approve, deny]));
  deny.addEventListener("click", () => void decide("deny", [approve, deny]));
  const target = tg ? `${tg.role} “${tg.name ?? ""}”` : "";
  const shot = h("div", {});
  const card = h("article", { class: "card", "data-approval": a.approval_id, "aria-labelledby": titleId },
    h("h2", { id: titleId }, goal || a.task_id),
    h("div", { class: "held" },
      h("div", {},
        facts([
          ["Held request", hr ? h("code", {}, `${hr.method} ${hr.url}`) : null],
          ["Target", target],
          ["Keyed body digest", hr?.digest ? h("code", {}, hr.digest) : null],
          ["Reason", a.reason],
          ["Requested by", a.requested_by ?? ""],
          ["Requested", when(a.requested_at)],
          ["Time left", h("span", { class: "left" }, left(a.expires_at))],
          ["Task", h("a", { href: `#/tasks/${a.task_id}` }, a.task_id)],
        ]),
        h("label", { for: `note-${a.approval_id}` }, "Note (optional)"), note,
        h("div", { class: "buttons" }, approve, deny), out),
      shot));
  if (a.screenshot_artifact_id) void screenshot(shot, a.screenshot_artifact_id);
  return card;
}

async function screenshot(into: HTMLElement, id: string): Promise<void> {
  try {
    const b = await bytes(`/bap/v1/artifacts/${id}`);
    const url = URL.createObjectURL(new Blob([b.data], { type: b.type }));
    append(into, h("figure", {}, h("img", { class: "shot", src: url, alt: "The page when the request was held" }),
      h("figcaption", { class: "muted" }, "At hold time · ", h("a", { href: `#/artifacts/${id}` }, "evidence"))));
  } catch {
    append(into, h("p", { class: "muted" }, "The screenshot could not be loaded."));
  }
}
