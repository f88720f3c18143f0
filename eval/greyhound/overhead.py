#!/usr/bin/python3
"""Overhead of collective capture on the real DDP demo (issue 7, evaluation:
"Overhead: paired runs of the demo with and without capture"; paper 0.39%).

    /usr/bin/python3 eval/greyhound/overhead.py [--pairs 7] [--steps 400] [--world 2]

Each pair runs clients/python/examples/ddp_demo.py twice with the same seed
against a real `laggard serve` on loopback (the Greyhound controller on, as
in production): once with --collectives off and once with --collectives on
(validation off in both, so only capture differs). The order alternates
between pairs (off/on, on/off, ...). Ranks are pinned to their own cores
(--pin). Before each pair the script waits until the 1-minute load average
is below --max-load (other processes on a shared machine), up to --wait s.

Step time per run: the job's step time (the interval between consecutive
step ends of the slowest rank, from the demo's --truth-out), median over
the steps after --skip. Result: per-pair relative difference
(on − off) / off and its median over pairs, written to
eval/greyhound/results/overhead.{md,tsv} (and .json with every run).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DEMO = os.path.join(ROOT, "clients", "python", "examples", "ddp_demo.py")
PY = "/usr/bin/python3"


# --- pure parts (unit-tested) -------------------------------------------------

def job_step_times(truth_rows, skip):
    """truth_rows: dicts {rank, step, start_ns, end_ns} of every rank ->
    [ms] step times of the job: the gap between consecutive step ends of the
    slowest rank (max end over ranks), from step skip+1 on."""
    ends = {}
    for r in truth_rows:
        ends[r["step"]] = max(ends.get(r["step"], 0), r["end_ns"])
    steps = sorted(ends)
    return [(ends[b] - ends[a]) / 1e6 for a, b in zip(steps, steps[1:]) if b > skip]


def pair_order(i):
    """Alternating order: pair 0 runs off then on, pair 1 on then off, ..."""
    return ("off", "on") if i % 2 == 0 else ("on", "off")


def summarize(pairs):
    """pairs: [{"off": median_ms, "on": median_ms}] -> relative differences
    (%) and their median."""
    rel = [100.0 * (p["on"] - p["off"]) / p["off"] for p in pairs if p.get("off") and p.get("on")]
    return {"rel_pct": rel, "median_rel_pct": statistics.median(rel) if rel else None,
            "median_off_ms": statistics.median([p["off"] for p in pairs]) if pairs else None,
            "median_on_ms": statistics.median([p["on"] for p in pairs]) if pairs else None}


# --- running ----------------------------------------------------------------

def wait_load(max_load, wait_s):
    t0 = time.time()
    while os.getloadavg()[0] >= max_load and time.time() - t0 < wait_s:
        time.sleep(5)
    return os.getloadavg()[0]


def start_server(exe, work, interval):
    log = open(os.path.join(work, "serve.log"), "w")
    srv = subprocess.Popen([exe, "serve", "-addr", "127.0.0.1:0", "-data", os.path.join(work, "data"),
                            "-greyhound-interval", interval], stdout=log, stderr=subprocess.STDOUT)
    # the chosen port is printed in the log
    for _ in range(200):
        time.sleep(0.05)
        with open(log.name) as f:
            text = f.read()
        m = re.search(r"addr=(127\.0\.0\.1:\d+)", text)
        if m:
            url = "http://" + m.group(1)
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1).read()
                return srv, url
            except OSError:
                pass
        if srv.poll() is not None:
            break
    srv.kill()
    raise RuntimeError("laggard serve did not start; see %s" % log.name)


def run_demo(args, url, mode, tag, work):
    truth = os.path.join(work, "truth-%s-{rank}.jsonl" % tag)
    cmd = [PY, DEMO, "--world", str(args.world), "--steps", str(args.steps), "--seed", str(args.seed),
           "--server", url, "--job", "gh-overhead-%s" % tag, "--collectives", mode, "--validation", "off",
           "--warmup", "0", "--log-every", "100000", "--truth-out", truth]
    if args.pin:
        cmd.append("--pin")
    cmd += args.demo_args.split()
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if p.returncode != 0:
        raise RuntimeError("demo %s exit %d: %s" % (tag, p.returncode, p.stderr[-2000:]))
    rows = []
    for r in range(args.world):
        with open(truth.replace("{rank}", str(r))) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    ms = job_step_times(rows, args.skip)
    return {"mode": mode, "tag": tag, "median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
            "steps": len(ms), "wall_s": round(time.time() - t0, 2), "load": round(os.getloadavg()[0], 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--skip", type=int, default=20, help="leading steps left out (warm-up)")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--greyhound-interval", default="0",
                    help="laggard serve -greyhound-interval; 0 (default) turns the controller off: the server shares "
                         "this machine's cores with the pinned ranks, and only the capture arm has calls for it to "
                         "analyse, so its CPU would be charged to the client")
    ap.add_argument("--demo-args", default="", help='more ddp_demo.py flags, e.g. "--dim 256 --seq 64"')
    ap.add_argument("--out-name", default="overhead", help="results file stem")
    ap.add_argument("--max-load", type=float, default=3.0)
    ap.add_argument("--wait", type=float, default=300.0, help="longest wait for the load to drop, per pair")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--laggard", default=os.path.join(ROOT, "bin", "laggard"))
    ap.add_argument("--results", default=os.path.join(ROOT, "eval", "greyhound", "results"))
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="gh-overhead-")
    srv, url = start_server(args.laggard, work, args.greyhound_interval)
    runs, pairs = [], []
    try:
        for i in range(args.pairs):
            load = wait_load(args.max_load, args.wait)
            pair = {"index": i, "load_before": round(load, 2)}
            for mode in pair_order(i):
                r = run_demo(args, url, mode, "p%d-%s" % (i, mode), work)
                runs.append(r)
                pair[mode] = r["median_ms"]
                print("[overhead] pair %d %s: median %.3f ms (load %.2f)" % (i, mode, r["median_ms"], r["load"]),
                      file=sys.stderr, flush=True)
            pairs.append(pair)
    finally:
        srv.terminate()
        srv.wait(10)
    s = summarize(pairs)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, args.out_name + ".json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items() if k != "results"}, "runs": runs, "pairs": pairs,
                   "summary": s, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f, indent=1)
    with open(os.path.join(args.results, args.out_name + ".tsv"), "w") as f:
        f.write("pair\torder\tload_before\toff_median_ms\ton_median_ms\trel_pct\n")
        for p, rel in zip(pairs, s["rel_pct"]):
            f.write("%d\t%s\t%.2f\t%.3f\t%.3f\t%+.2f\n" % (p["index"], "/".join(pair_order(p["index"])),
                                                         p["load_before"], p["off"], p["on"], rel))
    lines = ["# Overhead of collective capture (real DDP demo)", "",
             "`eval/greyhound/overhead.py --pairs %d --steps %d --world %d%s%s --greyhound-interval %s` — %d-rank gloo DDP demo against a real "
             "`laggard serve` on this machine (its Greyhound controller off unless the interval is > 0), validation off in both arms, same seed %d, order "
             "alternating, ranks pinned. Step time = gap between consecutive step ends of the slowest rank "
             "(--truth-out), median over steps %d..%d of each run." % (
                 args.pairs, args.steps, args.world, "" if args.pin else " --no-pin",
                 ' --demo-args "%s"' % args.demo_args if args.demo_args else "", args.greyhound_interval, args.world,
                 args.seed,
                 args.skip + 1, args.steps - 1), "",
             "| pair | order | load | off (ms) | on (ms) | on vs off |", "|---|---|---|---|---|---|"]
    for p, rel in zip(pairs, s["rel_pct"]):
        lines.append("| %d | %s | %.2f | %.3f | %.3f | %+.2f%% |" % (
            p["index"], "/".join(pair_order(p["index"])), p["load_before"], p["off"], p["on"], rel))
    lines += ["", "Median of the paired relative differences: **%+.2f%%** (paper: 0.39%%). Median step time "
              "off %.3f ms, on %.3f ms." % (s["median_rel_pct"], s["median_off_ms"], s["median_on_ms"])]
    with open(os.path.join(args.results, args.out_name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
