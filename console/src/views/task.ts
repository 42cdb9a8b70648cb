// A task's page: its state, postcondition and verification, and the timeline of its history
// (list_task_events: events, commands and receipts, outcomes), extended live from the stream.

import { call, type BapEvent, type Task } from "../api";
import { announce, append, facts, h, when } from "../dom";
import { handoffView } from "./handoff";
import { liveView } from "./live";
import type { View } from "./view";

function summary(e: BapEvent): Node {
  const d = e.data ?? {};
  const parts: Node[] = [];
  const pick = ["from", "to", "outcome", "receipt_id", "command_id", "approval_id", "state", "decision", "resolved_by", "resolved_via",
    "method", "url", "reason", "verification", "problem_code", "dead_lettered", "index", "op", "session_id"];
  for (const k of pick) {
    const v = d[k];
    if (v === undefined || v === null || v === "" || typeof v === "object") continue;
    parts.push(h("span", {}, h("span", { class: "muted" }, `${k} `), h("code", {}, String(v)), " "));
  }
  const arts = new Set<string>();
  for (const k of ["screenshot_artifact_id", "artifact_id"]) if (typeof d[k] === "string") arts.add(d[k] as string);
  if (Array.isArray(d["artifacts"])) {
    for (const a of d["artifacts"] as unknown[]) {
      if (a && typeof a === "object" && typeof (a as { artifact_id?: unknown }).artifact_id === "string") arts.add((a as { artifact_id: string }).artifact_id);
    }
  }
  for (const id of arts) parts.push(h("a", { href: `#/artifacts/${id}` }, `evidence ${id}`), document.createTextNode(" "));
  return h("span", {}, ...parts);
}

function cause(e: BapEvent): string {
  const c = e.cause;
  if (!c) return "";
  return [c.reason, c.command_id, c.event_id].filter((v): v is string => typeof v === "string" && v !== "").join(" ");
}

export function taskPage(main: HTMLElement, taskID: string): View {
  const head = h("div", {});
  const rows = h("tbody", {});
  const live = liveView();
  const handoff = handoffView(taskID);
  main.replaceChildren(h("h1", {}, "Task ", h("code", {}, taskID)), head, live.node, handoff.node,
    h("h2", {}, "Timeline"),
    h("table", { class: "timeline", "aria-label": "Timeline" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Seq"), h("th", { scope: "col" }, "Time"), h("th", { scope: "col" }, "Event"),
        h("th", { scope: "col" }, "Actor"), h("th", { scope: "col" }, "Cause"), h("th", { scope: "col" }, "Details"))),
      rows));
  let last = 0;
  let busy = false;
  let again = false;

  async function loadTask(): Promise<void> {
    const { task } = await call<{ task: Task }>("GET", `/bap/v1/tasks/${taskID}`);
    const v = task.verification;
    const verification = typeof v === "string" ? v : v ? `${v.state}${v.reason ? ": " + v.reason : ""}` : "not checked yet";
    head.replaceChildren(h("div", { class: "card" }, facts([
      ["Goal", task.goal], ["State", h("span", { class: "state", id: "task-state" }, task.state)], ["Verification", verification],
      ["Postcondition", task.postcondition ? h("code", {}, JSON.stringify(task.postcondition)) : "none declared"],
      ["Created", when(task.created_at)], ["Updated", when(task.updated_at)],
    ])));
    handoff.onState(task.state);
  }
  function add(e: BapEvent): void {
    if (e.seq <= last) return;
    last = e.seq;
    live.onEvent(e);
    handoff.onEvent(e);
    append(rows, h("tr", { "data-seq": String(e.seq) }, h("td", {}, String(e.seq)), h("td", {}, when(e.time)), h("td", {}, h("code", {}, e.type)),
      h("td", {}, e.actor ? [e.actor.kind, e.actor.id].filter((v) => v).join(" ") : ""), h("td", {}, cause(e)), h("td", {}, summary(e))));
  }
  // Reads the history after the last seq shown: the stream says something happened, the history
  // says what, in order, exactly once.
  async function catchUp(): Promise<void> {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      for (;;) {
        const res = await call<{ events: BapEvent[]; next_after: number | null }>("GET", `/bap/v1/tasks/${taskID}/events?after=${last}&limit=1000`);
        res.events.forEach(add);
        if (res.next_after === null || res.events.length === 0) break;
      }
    } finally {
      busy = false;
      if (again) {
        again = false;
        void catchUp();
      }
    }
  }
  Promise.all([loadTask(), catchUp()]).catch((e: unknown) => announce(String(e)));
  return {
    onEvent(e: BapEvent) {
      if (e.task_id !== taskID) return;
      void catchUp().catch(() => {});
      if (e.type.startsWith("task.") || e.type.startsWith("approval.")) void loadTask().catch(() => {});
    },
    close() {
      live.close();
    },
  };
}
