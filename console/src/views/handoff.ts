// Human handoff on a task page (issue #18 item 5, ADR 0023): **Take over** the task's open
// browser session, drive it while the agent waits, **Hand back**. The person's input is not a
// remote keyboard: each keystroke batch or click is one governed act (act_on_page, with the
// person as the actor), so origin policy, approval rules and receipts apply to it exactly as to
// the agent's. The fields come from the person's own observe of the page; the live view above
// shows what the acts did.

import { ApiError, call, type BapEvent } from "../api";
import { announce, h } from "../dom";

/** HandoffView is the handoff's section of a task page, fed the task's events and state. */
export interface HandoffView {
  node: HTMLElement;
  onEvent(e: BapEvent): void;
  onState(state: string): void;
}

interface PageNode {
  node_id: string;
  role: string;
  name?: string;
  value?: string;
  children?: PageNode[];
}

// The roles a person types into or clicks, in the observation's order.
const typed = new Set(["textbox", "searchbox", "combobox", "spinbutton"]);
const clicked = new Set(["button", "link", "checkbox", "radio", "menuitem", "tab"]);

function flatten(nodes: PageNode[] | undefined, out: PageNode[] = []): PageNode[] {
  for (const n of nodes ?? []) {
    if (typed.has(n.role) || clicked.has(n.role)) out.push(n);
    flatten(n.children, out);
  }
  return out;
}

export function handoffView(taskID: string): HandoffView {
  const status = h("p", { id: "handoff-status", role: "status" }, "The agent drives this task.");
  const out = h("p", { class: "result", hidden: true, id: "handoff-result" });
  const takeOver = h("button", { type: "button", id: "take-over", disabled: true }, "Take over");
  const handBack = h("button", { type: "button", id: "hand-back", hidden: true }, "Hand back");
  const select = h("select", { id: "handoff-field", name: "field" });
  const text = h("input", { id: "handoff-text", name: "text", type: "text", autocomplete: "off" });
  const type = h("button", { type: "submit" }, "Type");
  const click = h("button", { type: "button" }, "Click");
  const refresh = h("button", { type: "button" }, "Refresh fields");
  const form = h("form", { id: "handoff-act", hidden: true, "aria-label": "Act on the page" },
    h("label", { for: "handoff-field" }, "Field"), select,
    h("label", { for: "handoff-text" }, "Text"), text,
    h("div", { class: "buttons" }, type, click, refresh));
  const node = h("section", { id: "handoff", "aria-label": "Handoff", "data-handoff": "none" },
    h("h2", {}, "Handoff"), status, h("div", { class: "buttons" }, takeOver, handBack), form, out);
  let session: string | null = null; // the open session the events name
  let holding: string | null = null; // the session of the open handoff
  let holder = ""; // who holds it
  let state = "";

  function show(ok: boolean, msg: string): void {
    out.className = ok ? "result ok" : "result bad";
    out.textContent = msg;
    out.hidden = false;
    announce(msg);
  }
  function refused(e: unknown): void {
    show(false, e instanceof ApiError ? `Refused: ${e.problem.detail} (${e.problem.code})` : String(e));
  }
  function render(): void {
    node.setAttribute("data-handoff", holding ? "open" : "none");
    takeOver.hidden = holding !== null;
    takeOver.disabled = holding !== null || session === null || state !== "running";
    handBack.hidden = holding === null;
    form.hidden = holding === null;
    status.textContent = holding
      ? `${holder || "A person"} drives session ${holding}; the agent's commands answer 409 task_handed_off until you hand back.`
      : session ? "The agent drives this task." : "No open browser session to take over.";
  }
  async function fields(): Promise<void> {
    if (!holding) return;
    const obs = await call<{ nodes: PageNode[] }>("POST", `/bap/v1/browser-sessions/${holding}/observe`, {}, true);
    const keep = select.value;
    select.replaceChildren(...flatten(obs.nodes).map((n) =>
      h("option", { value: n.node_id, "data-value": n.value ?? "" }, `${n.role} “${n.name ?? ""}”${n.value ? ` = ${n.value}` : ""}`)));
    if (keep && [...select.options].some((o) => o.value === keep)) select.value = keep;
    select.setAttribute("data-ready", "true");
  }
  async function act(body: Record<string, unknown>, done: string): Promise<void> {
    if (!holding) return;
    try {
      const res = await call<{ receipt?: { outcome: string } }>("POST", `/bap/v1/browser-sessions/${holding}/act`, { ...body, node_id: select.value }, true);
      show(true, `${done}: ${res.receipt?.outcome ?? "done"}`);
    } catch (e: unknown) {
      refused(e);
    }
    await fields().catch(refused);
  }

  takeOver.addEventListener("click", () => {
    if (!session) return;
    takeOver.disabled = true;
    call<{ handoff: { session_id: string; holder: string } }>("POST", `/bap/v1/tasks/${taskID}/take_over`, { session_id: session }, true)
      .then((res) => {
        holding = res.handoff.session_id;
        holder = res.handoff.holder;
        render();
        show(true, "Taken over: the agent waits.");
        return fields();
      })
      .catch((e: unknown) => {
        refused(e);
        render();
      });
  });
  handBack.addEventListener("click", () => {
    handBack.disabled = true;
    call<{ epoch_id?: string; task?: { state: string } }>("POST", `/bap/v1/tasks/${taskID}/hand_back`, {}, true)
      .then((res) => {
        holding = null;
        const epoch = res.epoch_id ? " " + res.epoch_id : "";
        // An act of yours that was interrupted left a reconciliation open: the task waits for it.
        show(true, res.task?.state === "waiting_for_external_input"
          ? `Handed back on a new page epoch${epoch}; the task waits until its open reconciliation is settled (Reconciliation).`
          : `Handed back: the agent continues on a new page epoch${epoch}.`);
      })
      .catch(refused)
      .finally(() => {
        handBack.disabled = false;
        render();
      });
  });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    void act({ action: "fill", value: text.value }, "Typed");
  });
  click.addEventListener("click", () => void act({ action: "click" }, "Clicked"));
  refresh.addEventListener("click", () => void fields().catch(refused));
  render();

  return {
    node,
    onEvent(e: BapEvent) {
      const id = e.data?.["session_id"];
      if (typeof id !== "string") return;
      if (e.type === "browser_session.opened") session = id;
      else if ((e.type === "browser_session.closed" || e.type === "browser_session.lost") && session === id) session = null;
      else if (e.type === "handoff.started") {
        holding = id;
        holder = typeof e.data["holder"] === "string" ? e.data["holder"] : "";
      }
      else if (e.type === "handoff.returned") holding = null;
      else return;
      render();
      if (e.type === "handoff.started") void fields().catch(refused);
    },
    onState(s: string) {
      state = s;
      render();
    },
  };
}
