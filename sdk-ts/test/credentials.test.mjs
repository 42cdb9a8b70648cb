// Tests of the client credentials option (built SDK, dist/) against a fake token endpoint and API.
import { test, before, after, beforeEach } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { Client, ClientCredentials, ProblemError, TokenError } from "../dist/index.js";

let server;
let baseUrl;
let issued;
let forms;
let revoked;
let lifetime;

before(async () => {
  server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      if (req.method === "POST" && req.url === "/oauth2/token") {
        const [id, secret] = Buffer.from((req.headers.authorization ?? "").replace(/^Basic /, ""), "base64").toString().split(":");
        res.setHeader("content-type", "application/json");
        if (decodeURIComponent(id) !== "cli_1" || decodeURIComponent(secret ?? "") !== "s3cret/+") {
          res.writeHead(401).end(JSON.stringify({ error: "invalid_client", error_description: "client authentication failed" }));
          return;
        }
        forms.push(Object.fromEntries(new URLSearchParams(body)));
        issued++;
        res.writeHead(200).end(JSON.stringify({ access_token: `tok-${issued}`, token_type: "bearer", expires_in: lifetime }));
        return;
      }
      const token = (req.headers.authorization ?? "").replace(/^Bearer /, "");
      if (!token || revoked.has(token)) {
        res.writeHead(401, { "content-type": "application/problem+json" });
        res.end(JSON.stringify({ type: "urn:bap:problem:unauthenticated", title: "Unauthenticated", status: 401, detail: "no valid token", code: "unauthenticated" }));
        return;
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ task: { task_id: "tsk_1", state: "admitted", goal: token } }));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((resolve) => server.close(resolve)));

beforeEach(() => {
  issued = 0;
  forms = [];
  revoked = new Set();
  lifetime = 900;
});

test("clientCredentials: token cached until near expiry, renewed, and refreshed after a 401", async () => {
  let now = Date.UTC(2026, 10, 20, 9);
  const client = new Client({
    baseUrl,
    clientCredentials: { tokenUrl: `${baseUrl}/oauth2/token`, clientId: "cli_1", clientSecret: "s3cret/+", resource: baseUrl, scope: ["bap:tasks.read", "bap:tasks.write"], now: () => now },
  });
  const goal = async () => (await client.getTask("tsk_1")).task.goal;
  const [a, b] = await Promise.all([goal(), goal()]);
  assert.deepEqual([a, b], ["tok-1", "tok-1"], "concurrent calls share one token request");
  now += 869_000; // 900 s lifetime, renewed 30 s early
  assert.equal(await goal(), "tok-1");
  now += 2_000;
  assert.equal(await goal(), "tok-2");
  assert.deepEqual(forms[0], { grant_type: "client_credentials", resource: baseUrl, scope: "bap:tasks.read bap:tasks.write" });
  revoked.add("tok-2");
  assert.equal(await goal(), "tok-3", "a 401 drops the cached token and retries once");
  revoked.add("tok-3").add("tok-4");
  await assert.rejects(client.getTask("tsk_1"), (e) => e instanceof ProblemError && e.status === 401 && e.code === "unauthenticated");
  assert.equal(issued, 4);
});

test("clientCredentials: token endpoint errors are TokenError without the secret", async () => {
  const client = new Client({ baseUrl, maxAttempts: 1, clientCredentials: { tokenUrl: `${baseUrl}/oauth2/token`, clientId: "cli_1", clientSecret: "wrong" } });
  await assert.rejects(client.getTask("tsk_1"), (e) => {
    assert.ok(e instanceof TokenError);
    assert.equal(e.status, 401);
    assert.equal(e.code, "invalid_client");
    assert.ok(!e.message.includes("wrong"));
    return true;
  });
});

test("ClientCredentials works on its own", async () => {
  lifetime = 1;
  const cc = new ClientCredentials({ tokenUrl: `${baseUrl}/oauth2/token`, clientId: "cli_1", clientSecret: "s3cret/+" });
  assert.equal(await cc.token(), "tok-1");
  assert.equal(await cc.token(), "tok-1");
  cc.invalidate();
  assert.equal(await cc.token(), "tok-2");
  assert.deepEqual(forms[0], { grant_type: "client_credentials" });
});
