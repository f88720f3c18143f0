#!/usr/bin/python3
"""A small, real PyTorch DDP job (gloo, CPU) instrumented with laggard, with
hidden-rank fault injection for the StageFrontier E3 routing test (§6.2).

    /usr/bin/python3 clients/python/examples/ddp_demo.py --world 4 --steps 60 \\
        --fault data --fault-rank 2 --delay-ms 120 --out /tmp/demo.jsonl

Fault families (host-side sleeps on the hidden rank, §6; forward_compute is real compute):
  data           sleep inside data.next_wait after next(loader)
  forward_host   sleep inside the forward/loss stage
  backward       sleep inside the backward stage before loss.backward()
  backward_comm  a DDP comm hook sleeps before the gradient allreduce
  callback_sync  sleep in callbacks, then dist.barrier() on every rank
  callback_host  sleep in callbacks only, no barrier (host-only control)
  forward_compute  real extra compute (one square matmul sized to ~--delay-ms
                 on an idle core) inside one layer's forward (--fault-layer),
                 on the hidden rank; not a sleep (KAIR "slow operator")

--fault-layer names the module forward_compute slows (default
enc.layers.0.linear1). While a forward_compute phase is configured, every
rank wraps that module's forward in a record_function range
"layer.<name>" and runs the extra matmul there: a tiny one on healthy
ranks and outside the fault, the calibrated one on the hidden rank during
it — so all ranks run the same operators (KAIR Stage 2 groups instances
by name + occurrence) and only durations differ.
--fault-log PATH ({rank} substituted) writes the hidden rank's injected
intervals as JSON lines {"step","fault","t0_ns","t1_ns","step_t0_ns"}
(time_ns; step_t0_ns = just inside perf.step): ground truth for eval/kair.
--capture on|off sets LAGGARD_CAPTURE for the client's triggered operator
capture (KAIR; default: the client's own default).

Greyhound fault injection (steps count from 0 across phases; "until" is
exclusive, -1 = to the end):
  --hog-rank R --hog-from S --hog-until U   a CPU hog: --hog-procs busy
        processes pinned (sched_setaffinity) to rank R's cores; with --pin
        every rank first runs on its own core, so the hog halves R's speed
  --sleep-rank R --sleep-ms X --sleep-from S --sleep-until U   sleep X ms in
        R's forward stage on those steps
--collectives on|off captures torch.distributed calls (DDP buckets through the
comm hook) and ships them to /collectives; --validation on|off takes part in
validation plans (both default on with a server, off with --out).
--truth-out PATH ({rank} substituted) writes each step's own start/end
(time_ns) per rank as JSON lines: the truth for ACF iteration-time error.

--phases runs several (fault, steps) phases in one launch so process start
is paid once: "none:50,data:50,data@12:50" (fault[@delay_ms][:steps]). Each
phase is its own job; when it ends, rank 0 prints one JSON line on stdout:
{"phase","index","job","from_step","to_step",...,"file"} where
[from_step, to_step] is the scored window (after --warmup steps). Progress
goes to stderr. Exit status is non-zero if any rank fails.
"""

import argparse
import datetime
import json
import os
import random
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # clients/python (repo or `laggard demo` temp dir)

import laggard  # noqa: E402

FAULTS = ("none", "data", "backward", "backward_comm", "forward_host", "callback_sync", "callback_host",
          "forward_compute")


def parse_phases(spec, steps, delay_ms):
    """'data:50,data@12:40' -> [{"fault","delay_ms","steps"}, ...]."""
    phases = []
    for i, part in enumerate(p.strip() for p in spec.split(",") if p.strip()):
        head, _, n = part.partition(":")
        fault, _, d = head.partition("@")
        if fault not in FAULTS:
            raise ValueError("--phases item %d: unknown fault %r (want one of %s)" % (i, fault, ", ".join(FAULTS)))
        try:
            ph = {"fault": fault, "delay_ms": float(d) if d else delay_ms, "steps": int(n) if n else steps}
        except ValueError:
            raise ValueError("--phases item %d: bad number in %r" % (i, part)) from None
        if ph["steps"] < 1 or ph["delay_ms"] < 0:
            raise ValueError("--phases item %d: steps must be >= 1 and delay >= 0 in %r" % (i, part))
        phases.append(ph)
    if not phases:
        raise ValueError("--phases: empty")
    return phases


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def phase_job(args, i, ph, n_phases):
    if n_phases == 1:
        return args.job
    return "%s-p%02d-%s-%dms" % (args.job, i, ph["fault"], int(round(ph["delay_ms"])))


# --- everything below runs in the worker processes -------------------------

def build(args, torch):
    nn = torch.nn

    class TinyTransformer(nn.Module):
        """Embedding → one pre-norm transformer encoder layer → mean pool →
        classifier: transformer-shaped but a few ms per step on one core."""

        def __init__(self, vocab, dim, heads, classes, layers):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.enc = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True,
                                           norm_first=True), layers, enable_nested_tensor=False)
            self.head = nn.Linear(dim, classes)

        def forward(self, x):
            return self.head(self.enc(self.emb(x)).mean(dim=1))

    return TinyTransformer(args.vocab, args.dim, 4, args.classes, args.layers)


class SyntheticLoader:
    """DataLoader-like iterator over synthetic token batches with a learnable
    rule (label = first token mod classes), seeded per rank."""

    def __init__(self, torch, args, rank):
        self.torch = torch
        self.g = torch.Generator().manual_seed(args.data_seed * 1000 + rank)
        self.args = args

    def __iter__(self):
        return self

    def __next__(self):
        a, t = self.args, self.torch
        x = t.randint(0, a.vocab, (a.batch, a.seq), generator=self.g)
        return x, x[:, 0] % a.classes


class FaultState:
    """Mutable state the comm hook reads (the hook is registered once)."""

    def __init__(self):
        self.comm_delay_s = 0.0
        self.step = -1
        self.step_t0_ns = 0
        self.log = None  # --fault-log file on the hidden rank

    def record(self, fault, t0_ns, t1_ns):
        if self.log is not None:
            self.log.write('{"step":%d,"fault":"%s","t0_ns":%d,"t1_ns":%d,"step_t0_ns":%d}\n' % (
                self.step, fault, t0_ns, t1_ns, self.step_t0_ns))
            self.log.flush()


class SlowLayer:
    """forward_compute: a forward hook pair on one module. The pre-hook
    opens a record_function range "layer.<name>" (a PerfScope-like stage
    marker, KAIR §III-A); the post-hook runs one square float32 matmul of
    side n and closes the range. Healthy ranks (and the hidden rank outside
    the fault) use n = 8; the hidden rank during the fault uses the side
    calibrated so the matmul costs about --delay-ms on an idle core: real
    compute, so the slowed operator is an operator, not a gap."""

    SMALL = 8

    def __init__(self, torch, module, name, state):
        self.torch, self.scope, self.state = torch, "layer." + name, state
        self.big = self.SMALL
        self.on = False
        self.rf = None
        module.register_forward_pre_hook(self.pre)
        module.register_forward_hook(self.post)

    def calibrate(self, delay_ms):
        """Side n with an n×n matmul ≈ delay_ms (cost ∝ n³, from a 256 probe)."""
        t = self.torch
        a = t.randn(256, 256)
        best = None
        for _ in range(5):
            t0 = time.perf_counter()
            t.mm(a, a)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        n = int(round(256 * (delay_ms / 1e3 / max(best, 1e-6)) ** (1.0 / 3.0)))
        self.big = max(self.SMALL, min(n, 4096))
        return self.big

    def pre(self, module, inputs):
        self.rf = self.torch.autograd.profiler.record_function(self.scope)
        self.rf.__enter__()

    def post(self, module, inputs, output):
        n = self.big if self.on else self.SMALL
        a = self.torch.ones(n, n)
        t0 = time.time_ns()
        self.torch.mm(a, a)
        if self.on:
            self.state.record("forward_compute", t0, time.time_ns())
        rf, self.rf = self.rf, None
        if rf is not None:
            rf.__exit__(None, None, None)
        return output


def in_window(step, start, until):
    return start >= 0 and step >= start and (until < 0 or step < until)


class CPUHog:
    """Busy processes pinned to the given cores (a co-located CPU hog on one
    rank's core, Greyhound §3 "CPU contention"). Processes, not threads: a
    spinning Python thread would contend for the trainer's GIL instead of
    its core."""

    def __init__(self, cores, procs):
        self.cores, self.n = sorted(cores), max(1, procs)
        self.procs = []

    def start(self):
        if self.procs:
            return
        import subprocess
        for _ in range(self.n):
            p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                os.sched_setaffinity(p.pid, self.cores)
            except (AttributeError, OSError):
                pass
            self.procs.append(p)

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def parse_pin_map(spec):
    """--pin-map "0:0,1:0,2:1,3:0" → {rank: core}."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        r, _, c = part.partition(":")
        out[int(r)] = int(c)
    return out


def log_tensor_stats(f, model, step, values):
    """The logging fault (SysOM-AI §5.4 case 4): a DEBUG-level log line per
    parameter per step with its statistics and leading values, serialized
    on the training thread — every rank slows down alike."""
    for name, p in model.named_parameters():
        t = p.detach().flatten()
        rec = {"step": step, "param": name, "mean": float(t.mean()), "std": float(t.std()) if t.numel() > 1 else 0.0,
               "values": t[:values].tolist()}
        f.write(json.dumps(rec) + "\n")
    f.flush()


def capture_kw(args):
    """capture=True/False for laggard.Perf when --capture is given and this
    client has triggered capture (KAIR); {} otherwise (the client's default,
    which also reads LAGGARD_CAPTURE)."""
    if args.capture is None:
        return {}
    import inspect
    try:
        params = inspect.signature(laggard.Perf.__init__).parameters
    except (TypeError, ValueError):
        return {}
    return {"capture": args.capture == "on"} if "capture" in params else {}


def worker(rank, args, port, phases):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    pin_map = parse_pin_map(args.pin_map)
    if rank in pin_map and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {pin_map[rank]})
    elif args.pin and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    verbose_log = None
    verbose_on = [False]  # latched once the flag file appears (checked every 10 steps)
    if args.verbose_log_from >= 0 or args.verbose_log_flag:
        verbose_log = open(args.verbose_log_out.replace("{rank}", str(rank)), "w")
    hog = None
    if rank == args.hog_rank and args.hog_from >= 0:
        hog = CPUHog(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else {0}, args.hog_procs)
    truth = open(args.truth_out.replace("{rank}", str(rank)), "w") if args.truth_out else None
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    state = None
    try:
        torch.manual_seed(args.seed)
        net = build(args, torch)
        state = FaultState()
        hidden_rank = rank == args.fault_rank
        if hidden_rank and args.fault_log:
            state.log = open(args.fault_log.replace("{rank}", str(rank)), "w")
        slow = None
        if any(ph["fault"] == "forward_compute" for ph in phases):
            slow = SlowLayer(torch, net.get_submodule(args.fault_layer), args.fault_layer, state)
            if hidden_rank:
                delays = [ph["delay_ms"] for ph in phases if ph["fault"] == "forward_compute"]
                print("[demo] rank %d forward_compute: %s matmul side %d" % (
                    rank, args.fault_layer, slow.calibrate(delays[0])), file=sys.stderr, flush=True)
        model = DDP(net)

        def delayed_allreduce(st, bucket):
            # backward_comm: the hidden rank delays its gradient allreduce, so
            # every rank observes the wait inside its backward stage.
            if st.comm_delay_s and bucket.index() == 0:
                t0 = time.time_ns()
                time.sleep(st.comm_delay_s)
                st.record("backward_comm", t0, time.time_ns())
            return default_hooks.allreduce_hook(None, bucket)

        # Its dist.all_reduce is what --collectives captures: no extra hook.
        model.register_comm_hook(state, delayed_allreduce)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()
        loader = iter(SyntheticLoader(torch, args, rank))
        host = socket.gethostname()
        step = 0
        loss_ema = None
        for i, ph in enumerate(phases):
            job = phase_job(args, i, ph, len(phases))
            fault, delay_s = ph["fault"], ph["delay_ms"] / 1000.0
            hidden = rank == args.fault_rank
            start = step
            fault_from = start + (ph["fault_start"] if "fault_start" in ph else 0)
            out_file = args.out.replace("{job}", job) if args.out else None
            # enabled=True: the phase files below are merged, so LAGGARD_DISABLED
            # must not switch this harness off (other LAGGARD_* still apply).
            perf = laggard.Perf(server=None if out_file else args.server, out=out_file and out_file + ".rank{rank}.part",
                                job=job, rank=rank, world_size=args.world, host=host, local_rank=rank, enabled=True,
                                labels=dict({"sync_model": "ddp"}, **({"fault": fault, "delay_ms": str(ph["delay_ms"])} if args.label_faults else {})),
                                flush_interval=0.5, collectives=args.collectives == "on",
                                validation=args.validation == "on", validation_timeout=args.validation_timeout,
                                **capture_kw(args))
            t_phase = time.perf_counter()
            for _ in range(ph["steps"]):
                on = fault != "none" and step >= fault_from
                inject = on and hidden
                state.comm_delay_s = delay_s if inject and fault == "backward_comm" else 0.0
                state.step = step
                if slow is not None:
                    slow.on = inject and fault == "forward_compute"
                if hog is not None:
                    hog.start() if in_window(step, args.hog_from, args.hog_until) else hog.stop()
                sleep_s = args.sleep_ms / 1000.0 if rank == args.sleep_rank and in_window(
                    step, args.sleep_from, args.sleep_until) else 0.0
                t_start = time.time_ns()
                with perf.step(step):
                    state.step_t0_ns = time.time_ns()
                    with perf.stage("data.next_wait"):
                        x, y = next(loader)
                        if inject and fault == "data":
                            t0 = time.time_ns()
                            time.sleep(delay_s)
                            state.record("data", t0, time.time_ns())
                    with perf.stage("model.fwd_loss_cpu_wall"):
                        with perf.cuda_event_sample("model.fwd_loss_cuda_event_ms"):
                            if inject and fault == "forward_host":
                                time.sleep(delay_s)
                            if sleep_s:
                                time.sleep(sleep_s)
                            if args.device_ms:
                                time.sleep(args.device_ms / 1000.0)  # stand-in for waiting on the GPU
                            loss = loss_fn(model(x), y)
                    with perf.stage("model.backward_cpu_wall"):
                        if inject and fault == "backward":
                            time.sleep(delay_s)
                        loss.backward()
                    with perf.stage("callbacks.cpu_wall"):
                        v = loss.item()
                        loss_ema = v if loss_ema is None else 0.9 * loss_ema + 0.1 * v
                        if inject and fault in ("callback_sync", "callback_host"):
                            time.sleep(delay_s)
                        if on and fault == "callback_sync":
                            dist.barrier()
                        if verbose_log is not None and args.verbose_log_flag and not verbose_on[0] and step % 10 == 0:
                            verbose_on[0] = os.path.exists(args.verbose_log_flag)
                        if verbose_log is not None and (verbose_on[0] or in_window(step, args.verbose_log_from,
                                                                                   args.verbose_log_until)):
                            log_tensor_stats(verbose_log, model, step, args.verbose_log_values)
                    with perf.stage("optim.step_cpu_wall"):
                        opt.step()
                        opt.zero_grad(set_to_none=True)
                if truth is not None:
                    truth.write('{"rank":%d,"step":%d,"start_ns":%d,"end_ns":%d}\n' % (rank, step, t_start, time.time_ns()))
                step += 1
                if rank == 0 and (step - start) % args.log_every == 0:
                    print("[demo] phase %d %s@%gms step %d loss %.3f %.1f ms/step" % (
                        i, fault, ph["delay_ms"], step, loss_ema, (time.perf_counter() - t_phase) * 1e3 / (step - start)),
                        file=sys.stderr, flush=True)
            phase_ms = (time.perf_counter() - t_phase) * 1e3
            ok = perf.close(timeout=30)
            st = perf.stats()
            if not ok or st["dropped"]:
                print("[demo] rank %d phase %d telemetry: %s" % (rank, i, st), file=sys.stderr, flush=True)
            dist.barrier()  # every rank's part is complete before the merge
            if rank == 0:
                rec = {"phase": "%02d-%s" % (i, fault), "index": i, "job": job, "fault": fault,
                       "delay_ms": ph["delay_ms"], "from_step": start + min(args.warmup, ph["steps"] - 1),
                       "to_step": step - 1, "first_step": start, "world": args.world,
                       "mean_step_ms": round(phase_ms / ph["steps"], 3)}
                if out_file:
                    parts = [out_file + ".rank%d.part" % r for r in range(args.world)]
                    ranks = [{"rank": r, "host": host, "local_rank": r, "role": {"dp": r, "tp": -1, "pp": -1, "ep": -1}}
                             for r in range(args.world)]
                    laggard.merge_stage_files(out_file, parts, ranks=ranks)
                    for p in parts:
                        os.remove(p)
                    rec["file"] = out_file
                print(json.dumps(rec), flush=True)
            dist.barrier()
    finally:
        if hog is not None:
            hog.stop()
        if truth is not None:
            truth.close()
        if verbose_log is not None:
            verbose_log.close()
        if state is not None and state.log is not None:
            state.log.close()
        dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=4, help="number of ranks (processes)")
    ap.add_argument("--steps", type=int, default=60, help="steps per phase")
    ap.add_argument("--warmup", type=int, default=10, help="leading steps of each phase left out of its scored window")
    ap.add_argument("--fault", choices=FAULTS, default="none")
    ap.add_argument("--fault-rank", type=int, default=-1, help="hidden rank (default: drawn from --seed)")
    ap.add_argument("--delay-ms", type=float, default=120.0)
    ap.add_argument("--fault-start", type=int, default=0, help="first faulty step (single-phase mode)")
    ap.add_argument("--phases", default="", help='several phases in one launch, e.g. "none:50,data:50,data@12:50"')
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-seed", type=int, default=None, help="default: --seed")
    ap.add_argument("--job", default="ddp-demo", help="job id (prefix of per-phase job ids)")
    ap.add_argument("--server", default="http://127.0.0.1:7070")
    ap.add_argument("--out", default="", help="write the stage-matrix JSONL here instead of the server ({job} is substituted)")
    ap.add_argument("--label-faults", action="store_true", help="put the injected fault in job labels (not for blind scoring)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=120.0, help="process-group timeout, seconds")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--start-method", choices=("fork", "spawn", "forkserver"), default="fork")
    ap.add_argument("--collectives", choices=("on", "off"), default=None,
                    help="capture torch.distributed collective calls (default: on with a server, off with --out)")
    ap.add_argument("--validation", choices=("on", "off"), default=None,
                    help="take part in Greyhound validation plans (default: on with a server, off with --out)")
    ap.add_argument("--validation-timeout", type=float, default=30.0, help="validation group timeout, seconds")
    ap.add_argument("--pin", action="store_true", help="pin each rank to its own core (sched_setaffinity)")
    ap.add_argument("--hog-rank", type=int, default=-1, help="rank whose cores get a CPU hog")
    ap.add_argument("--hog-from", type=int, default=-1, help="first hogged step")
    ap.add_argument("--hog-until", type=int, default=-1, help="first step after the hog (-1: to the end)")
    ap.add_argument("--hog-procs", type=int, default=1, help="busy processes in the hog")
    ap.add_argument("--device-ms", type=float, default=0.0,
                    help="every rank sleeps this long in its forward stage: a stand-in for waiting on GPU kernels, "
                         "so ranks are not CPU-bound (an OS-interference case then slows only the disturbed rank)")
    ap.add_argument("--pin-map", default="", help='per-rank cores, e.g. "0:0,1:0,2:1,3:0" (wins over --pin)')
    ap.add_argument("--verbose-log-from", type=int, default=-1, help="first step of the heavy per-step logging fault (all ranks)")
    ap.add_argument("--verbose-log-flag", default="", help="the logging fault starts (on all ranks) once this file exists")
    ap.add_argument("--verbose-log-until", type=int, default=-1, help="first step after it (-1: to the end)")
    ap.add_argument("--verbose-log-values", type=int, default=2048, help="leading values logged per parameter per step")
    ap.add_argument("--verbose-log-out", default="/tmp/laggard-demo-debug-rank{rank}.log", help="where the fault logs ({rank} substituted)")
    ap.add_argument("--sleep-rank", type=int, default=-1, help="rank that sleeps in its forward stage")
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--sleep-from", type=int, default=-1)
    ap.add_argument("--sleep-until", type=int, default=-1)
    ap.add_argument("--truth-out", default="", help="per-rank step start/end JSONL ({rank} substituted)")
    ap.add_argument("--fault-layer", default="enc.layers.0.linear1", help="module forward_compute slows")
    ap.add_argument("--fault-log", default="", help="hidden rank's injected intervals, JSONL ({rank} substituted)")
    ap.add_argument("--capture", choices=("on", "off"), default=None,
                    help="triggered operator capture (sets LAGGARD_CAPTURE; default: the client's default)")
    args = ap.parse_args(argv)
    if args.collectives is None:
        args.collectives = "off" if args.out else "on"
    if args.validation is None:
        args.validation = "off" if args.out else "on"
    for name in ("hog_rank", "sleep_rank"):
        if getattr(args, name) >= args.world:
            ap.error("--%s must be < --world" % name.replace("_", "-"))
    if args.sleep_rank >= 0 and (args.sleep_ms <= 0 or args.sleep_from < 0):
        ap.error("--sleep-rank needs --sleep-ms > 0 and --sleep-from >= 0")
    if args.hog_rank >= 0 and args.hog_from < 0:
        ap.error("--hog-rank needs --hog-from >= 0")
    if args.world < 1:
        ap.error("--world must be >= 1")
    if args.data_seed is None:
        args.data_seed = args.seed
    if args.capture is not None:
        os.environ["LAGGARD_CAPTURE"] = "1" if args.capture == "on" else "0"  # inherited by the ranks
    if args.fault_rank < 0:
        args.fault_rank = random.Random(args.seed).randrange(args.world)
    if args.fault_rank >= args.world:
        ap.error("--fault-rank must be < --world")
    try:
        if args.phases:
            phases = parse_phases(args.phases, args.steps, args.delay_ms)
        else:
            phases = [{"fault": args.fault, "delay_ms": args.delay_ms, "steps": args.steps,
                       "fault_start": args.fault_start}]
    except ValueError as e:
        ap.error(str(e))
    if len(phases) > 1 and args.out and "{job}" not in args.out:
        ap.error("--out must contain {job} when --phases has several phases")

    import torch.multiprocessing as mp

    port = free_port()
    ctx = mp.start_processes(worker, args=(args, port, phases), nprocs=args.world, join=False,
                             start_method=args.start_method)

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        while not ctx.join(timeout=1.0):
            pass
    except (Exception, KeyboardInterrupt, SystemExit) as e:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
        print("[demo] failed: %s" % (str(e).strip() or type(e).__name__), file=sys.stderr, flush=True)
        return e.code if isinstance(e, SystemExit) and isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
