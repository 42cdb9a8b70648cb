// Tests of the TypeScript SDK (built to dist/) against a fake node:http server.
import { test, before, after, beforeEach } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createHash } from "node:crypto";
import { Client, ProblemError, DigestMismatchError, EVENT_TYPES, Operations, isInterruptedCommandResponse } from "../dist/index.js";

let server;
let baseUrl;
let requests = [];
let replies = [];

function push(status, body, headers = {}) {
  replies.push({ status, body, headers });
}

function problem(status, code, extra = {}) {
  return [status, JSON.stringify({ type: `urn:bap:problem:${code}`, title: "T", status, detail: `detail of ${code}`, code }), { "content-type": "application/problem+json", ...extra }];
}

before(async () => {
  server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString("utf8") });
      const r = replies.shift() ?? { status: 200, body: "{}", headers: {} };
      const body = typeof r.body === "string" || Buffer.isBuffer(r.body) ? r.body : JSON.stringify(r.body);
      res.writeHead(r.status, { "content-type": "application/json", ...r.headers });
      res.end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

beforeEach(() => {
  requests = [];
  replies = [];
});

function client(opts = {}) {
  const c = new Client({ baseUrl, ...opts });
  c.backoff = () => 0;
  return c;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

test("mutating call generates a key and reuses it on retries", async () => {
  push(...problem(503, "overloaded", { "retry-after": "0" }));
  push(...problem(409, "idempotency_in_flight", { "retry-after": "0" }));
  push(200, { task: { task_id: "tsk_1" }, receipt: { receipt_id: "rcp_1" } }, { "idempotent-replayed": "true" });
  let info;
  const res = await client().cancelTask("tsk_1", { reason: "stop" }, { onResponse: (i) => (info = i) });
  assert.equal(res.task.task_id, "tsk_1");
  assert.equal(requests.length, 3);
  const key = requests[0].headers["idempotency-key"];
  assert.match(key, UUID);
  for (const r of requests) assert.equal(r.headers["idempotency-key"], key);
  assert.deepEqual({ status: info.status, replayed: info.replayed, attempts: info.attempts, key: info.idempotencyKey }, { status: 200, replayed: true, attempts: 3, key });
});

test("given key is sent; read-only calls send none", async () => {
  push(201, { task: {}, receipt: {} });
  const c = client();
  await c.createTask({ goal: "g", policy: { allowed_origins: [] } }, { idempotencyKey: "k-1" });
  await c.getTask("tsk_1", { idempotencyKey: "ignored" });
  assert.equal(requests[0].headers["idempotency-key"], "k-1");
  assert.equal(requests[1].headers["idempotency-key"], undefined);
  assert.equal(requests[1].method, "GET");
  assert.equal(requests[1].headers["content-type"], undefined);
});

test("body is sent verbatim", async () => {
  const body = { goal: "ünïcode ✓", policy: { allowed_origins: ["https://a.example"] }, extra_field: [1, null] };
  push(201, { task: {}, receipt: {} });
  await client().createTask(body);
  assert.equal(requests[0].url, "/bap/v1/tasks");
  assert.equal(requests[0].body, JSON.stringify(body));
  assert.equal(requests[0].headers["content-type"], "application/json");
  await client().closeTask("tsk_1");
  assert.equal(requests[1].body, "{}");
  assert.equal(requests[1].url, "/bap/v1/tasks/tsk_1/close");
});

test("a body always goes as application/json, whatever extra headers say", async () => {
  push(201, { task: {}, receipt: {} });
  push(201, { task: {}, receipt: {} });
  await client({ headers: { "Content-Type": "text/plain" } }).createTask({ goal: "g", policy: { allowed_origins: [] } });
  await client().createTask({ goal: "g", policy: { allowed_origins: [] } }, { headers: { "CONTENT-TYPE": "text/plain" } });
  for (const r of requests) assert.equal(r.headers["content-type"], "application/json");
});

test("problems become ProblemError", async () => {
  push(...problem(403, "origin_not_allowed"));
  await assert.rejects(client().navigate("bs_1", { url: "https://evil.example/" }), (e) => {
    assert.ok(e instanceof ProblemError);
    assert.equal(e.status, 403);
    assert.equal(e.code, "origin_not_allowed");
    assert.equal(e.detail, "detail of origin_not_allowed");
    assert.equal(e.type, "urn:bap:problem:origin_not_allowed");
    assert.equal(e.message, "bap: 403 origin_not_allowed: detail of origin_not_allowed");
    return true;
  });
  assert.equal(requests.length, 1);
  push(502, "<h1>bad gateway</h1>", { "content-type": "text/html" });
  await assert.rejects(client().getTask("tsk_1"), (e) => e instanceof ProblemError && e.status === 502 && e.code === undefined && e.body === "<h1>bad gateway</h1>");
});

test("retries are bounded and long Retry-After is not waited for", async () => {
  for (let i = 0; i < 3; i++) push(...problem(429, "rate_limited", { "retry-after": "0" }));
  await assert.rejects(client({ maxAttempts: 2 }).navigate("bs_1", { url: "https://a.example/" }), (e) => e.code === "rate_limited");
  assert.equal(requests.length, 2);
  replies = [];
  push(...problem(503, "overloaded", { "retry-after": "3600" }));
  await assert.rejects(client().getTask("tsk_1"), (e) => e.code === "overloaded");
  assert.equal(requests.length, 3);
  push(...problem(422, "idempotency_key_reused"));
  await assert.rejects(client().closeTask("tsk_1"), (e) => e.code === "idempotency_key_reused");
  assert.equal(requests.length, 4);
});

test("network errors are retried with the same key", async () => {
  let calls = 0;
  const keys = [];
  const flaky = async (url, init) => {
    calls++;
    keys.push(init.headers["idempotency-key"]);
    if (calls < 3) throw new TypeError("fetch failed");
    return fetch(url, init);
  };
  push(200, { session: { session_id: "bs_1" }, receipt: {} });
  const res = await client({ fetch: flaky }).closeBrowserSession("bs_1");
  assert.equal(res.session.session_id, "bs_1");
  assert.equal(calls, 3);
  assert.equal(new Set(keys).size, 1);
});

test("path escaping, query parameters and token", async () => {
  let n = 0;
  const c = client({ token: () => `tok${++n}` });
  push(200, { task: {} });
  await c.getTask("tsk_a/b c");
  push(200, { events: [], next_after: null });
  const page = await c.listTaskEvents("tsk_1", { after: 5, limit: 10 });
  await c.listTaskEvents("tsk_1");
  assert.equal(requests[0].url, "/bap/v1/tasks/tsk_a%2Fb%20c");
  assert.equal(requests[0].headers.authorization, "Bearer tok1");
  assert.equal(requests[1].url, "/bap/v1/tasks/tsk_1/events?after=5&limit=10");
  assert.deepEqual(page, { events: [], next_after: null });
  assert.equal(requests[2].url, "/bap/v1/tasks/tsk_1/events");
});

test("getArtifact returns bytes and checks Repr-Digest", async () => {
  const data = Buffer.from("\x89PNG fake bytes", "latin1");
  const sum = createHash("sha256").update(data).digest();
  push(200, data, { "content-type": "image/png", "repr-digest": `sha-256=:${sum.toString("base64")}:` });
  const blob = await client().getArtifact("art_1");
  assert.deepEqual(Buffer.from(blob.body), data);
  assert.equal(blob.mediaType, "image/png");
  assert.equal(blob.sha256, sum.toString("hex"));
  assert.equal(requests[0].headers.accept, "*/*");
  const other = createHash("sha256").update("other").digest("base64");
  push(200, data, { "content-type": "image/png", "repr-digest": `sha-256=:${other}:` });
  await assert.rejects(client().getArtifact("art_1"), DigestMismatchError);
});

test("abort signal stops the call", async () => {
  push(...problem(503, "overloaded", { "retry-after": "10" }));
  const ac = new AbortController();
  setTimeout(() => ac.abort(new Error("stop")), 20);
  await assert.rejects(client().getTask("tsk_1", { signal: ac.signal }), /stop/);
});

test("an interrupted replay is told from the result by isInterruptedCommandResponse", async () => {
  const receipt = (outcome) => ({ receipt_id: "rcp_1", command_id: "cmd_1", task_id: "tsk_1", operation: "act", outcome, issued_at: "2026-11-20T09:15:02Z" });
  const cases = [
    { name: "act interrupted", status: 200, body: { receipt: receipt("reconciliation_required") }, call: (c) => c.act("bs_1", { action: "click", node_id: "nd_1" }), interrupted: true },
    { name: "act result", status: 200, body: { receipt: receipt("applied"), epoch_id: "ep_1", navigated: false }, call: (c) => c.act("bs_1", { action: "click", node_id: "nd_1" }), interrupted: false },
    { name: "act held", status: 202, body: { approval: { approval_id: "apr_1" }, receipt: receipt("pending_approval") }, call: (c) => c.act("bs_1", { action: "click", node_id: "nd_1" }), interrupted: false },
    { name: "cancelTask interrupted", status: 200, body: { receipt: receipt("unknown_outcome") }, call: (c) => c.cancelTask("tsk_1"), interrupted: true },
    { name: "cancelTask result", status: 200, body: { task: { task_id: "tsk_1" }, receipt: receipt("applied") }, call: (c) => c.cancelTask("tsk_1"), interrupted: false },
    { name: "empty object", status: 200, body: {}, call: (c) => c.navigate("bs_1", { url: "https://a.example/" }), interrupted: false },
  ];
  for (const tc of cases) {
    push(tc.status, tc.body);
    const res = await tc.call(client());
    assert.equal(isInterruptedCommandResponse(res), tc.interrupted, tc.name);
    if (tc.interrupted) assert.equal(res.receipt.outcome, tc.body.receipt.outcome, tc.name);
  }
});

test("generated surface", () => {
  const methods = Object.getOwnPropertyNames(Operations.prototype).filter((n) => n !== "constructor");
  assert.equal(methods.length, 23);
  for (const m of ["createTask", "navigate", "queryNodes", "getArtifact", "listTaskEvents", "resolveApproval", "replayTask"]) assert.ok(methods.includes(m), m);
  assert.ok(EVENT_TYPES.includes("task.state_changed"));
});
