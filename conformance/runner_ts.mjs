#!/usr/bin/env node
// Conformance runner for sdk-ts: runs every conformance/scenarios/*.json against a live server.
//
//	node conformance/runner_ts.mjs --base-url http://127.0.0.1:PORT --out DIR
//
// Needs the built SDK (sdk-ts/dist/, built by scripts/test-sdks.sh or scripts/conformance.sh).
// Writes DIR/ts.json (normalized results, see conformance/README.md); exits 1 when a step fails.
import { readFileSync, readdirSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomUUID } from "node:crypto";
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
  switch (op) {
    case "create_task": return client.createTask(args.body, o);
    case "get_task": return client.getTask(args.task_id);
    case "cancel_task": return client.cancelTask(args.task_id, args.body, o);
    case "close_task": return client.closeTask(args.task_id, args.body, o);
    case "request_approval": return client.requestApproval(args.task_id, args.body, o);
    case "resolve_approval": return client.resolveApproval(args.approval_id, args.body, o);
    case "list_task_events": return client.listTaskEvents(args.task_id, { after: args.after, limit: args.limit });
    default: throw new Error(`unknown op ${op}`);
  }
}

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

function normalize(v, vars) {
  if (typeof v === "string") {
    for (const name of Object.keys(vars).sort()) if (vars[name] === v) return "$" + name;
    return v;
  }
  if (Array.isArray(v)) return v.map((x) => normalize(x, vars));
  if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalize(x, vars)]));
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

async function runScenario(client, sc, nonce, errors) {
  const vars = {};
  const steps = [];
  let ok = true;
  for (const [i, step] of sc.steps.entries()) {
    const exp = step.expect;
    const key = "key" in step ? `conf-${LANG}-${nonce}-${sc.name}-${step.key}` : null;
    let status = "ok", code = null, doc = {};
    try {
      doc = await call(client, step.op, subst(step.args ?? {}, vars), key);
    } catch (e) {
      if (e instanceof ProblemError) {
        status = e.status; code = e.code ?? null; doc = e.problem ?? {};
      } else {
        status = "error";
        errors.push(`${sc.name} step ${i + 1}: ${e}`);
      }
    }
    for (const [name, ptr] of Object.entries(step.save ?? {})) {
      const v = pointer(doc, ptr);
      if (v !== null) vars[name] = v;
    }
    const fields = {};
    for (const p of Object.keys(exp.fields ?? {})) fields[p] = pointer(doc, p);
    let passed = status === exp.status && code === (exp.code ?? null);
    for (const [p, want] of Object.entries(exp.fields ?? {})) {
      let w;
      try { w = subst(want, vars); } catch { passed = false; continue; }
      if (!same(fields[p], w)) passed = false;
    }
    if (!passed) {
      errors.push(`${sc.name} step ${i + 1} (${step.op}): got status=${status} code=${code} fields=${JSON.stringify(fields)}; want ${JSON.stringify(exp)}`);
    }
    ok &&= passed;
    steps.push({ op: step.op, status, code, fields: normalize(fields, vars), pass: passed });
    if (status === "error") break;
  }
  return { name: sc.name, pass: ok, steps };
}

const baseUrl = arg("--base-url");
const out = arg("--out");
const dir = arg("--scenarios", join(root, "conformance", "scenarios"));
const client = new Client({ baseUrl });
const nonce = process.env.CONFORMANCE_RUN || randomUUID().replaceAll("-", "").slice(0, 12);
const errors = [];
const results = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".json")).sort()) {
  results.push(await runScenario(client, JSON.parse(readFileSync(join(dir, f), "utf8")), nonce, errors));
}
mkdirSync(out, { recursive: true });
writeFileSync(join(out, `${LANG}.json`), JSON.stringify(canon({ scenarios: results }), null, 2) + "\n");
for (const e of errors) console.error(`conformance[${LANG}]: FAIL ${e}`);
console.error(`conformance[${LANG}]: ${results.filter((r) => r.pass).length}/${results.length} scenarios pass`);
process.exit(errors.length ? 1 : 0);
