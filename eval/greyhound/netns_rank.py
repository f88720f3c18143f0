#!/usr/bin/python3
"""Runs ONE rank of clients/python/examples/ddp_demo.py in the current
network namespace (realrun.py starts one per namespace).

    netns_rank.py --rank R --master 10.77.0.10:29500 --iface ghn1 --step-log F -- <ddp_demo args>

The demo launches all ranks itself with torch.multiprocessing on 127.0.0.1;
here each rank lives in its own namespace, so this wrapper, without
changing the demo, (1) runs the demo's own worker() for this rank only,
(2) points its TCP rendezvous at the master address instead of 127.0.0.1,
(3) binds gloo to the rank's veth (GLOO_SOCKET_IFNAME) and (4) logs
"step end_ns wall_ms" per step (CLOCK_REALTIME) to --step-log so the
harness can map its wall-clock injection window onto steps.
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "clients", "python", "examples")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--master", required=True, help="host:port of rank 0's rendezvous")
    ap.add_argument("--iface", required=True, help="network interface gloo binds to")
    ap.add_argument("--step-log", required=True)
    ap.add_argument("demo", nargs=argparse.REMAINDER, help="-- then ddp_demo.py arguments")
    a = ap.parse_args()
    demo_argv = a.demo[1:] if a.demo[:1] == ["--"] else a.demo
    os.environ["GLOO_SOCKET_IFNAME"] = a.iface
    host, port = a.master.rsplit(":", 1)

    sys.path.insert(0, EXAMPLES)
    import ddp_demo  # noqa: E402
    import laggard  # noqa: E402  (ddp_demo put clients/python on the path)
    import torch.distributed as dist  # noqa: E402
    import torch.multiprocessing as mp  # noqa: E402

    orig_init = dist.init_process_group

    def init_process_group(backend, init_method=None, **kw):
        return orig_init(backend, init_method="tcp://%s:%s" % (host, port), **kw)

    dist.init_process_group = init_process_group

    log = open(a.step_log, "w", buffering=1)
    orig_step = laggard.Perf.step

    class _Step:
        def __init__(self, inner, step):
            self.inner, self.step, self.t0 = inner, step, None

        def __enter__(self):
            self.t0 = time.perf_counter()
            return self.inner.__enter__()

        def __exit__(self, *exc):
            r = self.inner.__exit__(*exc)
            log.write("%d %d %.3f\n" % (self.step, time.time_ns(), (time.perf_counter() - self.t0) * 1e3))
            return r

    def step(self, s, *args, **kw):
        return _Step(orig_step(self, s, *args, **kw), s)

    laggard.Perf.step = step

    class _Done:
        processes = []

        def join(self, timeout=None):
            return True

    def start_processes(fn, args=(), nprocs=1, join=True, start_method=None, **kw):
        fn(a.rank, *args)  # this rank only, in this process
        return _Done()

    mp.start_processes = start_processes
    return ddp_demo.main(demo_argv)


if __name__ == "__main__":
    sys.exit(main())
