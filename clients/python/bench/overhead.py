#!/usr/bin/python3
"""Measures the client's per-step CPU cost (µs/step) for a
six-stage step (five timed stages + residual, plus the CUDA-probe call).

    /usr/bin/python3 clients/python/bench/overhead.py [--steps 200000]

Modes: bare loop (no telemetry), null sink (full hot path + background
shipping, nothing written), file sink (JSONL), server down (connection
refused: every vector dropped and counted), disabled (timing only).
"""

import argparse
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

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


def bare(n):
    t = time.thread_time_ns()
    for _ in range(n):
        for _ in range(5):
            pass
    return (time.thread_time_ns() - t) / n / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200000)
    n = ap.parse_args().steps
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    s.close()
    tmp = os.path.join(tempfile.mkdtemp(), "overhead.jsonl")
    q = n + 1  # a queue that never fills, so every vector takes the full path
    modes = [
        ("bare loop", None),
        ("disabled", dict(enabled=False)),
        ("null sink", dict(sink=NullSink(), queue_size=q)),
        ("file sink", dict(out=tmp, queue_size=q)),
        ("server down", dict(server=dead, queue_size=q, timeout=0.2)),
    ]
    # CPU time, not wall time, so other load on the box does not inflate it:
    # "train thr" is the training thread's cost per step, "process" adds the
    # background shipper's (JSON encoding, I/O) until close() returns.
    print("%-12s %14s %12s  %s" % ("mode", "train thr us", "process us", "stats"))
    for name, kw in modes:
        if kw is None:
            print("%-12s %14.2f" % (name, bare(n)))
            continue
        p = laggard.Perf(job="overhead", rank=0, world_size=1, **kw)
        t0 = time.process_time_ns()
        us = loop(p, n)
        p.close(60)
        proc = (time.process_time_ns() - t0) / n / 1e3
        st = p.stats()
        print("%-12s %14.2f %12.2f  sent=%d dropped=%d errors=%d" % (name, us, proc, st["sent"], st["dropped"],
                                                                     st["errors"]))


if __name__ == "__main__":
    import logging
    logging.getLogger("laggard").setLevel(logging.CRITICAL)
    main()
