"""Background shipping of stage vectors over a bounded queue.

The training thread only ever calls offer(), which never blocks and never
raises: a full queue drops the vector and counts it. Everything that can
block or fail (registration, HTTP, file writes) runs on one daemon thread,
and every vector lost there is counted too. Drops are reported in the next
shipped vector's `dropped` field so the server can cap confidence
(telemetry_limited, StageFrontier §5 "bounded queues" and App. A).
"""

import collections
import json
import logging
import math
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
_YIELD_S = 0.0002  # the pause between slices that lets the training thread take the GIL
_MAX_PAUSE_S = 10.0  # cap on a server's Retry-After
_FATAL = (401, 403, 409)  # on a vector batch: stop shipping
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
    if err.status == 409 and err.op == "job":
        if err.field == "run_id":
            hint = ("job id %r is already used by another run (this run's run_id is %r); set LAGGARD_JOB "
                    "(or job=) to a new id for this run" % (job.get("id"), job.get("run_id")))
        else:
            hint = ("job id %r is registered with a different configuration; set LAGGARD_JOB (or job=) "
                    "to a new id for this run" % job.get("id"))
    elif err.status == 409:
        from .schema import role_group
        hint = ("every rank of role group %r (role pp/name) must declare the same ordered stage list; "
                "give this rank's role another pp or name, or use the group's stage list"
                % role_group(rank_info.get("role")))
    elif err.status in (401, 403):
        hint = "check LAGGARD_TOKEN (or token=)"
    else:
        hint = "check the job and schema arguments"
    return "%s. Hint: %s. Telemetry from this process is off; training continues." % (msg, hint)


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


def encode_vector(item, order_hash=None):
    """The StageVector of vector_dict as compact JSON text, about 3x faster:
    the common fields are formatted directly (durations are whole
    nanoseconds in ms, so %.6f loses nothing). Anything unusual (a step that
    is not an int, a non-finite duration) goes through json."""
    step, rank, micro, durs, wall, lead, probes, nested = item
    if type(step) is not int or type(rank) is not int or not _isfinite(wall + sum(durs)):
        return _dumps(vector_dict(item, order_hash))
    s = '{"step":%d,"rank":%d,"durations_ms":[%s],"wall_ms":%.6f' % (
        step, rank, ",".join(["%.6f" % d for d in durs]), wall)
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


class Shipper:
    def __init__(self, sink, job, rank_info, queue_size=4096, batch_size=256, flush_interval=1.0, order_hash=None,
                 collectives=None, validator=None, capturer=None):
        self._sink = sink
        self._order_hash = order_hash
        self._job = job
        self._rank_info = rank_info
        # Sinks that take JSON text (HTTPSink, FileSink) get each vector
        # encoded as it arrives; a sink with only send(dicts) gets dicts.
        self._encoded = callable(getattr(sink, "send_encoded", None))
        # A deque, not queue.Queue: append/popleft are atomic under the GIL
        # and take no lock, so offer() costs ~0.1 µs. The shipper polls it.
        self._dq = collections.deque()
        self._maxsize = max(1, queue_size)
        self._batch_size = max(1, batch_size)
        self._flush_interval = flush_interval
        self._poll = min(0.05, max(0.001, flush_interval))
        self._stop = threading.Event()
        self._close_by = None  # monotonic deadline set by close()
        self._rand = random.Random()
        # Single-writer counters (no locks needed under the GIL):
        self.qfull_drops = 0  # written by the training thread only
        self._qfull_reported = 0  # written by the shipper thread only
        self._unreported = 0  # shipper-side drops not yet sent in `dropped`
        self.ship_drops = 0
        self.sent = 0
        self.errors = 0
        self.conflicts = 0  # 409s: this run's registration contradicts the server's
        self.last_error = ""
        self._registered = False
        self._dead = False
        self._backoff = _MIN_BACKOFF_S
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

    def close(self, timeout=5.0):
        """Ships what is queued and returns as soon as that is done (or
        dropped and counted), within timeout; True if the shipper finished.
        No request runs past the deadline (where the sink can bound it)."""
        timeout = max(0.0, timeout)
        # The shipper's own deadline is a little earlier, so that it has
        # finished (and the sink is closed) when join() gives up.
        self._close_by = time.monotonic() + timeout - min(0.1, timeout / 10)
        cap = getattr(self._sink, "set_deadline", None)
        if cap is not None:
            try:
                cap(self._close_by)  # a request in flight ends by then too
            except Exception:
                pass
        self._stop.set()
        self._thread.join(timeout)
        done = not self._thread.is_alive()
        if done:
            try:
                self._sink.close()
            except Exception:
                pass
        return done

    def stats(self):
        return {
            "sent": self.sent,
            "dropped": self.qfull_drops + self.ship_drops,
            "errors": self.errors,
            "queued": len(self._dq),
            "registered": self._registered,
            "last_error": self.last_error,
            "conflicts": self.conflicts,
            "gave_up": self._dead,
            "collectives_sent": self.coll_sent,
            "collectives_dropped": self.coll_drops + (self._coll.qfull_drops if self._coll is not None else 0),
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
        ships a batch when it is full or flush_interval old."""
        dq = self._dq
        enc = self._encode_one
        clock = time.perf_counter
        batch = []
        deadline = 0.0
        while True:
            stopping = self._stop.is_set()
            n = 0
            if dq and len(batch) < self._batch_size:
                if not batch:
                    deadline = time.monotonic() + self._flush_interval
                end = clock() + _SLICE_S
                while dq and len(batch) < self._batch_size:
                    v = enc(dq.popleft())
                    if v is not None:
                        batch.append(v)
                    n += 1
                    if n >= _SLICE_VECTORS or clock() >= end:
                        break
            now = time.monotonic()
            if stopping and self._past_close(now):
                self._drop_rest(batch)
                return
            # R10: at most one collectives request and one vector request
            # per round, so a collectives backlog never starves the stage
            # vectors (nor the reverse).
            side_busy = (self._coll is not None or self._val is not None or self._cap is not None) and \
                self._side(now, stopping)
            if side_busy:
                now = time.monotonic()
            due = batch and (len(batch) >= self._batch_size or stopping or now >= deadline)
            if due and now >= self._retry_at:
                if n:
                    _yield_gil()  # the request's own work (join, http.client) is a slice of its own
                self._ship(batch)
                batch = []
                _yield_gil()
                continue
            if side_busy:
                continue
            if stopping and not dq and not batch and self._side_idle():
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
                self._stop.wait(wait)

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
        # process's exit for the whole timeout.
        return now >= self._close_by or self._retry_at > self._close_by or self._stop_failures >= 2

    def _drop_rest(self, batch):
        dq = self._dq
        n = len(batch)
        while dq:
            dq.popleft()
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
        did work and the loop should come round again without waiting."""
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
            due = (cb or c.has_comms()) and (len(cb) >= self._cbatch_size or stopping or now >= self._cdeadline)
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
                self._post_results(stopping)
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
                if not err.at_deadline:
                    self.errors += 1
                    self.last_error = str(err)
                    if err.permanent:
                        self._give_up(err)
                    else:
                        self._failed()
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
            self.coll_drops += len(calls)
            self._c_unreported = pending + len(calls)
            if e.status in (401, 403, 409):
                pass  # collectives stop below; their comms with them
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
            elif e.status in (401, 403, 409):
                self._coll_dead = True
                log.error("laggard: server refused collective calls (HTTP %d): %s; they are no longer shipped",
                          e.status, e.detail or e)
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
        if self._stop.is_set():
            self._stop_failures += 1
        if pause is None:
            pause = self._backoff * self._rand.uniform(0.5, 1.0)
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
        else:
            pause = min(pause, _MAX_PAUSE_S) * self._rand.uniform(1.0, 1.2)
        self._retry_at = time.monotonic() + pause

    def _give_up(self, err):
        """A failure retrying cannot heal: stop shipping (what is queued and
        offered later is dropped and counted) and say why, once, at ERROR."""
        self._dead = True
        if err.status == 409:
            self.conflicts += 1
        log.error("laggard: %s", explain(err, self._job, self._rank_info))

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
            if err is not None and err.at_deadline:
                self._drop(batch, pending, None)
                return
            if err is not None:
                self._drop(batch, pending, str(err), quiet=err.permanent)
                if err.permanent:
                    self._give_up(err)
                else:
                    self._failed()
                return
        if pending:
            batch[0] = _with_dropped(batch[0], pending)
        try:
            if self._encoded:
                self._sink.send_encoded(batch)
            else:
                self._sink.send(batch)
        except ShipError as e:
            if e.at_deadline:  # close()'s deadline, not the server's fault: dropped, counted, no error
                self._drop(batch, pending, None)
                return
            fatal = e.status in _FATAL
            self._drop(batch, pending, str(e), quiet=fatal)
            if e.status == 404:  # server forgot the job (restart): register again
                self._registered = False
            elif e.status == 429 or e.status == 503:
                self._failed(e.retry_after if e.retry_after else 1.0)  # queue keeps filling, drops are counted
            elif e.status == 413:  # too large: smaller batches from now on
                self._batch_size = max(1, self._batch_size // 2)
            elif fatal:  # a conflict or a refused token cannot heal by retrying
                self._give_up(e)
            elif e.status is None or e.status >= 500:  # timeout, connection refused, 5xx: back off
                self._failed(e.retry_after)
            return
        except Exception as e:  # a sink bug must not kill the thread
            self._drop(batch, pending, "%s: %s" % (type(e).__name__, e))
            self._failed()
            return
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
                return None
            except ShipError as e:
                err = e
                if e.permanent or self._stop.is_set() or e.timed_out:
                    break  # a server that timed out once will not answer in 50 ms
                self._stop.wait(0.05 * (i + 1) * self._rand.uniform(0.5, 1.0))
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
