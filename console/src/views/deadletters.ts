// Dead letters: plan steps that failed for good — their retries spent, or a problem no retry
// mends — each the end of its task. Listed newest first with what failed and why (the problem's
// code and detail, which never carry a secret's value); a new one appears when its event arrives.

import { call, type BapEvent } from "../api";
import { announce, facts, h, when, type Child } from "../dom";
import type { View } from "./view";

interface DeadLetter {
  dead_letter_id: number;
  task_id: string;
  command_id?: string;
  step_index?: number;
  op?: string;
  reason: string;
  problem_code?: string;
  detail?: string;
  attempts: number;
  artifact_id?: string;
  created_at: string;
}

export function deadLetters(main: HTMLElement): View {
  const list = h("div", { id: "dead-letters" });
  main.replaceChildren(h("h1", {}, "Dead letters"),
    h("p", { class: "muted" }, "Plan steps that failed for good and ended their task. Nothing retries them: read why, then start a new task."),
    list);

  async function load(): Promise<void> {
    const res = await call<{ dead_letters: DeadLetter[] }>("GET", "/console/api/dead-letters");
    const cards = res.dead_letters.map(render);
    list.replaceChildren(...(cards.length ? cards : [h("p", { class: "empty" }, "No plan has failed for good.")]));
  }
  const refresh = () => void load().catch((e: unknown) => announce(String(e)));
  refresh();
  return {
    onEvent(e: BapEvent) {
      if (e.type === "plan.step_finished" && e.data["dead_lettered"] === true) {
        refresh();
        announce(`Task ${e.task_id} failed for good`);
      }
    },
    close() {},
  };
}

function render(d: DeadLetter): HTMLElement {
  const step = d.step_index === undefined ? "A step" : `Step ${d.step_index + 1}${d.op ? ` (${d.op})` : ""}`;
  const rows: Array<[string, Child]> = [
    ["Task", h("a", { href: `#/tasks/${d.task_id}` }, d.task_id)],
    ["Why", d.detail ?? d.reason.replaceAll("_", " ")],
    ["Problem", h("code", {}, d.problem_code ?? "none")],
    ["Reason", d.reason.replaceAll("_", " ")],
    ["Attempts", String(d.attempts)],
    ["When", when(d.created_at)],
  ];
  if (d.command_id) rows.push(["Command", h("code", {}, d.command_id)]);
  if (d.artifact_id) rows.push(["Screenshot", h("a", { href: `#/artifacts/${d.artifact_id}` }, d.artifact_id)]);
  return h("article", { class: "card", "data-dead-letter": String(d.dead_letter_id), "aria-label": `Dead letter ${d.dead_letter_id}` },
    h("h2", {}, `${step} failed`), facts(rows));
}
