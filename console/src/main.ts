// The operator console: sign in, then one view per route (#/approvals, #/tasks, #/tasks/ID,
// #/reconciliation, #/dead-letters, #/artifacts/ID), each following the tenant's live events.

import { call } from "./api";
import { signIn, type Config } from "./auth";
import { h } from "./dom";
import { subscribe } from "./sse";
import { deadLetters } from "./views/deadletters";
import { evidence } from "./views/evidence";
import { inbox } from "./views/inbox";
import { reconciliations } from "./views/reconcile";
import { taskPage } from "./views/task";
import { tasks } from "./views/tasks";
import type { View } from "./views/view";

let current: View | null = null;

function route(main: HTMLElement): void {
  current?.close();
  const live = document.getElementById("live");
  if (live) live.textContent = ""; // what the last page announced does not follow to the next
  const hash = location.hash.replace(/^#/, "") || "/approvals";
  const [path = "", qs = ""] = hash.split("?");
  const parts = path.split("/").filter(Boolean);
  let nav = parts[0] ?? "approvals";
  if (parts[0] === "tasks" && parts[1]) {
    current = taskPage(main, parts[1]);
    document.title = `Task ${parts[1]} — BAP console`;
  } else if (parts[0] === "tasks") {
    current = tasks(main, new URLSearchParams(qs));
    document.title = "Tasks — BAP console";
  } else if (parts[0] === "reconciliation") {
    current = reconciliations(main);
    document.title = "Reconciliation — BAP console";
  } else if (parts[0] === "dead-letters") {
    current = deadLetters(main);
    document.title = "Dead letters — BAP console";
  } else if (parts[0] === "artifacts" && parts[1]) {
    current = evidence(main, parts[1]);
    nav = "tasks";
    document.title = `Evidence ${parts[1]} — BAP console`;
  } else {
    current = inbox(main);
    nav = "approvals";
    document.title = "Approvals — BAP console";
  }
  for (const a of document.querySelectorAll<HTMLAnchorElement>("[data-nav]")) {
    if (a.dataset["nav"] === nav) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function boot(): Promise<void> {
  const main = document.getElementById("main");
  if (!main) return;
  const cfg = (await (await fetch("/console/config", { headers: { Accept: "application/json" }, cache: "no-store" })).json()) as Config;
  const who = await signIn(cfg, main);
  if (!who) return;
  const whoEl = document.getElementById("who");
  if (whoEl) whoEl.replaceChildren("Signed in as ", h("strong", { id: "subject" }, who.subject), ` (${who.tenant})`);
  const out = document.getElementById("signout");
  if (out) {
    out.hidden = false;
    out.addEventListener("click", () => {
      const done = () => location.assign("/console/");
      if (cfg.profile === "local") void call("POST", "/console/logout").finally(done);
      else done(); // the token lived in this page's memory only
    });
  }
  subscribe((e) => current?.onEvent(e));
  window.addEventListener("hashchange", () => route(main));
  route(main);
  document.body.dataset["ready"] = "true";
}

void boot();
