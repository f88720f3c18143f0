"""Background shipping of stage vectors over a bounded queue.

The training thread only ever calls offer(), which never blocks and never
raises: a full queue drops the vector and counts it. Everything that can
block or fail (registration, HTTP, file writes) runs on one daemon thread,
and every vector lost there is counted too. Drops are reported in the next
shipped vector's `dropped` field so the server can cap confidence
(telemetry_limited, StageFrontier §5 "bounded queues" and App. A).
"""

import collections
import logging
import sys
import threading
import time

from .sinks import ShipError

log = logging.getLogger("laggard")

_REG_ATTEMPTS = 3  # immediate registration retries before backing off
_MAX_BACKOFF_S = 5.0
_MAX_PAUSE_S = 10.0  # cap on a server's Retry-After
_FATAL = (401, 403, 409)  # on a vector batch: stop shipping


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


class Shipper:
    def __init__(self, sink, job, rank_info, queue_size=4096, batch_size=256, flush_interval=1.0, order_hash=None):
        self._sink = sink
        self._order_hash = order_hash
        self._job = job
        self._rank_info = rank_info
        # A deque, not queue.Queue: append/popleft are atomic under the GIL
        # and take no lock, so offer() costs ~0.1 µs. The shipper polls it.
        self._dq = collections.deque()
        self._maxsize = max(1, queue_size)
        self._batch_size = max(1, batch_size)
        self._flush_interval = flush_interval
        self._poll = min(0.05, max(0.001, flush_interval))
        self._stop = threading.Event()
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
        self._backoff = 0.2
        self._retry_at = 0.0
        self._thread = threading.Thread(target=self._run, name="laggard-shipper", daemon=True)
        self._thread.start()

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
        """Flushes what is queued within timeout; True if all was handled."""
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
        }

    # --- shipper thread --------------------------------------------------
    def _run(self):
        dq = self._dq
        batch = []
        deadline = 0.0
        while True:
            stopping = self._stop.is_set()
            while dq and len(batch) < self._batch_size:
                if not batch:
                    deadline = time.monotonic() + self._flush_interval
                batch.append(dq.popleft())
            if batch and (len(batch) >= self._batch_size or stopping or time.monotonic() >= deadline):
                self._ship(batch)
                batch = []
                continue
            if stopping and not dq and not batch:
                return
            wait = self._poll
            if batch:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            self._stop.wait(wait)

    def _drop(self, batch, pending, why, quiet=False):
        self._unreported = pending + len(batch)
        self.ship_drops += len(batch)
        if why:
            self.errors += 1
            if why != self.last_error and not quiet:
                log.warning("laggard: dropping %d vectors: %s", len(batch), why)
            self.last_error = why

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
        now = time.monotonic()
        if not self._registered:
            if now < self._retry_at:
                self._drop(batch, pending, None)
                return
            err = self._register()
            if err is not None:
                self._drop(batch, pending, str(err), quiet=err.permanent)
                if err.permanent:
                    self._give_up(err)
                else:
                    self._retry_at = time.monotonic() + self._backoff
                    self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
                return
        oh = self._order_hash
        vecs = [vector_dict(it, oh) for it in batch]
        if pending:
            vecs[0]["dropped"] = pending
        try:
            self._sink.send(vecs)
        except ShipError as e:
            fatal = e.status in _FATAL
            self._drop(batch, pending, str(e), quiet=fatal)
            if e.status == 404:  # server forgot the job (restart): register again
                self._registered = False
            elif e.status == 429:
                pause = min(e.retry_after if e.retry_after else 1.0, _MAX_PAUSE_S)
                self._stop.wait(pause)  # queue keeps filling and drops are counted
            elif e.status == 413:  # too large: smaller batches from now on
                self._batch_size = max(1, self._batch_size // 2)
            elif fatal:  # a conflict or a refused token cannot heal by retrying
                self._give_up(e)
            return
        except Exception as e:  # a sink bug must not kill the thread
            self._drop(batch, pending, "%s: %s" % (type(e).__name__, e))
            return
        self._unreported = 0
        self.sent += len(vecs)

    def _register(self):
        err = None
        for i in range(_REG_ATTEMPTS):
            try:
                self._sink.register(self._job, self._rank_info)
                self._registered = True
                self._backoff = 0.2
                return None
            except ShipError as e:
                err = e
                if e.permanent or self._stop.is_set():
                    break
                self._stop.wait(0.05 * (i + 1))
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
