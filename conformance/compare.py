#!/usr/bin/env python3
"""Judges the result files of one conformance run (see conformance/README.md).

    python3 conformance/compare.py [--baseline conformance/baseline] OUTDIR go ts py mcp ...

Fails (exit 1) unless
  - every named runner wrote OUTDIR/<runner>.json with the same scenarios;
  - the files are byte-identical (scenarios baselined for one runner only are left out of the
    comparison of that runner's file, which is then compared scenario by scenario);
  - every scenario passed in every runner, except those the baseline lists as known failures;
  - every baseline entry still fails ("stale baseline": a listed fixture that passes, or that
    no longer exists, must be removed from the baseline).

Baseline lines: `<scenario>[@<runner>] <reason>`; `#` starts a comment. Without `@<runner>` the
entry applies to every runner. Stdlib only.
"""
import argparse
import json
import os
import sys


def load_baseline(path):
    entries = {}  # (scenario, runner or None) -> reason
    if not path or not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 1)
            if len(parts) < 2:
                sys.exit("%s:%d: a baseline entry needs a reason: %r" % (path, n, line))
            name, reason = parts
            runner = None
            if "@" in name:
                name, runner = name.split("@", 1)
            entries[(name, runner)] = reason
    return entries


def canon(v):
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline"))
    ap.add_argument("out")
    ap.add_argument("runners", nargs="+")
    a = ap.parse_args()
    baseline = load_baseline(a.baseline)
    problems = []
    results = {}
    raw = {}
    for r in a.runners:
        path = os.path.join(a.out, r + ".json")
        try:
            with open(path, "rb") as f:
                raw[r] = f.read()
            results[r] = {s["name"]: s for s in json.loads(raw[r])["scenarios"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append("%s: no usable result file (%s)" % (path, e))
    if not results:
        print("\n".join("conformance: " + p for p in problems), file=sys.stderr)
        return 1

    ref = a.runners[0] if a.runners[0] in results else next(iter(results))
    names = list(results[ref])
    known = set(names)

    def listed(name, runner):
        return (name, None) in baseline or (name, runner) in baseline

    # Pass/fail against the baseline.
    tolerated = 0
    for r, scs in results.items():
        if list(scs) != names:
            problems.append("%s.json: scenarios %s, %s.json: %s" % (r, list(scs), ref, names))
        for name, sc in scs.items():
            if sc.get("pass"):
                if listed(name, r):
                    problems.append("stale baseline: %s passes in %s; remove it from the baseline" % (name, r))
            elif listed(name, r):
                tolerated += 1
            else:
                failed = [i + 1 for i, st in enumerate(sc.get("steps", [])) if not st.get("pass")]
                problems.append("%s fails in %s (steps %s)" % (name, r, failed))
    for (name, runner), reason in sorted(baseline.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        if name not in known:
            problems.append("stale baseline: no scenario %s (%s)" % (name, reason))
        elif runner is not None and runner not in results and runner in a.runners:
            pass  # that runner wrote no file: reported above
        elif runner is not None and runner not in a.runners:
            problems.append("stale baseline: %s@%s names a runner this run does not have" % (name, runner))

    # The same results everywhere.
    for r in results:
        if r == ref:
            continue
        skip = {n for (n, run) in baseline if run in (r, ref)}
        if not skip:
            if raw[r] != raw[ref]:
                diff = [n for n in names if canon(results[r].get(n)) != canon(results[ref].get(n))]
                problems.append("%s.json differs from %s.json (scenarios %s)" % (r, ref, diff or "formatting"))
        else:
            diff = [n for n in names if n not in skip and canon(results[r].get(n)) != canon(results[ref].get(n))]
            if diff:
                problems.append("%s.json differs from %s.json (scenarios %s)" % (r, ref, diff))

    for p in problems:
        print("conformance: " + p, file=sys.stderr)
    if problems:
        return 1
    print("conformance: %d scenarios x %d runners (%s) identical; %d known failure(s) tolerated by the baseline"
          % (len(names), len(results), ", ".join(a.runners), tolerated))
    for (name, runner), reason in sorted(baseline.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        print("  known failure: %s%s — %s" % (name, "" if runner is None else "@" + runner, reason))
    return 0


if __name__ == "__main__":
    sys.exit(main())
