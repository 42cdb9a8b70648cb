// The task list: filterable by state, age and origin; rows change as task events arrive.

import { call, type BapEvent, type TaskRow } from "../api";
import { announce, h, when } from "../dom";
import type { View } from "./view";

const states = ["", "created", "running", "waiting_for_approval", "waiting_for_external_input", "succeeded", "failed", "cancelled", "expired"];
const ages: Array<[string, string]> = [["", "Any age"], ["3600", "Last hour"], ["86400", "Last 24 hours"], ["604800", "Last 7 days"]];
const origins: Array<[string, string]> = [["", "Any origin"], ["interactive", "Interactive"], ["delegated", "Delegated"], ["autonomous", "Autonomous"]];

function select(id: string, label: string, options: Array<[string, string]>, value: string): [HTMLLabelElement, HTMLSelectElement] {
  const s = h("select", { id, name: id }, ...options.map(([v, t]) => h("option", { value: v, selected: v === value }, t)));
  return [h("label", { for: id }, label), s];
}

export function tasks(main: HTMLElement, query: URLSearchParams): View {
  const [sl, state] = select("state", "State", states.map((s) => [s, s || "Any state"]), query.get("state") ?? "");
  const [al, age] = select("age", "Age", ages, query.get("age") ?? "");
  const [ol, origin] = select("origin", "Origin", origins, query.get("origin") ?? "");
  const body = h("tbody", {});
  const table = h("table", { "aria-label": "Tasks" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Task"), h("th", { scope: "col" }, "Goal"), h("th", { scope: "col" }, "State"),
      h("th", { scope: "col" }, "Origin"), h("th", { scope: "col" }, "Created"), h("th", { scope: "col" }, "Updated"))),
    body);
  main.replaceChildren(h("h1", {}, "Tasks"),
    h("div", { class: "filters", role: "search" }, h("div", {}, sl, state), h("div", {}, al, age), h("div", {}, ol, origin)),
    table);
  let pending = false;

  async function load(): Promise<void> {
    const q = new URLSearchParams({ limit: "200" });
    if (state.value) q.set("state", state.value);
    if (origin.value) q.set("origin", origin.value);
    if (age.value) q.set("created_after", new Date(Date.now() - Number(age.value) * 1000).toISOString());
    const res = await call<{ tasks: TaskRow[] }>("GET", `/console/api/tasks?${q.toString()}`);
    body.replaceChildren(...res.tasks.map((t) => h("tr", { "data-task": t.task_id },
      h("td", {}, h("a", { href: `#/tasks/${t.task_id}` }, h("code", {}, t.task_id))), h("td", {}, t.goal),
      h("td", { class: "state" }, t.state), h("td", {}, t.origin), h("td", {}, when(t.created_at)), h("td", {}, when(t.updated_at)))));
    if (res.tasks.length === 0) body.replaceChildren(h("tr", {}, h("td", { colspan: "6", class: "empty" }, "No task matches.")));
  }
  const refresh = () => {
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      load().catch((e: unknown) => announce(String(e)));
    });
  };
  for (const s of [state, age, origin]) {
    s.addEventListener("change", () => {
      const q = new URLSearchParams();
      if (state.value) q.set("state", state.value);
      if (age.value) q.set("age", age.value);
      if (origin.value) q.set("origin", origin.value);
      history.replaceState(null, "", `#/tasks${q.size ? "?" + q.toString() : ""}`);
      refresh();
    });
  }
  refresh();
  return {
    onEvent(e: BapEvent) {
      if (e.type.startsWith("task.") || e.type.startsWith("approval.")) refresh();
    },
    close() {},
  };
}
