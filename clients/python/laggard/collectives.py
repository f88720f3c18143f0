"""Collective-call capture for torch.distributed jobs (gloo/CPU, or any
backend whose collectives are called from Python) — Greyhound §4.1/§4.2
on a job the NCCL shim cannot see.

    perf = laggard.init(collectives=True, ddp=model)   # one line; see the README

What is captured. While a capture is active, the torch.distributed
collective functions (module attributes of torch.distributed and of
torch.distributed.distributed_c10d, originals kept and restored by stop())
record one collective.Call per call: all_reduce(_coalesced), all_gather
(_into_tensor, _base, _coalesced), reduce_scatter(_tensor, _base),
broadcast, reduce, all_to_all(_single), send/recv/isend/irecv and barrier.
A DDP model's gradient buckets are reduced in C++ and never reach those
functions, so `ddp=model` registers a comm hook that is the default
allreduce hook (its dist.all_reduce is the captured call); a model with a
hook of its own is captured through whatever torch.distributed calls that
hook makes.

Identity (contracts §0). A collective instance is (comm, seq): every member
numbers its calls on a process group 0, 1, 2, … in issue order, so the
Seq-th call of each member is the same collective as long as every member
captures from the same program point (every rank enables capture at the
same place, as laggard.init() on every rank does). Comm ids are the same on
every member without talking: "pg0-world" for the default group, else
"pg<torch group name>-<8 hex of sha1(sorted member ranks)>" — torch names
groups by a creation counter every rank advances alike (new_group is
called by all ranks). Send/Recv are numbered on a directed two-member
comm "<group id>-p2p-<src>-<dst>" (src and dst as ranks *within the group*,
the numbering the NCCL shim also has; parent: the group; its record's
ranks are the global [src, dst]), with one counter per direction: the k-th
Send from A to B and the k-th Recv at B from A are the same instance
(comm, k) on both sides, whatever else either rank sends or receives in
between (both ranks sending first, as pipeline stages do, included), and a
point-to-point call never shifts the collective numbering of the group.

Under the NCCL shim (LD_PRELOAD names liblaggard_nccl) the shim records
every NCCL call with device times, so groups whose backend is nccl are not
captured here as well (that would ship each call twice under two comm
namespaces); gloo groups still are. A group with both backends
("cpu:gloo,cuda:nccl") is captured for its CPU tensors only.

Timestamps are time.time_ns() (CLOCK_REALTIME). Synchronous calls carry
enter/return; on gloo the same host bracket is also dev_start/dev_end
(contracts §0). Asynchronous collectives (async_op=True, as DDP's hook
issues them) return at once; their dev_end is when the work's future
completed (a done-callback). torch 1.13's gloo send/recv works have no
future, so isend/irecv records carry only the issue bracket.

Cost and safety. The training thread does a few dict lookups, two clock
reads and one deque append per call (bench/overhead.py --collectives
measures it); records wait in a bounded queue that the shipper thread
drains; a full queue drops and counts. Nothing here raises into the
caller: a capture error is counted and the original call runs untouched;
the original's own exceptions pass through unchanged.
"""

import collections
import hashlib
import inspect
import json
import logging
import os
import re
import socket
import sys
import threading
import time

log = logging.getLogger("laggard")

_time_ns = time.time_ns

# Contract op names (internal/signal/collective: Op.MarshalText).
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER = "AllReduce", "AllGather", "ReduceScatter"
BROADCAST, REDUCE, ALL_TO_ALL = "Broadcast", "Reduce", "AllToAll"
SEND, RECV, BARRIER = "Send", "Recv", "Barrier"

# torch function -> (op, tensor argument, how it counts, peer/root argument,
# always async). Bytes follow NCCL (contracts §0): the send buffer for
# AllGather, the receive buffer for ReduceScatter, the tensor otherwise.
# "one": a tensor; "sum": a list of tensors, summed.
_SPECS = {
    "all_reduce": (ALL_REDUCE, "tensor", "one", None, False),
    "all_reduce_coalesced": (ALL_REDUCE, "tensors", "sum", None, False),
    "all_gather": (ALL_GATHER, "tensor", "one", None, False),
    "all_gather_into_tensor": (ALL_GATHER, "input_tensor", "one", None, False),
    "_all_gather_base": (ALL_GATHER, "input_tensor", "one", None, False),
    "all_gather_coalesced": (ALL_GATHER, "input_tensor_list", "sum", None, False),
    "reduce_scatter": (REDUCE_SCATTER, "output", "one", None, False),
    "reduce_scatter_tensor": (REDUCE_SCATTER, "output", "one", None, False),
    "_reduce_scatter_base": (REDUCE_SCATTER, "output", "one", None, False),
    "broadcast": (BROADCAST, "tensor", "one", "src", False),
    "reduce": (REDUCE, "tensor", "one", "dst", False),
    "all_to_all": (ALL_TO_ALL, "input_tensor_list", "sum", None, False),
    "all_to_all_single": (ALL_TO_ALL, "input", "one", None, False),
    "send": (SEND, "tensor", "one", "dst", False),
    "recv": (RECV, "tensor", "one", "src", False),
    "isend": (SEND, "tensor", "one", "dst", True),
    "irecv": (RECV, "tensor", "one", "src", True),
    "barrier": (BARRIER, None, "none", None, False),
}

DEFAULT_COMM = "pg0-world"
_ID_BAD = re.compile(r"[^A-Za-z0-9._:-]+")

# Record tuple fields (built on the training thread, encoded by the shipper).
(R_COMM, R_SEQ, R_OP, R_BYTES, R_COUNT, R_DTYPE, R_PEER, R_ROOT, R_ENTER, R_RETURN, R_DEV0, R_DEV1,
 R_STEP) = range(13)

_tls = threading.local()  # .busy: inside a captured call (inner torch calls are not counted twice)
_lock = threading.Lock()
_patched = {}  # (module, name) -> original
_active = None  # the Capture records go to
_SKIP = object()  # a group this rank does not record on (non-member, validation group)


def _dist():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        d = torch.distributed
        return d if d.is_available() else None
    except Exception:
        return None


def group_id(name, ranks, default=False):
    """The comm id of a torch process group (module docstring)."""
    if default:
        return DEFAULT_COMM
    h = hashlib.sha1(",".join(str(r) for r in sorted(ranks)).encode()).hexdigest()[:8]
    n = _ID_BAD.sub("-", str(name or ""))[:64]
    return "pg%s-%s" % (n, h) if n else "pg-" + h


def pair_id(parent, src, dst):
    """The directed P2P comm of Send/Recv from group rank src to group rank
    dst on group `parent` (module docstring; the NCCL shim's scheme too)."""
    return "%s-p2p-%d-%d" % (parent, src, dst)


_SHIM_LIB = "liblaggard_nccl"


def shim_loaded(environ=None):
    """True when the NCCL shim is preloaded into this process."""
    env = os.environ if environ is None else environ
    return _SHIM_LIB in env.get("LD_PRELOAD", "")


class _Comm:
    __slots__ = ("id", "jid", "seq", "size", "comm_rank", "ranks", "index", "backend", "gloo", "pairs",
                 "cuda_skip")

    def __init__(self, cid, ranks, me, backend):
        self.id = cid
        self.jid = json.dumps(cid)
        self.seq = 0
        self.ranks = list(ranks)
        self.size = len(self.ranks)
        self.index = {r: i for i, r in enumerate(self.ranks)}
        self.comm_rank = self.index.get(me, 0)
        self.backend = str(backend or "")
        self.gloo = self.backend == "gloo"
        self.pairs = {}  # (src, dst) global ranks -> directed _Comm
        self.cuda_skip = False  # mixed gloo/nccl group under the shim: CUDA tensors are the shim's


def _dtype_name(t):
    s = str(t.dtype)
    return s[6:] if s.startswith("torch.") else s


class Capture:
    """One capture session: a bounded queue of records for one job, with
    per-group sequence counters starting at 0. start() makes it the active
    session (patching torch.distributed if needed); stop() restores the
    originals when no session is left. perf, when given, supplies the step
    number (its current step, -1 outside a step)."""

    def __init__(self, perf=None, queue_size=65536, host=None):
        self._perf = perf
        self._dq = collections.deque()
        self._max = max(1, int(queue_size))
        self._comms = {}  # group object (None: default) -> _Comm or _SKIP
        self._comm_records = []  # collective.Comm dicts not yet shipped
        self._comm_lock = threading.Lock()
        self.exclude = set()  # groups never recorded (laggard's own validation group)
        self.rank = None
        self.pid = os.getpid()
        self.host = host or socket.gethostname()
        self.captured = 0
        self.qfull_drops = 0  # training thread only
        self.errors = 0
        self.last_error = ""
        self.started = False
        self.stopped = False
        self.shim = shim_loaded()  # R7: NCCL groups are the shim's
        self.shim_skipped = 0  # groups left to the shim

    # --- lifecycle -------------------------------------------------------
    def start(self):
        """Activates this session; False (and a warning) when
        torch.distributed is not importable. Never raises."""
        global _active
        d = _dist()
        if d is None:
            log.warning("laggard: collective capture needs torch.distributed (import torch first); capture is off")
            return False
        try:
            with _lock:
                install(d)
                _active = self
            self.started = True
            return True
        except Exception as e:  # pragma: no cover - defensive
            self._error("start", e)
            return False

    def stop(self):
        """Deactivates this session; restores torch.distributed when it was
        the active one. Idempotent; never raises."""
        global _active
        self.stopped = True
        try:
            with _lock:
                if _active is self:
                    _active = None
                    uninstall()
        except Exception as e:  # pragma: no cover - defensive
            self._error("stop", e)

    @property
    def active(self):
        return _active is self

    def stats(self):
        return {"captured": self.captured, "dropped": self.qfull_drops, "errors": self.errors,
                "queued": len(self._dq), "comms": sum(1 for c in self._comms.values() if c is not _SKIP),
                "active": self.active, "last_error": self.last_error, "shim_groups": self.shim_skipped}

    # --- shipper side ----------------------------------------------------
    def pop(self):
        """The oldest record, or None."""
        try:
            return self._dq.popleft()
        except IndexError:
            return None

    def __len__(self):
        return len(self._dq)

    def take_comms(self):
        with self._comm_lock:
            out, self._comm_records = self._comm_records, []
        return out

    def return_comms(self, comms):
        """Comm records of a batch that failed go out again with the next."""
        with self._comm_lock:
            self._comm_records[:0] = comms

    def has_comms(self):
        return bool(self._comm_records)

    def encode(self, rec):
        """One collective.Call as compact JSON text."""
        s = ('{"rank":%d,"pid":%d,"comm":%s,"seq":%d,"op":"%s","bytes":%d,"count":%d,"dtype":"%s","peer":%d,'
             '"root":%d,"enter_ns":%d,"return_ns":%d' % (
                 self.rank, self.pid, rec[R_COMM], rec[R_SEQ], rec[R_OP], rec[R_BYTES], rec[R_COUNT], rec[R_DTYPE],
                 rec[R_PEER], rec[R_ROOT], rec[R_ENTER], rec[R_RETURN]))
        if rec[R_DEV0] and rec[R_DEV1]:
            s += ',"dev_start_ns":%d,"dev_end_ns":%d' % (rec[R_DEV0], rec[R_DEV1])
        return s + ',"step":%d}' % rec[R_STEP]

    # --- training thread -------------------------------------------------
    def _error(self, where, e):
        self.errors += 1
        self.last_error = "%s: %s: %.200s" % (where, type(e).__name__, e)
        if self.errors == 1:
            log.warning("laggard: collective capture error (counted; training unaffected): %s", self.last_error)

    def _resolve(self, d, g):
        c10d = d.distributed_c10d
        gm = c10d.GroupMember
        world = gm.WORLD
        pg = world if g is None else g
        if pg is None:
            return None
        if pg is gm.NON_GROUP_MEMBER or pg in _excluded or pg in self.exclude:
            return _SKIP
        shared = self._comms.get(pg)  # None and the world object are one group with one counter
        if shared is not None:
            return shared
        if self.rank is None:
            self.rank = d.get_rank()
        default = pg is world
        if default:
            ranks = list(range(d.get_world_size()))
        else:
            ranks = list(d.get_process_group_ranks(pg))
        name = getattr(c10d, "_pg_names", {}).get(pg, "")
        backend = str(d.get_backend(pg) or "")
        cuda_skip = False
        if self.shim and "nccl" in backend:
            if "gloo" not in backend:
                self._comms[pg] = _SKIP
                self._shim_note(backend)
                return _SKIP
            cuda_skip = True
            self._shim_note(backend)
        c = _Comm(group_id(name, ranks, default), ranks, self.rank, backend)
        c.cuda_skip = cuda_skip
        self._comms[pg] = c
        self._add_comm(c, None)
        return c

    def _add_comm(self, c, parent):
        rec = {"id": c.id, "size": c.size, "rank": self.rank, "comm_rank": c.comm_rank, "ranks": c.ranks,
               "host": self.host}
        if c.backend:
            rec["backend"] = c.backend
        if parent:
            rec["parent"] = parent
        with self._comm_lock:
            self._comm_records.append(rec)

    def _shim_note(self, backend):
        self.shim_skipped += 1
        if self.shim_skipped == 1:
            log.info("laggard: the NCCL shim (LD_PRELOAD %s) records NCCL calls; collective capture in Python "
                     "leaves %s groups to it and captures only gloo traffic", _SHIM_LIB, backend)

    def _pair(self, c, src, dst):
        """The directed comm for src -> dst (global ranks) on group c."""
        key = (src, dst)
        p = c.pairs.get(key)
        if p is None:
            p = _Comm(pair_id(c.id, c.index.get(src, src), c.index.get(dst, dst)), [src, dst], self.rank, c.backend)
            c.pairs[key] = p
            self._add_comm(p, c.id)
        return p

    def enter(self, spec, pos, args, kwargs):
        """The record of a call about to run, or None (not recorded)."""
        try:
            op, targ, how, parg, _ = spec
            g = _arg(pos, args, kwargs, "group", None)
            c = self._comms.get(g)
            if c is None:
                d = _dist()
                c = self._resolve(d, g) if d is not None else None
                if c is None:  # no default group yet: torch raises its own error; resolve again later
                    return None
                self._comms[g] = c
            if c is _SKIP:
                return None
            if c.cuda_skip and _on_cuda(_arg(pos, args, kwargs, targ, None) if targ else None):
                return None
            peer = root = -1
            if parg is not None:
                v = _arg(pos, args, kwargs, parg, None)
                if op is SEND or op is RECV:
                    if v is None:  # recv from any source: no pair to number it on
                        return None
                    peer = int(v)
                    me = self.rank
                    if me is None:
                        me = self.rank = _dist().get_rank()
                    if peer == me:  # torch refuses it; nothing to pair
                        return None
                    c = self._pair(c, me, peer) if op is SEND else self._pair(c, peer, me)
                elif v is not None:
                    root = c.index.get(int(v), -1)
            nbytes = count = 0
            dtype = ""
            if how == "one":
                t = _arg(pos, args, kwargs, targ, None)
                count = t.numel()
                nbytes = count * t.element_size()
                dtype = _dtype_name(t)
            elif how == "sum":
                ts = _arg(pos, args, kwargs, targ, None) or ()
                for t in ts:
                    n = t.numel()
                    count += n
                    nbytes += n * t.element_size()
                if ts:
                    dtype = _dtype_name(ts[0])
            seq = c.seq
            c.seq = seq + 1
            p = self._perf
            step = p._step if p is not None and p._cur is not None else -1
            return [c.jid, seq, op, nbytes, count, dtype, peer, root, _time_ns(), 0, 0, 0, step, c.gloo]
        except Exception as e:
            self._error("enter", e)
            return None

    def done(self, rec, result, is_async):
        """Completes a record after the original returned; never raises."""
        t = _time_ns()
        try:
            rec[R_RETURN] = t
            gloo = rec.pop()
            if is_async and result is not None:
                fut = None
                try:
                    fut = result.get_future()
                except Exception:  # gloo send/recv in torch 1.13: no future; issue bracket only
                    pass
                if fut is not None:
                    if gloo:
                        rec[R_DEV0] = rec[R_ENTER]
                    fut.add_done_callback(lambda _f, r=rec: self._finish(r))
                    return
            elif gloo:
                rec[R_DEV0] = rec[R_ENTER]
                rec[R_DEV1] = t
            self._put(rec)
        except Exception as e:
            self._error("done", e)

    def _finish(self, rec):
        # Runs on the backend's thread when the work completes.
        try:
            if rec[R_DEV0]:
                rec[R_DEV1] = max(_time_ns(), rec[R_DEV0])
            self._put(rec)
        except Exception as e:  # pragma: no cover - defensive
            self._error("finish", e)

    def _put(self, rec):
        dq = self._dq
        if len(dq) >= self._max:
            self.qfull_drops += 1
            return
        dq.append(tuple(rec))
        self.captured += 1


def _on_cuda(t):
    """Whether a call on a mixed gloo/nccl group goes to NCCL (the shim's):
    a CUDA tensor (or a list starting with one); a barrier (no tensor) too."""
    if t is None:
        return True
    if isinstance(t, (list, tuple)):
        if not t:
            return False
        t = t[0]
    return bool(getattr(t, "is_cuda", False))


def _arg(pos, args, kwargs, name, default):
    i = pos.get(name)
    if i is not None and i < len(args):
        return args[i]
    return kwargs.get(name, default)


def _wrapper(name, orig, spec, pos):
    is_async_always = spec[4]

    def captured(*args, **kwargs):
        cap = _active
        if cap is None or getattr(_tls, "busy", False):
            return orig(*args, **kwargs)
        rec = cap.enter(spec, pos, args, kwargs)
        if rec is None:
            return orig(*args, **kwargs)
        _tls.busy = True
        try:
            res = orig(*args, **kwargs)
        finally:
            _tls.busy = False
        cap.done(rec, res, is_async_always or bool(_arg(pos, args, kwargs, "async_op", False)))
        return res

    captured.__name__ = getattr(orig, "__name__", name)
    captured.__qualname__ = getattr(orig, "__qualname__", name)
    captured.__doc__ = getattr(orig, "__doc__", None)
    captured.__wrapped__ = orig
    captured._laggard_capture = True
    return captured


def install(d=None):
    """Patches torch.distributed's collective functions (idempotent); the
    originals are kept for uninstall(). Returns the number patched."""
    d = d or _dist()
    if d is None or _patched:
        return len(_patched)
    c10d = d.distributed_c10d
    wrappers = {}
    for name, spec in _SPECS.items():
        orig = getattr(c10d, name, None)
        if orig is None or getattr(orig, "_laggard_capture", False):
            continue
        try:
            params = list(inspect.signature(orig).parameters)
        except (TypeError, ValueError):
            continue
        if spec[1] is not None and spec[1] not in params:
            continue  # another torch version spells it differently: leave it alone
        wrappers[name] = (orig, _wrapper(name, orig, spec, {p: i for i, p in enumerate(params)}))
    for mod in (c10d, d):
        for name, (orig, w) in wrappers.items():
            if getattr(mod, name, None) is orig:
                _patched[(mod, name)] = orig
                setattr(mod, name, w)
    return len(_patched)


def uninstall():
    """Restores every patched function."""
    for (mod, name), orig in list(_patched.items()):
        try:
            setattr(mod, name, orig)
        except Exception:  # pragma: no cover - defensive
            pass
    _patched.clear()


_excluded = set()  # groups no session records on (laggard's validation group)


def exclude(group):
    """Never record calls on this process group."""
    _excluded.add(group)


class suspended:
    """Within this block, calls on this thread are not recorded (laggard's
    own validation traffic). Nests with captured calls."""

    def __enter__(self):
        self._prev = getattr(_tls, "busy", False)
        _tls.busy = True
        return self

    def __exit__(self, *exc):
        _tls.busy = self._prev
        return False


def is_installed():
    return bool(_patched)


def active():
    """The active Capture, or None."""
    return _active


def ddp_allreduce_hook(process_group, bucket):
    """DDP comm hook: torch's default allreduce hook, whose dist.all_reduce
    (async) is the captured call. Numerically the same as DDP's built-in
    allreduce (average of the bucket); costs one Python call per bucket."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return default_hooks.allreduce_hook(process_group, bucket)


def register_ddp(model):
    """Registers ddp_allreduce_hook on a DistributedDataParallel model so
    its bucket all-reduces go through torch.distributed.all_reduce. Returns
    True when registered; False (logged) when the model has a comm hook
    already (then its own torch.distributed calls are what is captured) or
    is not a DDP model. Never raises."""
    reg = getattr(model, "register_comm_hook", None)
    if reg is None:
        log.warning("laggard: ddp=%s is not a DistributedDataParallel model; its gradient buckets are not captured",
                    type(model).__name__)
        return False
    try:
        reg(getattr(model, "process_group", None), ddp_allreduce_hook)
        return True
    except Exception as e:
        log.info("laggard: DDP model has a comm hook already (%s); its torch.distributed calls are captured", e)
        return False
