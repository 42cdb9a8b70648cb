#!/usr/bin/env node
// Conformance runner for sdk-ts: runs every conformance/scenarios/*.json against a live server.
//
//	node conformance/runner_ts.mjs --base-url http://127.0.0.1:PORT --out DIR [--pages ORIGIN]
//
// Needs the built SDK (sdk-ts/dist/, built by scripts/test-sdks.sh or scripts/conformance.sh).
// Writes DIR/ts.json (normalized results, see conformance/README.md); exits 1 when a step fails.
import { readFileSync, readdirSync, writeFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";
import { spawnSync } from "node:child_process";
import { Client, ProblemError } from "../sdk-ts/dist/index.js";

const LANG = "ts";
const root = dirname(dirname(fileURLToPath(import.meta.url)));

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (dflt === undefined) throw new Error(`missing ${name}`);
  return dflt;
}

async function call(client, op, args, key) {
  const o = key === null ? undefined : { idempotencyKey: key };
  const b = args.body;
  switch (op) {
    case "create_task": return client.createTask(b, o);
    case "get_task": return client.getTask(args.task_id);
    case "list_task_events": return client.listTaskEvents(args.task_id, { after: args.after, limit: args.limit });
    case "cancel_task": return client.cancelTask(args.task_id, b, o);
    case "resume_task": return client.resumeTask(args.task_id, b, o);
    case "close_task": return client.closeTask(args.task_id, b, o);
    case "create_browser_session": return client.createBrowserSession(args.task_id, b, o);
    case "checkpoint_browser_session": return client.checkpointBrowserSession(args.session_id, b, o);
    case "close_browser_session": return client.closeBrowserSession(args.session_id, b, o);
    case "navigate": return client.navigate(args.session_id, b, o);
    case "observe": return client.observe(args.session_id, b);
    case "query_nodes": return client.queryNodes(args.session_id, b);
    case "act": return client.act(args.session_id, b, o);
    case "extract": return client.extract(args.session_id, b);
    case "capture_evidence": return client.captureEvidence(args.session_id, b, o);
    case "request_approval": return client.requestApproval(args.task_id, b, o);
    case "resolve_approval": return client.resolveApproval(args.approval_id, b, o);
    case "get_artifact": {
      // The runner-neutral document of get_artifact (conformance/README.md).
      const blob = await client.getArtifact(args.artifact_id);
      return { media_type: blob.mediaType, sha256: blob.sha256, size: blob.body.length };
    }
    case "get_task_audit": return client.getTaskAudit(args.task_id);
    case "get_task_bundle": {
      // The bytes ride along, hidden from the document, for verify_bundle.
      const blob = await client.getTaskBundle(args.task_id);
      const doc = { media_type: blob.mediaType, sha256: blob.sha256, size: blob.body.length };
      Object.defineProperty(doc, "body", { value: blob.body, enumerable: false });
      return doc;
    }
    case "replay_task": return client.replayTask(args.task_id, b, o);
    case "verify_artifact": return client.verifyArtifact(args.artifact_id, b);
    default: throw new Error(`unknown op ${op}`);
  }
}

// A step the local operator takes (conformance/README.md "Who takes a step"): `bap approvals
// approve|deny` over the server's Unix socket; stdout is the answer, or the problem (exit 1).
function operatorCall(op, args, key) {
  const b = args.body ?? {};
  if (op !== "resolve_approval" || !["approve", "deny"].includes(b.decision) || !args.approval_id) {
    throw new Error(`the operator takes only resolve_approval steps with a decision, not ${op}`);
  }
  const argv = ["approvals", b.decision, args.approval_id, "--socket", process.env.CONFORMANCE_SOCKET];
  if ("reason" in b) argv.push("--reason", b.reason);
  if (key !== null) argv.push("--idempotency-key", key);
  const p = spawnSync(process.env.CONFORMANCE_BAP, argv, { encoding: "utf8" });
  let doc = null;
  try { doc = JSON.parse(p.stdout); } catch { doc = null; }
  if (p.status === 0) return { status: "ok", code: null, doc };
  if (doc && typeof doc.status === "number") return { status: doc.status, code: doc.code ?? null, doc };
  throw new Error(`bap approvals ${b.decision}: ${(p.stderr ?? String(p.error)).trim()}`);
}

// The auditor's check of a bundle (conformance/README.md "verify_bundle"): `bap bundle verify FILE
// --jwks BASE/bap/v1/audit/keys` on the bytes this runner's client got; stdout is the report.
function verifyBundle(body) {
  const dir = mkdtempSync(join(tmpdir(), "conformance-bundle-"));
  try {
    const file = join(dir, "bundle.tar");
    writeFileSync(file, body);
    const p = spawnSync(process.env.CONFORMANCE_BAP, ["bundle", "verify", file, "--jwks", `${baseUrl}/bap/v1/audit/keys`], { encoding: "utf8" });
    let report = null;
    try { report = JSON.parse(p.stdout); } catch { report = null; }
    if (report === null || typeof report !== "object" || !("valid" in report)) {
      throw new Error(`bap bundle verify: ${(p.stderr ?? String(p.error)).trim()}`);
    }
    return report;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// `until`: every pointer holds its value (substituted, normalized).
function holds(doc, until, vars, pages) {
  for (const [p, want] of Object.entries(until)) {
    let w;
    try { w = subst(want, vars); } catch { return false; }
    if (!same(normalize(pointer(doc, p), vars, pages), normalize(w, vars, pages))) return false;
  }
  return true;
}

const UNTIL_TIMEOUT_MS = 60000, UNTIL_PAUSE_MS = 200;

// RFC 6901; a missing member answers null.
function pointer(doc, ptr) {
  if (ptr === "") return doc;
  let cur = doc;
  for (let tok of ptr.slice(1).split("/")) {
    tok = tok.replaceAll("~1", "/").replaceAll("~0", "~");
    if (cur !== null && typeof cur === "object" && !Array.isArray(cur) && Object.hasOwn(cur, tok)) cur = cur[tok];
    else if (Array.isArray(cur) && /^[0-9]+$/.test(tok) && Number(tok) < cur.length) cur = cur[Number(tok)];
    else return null;
  }
  return cur === undefined ? null : cur;
}

function subst(v, vars) {
  if (typeof v === "string" && v.startsWith("$")) {
    if (Object.hasOwn(vars, v.slice(1))) return vars[v.slice(1)];
    throw new Error(`unset variable ${v}`);
  }
  if (Array.isArray(v)) return v.map((x) => subst(x, vars));
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, subst(x, vars)]));
  return v;
}

const PAGES = "${PAGES}";
const ID_RE = /^(tsk|bs|ctx|ep|nd|apr|art|chk|cmd|rcp|evt|rec)_[A-Za-z0-9_-]+$/;
const HEX_RE = /^[0-9a-f]{64}$/;
const TIME_RE = /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$/;

// A saved variable's value → "$name" (names sorted); else an opaque id → "<id:prefix>", a SHA-256
// hex digest → "<sha256>", an RFC 3339 time → "<time>"; else the pages origin → "${PAGES}".
function normalize(v, vars, pages) {
  if (typeof v === "string") {
    for (const name of Object.keys(vars).sort()) if (vars[name] === v) return "$" + name;
    const m = ID_RE.exec(v);
    if (m) return `<id:${m[1]}>`;
    if (HEX_RE.test(v)) return "<sha256>";
    if (TIME_RE.test(v)) return "<time>";
    return pages ? v.replaceAll(pages, PAGES) : v;
  }
  if (Array.isArray(v)) return v.map((x) => normalize(x, vars, pages));
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalize(x, vars, pages)]));
  return v;
}

// Sorted keys, so the output and comparisons do not depend on insertion order.
function canon(v) {
  if (Array.isArray(v)) return v.map(canon);
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
  }
  return v === undefined ? null : v;
}
const same = (a, b) => JSON.stringify(canon(a)) === JSON.stringify(canon(b));

async function runScenario(client, sc, nonce, pages, errors) {
  const vars = {};
  const steps = [];
  let ok = true;
  for (const [i, step] of sc.steps.entries()) {
    const exp = step.expect;
    const key = "key" in step ? `conf-${LANG}-${nonce}-${sc.name}-${step.key}` : null;
    let status = "ok", code = null, doc = {};
    try {
      if (step.as === "operator") {
        ({ status, code, doc } = operatorCall(step.op, subst(step.args ?? {}, vars), key));
      } else if (step.until) {
        const deadline = Date.now() + UNTIL_TIMEOUT_MS;
        doc = await call(client, step.op, subst(step.args ?? {}, vars), key);
        while (!holds(doc, step.until, vars, pages) && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, UNTIL_PAUSE_MS));
          doc = await call(client, step.op, subst(step.args ?? {}, vars), key);
        }
      } else {
        doc = await call(client, step.op, subst(step.args ?? {}, vars), key);
      }
      if (step.verify_bundle) doc.verified = verifyBundle(doc.body);
    } catch (e) {
      if (e instanceof ProblemError) {
        status = e.status; code = e.code ?? null; doc = e.problem ?? {};
      } else {
        status = "error";
        errors.push(`${sc.name} step ${i + 1}: ${e}`);
      }
    }
    const raw = {};
    for (const p of Object.keys(exp.fields ?? {})) raw[p] = pointer(doc, p);
    const fields = normalize(raw, vars, pages);
    let passed = status === exp.status && code === (exp.code ?? null);
    for (const [p, want] of Object.entries(exp.fields ?? {})) {
      let w;
      try { w = subst(want, vars); } catch { passed = false; continue; }
      if (!same(fields[p], normalize(w, vars, pages))) passed = false;
    }
    if (!passed) {
      errors.push(`${sc.name} step ${i + 1} (${step.op}): got status=${status} code=${code} fields=${JSON.stringify(fields)}; want ${JSON.stringify(exp)}`);
    }
    // Saved after the checks: a step compares with what earlier steps saved.
    for (const [name, ptr] of Object.entries(step.save ?? {})) {
      const v = pointer(doc, ptr);
      if (v !== null) vars[name] = v;
    }
    ok &&= passed;
    steps.push({ op: step.op, status, code, fields, pass: passed });
    if (status === "error") break;
  }
  return { name: sc.name, pass: ok, steps };
}

const baseUrl = arg("--base-url");
const out = arg("--out");
const dir = arg("--scenarios", join(root, "conformance", "scenarios"));
const pages = arg("--pages", process.env.CONFORMANCE_PAGES ?? "").replace(/\/+$/, "");
const client = new Client({ baseUrl });
const nonce = process.env.CONFORMANCE_RUN || randomUUID().replaceAll("-", "").slice(0, 12);
const errors = [];
const results = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
  let text = readFileSync(join(dir, f), "utf8");
  if (text.includes(PAGES)) {
    if (!pages) {
      console.error(`conformance[${LANG}]: ${f} uses ${PAGES}: pass --pages or set CONFORMANCE_PAGES`);
      process.exit(2);
    }
    text = text.replaceAll(PAGES, pages);
  }
  results.push(await runScenario(client, JSON.parse(text), nonce, pages, errors));
}
mkdirSync(out, { recursive: true });
writeFileSync(join(out, `${LANG}.json`), JSON.stringify(canon({ scenarios: results }), null, 2) + "\n");
for (const e of errors) console.error(`conformance[${LANG}]: FAIL ${e}`);
console.error(`conformance[${LANG}]: ${results.filter((r) => r.pass).length}/${results.length} scenarios pass`);
process.exit(errors.length ? 1 : 0);
