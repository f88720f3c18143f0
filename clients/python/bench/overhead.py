#!/usr/bin/python3
"""Measures the client's per-step CPU cost (µs/step) for a
six-stage step (five timed stages + residual, plus the CUDA-probe call).

    /usr/bin/python3 clients/python/bench/overhead.py [--steps 200000] [--repeat 3]
    /usr/bin/python3 clients/python/bench/overhead.py --steptime [--pairs 6] [--steps 5000] [--step-ms 1]
    nice -n -15 /usr/bin/python3 clients/python/bench/overhead.py --steptime   # on a shared machine
    /usr/bin/python3 clients/python/bench/overhead.py --gil [--pairs 6] [--steps 5000]
    /usr/bin/python3 clients/python/bench/overhead.py --holds [--steps 5000]
    /usr/bin/python3 clients/python/bench/overhead.py --collectives [--calls 20000] [--pairs 6]
    /usr/bin/python3 clients/python/bench/overhead.py --collectives-demo [--pairs 5] [--demo-steps 60]

--collectives: µs added per captured torch.distributed call (world-1 gloo
group in this process; capture off/on blocks interleaved, median of the
pairs). --collectives-demo: paired runs of examples/ddp_demo.py (2 ranks,
gloo) with --collectives off/on against a local null server; the median
over pairs of the relative change of mean step time.

Modes: bare loop (no telemetry), disabled (Perf(enabled=False): timing
only), null perf (laggard.init() when disabled: the no-op NullPerf), null
sink (full hot path + background shipping, nothing written), file sink
(JSONL), server down (connection refused: every vector dropped and counted),
explicit (begin_step/mark/end_step, as the framework callbacks drive it),
decorated (@perf.step() around a function whose stages are @perf.stage).
Each mode runs --repeat times; the fastest run is reported (the others
measure the machine's noise, not the client). --client DIR measures
another copy of the client (modes it lacks are skipped).
"""

import argparse
import os
import socket
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200000)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--steptime", action="store_true", help="p50/p99 step wall time, paired with no client")
ap.add_argument("--gil", action="store_true", help="longest holds of the GIL by the client's thread, paired")
ap.add_argument("--holds", action="store_true", help="CPU time of the shipper between blocking calls")
ap.add_argument("--pairs", type=int, default=6, help="--steptime: paired runs")
ap.add_argument("--step-ms", type=float, default=1.0, help="--steptime: interpreter work per step")
ap.add_argument("--collectives", action="store_true", help="µs per captured torch.distributed call, paired")
ap.add_argument("--collectives-demo", action="store_true", help="DDP demo step time, capture off vs on, paired")
ap.add_argument("--calls", type=int, default=20000, help="--collectives: calls per block")
ap.add_argument("--demo-steps", type=int, default=60, help="--collectives-demo: steps per run")
ap.add_argument("--demo-world", type=int, default=2, help="--collectives-demo: ranks")
ap.add_argument("--client", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                help="directory holding the laggard package (default: this checkout)")
ARGS = ap.parse_args()
if (ARGS.steptime or ARGS.gil or ARGS.holds) and "--steps" not in sys.argv:
    ARGS.steps = 5000
sys.path.insert(0, ARGS.client)

import laggard  # noqa: E402

STAGES = laggard.DEFAULT_STAGES[:-1]


class NullSink:
    def register(self, job, rank):
        pass

    def send(self, vectors):
        pass

    def close(self):
        pass


def loop(perf, n):
    d, f, b, c, o = STAGES
    t = time.thread_time_ns()
    for _ in range(n):
        with perf.step():
            with perf.stage(d):
                pass
            with perf.stage(f):
                with perf.cuda_event_sample():
                    pass
            with perf.stage(b):
                pass
            with perf.stage(c):
                pass
            with perf.stage(o):
                pass
    return (time.thread_time_ns() - t) / n / 1e3


def loop_explicit(perf, n):
    d, f, b, c, o = STAGES
    t = time.thread_time_ns()
    for _ in range(n):
        perf.begin_step()
        perf.mark(d)
        perf.mark(f)
        perf.mark(b)
        perf.mark(c)
        perf.mark(o)
        perf.end_step()
    return (time.thread_time_ns() - t) / n / 1e3


def loop_decorated(perf, n):
    d, f, b, c, o = STAGES
    fns = [perf.stage(s)(lambda: None) for s in (d, f, b, c, o)]

    @perf.step()
    def step():
        for fn in fns:
            fn()

    t = time.thread_time_ns()
    for _ in range(n):
        step()
    return (time.thread_time_ns() - t) / n / 1e3


def bare(n):
    t = time.thread_time_ns()
    for _ in range(n):
        for _ in range(5):
            pass
    return (time.thread_time_ns() - t) / n / 1e3


def main():
    n = ARGS.steps
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    tmp = os.path.join(tempfile.mkdtemp(), "overhead.jsonl")
    q = n + 1  # a queue that never fills, so every vector takes the full path
    new_api = hasattr(laggard.Perf, "mark")
    modes = [
        ("bare loop", None, None),
        ("disabled", dict(enabled=False), loop),
        ("null perf", "init", loop),
        ("null sink", dict(sink=NullSink(), queue_size=q), loop),
        ("file sink", dict(out=tmp, queue_size=q), loop),
        ("server down", dict(server=dead, queue_size=q, timeout=0.2), loop),
        ("explicit", dict(sink=NullSink(), queue_size=q), loop_explicit),
        ("decorated", dict(sink=NullSink(), queue_size=q), loop_decorated),
    ]
    # CPU time, not wall time, so other load on the box does not inflate it:
    # "train thr" is the training thread's cost per step, "process" adds the
    # background shipper's (JSON encoding, I/O) until close() returns.
    print("laggard %s from %s" % (getattr(laggard, "__version__", "?"), os.path.dirname(laggard.__file__)))
    print("%-12s %14s %12s  %s" % ("mode", "train thr us", "process us", "stats"))
    for name, kw, fn in modes:
        if kw is None:
            print("%-12s %14.2f" % (name, min(bare(n) for _ in range(ARGS.repeat))))
            continue
        if not new_api and (kw == "init" or fn is not loop):
            continue
        best = None
        for _ in range(ARGS.repeat):
            if kw == "init":
                p = laggard.init(enabled=False)
            else:
                p = laggard.Perf(job="overhead", rank=0, world_size=1, **kw)
            t0 = time.process_time_ns()
            us = fn(p, n)
            p.close(60)
            proc = (time.process_time_ns() - t0) / n / 1e3
            if best is None or us < best[0]:
                best = (us, proc, p.stats())
        us, proc, st = best
        print("%-12s %14.2f %12.2f  sent=%d dropped=%d errors=%d" % (name, us, proc, st["sent"], st["dropped"],
                                                                     st["errors"]))


# The server runs in its own process: decoding the client's JSON in this
# interpreter would hold the same GIL and be charged to the client.
SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def _h(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b'{"accepted":0}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_PUT = do_POST = _h
    def do_GET(self):  # validation polls: no plan
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def spin(n):
    x = 0
    for i in range(n):
        x += i
    return x


def calibrate(ms):
    """Iterations of spin() that take about ms/5 (one of five stages): the
    fastest of several timings, so a busy moment does not shorten steps."""
    n = 20000
    for _ in range(3):
        best = float("inf")
        for _ in range(7):
            t = time.perf_counter()
            spin(n)
            best = min(best, time.perf_counter() - t)
        n = max(1, int(n * (ms / 5e3) / best))
    return n


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class _Nothing:
    """No telemetry, but the same loop shape as with the client."""

    def step(self):
        return self

    def stage(self, name):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _run_delay_reader():
    """ns this thread has spent runnable but waiting for a CPU (another
    process had it), from /proc schedstat; None where there is none."""
    try:
        import threading
        fd = os.open("/proc/self/task/%d/schedstat" % threading.get_native_id(), os.O_RDONLY)
    except (OSError, AttributeError):
        return None
    return lambda: int(os.pread(fd, 128, 0).split()[1])


def run_steps(p, n, k):
    """Per step: (wall ns, wall minus run-queue wait ns). The second is
    what the step took apart from other processes holding the CPU: its own
    work plus time blocked (on the GIL) — the client's cost without the
    machine's noise."""
    d, f, b, c, o = STAGES
    wall, own = [], []
    now = time.perf_counter_ns
    rq = _run_delay_reader() or (lambda: 0)
    for _ in range(n):
        q = rq()
        t = now()
        with p.step():
            with p.stage(d):
                spin(k)
            with p.stage(f):
                spin(k)
            with p.stage(b):
                spin(k)
            with p.stage(c):
                spin(k)
            with p.stage(o):
                spin(k)
        w = now() - t
        wall.append(w)
        own.append(w - (rq() - q))
    return wall, own


def run_none(n, k):
    return run_steps(_Nothing(), n, k)


def run_client(n, k, url):
    p = laggard.Perf(server=url, job="steptime", rank=0, world_size=1)
    out = run_steps(p, n, k)
    p.close(30)
    return out, p.stats()


def steptime():
    import statistics
    import subprocess
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    try:
        url = "http://127.0.0.1:%d" % int(srv.stdout.readline())
        k = calibrate(ARGS.step_ms)
        n, warm = ARGS.steps, min(200, ARGS.steps // 10)  # warm-up steps (thread start, registration) not counted
        print("laggard %s from %s" % (getattr(laggard, "__version__", "?"), os.path.dirname(laggard.__file__)))
        print("steps/run=%d (+%d warm-up), step ~%.2f ms of pure-Python work, switch interval %.1f ms" % (
            n, warm, ARGS.step_ms, sys.getswitchinterval() * 1e3))
        qs = (0.5, 0.99, 0.999)
        print("step wall time minus run-queue wait (other processes on the CPU), ms:")
        print("%-6s %8s %8s %8s | %8s %8s %8s | %8s %8s %8s  %s" % (
            "pair", "none p50", "p99", "p99.9", "cli p50", "p99", "p99.9", "d p50", "d p99", "d p99.9",
            "client stats"))
        rows = {"own": [], "wall": []}
        for i in range(ARGS.pairs):
            res = {}
            order = ("none", "client") if i % 2 == 0 else ("client", "none")
            for mode in order:
                if mode == "none":
                    res[mode] = run_none(n + warm, k)
                else:
                    res[mode], st = run_client(n + warm, k, url)
            for j, metric in enumerate(("wall", "own")):
                a = [pct(res["none"][j][warm:], q) / 1e6 for q in qs]
                b = [pct(res["client"][j][warm:], q) / 1e6 for q in qs]
                rows[metric].append(a + b + [y - x for x, y in zip(a, b)])
            print("%-6d %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %+8.3f %+8.3f %+8.3f  sent=%d dropped=%d errors=%d" % (
                (i,) + tuple(rows["own"][-1]) + (st["sent"], st["dropped"], st["errors"])))
        for metric, label in (("own", "median"), ("wall", "wall")):
            med = [statistics.median(r[j] for r in rows[metric]) for j in range(9)]
            print("%-6s %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %+8.3f %+8.3f %+8.3f" % ((label,) + tuple(med)))
        print("(median over pairs; d = client - none, paired; 'wall': the same for raw wall time, noise included)")
    finally:
        srv.kill()
        srv.wait()


def gil_run(n, url):
    """Probe lateness (ns, beyond the requested 0.2 ms and the run-queue
    wait) while n 1-ms steps run, with a client (url) or without (None)."""
    import threading
    d, f, b, c, o = STAGES
    p = laggard.Perf(server=url, job="gil", rank=0, world_size=1) if url else _Nothing()
    late, stop = [], threading.Event()

    def probe():
        rq = _run_delay_reader() or (lambda: 0)
        now = time.perf_counter_ns
        while not stop.is_set():
            q, t = rq(), now()
            time.sleep(0.0002)
            late.append(now() - t - 200000 - (rq() - q))

    th = threading.Thread(target=probe, daemon=True)
    for i in range(n + 200):
        if i == 200:  # after the warm-up (shipper start, registration)
            th.start()
        with p.step():
            for s in (d, f, b, c, o):
                with p.stage(s):
                    pass
        time.sleep(0.001)
    stop.set()
    th.join()
    st = None
    if url:
        p.close(30)
        st = p.stats()
    return late, st


def gil():
    import statistics
    import subprocess
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    try:
        url = "http://127.0.0.1:%d" % int(srv.stdout.readline())
        print("laggard %s from %s" % (getattr(laggard, "__version__", "?"), os.path.dirname(laggard.__file__)))
        print("GIL probe lateness, ms (%d steps of ~1 ms sleep per run; shipper batch 256):" % ARGS.steps)
        print("%-6s %8s %8s %8s %6s | %8s %8s %8s %6s  %s" % (
            "pair", "none p99", "p99.9", "max", ">1ms", "cli p99", "p99.9", "max", ">1ms", "client stats"))
        rows = []
        for i in range(ARGS.pairs):
            res = {}
            for mode in (("none", "client") if i % 2 == 0 else ("client", "none")):
                res[mode], s = gil_run(ARGS.steps, url if mode == "client" else None)
                if mode == "client":
                    st = s
            row = []
            for m in ("none", "client"):
                row += [pct(res[m], q) / 1e6 for q in (0.99, 0.999, 1.0)] + [sum(x > 1e6 for x in res[m])]
            rows.append(row)
            print("%-6d %8.3f %8.3f %8.3f %6d | %8.3f %8.3f %8.3f %6d  sent=%d dropped=%d" % (
                (i,) + tuple(row) + (st["sent"], st["dropped"])))
        med = [statistics.median(r[j] for r in rows) for j in range(8)]
        print("%-6s %8.3f %8.3f %8.3f %6.1f | %8.3f %8.3f %8.3f %6.1f  (>1ms: probe wake-ups over 1 ms late)" % (
            ("median",) + tuple(med)))
    finally:
        srv.kill()
        srv.wait()


def holds():
    import socket as socket_mod
    import subprocess
    import threading
    runs, state = [], {}

    def blocking(fn):
        def w(*a, **kw):
            mine = threading.current_thread().name == "laggard-shipper"
            if mine and "t" in state:
                runs.append(time.thread_time_ns() - state["t"])
            try:
                return fn(*a, **kw)
            finally:
                if mine:
                    state["t"] = time.thread_time_ns()
        return w

    sleep = time.sleep
    time.sleep = blocking(sleep)
    threading.Event.wait = blocking(threading.Event.wait)
    for name in ("sendall", "recv_into", "connect"):
        setattr(socket_mod.socket, name, blocking(getattr(socket_mod.socket, name)))
    socket_mod.getaddrinfo = blocking(socket_mod.getaddrinfo)
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    try:
        url = "http://127.0.0.1:%d" % int(srv.stdout.readline())
        p = laggard.Perf(server=url, job="holds", rank=0, world_size=1)
        d, f, b, c, o = STAGES
        for _ in range(ARGS.steps):
            with p.step():
                for s in (d, f, b, c, o):
                    with p.stage(s):
                        pass
            sleep(0.001)
        p.close(30)
        st = p.stats()
    finally:
        srv.kill()
        srv.wait()
    xs = sorted(runs[1:])  # the first run includes the thread's start
    print("laggard %s from %s" % (getattr(laggard, "__version__", "?"), os.path.dirname(laggard.__file__)))
    print("shipper CPU runs between blocking calls (µs): n=%d p50=%.0f p99=%.0f p99.9=%.0f max=%.0f  "
          "top5=%s  sent=%d" % (len(xs), pct(xs, 0.5) / 1e3, pct(xs, 0.99) / 1e3, pct(xs, 0.999) / 1e3,
                                xs[-1] / 1e3, [round(x / 1e3) for x in xs[-5:]], st["sent"]))


def collectives_calls():
    """µs per call added by collective capture, per op (world-1 gloo)."""
    import datetime
    import statistics
    import torch
    import torch.distributed as dist
    from laggard import collectives
    torch.set_num_threads(1)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.ones(256)
    ops = {"all_reduce": lambda: dist.all_reduce(t), "broadcast": lambda: dist.broadcast(t, src=0),
           "barrier": lambda: dist.barrier(),
           "all_reduce async": lambda: dist.all_reduce(t, async_op=True).wait()}
    n = ARGS.calls
    cap = collectives.Capture(queue_size=10 ** 7)

    def block(fn):
        # Wall time, and CPU time of the whole process (every thread: the
        # async done-callback runs on gloo's), which a loaded machine
        # disturbs far less than wall time.
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n / 1e3, (time.process_time_ns() - c0) / n / 1e3

    print("laggard %s; torch %s; %d calls per block, %d pairs (off/on interleaved)" % (
        laggard.__version__, torch.__version__, n, ARGS.pairs))
    for name, fn in ops.items():
        block(fn)  # warm-up
        offs, ons = [], []
        for _ in range(ARGS.pairs):
            offs.append(block(fn))
            cap.start()
            ons.append(block(fn))
            cap.stop()
            while cap.pop() is not None:
                pass
        med = statistics.median
        print("  %-17s wall off %7.2f on %7.2f added %6.2f µs/call | cpu off %7.2f on %7.2f added %6.2f µs/call" % (
            name, med(a[0] for a in offs), med(b[0] for b in ons), med(b[0] - a[0] for a, b in zip(offs, ons)),
            med(a[1] for a in offs), med(b[1] for b in ons), med(b[1] - a[1] for a, b in zip(offs, ons))))
    print("  captured %d, dropped %d, errors %d" % (cap.captured, cap.qfull_drops, cap.errors))
    dist.destroy_process_group()


def collectives_demo():
    """Paired DDP demo runs, capture off vs on: the change of mean step time."""
    import json
    import statistics
    import subprocess
    demo = os.path.join(ARGS.client, "examples", "ddp_demo.py")
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
    url = "http://127.0.0.1:%d" % int(srv.stdout.readline())

    def run(mode, i):
        p = subprocess.run([sys.executable, demo, "--world", str(ARGS.demo_world), "--steps", str(ARGS.demo_steps),
                            "--warmup", "5", "--server", url, "--job", "bench-%s-%d" % (mode, i),
                            "--collectives", mode, "--validation", "off", "--log-every", "100000"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit("demo failed: " + p.stderr[-2000:])
        return json.loads(p.stdout.splitlines()[-1])["mean_step_ms"]

    try:
        rows = []
        for i in range(ARGS.pairs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")  # alternate which runs first
            got = {m: run(m, i) for m in order}
            rows.append((got["off"], got["on"]))
            print("  pair %d: off %.2f ms/step  on %.2f ms/step  (%+.2f%%)" % (
                i, got["off"], got["on"], 100 * (got["on"] / got["off"] - 1)), flush=True)
        rel = [100 * (b / a - 1) for a, b in rows]
        print("ddp_demo world=%d steps=%d: median off %.2f ms/step, on %.2f ms/step; median paired change %+.2f%%" % (
            ARGS.demo_world, ARGS.demo_steps, statistics.median(a for a, _ in rows),
            statistics.median(b for _, b in rows), statistics.median(rel)))
    finally:
        srv.kill()


if __name__ == "__main__":
    import logging
    logging.getLogger("laggard").setLevel(logging.CRITICAL)
    if ARGS.collectives:
        collectives_calls()
    elif ARGS.collectives_demo:
        collectives_demo()
    elif ARGS.holds:
        holds()
    elif ARGS.gil:
        gil()
    elif ARGS.steptime:
        steptime()
    else:
        main()
