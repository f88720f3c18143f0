"""Per-rank stage timing: the StageFrontier §5 instrumentation API.

    perf = laggard.Perf(server="http://127.0.0.1:7070", job="my-job")
    for batch_idx in ...:
        with perf.step():
            with perf.stage("data.next_wait"):
                batch = next(it)
            with perf.stage("model.fwd_loss_cpu_wall"):
                with perf.cuda_event_sample("model.fwd_loss_cuda_event_ms"):
                    loss = model(batch)
            ...

Design rules (App. A, §5): CPU wall clock via time.perf_counter_ns only; one
ordered stage active at a time (a nested one is rejected and counted, never
raised); the residual step.other_cpu_wall = max(wall − Σ explicit, 0) is
computed here and sent last; no torch.cuda.synchronize() ever; the training
thread never blocks on or fails because of telemetry.
"""

import atexit
import os
import socket
import sys
import time

from .schema import normalize_schema
from .shipper import Shipper
from .sinks import FileSink, HTTPSink

_now = time.perf_counter_ns
_NS_PER_MS = 1e6

# Indexes into a micro record (a list, for speed on the hot path).
_MICRO, _T0, _WALL, _DURS, _LEAD, _PROBES, _NESTED, _PENDING = range(8)


class _NullCtx:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL = _NullCtx()


class _StepCtx:
    __slots__ = ("_p", "_step")

    def __init__(self, perf, step):
        self._p = perf
        self._step = step

    def __enter__(self):
        self._p._begin_step(self._step)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._p._end_step(exc_type is not None)
        return False


class _StageCtx:
    __slots__ = ("_p", "_idx", "_lead", "_t0", "_rec")

    def __init__(self, perf, name, data_lead):
        self._p = perf
        self._idx = perf._index.get(name, -1)
        self._lead = data_lead
        self._rec = None

    def __enter__(self):
        p = self._p
        rec = p._cur
        if rec is None or self._idx < 0:
            # Outside a step or not an explicit ordered stage of the schema
            # (the residual is computed, never timed): ignore, count.
            p._rejected += 1
            return self
        if p._active:
            # App. A Table 11: only one ordered stage may be active; the
            # nested span's time stays inside the outer one.
            rec[_NESTED] += 1
            p._nested += 1
            return self
        p._active = True
        self._rec = rec
        self._t0 = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        rec = self._rec
        if rec is not None:
            rec[_DURS][self._idx] += _now() - self._t0
            if self._lead:
                rec[_LEAD] = self._lead
            self._p._active = False
            self._rec = None
        return False


class _CudaEventCtx:
    __slots__ = ("_p", "_name", "_e0", "_e1")

    def __init__(self, perf, name, factory):
        self._p = perf
        self._name = name
        self._e0 = factory()
        self._e1 = factory()

    def __enter__(self):
        try:
            self._e0.record()
        except Exception:
            self._e0 = None
        return self

    def __exit__(self, exc_type, exc, tb):
        p = self._p
        rec = p._cur
        if self._e0 is None or rec is None:
            return False
        try:
            self._e1.record()
        except Exception:
            return False
        # Polled at later step boundaries; the vector waits for it a little.
        rec[_PENDING].append([self._name, self._e0, self._e1, p._event_polls])
        p._event_samples += 1
        return False


def _detect_identity():
    """(rank, world, local_rank) from torch.distributed when initialised,
    else RANK/WORLD_SIZE/LOCAL_RANK. torch is never imported here: if the
    program has not imported it, it has no process group either."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0") or 0)
        except Exception:
            pass

    def env(name, default):
        try:
            return int(os.environ.get(name, default))
        except ValueError:
            return int(default)

    return env("RANK", "0"), env("WORLD_SIZE", "1"), env("LOCAL_RANK", "0")


def _default_event_factory():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
    except Exception:
        return None
    return lambda: torch.cuda.Event(enable_timing=True)


class Perf:
    """Times ordered stages per logical step and ships one StageVector per
    step (or per accumulation microstep) in the background.

    server: laggard server URL (HTTP sink) unless `out` or `sink` is given.
    out: write the stage-matrix JSONL to this path instead ("{rank}" and
        "{job}" are substituted) — no server needed.
    rank/world_size/local_rank: default from torch.distributed if it is
        initialised at the first step, else RANK/WORLD_SIZE/LOCAL_RANK.
    schema: None (the six default stages), a stage list, or a schema dict.
    accumulation: microsteps per optimizer step; use perf.micro(i).
    role: {"dp","tp","pp","ep","name"}; dp defaults to the rank.
    event_fraction: deterministic fraction of steps whose CUDA-event probe
        is recorded; event_polls: step boundaries a sample may stay pending.
    """

    def __init__(self, server="http://127.0.0.1:7070", job="my-job", rank=None, world_size=None, schema=None,
                 accumulation=1, role=None, *, out=None, sink=None, name=None, labels=None, host=None,
                 local_rank=None, start_step=0, queue_size=4096, batch_size=256, flush_interval=1.0,
                 timeout=2.0, event_fraction=0.1, event_polls=3, enabled=True):
        self._schema = normalize_schema(schema)
        explicit = self._schema["stages"][:-1]
        self._n = len(explicit)
        self._index = {s: i for i, s in enumerate(explicit)}
        self._probes = set(self._schema["probes"])
        self.job_id = job
        self._name = name or job
        self._labels = dict(labels or {})
        self._accum = max(1, int(accumulation or 1))
        self._role = dict(role) if role else None
        self._host = host
        self._rank, self._world, self._local_rank = rank, world_size, local_rank
        self._server, self._out, self._sink = server, out, sink
        self._ship_opts = dict(queue_size=queue_size, batch_size=batch_size, flush_interval=flush_interval)
        self._timeout = timeout
        self._enabled = enabled
        self._event_fraction = float(event_fraction)
        self._event_polls = max(1, int(event_polls))
        self._event_factory = None
        self._event_factory_resolved = False

        self._next_step = int(start_step)
        self._step = -1
        self._cur = None  # current micro record while inside a step
        self._records = []  # micro records of the current step
        self._active = False
        self._step_t0 = 0
        self._held = []  # records waiting for CUDA events
        self._shipper = None
        self._closed = False
        self._steps = 0
        self._nested = 0
        self._rejected = 0
        self._errors = 0
        self._event_samples = 0
        self._event_ready = 0
        self._local_drops = 0
        atexit.register(self._atexit)

    # --- public API ------------------------------------------------------
    def step(self, step=None):
        """Context for one logical (optimizer) step; step defaults to the
        previous step + 1, starting at start_step."""
        return _StepCtx(self, step)

    def stage(self, name, data_lead=0):
        """Context for one ordered stage. data_lead=k says this data wait
        fetched the batch that step+k consumes (prefetch), so the window
        assembler charges it to the consuming step (App. A)."""
        return _StageCtx(self, name, data_lead)

    def micro(self, i):
        """Starts accumulation microstep i of the current step. Usable as a
        plain call or a `with` block; stages until the next micro() call or
        the step's end belong to microstep i, so the microsteps partition the
        step wall (StageFrontier §3, accumulation expansion)."""
        rec = self._cur
        if rec is None or self._active or not (0 <= i < self._accum):
            self._rejected += 1
            return _NULL
        if rec[_MICRO] == i:
            return _NULL
        now = _now()
        rec[_WALL] = now - rec[_T0]
        rec = [i, now, 0, [0] * self._n, 0, None, 0, []]
        self._records.append(rec)
        self._cur = rec
        return _NULL

    def cuda_event_sample(self, name="model.fwd_loss_cuda_event_ms"):
        """Side-channel probe: on a deterministic fraction of steps records two
        CUDA events around the block; readiness is polled at later step
        boundaries, never synchronised. A no-op without CUDA."""
        if self._cur is None or name not in self._probes:
            return _NULL
        if not self._event_factory_resolved:
            self._event_factory = _default_event_factory()
            self._event_factory_resolved = True
        if self._event_factory is None:
            return _NULL
        f, s = self._event_fraction, self._step
        # floor((s+1)f) > floor(s f): exactly fraction f of steps, evenly spread.
        if f <= 0 or int((s + 1) * f) == int(s * f):
            return _NULL
        try:
            return _CudaEventCtx(self, name, self._event_factory)
        except Exception:
            self._errors += 1
            return _NULL

    def stats(self):
        """Counters: steps, sent, dropped, errors, nested, rejected, queued,
        event_samples, event_ready, registered."""
        d = {"steps": self._steps, "sent": 0, "dropped": self._local_drops, "errors": self._errors,
             "nested": self._nested, "rejected": self._rejected, "queued": 0,
             "event_samples": self._event_samples, "event_ready": self._event_ready, "registered": False,
             "last_error": ""}
        sh = self._shipper
        if sh is not None:
            s = sh.stats()
            d["sent"] = s["sent"]
            d["dropped"] += s["dropped"]
            d["errors"] += s["errors"]
            d["queued"] = s["queued"]
            d["registered"] = s["registered"]
            d["last_error"] = s["last_error"]
        return d

    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world

    def close(self, timeout=5.0):
        """Emits vectors still waiting for CUDA events (as not ready) and
        flushes the queue within timeout. Returns True when all was handled.
        Idempotent; never raises."""
        if self._closed:
            return True
        self._closed = True
        try:
            self._poll_events(final=True)
            if self._shipper is not None:
                return self._shipper.close(timeout)
        except Exception:
            self._errors += 1
            return False
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # --- internals ---------------------------------------------------------
    def _begin_step(self, step):
        if self._cur is not None:  # step() nested in step(): keep the outer
            self._nested += 1
            return
        if step is None:
            step = self._next_step
        self._step = step
        self._next_step = step + 1
        now = _now()
        self._step_t0 = now
        rec = [0, now, 0, [0] * self._n, 0, None, 0, []]
        self._records = [rec]
        self._cur = rec

    def _end_step(self, failed):
        cur = self._cur
        if cur is None:
            return
        now = _now()
        cur[_WALL] = now - cur[_T0]
        self._cur = None
        self._active = False
        if failed or self._closed:
            return  # a step that raised has no meaningful vector
        self._steps += 1
        try:
            recs = self._records
            step = self._step
            if any(r[_PENDING] for r in recs):
                self._held.append((step, recs))
            else:
                self._emit(step, recs)
            if self._held:
                self._poll_events(final=False)
        except Exception:
            self._errors += 1

    def _poll_events(self, final):
        keep = []
        for step, recs in self._held:
            waiting = False
            for r in recs:
                still = []
                for pend in r[_PENDING]:
                    name, e0, e1, left = pend
                    ready = False
                    try:
                        ready = bool(e1.query())
                    except Exception:
                        pass
                    if ready:
                        try:
                            val = float(e0.elapsed_time(e1))
                        except Exception:
                            val, ready = 0.0, False
                    if ready:
                        self._event_ready += 1
                        r[_PROBES] = r[_PROBES] or {}
                        r[_PROBES][name] = (val, True)
                    elif final or left <= 1:
                        # Given up: reported as sampled but not ready (App. C
                        # event-ready ratio gate).
                        r[_PROBES] = r[_PROBES] or {}
                        r[_PROBES][name] = (0.0, False)
                    else:
                        pend[3] = left - 1
                        still.append(pend)
                r[_PENDING] = still
                waiting = waiting or bool(still)
            if waiting:
                keep.append((step, recs))
            else:
                self._emit(step, recs)
        self._held = keep

    def _emit(self, step, recs):
        sh = self._shipper
        if sh is None:
            sh = self._start_shipper()
            if sh is None:
                if self._enabled:  # wanted to ship but has nowhere to
                    self._local_drops += len(recs)
                return
        rank = self._rank
        for r in recs:
            durs = [d / _NS_PER_MS for d in r[_DURS]]
            wall = r[_WALL] / _NS_PER_MS
            resid = wall - sum(durs)  # App. A: residual = max(W − Σ explicit, 0)
            durs.append(resid if resid > 0 else 0.0)
            sh.offer((step, rank, r[_MICRO], durs, wall, r[_LEAD], r[_PROBES], r[_NESTED]))

    def _start_shipper(self):
        if not self._enabled:
            return None
        if self._rank is None or self._world is None or self._local_rank is None:
            r, w, lr = _detect_identity()
            self._rank = r if self._rank is None else self._rank
            self._world = w if self._world is None else self._world
            self._local_rank = lr if self._local_rank is None else self._local_rank
        try:
            if self._sink is not None:
                sink = self._sink
            elif self._out:
                sink = FileSink(str(self._out).replace("{rank}", str(self._rank)).replace("{job}", self.job_id))
            elif self._server:
                sink = HTTPSink(self._server, self.job_id, timeout=self._timeout)
            else:
                return None
        except Exception:
            self._errors += 1
            self._enabled = False
            return None
        role = {"dp": self._rank, "tp": -1, "pp": -1, "ep": -1}
        if self._role:
            role.update(self._role)
        job = {"id": self.job_id, "name": self._name, "world_size": self._world, "schema": self._schema,
               "accumulation": self._accum, "labels": self._labels}
        rank = {"rank": self._rank, "host": self._host or socket.gethostname(), "local_rank": self._local_rank,
                "role": role}
        self._shipper = Shipper(sink, job, rank, **self._ship_opts)
        return self._shipper

    def _atexit(self):
        try:
            self.close(timeout=1.0)
        except Exception:
            pass
