#!/usr/bin/python3
"""Overhead of always-on CPU stack sampling on the real DDP demo (issue 8,
evaluation item 3; SysOM-AI §5.1 Table 2: 0.33% at a 10% sampling ratio,
1.72% at 100%).

    sudo /usr/bin/python3 eval/sysom/overhead.py [--ratios 0.01,0.1,1] [--pairs 5] [--steps 400]

For each sampling ratio, each pair runs clients/python/examples/ddp_demo.py
twice with the same seed against a real `laggard serve` on loopback: once with
no agent ("off") and once with `laggard agent` profiling at that ratio of the
99 Hz timer ("on"; OS counters and the registration socket on as in
production, so the arm measures the whole agent). The order alternates
between pairs; ranks are pinned. Before each pair the script waits for the
1-minute load average to drop below --max-load.

Step time per run: the gap between consecutive step ends of the slowest rank
(--truth-out), median over the steps after --skip (the same measure as
eval/greyhound/overhead.py, whose helpers this script imports). Result per
ratio: the median over pairs of (on − off)/off. Beside it, the direct cost:
the agent's own CPU time per second of run (user+system from /proc, which
includes the drain and symbol-free aggregation) and its peak RSS (VmHWM),
which do not depend on step-time noise. Rows go to
eval/sysom/results/overhead.{tsv,md,json}.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "eval", "greyhound"))
import overhead as gh  # noqa: E402  (shared pure helpers: step times, pair order, summary, server start)

DEMO = gh.DEMO
PY = gh.PY
HZ = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    """user+system CPU seconds of a live process (fields 14, 15 of stat)."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / HZ


def proc_hwm_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_demo(args, url, tag, work, env):
    truth = os.path.join(work, "truth-%s-{rank}.jsonl" % tag)
    cmd = [PY, DEMO, "--world", str(args.world), "--steps", str(args.steps), "--seed", str(args.seed),
           "--server", url, "--job", "sysom-overhead-%s" % tag, "--warmup", "0", "--log-every", "100000",
           "--truth-out", truth, "--pin"] + args.demo_args.split()
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError("demo %s exit %d: %s" % (tag, p.returncode, p.stderr[-2000:]))
    rows = []
    for r in range(args.world):
        with open(truth.replace("{rank}", str(r))) as f:
            rows += [json.loads(line) for line in f if line.strip()]
    ms = gh.job_step_times(rows, args.skip)
    return {"tag": tag, "median_ms": statistics.median(ms), "steps": len(ms), "wall_s": round(time.time() - t0, 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratios", default="0.01,0.1,1")
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--skip", type=int, default=20)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--demo-args", default="")
    ap.add_argument("--max-load", type=float, default=3.0)
    ap.add_argument("--wait", type=float, default=300.0)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--laggard", default=os.path.join(ROOT, "bin", "laggard"))
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--out-name", default="overhead")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("overhead.py needs root (the eBPF profiler)")
    work = tempfile.mkdtemp(prefix="sysom-overhead-")
    srv, url = gh.start_server(args.laggard, work, "0")
    rows, runs = [], []
    try:
        for ratio in [float(x) for x in args.ratios.split(",")]:
            pairs, agent_cpu, agent_hwm = [], [], []
            for i in range(args.pairs):
                load = gh.wait_load(args.max_load, args.wait)
                pair = {"index": i, "ratio": ratio, "load_before": round(load, 2)}
                for mode in gh.pair_order(i):
                    tag = "r%g-p%d-%s" % (ratio, i, mode)
                    env = dict(os.environ)
                    agent = None
                    if mode == "on":
                        sock = os.path.join(work, "agent-%s.sock" % tag)
                        agent = subprocess.Popen([args.laggard, "agent", "-server", url, "--socket", sock,
                                                  "--profile-hz", str(args.hz), "--profile-ratio", str(ratio)],
                                                 stdout=open(os.path.join(work, "agent-%s.log" % tag), "w"),
                                                 stderr=subprocess.STDOUT)
                        for _ in range(100):
                            if os.path.exists(sock) or agent.poll() is not None:
                                break
                            time.sleep(0.1)
                        if agent.poll() is not None:
                            raise RuntimeError("agent exited; see %s/agent-%s.log" % (work, tag))
                        env["LAGGARD_AGENT_SOCKET"] = sock
                        c0 = proc_cpu_s(agent.pid)
                    r = run_demo(args, url, tag, work, env)
                    if agent is not None:
                        cpu = proc_cpu_s(agent.pid) - c0
                        r["agent_cpu_frac"] = cpu / r["wall_s"]
                        r["agent_hwm_mb"] = proc_hwm_kb(agent.pid) / 1024
                        agent_cpu.append(r["agent_cpu_frac"])
                        agent_hwm.append(r["agent_hwm_mb"])
                        agent.terminate()
                        agent.wait(15)
                    runs.append(r)
                    pair[mode] = r["median_ms"]
                    print("[overhead] ratio %g pair %d %s: %.3f ms" % (ratio, i, mode, r["median_ms"]), file=sys.stderr, flush=True)
                pairs.append(pair)
            s = gh.summarize(pairs)
            rows.append({"ratio": ratio, "pairs": pairs, "summary": s,
                         "agent_cpu_pct_of_one_core": 100 * statistics.median(agent_cpu) if agent_cpu else None,
                         "agent_peak_rss_mb": max(agent_hwm) if agent_hwm else None})
    finally:
        srv.terminate()
        srv.wait(10)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, args.out_name + ".json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows, "runs": runs, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f, indent=1)
    lines = ["# Overhead of always-on CPU stack sampling (real DDP demo)", "",
             "`eval/sysom/overhead.py --ratios %s --pairs %d --steps %d --world %d` — median of paired (on − off)/off "
             "step time; on = `laggard agent` profiling at %d Hz × ratio, off = no agent." % (
                 args.ratios, args.pairs, args.steps, args.world, args.hz), "",
             "| sampling ratio | pairs (on vs off, %) | median | agent CPU (% of one core) | agent peak RSS (MB) | paper (throughput loss) |",
             "|---|---|---|---|---|---|"]
    paper = {0.01: "0.06%", 0.1: "0.33%", 1.0: "1.72%"}  # Table 2 throughput loss during profiling
    with open(os.path.join(args.results, args.out_name + ".tsv"), "w") as f:
        f.write("ratio\tpair\toff_ms\ton_ms\trel_pct\n")
        for row in rows:
            for p, rel in zip(row["pairs"], row["summary"]["rel_pct"]):
                f.write("%g\t%d\t%.3f\t%.3f\t%+.3f\n" % (row["ratio"], p["index"], p["off"], p["on"], rel))
            s = row["summary"]
            lines.append("| %g%% | %s | **%+.2f%%** | %s | %s | %s |" % (
                100 * row["ratio"], " ".join("%+.2f" % x for x in s["rel_pct"]), s["median_rel_pct"],
                "%.3f" % row["agent_cpu_pct_of_one_core"] if row["agent_cpu_pct_of_one_core"] is not None else "—",
                "%.0f" % row["agent_peak_rss_mb"] if row["agent_peak_rss_mb"] is not None else "—",
                paper.get(row["ratio"], "")))
    with open(os.path.join(args.results, args.out_name + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
