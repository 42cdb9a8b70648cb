// Live events over Server-Sent Events, read with fetch (EventSource cannot send the session's
// credential header): GET /bap/v1/events/stream from now, resumed after a drop from the last
// cursor (`after`), never polled.

import { authHeaders, expire, type BapEvent } from "./api";

export type Listener = (e: BapEvent) => void;

const listeners = new Set<Listener>();
let started = false;

/** subscribe calls fn with every event of the tenant from now on; it returns the unsubscribe. */
export function subscribe(fn: Listener): () => void {
  listeners.add(fn);
  if (!started) {
    started = true;
    void run();
  }
  return () => listeners.delete(fn);
}

function status(text: string): void {
  const el = document.getElementById("live");
  if (el && text) el.dataset["stream"] = text;
}

async function run(): Promise<void> {
  let cursor = "";
  let backoff = 500;
  for (;;) {
    try {
      const url = "/bap/v1/events/stream" + (cursor ? `?after=${encodeURIComponent(cursor)}` : "");
      const resp = await fetch(url, { headers: { Accept: "text/event-stream", ...authHeaders() }, credentials: "same-origin", cache: "no-store" });
      if (resp.status === 401) {
        expire(); // the session ended: no reconnecting with a dead credential
        return;
      }
      if (!resp.ok || !resp.body) throw new Error(`stream: ${resp.status}`);
      status("open");
      backoff = 500;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i: number;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const frame = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = parse(frame);
          if (ev.id) cursor = ev.id;
          if (ev.data) dispatch(ev.data);
        }
      }
    } catch {
      // dropped: reconnect from the cursor
    }
    status("reconnecting");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

function parse(frame: string): { id: string; data: string } {
  let id = "";
  const data: string[] = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("id:")) id = line.slice(3).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  return { id, data: data.join("\n") };
}

function dispatch(raw: string): void {
  let ev: BapEvent;
  try {
    ev = JSON.parse(raw) as BapEvent;
  } catch {
    return;
  }
  if (typeof ev.type !== "string") return;
  for (const fn of listeners) fn(ev);
}
