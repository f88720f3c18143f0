#!/usr/bin/python3
"""SysOM-AI real OS cases on the DDP demo (issue 8, evaluation item 2).

Runs `laggard serve`, `laggard agent` (eBPF CPU profiler + OS counters +
the registration socket) and the DDP demo (clients/python/examples/ddp_demo.py,
gloo on CPU, collectives captured by the Python client), injects one OS-level
fault after a warm-up, and polls the server's SysOM report until it names the
fault or the case times out. Each row says: rank named? layer named? function
path named? time from injection to diagnosis — and whether anything wrong was
stated with high confidence before that.

    sudo /usr/bin/python3 eval/sysom/cases.py --case all
    sudo /usr/bin/python3 eval/sysom/cases.py --case hog --seeds 1,2,3

Cases (fault rank F runs alone on the last core; the other ranks share the
remaining cores, so only F's core is disturbed — this machine has 2 cores):
  hog      a busy process pinned to F's core (§5.4 OS interference)
  softirq  a UDP flood on the loopback of a network namespace this harness
           creates, with that loopback's receive processing steered (RPS) to
           F's core, so NET_RX softirqs interrupt F (§5.4 case 2)
  vfs      a process pinned to F's core churning the dentry cache: creates,
           stats and unlinks many files and looks up missing names (§5.4 case 3)
  logging  every rank logs per-parameter tensor statistics per step on the
           training thread (§5.4 case 4: uniform, temporal-baseline path; the
           right answer names no straggler)

Needs root (BPF, netns), taskset, ip (iproute2), /usr/bin/python3 with torch,
and go. Everything it starts is stopped on every exit path.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PY = "/usr/bin/python3"
DEMO = os.path.join(ROOT, "clients", "python", "examples", "ddp_demo.py")
NETNS = "sysomflood"

# What a correct diagnosis names, per case: the concluded layer(s) accepted
# and substrings one of the diagnosis's hot paths (function or stack) must
# contain. The hog and vfs interferers are other processes on F's core, so
# the CPU layer shows them as "[other process] …" frames; the OS layer (run
# queue wait, involuntary switches, softirq rate on F's core) is also right.
EXPECT = {
    "hog": {"layers": ("cpu", "os"), "paths": ("[other process]",)},
    "softirq": {"layers": ("cpu", "os"), "paths": ("net_rx_action", "__do_softirq", "handle_softirqs", "process_backlog",
                                                   "NET_RX", "do_softirq")},
    # The interferer's own name is not enough here: the path must reach
    # the VFS (kernel path walk, dentry, inode allocation).
    "vfs": {"layers": ("cpu", "os"), "paths": ("openat", "lookup", "dput", "d_alloc", "unlink", "filename_", "path_",
                                               "vfs_", "ext4_", "dentry", "inode")},
    "logging": {"layers": (), "paths": ("log_tensor_stats", "json", "dumps", "encode", "write")},
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def lower_keys(x):
    if isinstance(x, dict):
        return {k.lower(): lower_keys(v) for k, v in x.items()}
    if isinstance(x, list):
        return [lower_keys(v) for v in x]
    return x


def get(d, *names, default=None):
    for n in names:
        if isinstance(d, dict) and n in d and d[n] is not None:
            return d[n]
    return default


class Closer:
    def __init__(self):
        self.fns = []

    def add(self, fn):
        self.fns.append(fn)

    def close(self):
        while self.fns:
            fn = self.fns.pop()
            try:
                fn()
            except Exception as e:  # keep cleaning up
                print("[cases] cleanup: %s" % e, file=sys.stderr)


def kill(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
    p.wait()


def spawn(cmd, log, env=None):
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def http(url, method="GET", timeout=5):
    req = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def wait_http(url, proc, what, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError("%s exited (rc %s)" % (what, proc.returncode))
        try:
            http(url, timeout=1)
            return
        except Exception:
            time.sleep(0.2)
    raise RuntimeError("%s did not answer on %s" % (what, url))


def netns_flood(core, other_core, closer, log, work, filters=1500, pps=20000):
    """NET_RX softirq load on `core` without a process there: a paced UDP
    sender pinned to `other_core` inside a fresh network namespace whose
    loopback steers receive processing to `core` (RPS), with `filters`
    non-matching tc ingress u32 filters on that loopback so each packet's
    receive path (softirq, on `core`) costs far more than its send (on
    `other_core`). The packets go to a closed port and are dropped."""
    subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    closer.add(lambda: subprocess.run(["ip", "netns", "del", NETNS], capture_output=True))
    nsx = ["ip", "netns", "exec", NETNS]
    subprocess.run(nsx + ["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(nsx + ["sh", "-c", "echo %x > /sys/class/net/lo/queues/rx-0/rps_cpus" % (1 << core)], check=True)
    subprocess.run(nsx + ["tc", "qdisc", "add", "dev", "lo", "ingress"], check=True)
    batch = os.path.join(work, "tc-filters.batch")
    with open(batch, "w") as f:
        for i in range(filters):
            f.write("filter add dev lo parent ffff: protocol ip prio 1 u32 match ip dport %d 0xffff flowid 1:1\n"
                    % (20000 + i))
    subprocess.run(nsx + ["tc", "-batch", batch], check=True, timeout=120)
    flood = ("import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nb=b'x'*64\n"
             "n=0\nt0=time.monotonic()\n"
             "while True:\n"
             "  for _ in range(200): s.sendto(b,('127.0.0.1',9))\n"
             "  n+=200\n"
             "  d=n/%d-(time.monotonic()-t0)\n"
             "  if d>0: time.sleep(d)\n" % pps)
    return [spawn(nsx + ["taskset", "-c", str(other_core), PY, "-c", flood], log)]


VFS_CHURN = r"""
import os, random, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
i = 0
while True:
    i += 1
    p = os.path.join(d, "f%d" % (i % 4096))
    with open(p, "w") as f:
        pass
    try:
        os.stat(os.path.join(d, "missing-%d" % random.getrandbits(40)))
    except FileNotFoundError:
        pass
    os.unlink(p)
"""


def inject(case, fault_rank, cores, closer, work, log, hogs=1, pps=20000):
    core = cores[-1]
    if case == "hog":
        for _ in range(hogs):
            p = spawn(["taskset", "-c", str(core), PY, "-c", "while True: pass"], log)
            closer.add(lambda p=p: kill(p))
    elif case == "softirq":
        for p in netns_flood(core, cores[0], closer, log, work, pps=pps):
            closer.add(lambda p=p: kill(p))
    elif case == "vfs":
        p = spawn(["taskset", "-c", str(core), PY, "-c", VFS_CHURN, os.path.join(work, "churn")], log)
        closer.add(lambda: kill(p))
    # logging is injected by the demo itself (--verbose-log-from).


def score(case, fault_rank, rep):
    """Reads a SysOM report (tolerant of key case) and says what it names."""
    r = lower_keys(rep)
    slow = [get(s, "rank") for s in get(r, "slowranks", "slow_ranks", default=[])]
    diags = get(r, "diagnoses", default=[])
    out = {"slow_ranks": slow, "rank_named": False, "layer_named": False, "path_named": False, "wrong_confident": False,
           "layer": "", "paths": [], "others_named": []}
    # Every rank the report names besides the fault rank (diagnoses, slow
    # ranks, temporal suspects) is counted (issue 16 item 8b).
    temp = get(r, "temporal", default=None) or {}
    named = set(slow) | {get(d, "rank") for d in diags} | set(get(temp, "suspects", default=[]) or [])
    out["others_named"] = sorted(x for x in named if x is not None and (case == "logging" or x != fault_rank))
    exp = EXPECT[case]
    if case == "logging":
        temp = get(r, "temporal", default=None) or {}
        cands = get(temp, "candidates", default=[])
        names = [" ".join([str(get(c, "func", default=""))] + [str(x) for x in get(c, "stack", default=[])]) for c in cands]
        out["paths"] = names[:5]
        out["rank_named"] = not slow  # the right answer names no straggler
        out["layer_named"] = bool(cands)
        out["path_named"] = any(any(s in n for s in exp["paths"]) for n in names)
        out["wrong_confident"] = bool(slow) and any(get(d, "confidence") == "high" for d in diags)
        return out
    for d in diags:
        rank = get(d, "rank")
        layer = str(get(d, "layer", default=""))
        conf = get(d, "confidence", default="")
        paths = []
        for lay in get(d, "layers", default=[]):
            for hp in get(lay, "paths", default=[]):
                paths.append(" ".join([str(get(hp, "func", default=""))] + [str(x) for x in get(hp, "stack", default=[])]))
            for ev in get(lay, "evidence", default=[]):
                paths.append(str(ev))
        if rank == fault_rank:
            out["rank_named"] = True
            out["layer"] = layer
            out["layer_named"] = layer in exp["layers"]
            out["path_named"] = any(any(s in p for s in exp["paths"]) for p in paths)
            out["paths"] = paths[:5]
        elif conf == "high":
            out["wrong_confident"] = True
    if fault_rank in slow:
        out["rank_named"] = True
    return out


def run_case(args, exe, case, seed):
    work = tempfile.mkdtemp(prefix="sysom-%s-" % case)
    closer = Closer()
    log = open(os.path.join(work, "procs.log"), "w")
    row = {"case": case, "seed": seed, "ratio": args.ratio, "hz": args.hz, "world": args.world}
    try:
        ncpu = len(os.sched_getaffinity(0))
        cores = sorted(os.sched_getaffinity(0))
        fault_rank = seed % args.world
        row["fault_rank"] = fault_rank
        # F alone on the last core, the others on the rest.
        pin = ",".join("%d:%d" % (r, cores[-1] if r == fault_rank else cores[r % max(1, ncpu - 1)]) for r in range(args.world))
        port = free_port()
        url = "http://127.0.0.1:%d" % port
        # Greyhound's controller off: its validation passes would pause the
        # ranks in the middle of a case.
        srv = spawn([exe, "serve", "-addr", "127.0.0.1:%d" % port, "-greyhound-interval", "0"] +
                    list(getattr(args, "serve_extra", ())) + [os.path.join(work, "data")], log)
        closer.add(lambda: kill(srv))
        wait_http(url + "/healthz", srv, "laggard serve")
        sock = os.path.join(work, "agent.sock")
        agent = spawn([exe, "agent", "-server", url, "--socket", sock, "--profile-hz", str(args.hz),
                       "--profile-ratio", str(args.ratio), "-log-level", "info"], open(os.path.join(work, "agent.log"), "w"))
        closer.add(lambda: kill(agent))
        t0 = time.time()
        while not os.path.exists(sock) and time.time() - t0 < 20:
            if agent.poll() is not None:
                raise RuntimeError("laggard agent exited; see %s/agent.log" % work)
            time.sleep(0.2)
        job = "sysom-%s-%d-%d" % (case, seed, int(time.time()))
        env = dict(os.environ, LAGGARD_AGENT_SOCKET=sock, LAGGARD_COLLECTIVES="1")
        cmd = [PY, DEMO, "--world", str(args.world), "--steps", str(args.steps), "--server", url, "--job", job,
               "--device-ms", str(args.device_ms),
               "--seed", str(seed), "--pin-map", pin, "--log-every", "50", "--warmup", "0",
               "--truth-out", os.path.join(work, "truth{rank}.jsonl")]
        flag = os.path.join(work, "logging-fault-on")
        if case == "logging":
            cmd += ["--verbose-log-flag", flag, "--verbose-log-values", str(args.log_values),
                    "--verbose-log-out", os.path.join(work, "debug{rank}.log")]
        demo = spawn(cmd, open(os.path.join(work, "demo.log"), "w"), env=env)
        closer.add(lambda: kill(demo))
        if getattr(args, "on_start", None):  # eval/incidents watches the server's incidents
            args.on_start(url, None, job)
        # Inject --inject-after s after rank 0's first step (the truth file
        # says), so a baseline as long as the report window precedes it.
        t_inj = t_first = None
        truth0 = os.path.join(work, "truth0.jsonl")
        deadline = time.time() + args.timeout
        first = None
        last_rep = None
        while time.time() < deadline and demo.poll() is None:
            time.sleep(1)
            if t_inj is None:
                if t_first is None and os.path.exists(truth0) and os.path.getsize(truth0) > 0:
                    t_first = time.time()
                if t_first is not None and time.time() - t_first >= args.inject_after:
                    t_inj = time.time()
                    if case == "logging":
                        open(flag, "w").close()
                    inject(case, fault_rank, cores, closer, work, log, args.hogs, args.pps)
                    row["inject_ns"] = int(t_inj * 1e9)
                continue
            now = time.time()
            if now - t_inj < args.min_wait:
                continue
            # The report covers what happened since the injection (what an
            # operator asks right after an alert), at most --window s; the
            # baseline is an equally long stretch ending before it.
            span = min(args.window, now - t_inj)
            q = "/api/v1/jobs/%s/sysom?from_ns=%d&to_ns=%d&base_from_ns=%d&base_to_ns=%d" % (
                job, int((now - span) * 1e9), int(now * 1e9), int((t_inj - 2 - span) * 1e9), int((t_inj - 2) * 1e9))
            try:
                _, body = http(url + q, timeout=20)
            except urllib.error.HTTPError as e:
                row["last_error"] = "%d %s" % (e.code, e.read()[:200].decode(errors="replace"))
                continue
            except Exception as e:
                row["last_error"] = str(e)
                continue
            rep = json.loads(body)
            last_rep = rep
            s = score(case, fault_rank, rep)
            if s["wrong_confident"] and "diagnosis_s" not in row:
                row["wrong_confident_before_diagnosis"] = True
            if s["rank_named"] and s["layer_named"] and "rank_layer_s" not in row:
                row["rank_layer_s"] = round(now - t_inj, 1)
            if s["rank_named"] and s["layer_named"] and s["path_named"]:
                if "diagnosis_s" not in row:
                    first = s
                    row["diagnosis_s"] = round(now - t_inj, 1)
                # --hold-s (eval/incidents): keep the case running after the
                # diagnosis, so other observers see the same fault as long.
                if now - t_inj >= getattr(args, "hold_s", 0):
                    break
                continue
            if "diagnosis_s" not in row:
                first = s
        row.update({k: first[k] for k in ("rank_named", "layer_named", "path_named", "layer", "slow_ranks", "paths", "others_named")} if first else {})
        row["diagnosed"] = "diagnosis_s" in row
        if last_rep is not None:
            with open(os.path.join(args.out, "report-%s-%d.json" % (case, seed)), "w") as f:
                json.dump(last_rep, f, indent=1)
        row["work"] = work
        return row
    finally:
        closer.close()
        log.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def summarize(path):
    """cases.jsonl → a markdown table (one row per run)."""
    rows = [json.loads(l) for l in open(path) if l.strip()]
    yes = lambda v: "yes" if v else "no"
    lines = ["# SysOM-AI real OS cases on the DDP demo", "",
             "`sudo /usr/bin/python3 eval/sysom/cases.py --case all --seeds 1,2` — 4-rank gloo DDP demo "
             "(`--device-ms 30`), fault rank alone on the last core, `laggard agent` at its defaults (99 Hz, 10% of "
             "ticks), reports over the stretch since the injection (≤ 60 s) against an equally long baseline before "
             "it, polled every second from 5 s after the injection. Rank named = a diagnosis (or a slow-rank flag) "
             "for the fault rank (for logging: no straggler named); layer = the diagnosis's concluded layer; path = "
             "one of its hot paths or evidence lines reaches the expected functions (`EXPECT` in cases.py). Time = "
             "injection → first report with all three (or with rank and layer). Other ranks named = ranks the "
             "report names besides the fault rank at that report (diagnoses, slow ranks, temporal suspects; for "
             "logging, any).", "",
             "| case | seed | fault rank | rank named | layer | path named | rank+layer at | full diagnosis at | "
             "slow-rank flag | other ranks named | wrong & confident |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["case"], r["seed"], r.get("fault_rank", ""), yes(r.get("rank_named")),
            ("temporal baseline" if r["case"] == "logging" else (r.get("layer") or "—") + ("" if r.get("layer_named") else " (not expected)")),
            yes(r.get("path_named")), "%s s" % r["rank_layer_s"] if r.get("rank_layer_s") is not None else "—",
            "%s s" % r["diagnosis_s"] if r.get("diagnosis_s") is not None else "—",
            ",".join(str(x) for x in r.get("slow_ranks") or []) or "—",
            (",".join(str(x) for x in r.get("others_named") or []) or "none") if "others_named" in r else "not recorded",
            yes(r.get("wrong_confident_before_diagnosis"))))
    # Why a fault rank was not named, in the report's own words (its last
    # report, saved beside the table).
    why = []
    for r in rows:
        if r.get("rank_named"):
            continue
        rp = os.path.join(os.path.dirname(path), "report-%s-%s.json" % (r["case"], r["seed"]))
        try:
            rep = lower_keys(json.load(open(rp)))
        except (OSError, ValueError):
            continue
        for n in get(rep, "notes", default=[]):
            if n.startswith("rank %s " % r.get("fault_rank")) and "on time" in n:
                why.append("- %s seed %s: %s" % (r["case"], r["seed"], n))
    if why:
        lines += ["", "Fault rank not named — the report says why (a rank the group does not wait for is not diagnosed, "
                  "issue 16 item 8b; the temporal comparison still lists the fault's paths):", ""] + why
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="all", help="hog, softirq, vfs, logging or all")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds (the fault rank is seed %% world)")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=100000, help="demo steps (the case stops earlier once diagnosed)")
    ap.add_argument("--inject-after", type=float, default=75.0, help="seconds after rank 0's first step the fault starts")
    ap.add_argument("--window", type=float, default=60.0, help="longest stretch since the injection a report covers (s)")
    ap.add_argument("--device-ms", type=float, default=30.0, help="demo's GPU stand-in sleep per step (ranks not CPU-bound)")
    ap.add_argument("--hogs", type=int, default=2, help="busy processes in the hog case")
    ap.add_argument("--pps", type=int, default=40000, help="packets/s of the softirq case's paced flood")
    ap.add_argument("--min-wait", type=float, default=5.0, help="first report this long after injection")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--ratio", type=float, default=0.1)
    ap.add_argument("--log-values", type=int, default=2048)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--keep", action="store_true", help="keep each case's work directory")
    ap.add_argument("--laggard", default="", help="laggard binary (default: go build into a temp dir)")
    ap.add_argument("--summarize", action="store_true", help="only write results/cases.md from results/cases.jsonl")
    args = ap.parse_args()
    if args.summarize:
        md = summarize(os.path.join(args.out, "cases.jsonl"))
        with open(os.path.join(args.out, "cases.md"), "w") as f:
            f.write(md)
        print(md)
        return
    if os.geteuid() != 0:
        sys.exit("cases.py needs root (eBPF profiler, network namespace)")
    for tool in ("taskset", "ip"):
        if shutil.which(tool) is None:
            sys.exit("cases.py needs %s" % tool)
    os.makedirs(args.out, exist_ok=True)
    exe = args.laggard
    if not exe:
        exe = os.path.join(tempfile.mkdtemp(prefix="sysom-bin-"), "laggard")
        subprocess.run(["go", "build", "-o", exe, "./cmd/laggard"], cwd=ROOT, check=True)
    cases = ("hog", "softirq", "vfs", "logging") if args.case == "all" else tuple(args.case.split(","))
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for case in cases:
            row = run_case(args, exe, case, seed)
            print(json.dumps(row), flush=True)
            rows.append(row)
            with open(os.path.join(args.out, "cases.jsonl"), "a") as f:  # kept even if a later case is killed
                f.write(json.dumps(row) + "\n")
    path = os.path.join(args.out, "cases.tsv")
    cols = ("case", "seed", "world", "fault_rank", "hz", "ratio", "rank_named", "layer_named", "path_named", "layer",
            "rank_layer_s", "diagnosis_s", "wrong_confident_before_diagnosis", "slow_ranks", "others_named", "paths")
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join(json.dumps(r.get(c, "")) if isinstance(r.get(c), (list, dict)) else str(r.get(c, ""))
                              for c in cols) + "\n")


if __name__ == "__main__":
    main()
