// The live view of a task's page (issue #18): the viewport of the task's open browser session, as
// JPEG frames over a WebSocket, read-only. The server captures only while somebody watches, at
// most 2 frames a second, one stream shared by every watcher; the stream ends (a close frame with
// its reason) when the session closes or is lost.
//
// A browser's WebSocket cannot send headers: the session's credential goes as a subprotocol next
// to bap.live.v1, and the server checks the Origin before it upgrades.

import { authHeaders, type BapEvent } from "../api";
import { h } from "../dom";

/** LiveView is the live view's section of a task page, fed the task's events in order. */
export interface LiveView {
  node: HTMLElement;
  onEvent(e: BapEvent): void;
  close(): void;
}

function protocols(): string[] {
  const p = ["bap.live.v1"];
  for (const [k, v] of Object.entries(authHeaders())) {
    if (k.toLowerCase() === "authorization") p.push("bap.bearer." + v.replace(/^Bearer /, ""));
    else p.push("bap.csrf." + v);
  }
  return p;
}

export function liveView(): LiveView {
  const img = h("img", { class: "live-frame", alt: "The agent's browser viewport, live", hidden: true, "data-frames": "0" });
  const status = h("p", { id: "live-status", role: "status" }, "No open browser session.");
  const node = h("section", { id: "live-view", "aria-label": "Live view", "data-stream": "none" },
    h("h2", {}, "Live view"), status, img);
  let current: string | null = null; // the open session the events name
  let ws: WebSocket | null = null;
  let wsSession: string | null = null;
  let url: string | null = null;
  let frames = 0;
  let scheduled = false;
  let closed = false;

  function setState(state: string, text: string): void {
    node.setAttribute("data-stream", state);
    status.textContent = text;
  }
  function disconnect(): void {
    if (ws) {
      const w = ws;
      ws = null;
      w.onclose = null;
      w.close(1000, "the watcher left");
    }
    wsSession = null;
  }
  function connect(id: string): void {
    disconnect();
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const w = new WebSocket(`${scheme}//${location.host}/console/api/sessions/${encodeURIComponent(id)}/live`, protocols());
    w.binaryType = "blob";
    ws = w;
    wsSession = id;
    setState("connecting", `Connecting to session ${id}…`);
    w.onopen = () => setState("open", `Watching session ${id} (read-only, at most 2 frames a second).`);
    w.onmessage = (ev: MessageEvent) => {
      if (!(ev.data instanceof Blob)) return;
      const next = URL.createObjectURL(ev.data);
      img.src = next;
      if (url) URL.revokeObjectURL(url);
      url = next;
      frames++;
      img.hidden = false;
      img.setAttribute("data-frames", String(frames));
    };
    w.onclose = (ev: CloseEvent) => {
      if (ws !== w) return;
      ws = null;
      wsSession = null;
      const why = ev.reason || (ev.code === 1006 ? "the connection dropped" : `code ${ev.code}`);
      setState("ended", `Live view ended: ${why}.`);
    };
  }
  // sync connects to the session the events leave open, once a batch of events is read.
  function sync(): void {
    scheduled = false;
    if (closed) return;
    // A session that closed ends its stream from the server, with the reason shown.
    if (current === null) return;
    if (wsSession !== current) connect(current);
  }
  return {
    node,
    onEvent(e: BapEvent) {
      const id = e.data?.["session_id"];
      if (typeof id !== "string") return;
      if (e.type === "browser_session.opened") current = id;
      else if ((e.type === "browser_session.closed" || e.type === "browser_session.lost") && current === id) current = null;
      else return;
      if (!scheduled) {
        scheduled = true;
        setTimeout(sync, 0);
      }
    },
    close() {
      closed = true;
      disconnect();
      if (url) URL.revokeObjectURL(url);
    },
  };
}
