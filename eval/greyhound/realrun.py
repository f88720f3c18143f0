#!/usr/bin/python3
"""Greyhound real-run harness (issue 7, evaluation item b).

Runs the DDP demo (clients/python/examples/ddp_demo.py, gloo on CPU) with
every rank in its own network namespace, joined by veth pairs to a Linux
bridge; gloo is bound to the rank's veth (GLOO_SOCKET_IFNAME). It injects one
fault on one rank for a window of steps and writes a labelled step-time
series (step,value + the injection schedule) into
eval/greyhound/results/real/.

    sudo /usr/bin/python3 eval/greyhound/realrun.py selftest          # namespaces, ping, throughput ± tc
    sudo /usr/bin/python3 eval/greyhound/realrun.py run --scenario link
    sudo /usr/bin/python3 eval/greyhound/realrun.py run --scenario all

Scenarios (fault on --fault-rank during steps [--onset, --relief)):
  hog    CPU hogs pinned to the core the fault rank is pinned to
  sleep  the demo's own host-side sleep (data stage) on the fault rank
  link   tc tbf shaping both directions of the fault rank's veth

Needs root (CAP_NET_ADMIN), ip and tc (iproute2), /usr/bin/python3 with torch,
and go (builds laggard for the server). Namespaces, veths, the bridge, hogs,
tc qdiscs and the server are removed on every exit path (finally + signal
handlers); a stale setup from a killed run is removed before a new one.

The ranks post stage vectors to a `laggard serve` listening on the bridge
address with a token (docs/security.md: no -insecure). The step-time series
comes from a per-rank step log the launcher keeps (netns_rank.py: end time
of every step), so labels map exactly onto steps. Collective calls: fetched
from the server when the Python client's capture posts them; when it does
not (yet), the run says so in its manifest ("collectives": "not captured").
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PY = "/usr/bin/python3"  # Debian python3-torch
PREFIX = "gh"  # every object this harness creates starts with it
BRIDGE = PREFIX + "br0"
SUBNET = "10.77.0"
HOST_IP = SUBNET + ".1"


def ns(r):
    return "%sns%d" % (PREFIX, r)


def veth_host(r):
    return "%sh%d" % (PREFIX, r)


def veth_ns(r):
    return "%sn%d" % (PREFIX, r)


def rank_ip(r):
    return "%s.%d" % (SUBNET, 10 + r)


def sh(*cmd, check=True, capture=False, timeout=30):
    """Run a command; cmd items are joined as argv (no shell)."""
    p = subprocess.run(list(cmd), check=False, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()))
    return p.stdout if capture else p


LOCK = "/tmp/gh-netns.lock"


def lock():
    """One harness run at a time: every run uses the same namespace, veth and
    bridge names, and a second run's setup would tear down the first's.
    Returns the open lock file (keep it open for the run)."""
    import fcntl
    f = open(LOCK, "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise SystemExit("another realrun/localize run holds %s; wait for it or stop it" % LOCK)
    return f


def in_ns(r, *cmd):
    return ["ip", "netns", "exec", ns(r)] + list(cmd)


# --- setup / teardown ---------------------------------------------------------

class Net:
    """The bridge and one namespace + veth pair per rank."""

    def __init__(self, world):
        self.world = world
        self.shaped = set()

    def up(self):
        self.down()  # a killed earlier run may have left objects behind
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", HOST_IP + "/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for r in range(self.world):
            sh("ip", "netns", "add", ns(r))
            sh("ip", "link", "add", veth_host(r), "type", "veth", "peer", "name", veth_ns(r))
            sh("ip", "link", "set", veth_ns(r), "netns", ns(r))
            sh("ip", "link", "set", veth_host(r), "master", BRIDGE)
            sh("ip", "link", "set", veth_host(r), "up")
            sh(*in_ns(r, "ip", "link", "set", "lo", "up"))
            sh(*in_ns(r, "ip", "addr", "add", rank_ip(r) + "/24", "dev", veth_ns(r)))
            sh(*in_ns(r, "ip", "link", "set", veth_ns(r), "up"))
        # The bridge must forward between its ports even if br_netfilter
        # is loaded with a DROP policy on the host.
        for r in range(self.world):
            wait_ping(r, HOST_IP)

    def shape(self, r, rate, burst="32kbit", latency="50ms"):
        """tbf on both directions of rank r's link: its egress (the ns-side
        veth) and its ingress (the host-side veth's egress)."""
        sh(*in_ns(r, "tc", "qdisc", "replace", "dev", veth_ns(r), "root", "tbf", "rate", rate, "burst", burst,
                  "latency", latency))
        sh("tc", "qdisc", "replace", "dev", veth_host(r), "root", "tbf", "rate", rate, "burst", burst, "latency", latency)
        self.shaped.add(r)

    def unshape(self, r):
        sh(*in_ns(r, "tc", "qdisc", "del", "dev", veth_ns(r), "root"), check=False)
        sh("tc", "qdisc", "del", "dev", veth_host(r), "root", check=False)
        self.shaped.discard(r)

    def down(self):
        out = sh("ip", "netns", "list", check=False, capture=True) or ""
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(PREFIX + "ns"):
                sh("ip", "netns", "del", name, check=False)
        out = sh("ip", "-o", "link", "show", check=False, capture=True) or ""
        for line in out.splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                name = parts[1].strip().split("@")[0]
                if name.startswith(PREFIX + "h") or name == BRIDGE:
                    sh("ip", "link", "del", name, check=False)


ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2]))); s.settimeout(30)
try:
    while True:
        b, a = s.recvfrom(64)
        if b == b"quit": break
        s.sendto(b, a)
except socket.timeout:
    pass
"""

PING = r"""
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
rtts = []
for i in range(int(sys.argv[3]) * 20):
    t0 = time.perf_counter()
    s.sendto(b"ping", (sys.argv[1], int(sys.argv[2])))
    try:
        s.recvfrom(64)
    except socket.timeout:
        continue
    rtts.append((time.perf_counter() - t0) * 1e3)
    if len(rtts) >= int(sys.argv[3]): break
    time.sleep(0.05)
s.sendto(b"quit", (sys.argv[1], int(sys.argv[2])))
print(sorted(rtts)[len(rtts) // 2] if rtts else -1)
"""


def udp_rtt(src, dst_ns, dst_ip, n=10, port=5300):
    """Median UDP round trip (ms) from namespace src to dst_ip (echo served
    in namespace dst_ns, None = the host): python, so no ping is needed."""
    echo_cmd = [PY, "-c", ECHO, dst_ip, str(port)]
    echo = subprocess.Popen(in_ns(dst_ns, *echo_cmd) if dst_ns is not None else echo_cmd)
    try:
        time.sleep(0.3)
        out = sh(*in_ns(src, PY, "-c", PING, dst_ip, str(port), str(n)), capture=True, timeout=60)
    finally:
        try:
            echo.wait(5)
        except subprocess.TimeoutExpired:
            echo.kill()
    return float(out.strip())


def wait_ping(r, ip):
    if udp_rtt(r, None, ip, n=3) < 0:
        raise RuntimeError("rank %d cannot reach %s" % (r, ip))


# --- self test ----------------------------------------------------------------

SINK = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(60)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    if t0 is None: t0 = time.perf_counter()
    n += len(b)
print(n, time.perf_counter() - t0)
"""

SOURCE = r"""
import socket, sys, time
n = int(sys.argv[3]); buf = b"x" * (1 << 16)
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); break
    except OSError: time.sleep(0.05)
t0 = time.perf_counter(); sent = 0
while sent < n:
    sent += c.send(buf[: min(len(buf), n - sent)])
c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
print(sent, time.perf_counter() - t0)
"""


def throughput(src, dst, nbytes, port=5301):
    """Bytes/s from rank src to rank dst over the bridge (python sockets)."""
    sink = subprocess.Popen(in_ns(dst, PY, "-c", SINK, rank_ip(dst), str(port)), stdout=subprocess.PIPE, text=True)
    try:
        sh(*in_ns(src, PY, "-c", SOURCE, rank_ip(dst), str(port), str(nbytes)), timeout=120)
        out, _ = sink.communicate(timeout=120)
    finally:
        if sink.poll() is None:
            sink.kill()
    n, secs = out.split()
    return float(n) / float(secs)


def ping_rtt(src, dst):
    return udp_rtt(src, dst, rank_ip(dst))


def selftest(args):
    net = Net(2)
    res = {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rate": args.rate}
    with cleanup(net):
        net.up()
        res["udp_rtt_ms_0_to_1"] = ping_rtt(0, 1)
        res["udp_rtt_ms_1_to_0"] = ping_rtt(1, 0)
        res["mbit_s_0_to_1"] = throughput(0, 1, args.bytes) * 8 / 1e6
        res["mbit_s_1_to_0"] = throughput(1, 0, args.bytes) * 8 / 1e6
        net.shape(1, args.rate)
        small = max(args.bytes // 50, 1 << 20)  # shaped: fewer bytes, same order of seconds
        res["shaped_mbit_s_0_to_1"] = throughput(0, 1, small) * 8 / 1e6
        res["shaped_mbit_s_1_to_0"] = throughput(1, 0, small) * 8 / 1e6
        res["shaped_udp_rtt_ms_0_to_1"] = ping_rtt(0, 1)
        net.unshape(1)
        res["after_unshape_mbit_s_0_to_1"] = throughput(0, 1, args.bytes) * 8 / 1e6
    res["cleaned"] = not any(l.startswith(PREFIX + "ns") for l in (sh("ip", "netns", "list", capture=True) or "").splitlines())
    os.makedirs(args.results, exist_ok=True)
    path = os.path.join(args.results, "netns_selftest.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))
    return 0


class cleanup:
    """Tear down on exit, exception, SIGTERM or SIGINT; run extra closers first."""

    def __init__(self, net):
        self.net = net
        self.closers = []

    def __enter__(self):
        self.old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        for s in self.old:
            signal.signal(s, self._sig)
        return self

    def _sig(self, signum, frame):
        raise SystemExit(128 + signum)

    def __exit__(self, *exc):
        for c in reversed(self.closers):
            try:
                c()
            except Exception as e:  # keep tearing down
                print("[realrun] cleanup: %s" % e, file=sys.stderr)
        for r in list(self.net.shaped):
            self.net.unshape(r)
        self.net.down()
        for s, h in self.old.items():
            signal.signal(s, h)
        return False


# --- real runs ----------------------------------------------------------------

def labels_from_steps(step_end_ns, start_ns, stop_ns):
    """Maps an injection window in wall time onto steps: the onset is the
    first step that ends after the injection started, the relief the first
    step that starts after it stopped (a step's start = the previous step's
    end). step_end_ns: {step: end_ns} of the slowest rank."""
    steps = sorted(step_end_ns)
    onset = relief = None
    for i, s in enumerate(steps):
        if onset is None and step_end_ns[s] > start_ns:
            onset = s
        begin = step_end_ns[steps[i - 1]] if i > 0 else None
        if relief is None and stop_ns is not None and begin is not None and begin >= stop_ns:
            relief = s
    if onset is None:
        return None
    return {"onset": onset, "relief": relief if relief is not None else steps[-1] + 1}


def read_step_logs(paths):
    """Per-rank step logs ("step end_ns wall_ms" lines) -> {step: (max end_ns, max wall_ms)}."""
    out = {}
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 3:
                    continue
                s, end, wall = int(parts[0]), int(parts[1]), float(parts[2])
                e0, w0 = out.get(s, (0, 0.0))
                out[s] = (max(e0, end), max(w0, wall))
    return out


def step_series(logs):
    """Step time of the job: the interval between consecutive step ends of
    the slowest rank (what a trainer's throughput sees); the first step's
    own wall for step 0."""
    steps = sorted(logs)
    vals = []
    for i, s in enumerate(steps):
        if i == 0:
            vals.append((s, logs[s][1]))
        else:
            vals.append((s, (logs[s][0] - logs[steps[i - 1]][0]) / 1e6))
    return vals


def build_laggard(out_dir):
    exe = os.path.join(out_dir, "laggard")
    sh("go", "build", "-o", exe, "./cmd/laggard", timeout=600)
    return exe


def start_server(exe, work, port, extra=()):
    """Starts `laggard serve` on the bridge address; extra: more serve flags
    (e.g. -greyhound-interval 1s)."""
    tokens = os.path.join(work, "tokens")
    p = subprocess.run([exe, "token", "-scopes", "ingest:gh-real-*,read", "realrun"], capture_output=True, text=True, check=True)
    with open(tokens, "w") as f:
        f.write(p.stdout)
    os.chmod(tokens, 0o600)
    token = None
    for line in p.stderr.splitlines():
        w = line.strip().split()
        if len(w) == 1 and w[0].startswith("lg_"):
            token = w[0]
    if not token:
        raise RuntimeError("laggard token printed no token: %s" % p.stderr)
    log = open(os.path.join(work, "serve.log"), "w")
    srv = subprocess.Popen([exe, "serve", "-addr", "%s:%d" % (HOST_IP, port), "-tokens", tokens,
                            "-data", os.path.join(work, "data")] + list(extra), stdout=log, stderr=subprocess.STDOUT)
    url = "http://%s:%d" % (HOST_IP, port)
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=1).read()
            return srv, url, token
        except OSError:
            if srv.poll() is not None:
                raise RuntimeError("laggard serve exited; see %s" % log.name)
            time.sleep(0.1)
    raise RuntimeError("laggard serve did not answer on %s" % url)


def fetch(url, token, path):
    req = urllib.request.Request(url + path, headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


def hog_procs(core, n):
    return [subprocess.Popen(["taskset", "-c", str(core), PY, "-c", "while True: pass"]) for _ in range(n)]


def run_scenario(args, scenario, exe):
    world, fr = args.world, args.fault_rank
    total = args.onset + args.fault_steps + args.after
    job = "gh-real-%s" % scenario
    ncpu = os.cpu_count() or 1
    work = tempfile.mkdtemp(prefix="gh-real-")
    net = Net(world)
    res = {"scenario": scenario, "world": world, "fault_rank": fr, "steps": total, "job": job,
           "injection": {"kind": scenario, "rank": fr, "from_step": args.onset, "to_step": args.onset + args.fault_steps}}
    with cleanup(net) as cl:
        net.up()
        port = 7070 + os.getpid() % 1000
        srv, url, token = start_server(exe, work, port)
        cl.closers.append(lambda: (srv.terminate(), srv.wait(10)))
        if scenario == "sleep":
            phases = "none:%d,data@%g:%d,none:%d" % (args.onset, args.sleep_ms, args.fault_steps, args.after)
        else:
            phases = "none:%d" % total
        master_port = 29500 + os.getpid() % 1000
        procs = []
        logs = [os.path.join(work, "steps.rank%d" % r) for r in range(world)]
        env = dict(os.environ, LAGGARD_TOKEN=token, LAGGARD_COLLECTIVES="1")
        for r in range(world):
            cmd = in_ns(r, "taskset", "-c", str(r % ncpu), PY, os.path.join(HERE, "netns_rank.py"),
                        "--rank", str(r), "--master", "%s:%d" % (rank_ip(0), master_port), "--iface", veth_ns(r),
                        "--step-log", logs[r], "--",
                        "--world", str(world), "--phases", phases, "--fault-rank", str(fr), "--job", job,
                        "--server", url, "--warmup", "0", "--dim", str(args.dim), "--log-every", "1000")
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
        hogs, t_on, t_off = [], None, None
        deadline = time.time() + args.timeout
        while any(p.poll() is None for p in procs):
            if time.time() > deadline:
                raise RuntimeError("run exceeded --timeout %ds; see %s" % (args.timeout, work))
            done = read_step_logs(logs[:1])
            last = max(done) if done else -1
            if scenario in ("hog", "link"):
                if t_on is None and last + 1 >= args.onset:
                    t_on = time.time_ns()
                    if scenario == "hog":
                        hogs = hog_procs(fr % ncpu, args.hogs)
                        cl.closers.append(lambda: [h.kill() for h in hogs])
                    else:
                        net.shape(fr, args.rate)
                if t_on is not None and t_off is None and last + 1 >= args.onset + args.fault_steps:
                    t_off = time.time_ns()
                    if scenario == "hog":
                        for h in hogs:
                            h.kill()
                    else:
                        net.unshape(fr)
            time.sleep(0.02)
        rcs = [p.returncode for p in procs]
        res["rank_exit"] = rcs
        logs_by_step = read_step_logs(logs)
        series = step_series(logs_by_step)
        if scenario == "sleep":
            res["labels"] = {"onset": args.onset, "relief": args.onset + args.fault_steps}
        elif t_on is not None:
            res["labels"] = labels_from_steps({s: v[0] for s, v in logs_by_step.items()}, t_on, t_off)
            res["injection"]["start_ns"], res["injection"]["stop_ns"] = t_on, t_off
        # Collective calls of every phase job (the demo names multi-phase
        # jobs <job>-pNN-<fault>-<ms>ms).
        st, body = fetch(url, token, "/api/v1/jobs")
        ids = sorted(set(re.findall(r'"id"\s*:\s*"(%s[^"]*)"' % re.escape(job), body.decode("utf-8", "replace")))) if st == 200 else []
        calls, why = b"", "HTTP %d listing jobs" % st
        for jid in ids:
            st, b = fetch(url, token, "/api/v1/jobs/%s/collectives?limit=1000000" % jid)
            if st == 200:
                calls += b if b.endswith(b"\n") or not b else b + b"\n"
            else:
                why = "HTTP %d on %s/collectives" % (st, jid)
        ncalls = len(calls.splitlines())
        body = calls
        res["jobs"] = ids
        res["collectives"] = "%d calls" % ncalls if ncalls else "not captured (%s)" % why
        os.makedirs(args.results, exist_ok=True)
        base = os.path.join(args.results, scenario)
        with open(base + ".csv", "w") as f:
            f.write("step,value\n")
            for s, v in series:
                f.write("%d,%.3f\n" % (s, v))
        if ncalls:
            with open(base + ".collectives.jsonl", "wb") as f:
                f.write(body)
        for r in range(world):
            shutil.copy(os.path.join(work, "rank%d.err" % r), base + ".rank%d.log" % r)
        with open(base + ".labels.json", "w") as f:
            json.dump(res, f, indent=1)
        if any(rcs):
            raise RuntimeError("rank exit codes %s; logs in %s" % (rcs, work))
    print(json.dumps(res))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("selftest", "run", "clean"))
    ap.add_argument("--scenario", default="all", help="hog, sleep, link or all")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--onset", type=int, default=60, help="first faulty step")
    ap.add_argument("--fault-steps", type=int, default=60)
    ap.add_argument("--after", type=int, default=60, help="healthy steps after the relief")
    ap.add_argument("--sleep-ms", type=float, default=60.0)
    ap.add_argument("--hogs", type=int, default=2, help="busy loops pinned to the fault rank's core")
    ap.add_argument("--rate", default="20mbit", help="tc tbf rate of the slow link")
    ap.add_argument("--dim", type=int, default=128, help="demo model width (gradient size for the link scenario)")
    ap.add_argument("--bytes", type=int, default=200 << 20, help="selftest transfer size (unshaped)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per scenario")
    ap.add_argument("--results", default=os.path.join(ROOT, "eval", "greyhound", "results", "real"))
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, tc)")
    for tool in ("ip", "tc", "taskset"):
        if not shutil.which(tool):
            ap.error("%s not found (apt-get install iproute2 util-linux)" % tool)
    held = lock()  # noqa: F841 (held until exit)
    if args.what == "clean":
        Net(0).down()
        return 0
    if args.what == "selftest":
        return selftest(args)
    os.chdir(ROOT)
    exe = build_laggard(tempfile.mkdtemp(prefix="gh-laggard-"))
    scen = ("hog", "sleep", "link") if args.scenario == "all" else tuple(args.scenario.split(","))
    for s in scen:
        run_scenario(args, s, exe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
