#!/usr/bin/python3
"""StageFrontier E3 hidden-rank routing, reproduced on this machine (§6.2,
Table 4, App. E).

For each (ranks, seed) one DDP launch (clients/python/examples/ddp_demo.py,
gloo on CPU) runs every fault family as a phase on a hidden rank drawn from
the seed, plus a no-fault phase (for the step-time p50) and a delay sweep.
Each phase's stage matrix is written as JSONL (no server) and scored by the
Go CLI (`laggard analyze --json`), whose frontier.Report already carries
top1/top2/routing for StageFrontier and the five baselines. This script only
tallies those reports; it never ranks stages itself.

    /usr/bin/python3 eval/e3_routing.py            # full run (4 and 8 ranks, 3 seeds)
    /usr/bin/python3 eval/e3_routing.py --quick    # smoke test (4 ranks, 1 seed, few steps)
    /usr/bin/python3 eval/e3_routing.py --score-only eval/out/e3-full   # re-score a run

See eval/README.md for the columns.
"""

import argparse
import csv
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEMO = os.path.join(REPO, "clients", "python", "examples", "ddp_demo.py")


def _load_vocab():
    # The stage names come from the client's generated vocabulary (single
    # source: internal/signal/stagevec), loaded by path so the laggard
    # package itself (and its logging setup) is not imported here.
    path = os.path.join(REPO, "clients", "python", "laggard", "_vocab.py")
    spec = importlib.util.spec_from_file_location("_laggard_vocab", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {short: long for long, short in mod.SHORT_NAMES.items()}


_STAGE = _load_vocab()
DATA, FWD, BWD, CB = _STAGE["data"], _STAGE["forward"], _STAGE["backward"], _STAGE["callbacks"]

# Family → (display name, the stage the injection is seeded in).
FAMILIES = {
    "data": ("Data", DATA),
    "backward": ("Backward", BWD),
    "backward_comm": ("Backward/comm", BWD),
    "forward_host": ("Forward/host", FWD),
    "callback_sync": ("Callback/sync", CB),
    "callback_host": ("Callback/host (control)", CB),
}
FAMILY_ORDER = list(FAMILIES)
# Host-only callback delay has no barrier: the control row (App. E †).
CONTROLS = {"callback_host"}

METHOD_NAMES = {
    "stagefrontier": "StageFrontier",
    "per_stage_max": "Per-stage max",
    "per_stage_avg": "Per-stage average",
    "rank_spread": "Raw rank spread",
    "slowest_rank_breakdown": "Slowest-rank breakdown",
    "rank0_local": "Rank-0 local total",
}
METHOD_ORDER = list(METHOD_NAMES)


# --- tallying (pure; unit-tested against hand-written reports) -------------

def method_views(report):
    """{method: {"top1","top2","routing","total_ms"}} for StageFrontier and
    every baseline in the report, exactly as the CLI computed them."""
    views = {"stagefrontier": {"top1": report.get("top1") or "", "top2": list(report.get("top2") or []),
                               "routing": list(report.get("routing") or []), "total_ms": None}}
    for b in report.get("baselines") or []:
        views[b["method"]] = {"top1": b.get("top1") or "", "top2": list(b.get("top2") or []),
                              "routing": list(b.get("routing") or []), "total_ms": b.get("total_ms")}
    return views


def stage_share(report, stage):
    """The stage's exposed-makespan share (§3 eq.2); advance/exposed when the
    report is raw-only; None if the stage is not in the report."""
    stages = report.get("stages") or []
    if stage not in stages:
        return None
    i = stages.index(stage)
    share = report.get("share")
    if share:
        return share[i]
    exposed = report.get("exposed_ms") or 0.0
    adv = report.get("advance_ms") or []
    return adv[i] / exposed if exposed > 0 and i < len(adv) else None


def exact_accounting(report, method, rel=1e-6):
    """Whether the method's claimed total equals the exposed makespan on this
    row (Theorem 1 for StageFrontier; Propositions 1–2 for max/average)."""
    exposed = report.get("exposed_ms") or 0.0
    tol = rel * max(1.0, abs(exposed))
    if method == "stagefrontier":
        return abs(report.get("telescope_err_ms") or 0.0) <= tol
    for b in report.get("baselines") or []:
        if b["method"] == method:
            total = b.get("total_ms")
            return total is not None and abs(total - exposed) <= tol
    return False


def score_row(report, expected):
    """Per-method hit flags for one row: top1, top2, cand hit, cand size."""
    out = {}
    for m, v in method_views(report).items():
        out[m] = {"top1": v["top1"] == expected, "top2": expected in v["top2"], "hit": expected in v["routing"],
                  "size": len(v["routing"]), "exact": exact_accounting(report, m), "routed_to": v["top1"]}
    return out


def p50_step_ms(stage_file, from_step, to_step):
    """Median over the window's steps of the slowest rank's wall time: the
    step-time p50 that App. E's Delay/p50 divides by."""
    per_step = {}
    with open(stage_file, encoding="utf-8") as f:
        f.readline()
        for line in f:
            if not line.strip():
                continue
            v = json.loads(line)
            if from_step <= v["step"] <= to_step:
                per_step[v["step"]] = max(per_step.get(v["step"], 0.0), v["wall_ms"])
    return statistics.median(per_step.values()) if per_step else float("nan")


def tally(rows, default_delay):
    """Aggregates scored rows into the four result tables. Each row is a dict
    with ranks, seed, family, delay_ms, expected, p50_ms, scores, share."""
    by_scen = {}
    for r in rows:
        by_scen.setdefault((FAMILY_ORDER.index(r["family"]), r["ranks"], r["delay_ms"]), []).append(r)
    scen = []
    for (fi, ranks, delay), rs in sorted(by_scen.items()):
        fam = FAMILY_ORDER[fi]
        sf = [r["scores"]["stagefrontier"] for r in rs]
        ratios = [delay / r["p50_ms"] for r in rs if r.get("p50_ms")]
        scen.append({
            "scenario": FAMILIES[fam][0], "family": fam, "ranks": ranks, "delay_ms": delay,
            "delay_p50": statistics.mean(ratios) if ratios else float("nan"), "rows": len(rs),
            "top1": sum(s["top1"] for s in sf), "top2": sum(s["top2"] for s in sf), "hit": sum(s["hit"] for s in sf),
            "cand_size": statistics.mean(s["size"] for s in sf),
            "rank_hit": sum(1 for r in rs if r.get("leader_rank") == r.get("hidden_rank")),
            # The rank is named only when the evidence singles it out; a
            # withheld rank (-1) is honest, a wrong one is the worst outcome.
            "rank_withheld": sum(1 for r in rs if r.get("leader_rank") in (None, -1)),
            "rank_wrong": sum(1 for r in rs if r.get("leader_rank") not in (None, -1, r.get("hidden_rank"))),
            "share": statistics.mean(r["share"] for r in rs if r["share"] is not None) if any(
                r["share"] is not None for r in rs) else float("nan"),
        })

    # Table 4: sync-bearing (non-control) rows at the default delay.
    t4rows = [r for r in rows if r["family"] not in CONTROLS and r["delay_ms"] == default_delay]
    methods = [m for m in METHOD_ORDER if any(m in r["scores"] for r in t4rows)]
    methods += sorted({m for r in t4rows for m in r["scores"]} - set(methods))
    table4 = []
    for m in methods:
        ss = [r["scores"][m] for r in t4rows if m in r["scores"]]
        if not ss:
            continue
        table4.append({
            "method": METHOD_NAMES.get(m, m), "key": m, "exact": all(s["exact"] for s in ss), "n": len(ss),
            "top1": sum(s["top1"] for s in ss), "top2": sum(s["top2"] for s in ss), "hit": sum(s["hit"] for s in ss),
            "avg_cand": statistics.mean(s["size"] for s in ss), "max_cand": max(s["size"] for s in ss),
        })

    control = []
    for ranks in sorted({r["ranks"] for r in rows if r["family"] in CONTROLS}):
        rs = [r for r in rows if r["family"] in CONTROLS and r["ranks"] == ranks and r["delay_ms"] == default_delay]
        if not rs:
            continue
        sf = [r["scores"]["stagefrontier"] for r in rs]
        routed = {}
        for s in sf:
            routed[s["routed_to"]] = routed.get(s["routed_to"], 0) + 1
        control.append({
            "ranks": ranks, "rows": len(rs), "routed_to_callback": sum(s["top1"] for s in sf),
            "callback_in_top2": sum(s["top2"] for s in sf), "callback_in_candidates": sum(s["hit"] for s in sf),
            "cand_size": statistics.mean(s["size"] for s in sf),
            "callback_share": statistics.mean(r["share"] for r in rs if r["share"] is not None),
            "top1_stages": ";".join("%s:%d" % kv for kv in sorted(routed.items())),
        })

    # Detectability: every (family, ranks) that was swept over >1 delay.
    curve = []
    for c in scen:
        delays = {x["delay_ms"] for x in scen if x["family"] == c["family"] and x["ranks"] == c["ranks"]}
        if len(delays) > 1:
            curve.append({k: c[k] for k in ("scenario", "family", "ranks", "delay_ms", "delay_p50", "rows", "share",
                                            "top1", "top2", "hit", "cand_size")})
    curve.sort(key=lambda c: (FAMILY_ORDER.index(c["family"]), c["ranks"], c["delay_ms"]))
    return scen, table4, control, curve


# --- formatting --------------------------------------------------------------

def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def frac(k, n):
    return "%d/%d" % (k, n)


def render(scen, table4, control, curve):
    parts = ["## Per-scenario routing (App. E layout; StageFrontier)", md_table(
        ["Scenario", "Ranks", "Delay", "Delay/p50", "Rows", "Top-1", "Top-2", "Cand. hit", "Cand. size",
         "Seeded share", "Rank right", "Rank withheld", "Rank wrong"],
        [[c["scenario"], c["ranks"], "%g ms" % c["delay_ms"], "%.2f" % c["delay_p50"], c["rows"],
          frac(c["top1"], c["rows"]), frac(c["top2"], c["rows"]), frac(c["hit"], c["rows"]),
          "%.2f" % c["cand_size"], "%.3f" % c["share"], frac(c["rank_hit"], c["rows"]), frac(c["rank_withheld"], c["rows"]),
          frac(c["rank_wrong"], c["rows"])] for c in scen])]
    if table4:
        parts += ["## Table 4 layout: sync-bearing rows at the default delay", md_table(
            ["Method", "Exact acct.", "Top-1", "Top-2", "Cand. hit", "Avg cand.", "Max cand."],
            [[t["method"], "yes" if t["exact"] else "no", frac(t["top1"], t["n"]), frac(t["top2"], t["n"]),
              frac(t["hit"], t["n"]), "%.2f" % t["avg_cand"], t["max_cand"]] for t in table4])]
    if control:
        parts += ["## Control: host-only callback delay (no barrier)", md_table(
            ["Ranks", "Rows", "Routed to callbacks (top-1)", "Callbacks in top-2", "Callbacks in cand. set",
             "Avg cand.", "Callback share", "Top-1 stages"],
            [[c["ranks"], c["rows"], frac(c["routed_to_callback"], c["rows"]), frac(c["callback_in_top2"], c["rows"]),
              frac(c["callback_in_candidates"], c["rows"]), "%.2f" % c["cand_size"], "%.3f" % c["callback_share"],
              c["top1_stages"]] for c in control])]
    if curve:
        parts += ["## Detectability curve (seeded-stage share vs delay)", md_table(
            ["Scenario", "Ranks", "Delay", "Delay/p50", "Rows", "Mean seeded share", "Top-1", "Top-2", "Cand. hit",
             "Cand. size"],
            [[c["scenario"], c["ranks"], "%g ms" % c["delay_ms"], "%.2f" % c["delay_p50"], c["rows"], "%.3f" % c["share"],
              frac(c["top1"], c["rows"]), frac(c["top2"], c["rows"]), frac(c["hit"], c["rows"]), "%.2f" % c["cand_size"]]
             for c in curve])]
    return "\n\n".join(parts) + "\n"


def write_csv(path, rows, fields):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("%.6g" % v if isinstance(v, float) else v) for k, v in r.items()})


def flat_rows(rows):
    out = []
    for r in rows:
        for m, s in sorted(r["scores"].items(), key=lambda kv: METHOD_ORDER.index(kv[0]) if kv[0] in METHOD_ORDER else 99):
            out.append({"ranks": r["ranks"], "seed": r["seed"], "family": r["family"], "delay_ms": r["delay_ms"],
                        "expected": r["expected"], "hidden_rank": r["hidden_rank"], "leader_rank": r.get("leader_rank"),
                        "p50_ms": r["p50_ms"], "seeded_share": r["share"], "method": m, "top1": int(s["top1"]),
                        "top2": int(s["top2"]), "cand_hit": int(s["hit"]), "cand_size": s["size"],
                        "exact": int(s["exact"]), "routed_to": s["routed_to"], "job": r["job"]})
    return out


# --- running -----------------------------------------------------------------

def hidden_rank(ranks, seed):
    # The hidden rank comes from the seed only; the scorer never sees it.
    return random.Random("e3-hidden-%d-%d" % (ranks, seed)).randrange(ranks)


def phase_spec(families, delay, steps, sweep, sweep_families):
    items = ["none@%g:%d" % (delay, steps)] + ["%s@%g:%d" % (f, delay, steps) for f in families]
    for f in sweep_families:
        items += ["%s@%g:%d" % (f, d, steps) for d in sweep if d != delay or f not in families]
    return ",".join(items)


def launch(args, run_dir, ranks, seed):
    hid = hidden_rank(ranks, seed)
    sweep = args.sweep if ranks in args.sweep_ranks else []
    spec = phase_spec(args.families, args.delay_ms, args.steps, sweep, args.sweep_families if sweep else [])
    job = "e3-r%d-s%d" % (ranks, seed)
    cmd = [sys.executable, DEMO, "--world", str(ranks), "--seed", str(seed), "--data-seed", str(seed),
           "--fault-rank", str(hid), "--phases", spec, "--warmup", str(args.warmup), "--job", job,
           "--out", os.path.join(run_dir, "{job}.jsonl"), "--log-every", "25"]
    log_path = os.path.join(run_dir, job + ".log")
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if args.verbose else log, text=True,
                              timeout=args.launch_timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (exit %d); see %s" % (job, proc.returncode, log_path))
    phases = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for p in phases:
        p.update(ranks=ranks, seed=seed, hidden_rank=hid)
    print("[e3] %s: %d phases in %.1f s (hidden rank %d)" % (job, len(phases), time.time() - t0, hid), file=sys.stderr,
          flush=True)
    return phases


REPORT_SCHEMA = "laggard.report/v2"


def engine_report(job_report):
    """The StageFrontier report inside `laggard analyze --json`'s job report
    (schema laggard.report/v2): the one role group of these DDP jobs."""
    if job_report.get("schema_version") != REPORT_SCHEMA:
        raise ValueError("unexpected report schema %r (want %s)" % (job_report.get("schema_version"), REPORT_SCHEMA))
    groups = job_report.get("groups") or []
    if len(groups) != 1:
        raise ValueError("want one role group, got %d" % len(groups))
    return groups[0]["report"]


def analyze(laggard, phase, tau):
    cmd = laggard + ["analyze", "--json", "--from", str(phase["from_step"]), "--to", str(phase["to_step"])]
    if tau is not None:
        cmd += ["--tau", str(tau)]
    proc = subprocess.run(cmd + [phase["file"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError("laggard analyze %s: exit %d: %s" % (phase["file"], proc.returncode, proc.stderr.strip()))
    return engine_report(json.loads(proc.stdout))


def resolve_laggard(args, out_dir):
    if args.laggard:
        return args.laggard.split()
    binary = os.path.join(out_dir, "laggard")
    proc = subprocess.run(["go", "build", "-o", binary, "./cmd/laggard"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RuntimeError("go build ./cmd/laggard failed (pass --laggard BIN, or --collect-only):\n" + proc.stdout)
    return [binary]


def score(phases, laggard, args, run_dir):
    p50 = {}
    for p in phases:
        if p["fault"] == "none":
            p50[(p["ranks"], p["seed"])] = p50_step_ms(p["file"], p["from_step"], p["to_step"])
    rows = []
    for p in phases:
        if p["fault"] == "none":
            continue
        rep = analyze(laggard, p, args.tau)
        with open(os.path.join(run_dir, p["job"] + ".report.json"), "w") as f:
            json.dump(rep, f)
        expected = FAMILIES[p["fault"]][1]
        rows.append({"ranks": p["ranks"], "seed": p["seed"], "family": p["fault"], "delay_ms": p["delay_ms"],
                     "expected": expected, "hidden_rank": p["hidden_rank"], "leader_rank": rep.get("leader_rank"),
                     "p50_ms": p50.get((p["ranks"], p["seed"])), "share": stage_share(rep, expected),
                     "scores": score_row(rep, expected), "job": p["job"]})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: 4 ranks, 1 seed, 20 steps, short sweep")
    ap.add_argument("--ranks", default="4,8")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--families", default=",".join(FAMILY_ORDER))
    ap.add_argument("--delay-ms", type=float, default=120.0)
    ap.add_argument("--sweep", default="12,30,60,120,180", help="delays (ms) for the detectability curve")
    ap.add_argument("--sweep-families", default="data")
    ap.add_argument("--sweep-ranks", default="", help="default: all --ranks")
    ap.add_argument("--steps", type=int, default=50, help="steps per phase, warmup included")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--tau", type=float, default=None, help="candidate threshold passed to analyze (default: its own)")
    ap.add_argument("--laggard", default="", help='scorer command, e.g. "go run ./cmd/laggard" (default: go build it)')
    ap.add_argument("--out-dir", default=os.path.join(HERE, "out"))
    ap.add_argument("--collect-only", action="store_true", help="run the trainers, do not score")
    ap.add_argument("--score-only", default="", metavar="RUN_DIR", help="score an earlier run's manifest")
    ap.add_argument("--launch-timeout", type=float, default=900)
    ap.add_argument("--verbose", action="store_true", help="trainer progress on stderr")
    args = ap.parse_args(argv)
    if args.quick:
        args.ranks, args.seeds, args.steps, args.warmup = "4", "0", 20, 5
        args.sweep = "30,120"
    args.ranks = [int(x) for x in args.ranks.split(",") if x]
    args.seeds = [int(x) for x in args.seeds.split(",") if x]
    args.families = [f for f in args.families.split(",") if f]
    for f in args.families:
        if f not in FAMILIES:
            ap.error("--families: unknown %r" % f)
    args.sweep = [float(x) for x in args.sweep.split(",") if x]
    args.sweep_families = [f for f in args.sweep_families.split(",") if f]
    args.sweep_ranks = [int(x) for x in args.sweep_ranks.split(",") if x] or args.ranks
    if args.warmup >= args.steps:
        ap.error("--warmup must be < --steps")

    t0 = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    tag = "e3_quick" if args.quick else "e3"
    if args.score_only:
        run_dir = args.score_only
        with open(os.path.join(run_dir, "manifest.jsonl")) as f:
            phases = [json.loads(line) for line in f if line.strip()]
    else:
        run_dir = os.path.join(args.out_dir, tag + "-" + time.strftime("%Y%m%d-%H%M%S"))
        os.makedirs(run_dir)
        phases = []
        with open(os.path.join(run_dir, "manifest.jsonl"), "w") as man:
            for ranks in args.ranks:
                for seed in args.seeds:
                    for p in launch(args, run_dir, ranks, seed):
                        phases.append(p)
                        man.write(json.dumps(p) + "\n")
                        man.flush()
        print("[e3] trainers done in %.1f s; run dir %s" % (time.time() - t0, run_dir), file=sys.stderr)
    if args.collect_only:
        return 0
    laggard = resolve_laggard(args, args.out_dir)
    rows = score(phases, laggard, args, run_dir)
    scen, table4, control, curve = tally(rows, args.delay_ms)
    print(render(scen, table4, control, curve))
    write_csv(os.path.join(args.out_dir, tag + "_rows.csv"), flat_rows(rows),
              ["ranks", "seed", "family", "delay_ms", "expected", "hidden_rank", "leader_rank", "p50_ms", "seeded_share",
               "method", "top1", "top2", "cand_hit", "cand_size", "exact", "routed_to", "job"])
    write_csv(os.path.join(args.out_dir, tag + "_scenarios.csv"), scen,
              ["scenario", "family", "ranks", "delay_ms", "delay_p50", "rows", "top1", "top2", "hit", "cand_size", "share",
               "rank_hit", "rank_withheld", "rank_wrong"])
    write_csv(os.path.join(args.out_dir, tag + "_table4.csv"), table4,
              ["method", "key", "exact", "n", "top1", "top2", "hit", "avg_cand", "max_cand"])
    write_csv(os.path.join(args.out_dir, tag + "_control.csv"), control,
              ["ranks", "rows", "routed_to_callback", "callback_in_top2", "callback_in_candidates", "cand_size",
               "callback_share", "top1_stages"])
    write_csv(os.path.join(args.out_dir, tag + "_detectability.csv"), curve,
              ["scenario", "family", "ranks", "delay_ms", "delay_p50", "rows", "share", "top1", "top2", "hit",
               "cand_size"])
    print("[e3] %d rows scored; CSVs in %s; total %.1f s" % (len(rows), args.out_dir, time.time() - t0),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print("e3_routing: %s" % e, file=sys.stderr)
        sys.exit(1)
