// Tests of the SDK's resuming event subscriptions against a fake SSE server (node:http).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Client, ProblemError } from "../dist/index.js";

let server;
let baseUrl;
let script = [];
let lastIds = [];

before(async () => {
  server = http.createServer((req, res) => {
    lastIds.push(req.headers["last-event-id"] ?? "");
    const step = script.shift();
    if (!step) {
      res.writeHead(503, { "content-type": "application/problem+json", "retry-after": "0" });
      res.end(JSON.stringify({ status: 503, code: "overloaded" }));
      return;
    }
    step(res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

function sse(...chunks) {
  return (res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (const c of chunks) res.write(c);
    res.end();
  };
}

function ev(seq, cursor) {
  const id = cursor ?? String(seq);
  const body = { event_id: `evt_${seq}`, task_id: "tsk_a", seq, type: "task.state_changed", time: "2026-11-29T12:00:00Z", data: {} };
  if (cursor) body.cursor = cursor;
  return `id: ${id}\nevent: task.state_changed\ndata: ${JSON.stringify(body)}\n\n`;
}

function client() {
  const c = new Client({ baseUrl });
  c.backoff = () => 0;
  return c;
}

test("subscribe resumes with the last seq and drops repeats", async () => {
  lastIds = [];
  script = [
    sse("retry: 1000\n: stream open\n\n", ev(1), ev(2)),
    (res) => {
      res.writeHead(503, { "content-type": "application/problem+json", "retry-after": "0" });
      res.end(JSON.stringify({ status: 503, code: "overloaded" }));
    },
    // split inside a line: the parser must join chunks
    sse(ev(2), ": keep-alive\n\n", ev(3).slice(0, 20), ev(3).slice(20), ev(4)),
  ];
  const seqs = [];
  for await (const e of client().subscribe("tsk_a")) {
    seqs.push(e.seq);
    if (e.seq === 4) break;
  }
  assert.deepEqual(seqs, [1, 2, 3, 4]);
  assert.deepEqual(lastIds, ["0", "2", "2"]);
});

test("subscribe throws a problem a reconnect cannot fix", async () => {
  lastIds = [];
  script = [
    (res) => {
      res.writeHead(404, { "content-type": "application/problem+json" });
      res.end(JSON.stringify({ status: 404, code: "not_found", detail: "no such task" }));
    },
  ];
  await assert.rejects(
    (async () => {
      for await (const _ of client().subscribe("tsk_gone", { after: 3 })) {
        assert.fail("no event expected");
      }
    })(),
    (err) => err instanceof ProblemError && err.code === "not_found",
  );
  assert.deepEqual(lastIds, ["3"]);
});

test("subscribeAll keeps the announced start cursor and ends on abort", async () => {
  lastIds = [];
  script = [sse("retry: 1000\nid: c1.a.0.0\n: stream open\n\n"), sse(ev(1, "c1.b.1.1"))];
  const ac = new AbortController();
  const got = [];
  for await (const e of client().subscribeAll({ signal: ac.signal })) {
    got.push(e.cursor);
    ac.abort();
  }
  assert.deepEqual(got, ["c1.b.1.1"]);
  assert.deepEqual(lastIds, ["", "c1.a.0.0"]);
});
