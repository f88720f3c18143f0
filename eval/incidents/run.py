#!/usr/bin/python3
"""Incidents on real runs (issue 17, Evaluation): every existing real-run
harness re-run against a server with the incident layer on, each fault
injected mid-run at a recorded wall time, GET /api/v1/incidents?job=<job>
polled every 0.5 s, and each run scored against its ground truth and
against the single engines' own verdicts on the same run.

    sudo /usr/bin/python3 eval/incidents/run.py --quick                 # one case per harness, one seed
    sudo /usr/bin/python3 eval/incidents/run.py                         # full: every case, seeds 1,2
    sudo /usr/bin/python3 eval/incidents/run.py --harness e3,extra      # a selection
    /usr/bin/python3 eval/incidents/run.py --dry-run                    # the plan, its time estimate, the serve flags
    /usr/bin/python3 eval/incidents/table.py                            # results/runs.jsonl -> the table

Harnesses (re-used by import; eval/incidents/README.md says what each one
injects, where the injection time and the truth come from):
  e3         eval/e3_routing.py's six fault families on the DDP demo, each
             injected mid-run on E3's hidden rank; the demo ships to the
             server through the Python client (E3 itself writes files and
             runs `laggard analyze`)
  greyhound  eval/greyhound/localize.py run_one: hog / sleep / link / none,
             ranks in network namespaces
  sysom      eval/sysom/cases.py run_case: hog / softirq / vfs / logging with
             `laggard agent`
  kair       eval/kair/run.py run_one: slow_op / late_collective / data /
             slow_link / none, ranks in network namespaces
  extra      two faults at once (a data delay on one rank, a CPU hog on
             another, overlapping)

Root is needed for greyhound, sysom and kair (namespaces, tc, eBPF).
"""

import argparse
import importlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.path.dirname(HERE)
ROOT = os.path.dirname(EVAL)
PY = "/usr/bin/python3"
DEMO = os.path.join(ROOT, "clients", "python", "examples", "ddp_demo.py")
RESULTS = os.path.join(HERE, "results")

sys.path.insert(0, HERE)
import score  # noqa: E402  (eval/incidents/score.py; kair's own score module is loaded apart)

for d in (EVAL, os.path.join(EVAL, "greyhound"), os.path.join(EVAL, "sysom")):
    if d not in sys.path:
        sys.path.append(d)

import e3_routing as e3  # noqa: E402
import localize  # noqa: E402  (eval/greyhound; imports realrun)
import realrun  # noqa: E402
import cases as sysom_cases  # noqa: E402  (eval/sysom)


def load_kair():
    """eval/kair/run.py and its score module, loaded under their own names:
    both eval/kair and eval/incidents have a score.py, and kair's run.py
    does `import score`."""
    kdir = os.path.join(EVAL, "kair")
    mine = sys.modules.pop("score", None)
    sys.path.insert(0, kdir)
    try:
        kscore = importlib.import_module("score")
        spec = importlib.util.spec_from_file_location("kair_run", os.path.join(kdir, "run.py"))
        krun = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(krun)  # binds its `score` to kair's
    finally:
        sys.path.remove(kdir)
        sys.modules.pop("score", None)
        if mine is not None:
            sys.modules["score"] = mine
    return krun, kscore


kair_run, kair_score = load_kair()

HARNESSES = ("e3", "greyhound", "sysom", "kair", "extra")
CASES = {
    "e3": list(e3.FAMILY_ORDER),
    "greyhound": list(localize.SCENARIOS),
    "sysom": ["hog", "softirq", "vfs", "logging"],
    "kair": list(kair_run.CASES),
    "extra": ["two_faults"],
}
QUICK = {"e3": "data", "greyhound": "hog", "sysom": "hog", "kair": "slow_op", "extra": "two_faults"}
NEEDS_ROOT = ("greyhound", "sysom", "kair")
# Rough seconds per run on the 2-core box (startup included) for --dry-run's
# estimate; the real figures are in each record's wall_s.
EST_S = {"e3": 42, "greyhound": 55, "sysom": 85, "kair": 55, "extra": 42}


def log(msg):
    print("[incidents] " + msg, file=sys.stderr, flush=True)


# --- HTTP + the watcher --------------------------------------------------------

def get(url, token, path, timeout=10):
    """(status, parsed JSON or None); never raises."""
    headers = {"Authorization": "Bearer " + token} if token else {}
    req = urllib.request.Request(url + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            st = r.status
    except urllib.error.HTTPError as e:
        return e.code, None
    except (OSError, ValueError):
        return 0, None
    try:
        return st, json.loads(body)
    except ValueError:
        return st, None


def sf_summary(rep):
    """StageFrontier's verdict in the job report (the one role group)."""
    groups = (rep or {}).get("groups") or []
    r = (groups[0].get("report") if groups else None) or {}
    h = r.get("headline") or {}
    return {"leader_rank": r.get("leader_rank", -1), "withheld": h.get("withheld") or "", "stage": h.get("stage") or "",
            "top1": r.get("top1") or "", "groups": len(groups), "text": (h.get("text") or "")[:240]}


def gh_summary(rep):
    """Greyhound's controller phase and verdict."""
    v = (rep or {}).get("verdict") or {}
    return {"phase": ((rep or {}).get("controller") or {}).get("phase") or "",
            "verdict": {"kind": v.get("kind") or "", "ranks": sorted(set(v.get("ranks") or [])),
                        "links": [{"src": l.get("src"), "dst": l.get("dst")} for l in v.get("links") or []],
                        "confidence": v.get("confidence") or "", "text": (v.get("text") or "")[:240]} if v.get("kind") else None}


def significant(c):
    """What an incident says, without the figures that move every step."""
    return {k: v for k, v in c.items() if k not in ("lost_s", "lost_steps", "slow_ms", "healthy_ms")}


class Watcher(threading.Thread):
    """Polls GET /api/v1/incidents?job=<job> every poll_s and keeps one
    compact snapshot per change (score.compact), the full single view of
    every incident whenever it changed (GET /api/v1/incidents/{id}), and
    every engines_s StageFrontier's and Greyhound's own verdicts on the
    same job (GET …/report, …/greyhound) — all with the harness clock
    (time.time_ns, the clock the injection is recorded on)."""

    def __init__(self, url, token, job, poll_s=0.5, engines_s=2.0):
        super().__init__(daemon=True)
        self.url, self.token, self.job = url, token, job
        self.poll_s, self.engines_s = poll_s, engines_s
        self.stop_ev = threading.Event()
        self.snapshots, self.engines, self.full = [], [], {}
        self.status = {}
        self.polls = 0
        self.last_ok_ns = 0
        self.last_key = None
        self.latest = []
        self.layer = "unknown"
        self.started_ns = time.time_ns()

    def poll_incidents(self):
        q = urllib.parse.urlencode({"job": self.job})
        st, body = get(self.url, self.token, "/api/v1/incidents?" + q)
        self.polls += 1
        self.status[str(st)] = self.status.get(str(st), 0) + 1
        t = time.time_ns()
        if st == 503:
            self.layer = "off"
        if st != 200 or body is None:
            return
        self.layer = "on"
        self.last_ok_ns = t
        incs = sorted((score.compact(i) for i in body.get("incidents") or []), key=lambda c: c["id"])
        self.latest = incs
        key = [significant(c) for c in incs]
        last_t = self.snapshots[-1]["t_ns"] if self.snapshots else 0
        # A snapshot per change of what the incident says (state, cause,
        # hypotheses, requests, audit), and every 5 s for the growing
        # lost time; milestones read only the former, so they are exact
        # to one poll.
        if key != self.last_key or t - last_t >= 5e9:
            self.snapshots.append({"t_ns": t, "incidents": incs})
        if key != self.last_key:
            before = {k["id"]: k for k in self.last_key or []}
            self.last_key = key
            for k in key:
                if before.get(k["id"]) != k:
                    st2, full = get(self.url, self.token, "/api/v1/incidents/" + urllib.parse.quote(k["id"], safe=""))
                    if st2 == 200 and full is not None:
                        self.full[k["id"]] = full

    def poll_engines(self):
        t = time.time_ns()
        jp = "/api/v1/jobs/" + urllib.parse.quote(self.job, safe="")
        for name, path, summ in (("stagefrontier", jp + "/report", sf_summary), ("greyhound", jp + "/greyhound", gh_summary)):
            st, body = get(self.url, self.token, path, timeout=20)
            k = "%s:%s" % (name, st)
            self.status[k] = self.status.get(k, 0) + 1
            if st != 200 or body is None:
                continue
            s = summ(body)
            prev = next((e for e in reversed(self.engines) if e["engine"] == name), None)
            if prev is None or prev["summary"] != s:
                self.engines.append({"t_ns": t, "engine": name, "summary": s})
            else:
                prev["until_ns"] = t  # still the same verdict at t

    def run(self):
        next_eng = 0.0
        while not self.stop_ev.is_set():
            t0 = time.time()
            self.poll_incidents()
            if self.engines_s > 0 and t0 >= next_eng:
                next_eng = t0 + self.engines_s
                self.poll_engines()
            self.stop_ev.wait(max(0.0, self.poll_s - (time.time() - t0)))

    def stop(self):
        self.stop_ev.set()
        self.join(30)

    def record(self):
        snaps = list(self.snapshots)
        if snaps and self.last_ok_ns > snaps[-1]["t_ns"]:
            snaps.append({"t_ns": self.last_ok_ns, "incidents": self.latest})  # the last poll: observed until
        return {"job": self.job, "poll_s": self.poll_s, "polls": self.polls, "status": self.status, "layer": self.layer,
                "started_ns": self.started_ns, "last_ok_ns": self.last_ok_ns, "snapshots": snaps,
                "engines": self.engines}


class Watch:
    """The on_start hook handed to a harness: starts a Watcher on the
    server and job the harness just started."""

    def __init__(self, args):
        self.args = args
        self.w = None

    def __call__(self, url, token, job):
        self.w = Watcher(url, token, job, poll_s=self.args.poll, engines_s=self.args.engines_every)
        self.w.start()

    def finish(self):
        if self.w is None:
            return {"layer": "not started", "snapshots": [], "engines": []}, {}
        self.w.stop()
        return self.w.record(), self.w.full


# --- engine outcomes on the same run --------------------------------------------

def norm(o):
    return {"correct": "right", "right": "right", "partial": "partial", "withheld": "withheld", "wrong": "wrong"}.get(o, o)


def during(engines, name, t0, t1):
    """The engine's last summary seen during [t0, t1] (t1 None: to the end)."""
    out = None
    for e in engines:
        if e["engine"] != name:
            continue
        seen_to = e.get("until_ns", e["t_ns"])
        if seen_to < t0 or (t1 is not None and e["t_ns"] > t1):
            continue
        out = e["summary"]
    return out


def sf_outcome(summary, faults):
    """StageFrontier named the rank the others wait for (leader_rank): the
    rule of eval/kair/score.py's stagefrontier(): right when it is the
    injected rank, withheld when none, wrong otherwise (control: any)."""
    if summary is None:
        return None
    lr = summary.get("leader_rank", -1)
    lr = -1 if lr is None else lr
    if not faults:
        return "wrong" if lr >= 0 else "right"
    if lr < 0:
        return "withheld"
    ranks = [f["rank"] for f in faults]
    if lr in ranks:
        return "right" if len(faults) == 1 else "partial"
    return "wrong"


def gh_outcome(summary, faults, scenario):
    """Greyhound's verdict scored by eval/greyhound/localize.py's score()."""
    if summary is None:
        return None
    if len(faults) > 1:
        v = summary.get("verdict") or {}
        named = set(v.get("ranks") or [])
        truth = {f["rank"] for f in faults}
        if not named or v.get("kind") not in localize.NAMED_KINDS:
            return "withheld"
        return "wrong" if named - truth else ("right" if named == truth else "partial")
    fr = faults[0]["rank"] if faults else -1
    return norm(localize.score(scenario, fr, summary.get("verdict")))


def absorbed(engines, t0, t1):
    s = during(engines, "stagefrontier", t0, t1)
    return bool(s and s.get("withheld") == "absorbed_in_stage")


# --- step statistics -------------------------------------------------------------

def truth_ends(paths):
    """ddp_demo --truth-out files → {step: end_ns of the slowest rank}. The
    demo writes them block-buffered, so a killed demo loses its last lines
    (step_stats extrapolates over them)."""
    ends = {}
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                ends[r["step"]] = max(ends.get(r["step"], 0), r["end_ns"])
    return ends


def fault_step_ends(ends, inject_ns, end_ns=None):
    """The job's step ends (slowest rank) from the injection to the fault's end."""
    return sorted(e for e in ends.values() if e >= inject_ns and (end_ns is None or e <= end_ns + 1e9))


def step_stats(ends, inject_ns, end_ns=None, stop_ns=None, base_s=20.0):
    """(base_ms, fault_ms, steps_in_fault) from {step: end_ns} of the slowest
    rank: the job's step time is the gap between consecutive step ends;
    base = median over the base_s before the injection; fault = median from
    2 s after it (to end_ns); steps_in_fault = steps ending after the
    injection (and starting before end_ns), plus, when stop_ns says when
    the job was stopped, the steps of the unlogged tail at the fault's
    median step time."""
    order = sorted(ends)
    base, flt, n = [], [], 0
    for a, b in zip(order, order[1:]):
        dt = (ends[b] - ends[a]) / 1e6
        if inject_ns - base_s * 1e9 <= ends[b] < inject_ns:
            base.append(dt)
        elif ends[b] >= inject_ns + 2e9 and (end_ns is None or ends[b] <= end_ns):
            flt.append(dt)
        if ends[b] >= inject_ns and (end_ns is None or ends[a] < end_ns):
            n += 1
    med = lambda xs: round(statistics.median(xs), 2) if xs else None  # noqa: E731
    fault_ms = med(flt)
    if stop_ns and end_ns is None and order and fault_ms and stop_ns > ends[order[-1]]:
        n += int((stop_ns - max(ends[order[-1]], inject_ns)) / 1e6 / fault_ms)
    return med(base), fault_ms, n


# --- laggard + serve flags --------------------------------------------------------

def resolve_laggard(args):
    if args.laggard:
        return args.laggard
    d = tempfile.mkdtemp(prefix="incidents-laggard-")
    exe = os.path.join(d, "laggard")
    p = subprocess.run(["go", "build", "-o", exe, "./cmd/laggard"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("go build ./cmd/laggard failed:\n" + p.stderr)
    return exe


def serve_help(exe):
    p = subprocess.run([exe, "serve", "-h"], capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def has_flag(helptext, flag):
    return any(line.strip().split(" ")[0] == flag for line in helptext.splitlines())


def incident_flags(exe, args):
    """The serve flags the incident layer needs, limited to those the binary
    has (-detect-interval lands with the incident manager), plus any
    --serve-flag given verbatim. Returns (flags, notes)."""
    text = serve_help(exe)
    flags, notes = [], []
    if args.detect_interval:
        if has_flag(text, "-detect-interval"):
            flags += ["-detect-interval", args.detect_interval]
        else:
            notes.append("serve has no -detect-interval: StageFrontier evaluates at its default interval")
    for f in args.serve_flag:
        name = f.split("=", 1)[0]
        if has_flag(text, name):
            flags.append(f)
        else:
            notes.append("serve has no %s: dropped" % name)
    return flags, notes


# --- local (loopback) launcher: E3 families and the extra runs -----------------------

def e3_hidden(seed, world=4):
    return e3.hidden_rank(world, seed)


def two_fault_ranks(seed, world=4):
    """Two different ranks for the two-faults run, drawn from the seed."""
    rng = random.Random("incidents-two-%d-%d" % (world, seed))
    a = rng.randrange(world)
    b = (a + 1 + rng.randrange(world - 1)) % world
    return a, b


class LocalServer:
    """`laggard serve` on a loopback port without tokens (as eval/sysom does)."""

    def __init__(self, exe, work, flags):
        self.port = sysom_cases.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(work, "serve.log"), "w")
        self.proc = sysom_cases.spawn([exe, "serve", "-addr", "127.0.0.1:%d" % self.port] + list(flags) +
                                      [os.path.join(work, "data")], self.log)
        sysom_cases.wait_http(self.url + "/healthz", self.proc, "laggard serve")

    def close(self):
        sysom_cases.kill(self.proc)
        self.log.close()


def wait_step_end(log_path, step, procs, deadline):
    """The end_ns of `step` in a rank's step log (netns_rank.py, line
    buffered): the start of step+1, the instant a fault "from step+1"
    begins on that rank. None if the ranks ended first."""
    while time.time() < deadline:
        got = realrun.read_step_logs([log_path])
        if step in got:
            return got[step][0]
        if any(p.poll() is not None for p in procs):
            return None
        time.sleep(0.1)
    return None


def run_local(args, exe, flags, family, case, seed):
    """One loopback run of the DDP demo (4 ranks, one process each through
    eval/greyhound/netns_rank.py on lo, which logs every step's end line by
    line; --collectives and --validation on, posting to the server), with
    E3's fault family (or the two-fault pair) injected at --onset steps and
    watched --observe s after the injection."""
    world = 4
    work = tempfile.mkdtemp(prefix="incidents-%s-" % case)
    job = "inc-%s-s%d-%d" % (case, seed, int(time.time()))
    rec = new_record(family, case, seed, flags, job=job)
    onset = args.onset
    demo = ["--world", str(world), "--steps", "100000", "--seed", str(seed), "--data-seed", str(seed), "--job", job,
            "--warmup", "0", "--log-every", "1000", "--collectives", "on", "--validation", "on"]
    if family.startswith("e3:"):
        fr = e3_hidden(seed, world)
        demo += ["--fault", case, "--fault-rank", str(fr), "--fault-start", str(onset), "--delay-ms", str(args.delay_ms)]
        plan = [(fr, onset, "e3:" + case, args.delay_ms)]
    else:  # two faults at once: a data delay on A from the onset, a CPU hog on B from onset + --second-after
        a, b = two_fault_ranks(seed, world)
        ncpu = len(os.sched_getaffinity(0))
        cores = localize.core_layout(world, b, ncpu)  # B alone on the last core: the hog slows B only
        demo += ["--fault", "data", "--fault-rank", str(a), "--fault-start", str(onset), "--delay-ms",
                 str(args.two_delay_ms), "--hog-rank", str(b), "--hog-from", str(onset + args.second_after),
                 "--hog-procs", str(args.hogs), "--pin-map", ",".join("%d:%d" % (r, c) for r, c in enumerate(cores))]
        plan = [(a, onset, "extra:data", args.two_delay_ms), (b, onset + args.second_after, "extra:hog", None)]
        rec["cores"] = cores
    srv = None
    procs = []
    logs = [os.path.join(work, "steps.rank%d" % r) for r in range(world)]
    watch = Watch(args)
    t_start = time.time()
    try:
        srv = LocalServer(exe, work, flags)
        master = sysom_cases.free_port()
        for r in range(world):
            cmd = [PY, os.path.join(EVAL, "greyhound", "netns_rank.py"), "--rank", str(r), "--master",
                   "127.0.0.1:%d" % master, "--iface", "lo", "--step-log", logs[r], "--", *demo, "--server", srv.url]
            procs.append(sysom_cases.spawn(cmd, open(os.path.join(work, "rank%d.log" % r), "w")))
        watch(srv.url, None, job)
        deadline = time.time() + args.timeout
        faults = []
        for rank, step, fam, delay in plan:
            t = wait_step_end(logs[rank], step - 1, procs, deadline)
            if t is None:
                raise RuntimeError("the ranks ended or timed out before step %d on rank %d; see %s" % (step, rank, work))
            faults.append(score.fault(fam, rank, t, None, delay))
        t0 = min(f["inject_ns"] for f in faults)
        while time.time() < min(deadline, t0 / 1e9 + args.observe) and all(p.poll() is None for p in procs):
            time.sleep(0.2)
        if any(p.poll() is not None for p in procs):
            rec["error"] = "a rank exited (rc %s) during the observation; see %s" % ([p.poll() for p in procs], work)
        time.sleep(args.poll * 2)  # a last poll on the same data
        watch_rec, full = watch.finish()
        for p in procs:
            sysom_cases.kill(p)
        ends = {s: v[0] for s, v in realrun.read_step_logs(logs).items()}
        base_ms, fault_ms, n = step_stats(ends, t0)
        rec["truth"] = {"control": False, "faults": faults, "inject_ns": t0, "end_ns": None, "steps_in_fault": n,
                        "base_ms": base_ms, "fault_ms": fault_ms, "fault_step_ends": fault_step_ends(ends, t0)}
        rec["watch"] = watch_rec
        eng = watch_rec.get("engines") or []
        rec["engines"] = {"stagefrontier": sf_outcome(during(eng, "stagefrontier", t0, None), faults),
                          "greyhound": gh_outcome(during(eng, "greyhound", t0, None), faults, "sleep")}
        rec["absorbed"] = absorbed(eng, t0, None)
        save_full(args, rec, full)
    except Exception as e:  # the record says so; the matrix goes on
        rec["error"] = "%s: %s" % (type(e).__name__, e)
        if watch.w is not None and "watch" not in rec:
            rec["watch"] = watch.finish()[0]
    finally:
        for p in procs:
            sysom_cases.kill(p)
        if srv is not None:
            srv.close()
    return close_record(args, rec, work, t_start)


# --- the netns / agent harnesses, through their own run functions -----------------

def ns_args(**kw):
    return types.SimpleNamespace(**kw)


def run_greyhound(args, exe, flags, case, seed):
    """eval/greyhound/localize.py run_one with the incident layer on: the
    fault on rank 1 during steps [--gh-onset, +--gh-fault-steps), then
    --gh-after healthy steps (so recovering is seen)."""
    work = tempfile.mkdtemp(prefix="incidents-gh-")
    watch = Watch(args)
    la = ns_args(world=4, fault_rank=1, onset=args.gh_onset, fault_steps=args.gh_fault_steps, after=args.gh_after,
                 hogs=4, sleep_ms=100.0, rate="1gbit", vocab=16384, dim=64, batch=16, seq=16, interval="1s", poll=1.0,
                 timeout=args.timeout, laggard=exe, results=work, serve_extra=flags, on_start=watch)
    rec = new_record("greyhound:" + case, case, seed, flags)
    t_start = time.time()
    try:
        run = localize.run_one(la, case, seed, exe)
    except Exception as e:
        run = None
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    watch_rec, full = watch.finish()
    rec["watch"] = watch_rec
    if run is not None:
        d = os.path.join(work, "real", run["name"])
        rec["job"] = run["job"]
        ends = {}
        if os.path.exists(os.path.join(d, "step_ends.json")):
            with open(os.path.join(d, "step_ends.json")) as f:
                ends = {int(k): v for k, v in json.load(f).items()}
        report = None
        if os.path.exists(os.path.join(d, "greyhound.json")):
            with open(os.path.join(d, "greyhound.json")) as f:
                report = json.load(f)
        gh_row = localize.evaluate_run(run, report, localize.read_timeline(os.path.join(d, "timeline.jsonl")), ends)
        control = case == "none"
        t0 = run.get("inject_ns") or run.get("start_ns")
        last_fault = run["onset"] + run["fault_steps"] - 1
        t1 = run.get("relief_ns") or ends.get(last_fault)
        faults = [] if control else [score.fault("greyhound:" + case, run["fault_rank"], t0, t1,
                                                 run["sleep_ms"] if case == "sleep" else None)]
        n = max(0, min(last_fault, max(ends) if ends else 0) - run["onset"] + 1)
        rec["truth"] = {"control": control, "faults": faults, "inject_ns": t0, "end_ns": t1, "steps_in_fault": n,
                        "base_ms": run.get("base_ms"), "fault_ms": run.get("fault_ms"),
                        "fault_step_ends": [] if control else fault_step_ends(ends, t0, t1)}
        eng = watch_rec.get("engines") or []
        # The engines' verdicts while the fault was on (2 s before its end:
        # a report polled at the relief already reads the relief window).
        t1e = t1 - 2e9 if t1 else None
        rec["engines"] = {"greyhound": norm(gh_row["score"]),
                          "stagefrontier": sf_outcome(during(eng, "stagefrontier", t0, t1e), faults)}
        rec["absorbed"] = absorbed(eng, t0, t1e)
        rec["harness_row"] = {k: gh_row.get(k) for k in ("score", "verdict_kind", "named", "verdict_s", "detect_s",
                                                         "cp_s", "slowdown_pct", "note")}
        if run.get("rank_exit") and any(run["rank_exit"]):
            rec["error"] = "rank exit codes %s" % run["rank_exit"]
        save_full(args, rec, full)
    return close_record(args, rec, work, t_start)


def run_sysom(args, exe, flags, case, seed):
    """eval/sysom/cases.py run_case with the incident layer on: the OS fault
    --sysom-inject-after s after the first step, the case held --observe s
    after the injection (its own early stop on diagnosis is held off)."""
    work = tempfile.mkdtemp(prefix="incidents-sysom-")
    watch = Watch(args)
    ca = ns_args(world=4, steps=100000, inject_after=args.sysom_inject_after, window=60.0, device_ms=30.0, hogs=2,
                 pps=40000, min_wait=5.0, timeout=args.sysom_inject_after + args.observe + 20, hz=99, ratio=0.1,
                 log_values=2048, out=work, keep=True, laggard=exe, serve_extra=flags, on_start=watch,
                 hold_s=args.observe)
    rec = new_record("sysom:" + case, case, seed, flags)
    t_start = time.time()
    try:
        row = sysom_cases.run_case(ca, exe, case, seed)
    except Exception as e:
        row = None
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    watch_rec, full = watch.finish()
    rec["watch"] = watch_rec
    if row is not None:
        rec["job"] = watch_rec.get("job")
        t0 = row.get("inject_ns")
        if t0 is None:
            rec["error"] = "no injection (the demo did not start in time?)"
            t0 = 0
        fr = row.get("fault_rank", -1)
        faults = [score.fault("sysom:" + case, -1 if case == "logging" else fr, t0)]
        ends = truth_ends([os.path.join(row["work"], "truth%d.jsonl" % r) for r in range(4)])
        base_ms, fault_ms, n = step_stats(ends, t0, stop_ns=watch_rec.get("last_ok_ns")) if t0 else (None, None, 0)
        rec["truth"] = {"control": False, "faults": faults, "inject_ns": t0, "end_ns": None, "steps_in_fault": n,
                        "base_ms": base_ms, "fault_ms": fault_ms, "fault_step_ends": fault_step_ends(ends, t0)}
        eng = watch_rec.get("engines") or []
        so = "right" if row.get("rank_named") and row.get("layer_named") else (
            "wrong" if row.get("wrong_confident_before_diagnosis") else "withheld")
        rec["engines"] = {"sysom": so, "stagefrontier": sf_outcome(during(eng, "stagefrontier", t0, None), faults),
                          "greyhound": None}  # the harness runs with Greyhound's controller off
        rec["absorbed"] = absorbed(eng, t0, None)
        rec["harness_row"] = {k: row.get(k) for k in ("rank_named", "layer_named", "path_named", "layer", "rank_layer_s",
                                                      "diagnosis_s", "wrong_confident_before_diagnosis", "others_named")}
        save_full(args, rec, full)
        shutil.rmtree(row.get("work") or "", ignore_errors=True)
    return close_record(args, rec, work, t_start)


def run_kair(args, exe, flags, case, seed, run_no):
    """eval/kair/run.py run_one with the incident layer on (world 4)."""
    work = tempfile.mkdtemp(prefix="incidents-kair-")
    watch = Watch(args)
    ka = ns_args(onset=args.kair_onset, delay_ms=120.0, rate="50mbit", dim=64, device_ms=0.0, tag="incidents",
                 max_steps=100000, manual_after=150, manual_after_s=60.0, gh_wait=args.kair_gh_wait,
                 timeout=args.timeout, dry_run=False, dry_steps=8, results=work, trace_kib=300, overwrite_traces=False,
                 keep=False, on_start=watch, hold_s=args.observe)
    base_flags, _ = kair_run.serve_flags(exe)
    rec = new_record("kair:" + case, case, seed, base_flags + flags)
    t_start = time.time()
    row = kair_run.run_one(ka, exe, base_flags + flags, case, 4, seed, run_no)
    watch_rec, full = watch.finish()
    rec["watch"] = watch_rec
    rec["job"] = row.get("job")
    if row.get("error"):
        rec["error"] = row["error"]
    control = case == "none"
    t0 = row.get("onset_ns") or 0
    delay = 120.0 if case in ("slow_op", "late_collective", "data") else None
    faults = [] if control else [score.fault("kair:" + case, row["fault_rank"], t0, None, delay)]
    steps_run = row.get("steps_run") or 0
    logs = realrun.read_step_logs([os.path.join(row.get("work") or "", "steps.rank%d" % r) for r in range(4)])
    ends = {s: v[0] for s, v in logs.items()}
    rec["truth"] = {"control": control, "faults": faults, "inject_ns": t0, "end_ns": None,
                    "steps_in_fault": max(0, steps_run - args.kair_onset), "base_ms": row.get("base_ms"),
                    "fault_ms": row.get("fault_ms"), "fault_step_ends": [] if control else fault_step_ends(ends, t0)}
    k3 = (row.get("stage3") or {}).get("rank_class")
    if control and k3 == "withheld":
        k3 = "right"  # a control that names no rank is right
    rec["engines"] = {"kair": norm(k3) if k3 else None,
                      "kair_stage1": norm((row.get("stage1") or {}).get("outcome")),
                      "stagefrontier": norm((row.get("stagefrontier") or {}).get("outcome")),
                      "greyhound": norm((row.get("greyhound") or {}).get("outcome"))}
    rec["absorbed"] = absorbed(watch_rec.get("engines") or [], t0, None)
    rec["harness_row"] = {"capture": (row.get("capture") or {}).get("trigger"), "stage3": (row.get("stage3") or {}).get("verdict"),
                          "kair_error": row.get("kair_error"), "agreement": row.get("agreement")}
    save_full(args, rec, full)
    shutil.rmtree(row.get("work") or "", ignore_errors=True)
    return close_record(args, rec, work, t_start)


# --- bookkeeping --------------------------------------------------------------------

def new_record(family, case, seed, flags, **kw):
    rec = {"harness": family.split(":")[0], "case": case, "family": family, "seed": seed, "world": 4,
           "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_before": round(os.getloadavg()[0], 2),
           "serve_flags": flags}
    rec.update(kw)
    return rec


def close_record(args, rec, work, t_start):
    rec["wall_s"] = round(time.time() - t_start, 1)
    rec["load_after"] = round(os.getloadavg()[0], 2)
    finish_work(args, rec, work)
    return rec


def save_full(args, rec, full):
    """The full single view of every incident (evidence included) at its
    last change, beside the rows: eval/out/incidents/<family>-s<seed>/."""
    if not full:
        return
    d = os.path.join(args.full_dir, "%s-s%s%s" % (rec["family"].replace(":", "-"), rec["seed"],
                                                  "-" + args.tag if args.tag else ""))
    os.makedirs(d, exist_ok=True)
    for i, inc in full.items():
        with open(os.path.join(d, "%s.json" % i.replace("/", "_")), "w") as f:
            json.dump(inc, f, indent=1)
    rec["full_dir"] = os.path.relpath(d, ROOT)


def finish_work(args, rec, work):
    if args.keep or rec.get("error"):
        rec["work"] = work
    else:
        shutil.rmtree(work, ignore_errors=True)


def plan(args):
    out = []
    for h in args.harness:
        cases = [QUICK[h]] if args.quick else (args.cases.get(h) or CASES[h])
        for seed in args.seeds:
            for c in cases:
                out.append((h, c, seed))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", default=",".join(HARNESSES), help="comma-separated: " + ", ".join(HARNESSES))
    ap.add_argument("--cases", default="", help='restrict cases, e.g. "e3=data,backward_comm;kair=none"')
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--quick", action="store_true", help="one case per harness, one seed (smoke test)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, its time estimate and the serve flags")
    ap.add_argument("--detect-interval", default="",
                    help="laggard serve -detect-interval (StageFrontier's background round; default: the server's own, "
                         "what users get; passed when serve has the flag)")
    ap.add_argument("--serve-flag", action="append", default=[], help="extra serve flag, -name=value (repeatable)")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between incident polls")
    ap.add_argument("--engines-every", type=float, default=2.0, help="seconds between engine-report polls (0: off)")
    ap.add_argument("--observe", type=float, default=30.0, help="seconds a fault is watched after its injection "
                    "(e3, extra, sysom; kair: at least)")
    ap.add_argument("--onset", type=int, default=100, help="e3/extra: first faulty step")
    ap.add_argument("--delay-ms", type=float, default=120.0, help="e3: injected delay per step")
    ap.add_argument("--two-delay-ms", type=float, default=60.0, help="extra: the data delay of the two-fault run")
    ap.add_argument("--second-after", type=int, default=15, help="extra: steps between the two injections")
    ap.add_argument("--hogs", type=int, default=2, help="extra: busy processes of the CPU hog")
    ap.add_argument("--gh-onset", type=int, default=60)
    ap.add_argument("--gh-fault-steps", type=int, default=200)
    ap.add_argument("--gh-after", type=int, default=40)
    ap.add_argument("--sysom-inject-after", type=float, default=32.0,
                    help="sysom: the fault starts this long after the first step (its report's baseline is as long as the observation)")
    ap.add_argument("--kair-onset", type=int, default=30)
    ap.add_argument("--kair-gh-wait", type=float, default=20.0, help="kair: seconds to wait for a Greyhound verdict after the capture")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--laggard", default="", help="laggard binary (default: go build into a temp dir)")
    ap.add_argument("--out", default="", help="run records (default: results/runs.jsonl; --quick: eval/out/incidents/quick.jsonl)")
    ap.add_argument("--full-dir", default=os.path.join(EVAL, "out", "incidents"), help="full incident views per run")
    ap.add_argument("--tag", default="", help="label stored in each record (a variant)")
    ap.add_argument("--keep", action="store_true", help="keep each run's work directory")
    args = ap.parse_args(argv)
    args.harness = [h for h in args.harness.split(",") if h]
    for h in args.harness:
        if h not in HARNESSES:
            ap.error("--harness: unknown %r (want %s)" % (h, ", ".join(HARNESSES)))
    cs = {}
    for part in filter(None, args.cases.split(";")):
        h, _, lst = part.partition("=")
        cs[h] = [c for c in lst.split(",") if c]
        for c in cs[h]:
            if h not in CASES or c not in CASES[h]:
                ap.error("--cases: unknown %s case %r" % (h, c))
    args.cases = cs
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.quick:
        args.seeds = args.seeds[:1]
    todo = plan(args)
    est = sum(EST_S[h] for h, _, _ in todo)
    out = args.out or (os.path.join(EVAL, "out", "incidents", "quick.jsonl") if args.quick else
                       os.path.join(RESULTS, "runs.jsonl"))
    if args.dry_run:
        for h, c, s in todo:
            print("%-9s %-16s seed %d" % (h, c, s))
        print("%d runs, about %.0f min on the 2-core box (%s)" % (len(todo), est / 60.0, ", ".join(
            "%s %d s" % kv for kv in EST_S.items())))
        if args.laggard:
            flags, notes = incident_flags(args.laggard, args)
            print("serve flags: %s%s" % (" ".join(flags) or "(none)", "".join("\n  note: " + n for n in notes)))
        print("records -> %s" % out)
        return 0
    if os.geteuid() != 0 and any(h in NEEDS_ROOT for h in args.harness):
        ap.error("greyhound, sysom and kair need root (namespaces, tc, eBPF); run with --harness e3,extra otherwise")
    os.chdir(ROOT)
    exe = resolve_laggard(args)
    flags, notes = incident_flags(exe, args)
    for n in notes:
        log(n)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    held = realrun.lock() if any(h in ("greyhound", "kair") for h in args.harness) else None  # noqa: F841
    log("%d runs, estimate %.0f min; records -> %s" % (len(todo), est / 60.0, out))
    t0 = time.time()
    for i, (h, c, s) in enumerate(todo):
        if h in ("e3", "extra"):
            rec = run_local(args, exe, flags, ("e3:" if h == "e3" else "extra:") + c, c, s)
        elif h == "greyhound":
            rec = run_greyhound(args, exe, flags, c, s)
        elif h == "sysom":
            rec = run_sysom(args, exe, flags, c, s)
        else:
            rec = run_kair(args, exe, flags, c, s, i)
        rec["tag"] = args.tag
        rec["quick"] = bool(args.quick)
        with open(out, "a") as f:  # kept even if a later run is killed
            f.write(json.dumps(rec) + "\n")
        r = score.score_run(rec)
        log("%s s%d: %s, incidents %d (pre %d), stated %s, localized %s s, explained %s s, engines %s, %.0f s%s" % (
            rec["family"], s, r["outcome"], r["opened_total"], r["opened_pre"], r["stated"] or "-", r["localized_s"],
            r["explained_s"], r["engines"], rec.get("wall_s", 0), " ERROR " + rec["error"] if rec.get("error") else ""))
    log("done: %d runs in %.1f min" % (len(todo), (time.time() - t0) / 60.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
