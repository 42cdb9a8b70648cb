// Small DOM helpers: every text goes in as a text node (never HTML), so nothing a task, a page or
// an agent wrote can run as script here.

export type Child = Node | string | null | undefined | false;
export type Attrs = Record<string, string | boolean | EventListener | undefined>;

/** h builds an element with attributes (on* keys become listeners) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (v === true) {
      el.setAttribute(k, "");
    } else {
      el.setAttribute(k, v);
    }
  }
  append(el, ...children);
  return el;
}

/** append adds children, skipping empty ones. */
export function append(el: Node, ...children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    // Anything but a node is shown as text: a value from the wire never becomes markup.
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** facts is a description list of label → value rows (rows with an empty value are left out). */
export function facts(rows: Array<[string, Child]>): HTMLDListElement {
  const dl = h("dl", { class: "facts" });
  for (const [k, v] of rows) {
    if (v === null || v === undefined || v === false || v === "") continue;
    append(dl, h("dt", {}, k), h("dd", {}, v));
  }
  return dl;
}

/** when formats an RFC 3339 time for people, with the exact value in a <time> element. */
export function when(iso: string | undefined): Child {
  if (!iso) return null;
  const d = new Date(iso);
  return h("time", { datetime: iso }, d.toLocaleString());
}

/** left says how long until iso, in words ("expired" once past). */
export function left(iso: string, now: number = Date.now()): string {
  const ms = new Date(iso).getTime() - now;
  if (ms <= 0) return "expired";
  const s = Math.floor(ms / 1000);
  const m = Math.floor(s / 60);
  return m > 0 ? `${m} min ${s % 60} s left` : `${s} s left`;
}

/** announce tells screen-reader users (and the tests) what just happened. */
export function announce(text: string): void {
  const live = document.getElementById("live");
  if (live) live.textContent = text;
}
