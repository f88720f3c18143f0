"""Background shipping of stage vectors over a bounded queue.

The training thread only ever calls offer(), which never blocks and never
raises: a full queue drops the vector and counts it. Everything that can
block or fail (registration, HTTP, file writes) runs on one daemon thread,
and every vector lost there is counted too. Drops are reported in the next
shipped vector's `dropped` field so the server can cap confidence
(telemetry_limited, StageFrontier §5 "bounded queues" and App. A).

Batches grow when the shipper falls behind (issue 16 item 3): a batch is
shipped when it holds the current batch size or max_batch_bytes of JSON,
and the batch size doubles (up to the queue size, 16384 vectors) while a
whole batch is already waiting behind the one just sent — a slow server or
a high step rate then costs fewer, larger requests instead of drops — and
halves back once the shipper has caught up.

Incarnations (issue 16 item 1, docs/design/roles-and-runs.md): the sink
registers with this process's launch/process identity and sends the
incarnation the server answered with every batch. What a process loses
when it is killed is counted where it can be: stats() counts every vector
this process dropped, and the server counts the steps a restarted
launch's ranks never shipped (its report's `incarnations`). A 409
never turns shipping off: a refused registration is logged once at ERROR
and retried with backoff; a refused vector (a conflicting re-send of a
stored cell) is dropped alone, counted, and the rest of its batch goes on.
"""

import collections
import json
import logging
import math
import os
import random
import re
import sys
import threading
import time

from .sinks import ShipError

log = logging.getLogger("laggard")

_REG_ATTEMPTS = 3  # immediate registration retries before backing off
_MIN_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 5.0
_SLICE_VECTORS = 16  # vectors encoded per hold of the GIL (~40-90 µs; a 256-vector batch took ~2 ms)
_SLICE_S = 0.0001  # and a slice ends after this long anyway (a slow or busy CPU)
# A queue a quarter full means the shipper is falling behind and drops are
# near: slices then grow (a GIL hold of at most ~0.4 ms instead of ~0.1 ms)
# so that fewer yields — each a trip through the scheduler, milliseconds on
# a busy machine — are spent per vector. Issue 16 item 3, bench/drops.py.
_SLICE_VECTORS_BEHIND = 64
_SLICE_S_BEHIND = 0.0004
_YIELD_S = 0.0002  # the pause between slices that lets the training thread take the GIL
_MAX_PAUSE_S = 10.0  # cap on a server's Retry-After
_CONFLICT_MIN_S = 1.0  # a refused registration (409) is tried again after 0.5-1 s,
_CONFLICT_MAX_S = 60.0  # doubling up to a minute: a later incarnation may fit
_FATAL = (401, 403)  # a refused token: stop shipping (retrying cannot heal it)
_MAX_BATCH_VECTORS = 16384  # adaptive batches grow to this at most (the server takes 65536)
DEFAULT_MAX_BATCH_BYTES = 4 << 20  # and to this much JSON (the server's default body limit is 64 MiB)
_CELL_ROUNDS = 8  # re-sends of one batch after 409s naming single vectors
_CELL = re.compile(r"^vectors\[(\d+)\]$")  # a 409 naming one stored cell (incarnation protocol)
_CALL = re.compile(r"^calls\[(\d+)\]$")
_COLL_BATCH = 2048  # collective calls per POST
_COLL_SLICE = 64  # calls encoded per hold of the GIL (~2 µs each)
_VAL_POLL_S = 2.0  # contracts §3: poll for a validation plan every ~2 s
_VAL_TRIES = 5  # posts of one validation result before it is dropped
_COMM_TRIES = 3  # refusals (4xx naming no comm) a comm record survives before it is dropped
_COMM_FIELD = re.compile(r"^comms\[(\d+)\]")  # a 400/409 naming one comm record (contracts §1)


def explain(err, job, rank_info):
    """The one ERROR line for a failure that stops shipping: what the server
    said, and what to change."""
    what = {"job": "registering job %r" % job.get("id"),
            "rank": "rank %s joining job %r" % (rank_info.get("rank"), job.get("id")),
            "vectors": "vectors of rank %s for job %r" % (rank_info.get("rank"), job.get("id"))}.get(
        err.op, "a request for job %r" % job.get("id"))
    status = "HTTP %d" % err.status if err.status else "error"
    if err.field:
        status += ", field %s" % err.field
    msg = "server refused %s (%s): %s" % (what, status, err.detail or err)
    tail = "Telemetry from this process is off; training continues."
    if err.status == 409:
        if err.op in ("job", "rank"):
            tail = ("Registration is tried again with backoff (up to every %d s; a later incarnation may fit); "
                    "until it succeeds this process's vectors are dropped and counted "
                    "(stats()['registration_conflicts']). Training continues." % _CONFLICT_MAX_S)
        else:
            tail = ("The refused vectors are dropped and counted (stats()['conflicts']); this process registers "
                    "again and keeps shipping. Training continues.")
    if err.status == 409 and err.op == "job":
        if err.field == "run_id":
            hint = ("job id %r is registered by another run (this run's run_id is %r) and this server does not "
                    "keep runs apart; set LAGGARD_JOB (or job=) to a new id for this run, or upgrade the server "
                    "(one that keeps incarnations registers a new run as a new incarnation)"
                    % (job.get("id"), job.get("run_id")))
        else:
            hint = ("job id %r is registered with a different %s; give this run the registered one, or set "
                    "LAGGARD_JOB (or job=) to a new id for this run" % (job.get("id"), err.field or "configuration"))
    elif err.status == 409:
        from .schema import role_group
        hint = ("every rank of role group %r (role pp/name) must declare the same ordered stage list; "
                "give this rank's role another pp or name, or use the group's stage list"
                % role_group(rank_info.get("role")))
    elif err.status in (401, 403):
        hint = "check LAGGARD_TOKEN (or token=)"
    else:
        hint = "check the job and schema arguments"
    return "%s. Hint: %s. %s" % (msg, hint, tail)


def vector_dict(item, order_hash=None):
    """Builds the StageVector JSON object from the training thread's tuple
    (step, rank, micro, durations, wall, data_lead, probes, nested)."""
    step, rank, micro, durs, wall, lead, probes, nested = item
    v = {"step": step, "rank": rank, "durations_ms": [round(d, 6) for d in durs], "wall_ms": round(wall, 6)}
    if order_hash:
        v["order_hash"] = order_hash
    if micro:
        v["micro"] = micro
    if lead:
        v["data_lead"] = lead
    if probes:
        v["probes"] = {k: {"value_ms": round(val, 6), "ready": ready} for k, (val, ready) in probes.items()}
    if nested:
        v["nested"] = nested
    return v


_dumps = json.JSONEncoder(separators=(",", ":")).encode
_isfinite = math.isfinite
_formats = {}


def encode_vector(item, order_hash=None):
    """The StageVector of vector_dict as compact JSON text, about 3x faster:
    the common fields are formatted directly (durations are whole
    nanoseconds in ms, so %.6f loses nothing). Anything unusual (a step that
    is not an int, a non-finite duration) goes through json."""
    step, rank, micro, durs, wall, lead, probes, nested = item
    if type(step) is not int or type(rank) is not int or not _isfinite(wall + sum(durs)):
        return _dumps(vector_dict(item, order_hash))
    f = _formats.get(len(durs))
    if f is None:  # one format per stage count: a single % operation (~20% faster than a join)
        f = _formats[len(durs)] = '{"step":%d,"rank":%d,"durations_ms":[' + ",".join(["%.6f"] * len(durs)) + \
            '],"wall_ms":%.6f'
    s = f % (step, rank, *durs, wall)
    if order_hash:
        s += ',"order_hash":' + _dumps(order_hash)
    if micro:
        s += ',"micro":' + _dumps(micro)
    if lead:
        s += ',"data_lead":' + _dumps(lead)
    if probes:
        s += ',"probes":' + _dumps({k: {"value_ms": round(val, 6), "ready": ready} for k, (val, ready) in probes.items()})
    if nested:
        s += ',"nested":' + _dumps(nested)
    return s + "}"


def _with_dropped(v, n):
    """The first vector of a batch, carrying the drops since the last
    shipped vector."""
    if isinstance(v, str):
        return '{"dropped":%d,%s' % (n, v[1:])
    v = dict(v)
    v["dropped"] = n
    return v


def config_warn(key, msg, *args):
    from .config import warn_once
    warn_once(key, msg, *args)


def _yield_gil():
    # A real sleep, not sleep(0): a thread that releases the GIL and asks
    # for it straight back usually gets it again before the waiting
    # training thread wakes up, and that thread then waits out a whole
    # switch interval (5 ms) before it forces a switch.
    time.sleep(_YIELD_S)


def _lost_incarnation(e):
    """A 400 refusing the batch's incarnation as one the server does not
    have (a job deleted and registered again meanwhile): the process
    registers again and learns the one to send. (An "unknown field" refusal
    never gets here: the sink sends that route's batches without it.)"""
    return e.status == 400 and e.field == "incarnation"


def refused_cells(err, n):
    """Indexes of the single items a 409 refuses (incarnation protocol: a
    conflicting re-send of a stored cell names it, "field": "vectors[3]";
    a server may list them all in "conflicts": [3, 7]), or [] when the
    refusal names no item of the batch (a contract conflict)."""
    if err.status != 409:
        return []
    out = set()
    body = err.body if isinstance(err.body, dict) else {}
    lst = body.get("conflicts")
    if isinstance(lst, list):
        for x in lst:
            if isinstance(x, dict):
                x = x.get("index")
            if type(x) is int and 0 <= x < n:
                out.add(x)
    m = (_CELL if err.op != "collectives" else _CALL).match(err.field or "")
    if m is not None and int(m.group(1)) < n:
        out.add(int(m.group(1)))
    return sorted(out)


class Shipper:
    def __init__(self, sink, job, rank_info, queue_size=4096, batch_size=256, flush_interval=1.0, order_hash=None,
                 collectives=None, validator=None, capturer=None, max_batch_bytes=DEFAULT_MAX_BATCH_BYTES,
                 identity=None):
        self._sink = sink
        self._order_hash = order_hash
        self._job = job
        self._rank_info = rank_info
        self._pid = os.getpid()
        # Sinks that take JSON text (HTTPSink, FileSink) get each vector
        # encoded as it arrives; a sink with only send(dicts) gets dicts.
        self._encoded = callable(getattr(sink, "send_encoded", None))
        # HTTPSink joins a large body in pieces, pausing (for the GIL) between them.
        self._pauses = self._encoded and bool(getattr(sink, "pauses", False))
        if identity and callable(getattr(sink, "set_identity", None)):
            try:
                sink.set_identity(identity)
            except Exception:  # pragma: no cover - defensive
                pass
        # A deque, not queue.Queue: append/popleft are atomic under the GIL
        # and take no lock, so offer() costs ~0.1 µs. The shipper polls it.
        self._dq = collections.deque()
        self._maxsize = max(1, queue_size)
        self._base_batch = max(1, batch_size)
        self._batch_size = self._base_batch  # adaptive: see _adapt()
        self._max_batch = max(self._base_batch, min(_MAX_BATCH_VECTORS, self._maxsize))
        self._max_bytes = max(1024, int(max_batch_bytes))
        self._req_timeout = getattr(sink, "request_timeout", None)  # seconds one request may take
        self._last_post_s = 0.0  # how long the last accepted batch took
        self._bbytes = 0  # JSON bytes of the batch being built
        self._flush_interval = flush_interval
        self._poll = min(0.05, max(0.001, flush_interval))
        # A plain flag, not an Event: Event.set() takes a lock, and a signal
        # handler that interrupted its holder on the same thread would wait
        # for it forever (signal_safe below).
        self._stopping = False
        self._wake = threading.Event()  # close() and hurry() cut a wait short (off a signal)
        self._hurry = False  # ship what is held now (a signal the program handles)
        self._close_by = None  # monotonic deadline set by close()
        self._rand = random.Random()
        # Single-writer counters (no locks needed under the GIL):
        self.qfull_drops = 0  # written by the training thread only
        self._qfull_reported = 0  # written by the shipper thread only
        self._unreported = 0  # shipper-side drops not yet sent in `dropped`
        self._popped = 0  # vectors taken off the queue (Perf.flush counts them)
        self.ship_drops = 0
        self.sent = 0  # vectors the server acknowledged
        self.refused = 0  # vectors the server refused one by one (409 naming the cell): dropped, counted
        self.errors = 0
        self.conflicts = 0  # 409 answers: registration, cells, contract
        self.reg_conflicts = 0  # of them, refused registrations (retried with backoff)
        self._reg_refused = False  # in a refused-registration episode (its ERROR is logged once)
        self._logged_409 = set()  # fields of contract 409s on vectors already logged
        self.batch_grown = 0  # times the batch size doubled
        self.last_error = ""
        self._registered = False
        self._dead = False
        self._backoff = _MIN_BACKOFF_S
        self._cbackoff = _CONFLICT_MIN_S
        self._retry_at = 0.0  # no request before this (backoff, Retry-After)
        self._stop_failures = 0  # failed requests since close() was called
        # Collective calls (laggard.collectives.Capture) and validation
        # (laggard.validation.Validator) ride on this thread too; see _side().
        self._coll = None
        self._cbatch = []  # encoded calls of the next collectives batch
        self._cbatch_size = _COLL_BATCH
        self._cdeadline = 0.0
        self._coll_dead = False
        self._c_qf_reported = 0
        self._c_unreported = 0
        self._c404 = 0
        self.coll_sent = 0
        self.coll_drops = 0  # shipper-side; queue-full drops are the Capture's
        self.coll_refused = 0  # calls the server refused one by one (409 naming the call)
        self.comm_drops = 0  # comm records the server refused (B6): dropped, counted, never re-sent
        self.comms_sent = 0  # comm records the server acknowledged (never re-sent)
        self._val = None
        self._val_next = 0.0
        self._val_dead = False
        self._v404 = 0
        self._vres = []  # [vid, body, tries] not yet posted
        self.val_polls = 0
        self.val_posted = 0
        # KAIR traces (laggard.capture.Capturer): polled here, recorded on
        # the training thread, uploaded by its own thread.
        self._cap = None
        self.attach(collectives, validator, capturer)
        self._thread = threading.Thread(target=self._run, name="laggard-shipper", daemon=True)
        self._thread.start()

    def attach(self, collectives=None, validator=None, capturer=None):
        """Adds a collective capture, a validator and/or a trace capturer
        (from any thread)."""
        if collectives is not None:
            if callable(getattr(self._sink, "send_collectives", None)):
                self._coll = collectives
            else:
                log.info("laggard: this sink cannot take collective calls; they are not shipped")
        if validator is not None and callable(getattr(self._sink, "poll_validation", None)):
            self._val = validator
        if capturer is not None and capturer.attach(self._sink, self._rank_info.get("rank", 0)):
            self._cap = capturer

    # --- training thread -------------------------------------------------
    def offer(self, item):
        """Never blocks: a full queue drops the item and counts it."""
        dq = self._dq
        if len(dq) >= self._maxsize:  # only the shipper removes, so no overshoot
            self.qfull_drops += 1
            return False
        dq.append(item)
        return True

    # --- any thread ------------------------------------------------------
    def hurry(self, signal_safe=False):
        """Ship what is held now, without waiting for the flush interval.
        Never blocks. signal_safe: called from a signal handler or while the
        training thread may be stopped anywhere — only flags are set (no
        lock is taken); the shipper notices within its poll (<= 50 ms)."""
        self._hurry = True
        if not signal_safe:
            self._wake.set()

    def begin_close(self, deadline, signal_safe=False):
        """Starts the final flush: what is queued ships, and nothing runs
        past deadline (time.monotonic()). Returns at once; signal_safe as
        for hurry()."""
        # The shipper's own deadline is a little earlier, so that it has
        # finished (and the sink is closed) when join() gives up.
        left = max(0.0, deadline - time.monotonic())
        by = deadline - min(0.1, left / 10)
        if self._close_by is not None and self._close_by <= by:
            return
        self._close_by = by
        cap = getattr(self._sink, "set_deadline", None)
        if cap is not None:
            try:
                cap(by)  # a request in flight ends by then too
            except Exception:
                pass
        self._stopping = True
        if not signal_safe:
            self._wake.set()

    def join(self, deadline):
        """Waits for the shipper thread until deadline; True if it
        finished (the sink is then closed)."""
        if os.getpid() != self._pid:
            return True  # a forked child: that thread, its queue and its connection are the parent's
        self._thread.join(max(0.0, deadline - time.monotonic()))
        done = not self._thread.is_alive()
        if done:
            try:
                self._sink.close()
            except Exception:
                pass
        return done

    def close(self, timeout=5.0):
        """Ships what is queued and returns as soon as that is done (or
        dropped and counted), within timeout; True if the shipper finished.
        No request runs past the deadline (where the sink can bound it)."""
        deadline = time.monotonic() + max(0.0, timeout)
        if os.getpid() != self._pid:
            return True
        self.begin_close(deadline)
        return self.join(deadline)

    def stats(self):
        return {
            "sent": self.sent,
            "dropped": self.qfull_drops + self.ship_drops,
            "errors": self.errors,
            "queued": len(self._dq),
            "registered": self._registered,
            "last_error": self.last_error,
            "conflicts": self.conflicts,
            "registration_conflicts": self.reg_conflicts,
            "refused": self.refused,
            "incarnation": getattr(self._sink, "incarnation", None),
            "batch": self._batch_size,
            "batch_grown": self.batch_grown,
            "gave_up": self._dead,
            "collectives_sent": self.coll_sent,
            "collectives_dropped": self.coll_drops + (self._coll.qfull_drops if self._coll is not None else 0),
            "collectives_refused": self.coll_refused,
            "collectives_shipping": self._coll is not None and not self._coll_dead and not self._dead,
            "comms_sent": self.comms_sent,
            "comms_dropped": self.comm_drops,
            "validation_polls": self.val_polls,
            "validation_posted": self.val_posted,
        }

    # --- shipper thread --------------------------------------------------
    def _run(self):
        try:
            self._loop()
        except Exception as e:  # a bug here must not leave close() waiting on a dead thread's queue
            self.errors += 1
            self.last_error = "shipper: %s: %s" % (type(e).__name__, e)
            log.warning("laggard: shipping stopped: %s", self.last_error)

    def _loop(self):
        """Encodes queued vectors as they arrive, in slices of at most
        _SLICE_VECTORS, releasing the interpreter lock between slices (D11:
        encoding a whole batch at once held it ~2 ms and stalled training);
        ships a batch when it is full (the adaptive size, or max_batch_bytes)
        or flush_interval old, or at once when hurried or closing."""
        dq = self._dq
        enc = self._encode_one
        clock = time.perf_counter
        batch = []
        deadline = 0.0
        while True:
            self._wake.clear()
            stopping = self._stopping
            n = 0
            if dq and len(batch) < self._batch_size and self._bbytes < self._max_bytes:
                if not batch:
                    deadline = time.monotonic() + self._flush_interval
                if 4 * len(dq) < self._maxsize:
                    most, end = _SLICE_VECTORS, clock() + _SLICE_S
                else:
                    most, end = _SLICE_VECTORS_BEHIND, clock() + _SLICE_S_BEHIND
                size = 0
                room = self._max_bytes - self._bbytes
                while dq and len(batch) < self._batch_size and size < room:
                    v = enc(dq.popleft())
                    if v is not None:
                        batch.append(v)
                        size += len(v) + 1 if type(v) is str else 200  # with its comma
                    n += 1
                    if n >= most or (not n & 3 and clock() >= end):
                        break
                self._popped += n
                self._bbytes += size
            now = time.monotonic()
            if stopping and self._past_close(now):
                self._drop_rest(batch)
                return
            # R10: at most one collectives request and one vector request
            # per round, so a collectives backlog never starves the stage
            # vectors (nor the reverse).
            side_busy = (self._coll is not None or self._val is not None or self._cap is not None) and \
                self._side(now, stopping or self._hurry)
            if side_busy:
                now = time.monotonic()
            full = len(batch) >= self._batch_size or self._bbytes >= self._max_bytes
            # Closing or hurried: ship once what is queued is encoded (or
            # the batch is full), not a request per encoding slice.
            due = batch and (full or ((stopping or self._hurry) and not dq) or now >= deadline)
            if due and now >= self._retry_at:
                if n:
                    _yield_gil()  # the request's own work (join, http.client) is a slice of its own
                self._ship(batch)
                self._adapt(len(batch), full)
                batch = []
                self._bbytes = 0
                _yield_gil()
                continue
            if side_busy:
                continue
            if not dq and not batch:
                if self._hurry and self._side_idle():
                    self._hurry = False
                if stopping and self._side_idle():
                    return
            if n and dq and len(batch) < self._batch_size:
                _yield_gil()  # more to encode: let the training thread run first
                continue
            wait = self._poll
            if batch:
                wait = min(wait, max(0.0, (self._retry_at if due else deadline) - now))
            if stopping:
                # close() does not cut a backoff short, but never waits past its deadline.
                time.sleep(min(wait, max(0.0, self._close_by - now)))
            else:
                self._wake.wait(wait)

    def _adapt(self, n, full):
        """Issue 16 item 3: batch before dropping. A full batch shipped with
        half a batch or more already waiting behind it means requests (a
        slow server, a high step rate) cannot keep up at this size: grow it
        at once to twice that backlog (rounded up to a power of two), up to
        the queue size and _MAX_BATCH_VECTORS — max_batch_bytes bounds each
        batch's JSON as it is built. A backlog under an eighth of the queue
        is a burst the next request clears, and no reason. A batch that went
        out a quarter full or less, with little waiting, means the rate
        fell: halve back towards the configured size, so batches (and what a
        killed process loses) stay small when the rate is modest.
        bench/drops.py measures it against a real server."""
        bs = self._batch_size
        backlog = len(self._dq)
        if full and 2 * backlog >= bs and backlog >= self._maxsize // 8 and bs < self._max_batch:
            want = bs * 2
            while want < 2 * backlog:
                want *= 2
            most = self._max_batch
            t, post = self._req_timeout, self._last_post_s
            if t and post > 0:
                # A server that takes longer the more it is sent (a busy
                # one): no batch whose request would, scaled from the last
                # one, take over half the request timeout — a timed-out
                # batch is lost whole.
                most = min(most, int(n * t / (2 * post)))
            if min(most, want) > bs:
                self._batch_size = min(most, want)
                self.batch_grown += 1
        elif not full and 4 * n <= bs and 4 * backlog < bs and bs > self._base_batch:
            self._batch_size = max(self._base_batch, bs // 2)

    def _encode_one(self, item):
        try:
            if self._encoded:
                return encode_vector(item, self._order_hash)
            return vector_dict(item, self._order_hash)
        except Exception as e:  # e.g. a step number json cannot write: that vector is dropped and counted
            self.ship_drops += 1
            self._unreported += 1
            self.errors += 1
            self.last_error = "encoding step %.40r: %s: %.200s" % (item[0], type(e).__name__, e)
            return None

    def _past_close(self, now):
        # After close(): give up (dropping and counting what is left) once
        # its deadline has passed, when the backoff ends after it, or on the
        # second failure since close() — a dead server must not hold the
        # process's exit for the whole timeout — or at once while the
        # server refuses this process's registration (409).
        return (now >= self._close_by or self._retry_at > self._close_by or self._stop_failures >= 2
                or (self._reg_refused and not self._registered))

    def _drop_rest(self, batch):
        dq = self._dq
        n = len(batch)
        while dq:
            dq.popleft()
            self._popped += 1
            n += 1
        self.ship_drops += n
        c = self._coll
        if c is not None:
            n = len(self._cbatch)
            self._cbatch = []
            while c.pop() is not None:
                n += 1
            self.coll_drops += n

    # --- collectives and validation (shipper thread) -----------------------
    def _side_idle(self):
        if self._dead:
            return True
        c = self._coll
        if c is not None and not self._coll_dead and not self._dead:
            if self._cbatch or len(c) or c.has_comms():
                return False
        v = self._val
        return not self._vres and (v is None or not v._outbox)

    def _side(self, now, stopping):
        """Collective batches, validation polls and results. True when it
        did work and the loop should come round again without waiting.
        stopping: closing or hurried (everything held ships now)."""
        busy = False
        c = self._coll
        if c is not None and not self._coll_dead:
            n = 0
            end = time.perf_counter() + _SLICE_S
            cb = self._cbatch
            while len(cb) < self._cbatch_size:
                rec = c.pop()
                if rec is None:
                    break
                try:
                    cb.append(c.encode(rec))
                except Exception as e:  # a record json cannot carry: dropped and counted
                    self.coll_drops += 1
                    self._c_unreported += 1
                    self.last_error = "encoding a collective call: %s: %.200s" % (type(e).__name__, e)
                n += 1
                if n >= _COLL_SLICE or time.perf_counter() >= end:
                    break
            if (cb or c.has_comms()) and not self._cdeadline:
                self._cdeadline = now + self._flush_interval
            due = (cb or c.has_comms()) and (len(cb) >= self._cbatch_size or (stopping and not len(c))
                                             or now >= self._cdeadline)
            if due and now >= self._retry_at:
                if n:
                    _yield_gil()
                self._ship_collectives()
                _yield_gil()
                busy = True
                now = time.monotonic()
            elif n and len(c):
                _yield_gil()
                busy = True
        v = self._val
        if v is not None and not self._dead:
            for vid, body in v.take_results():
                self._vres.append([vid, body, 0])
            if self._vres and now >= self._retry_at and self._registered:
                self._post_results(self._stopping)
                busy = True
            elif (not stopping and not self._val_dead and self._registered and v.pollable and now >= self._val_next
                  and now >= self._retry_at):
                self._val_next = now + _VAL_POLL_S * self._rand.uniform(0.9, 1.1)
                self._poll_validation(v)
                busy = True
        k = self._cap
        if (k is not None and not stopping and not self._dead and not k.poll_dead and self._registered
                and now >= k.next_poll and now >= self._retry_at):
            # contracts D: every ~poll_s, jittered so ranks do not poll in lockstep
            k.next_poll = now + k.poll_s * self._rand.uniform(0.9, 1.1)
            try:
                k.poll()
            except Exception as e:  # pragma: no cover - poll() is defensive
                self.errors += 1
                self.last_error = "capture poll: %s: %s" % (type(e).__name__, e)
            busy = True
        return busy

    def _ship_collectives(self):
        c = self._coll
        qf = c.qfull_drops
        pending = (qf - self._c_qf_reported) + self._c_unreported
        self._c_qf_reported = qf
        calls, self._cbatch, self._cdeadline = self._cbatch, [], 0.0
        comms = c.take_comms()
        if self._dead or self._coll_dead:
            self.coll_drops += len(calls)
            return
        if not self._registered:
            err = self._register()
            if err is not None:
                self.coll_drops += len(calls)
                self._c_unreported = pending + len(calls)
                c.return_comms(comms)
                self._registration_failed(err)
                return
        wire = [{k: v for k, v in m.items() if k[:1] != "_"} for m in comms]  # "_refused" stays here
        body = '{"comms":%s,"calls":[%s],"dropped":%d}' % (_dumps(wire), ",".join(calls), pending)
        try:
            self._sink.send_collectives(body, self._job.get("world_size"))
        except ShipError as e:
            if e.at_deadline:
                self.coll_drops += len(calls)
                self._c_unreported = pending + len(calls)
                c.return_comms(comms)
                return
            self.errors += 1
            self.last_error = str(e)
            m = _COMM_FIELD.match(e.field or "") if e.status in (400, 409) else None
            if m is not None and int(m.group(1)) < len(comms):
                # B6: the server refused one comm record (a 400 naming it, or
                # a 409 conflicting with what it holds). Nothing of the batch
                # was stored, so the calls and the other comms go again at
                # once, without it; each round removes one record, so this
                # ends.
                i = int(m.group(1))
                self._drop_comm(comms[i], e)
                c.return_comms(comms[:i] + comms[i + 1:])
                self._cbatch = calls + self._cbatch
                self._c_unreported = pending
                self._cdeadline = time.monotonic()
                return
            cells = refused_cells(e, len(calls))
            if cells:
                # A conflicting re-send of stored calls: those are refused
                # (counted), the rest of the batch goes again at once; an
                # identical re-send of what the server stored is idempotent.
                self.coll_refused += len(cells)
                skip = self._refused(cells, e, "collective call(s)", "stats()['collectives']['refused']")
                c.return_comms(comms)
                self._cbatch = [x for i, x in enumerate(calls) if i not in skip] + self._cbatch
                self._c_unreported = pending
                self._cdeadline = time.monotonic()
                return
            self.coll_drops += len(calls)
            self._c_unreported = pending + len(calls)
            if e.status in _FATAL:
                pass  # collectives stop below; their comms with them
            elif _lost_incarnation(e):
                c.return_comms(comms)  # no comm was at fault
                self._registered = False  # the answer names the incarnation to send
            elif e.status == 400 and not (e.field or "").startswith("calls["):
                # A refusal naming no call: a comm may be the cause; each
                # record survives _COMM_TRIES of them, so none poisons every
                # later batch.
                keep = []
                for rec in comms:
                    rec["_refused"] = rec.get("_refused", 0) + 1
                    if rec["_refused"] >= _COMM_TRIES:
                        self._drop_comm(rec, e)
                    else:
                        keep.append(rec)
                c.return_comms(keep)
            else:
                c.return_comms(comms)
            if e.status == 404:
                self._c404 += 1
                self._registered = False  # the server may have forgotten the job: register again
                if self._c404 >= 3:
                    self._coll_dead = True
                    log.warning("laggard: the server has no collectives endpoint (404 x3); collective calls from "
                                "this process are not shipped (training continues): %s", e)
            elif e.status in (429, 503):
                self._failed(e.retry_after if e.retry_after else 1.0)
            elif e.status == 413:
                self._cbatch_size = max(1, self._cbatch_size // 2)
            elif e.status in _FATAL:
                self._coll_dead = True
                log.error("laggard: server refused collective calls (HTTP %d): %s; they are no longer shipped",
                          e.status, e.detail or e)
            elif e.status == 409:
                # A conflict naming no call: this batch is dropped (counted);
                # later batches still ship (a 409 never turns telemetry off).
                self.conflicts += 1
                config_warn(("coll409", e.field), "laggard: server refused a collectives batch of rank %s (HTTP 409%s):"
                            " %s; it is dropped (counted), later batches still ship", self._rank_info.get("rank"),
                            ", field " + e.field if e.field else "", e.detail or e)
                self._registered = False  # the next registration may open an incarnation that fits
                self._conflict_backoff()
            elif e.status == 400:
                config_warn("coll400", "laggard: server refused a collectives batch (dropped, counted): %s", e)
            else:
                self._failed(e.retry_after)
            return
        except Exception as e:  # a sink bug must not kill the thread
            self.coll_drops += len(calls)
            self._c_unreported = pending + len(calls)
            c.return_comms(comms)
            self.errors += 1
            self.last_error = "collectives: %s: %s" % (type(e).__name__, e)
            self._failed()
            return
        self._c404 = 0
        self._c_unreported = 0
        self._backoff = _MIN_BACKOFF_S
        self.coll_sent += len(calls)
        self.comms_sent += len(comms)  # acknowledged: never sent again

    def _refused(self, cells, err, what, where):
        """A 409 naming single items: counted, said once per process at
        WARNING; returns the set of their indexes."""
        self.conflicts += 1
        config_warn(("refused", what), "laggard: server refused %d %s of rank %s that differ from what it stores "
                    "for them in this incarnation (%s); they are dropped (counted in %s), the others ship",
                    len(cells), what, self._rank_info.get("rank"), err.detail or err, where)
        return set(cells)

    def _drop_comm(self, rec, err):
        self.comm_drops += 1
        config_warn("commdrop", "laggard: server refused communicator record %r of rank %s (%s); it is dropped "
                    "(counted in stats()['collectives']['comms_dropped']) and not sent again",
                    rec.get("id"), rec.get("rank"), err.detail or err)

    def _poll_validation(self, v):
        self.val_polls += 1
        try:
            plan = self._sink.poll_validation(v.rank)
        except ShipError as e:
            if e.status == 404:
                self._v404 += 1
                if self._v404 >= 3:
                    self._val_dead = True
                    log.info("laggard: the server has no validation endpoint (404 x3); not polling it")
            elif e.status in (401, 403):
                self._val_dead = True
            return
        except Exception as e:
            self.errors += 1
            self.last_error = "validation poll: %s: %s" % (type(e).__name__, e)
            return
        self._v404 = 0
        if plan:
            try:
                # The validator's one view of this process's incarnation (the
                # one the plan was polled with: an int, or None for a server
                # without incarnations), set before each plan it is offered.
                v.incarnation = getattr(self._sink, "incarnation", None)
                v.offer(plan)
            except Exception as e:  # pragma: no cover - offer() is defensive
                self.errors += 1
                self.last_error = "validation plan: %s: %s" % (type(e).__name__, e)

    def _post_results(self, stopping):
        keep = []
        for item in self._vres:
            vid, body, tries = item
            try:
                self._sink.post_validation(vid, body)
                self.val_posted += 1
            except ShipError as e:
                self.errors += 1
                self.last_error = str(e)
                item[2] = tries + 1
                if not e.permanent and item[2] < _VAL_TRIES and not stopping:
                    keep.append(item)
                    self._failed(e.retry_after)
            except Exception as e:
                self.errors += 1
                self.last_error = "validation result: %s: %s" % (type(e).__name__, e)
        self._vres = keep

    def _drop(self, batch, pending, why, quiet=False):
        self._unreported = pending + len(batch)
        self.ship_drops += len(batch)
        if why:
            self.errors += 1
            if why != self.last_error and not quiet:
                log.warning("laggard: dropping %d vectors: %s", len(batch), why)
            self.last_error = why

    def _failed(self, pause=None):
        """Backs off after a failed request: exponential with jitter (so
        ranks that failed together do not retry together), or the server's
        Retry-After."""
        if self._stopping:
            self._stop_failures += 1
        if pause is None:
            pause = self._backoff * self._rand.uniform(0.5, 1.0)
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
        else:
            pause = min(pause, _MAX_PAUSE_S) * self._rand.uniform(1.0, 1.2)
        self._retry_at = time.monotonic() + pause

    def _conflict_backoff(self):
        """After a 409 that retrying soon cannot heal: 0.5-1 s, doubling to
        a minute, jittered — the registration is tried again (a new
        incarnation may fit), never given up."""
        if self._stopping:
            self._stop_failures += 1
        pause = self._cbackoff * self._rand.uniform(0.5, 1.0)
        self._cbackoff = min(self._cbackoff * 2, _CONFLICT_MAX_S)
        self._retry_at = time.monotonic() + pause

    def _give_up(self, err):
        """A failure retrying cannot heal (a refused token, a request the
        server finds malformed): stop shipping (what is queued and offered
        later is dropped and counted) and say why, once, at ERROR."""
        self._dead = True
        log.error("laggard: %s", explain(err, self._job, self._rank_info))

    def _registration_failed(self, err):
        """A registration that failed: a 409 is logged once per episode at
        ERROR and tried again with backoff (never given up: issue 16, a
        409 must not turn telemetry off); other refusals retrying cannot
        heal stop shipping; the rest back off."""
        if err.at_deadline:
            return
        self.errors += 1
        self.last_error = str(err)
        if err.status == 409:
            self.conflicts += 1
            self.reg_conflicts += 1
            if not self._reg_refused:
                self._reg_refused = True
                log.error("laggard: %s", explain(err, self._job, self._rank_info))
            self._conflict_backoff()
        elif err.permanent:
            self._give_up(err)
        else:
            self._failed()

    def _ship(self, batch):
        # Drops since the last shipped vector ride on this batch's first vector.
        qf = self.qfull_drops
        pending = (qf - self._qfull_reported) + self._unreported
        self._qfull_reported = qf
        if self._dead:
            self._drop(batch, pending, None)
            return
        if not self._registered:
            err = self._register()
            if err is not None:
                self._drop(batch, pending, None if err.at_deadline or err.status == 409 else str(err),
                           quiet=err.permanent)
                self._registration_failed(err)
                return
        for _round in range(_CELL_ROUNDS + 1):
            out = batch
            if pending and batch:
                out = [_with_dropped(batch[0], pending)] + batch[1:]
            t0 = time.monotonic()
            try:
                if self._pauses:
                    self._sink.send_encoded(out, pause=_yield_gil)
                elif self._encoded:
                    self._sink.send_encoded(out)
                else:
                    self._sink.send(out)
            except ShipError as e:
                if e.at_deadline:  # close()'s deadline, not the server's fault: dropped, counted, no error
                    self._drop(batch, pending, None)
                    return
                cells = refused_cells(e, len(batch))
                if cells and _round == _CELL_ROUNDS:
                    # A server that names one refused vector per answer and
                    # keeps refusing: the rest of this batch is dropped and
                    # counted (a request per vector is not worth it).
                    self._drop(batch, pending, "server refused %d batches in a row, one vector at a time; the rest "
                               "of the batch (%d vectors) is dropped" % (_CELL_ROUNDS + 1, len(batch)))
                    return
                if cells:
                    # A conflicting re-send of stored cells (incarnation
                    # protocol): those vectors alone are refused — dropped,
                    # counted, not reported as lost telemetry — and the rest
                    # go again at once (an identical re-send of what the
                    # server stored is idempotent).
                    self.refused += len(cells)
                    skip = self._refused(cells, e, "vector(s)", "stats()['refused']")
                    batch = [v for i, v in enumerate(batch) if i not in skip]
                    if not batch:
                        self._unreported = pending
                        return
                    continue
                if e.timed_out and len(batch) > self._base_batch:
                    # A grown batch the server did not answer in time: lower
                    # the ceiling (this batch is lost; the next ones smaller).
                    self._max_batch = max(self._base_batch, len(batch) // 2)
                    self._batch_size = min(self._batch_size, self._max_batch)
                if e.status == 413 and len(batch) > 1:
                    # Too large for this server: lower the ceiling and send
                    # this batch again in halves (each may be halved again),
                    # rather than drop it.
                    h = len(batch) // 2
                    self._max_batch = max(1, min(self._max_batch, h))
                    self._batch_size = min(self._batch_size, self._max_batch)
                    self._base_batch = min(self._base_batch, self._batch_size)
                    self._unreported = pending
                    self._ship(batch[:h])
                    self._ship(batch[h:])
                    return
                fatal = e.status in _FATAL
                self._drop(batch, pending, str(e), quiet=fatal or e.status == 409)
                if e.status == 404 or _lost_incarnation(e):  # server forgot the job or incarnation: register again
                    self._registered = False
                elif e.status == 429 or e.status == 503:
                    self._failed(e.retry_after if e.retry_after else 1.0)  # queue keeps filling, drops are counted
                elif e.status == 413:  # a single vector too large: dropped, counted
                    pass
                elif fatal:  # a refused token cannot heal by retrying
                    self._give_up(e)
                elif e.status == 409:
                    # A contract conflict naming no single vector (the stage
                    # order this rank times is not its group's): this batch is
                    # dropped and counted, the ERROR said once; register again
                    # after a backoff — a later incarnation may fit.
                    self.conflicts += 1
                    if e.field not in self._logged_409:  # once per field and shipper
                        self._logged_409.add(e.field)
                        log.error("laggard: %s", explain(e, self._job, self._rank_info))
                    self._registered = False
                    self._conflict_backoff()
                elif e.status is None or e.status >= 500:  # timeout, connection refused, 5xx: back off
                    self._failed(e.retry_after)
                return
            except Exception as e:  # a sink bug must not kill the thread
                self._drop(batch, pending, "%s: %s" % (type(e).__name__, e))
                self._failed()
                return
            self._last_post_s = time.monotonic() - t0
            break
        self._unreported = 0
        self._backoff = _MIN_BACKOFF_S
        self.sent += len(batch)

    def _register(self):
        err = None
        for i in range(_REG_ATTEMPTS):
            try:
                self._sink.register(self._job, self._rank_info)
                self._registered = True
                self._backoff = _MIN_BACKOFF_S
                self._cbackoff = _CONFLICT_MIN_S
                if self._reg_refused:
                    self._reg_refused = False
                    log.warning("laggard: job %r registered after %d refusal(s) (incarnation %s); vectors ship again",
                                self._job.get("id"), self.reg_conflicts, getattr(self._sink, "incarnation", None))
                return None
            except ShipError as e:
                err = e
                if e.permanent or self._stopping or e.timed_out:
                    break  # a server that timed out once will not answer in 50 ms
                self._wake.wait(0.05 * (i + 1) * self._rand.uniform(0.5, 1.0))
            except Exception as e:
                err = ShipError("%s: %s" % (type(e).__name__, e))
                break
        return err


def _stderr_handler():
    # The library logs through "laggard"; give it a stderr handler only when
    # the application configured nothing, so warnings are not lost silently.
    root = logging.getLogger()
    if not root.handlers and not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.propagate = False


_stderr_handler()
