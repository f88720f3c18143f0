#!/usr/bin/python3
"""results/runs.jsonl → the summary table (stdout and results/summary.md).

    /usr/bin/python3 eval/incidents/table.py [--runs PATH ...] [--out PATH]

Each line of runs.jsonl is one run record (run.py); it is scored here
(score.score_run) so a change to the scoring re-scores every saved run.
Column definitions: eval/incidents/README.md.
"""

import argparse
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import score  # noqa: E402

HARNESS_ORDER = ("e3", "greyhound", "sysom", "kair", "extra")
# The cases in each harness's own order (run.py CASES; not imported: run.py
# loads every harness).
CASE_ORDER = ("data", "backward", "backward_comm", "forward_host", "callback_sync", "callback_host",
              "hog", "sleep", "link", "softirq", "vfs", "logging", "slow_op", "late_collective", "slow_link",
              "two_faults", "none")
ENGINES = ("stagefrontier", "greyhound", "sysom", "kair")
ABSORBED = "class:absorbed_in_stage"


def load(paths):
    """Run records from the files; a later record of the same (family,
    seed, tag) replaces an earlier one (a re-run)."""
    recs = []
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        recs.append(json.loads(line))
                    except ValueError:
                        pass
    last = {}
    for r in recs:
        last[(r.get("family"), r.get("seed"), r.get("tag") or "")] = r
    return list(last.values())


def family_order(fam):
    h, _, case = (fam or "").partition(":")
    return (HARNESS_ORDER.index(h) if h in HARNESS_ORDER else 9, CASE_ORDER.index(case) if case in CASE_ORDER else 99,
            case)


def best_engine(rows):
    """(right count, [engines]) of the single engine(s) that were right most
    often on these runs; engines that did not run on them are skipped."""
    counts = {}
    for r in rows:
        for e, o in (r.get("engines") or {}).items():
            if o in (None, "n/a"):
                continue
            counts.setdefault(e, 0)
            if o == "right":
                counts[e] += 1
    if not counts:
        return None, []
    top = max(counts.values())
    return top, sorted(e for e, c in counts.items() if c == top)


def group(rows):
    """One summary dict per family (harness:case), then the absorbed-in-
    stage class (runs whose StageFrontier report withheld the rank as
    absorbed_in_stage during the fault), then the totals."""
    fams = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r)
    out = [summarize(f, fams[f]) for f in sorted(fams, key=family_order)]
    # The class fusion exists for: one rank's delay that StageFrontier
    # withholds as absorbed inside a stage (a collective or barrier hides
    # who) while collective-entry lateness can show the rank last — so
    # runs with collective analysis on (Greyhound ran). A slow link that
    # StageFrontier withholds the same way is not that class.
    absorbed = [r for r in rows if r.get("absorbed") and not r.get("control") and r.get("fault_kinds") == ["rank"]
                and (r.get("engines") or {}).get("greyhound") is not None]
    if absorbed:
        out.append(summarize(ABSORBED, absorbed))
    faults = [r for r in rows if not r.get("control")]
    controls = [r for r in rows if r.get("control")]
    if faults:
        out.append(summarize("all faults", faults))
    if controls:
        out.append(summarize("all controls", controls))
    return out


def summarize(name, rows):
    n = len(rows)
    control = all(r.get("control") for r in rows)
    s = {"family": name, "runs": n, "control": control}
    s["opened_mean"] = statistics.mean(r.get("opened_total", 0) for r in rows) if rows else 0.0
    s["incidents_ok"] = sum(1 for r in rows if r.get("incidents_ok"))
    for o in score.OUTCOMES:
        s[o] = sum(1 for r in rows if r.get("outcome") == o)
    s["wrong_high"] = sum(1 for r in rows if r.get("wrong_high"))
    s["layer_off"] = sum(1 for r in rows if r.get("layer") != "on")
    for k in ("opened_s", "localized_s", "explained_s"):
        xs = [r.get(k) for r in rows]
        s[k + "_p50"] = score.percentile(xs, 50) if not control else None
        s[k + "_p90"] = score.percentile(xs, 90) if not control else None
    # The time targets are over the runs whose fault slowed the job (≥ 10 %):
    # an interferer the job does not wait for has nothing to localize.
    mat = [r for r in rows if r.get("material", True) and not r.get("control")]
    s["material"] = len(mat)
    s["loc10"] = sum(1 for r in mat if r.get("localized_right_s") is not None and r["localized_right_s"] <= 10)
    s["expl20"] = sum(1 for r in mat if r.get("explained_right_s") is not None and r["explained_right_s"] <= 20)
    ratios = [r["lost_ratio"] for r in rows if r.get("lost_ratio") is not None]
    s["lost_ratio_p50"] = statistics.median(ratios) if ratios else None
    s["lost_ratio_n"] = len(ratios)
    s["best_right"], s["best_engines"] = best_engine(rows)
    s["fused_ge_best"] = None if s["best_right"] is None else s["right"] >= s["best_right"]
    return s


def fmt_s(x):
    if x is None:
        return "—"
    if x == math.inf:
        return "never"
    return "%.1f" % x


def frac(k, n):
    return "%d/%d" % (k, n)


HEADER = ["family", "runs", "slowed ≥ 10 %", "incidents opened: mean (as wanted)", "right / partial / withheld / wrong",
          "wrong high-conf.", "opened p50 / p90 (s)", "localized p50 / p90 (s)", "explained p50 / p90 (s)",
          "right & localized ≤ 10 s", "right & explained ≤ 20 s", "lost-time ratio (median, n)",
          "best single engine: right (which)", "fused ≥ best"]


def render_summary(groups):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    for s in groups:
        best = "—" if s["best_right"] is None else "%d (%s)" % (s["best_right"], ", ".join(s["best_engines"]))
        ge = "—" if s["fused_ge_best"] is None else ("yes" if s["fused_ge_best"] else "**no**")
        times = ["—"] * 3 if s["control"] else ["%s / %s" % (fmt_s(s[k + "_p50"]), fmt_s(s[k + "_p90"]))
                                                 for k in ("opened_s", "localized_s", "explained_s")]
        lines.append("| " + " | ".join(str(c) for c in [
            s["family"], s["runs"], "—" if s["control"] else frac(s["material"], s["runs"]),
            "%.2f (%s)" % (s["opened_mean"], frac(s["incidents_ok"], s["runs"])),
            " / ".join(str(s[o]) for o in score.OUTCOMES), s["wrong_high"], *times,
            "—" if s["control"] else frac(s["loc10"], s["material"]),
            "—" if s["control"] else frac(s["expl20"], s["material"]),
            "—" if s["lost_ratio_p50"] is None else "%.2f (%d)" % (s["lost_ratio_p50"], s["lost_ratio_n"]),
            best, ge]) + " |")
    return "\n".join(lines)


RUN_HEADER = ["family", "seed", "layer", "slowdown", "incidents (pre)", "outcome", "stated", "suspects", "wrong high", "opened", "localized",
              "explained", "recovering", "observed", "lost s / expected s", "engines", "absorbed"]


def render_runs(rows):
    lines = ["| " + " | ".join(RUN_HEADER) + " |", "|" + "|".join("---" for _ in RUN_HEADER) + "|"]
    for r in sorted(rows, key=lambda r: (family_order(r["family"]), r.get("seed") or 0)):
        eng = ", ".join("%s %s" % (e, o) for e, o in sorted((r.get("engines") or {}).items()) if o not in (None, "n/a"))
        lost = "—" if r.get("lost_s") is None else "%.1f / %s%s" % (
            r["lost_s"], "—" if r.get("expected_lost_s") is None else "%.1f" % r["expected_lost_s"],
            " (%s)" % r["expected_basis"] if r.get("expected_basis") else "")
        lines.append("| " + " | ".join(str(c) for c in [
            r["family"], r.get("seed"), r.get("layer") or "?", "—" if r.get("slowdown") is None else "%+.0f %%" % (100 * r["slowdown"]),
            "%d (%d)" % (r.get("opened_total", 0), r.get("opened_pre", 0)),
            r.get("outcome") + (" (error: %s)" % r["error"][:80] if r.get("error") else ""),
            ", ".join(r.get("stated") or []) or "—", ", ".join(r.get("suspects") or []) or "—",
            ", ".join(r.get("wrong_high") or []) or "0", fmt_s(r.get("opened_s")), fmt_s(r.get("localized_s")),
            fmt_s(r.get("explained_s")), fmt_s(r.get("recovering_s")), fmt_s(r.get("observed_s")), lost, eng or "—",
            "yes" if r.get("absorbed") else ""]) + " |")
    return "\n".join(lines)


def targets(groups):
    """The issue's targets, each with what the runs show."""
    fams = [s for s in groups if ":" in s["family"] and not s["family"].startswith("class:")]
    faults = next((s for s in groups if s["family"] == "all faults"), None)
    controls = next((s for s in groups if s["family"] == "all controls"), None)
    out = []
    if faults:
        out.append("- exactly one incident per injected fault: %s runs" % frac(faults["incidents_ok"], faults["runs"]))
        out.append("- right & localized within 10 s: %s; right & explained within 20 s: %s of the runs whose fault "
                   "slowed the job by ≥ 10 %% (target: 90 %%)" % (frac(faults["loc10"], faults["material"]),
                                                                   frac(faults["expl20"], faults["material"])))
    if controls:
        out.append("- no incident in controls: %s runs" % frac(controls["incidents_ok"], controls["runs"]))
    wh = sum(s["wrong_high"] for s in fams)
    out.append("- wrong causes stated with high confidence (at any poll): %d runs (target 0)" % wh)
    bad = [s["family"] for s in fams if s["fused_ge_best"] is False]
    if any(s.get("layer_off") for s in fams):
        out.insert(0, "- **%d runs never got an answer from GET /api/v1/incidents** (layer off or route missing): "
                   "their outcomes say nothing about incidents" % sum(s.get("layer_off", 0) for s in fams))
    out.append("- fused right at least as often as the best single engine: %s" % (
        "every family" if not bad else "not on " + ", ".join(bad)))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", action="append", default=[], help="run records (default: results/runs.jsonl)")
    ap.add_argument("--out", default="", help="also write the markdown here (default: print only)")
    ap.add_argument("--title", default="Incidents: one diagnosis per slowdown — evaluation")
    args = ap.parse_args(argv)
    paths = args.runs or [os.path.join(HERE, "results", "runs.jsonl")]
    rows = [score.score_run(r) for r in load(paths)]
    if not rows:
        print("no runs in %s" % ", ".join(paths), file=sys.stderr)
        return 1
    groups = group(rows)
    md = "\n\n".join([
        "# " + args.title,
        "Generated by `eval/incidents/table.py` from %s (column definitions: `eval/incidents/README.md`)." % ", ".join(
            "`%s`" % os.path.relpath(p, os.path.join(HERE, "..", "..")) for p in paths),
        "## Summary per family", render_summary(groups), "## Targets", targets(groups), "## Runs", render_runs(rows)]) + "\n"
    print(md)
    if args.out:
        with open(args.out, "w") as f:
            f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
