// The evidence viewer: one artifact (a screenshot, a DOM or AX snapshot, an upload) with its
// SHA-256, and Verify, which asks the server (verify_artifact) whether the stored bytes still
// match what was recorded when the artifact was captured.

import { ApiError, bytes, call, sha256, type VerifyResult } from "../api";
import { announce, facts, h, when } from "../dom";
import type { View } from "./view";

export function evidence(main: HTMLElement, artifactID: string): View {
  const body = h("div", {});
  const result = h("div", { id: "verify-result", role: "status" });
  const verify = h("button", { type: "button", class: "primary" }, "Verify");
  main.replaceChildren(h("h1", {}, "Evidence ", h("code", {}, artifactID)),
    h("p", { class: "muted" }, "Verify asks the server whether the stored bytes still match the SHA-256 recorded when this evidence was captured."),
    h("div", { class: "buttons" }, verify), result, body);
  let url = "";
  verify.addEventListener("click", () => {
    verify.disabled = true;
    call<VerifyResult>("POST", `/bap/v1/artifacts/${artifactID}/verify`, {})
      .then((v) => {
        const p = v.provenance;
        result.replaceChildren(h("div", { class: `result ${v.valid ? "ok" : "bad"}` },
          h("p", { class: "state" }, v.valid ? "Valid: the stored bytes match their recorded SHA-256." : "Invalid: the stored bytes do not match their recorded SHA-256."),
          facts([["Recorded SHA-256", h("code", {}, v.sha256)], ["Size", v.size !== undefined ? `${v.size} bytes` : ""],
            ["Task", typeof p["task_id"] === "string" ? h("a", { href: `#/tasks/${p["task_id"]}` }, p["task_id"]) : ""],
            ["Page", typeof p["url"] === "string" ? h("code", {}, p["url"]) : ""],
            ["Captured", typeof p["captured_at"] === "string" ? when(p["captured_at"]) : ""],
            ["Command", typeof p["command_id"] === "string" ? h("code", {}, p["command_id"]) : ""],
            ["Server version", typeof p["server_version"] === "string" ? p["server_version"] : ""]])));
        announce(v.valid ? "Verified: valid" : "Verified: invalid");
      })
      .catch((e: unknown) => {
        result.replaceChildren(h("p", { class: "result bad" }, e instanceof ApiError ? `${e.problem.detail} (${e.problem.code})` : String(e)));
      })
      .finally(() => (verify.disabled = false));
  });
  bytes(`/bap/v1/artifacts/${artifactID}`)
    .then(async (b) => {
      const digest = await sha256(b.data);
      const rows: Array<[string, Node | string]> = [["Media type", b.type], ["Size", `${b.data.byteLength} bytes`], ["SHA-256 of these bytes", h("code", { id: "sha256" }, digest)]];
      let view: Node;
      if (b.type.startsWith("image/")) {
        url = URL.createObjectURL(new Blob([b.data], { type: b.type }));
        view = h("img", { class: "shot", src: url, alt: `Evidence ${artifactID}` });
      } else {
        const text = new TextDecoder().decode(b.data.slice(0, 2_000_000));
        let shown = text;
        if (b.type.includes("json")) {
          try {
            shown = JSON.stringify(JSON.parse(text), null, 2);
          } catch {
            // shown as stored
          }
        }
        view = h("pre", { class: "snap", tabindex: "0", "aria-label": "Snapshot content" }, shown);
      }
      body.replaceChildren(h("div", { class: "card" }, facts(rows), view));
    })
    .catch((e: unknown) => body.replaceChildren(h("p", { class: "result bad" }, e instanceof ApiError ? `${e.problem.detail} (${e.problem.code})` : String(e))));
  return {
    onEvent() {},
    close() {
      if (url) URL.revokeObjectURL(url);
    },
  };
}
