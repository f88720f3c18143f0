#!/usr/bin/python3
"""Greyhound localization and end-to-end reaction on real runs (issue 7,
evaluation: "Localization" and "Reaction time").

Each run is the DDP demo (gloo, CPU) at --world ranks, every rank in its own
network namespace joined by a veth pair to a bridge, gloo bound to the veth
(realrun.py's Net), posting stage vectors, collective calls and validation
results to a real `laggard serve` whose Greyhound controller runs every
--interval. One fault is injected on --fault-rank during steps
[--onset, --onset + --fault-steps):

  hog    --hogs busy processes pinned to the fault rank's core (the demo's
         own --hog-rank, so it starts and stops on exact steps)
  sleep  --sleep-ms in the fault rank's forward stage (--sleep-rank)
  link   tc tbf at --rate on both directions of the fault rank's veth
  none   no fault (control)

Core layout: the fault rank runs alone on the last core and the other ranks
share the rest (on a 2-core box: ranks 0,2,3 on core 0, rank 1 on core 1),
so a hog on "the fault rank's core" slows that rank only.

    sudo /usr/bin/python3 eval/greyhound/localize.py run --scenario hog,sleep,link,none --seeds 1,2
    /usr/bin/python3 eval/greyhound/localize.py score      # re-score saved runs, write the tables

Per run it writes eval/greyhound/results/real/loc-<scenario>-s<seed>/:
run.json (schedule, injection time, exit codes), greyhound.json (the final
GET /api/v1/jobs/{id}/greyhound), timeline.jsonl (the report's phase and
verdict polled during the run), steps.csv (job step time), rank*.log,
serve.log. `score` reads those and writes results/localization.{md,tsv}
and results/reaction_e2e.{md,tsv}.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import realrun  # noqa: E402

RESULTS = os.path.join(ROOT, "eval", "greyhound", "results")
SCENARIOS = ("hog", "sleep", "link", "none")
NAMED_KINDS = ("slow_rank", "slow_link", "late_rank")


# --- pure parts (unit-tested in eval/tests/test_greyhound_localize.py) ------

def core_layout(world, fault_rank, ncpu):
    """Core per rank: the fault rank alone on the last core, the others
    round-robin over the remaining ones (all on core 0 when ncpu = 2); with
    one core everything shares it. fault_rank < 0 (control): the same layout
    as with fault rank 1, so the control is comparable."""
    fr = fault_rank if fault_rank >= 0 else min(1, world - 1)
    if ncpu < 2:
        return [0] * world
    last = ncpu - 1
    out, k = [], 0
    for r in range(world):
        if r == fr:
            out.append(last)
        else:
            out.append(k % last)
            k += 1
    return out


def step_of(step_ends, ns):
    """The step running at time ns: the first step whose end is ≥ ns
    (step_ends: {step: end_ns}); None when ns is after the last end."""
    for s in sorted(step_ends):
        if step_ends[s] >= ns:
            return s
    return None


def first_after(history, t_ns, to_phase):
    """The first controller transition into to_phase at or after t_ns."""
    for tr in history or []:
        if tr.get("to") == to_phase and tr.get("at_ns", 0) >= t_ns:
            return tr
    return None


def episode_start(history, verdict_ns):
    """The last transition into profiling at or before verdict_ns."""
    out = None
    for tr in history or []:
        if tr.get("to") == "profiling" and tr.get("at_ns", 0) <= verdict_ns:
            out = tr
    return out


def verdict_at(timeline, at_ns):
    """The verdict shown by the first polled report at or after at_ns that
    is in phase "verdict" (the transition itself carries only a reason)."""
    for row in timeline:
        if row.get("t_ns", 0) >= at_ns and row.get("phase") == "verdict" and row.get("verdict"):
            return row["verdict"]
    return None


def score(scenario, fault_rank, verdict):
    """correct / partial / withheld / wrong for one run.

    hog, sleep: correct when the verdict names exactly the fault rank
      (slow_rank or late_rank); partial when it names it among others.
    link: correct when it is slow_link and every named link has the fault
      rank as an end; partial when it names only the fault rank as a slow
      rank (right place, wrong kind).
    none (control): correct when nothing is named (no verdict, none,
      uniform, inconclusive); wrong when a rank or link is named.
    Anything that names no rank or link (inconclusive, none, uniform, or no
    verdict before the run ended) is "withheld" for a fault.
    """
    kind = (verdict or {}).get("kind") or ""
    ranks = sorted(set((verdict or {}).get("ranks") or []))
    links = [(l.get("src"), l.get("dst")) for l in (verdict or {}).get("links") or []]
    named = kind in NAMED_KINDS and (ranks or links)
    if scenario == "none":
        return "wrong" if named else "correct"
    if not named:
        return "withheld"
    if scenario == "link":
        if kind == "slow_link" and links and all(fault_rank in l for l in links):
            return "correct"
        if ranks == [fault_rank] and not links:
            return "partial"
        if links and all(fault_rank in l for l in links) and (not ranks or ranks == [fault_rank]):
            return "correct"
        return "wrong"
    if ranks == [fault_rank]:
        return "correct"
    if fault_rank in ranks:
        return "partial"
    return "wrong"


def named_str(verdict):
    if not verdict:
        return "-"
    parts = []
    if verdict.get("ranks"):
        parts.append("rank " + ",".join(str(r) for r in verdict["ranks"]))
    if verdict.get("links"):
        parts.append("link " + ",".join("%d→%d" % (l["src"], l["dst"]) for l in verdict["links"]))
    return "; ".join(parts) or "-"


def evaluate_run(run, report, timeline, step_ends):
    """One scored row from a saved run. run: run.json; report: the final
    greyhound report; timeline: polled rows; step_ends: {step: end_ns} of
    the slowest rank."""
    sc, fr = run["scenario"], run["fault_rank"]
    t_inj = run.get("inject_ns")
    onset = run.get("onset")
    hist = ((report or {}).get("controller") or {}).get("history") or []
    row = {"run": run["name"], "scenario": sc, "seed": run.get("seed"), "injected": injected_str(run),
           "base_ms": run.get("base_ms"), "fault_ms": run.get("fault_ms")}
    if row["base_ms"] and row["fault_ms"]:
        row["slowdown_pct"] = round(100 * (row["fault_ms"] / row["base_ms"] - 1), 1)
    # change point: the first verified onset the final report shows at or
    # after the injection (control: any verified onset).
    t0 = t_inj if t_inj is not None else run.get("start_ns", 0)
    cps = [c for c in (report or {}).get("changepoints") or [] if c.get("kind") == "onset" and c.get("verified", True)]
    after = [c for c in cps if c.get("end_ns", 0) >= t0 - 1]
    row["onsets_total"] = len(cps)
    row["other_onsets"] = len(cps) - (1 if after and sc != "none" else 0)
    cp = after[0] if after and sc != "none" else None
    if cp:
        cs = step_of(step_ends, cp["end_ns"])
        row["cp_step"] = cs
        row["cp_steps"] = None if cs is None or onset is None else cs - onset
        row["cp_s"] = round((cp["end_ns"] - t_inj) / 1e9, 2)
    # detection: the controller leaving tracking (online), verdict: entering verdict.
    ver = first_after(hist, t0, "verdict")
    # The episode behind that verdict opened at the last →profiling before
    # it; one opened before the injection was a false onset that happened
    # to validate during the fault (noted, not counted as a detection).
    det = episode_start(hist, ver["at_ns"]) if ver else first_after(hist, t0, "profiling")
    if det and sc != "none":
        if det["at_ns"] < t0:
            row["note"] = "episode opened %.2f s before the injection (false onset)" % ((t0 - det["at_ns"]) / 1e9)
        else:
            row["detect_s"] = round((det["at_ns"] - t_inj) / 1e9, 2)
            ds = step_of(step_ends, det["at_ns"])
            row["detect_steps"] = None if ds is None or onset is None else ds - onset
    verdict = None
    if ver:
        verdict = verdict_at(timeline, ver["at_ns"]) or ((report or {}).get("verdict") if len(
            [h for h in hist if h.get("to") == "verdict"]) == 1 else None)
        if sc != "none":
            row["verdict_s"] = round((ver["at_ns"] - t_inj) / 1e9, 2)
            vs = step_of(step_ends, ver["at_ns"])
            row["verdict_steps"] = None if vs is None or onset is None else vs - onset
    val = (report or {}).get("validation") or []
    row["validations"] = len(val)
    row["validation_states"] = ",".join(v.get("state", "?") for v in val) or "-"
    row["verdict_kind"] = (verdict or {}).get("kind") or "-"
    row["named"] = named_str(verdict)
    row["verdict_text"] = (verdict or {}).get("text") or ""
    row["score"] = score(sc, fr, verdict)
    row["phases"] = "→".join([hist[0]["from"]] + [h["to"] for h in hist]) if hist else "tracking"
    return row


def injected_str(run):
    sc = run["scenario"]
    if sc == "none":
        return "none"
    what = {"hog": "CPU hog ×%s on rank %d's core" % (run.get("hogs"), run["fault_rank"]),
            "sleep": "sleep %g ms on rank %d" % (run.get("sleep_ms", 0), run["fault_rank"]),
            "link": "tbf %s on rank %d's link" % (run.get("rate"), run["fault_rank"])}[sc]
    return "%s, steps [%d,%d)" % (what, run["onset"], run["onset"] + run["fault_steps"])


def median_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# --- running ----------------------------------------------------------------

def read_timeline(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def summarize(report, t_ns):
    c = (report.get("controller") or {})
    v = report.get("verdict") or {}
    return {"t_ns": t_ns, "phase": c.get("phase"), "verdict": v if v.get("kind") else None,
            "onsets": sum(1 for x in report.get("changepoints") or [] if x.get("kind") == "onset"),
            "validation": [(x.get("id"), x.get("state")) for x in report.get("validation") or []]}


def run_one(args, scenario, seed, exe):
    world, fr = args.world, args.fault_rank
    total = args.onset + args.fault_steps + args.after
    name = "loc-%s-s%d" % (scenario, seed)
    job = "gh-real-%s-%d" % (name, int(time.time()))
    ncpu = os.cpu_count() or 1
    cores = core_layout(world, fr if scenario != "none" else -1, ncpu)
    work = tempfile.mkdtemp(prefix="gh-loc-")
    out = os.path.join(args.results, "real", name)
    os.makedirs(out, exist_ok=True)
    net = realrun.Net(world)
    run = {"name": name, "scenario": scenario, "seed": seed, "world": world, "fault_rank": fr if scenario != "none" else -1,
           "onset": args.onset, "fault_steps": args.fault_steps, "steps": total, "job": job, "cores": cores,
           "interval": args.interval, "hogs": args.hogs, "sleep_ms": args.sleep_ms, "rate": args.rate,
           "demo": {"vocab": args.vocab, "dim": args.dim, "batch": args.batch, "seq": args.seq},
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": os.getloadavg()[0]}
    timeline_path = os.path.join(out, "timeline.jsonl")
    tl = open(timeline_path, "w")
    with realrun.cleanup(net) as cl:
        net.up()
        port = 7070 + os.getpid() % 1000
        srv, url, token = realrun.start_server(exe, work, port, ["-greyhound-interval", args.interval] +
                                               list(getattr(args, "serve_extra", ())))
        cl.closers.append(lambda: (srv.terminate(), srv.wait(10)))
        if getattr(args, "on_start", None):  # eval/incidents watches the server's incidents
            args.on_start(url, token, job)
        master_port = 29500 + os.getpid() % 1000
        logs = [os.path.join(work, "steps.rank%d" % r) for r in range(world)]
        demo = ["--world", str(world), "--steps", str(total), "--fault", "none", "--job", job, "--server", url,
                "--warmup", "0", "--seed", str(seed), "--vocab", str(args.vocab), "--dim", str(args.dim),
                "--batch", str(args.batch), "--seq", str(args.seq), "--log-every", "1000",
                "--collectives", "on", "--validation", "on", "--validation-timeout", "60"]
        if scenario == "hog":
            demo += ["--hog-rank", str(fr), "--hog-from", str(args.onset), "--hog-until",
                     str(args.onset + args.fault_steps), "--hog-procs", str(args.hogs)]
        elif scenario == "sleep":
            demo += ["--sleep-rank", str(fr), "--sleep-ms", str(args.sleep_ms), "--sleep-from", str(args.onset),
                     "--sleep-until", str(args.onset + args.fault_steps)]
        env = dict(os.environ, LAGGARD_TOKEN=token)
        procs = []
        for r in range(world):
            cmd = realrun.in_ns(r, "taskset", "-c", str(cores[r]), realrun.PY, os.path.join(HERE, "netns_rank.py"),
                                "--rank", str(r), "--master", "%s:%d" % (realrun.rank_ip(0), master_port),
                                "--iface", realrun.veth_ns(r), "--step-log", logs[r], "--", *demo)
            procs.append(subprocess.Popen(cmd, env=env, stdout=open(os.path.join(work, "rank%d.out" % r), "w"),
                                          stderr=open(os.path.join(work, "rank%d.err" % r), "w")))

        def stop_ranks():
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        cl.closers.append(stop_ranks)
        run["start_ns"] = time.time_ns()
        deadline = time.time() + args.timeout
        t_on = t_off = None
        next_poll = 0.0
        while any(p.poll() is None for p in procs):
            if time.time() > deadline:
                run["timeout"] = True
                print("[localize] %s: run exceeded --timeout %ds" % (name, args.timeout), file=sys.stderr)
                break
            if scenario == "link":
                done = realrun.read_step_logs(logs[:1])
                last = max(done) if done else -1
                if t_on is None and last + 1 >= args.onset:
                    t_on = time.time_ns()
                    net.shape(fr, args.rate)
                if t_on is not None and t_off is None and last + 1 >= args.onset + args.fault_steps:
                    t_off = time.time_ns()
                    net.unshape(fr)
            if time.time() >= next_poll:
                next_poll = time.time() + args.poll
                st, body = realrun.fetch(url, token, "/api/v1/jobs/%s/greyhound" % job)
                if st == 200:
                    try:
                        tl.write(json.dumps(summarize(json.loads(body), time.time_ns())) + "\n")
                        tl.flush()
                    except ValueError:
                        pass
            time.sleep(0.05)
        run["rank_exit"] = [p.returncode for p in procs]
        # Let the controller finish a round on the last data.
        time.sleep(max(1.0, 2 * float(args.interval.rstrip("s"))))
        st, body = realrun.fetch(url, token, "/api/v1/jobs/%s/greyhound" % job)
        run["greyhound_http"] = st
        if st == 200:
            with open(os.path.join(out, "greyhound.json"), "wb") as f:
                f.write(body)
            tl.write(json.dumps(summarize(json.loads(body), time.time_ns())) + "\n")
        tl.close()
        logs_by_step = realrun.read_step_logs(logs)
        ends = {s: v[0] for s, v in logs_by_step.items()}
        series = realrun.step_series(logs_by_step)
        with open(os.path.join(out, "steps.csv"), "w") as f:
            f.write("step,value\n")
            for s, v in series:
                f.write("%d,%.3f\n" % (s, v))
        with open(os.path.join(out, "step_ends.json"), "w") as f:
            json.dump({str(s): e for s, e in sorted(ends.items())}, f)
        # Injection instant: the start of step onset (= end of step onset-1)
        # on the fault rank for the in-process faults; tc's own instant for the link.
        fr_log = realrun.read_step_logs(logs[fr:fr + 1])
        if scenario in ("hog", "sleep") and (args.onset - 1) in fr_log:
            run["inject_ns"] = fr_log[args.onset - 1][0]
        elif scenario == "link" and t_on is not None:
            run["inject_ns"], run["relief_ns"] = t_on, t_off
        vals = dict(series)
        base = [vals[s] for s in range(max(5, args.onset - 40), args.onset) if s in vals]
        flt = [vals[s] for s in range(args.onset + 5, args.onset + args.fault_steps) if s in vals]
        run["base_ms"] = round(statistics.median(base), 2) if base else None
        run["fault_ms"] = round(statistics.median(flt), 2) if flt else None
        run["load_after"] = os.getloadavg()[0]
        for r in range(world):
            shutil.copy(os.path.join(work, "rank%d.err" % r), os.path.join(out, "rank%d.log" % r))
        shutil.copy(os.path.join(work, "serve.log"), os.path.join(out, "serve.log"))
        with open(os.path.join(out, "run.json"), "w") as f:
            json.dump(run, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)
    print("[localize] %s: exit %s base %s ms fault %s ms" % (name, run["rank_exit"], run["base_ms"], run["fault_ms"]),
          file=sys.stderr)
    return run


# --- scoring / tables -------------------------------------------------------

def load_runs(results):
    rows = []
    for d in sorted(glob.glob(os.path.join(results, "real", "loc-*"))):
        rp = os.path.join(d, "run.json")
        if not os.path.exists(rp):
            continue
        with open(rp) as f:
            run = json.load(f)
        report = None
        gp = os.path.join(d, "greyhound.json")
        if os.path.exists(gp):
            with open(gp) as f:
                report = json.load(f)
        ends = {}
        ep = os.path.join(d, "step_ends.json")
        if os.path.exists(ep):
            with open(ep) as f:
                ends = {int(k): v for k, v in json.load(f).items()}
        rows.append(evaluate_run(run, report, read_timeline(os.path.join(d, "timeline.jsonl")), ends))
    order = {s: i for i, s in enumerate(SCENARIOS)}
    rows.sort(key=lambda r: (order.get(r["scenario"], 9), r.get("seed") or 0))
    return rows


def fmt(v, spec="%s"):
    return "-" if v is None else spec % v


LOC_COLS = ["scenario", "seed", "injected", "base_ms", "fault_ms", "slowdown_pct", "cp_step", "cp_steps", "cp_s",
            "detect_steps", "detect_s", "verdict_kind", "named", "score", "verdict_steps", "verdict_s",
            "validation_states", "other_onsets", "phases", "note"]


def write_tables(rows, results):
    with open(os.path.join(results, "localization.tsv"), "w") as f:
        f.write("\t".join(LOC_COLS + ["verdict_text"]) + "\n")
        for r in rows:
            f.write("\t".join(fmt(r.get(c)) for c in LOC_COLS + ["verdict_text"]) + "\n")
    tally = {}
    for r in rows:
        t = tally.setdefault(r["scenario"], {})
        t[r["score"]] = t.get(r["score"], 0) + 1
    lines = ["# Greyhound localization on real runs", "",
             "Generated by `eval/greyhound/localize.py score` from `results/real/loc-*/` (see README).",
             "world = %s, each rank in its own netns, gloo over veth + bridge; controller interval %s." % (
                 rows[0].get("world", 4) if rows else "?", "see run.json"), "",
             "| scenario | seed | injected | step ms base→fault | change point step (+steps, s) | detect (steps, s) "
             "| verdict | named | correct? | verdict after (steps, s) | validation |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cp = "-" if r.get("cp_step") is None else "%s (+%s, %ss)" % (r["cp_step"], fmt(r.get("cp_steps")), fmt(r.get("cp_s")))
        det = "-" if r.get("detect_s") is None else "%s, %ss" % (fmt(r.get("detect_steps")), r["detect_s"])
        ver = "-" if r.get("verdict_s") is None else "%s, %ss" % (fmt(r.get("verdict_steps")), r["verdict_s"])
        lines.append("| %s | %s | %s | %s→%s (%s%%) | %s | %s | %s | %s | %s | %s | %s |" % (
            r["scenario"], fmt(r.get("seed")), r["injected"], fmt(r.get("base_ms")), fmt(r.get("fault_ms")),
            fmt(r.get("slowdown_pct")), cp, det, r["verdict_kind"], r["named"], r["score"], ver, r["validation_states"]))
    lines += ["", "Tally per scenario: " + "; ".join(
        "%s %s" % (s, ", ".join("%s %d" % kv for kv in sorted(t.items()))) for s, t in tally.items()), "",
        "Scoring (localize.score): hog/sleep correct = the verdict names exactly the injected rank; link correct = "
        "slow_link whose links all end at the injected rank, partial = only that rank as slow_rank; "
        "withheld = no rank or link named (inconclusive / none / uniform / no verdict before the run ended); "
        "control correct = nothing named. Change point = first verified onset in the final report at or after the "
        "injection; other_onsets (tsv) = verified onsets in the final report other than that one (before the "
        "injection, or a further rise during the fault window); detect = controller tracking→profiling; verdict = →verdict (server clock, from the injection "
        "instant: start of the onset step on the fault rank, or tc's instant)."]
    lines += ["", "Verdict texts and notes:", ""] + [
        "- %s s%s: %s%s" % (r["scenario"], r.get("seed"), r["verdict_text"] or "-",
                            " — note: " + r["note"] if r.get("note") else "") for r in rows]
    with open(os.path.join(results, "localization.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # reaction
    faults = [r for r in rows if r["scenario"] != "none"]
    rl = ["# Greyhound end-to-end reaction time (real runs)", "",
          "From the injection instant to (a) the change point's position in the iteration series, (b) the "
          "controller leaving tracking (online detection, server clock) and (c) the verdict. Paper (256 GPUs): "
          "3.7 s to detect, 10.56 s to verdict.", "",
          "| scenario | seed | change point (steps, s) | detection (steps, s) | verdict (steps, s) | verdict kind |",
          "|---|---|---|---|---|---|"]
    for r in faults:
        rl.append("| %s | %s | %s, %s | %s, %s | %s, %s | %s |" % (
            r["scenario"], fmt(r.get("seed")), fmt(r.get("cp_steps")), fmt(r.get("cp_s")), fmt(r.get("detect_steps")),
            fmt(r.get("detect_s")), fmt(r.get("verdict_steps")), fmt(r.get("verdict_s")), r["verdict_kind"]))
    for k, lab in (("cp_s", "change point"), ("detect_s", "detection"), ("verdict_s", "verdict")):
        m = median_or_none([r.get(k) for r in faults])
        n = len([r for r in faults if r.get(k) is not None])
        rl.append("")
        rl.append("Median %s: %s s over %d of %d fault runs (steps: %s)." % (
            lab, fmt(m), n, len(faults), fmt(median_or_none([r.get(k.replace("_s", "_steps")) for r in faults]))))
    with open(os.path.join(results, "reaction_e2e.md"), "w") as f:
        f.write("\n".join(rl) + "\n")
    with open(os.path.join(results, "reaction_e2e.tsv"), "w") as f:
        cols = ["scenario", "seed", "cp_steps", "cp_s", "detect_steps", "detect_s", "verdict_steps", "verdict_s", "verdict_kind"]
        f.write("\t".join(cols) + "\n")
        for r in faults:
            f.write("\t".join(fmt(r.get(c)) for c in cols) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("run", "score", "clean"))
    ap.add_argument("--scenario", default="hog,sleep,link,none")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--onset", type=int, default=60)
    ap.add_argument("--fault-steps", type=int, default=150)
    ap.add_argument("--after", type=int, default=30)
    ap.add_argument("--hogs", type=int, default=4)
    ap.add_argument("--sleep-ms", type=float, default=100.0)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--vocab", type=int, default=16384, help="embedding rows: the dense gradient the link carries")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--interval", default="1s", help="laggard serve -greyhound-interval")
    ap.add_argument("--poll", type=float, default=1.0, help="seconds between report polls")
    ap.add_argument("--timeout", type=int, default=420, help="seconds per run")
    ap.add_argument("--laggard", default=os.path.join(ROOT, "bin", "laggard"))
    ap.add_argument("--results", default=RESULTS)
    args = ap.parse_args(argv)
    if args.what == "score":
        rows = load_runs(args.results)
        write_tables(rows, args.results)
        for r in rows:
            print("%-6s s%s %-9s %-12s %-14s cp %s detect %s verdict %s" % (
                r["scenario"], r.get("seed"), r["score"], r["verdict_kind"], r["named"], r.get("cp_s"),
                r.get("detect_s"), r.get("verdict_s")))
        return 0
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, tc)")
    held = realrun.lock()  # noqa: F841 (held until exit)
    if args.what == "clean":
        realrun.Net(0).down()
        return 0
    if not os.path.exists(args.laggard):
        ap.error("%s not found: run `make build` first" % args.laggard)
    for s in args.scenario.split(","):
        if s not in SCENARIOS:
            ap.error("unknown scenario %r (want %s)" % (s, ", ".join(SCENARIOS)))
    for seed in [int(x) for x in args.seeds.split(",")]:
        for s in args.scenario.split(","):
            run_one(args, s, seed, args.laggard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
