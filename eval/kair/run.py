#!/usr/bin/python3
"""KAIR evaluation on real triggered captures (issue 9, Evaluation).

For each case × world × seed it runs the DDP demo
(clients/python/examples/ddp_demo.py, gloo on CPU, laggard client with
collectives, Greyhound validation and triggered operator capture on), every
rank in its own network namespace (eval/greyhound/realrun.py's Net: veth
pairs on a bridge, gloo bound to the veth; one rank per namespace through
eval/greyhound/netns_rank.py), against a fresh `laggard serve`. One fault
starts on a hidden rank at step --onset; the server's AUTO trigger is
expected to open a capture; the harness records which signal fired and
when, falls back to a manual POST …/captures only if no capture opened
within --manual-after steps of the onset (the row says so), waits for the
uploads, then reads GET …/kair, …/kair/timeline, …/report (StageFrontier)
and …/greyhound and writes one JSON row to results/runs.jsonl.

    sudo /usr/bin/python3 eval/kair/run.py                       # full matrix: 4 faults + control × {4,8} × seeds 1,2,3
    sudo /usr/bin/python3 eval/kair/run.py --cases slow_op --worlds 4 --seeds 1   # one run
    sudo /usr/bin/python3 eval/kair/run.py --dry-run --cases data --worlds 4      # demo + faults only, no server
    /usr/bin/python3 eval/kair/table.py                          # results/summary.md from runs.jsonl

Cases (hidden rank F = random.Random(seed*1009+world).randrange(world)):
  slow_op          demo --fault forward_compute: a real extra matmul (~--delay-ms)
                   inside enc.layers.0.linear1's forward on F
  late_collective  demo --fault backward_comm: F's DDP comm hook sleeps
                   --delay-ms before its gradient allreduce (late entry)
  data             demo --fault data: F sleeps --delay-ms after next(loader)
  slow_link        tc tbf --rate on both directions of F's veth from the onset
  none             control: no fault; a manual capture at step --onset

Needs root (namespaces, tc), ip/tc, /usr/bin/python3 with torch, go (or
--laggard BIN). Namespaces, tc qdiscs, the proxy, the server and the ranks
are removed on every exit path (realrun.cleanup). Each run is bounded by
--timeout seconds.
"""

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GH = os.path.join(ROOT, "eval", "greyhound")
sys.path.insert(0, GH)
sys.path.insert(0, HERE)

import realrun  # noqa: E402  (eval/greyhound: netns + tc + server start)
import score  # noqa: E402
from proxy import TeeProxy  # noqa: E402

RESULTS = os.path.join(HERE, "results")
CASES = ("slow_op", "late_collective", "data", "slow_link", "none")


def hidden_rank(world, seed):
    return random.Random(seed * 1009 + world).randrange(world)


def fetch(url, token, path, method="GET", body=None, timeout=60):
    """(status, bytes); never raises on HTTP errors."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


def jget(url, token, path, timeout=60):
    st, b = fetch(url, token, path, timeout=timeout)
    if st != 200:
        return st, None, b.decode("utf-8", "replace")[:300]
    try:
        return st, json.loads(b), ""
    except ValueError as e:
        return st, None, "bad JSON: %s" % e


def serve_flags(exe):
    """The serve flags this run uses, limited to the ones the binary has."""
    p = subprocess.run([exe, "serve", "-h"], capture_output=True, text=True, timeout=30)
    helptext = p.stdout + p.stderr
    want = [("-greyhound-interval", "1s"), ("-kair-cooldown", "5s")]  # captures are asked by the incident escalation (issue 17)
    out, missing = [], []
    for f, v in want:
        if (f + " ") in helptext or (f + "\n") in helptext or ("-" + f.lstrip("-") + " ") in helptext:
            out += [f, v]
        else:
            missing.append(f)
    return out, missing


def read_fault_log(path):
    """{step: [(t0_rel_ns, t1_rel_ns)]} relative to the step enter; first onset ns."""
    out, first = {}, None
    if not os.path.exists(path):
        return out, None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            out.setdefault(r["step"], []).append((r["t0_ns"] - r["step_t0_ns"], r["t1_ns"] - r["step_t0_ns"]))
            if first is None:
                first = r["step_t0_ns"]
    return out, first


def step_times(logs_by_step, a, b):
    vals = dict(realrun.step_series(logs_by_step))
    xs = [vals[s] for s in range(a, b) if s in vals]
    return round(statistics.median(xs), 2) if xs else None


def step_at(logs0, ns):
    """Rank-0 step running at ns (first step whose end ≥ ns)."""
    for s in sorted(logs0):
        if logs0[s][0] >= ns:
            return s
    return max(logs0) if logs0 else None


def gz_json(path, obj):
    with gzip.open(path, "wt") as f:
        json.dump(obj, f)


def run_one(args, exe, extra, case, world, seed, run_no):
    fr = hidden_rank(world, seed) if case != "none" else -1
    name = "%s-w%d-s%d" % (case, world, seed)
    job = "gh-real-kair-%s-%d" % (name, int(time.time()))  # gh-real-*: realrun.start_server's token scope
    work = tempfile.mkdtemp(prefix="kair-eval-")
    fault = score.CASES[case]
    row = {"case": case, "fault": fault, "world": world, "seed": seed, "fault_rank": fr, "onset_step": args.onset,
           "delay_ms": args.delay_ms if case != "slow_link" else None, "rate": args.rate if case == "slow_link" else None,
           "job": job, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": round(os.getloadavg()[0], 2),
           "dry_run": bool(args.dry_run), "serve_flags": extra, "device_ms": args.device_ms, "tag": args.tag}
    net = realrun.Net(world)
    logs = [os.path.join(work, "steps.rank%d" % r) for r in range(world)]
    flog = os.path.join(work, "fault{rank}.jsonl")
    t_start = time.time()
    try:
        with realrun.cleanup(net) as cl:
            net.up()
            if args.dry_run:
                url, token, proxy = "http://%s:9" % realrun.HOST_IP, "none", None
            else:
                port = 7100 + (os.getpid() + 2 * run_no) % 400
                srv, url, token = realrun.start_server(exe, work, port, extra)
                cl.closers.append(lambda: (srv.terminate(), srv.wait(10)))
                if getattr(args, "on_start", None):  # eval/incidents watches the server's incidents
                    args.on_start(url, token, job)
                proxy = TeeProxy(realrun.HOST_IP, 0, url, os.path.join(work, "uploads")).start()
                cl.closers.append(proxy.close)
            master = 29500 + (os.getpid() + run_no) % 400
            demo = ["--world", str(world), "--steps", str(args.max_steps), "--fault-rank", str(fr), "--job", job,
                    "--server", proxy.url if proxy else url, "--warmup", "0", "--seed", str(seed),
                    "--log-every", "1000", "--dim", str(args.dim), "--fault-log", flog, "--timeout", "120",
                    "--validation-timeout", "60", "--device-ms", str(args.device_ms)]
            if args.dry_run:
                demo += ["--out", os.path.join(work, "{job}.jsonl"), "--collectives", "off", "--validation", "off",
                         "--capture", "off"]
            else:
                demo += ["--collectives", "on", "--validation", "on", "--capture", "on"]
            if fault != "none":
                demo += ["--fault", fault, "--fault-start", str(args.onset), "--delay-ms", str(args.delay_ms)]
            os.makedirs(os.path.join(work, "capdir"), exist_ok=True)
            env = dict(os.environ, LAGGARD_TOKEN=token, LAGGARD_CAPTURE="0" if args.dry_run else "1",
                       LAGGARD_CAPTURE_DIR=os.path.join(work, "capdir"), LAGGARD_CAPTURE_POLL_S="1")
            procs = []
            for r in range(world):
                cmd = realrun.in_ns(r, realrun.PY, os.path.join(GH, "netns_rank.py"), "--rank", str(r), "--master",
                                    "%s:%d" % (realrun.rank_ip(0), master), "--iface", realrun.veth_ns(r),
                                    "--step-log", logs[r], "--", *demo)
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
                        p.wait()
            cl.closers.append(stop_ranks)
            monitor(args, row, case, fr, procs, logs, flog, net, url, token, job, work)
            stop_ranks()
            logs_by_step = realrun.read_step_logs(logs)
            row["steps_run"] = max(logs_by_step) + 1 if logs_by_step else 0
            row["base_ms"] = step_times(logs_by_step, max(5, args.onset - 20), args.onset)
            row["fault_ms"] = step_times(logs_by_step, args.onset + 2, row["steps_run"])
            row["rank_exit"] = [p.returncode for p in procs]
            if not args.dry_run:
                analyse(args, row, case, fr, url, token, job, work, flog, logs_by_step)
                if proxy is not None:
                    row["uploads"] = [{"capture": c, "rank": r, "bytes": n, "headers": h}
                                      for c, r, _, n, h in proxy.saved]
                    save_traces(args, row, case, world, proxy)
            else:
                truth, _ = read_fault_log(flog.replace("{rank}", str(fr)))
                row["fault_log_steps"] = len(truth)
                row["fault_log_ms"] = round(statistics.median([(b - a) / 1e6 for v in truth.values() for a, b in v]), 2) \
                    if truth else None
            for r in range(world):
                shutil.copy(os.path.join(work, "rank%d.err" % r), os.path.join(work, "rank%d.log" % r))
    except Exception as e:  # the row records the failure; the matrix goes on
        row["error"] = "%s: %s" % (type(e).__name__, e)
    row["wall_s"] = round(time.time() - t_start, 1)
    row["load_after"] = round(os.getloadavg()[0], 2)
    row["work"] = work
    return row


def gh_phase(g):
    return ((g or {}).get("controller") or {}).get("phase")


def trimmed(ans, keep=50):
    """The /kair answer with each step report's outliers cut to the top
    `keep` (the full lists run to thousands of instances per step)."""
    rep = dict(ans.get("report") or {})
    srs = []
    for sr in rep.get("step_reports") or []:
        sr = dict(sr)
        out = sr.get("outliers") or []
        sr["outliers_total"] = len(out)
        sr["outliers"] = out[:keep]
        srs.append(sr)
    rep["step_reports"] = srs
    return dict(ans, report=rep)


def monitor(args, row, case, fr, procs, logs, flog, net, url, token, job, work):
    """Drives one run: shapes the link at the onset, watches captures,
    falls back to a manual capture, waits for uploads and a Greyhound
    verdict; all bounded by --timeout."""
    deadline = time.time() + args.timeout
    t_on = None
    chosen = None
    pre = []
    fallback = False
    gh_last = None
    done_at = None
    next_poll = 0.0
    flog_f = flog.replace("{rank}", str(fr))
    while True:
        now = time.time()
        if now > deadline:
            row["timeout"] = True
            break
        if all(p.poll() is not None for p in procs):
            row["ranks_ended_early"] = True
            break
        l0 = realrun.read_step_logs(logs[:1])
        last = max(l0) if l0 else -1
        if t_on is None:
            if case == "slow_link":
                if last + 1 >= args.onset:
                    net.shape(fr, args.rate)
                    t_on = time.time_ns()
            elif case == "none":
                if last + 1 >= args.onset:  # control: a manual capture of healthy steps
                    t_on = time.time_ns()
                    if not args.dry_run:
                        st, b = fetch(url, token, "/api/v1/jobs/%s/captures" % job, method="POST",
                                      body={"reason": "eval control: no fault"}, timeout=10)
                        if st == 201:
                            chosen = json.loads(b)
                        else:
                            row.setdefault("fallback_errors", []).append("%d %s" % (st, b[:200].decode("utf-8", "replace")))
            else:
                _, first = read_fault_log(flog_f)
                if first is not None:
                    t_on = first
            if t_on is not None:
                row["onset_ns"] = t_on
        if args.dry_run:
            if t_on is not None and last >= args.onset + args.dry_steps:
                break
            time.sleep(0.2)
            continue
        if now >= next_poll:
            next_poll = now + 1.0
            st, caps, err = jget(url, token, "/api/v1/jobs/%s/captures" % job, timeout=10)
            row["captures_http"] = st  # the last answer (404 until the job registers)
            for c in (caps or {}).get("captures") or []:
                if t_on is not None and c.get("created_ns", 0) >= t_on:
                    if chosen is None or c["id"] == chosen["id"] or c.get("created_ns", 0) < chosen.get("created_ns", 0):
                        chosen = c
                elif c["id"] not in [p["id"] for p in pre]:
                    pre.append({"id": c["id"], "trigger": c.get("trigger"), "reason": c.get("reason"),
                                "start_step": c.get("start_step"), "created_ns": c.get("created_ns")})
            if chosen is not None:
                cur = [c for c in (caps or {}).get("captures") or [] if c["id"] == chosen["id"]]
                if cur:
                    chosen = cur[0]
            if chosen is None and t_on is not None and not fallback and (
                    last >= args.onset + args.manual_after or now - t_on / 1e9 > args.manual_after_s):
                st, b = fetch(url, token, "/api/v1/jobs/%s/captures" % job, method="POST",
                              body={"reason": "eval fallback: no auto capture within %d steps of the onset" % args.manual_after},
                              timeout=10)
                if st == 201:
                    fallback = True
                    chosen = json.loads(b)
                else:
                    row.setdefault("fallback_errors", []).append("%d %s" % (st, b[:200].decode("utf-8", "replace")))
            if chosen is not None and chosen.get("state") in ("complete", "partial", "expired", "cancelled") \
                    and done_at is None:
                done_at = now
            st, g, _ = jget(url, token, "/api/v1/jobs/%s/greyhound" % job, timeout=10)
            if st == 200 and g is not None:
                gh_last = g
                if gh_phase(g) == "verdict" and "gh_verdict_ns" not in row:
                    row["gh_verdict_ns"] = time.time_ns()
            if done_at is not None:
                gh_done = gh_phase(gh_last) == "verdict"
                # args.hold_s (eval/incidents): watch the fault at least this
                # long after the onset, so other observers see it as long.
                held = t_on is None or now - t_on / 1e9 >= getattr(args, "hold_s", 0)
                if (gh_done or now - done_at > args.gh_wait) and held:
                    break
        time.sleep(0.2)
    row["pre_onset_captures"] = pre
    row["capture"] = None
    if chosen is not None:
        l0 = realrun.read_step_logs(logs[:1])
        c = chosen
        row["capture"] = {"id": c.get("id"), "trigger": c.get("trigger"), "reason": c.get("reason"),
                          "fallback": fallback, "state": c.get("state"), "start_step": c.get("start_step"),
                          "steps": c.get("steps"), "every": c.get("every"), "ranks": c.get("ranks"),
                          "uploaded": c.get("uploaded"), "failed": c.get("failed"), "created_ns": c.get("created_ns")}
        if t_on is not None and c.get("created_ns"):
            row["capture"]["after_onset_s"] = round((c["created_ns"] - t_on) / 1e9, 2)
            s = step_at(l0, c["created_ns"])
            row["capture"]["after_onset_steps"] = None if s is None else s - args.onset
    row["greyhound_raw"] = gh_last
    with open(os.path.join(work, "greyhound.json"), "w") as f:
        json.dump(gh_last, f)


def analyse(args, row, case, fr, url, token, job, work, flog, logs_by_step):
    out = os.path.join(args.results, "runs", "%s-w%d-s%d%s" % (case, row["world"], row["seed"],
                                                               "-" + args.tag if args.tag else ""))
    os.makedirs(out, exist_ok=True)
    gh = row.pop("greyhound_raw", None)
    row["greyhound"] = score.greyhound(gh, case, fr)
    if gh is not None:
        gz_json(os.path.join(out, "greyhound.json.gz"), gh)
    last = row.get("steps_run", 0) - 1
    st, rep, err = jget(url, token, "/api/v1/jobs/%s/report?from=%d&to=%d" % (job, args.onset, max(last, args.onset)))
    row["stagefrontier"] = score.stagefrontier(rep, fr) if rep else {"outcome": "error", "error": "%d %s" % (st, err)}
    if rep is not None:
        gz_json(os.path.join(out, "report.json.gz"), rep)
    cap = row.get("capture")
    if not cap:
        row["kair_error"] = "no capture"
        return
    st, ans, err = jget(url, token, "/api/v1/jobs/%s/kair?capture=%s" % (job, cap["id"]), timeout=120)
    if ans is None:
        row["kair_error"] = "%d %s" % (st, err)
        return
    gz_json(os.path.join(out, "kair.json.gz"), trimmed(ans))
    gz_json(os.path.join(work, "kair_full.json.gz"), ans)  # for re-scoring (--keep)
    kr = ans.get("report") or {}
    c2 = ans.get("capture") or {}
    cap["state"], cap["uploaded"], cap["failed"] = c2.get("state", cap["state"]), c2.get("uploaded"), c2.get("failed")
    rh = kr.get("rhythm") or {}
    row["kair"] = {"verdict": kr.get("verdict"), "headline": kr.get("headline"), "analysed": kr.get("analysed"),
                   "ranks": kr.get("ranks"), "events": kr.get("events"),
                   "clock": [{k: c.get(k) for k in ("rank", "method", "offset_ns", "residual_ns", "violations")}
                             for c in kr.get("clock") or []],
                   "rhythm": {k: rh.get(k) for k in ("verdict", "straggler", "why", "score", "p", "order", "agreement")}}
    truth, _ = read_fault_log(flog.replace("{rank}", str(fr)))
    timelines = {}
    for s in kr.get("analysed") or []:
        if case != "slow_link" and s not in truth:
            continue
        st, tl, err = jget(url, token, "/api/v1/jobs/%s/kair/timeline?capture=%s&step=%d" % (job, cap["id"], s))
        if tl is None:
            row.setdefault("timeline_errors", []).append("step %d: %d %s" % (s, st, err))
            continue
        gz_json(os.path.join(work, "timeline-%d.json.gz" % s), tl)
        timelines[s] = tl
    score_run(row, case, fr, kr, timelines, truth)


def score_run(row, case, fr, kr, timelines, truth):
    """Stages 1–3 and the side-by-side from the /kair report, the hidden
    rank's timelines ({step: answer}) and the fault log ({step: intervals})."""
    v, named, outcome = score.stage1(kr, fr)
    order = ((kr or {}).get("rhythm") or {}).get("order") or []
    # Where F sits in the score ranking even when the verdict is withheld.
    row["stage1"] = {"verdict": v, "named": named, "outcome": outcome, "top": order[0] if order else None,
                     "f_position": order.index(fr) if fr in order else None}
    dur_all, gap_all, coll_all = set(), set(), set()
    by_step = {}
    tl_trunc = False
    for s, tl in sorted(timelines.items()):
        tl_trunc = tl_trunc or bool(tl.get("truncated"))
        dur, gap, coll = score.truth_sets(case, score.rank_events(tl, fr), truth.get(s, []))
        by_step[s] = score.expected_set(case, dur, gap, coll)
        dur_all |= dur
        gap_all |= gap
        coll_all |= coll
    row["truth"] = {"steps": sorted(by_step), "fault_steps_logged": len(truth),
                    "injected_ms": round(statistics.median([(b - a) / 1e6 for v in truth.values() for a, b in v]), 2)
                    if truth else None,
                    "dur_ops": sorted({n for _, n, _ in dur_all}), "gap_ops": sorted({n for _, n, _ in gap_all}),
                    "timeline_truncated": tl_trunc}
    row["stage2"] = score.stage2(kr, fr, by_step)
    row["stage3"] = score.stage3(kr, case, fr, dur_all, gap_all, coll_all)
    row["agreement"] = score.agreement(outcome, (row.get("stagefrontier") or {}).get("outcome"),
                                       (row.get("greyhound") or {}).get("outcome"))
    if "gh_verdict_ns" in row and row.get("onset_ns"):
        row["greyhound"]["verdict_after_onset_s"] = round((row.pop("gh_verdict_ns") - row["onset_ns"]) / 1e9, 2)


def rescore(rows_path):
    """Recomputes truth and Stages 1–3 of every row whose work directory
    was kept (--keep): after a change to score.py, without rerunning."""
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    n = 0
    for row in rows:
        w = row.get("work") or ""
        kp = os.path.join(w, "kair_full.json.gz")
        if not os.path.exists(kp):
            continue
        kr = (json.load(gzip.open(kp)) or {}).get("report") or {}
        timelines = {}
        for f in os.listdir(w):
            if f.startswith("timeline-") and f.endswith(".json.gz"):
                timelines[int(f[len("timeline-"):-len(".json.gz")])] = json.load(gzip.open(os.path.join(w, f)))
        truth, _ = read_fault_log(os.path.join(w, "fault%d.jsonl" % row["fault_rank"]))
        score_run(row, row["case"], row["fault_rank"], kr, timelines, truth)
        n += 1
    with open(rows_path + ".tmp", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(rows_path + ".tmp", rows_path)
    print("[kair] rescored %d of %d rows in %s" % (n, len(rows), rows_path), file=sys.stderr)


def save_traces(args, row, case, world, proxy):
    """One small real capture per case at 4 ranks (the first run that has
    one) → results/traces/<case>/rank<R>.json.gz (≤ --trace-kib each)."""
    if world != 4 or not row.get("capture") or args.tag:
        return
    d = os.path.join(args.results, "traces", case)
    if os.path.exists(os.path.join(d, "capture.json")) and not args.overwrite_traces:
        return
    mine = [(r, p, n) for c, r, p, n, _ in proxy.saved if c == row["capture"]["id"]]
    if len(mine) < 2:
        return
    os.makedirs(d, exist_ok=True)
    kept = []
    for r, p, n in sorted(mine):
        dst = os.path.join(d, "rank%d.json.gz" % r)
        if p.endswith(".json.gz"):
            shutil.copy(p, dst)
        elif p.endswith(".json"):
            with open(p, "rb") as fi, gzip.open(dst, "wb") as fo:
                shutil.copyfileobj(fi, fo)
        else:
            continue
        size = os.path.getsize(dst)
        if size > args.trace_kib * 1024:
            os.remove(dst)
            row.setdefault("notes", "")
            row["notes"] += "rank %d trace %d KiB > %d KiB, not saved " % (r, size // 1024, args.trace_kib)
            continue
        kept.append({"rank": r, "file": os.path.basename(dst), "bytes": size})
    with open(os.path.join(d, "capture.json"), "w") as f:
        json.dump({"case": case, "fault": row["fault"], "world": world, "seed": row["seed"],
                   "fault_rank": row["fault_rank"], "onset_step": row["onset_step"], "delay_ms": row.get("delay_ms"),
                   "rate": row.get("rate"), "capture": row["capture"], "files": kept,
                   "headers": {str(r): h for c, r, _, _, h in proxy.saved if c == row["capture"]["id"]}}, f, indent=1)
    row["traces_saved"] = d


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--worlds", default="4,8")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--onset", type=int, default=30, help="first faulty step")
    ap.add_argument("--delay-ms", type=float, default=120.0, help="injected delay (slow_op: matmul sized to it)")
    ap.add_argument("--rate", default="50mbit", help="slow_link: tc tbf rate on the hidden rank's veth")
    ap.add_argument("--dim", type=int, default=64, help="demo model width")
    ap.add_argument("--device-ms", type=float, default=0.0,
                    help="demo --device-ms: every rank sleeps this long per step (a GPU-wait stand-in: less CPU contention)")
    ap.add_argument("--tag", default="", help="suffix of the per-run result directories (variants)")
    ap.add_argument("--max-steps", type=int, default=100000, help="demo --steps (the harness stops it)")
    ap.add_argument("--manual-after", type=int, default=150, help="steps after the onset before the manual fallback")
    ap.add_argument("--manual-after-s", type=float, default=60.0, help="…or seconds after the onset")
    ap.add_argument("--gh-wait", type=float, default=40.0, help="seconds to wait for a Greyhound verdict after the capture")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    ap.add_argument("--dry-run", action="store_true", help="demo + faults in namespaces only, no server")
    ap.add_argument("--dry-steps", type=int, default=8, help="dry run: steps after the onset")
    ap.add_argument("--laggard", default="", help="laggard binary (default: go build into a temp dir)")
    ap.add_argument("--results", default=RESULTS)
    ap.add_argument("--out", default="", help="rows file (default: <results>/runs.jsonl)")
    ap.add_argument("--trace-kib", type=int, default=300)
    ap.add_argument("--overwrite-traces", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep each run's work directory")
    ap.add_argument("--rescore", action="store_true", help="only re-score the rows file from kept work directories")
    args = ap.parse_args(argv)
    if args.rescore:
        rescore(args.out or os.path.join(args.results, "runs.jsonl"))
        return 0
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, tc)")
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            ap.error("%s not found (apt-get install iproute2)" % tool)
    held = realrun.lock()  # noqa: F841 (same namespace names as the Greyhound harness)
    os.chdir(ROOT)
    exe, extra = "", []
    if not args.dry_run:
        exe = args.laggard or realrun.build_laggard(tempfile.mkdtemp(prefix="kair-laggard-"))
        extra, missing = serve_flags(exe)
        if missing:
            print("[kair] serve lacks %s; running without them" % ", ".join(missing), file=sys.stderr)
    os.makedirs(args.results, exist_ok=True)
    rows_path = args.out or os.path.join(args.results, "dry_runs.jsonl" if args.dry_run else "runs.jsonl")
    run_no = 0
    for world in [int(w) for w in args.worlds.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            for case in args.cases.split(","):
                if case not in CASES:
                    ap.error("unknown case %r (want %s)" % (case, ", ".join(CASES)))
                row = run_one(args, exe, extra, case, world, seed, run_no)
                run_no += 1
                with open(rows_path, "a") as f:  # kept even if a later run is killed
                    f.write(json.dumps(row) + "\n")
                brief = {k: row.get(k) for k in ("case", "world", "seed", "fault_rank", "wall_s", "error")}
                brief.update({k: (row.get(k) or {}).get("outcome") for k in ("stage1", "stagefrontier", "greyhound")})
                brief["stage3"] = (row.get("stage3") or {}).get("top_class")
                brief["trigger"] = (row.get("capture") or {}).get("trigger")
                print("[kair] %s" % json.dumps(brief), file=sys.stderr, flush=True)
                if not args.keep and not row.get("error"):
                    shutil.rmtree(row["work"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
