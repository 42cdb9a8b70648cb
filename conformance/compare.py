#!/usr/bin/env python3
"""Judges the result files of one conformance run (see conformance/README.md).

    python3 conformance/compare.py [--baseline conformance/baseline]
        [--engine firefox=OUTDIR/firefox --engine-baseline firefox=conformance/baseline-firefox]
        OUTDIR go ts py mcp ...

OUTDIR holds the reference engine's (Chromium's) results; each --engine NAME=DIR another engine's,
of the browser scenarios only. Fails (exit 1) unless, for every engine,
  - every named runner wrote DIR/<runner>.json with the same scenarios;
  - the files are byte-identical (scenarios baselined for one runner only are left out of the
    comparison of that runner's file, which is then compared scenario by scenario);
  - every scenario passed in every runner, except those the engine's baseline lists;
  - every baseline entry is still needed ("stale baseline": a listed fixture that passes — on
    another engine: that passes and equals the reference's result —, or that no longer exists,
    must be removed from the baseline);
and, for every other engine,
  - it ran exactly the reference's browser scenarios (those with a create_browser_session step);
  - each of its results equals the reference engine's, runner by runner, except the scenarios its
    baseline lists (an engine gap; the entry's reason says which).

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


def listed(baseline, name, runner):
    return (name, None) in baseline or (name, runner) in baseline


def sorted_entries(baseline):
    return sorted(baseline.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))


def judge(out, runners, baseline, label, reference=None):
    """Judges one engine's result files in out. With reference (the reference engine's results,
    runner -> scenario name -> result), a baseline entry is stale only when the scenario passes
    and equals the reference's. Returns (problems, results, scenario names, tolerated)."""
    problems = []
    results = {}
    raw = {}
    for r in runners:
        path = os.path.join(out, r + ".json")
        try:
            with open(path, "rb") as f:
                raw[r] = f.read()
            results[r] = {s["name"]: s for s in json.loads(raw[r])["scenarios"]}
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append("%s: no usable result file (%s)" % (path, e))
    if not results:
        return problems, results, [], 0

    ref = runners[0] if runners[0] in results else next(iter(results))
    names = list(results[ref])
    known = set(names)

    def same_as_reference(r, name, sc):
        return reference is None or canon(sc) == canon(reference.get(r, {}).get(name))

    # Pass/fail against the baseline.
    tolerated = 0
    for r, scs in results.items():
        if list(scs) != names:
            problems.append("%s: %s.json: scenarios %s, %s.json: %s" % (label, r, list(scs), ref, names))
        for name, sc in scs.items():
            if sc.get("pass"):
                if listed(baseline, name, r) and same_as_reference(r, name, sc):
                    problems.append("stale baseline (%s): %s passes in %s; remove it from the baseline" % (label, name, r))
                elif listed(baseline, name, r):
                    tolerated += 1
            elif listed(baseline, name, r):
                tolerated += 1
            else:
                failed = [i + 1 for i, st in enumerate(sc.get("steps", [])) if not st.get("pass")]
                problems.append("%s: %s fails in %s (steps %s)" % (label, name, r, failed))
    for (name, runner), reason in sorted_entries(baseline):
        if name not in known:
            problems.append("stale baseline (%s): no scenario %s (%s)" % (label, name, reason))
        elif runner is not None and runner not in results and runner in runners:
            pass  # that runner wrote no file: reported above
        elif runner is not None and runner not in runners:
            problems.append("stale baseline (%s): %s@%s names a runner this run does not have" % (label, name, runner))

    # The same results in every runner.
    for r in results:
        if r == ref:
            continue
        skip = {n for (n, run) in baseline if run in (r, ref)}
        if not skip:
            if raw[r] != raw[ref]:
                diff = [n for n in names if canon(results[r].get(n)) != canon(results[ref].get(n))]
                problems.append("%s: %s.json differs from %s.json (scenarios %s)" % (label, r, ref, diff or "formatting"))
        else:
            diff = [n for n in names if n not in skip and canon(results[r].get(n)) != canon(results[ref].get(n))]
            if diff:
                problems.append("%s: %s.json differs from %s.json (scenarios %s)" % (label, r, ref, diff))
    return problems, results, names, tolerated


def browser_scenarios(scenarios):
    return [n for n, sc in scenarios.items() if any(st.get("op") == "create_browser_session" for st in sc.get("steps", []))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline"))
    ap.add_argument("--engine", action="append", default=[], metavar="NAME=DIR",
                    help="another engine's result files (its browser scenarios), compared with OUTDIR's")
    ap.add_argument("--engine-baseline", action="append", default=[], metavar="NAME=FILE",
                    help="that engine's baseline of gaps")
    ap.add_argument("out")
    ap.add_argument("runners", nargs="+")
    a = ap.parse_args()

    def pairs(opts, what):
        d = {}
        for o in opts:
            if "=" not in o:
                sys.exit("compare.py: --%s wants NAME=PATH, not %r" % (what, o))
            k, v = o.split("=", 1)
            d[k] = v
        return d

    engines = pairs(a.engine, "engine")
    engine_baselines = pairs(a.engine_baseline, "engine-baseline")
    for name in engine_baselines:
        if name not in engines:
            sys.exit("compare.py: --engine-baseline %s without --engine %s" % (name, name))

    baseline = load_baseline(a.baseline)
    problems, results, names, tolerated = judge(a.out, a.runners, baseline, "chromium")
    lines = ["conformance: chromium: %d scenarios x %d runners (%s) identical; %d known failure(s) tolerated by the baseline"
             % (len(names), len(results), ", ".join(a.runners), tolerated)]
    lines += ["  known failure: %s%s — %s" % (n, "" if r is None else "@" + r, why) for (n, r), why in sorted_entries(baseline)]

    ref = a.runners[0] if a.runners[0] in results else (next(iter(results)) if results else None)
    expected = browser_scenarios(results[ref]) if ref else []
    for engine, out in sorted(engines.items()):
        eb = load_baseline(engine_baselines.get(engine))
        p, res, enames, etol = judge(out, a.runners, eb, engine, reference=results)
        problems += p
        if res and enames != expected:
            problems.append("%s ran scenarios %s; the browser scenarios are %s" % (engine, enames, expected))
        # The same results as the reference engine, runner by runner, but for its baseline's gaps.
        for r, scs in res.items():
            diff = [n for n, sc in scs.items() if not listed(eb, n, r) and canon(sc) != canon(results.get(r, {}).get(n))]
            if diff:
                problems.append("%s/%s.json differs from chromium's %s.json (scenarios %s)" % (engine, r, r, diff))
        gaps = len({n for n, _ in eb})
        lines.append("conformance: %s: %d browser scenarios x %d runners identical, and equal to chromium's but for %d engine gap(s) of its baseline (%d result(s) tolerated)"
                     % (engine, len(enames), len(res), gaps, etol))
        lines += ["  engine gap: %s%s — %s" % (n, "" if r is None else "@" + r, why) for (n, r), why in sorted_entries(eb)]

    for p in problems:
        print("conformance: " + p, file=sys.stderr)
    if problems:
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
