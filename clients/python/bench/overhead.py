#!/usr/bin/python3
"""Measures the client's per-step CPU cost (µs/step) for a
six-stage step (five timed stages + residual, plus the CUDA-probe call).

    /usr/bin/python3 clients/python/bench/overhead.py [--steps 200000] [--repeat 3]

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
ap.add_argument("--client", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                help="directory holding the laggard package (default: this checkout)")
ARGS = ap.parse_args()
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


if __name__ == "__main__":
    import logging
    logging.getLogger("laggard").setLevel(logging.CRITICAL)
    main()
