"""Per-rank stage timing: the StageFrontier §5 instrumentation API.

    perf = laggard.init()                      # or laggard.Perf(server=..., job=...)
    for batch in ...:
        with perf.step():
            with perf.stage("data"):           # data.next_wait
                batch = next(it)
            with perf.stage("forward"):        # model.fwd_loss_cpu_wall
                with perf.cuda_event_sample():
                    loss = model(batch)
            ...

The same objects decorate functions (`@perf.stage("forward")`,
`@perf.step()`), and framework callbacks use the explicit form
(`begin_step`/`mark`/`end_step`, optionally at a timestamp from
`perf.clock()`).

Design rules (App. A, §5): CPU wall clock via time.perf_counter_ns only; one
ordered stage active at a time (a nested one is rejected and counted, never
raised); the residual step.other_cpu_wall = max(wall − Σ explicit, 0) is
computed here and sent last; no torch.cuda.synchronize() ever; the training
thread never blocks on or fails because of telemetry.
"""

import functools
import inspect
import logging
import os
import socket
import sys
import threading
import time

from . import config, shutdown
from .schema import (PROBE_FORWARD_CUDA, SHORT_NAMES, STAGE_OTHER, default_schema, normalize_schema, order_hash, role_group,
                     stage_index)
from .shipper import Shipper
from .sinks import FileSink, HTTPSink

log = logging.getLogger("laggard")

_now = time.perf_counter_ns

# _streams counts the telemetry streams this process started per job id:
# a second one (laggard.init again in a notebook, an HPO loop, a second
# trainer.fit()) is a new run to the server, not a retry of the first, so
# its process identity gets "/<n>" (docs/design/roles-and-runs.md: a rank
# bound to another process opens a new incarnation; the same process would
# stay in the first and every re-sent step would conflict).
_streams = {}
_streams_lock = threading.Lock()


def _stream_ident(job_id, process):
    with _streams_lock:
        n = _streams[job_id] = _streams.get(job_id, 0) + 1
    if n == 1:
        return process
    suffix = "/%d" % n
    return config._clip_utf8(process, config.MAX_IDENT - len(suffix)) + suffix
_NS_PER_MS = 1e6

# Indexes into a micro record (a list, for speed on the hot path).
_MICRO, _T0, _WALL, _DURS, _LEAD, _PROBES, _NESTED, _PENDING = range(8)

# stage index sentinels (see schema.stage_index)
_UNKNOWN, _RESIDUAL = -1, -2


class _NullCtx:
    """A context that does nothing and, as a decorator, returns the function
    unchanged (so a disabled Perf costs nothing per call)."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        return fn


_NULL = _NullCtx()


def _wrap(fn, make_ctx):
    """Decorates fn so every call runs inside a fresh context from
    make_ctx() (a fresh one, so recursion and re-entry stay correct)."""
    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def awrapper(*args, **kwargs):
            with make_ctx():
                return await fn(*args, **kwargs)
        return awrapper
    if inspect.isgeneratorfunction(fn):
        config.warn_once(("generator", getattr(fn, "__qualname__", fn)),
                         "laggard: %s is a generator function: the decorator times only the call that creates "
                         "the generator, not its iteration", getattr(fn, "__qualname__", fn))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with make_ctx():
            return fn(*args, **kwargs)
    return wrapper


class _StepCtx:
    __slots__ = ("_p", "_step", "_began")

    def __init__(self, perf, step):
        self._p = perf
        self._step = step
        self._began = False

    def __enter__(self):
        self._began = self._p._begin_step(self._step)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._began:  # a nested step() must not end the outer one
            self._began = False
            self._p._end_step(exc_type is not None)
        return False

    def __call__(self, fn):
        """@perf.step(): every call of fn is one step, numbered
        automatically."""
        p = self._p
        if self._step is not None:
            config.warn_once(("step-decorator",), "laggard: @perf.step(%r): a decorated step is numbered "
                             "automatically; the explicit step number is ignored", self._step)
        return _wrap(fn, lambda: _StepCtx(p, None))


class _StageCtx:
    __slots__ = ("_p", "_idx", "_lead", "_t0", "_rec")

    def __init__(self, perf, idx, data_lead):
        self._p = perf
        self._idx = idx
        self._lead = data_lead
        self._rec = None

    def __enter__(self):
        p = self._p
        rec = p._cur
        if rec is None or self._idx < 0:
            # Outside a step, an unknown name, or the residual (computed,
            # never timed): ignored and counted.
            p._reject(self._idx)
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

    def __call__(self, fn):
        """@perf.stage(name): every call of fn is timed as this stage."""
        p, idx, lead = self._p, self._idx, self._lead
        return _wrap(fn, lambda: _StageCtx(p, idx, lead))


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


def _torch_installed():
    """Whether torch can be imported, without importing it."""
    try:
        import importlib.util
        return importlib.util.find_spec("torch") is not None
    except Exception:
        return False


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

    Arguments left as None come from the LAGGARD_* environment (see
    laggard.config; env=False ignores it), then from the defaults below.

    server: laggard server URL (HTTP sink) unless `out` or `sink` is given;
        default LAGGARD_SERVER, then http://127.0.0.1:7070.
    job: job id shared by every rank; default LAGGARD_JOB, then torchrun's
        run id, then slurm-<job>[-<step>], then the script's name.
    out: write the stage-matrix JSONL to this path instead ("{rank}" and
        "{job}" are substituted) — no server needed. LAGGARD_OUT applies only
        when neither server nor out was passed.
    rank/world_size/local_rank: default from torch.distributed if it is
        initialised at the first step, else RANK/WORLD_SIZE/LOCAL_RANK.
    schema: the stages this rank times: None (the six default stages), a
        stage list, or a schema dict.
    role: {"dp","tp","pp","ep","name"}; dp defaults to the rank. Ranks whose
        pp or name differ form role groups, each with its own stage list.
    job_schema: the job's default stage list (what ranks of the default
        role group time); defaults to `schema` for a default-group rank and
        to the six default stages otherwise, so every rank registers the job
        the same way whatever its role.
    accumulation: microsteps per optimizer step; use perf.micro(i).
    run_id: this run's id (an incarnation of the job); default
        LAGGARD_RUN_ID, then derived from the launcher (config.run_id_from_env).
    token: bearer token for the server (default LAGGARD_TOKEN).
    labels: job labels, over LAGGARD_LABELS; sync_model (ddp|fsdp|zero1,
        default LAGGARD_SYNC_MODEL) sets the sync_model label.
    enabled: False times stages but ships nothing (default: LAGGARD_DISABLED
        / LAGGARD_ENABLED, then True). laggard.init() returns a no-op
        NullPerf instead when disabled.
    event_fraction: deterministic fraction of steps whose CUDA-event probe
        is recorded; event_polls: step boundaries a sample may stay pending.
    collectives: capture torch.distributed collective calls (laggard.collectives;
        default LAGGARD_COLLECTIVES, then off); ddp: a DistributedDataParallel
        model whose gradient buckets are captured too (implies collectives).
    validation: take part in Greyhound validation plans (laggard.validation;
        default LAGGARD_VALIDATION, then off). Creates a gloo process group
        — collective: every rank constructs its Perf at the same point.
        validation_timeout: that group's timeout (s), which bounds a plan.
    capture: take part in KAIR operator-trace captures (laggard.capture):
        poll the server for plans, record the planned steps with
        torch.profiler, upload the trace. Default LAGGARD_CAPTURE, then on
        when shipping to a server and torch is installed. capture_poll_s
        (LAGGARD_CAPTURE_POLL_S, default 2) is the poll/heartbeat period;
        capture_dir (LAGGARD_CAPTURE_DIR) where traces wait for upload;
        LAGGARD_CAPTURE_MAX_EVENTS (default 1,000,000) caps one capture's
        events (it stops early; the upload says X-Laggard-Capture-Truncated).
        Call close() on the training thread: from another thread a capture
        in progress is ended at the training thread's next step boundary, or
        reported failed.
    max_batch_bytes: the most JSON one vector batch holds (batches grow
        from batch_size when the shipper falls behind; see laggard.shipper).
    shutdown_timeout: how long the exit flush (atexit, SIGTERM, SIGHUP)
        may delay the end of the process, for every Perf of it together
        (default LAGGARD_SHUTDOWN_TIMEOUT, then 2 s); signals=False (or
        LAGGARD_SIGNALS=0) installs no signal handlers (laggard.shutdown).
    """

    def __init__(self, server=None, job=None, rank=None, world_size=None, schema=None, accumulation=1, role=None, *,
                 out=None, sink=None, name=None, labels=None, host=None, local_rank=None, start_step=0,
                 queue_size=4096, batch_size=256, flush_interval=1.0, timeout=2.0, event_fraction=0.1,
                 event_polls=3, enabled=None, run_id=None, token=None, sync_model=None, job_schema=None, env=True,
                 collectives=None, ddp=None, validation=None, validation_timeout=30.0, collectives_queue=65536,
                 capture=None, capture_poll_s=None, capture_dir=None, max_batch_bytes=None, shutdown_timeout=None,
                 signals=None):
        ec = config.from_env() if env else {}
        if "log_level" in ec:
            config.apply_log_level(ec["log_level"])
        self._schema = normalize_schema(schema)
        explicit = self._schema["stages"][:-1]
        self._n = len(explicit)
        self._names = list(explicit)
        index = stage_index(self._schema)
        # Only timed stages in the hot-path dict: a miss (unknown name, or
        # the residual, which is computed) takes the slow path once per use.
        self._index = {k: v for k, v in index.items() if v >= 0}
        self._residual_names = frozenset(k for k, v in index.items() if v < 0)
        self._probes = set(self._schema["probes"])
        self.order_hash = order_hash(self._schema)
        self._role = dict(role) if role else None
        self.group = role_group(self._role)
        if job_schema is not None:
            self._job_schema = normalize_schema(job_schema)
        elif self.group == "default":
            self._job_schema = self._schema
        else:
            self._job_schema = default_schema()

        if job is None:
            job = ec.get("job") or config.job_id_from_env()
        elif not (isinstance(job, str) and config.JOB_ID_RE.match(job)):
            config.warn_once(("job", job), "laggard: job id %r does not match %s; the server will refuse it",
                             job, config.JOB_ID_RE.pattern)
        self.job_id = str(job)
        self._name = name or self.job_id
        lab = dict(ec.get("labels") or {})
        if ec.get("sync_model"):
            lab["sync_model"] = ec["sync_model"]
        lab.update({str(k): str(v) for k, v in (labels or {}).items()})
        if sync_model is not None:
            if str(sync_model).lower() in config.SYNC_MODELS:
                lab["sync_model"] = str(sync_model).lower()
            else:
                config.warn_once(("sync_model", sync_model), "laggard: ignoring sync_model=%r: want one of %s",
                                 sync_model, ", ".join(config.SYNC_MODELS))
        self._labels = lab
        self._accum = max(1, int(accumulation or 1))
        self._host = host
        self._rank, self._world, self._local_rank = rank, world_size, local_rank
        if server is None and out is None and sink is None:
            out = ec.get("out")
        if server is None:
            server = ec.get("server") or config.DEFAULT_SERVER
        self._server, self._out, self._sink = server, out, sink
        self._token = token if token is not None else ec.get("token")
        self._run_id_given = run_id if run_id is not None else ec.get("run_id")
        self.run_id = None  # resolved when shipping starts (needs the world size)
        self._ship_opts = dict(queue_size=queue_size, batch_size=batch_size, flush_interval=flush_interval)
        if max_batch_bytes is not None:
            self._ship_opts["max_batch_bytes"] = max_batch_bytes
        self._launch = ec.get("incarnation")  # else derived from the launcher when shipping starts
        self._timeout = timeout
        if enabled is None:
            enabled = ec.get("enabled", True)
        self._enabled = bool(enabled)
        self._event_fraction = float(event_fraction)
        self._event_polls = max(1, int(event_polls))
        self._event_factory = None
        self._event_factory_resolved = False

        self._next_step = int(start_step)
        self._step = -1
        self._cur = None  # current micro record while inside a step
        self._records = []  # micro records of the current step
        self._active = False  # an ordered stage is running (with-form or explicit)
        self._explicit = False  # the open step came from begin_step()
        self._xidx = -1  # explicit stage (begin_stage/mark): index, or -1
        self._xt0 = 0
        self._xrec = None
        self._xlead = 0
        self._step_t0 = 0
        self._held = []  # records waiting for CUDA events
        self._shipper = None
        self._closed = False
        self._steps = 0
        self._nested = 0
        self._rejected = 0
        self._unknown = 0
        self._unknown_names = set()  # for stats()
        self._warned_names = set()  # one warning per distinct name
        self._errors = 0
        self._event_samples = 0
        self._event_ready = 0
        self._local_drops = 0
        self._capture = None
        self._kair = None  # laggard.capture.Capturer: operator traces for KAIR
        self._validator = None
        self._val_first = True  # validation setup is retried once, at the first step
        if collectives is None:
            collectives = ec.get("collectives", False) or ddp is not None
        if validation is None:
            validation = ec.get("validation", False)
        self._coll_queue = collectives_queue
        if self._enabled and collectives:
            self._start_capture()
        if ddp is not None:
            self.capture_ddp(ddp)
        if capture is None:
            capture = ec.get("capture")
        if capture is None:  # contracts D: on by default where a trace can be recorded and sent
            capture = out is None and sink is None and _torch_installed()
        if self._enabled and capture:
            from .capture import DEFAULT_POLL_S, Capturer
            if capture_poll_s is None:
                capture_poll_s = ec.get("capture_poll_s", DEFAULT_POLL_S)
            self._kair = Capturer(self.job_id, poll_s=capture_poll_s, directory=capture_dir or ec.get("capture_dir"))
        if self._enabled and validation:
            from .validation import Validator
            self._validator = Validator(self.job_id, timeout_s=validation_timeout)
            self._validator.setup()
        if self._capture is not None or (self._validator is not None and self._validator.pollable):
            torch = sys.modules.get("torch")
            try:
                if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
                    self._start_shipper()  # records and plan polls flow before the first step ends
            except Exception:
                pass
        # Every way the process ends flushes what is queued (laggard.shutdown):
        # atexit closes this Perf; SIGTERM/SIGHUP flush its shipper.
        self._pid = os.getpid()
        shutdown.configure(shutdown_timeout if shutdown_timeout is not None else ec.get("shutdown_timeout"),
                           signals if signals is not None else ec.get("signals"))
        self._sd_key = shutdown.register(self._exit_flush, self._hurry, on_signal=True, weak=True)
        if self._enabled:
            shutdown.install()
        # LAGGARD_AGENT_SOCKET set: tell the node agent which job and rank
        # this process is, so its CPU stacks and OS counters are attributed
        # (SysOM-AI §4). A daemon thread; never raises into training.
        from . import agent_socket
        agent_socket.announce_perf(self)

    # --- public API ------------------------------------------------------
    def step(self, step=None):
        """One logical (optimizer) step: a `with` context, or a decorator
        (`@perf.step()`) making every call of a function one step. step
        defaults to the previous step + 1, starting at start_step."""
        return _StepCtx(self, step)

    def stage(self, name, data_lead=0):
        """One ordered stage: a `with` context, or a decorator timing every
        call. name is a schema stage or its short alias ("data", "forward",
        "backward", "callbacks", "optimizer"). data_lead=k says this data
        wait fetched the batch that step+k consumes (prefetch), so the window
        assembler charges it to the consuming step (App. A)."""
        try:
            idx = self._index[name]
        except (KeyError, TypeError):
            idx = self._lookup_miss(name)
        return _StageCtx(self, idx, data_lead)

    def micro(self, i, *, at=None):
        """Starts accumulation microstep i of the current step. Usable as a
        plain call or a `with` block; stages until the next micro() call or
        the step's end belong to microstep i, so the microsteps partition the
        step wall (StageFrontier §3, accumulation expansion). An open
        explicit stage (begin_stage/mark) ends here."""
        rec = self._cur
        if rec is None or not (0 <= i < self._accum) or (self._active and self._xidx < 0):
            self._rejected += 1
            return _NULL
        if rec[_MICRO] == i:
            return _NULL
        now = _now() if at is None else at
        if self._xidx >= 0:
            self._close_stage(now)
        w = now - rec[_T0]
        rec[_WALL] = w if w > 0 else 0
        rec = [i, now, 0, [0] * self._n, 0, None, 0, []]
        self._records.append(rec)
        self._cur = rec
        return _NULL

    def cuda_event_sample(self, name=PROBE_FORWARD_CUDA):
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

    def capture_ddp(self, model):
        """Captures a DistributedDataParallel model's gradient-bucket
        all-reduces: registers laggard.collectives.ddp_allreduce_hook (the
        default allreduce hook) and turns collective capture on. A model
        with a comm hook of its own keeps it; its torch.distributed calls
        are captured. Returns whether the hook was registered; never
        raises."""
        if not self._enabled or self._closed:
            return False
        try:
            from . import collectives
            if self._capture is None:
                self._start_capture()
            return collectives.register_ddp(model)
        except Exception as e:  # pragma: no cover - register_ddp is defensive
            self._errors += 1
            log.warning("laggard: could not capture the DDP model's buckets: %s: %s", type(e).__name__, e)
            return False

    # --- explicit form (framework callbacks, hand-rolled loops) ------------
    def clock(self):
        """Now, on the clock every duration is measured with (ns). Pass it as
        `at=` to say a boundary happened earlier than the call."""
        return _now()

    def begin_step(self, step=None, *, at=None):
        """Starts a step without a `with` block. A step that an earlier
        begin_step() left open is ended first, so a loop may simply call
        begin_step() at the top. at: when the step began (perf.clock()),
        e.g. the end of the previous step, so a data wait that happened
        before this call belongs to the step."""
        if self._cur is not None and self._explicit:
            self._end_step(False, at)
        self._begin_step(step, at, True)

    def end_step(self, *, at=None, discard=False):
        """Ends the current step (and its open explicit stage) and queues its
        vector; discard=True drops it, as a `with perf.step()` that raised
        does."""
        if self._cur is not None:
            self._end_step(discard, at)

    def begin_stage(self, name, *, at=None, data_lead=0):
        """Starts an ordered stage without a `with` block; it runs until
        end_stage(), mark(), micro() or end_step(). Returns whether it
        started (False, and counted, outside a step, for an unknown name, or
        while another stage is active)."""
        try:
            idx = self._index[name]
        except (KeyError, TypeError):
            idx = self._lookup_miss(name)
        rec = self._cur
        if rec is None or idx < 0:
            self._reject(idx)
            return False
        if self._active:
            rec[_NESTED] += 1
            self._nested += 1
            return False
        self._active = True
        self._xidx, self._xrec, self._xlead = idx, rec, data_lead
        self._xt0 = _now() if at is None else at
        return True

    def end_stage(self, *, at=None):
        """Ends the stage begin_stage() or mark() started; False if none."""
        if self._xidx < 0:
            return False
        self._close_stage(_now() if at is None else at)
        return True

    def mark(self, name, *, at=None):
        """Ends the open explicit stage and starts `name` at the same instant
        (one clock read). mark(None) just ends it: time until the next mark
        stays in the residual."""
        t = _now() if at is None else at
        if self._xidx >= 0:
            self._close_stage(t)
        if name is None:
            return True
        return self.begin_stage(name, at=t)

    # --- introspection -----------------------------------------------------
    def stats(self):
        """Counters: steps, sent, dropped, errors, nested, rejected,
        unknown_stages (uses of names the schema lacks; also in rejected),
        conflicts (409s from the server), registration_conflicts (refused
        registrations, retried), refused (vectors the server refused one by
        one: conflicting re-sends), queued, event_samples, event_ready,
        registered, incarnation (the server's, or None), batch (the current
        adaptive batch size), shipping (False once it gave up), last_error,
        enabled."""
        d = {"steps": self._steps, "sent": 0, "dropped": self._local_drops, "errors": self._errors,
             "nested": self._nested, "rejected": self._rejected, "unknown_stages": self._unknown,
             "unknown_stage_names": sorted(map(str, self._unknown_names)), "conflicts": 0,
             "registration_conflicts": 0, "refused": 0, "queued": 0, "event_samples": self._event_samples,
             "event_ready": self._event_ready, "registered": False, "incarnation": None, "batch": 0,
             "shipping": self._enabled and not self._closed, "last_error": "", "enabled": self._enabled}
        sh = self._shipper
        if sh is not None:
            s = sh.stats()
            d["sent"] = s["sent"]
            d["dropped"] += s["dropped"]
            d["errors"] += s["errors"]
            d["conflicts"] = s["conflicts"]
            d["registration_conflicts"] = s["registration_conflicts"]
            d["refused"] = s["refused"]
            d["incarnation"] = s["incarnation"]
            d["batch"] = s["batch"]
            d["queued"] = s["queued"]
            d["registered"] = s["registered"]
            d["last_error"] = s["last_error"]
            d["shipping"] = d["shipping"] and not s["gave_up"]
        c = self._capture
        if c is not None:
            cs = c.stats()
            cs["sent"] = sh.coll_sent if sh is not None else 0
            cs["dropped"] += sh.coll_drops if sh is not None else 0
            cs["comms_sent"] = sh.comms_sent if sh is not None else 0
            cs["comms_dropped"] = sh.comm_drops if sh is not None else 0
            cs["refused"] = sh.coll_refused if sh is not None else 0
            d["collectives"] = cs
        if self._validator is not None:
            d["validation"] = self._validator.stats()
        if self._kair is not None:
            d["capture"] = self._kair.stats()
        return d

    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world

    @property
    def accumulation(self):
        return self._accum

    @property
    def schema(self):
        """The ordered stage list this rank times (a copy)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self._schema.items()}

    @property
    def enabled(self):
        return self._enabled

    @property
    def closed(self):
        return self._closed

    def close(self, timeout=5.0):
        """Emits vectors still waiting for CUDA events (as not ready) and
        flushes the queue within timeout. Returns True when all was handled.
        Idempotent; never raises."""
        if self._closed:
            return True
        deadline = time.monotonic() + max(0.0, timeout)
        self._close_begin(deadline)
        return self._close_wait(deadline)

    def flush(self, timeout=5.0):
        """Asks the shipper to send what it holds now and waits, at most
        timeout, until everything offered before the call is acknowledged or
        counted as dropped; True if so. Shipping goes on afterwards (close()
        ends it). For a program's own signal handler or checkpoint hook."""
        sh = self._shipper
        if sh is None or self._closed or os.getpid() != self._pid:
            return sh is None
        end = time.monotonic() + max(0.0, timeout)
        target = sh.qfull_drops + sh._popped + len(sh._dq)
        sh.hurry()
        while time.monotonic() < end:
            if sh.sent + sh.ship_drops + sh.qfull_drops + sh.refused >= target:
                return True
            if not sh._thread.is_alive():
                break
            time.sleep(0.005)
        return sh.sent + sh.ship_drops + sh.qfull_drops + sh.refused >= target

    def _close_begin(self, deadline):
        """The first half of close(): nothing more is recorded, held vectors
        are emitted, the shipper starts its final flush."""
        self._closed = True
        shutdown.unregister(self._sd_key)
        if self._capture is not None:
            self._capture.stop()  # torch.distributed is itself again; queued calls still ship
        try:
            self._poll_events(final=True)
            if self._shipper is not None:
                self._shipper.begin_close(deadline)
        except Exception:
            self._errors += 1

    def _close_wait(self, deadline):
        ok = True
        if self._kair is not None:
            # A capture in progress ends here; what it recorded is uploaded
            # within half the time left (the vectors ship meanwhile).
            try:
                ok = self._kair.close(max(0.0, deadline - time.monotonic()) / 2)
            except Exception:  # pragma: no cover - close() is defensive
                self._errors += 1
        try:
            if self._shipper is not None:
                return self._shipper.join(deadline) and ok
        except Exception:
            self._errors += 1
            return False
        return ok

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # --- internals ---------------------------------------------------------
    def _start_capture(self):
        from .collectives import Capture
        c = Capture(perf=self, queue_size=self._coll_queue, host=self._host)
        if c.start():
            self._capture = c
            if self._shipper is not None:
                self._shipper.attach(collectives=c)

    def _reject(self, idx):
        self._rejected += 1
        if idx == _UNKNOWN:
            self._unknown += 1

    def _lookup_miss(self, name):
        try:
            idx = _RESIDUAL if name in self._residual_names else _UNKNOWN
        except TypeError:  # unhashable: not a stage name
            idx = _UNKNOWN
        self._warn_stage(name, idx)
        return idx

    def _warn_stage(self, name, idx):
        # Slow path, once per distinct name: say what the schema does have.
        key = name if isinstance(name, str) else repr(name)
        if key in self._warned_names:
            return
        self._warned_names.add(key)
        if idx == _RESIDUAL:
            log.warning("laggard: stage %r is the residual: laggard computes it as step wall minus the explicit "
                        "stages, so timing it is ignored", name)
            return
        self._unknown_names.add(key)
        known = ", ".join("%s (%s)" % (s, SHORT_NAMES[s]) if s in SHORT_NAMES else s for s in self._names)
        log.warning("laggard: unknown stage %r ignored (counted in stats()['unknown_stages']); its time stays in "
                    "the residual %s. This rank's stages are: %s", name, STAGE_OTHER, known)

    def _close_stage(self, t):
        d = t - self._xt0
        rec = self._xrec
        if d > 0:
            rec[_DURS][self._xidx] += d
        if self._xlead:
            rec[_LEAD] = self._xlead
        self._xidx = -1
        self._xrec = None
        self._active = False

    def _begin_step(self, step, at=None, explicit=False):
        if self._cur is not None:  # step() nested in step(): keep the outer
            self._nested += 1
            return False
        if step is None:
            step = self._next_step
        self._step = step
        self._next_step = step + 1
        k = self._kair
        if k is not None and (k.recording or k.plan is not None):
            # KAIR capture (contracts D): a sampled step starts; before the
            # step's clock read, so starting the profiler is not step time.
            k.begin(step)
        now = _now() if at is None else at
        self._step_t0 = now
        rec = [0, now, 0, [0] * self._n, 0, None, 0, []]
        self._records = [rec]
        self._cur = rec
        self._explicit = explicit

        if self._val_first:
            self._val_first = False
            v = self._validator
            if v is not None and not v.ready:
                v.setup()
                if v.pollable:  # ready, or able to decline plans at once (R5)
                    self._start_shipper() if self._shipper is None else self._shipper.attach(validator=v)
        return True

    def _end_step(self, failed, at=None):
        cur = self._cur
        if cur is None:
            return
        now = _now() if at is None else at
        if self._xidx >= 0:
            self._close_stage(now)
        w = now - cur[_T0]
        cur[_WALL] = w if w > 0 else 0
        self._cur = None
        self._active = False
        k = self._kair
        if k is not None and k.recording:
            k.end(self._step)  # also after a step that raised: its profiler range must close
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
        v = self._validator
        if v is not None:
            # Greyhound §4.3: a plan runs at the end of its step, after the
            # optimizer and before the next step's first collective.
            v.at_step_end(self._step)

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
            host = self._host or socket.gethostname()
            self.run_id = self._run_id_given or config.run_id_from_env(self._world, host=host)
            if self._sink is not None:
                sink = self._sink
            elif self._out:
                sink = FileSink(str(self._out).replace("{rank}", str(self._rank)).replace("{job}", self.job_id))
            elif self._server:
                sink = HTTPSink(self._server, self.job_id, timeout=self._timeout, token=self._token)
            else:
                return None
            role = {"dp": self._rank, "tp": -1, "pp": -1, "ep": -1}
            if self._role:
                role.update(self._role)
            job = {"id": self.job_id, "name": self._name, "world_size": self._world, "schema": self._job_schema,
                   "accumulation": self._accum, "labels": self._labels}
            if self.run_id:
                job["run_id"] = self.run_id
            rank = {"rank": self._rank, "host": host, "local_rank": self._local_rank, "role": role,
                    "schema": self._schema}
            process, started = config.process_ident(host)
            process = _stream_ident(self.job_id, process)
            launch = self._launch if self._launch is not None else config.launch_from_env()
            identity = {"launch": launch, "process": process, "started_ns": started}
            v = self._validator
            self._shipper = Shipper(sink, job, rank, order_hash=self.order_hash, collectives=self._capture,
                                    validator=v if v is not None and v.pollable else None, capturer=self._kair,
                                    identity=identity, **self._ship_opts)
            shutdown.install()  # a Perf built off the main thread installs here, if this is the main thread
        except Exception as e:
            # A bad server URL or an unwritable path: nothing will ship, and
            # the rest of training must not notice beyond this one line.
            self._errors += 1
            self._enabled = False
            log.error("laggard: telemetry off for this process: %s: %s", type(e).__name__, e)
            return None
        return self._shipper

    def _exit_flush(self, deadline, from_signal):
        """laggard.shutdown's hook. At exit: close() (on the main thread,
        sharing the deadline with every other flush). On a terminating
        signal, possibly on another thread while the training thread is
        stopped anywhere: only the shipper's final flush, which takes no
        lock the training thread holds; vectors held for CUDA events and the
        step in progress are not touched (README: what is lost)."""
        if self._closed or os.getpid() != self._pid:
            return None
        if not from_signal:
            self._close_begin(deadline)
            return self._close_wait
        sh = self._shipper
        if sh is None:
            return None
        sh.begin_close(deadline, signal_safe=True)
        return sh.join

    def _hurry(self):
        # laggard.shutdown.hurry(): from a signal handler or its watcher thread
        sh = self._shipper
        if sh is not None and not self._closed:
            sh.hurry(signal_safe=True)


class NullPerf:
    """What laggard.init() returns when telemetry is disabled
    (LAGGARD_DISABLED=1, LAGGARD_ENABLED=0 or enabled=False): the Perf API,
    doing nothing. step()/stage() return one shared context whose decorator
    form returns the function unchanged."""

    enabled = False
    closed = False
    rank = world_size = run_id = None
    order_hash = ""
    accumulation = 1
    group = "default"

    def __init__(self, job=None, **_ignored):
        self.job_id = job

    def step(self, step=None):
        return _NULL

    def stage(self, name, data_lead=0):
        return _NULL

    def micro(self, i, *, at=None):
        return _NULL

    def cuda_event_sample(self, name=PROBE_FORWARD_CUDA):
        return _NULL

    def capture_ddp(self, model):
        return False

    def clock(self):
        return _now()

    def begin_step(self, step=None, *, at=None):
        pass

    def end_step(self, *, at=None, discard=False):
        pass

    def begin_stage(self, name, *, at=None, data_lead=0):
        return False

    def end_stage(self, *, at=None):
        return False

    def mark(self, name, *, at=None):
        return False

    @property
    def schema(self):
        return default_schema()

    def stats(self):
        return {"steps": 0, "sent": 0, "dropped": 0, "errors": 0, "nested": 0, "rejected": 0, "unknown_stages": 0,
                "unknown_stage_names": [], "conflicts": 0, "registration_conflicts": 0, "refused": 0, "queued": 0,
                "event_samples": 0, "event_ready": 0, "registered": False, "incarnation": None, "batch": 0,
                "shipping": False, "last_error": "", "enabled": False}

    def flush(self, timeout=5.0):
        return True

    def close(self, timeout=5.0):
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
