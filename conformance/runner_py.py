#!/usr/bin/env python3
"""Conformance runner for sdk-py: runs every conformance/scenarios/*.json against a live server.

    python3 conformance/runner_py.py --base-url http://127.0.0.1:PORT --out DIR [--pages ORIGIN]

Writes DIR/py.json (normalized results, see conformance/README.md); exits 1 when a step fails.
Uses only the standard library and sdk-py from this repository (by path).
"""
import argparse
import glob
import json
import os
import re
import dataclasses
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sdk-py"))
import bap  # noqa: E402

LANG = "py"
UNTIL_TIMEOUT_S, UNTIL_PAUSE_S = 60.0, 0.2


class BinaryDoc(dict):
    """A binary answer's runner-neutral document, with the bytes (for verify_bundle)."""

    def __init__(self, doc: dict, body: bytes) -> None:
        super().__init__(doc)
        self.body = body


def call(client, op, args, key):
    kw = {} if key is None else {"idempotency_key": key}
    body = args.get("body")
    if op == "create_task":
        return client.create_task(body, **kw)
    if op == "get_task":
        return client.get_task(args["task_id"])
    if op == "list_task_events":
        return client.list_task_events(args["task_id"], after=args.get("after"), limit=args.get("limit"))
    if op == "cancel_task":
        return client.cancel_task(args["task_id"], body, **kw)
    if op == "resume_task":
        return client.resume_task(args["task_id"], body, **kw)
    if op == "close_task":
        return client.close_task(args["task_id"], body, **kw)
    if op == "create_browser_session":
        return client.create_browser_session(args["task_id"], body, **kw)
    if op == "checkpoint_browser_session":
        return client.checkpoint_browser_session(args["session_id"], body, **kw)
    if op == "close_browser_session":
        return client.close_browser_session(args["session_id"], body, **kw)
    if op == "navigate":
        return client.navigate(args["session_id"], body, **kw)
    if op == "observe":
        return client.observe(args["session_id"], body)
    if op == "query_nodes":
        return client.query_nodes(args["session_id"], body)
    if op == "act":
        return client.act(args["session_id"], body, **kw)
    if op == "extract":
        return client.extract(args["session_id"], body)
    if op == "capture_evidence":
        return client.capture_evidence(args["session_id"], body, **kw)
    if op == "request_approval":
        return client.request_approval(args["task_id"], body, **kw)
    if op == "resolve_approval":
        return client.resolve_approval(args["approval_id"], body, **kw)
    if op == "get_artifact":
        # The runner-neutral document of get_artifact (conformance/README.md).
        blob = client.get_artifact(args["artifact_id"])
        return {"media_type": blob.media_type, "sha256": blob.sha256, "size": len(blob.body)}
    if op == "get_task_audit":
        return client.get_task_audit(args["task_id"])
    if op == "get_task_bundle":
        blob = client.get_task_bundle(args["task_id"])
        return BinaryDoc({"media_type": blob.media_type, "sha256": blob.sha256, "size": len(blob.body)}, blob.body)
    if op == "replay_task":
        return client.replay_task(args["task_id"], body, **kw)
    if op == "verify_artifact":
        return client.verify_artifact(args["artifact_id"], body)
    raise ValueError("unknown op " + op)


def operator_call(op, args, key):
    """A step the local operator takes (conformance/README.md "Who takes a step"): `bap approvals
    approve|deny` over the server's Unix socket; stdout is the answer, or the problem (exit 1)."""
    body = args.get("body") or {}
    decision = body.get("decision")
    if op != "resolve_approval" or decision not in ("approve", "deny") or not args.get("approval_id"):
        raise ValueError("the operator takes only resolve_approval steps with a decision, not " + op)
    argv = [os.environ["CONFORMANCE_BAP"], "approvals", decision, args["approval_id"],
            "--socket", os.environ["CONFORMANCE_SOCKET"]]
    if "reason" in body:
        argv += ["--reason", body["reason"]]
    if key is not None:
        argv += ["--idempotency-key", key]
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = None
    if p.returncode == 0:
        return "ok", None, doc
    if isinstance(doc, dict) and isinstance(doc.get("status"), int):
        return doc["status"], doc.get("code"), doc
    raise RuntimeError("bap approvals %s: %s" % (decision, p.stderr.strip()))


def verify_bundle(base_url, body):
    """The auditor's check of a bundle (conformance/README.md "verify_bundle"): `bap bundle verify
    FILE --jwks BASE/bap/v1/audit/keys` on the bytes this runner's client got; stdout is the report."""
    with tempfile.TemporaryDirectory(prefix="conformance-bundle-") as d:
        path = os.path.join(d, "bundle.tar")
        with open(path, "wb") as f:
            f.write(body)
        p = subprocess.run([os.environ["CONFORMANCE_BAP"], "bundle", "verify", path, "--jwks",
                            base_url.rstrip("/") + "/bap/v1/audit/keys"], capture_output=True, text=True, check=False)
    try:
        report = json.loads(p.stdout)
    except ValueError:
        report = None
    if not isinstance(report, dict) or "valid" not in report:
        raise RuntimeError("bap bundle verify: " + p.stderr.strip())
    return report


def plain(doc):
    """A typed answer (a dataclass) as plain JSON values."""
    return dataclasses.asdict(doc) if dataclasses.is_dataclass(doc) and not isinstance(doc, type) else doc


def holds(doc, until, vars_, pages):
    """`until`: every pointer holds its value (substituted, normalized)."""
    for p, want in until.items():
        try:
            want = subst(want, vars_)
        except KeyError:
            return False
        if not same(normalize(pointer(plain(doc), p), vars_, pages), normalize(want, vars_, pages)):
            return False
    return True


def pointer(doc, ptr):
    """RFC 6901; a missing member answers None (recorded as null)."""
    if ptr == "":
        return doc
    cur = doc
    for tok in ptr[1:].split("/"):
        tok = tok.replace("~1", "/").replace("~0", "~")
        if isinstance(cur, dict) and tok in cur:
            cur = cur[tok]
        elif isinstance(cur, list) and tok.isdigit() and int(tok) < len(cur):
            cur = cur[int(tok)]
        else:
            return None
    return cur


def subst(v, vars_):
    if isinstance(v, str) and v.startswith("$") and v[1:] in vars_:
        return vars_[v[1:]]
    if isinstance(v, str) and v.startswith("$"):
        raise KeyError("unset variable " + v)
    if isinstance(v, dict):
        return {k: subst(x, vars_) for k, x in v.items()}
    if isinstance(v, list):
        return [subst(x, vars_) for x in v]
    return v


PAGES = "${PAGES}"
ID_RE = re.compile(r"^(tsk|bs|ctx|ep|nd|apr|art|chk|cmd|rcp|evt|rec)_[A-Za-z0-9_-]+$")
HEX_RE = re.compile(r"^[0-9a-f]{64}$")
TIME_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$")


def normalize(v, vars_, pages):
    """A saved variable's value -> "$name" (names sorted); else an opaque id -> "<id:prefix>", a
    SHA-256 hex digest -> "<sha256>", an RFC 3339 time -> "<time>"; else the pages origin ->
    "${PAGES}"."""
    if isinstance(v, str):
        for name in sorted(vars_):
            if isinstance(vars_[name], str) and vars_[name] == v:
                return "$" + name
        m = ID_RE.fullmatch(v)
        if m:
            return "<id:%s>" % m.group(1)
        if HEX_RE.fullmatch(v):
            return "<sha256>"
        if TIME_RE.fullmatch(v):
            return "<time>"
        return v.replace(pages, PAGES) if pages else v
    if isinstance(v, dict):
        return {k: normalize(x, vars_, pages) for k, x in v.items()}
    if isinstance(v, list):
        return [normalize(x, vars_, pages) for x in v]
    return v


def same(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def run_scenario(client, base_url, sc, nonce, pages, errors):
    vars_ = {}
    steps = []
    ok = True
    for i, step in enumerate(sc["steps"]):
        exp = step["expect"]
        key = None
        if "key" in step:
            key = "conf-%s-%s-%s-%s" % (LANG, nonce, sc["name"], step["key"])
        status, code, doc = "ok", None, {}
        try:
            if step.get("as") == "operator":
                status, code, doc = operator_call(step["op"], subst(step.get("args", {}), vars_), key)
            elif step.get("until"):
                deadline = time.monotonic() + UNTIL_TIMEOUT_S
                doc = call(client, step["op"], subst(step.get("args", {}), vars_), key)
                while not holds(doc, step["until"], vars_, pages) and time.monotonic() < deadline:
                    time.sleep(UNTIL_PAUSE_S)
                    doc = call(client, step["op"], subst(step.get("args", {}), vars_), key)
            else:
                doc = call(client, step["op"], subst(step.get("args", {}), vars_), key)
            if step.get("verify_bundle"):
                doc = dict(doc, verified=verify_bundle(base_url, doc.body))
        except bap.ProblemError as e:
            status, code, doc = e.status, e.code, e.problem or {}
        except Exception as e:  # transport or runner error
            status, code, doc = "error", None, {}
            errors.append("%s step %d: %r" % (sc["name"], i + 1, e))
        doc = plain(doc)
        fields = normalize({p: pointer(doc, p) for p in exp.get("fields", {})}, vars_, pages)
        passed = same(status, exp["status"]) and code == exp.get("code")
        for p, want in exp.get("fields", {}).items():
            try:
                want = subst(want, vars_)
            except KeyError:
                passed = False
                continue
            if not same(fields[p], normalize(want, vars_, pages)):
                passed = False
        if not passed:
            errors.append("%s step %d (%s): got status=%s code=%s fields=%s; want %s" % (
                sc["name"], i + 1, step["op"], status, code, json.dumps(fields), json.dumps(exp)))
        # Saved after the checks: a step compares with what earlier steps saved.
        for name, ptr in step.get("save", {}).items():
            v = pointer(doc, ptr)
            if v is not None:
                vars_[name] = v
        ok = ok and passed
        steps.append({"op": step["op"], "status": status, "code": code,
                      "fields": fields, "pass": passed})
        if status == "error":
            break
    return {"name": sc["name"], "pass": ok, "steps": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenarios", default=os.path.join(ROOT, "conformance", "scenarios"))
    ap.add_argument("--pages", default=os.environ.get("CONFORMANCE_PAGES", ""))
    a = ap.parse_args()
    pages = a.pages.rstrip("/")
    client = bap.Client(a.base_url)
    nonce = os.environ.get("CONFORMANCE_RUN") or uuid.uuid4().hex[:12]
    errors = []
    results = []
    for path in sorted(glob.glob(os.path.join(a.scenarios, "*.json"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if PAGES in text:
            if not pages:
                print("conformance[%s]: %s uses %s: pass --pages or set CONFORMANCE_PAGES" % (LANG, path, PAGES), file=sys.stderr)
                sys.exit(2)
            text = text.replace(PAGES, pages)
        results.append(run_scenario(client, a.base_url, json.loads(text), nonce, pages, errors))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, LANG + ".json"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"scenarios": results}, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    for e in errors:
        print("conformance[%s]: FAIL %s" % (LANG, e), file=sys.stderr)
    passed = sum(1 for r in results if r["pass"])
    print("conformance[%s]: %d/%d scenarios pass" % (LANG, passed, len(results)), file=sys.stderr)
    sys.exit(0 if not errors else 1)


if __name__ == "__main__":
    main()
