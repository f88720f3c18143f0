#!/usr/bin/env python3
"""GPU smoke check (needs torch with CUDA; exits 0 with a note without):
the sampled CUDA-event forward probe becomes ready without laggard
synchronizing (the loop logs its loss, as training loops do), reads a
positive GPU time; the Hugging Face callback's forward hooks split forward from
backward on a CUDA model.

    python3 clients/python/bench/cuda_check.py [--steps 30]
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))


class Capture:
    def __init__(self):
        self.vectors = []

    def register(self, job, rank):
        pass

    def send(self, vectors):
        self.vectors.extend(vectors)

    def close(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    n = ap.parse_args().steps
    try:
        import torch
    except ImportError:
        print("cuda_check: no torch; skipped")
        return 0
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device; skipped")
        return 0
    import laggard
    from laggard.integrations import huggingface as hf

    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    x = torch.randn(512, 4096, device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    sink = Capture()
    perf = laggard.Perf(sink=sink, job="cuda-check", rank=0, world_size=1, event_fraction=1.0, flush_interval=0.01)
    for _ in range(n):
        with perf.step():
            with perf.stage("forward"):
                with perf.cuda_event_sample():
                    loss = model(x).square().mean()
            with perf.stage("backward"):
                loss.backward()
            with perf.stage("callbacks"):
                loss.item()  # the usual loss logging: the host waits for the GPU here
            with perf.stage("optimizer"):
                opt.step()
                opt.zero_grad()
    torch.cuda.synchronize()
    perf.close(10)
    probes = [v.get("probes", {}).get(laggard.PROBE_FORWARD_CUDA) for v in sink.vectors]
    ready = [p["value_ms"] for p in probes if p and p["ready"]]
    cpu_fwd = sorted(v["durations_ms"][1] for v in sink.vectors[1:])
    print("cuda_check: %d vectors, %d probes, %d ready; GPU forward median %.2f ms, host forward median %.3f ms"
          % (len(sink.vectors), sum(1 for p in probes if p), len(ready), sorted(ready)[len(ready) // 2] if ready else 0,
             cpu_fwd[len(cpu_fwd) // 2]))
    ok = len(sink.vectors) == n and len(ready) >= n // 2 and all(v > 0 for v in ready)

    sink2 = Capture()
    cb = hf.LaggardCallback(sink=sink2, job="cuda-check-hf", rank=0, world_size=1, flush_interval=0.01)
    args = type("Args", (), {"gradient_accumulation_steps": 1})()
    state = type("State", (), {"global_step": 0})()
    cb.on_train_begin(args, state, None, model=model)
    t0 = time.perf_counter()
    for _ in range(5):
        cb.on_step_begin(args, state, None)
        model(x).square().mean().backward()
        cb.on_pre_optimizer_step(args, state, None)
        opt.step()
        opt.zero_grad()
        state.global_step += 1
        cb.on_step_end(args, state, None)
    cb.on_train_end(args, state, None)
    print("cuda_check: HF callback %d vectors in %.2f s, forward/backward ms %s, hook errors %d" % (
        len(sink2.vectors), time.perf_counter() - t0,
        [(round(v["durations_ms"][1], 2), round(v["durations_ms"][2], 2)) for v in sink2.vectors], cb.hook_errors))
    ok = ok and len(sink2.vectors) == 5 and cb.hook_errors == 0 and all(v["durations_ms"][1] > 0 for v in sink2.vectors)
    print("cuda_check: " + ("OK" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
