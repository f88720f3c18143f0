"""On-demand operator traces for KAIR (contracts D; KAIR §III-A Feature 1).

The server publishes a capture plan; this rank records `steps` sampled
training steps with torch.profiler and uploads the Chrome trace:

* shipper thread: polls GET …/captures/pending?rank=R&step=S every ~poll_s
  (jittered), S the step this rank last began: the server starts a plan a
  margin (~10 s of steps) past the newest step its ranks reported, so every
  rank has the plan before its start step. Every answer is also a clock heartbeat: (c_send, s_recv,
  s_send, c_recv), client times from time.time_ns() — the clock torch's
  profiler stamps its trace with — and the last 16 ride on the upload
  (X-Laggard-Clock) for NTP-style alignment (KAIR Feature 4). Three 404s
  (no such endpoint) or a 401/403 stop polling; training never notices.
* training thread, at step boundaries (perf.step() enter/exit): a plan
  starts at the first step S >= start_step with (S - start_step) % every
  == 0; each sampled step is wrapped in record_function("ProfilerStep#S")
  with S the training step, so the trace's step numbers are the job's. With
  every == 1 one profiler session spans all sampled steps; with every > 1
  each sampled step is its own session (only sampled steps are recorded)
  and the sessions are merged on one time base before upload. A plan that
  reaches a rank after its start step (a poll delayed past the margin)
  starts at the rank's next step on the grid: the server then compares
  the steps the ranks share and says who recorded others. When nothing is
  pending, a step boundary costs an attribute write and two reads.
* at the end of each session the training thread stops the profiler and
  exports its trace into a bounded directory (LAGGARD_CAPTURE_DIR, 512 MiB
  for all files there); this is the one real cost of a capture (measured in
  stats()["capture"]["train_ms_last"]).
* an uploader thread gzips the trace and POSTs it to
  …/captures/{cid}/traces?rank=R (retries with backoff); a trace that
  cannot be recorded or delivered is reported with an empty body and
  X-Laggard-Capture-Error.

Time base: torch 1.13 without Kineto (CPU builds) exports the legacy
autograd-profiler format, a bare JSON array whose ts are integer
microseconds since the session's start, kineto_results.trace_start_us() —
epoch microseconds from the realtime clock. Traces whose ts are relative
(first ts below 1e12 µs) get X-Laggard-Trace-Base-NS: that start in epoch
ns. Kineto traces that carry baseTimeNanoseconds need nothing; the server
prefers the file's base.

Size: a capture records at most max_events events (LAGGARD_CAPTURE_MAX_EVENTS,
default 1,000,000). The first sampled step is always its own session, so its
event count is known; later sessions span at most ~_SEG_EVENTS events (every
stop and every writer slice then holds the GIL for a bounded time, and the
uploader materializes one session at a time), and the capture ends early once
the next step would pass the cap. The upload then says how many of the plan's
steps were left out in X-Laggard-Capture-Truncated.

Threads: torch 1.13 keeps the profiler's state per thread, so only the thread
that started it (the training thread) can stop it. close() from another
thread touches no torch state: it asks the training thread to finish the
capture at its next step boundary and, if none comes in time, reports the
capture failed; the training thread then only stops its profiler.

Fork: a process forked mid-capture (a DataLoader worker) inherits the forking
thread's profiler. An at-fork hook stops it in the child and makes the child's
Capturer inert (it never records or uploads).

Temp files: once per process, before its first capture, files this client
named (laggard-…-rank…-PID…) whose PID is dead or that are older than an hour
are removed from the capture directory (a killed rank leaves them behind).

Nothing here raises into training: every failure is counted in
perf.stats()["capture"] and, where the server can be told, reported.
"""

import collections
import gzip
import json
import logging
import os
import random
import re
import sys
import tempfile
import threading
import time
import weakref

from .sinks import ShipError

log = logging.getLogger("laggard")

DEFAULT_POLL_S = 2.0
MAX_DIR_BYTES = 512 << 20  # contracts D: the export directory holds at most this much
MAX_STEPS = 64  # contracts B: steps per capture
MAX_EVERY = 100000
KEEP_HEARTBEATS = 16
UPLOAD_TRIES = 5
_BACKOFF_S = 1.0
_MAX_BACKOFF_S = 30.0
_ERR_MAX = 500  # characters of X-Laggard-Capture-Error
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_REL_TS_LIMIT_US = 10 ** 12  # ts below this (11.6 days) are not epoch microseconds
_CHUNK = 1 << 20
MAX_EVENTS = 1_000_000  # events one capture records at most (LAGGARD_CAPTURE_MAX_EVENTS); torch holds ~0.5–1 KB each
_SEG_EVENTS = 250_000  # about this many events per profiler session after the first step
_STALE_S = 3600.0  # leftover capture files older than this are removed
_OWN_FILE_RE = re.compile(r"^laggard-.+-rank(?:-?[0-9]+|None)-([0-9]+)(?:-seg[0-9]+\.json|\.json\.gz)$")
_GIVE_UP_EVERY = 64  # a recording capture whose step moved this many `every` past its last gives up
_SWEPT = set()  # directories this process has swept (once each)
_LIVE = weakref.WeakSet()  # Capturers of this process, for the at-fork hook


def _env_max_events():
    try:
        v = int(os.environ.get("LAGGARD_CAPTURE_MAX_EVENTS", ""))
        return v if v > 0 else MAX_EVENTS
    except ValueError:
        return MAX_EVENTS


class PlanError(ValueError):
    pass


def _int(obj, name, lo, hi, default=None):
    v = obj.get(name, default)
    if v is None or isinstance(v, bool) or not isinstance(v, int):
        raise PlanError("%s: want an integer, got %.40r" % (name, v))
    if not lo <= v <= hi:
        raise PlanError("%s: %d out of range [%d, %d]" % (name, v, lo, hi))
    return v


def parse_plan(obj):
    """The fields of a Capture (contracts B) this client acts on; PlanError
    naming the field otherwise."""
    if not isinstance(obj, dict):
        raise PlanError("capture: not an object")
    cid = obj.get("id")
    if not isinstance(cid, str) or not _ID_RE.match(cid):
        raise PlanError("id: want 1-64 of [A-Za-z0-9_-], got %.40r" % (cid,))
    return {"id": cid, "start_step": _int(obj, "start_step", 0, 2 ** 62),
            "steps": _int(obj, "steps", 1, MAX_STEPS, 5), "every": _int(obj, "every", 1, MAX_EVERY, 1),
            "state": str(obj.get("state") or "pending")}


def clean_error(text):
    """An HTTP header value: printable ASCII, bounded."""
    s = "".join(c if " " <= c <= "~" else "?" for c in str(text))
    return s[:_ERR_MAX] or "error"


class Capturer:
    """One rank's capture machinery. Built by Perf; attach() (from the
    thread starting the shipper) gives it the rank and the sink."""

    def __init__(self, job, poll_s=DEFAULT_POLL_S, directory=None, max_dir_bytes=MAX_DIR_BYTES,
                 tries=UPLOAD_TRIES, backoff_s=_BACKOFF_S, upload_timeout=60.0, max_events=None):
        self.job = job
        self.poll_s = max(0.01, float(poll_s))
        self.dir = directory or os.path.join(tempfile.gettempdir(), "laggard-capture")
        self.max_dir_bytes = int(max_dir_bytes)
        self.tries = max(1, int(tries))
        self.backoff_s = float(backoff_s)
        self.upload_timeout = float(upload_timeout)
        self.max_events = int(max_events) if max_events else _env_max_events()
        self.rank = None
        self._sink = None  # the shipper's (polls, shipper thread only)
        self._up_sink = None  # the uploader's own connection
        self._rand = random.Random()
        # Shipper thread -> training thread: a parsed plan waiting for its
        # start step (one attribute store: atomic under the GIL).
        self.plan = None
        # Training thread -> shipper thread: the step last begun, sent with
        # each poll so the server starts a plan at a step every rank will
        # reach (issue 16 item 7b). -1 before the first step.
        self.step_seen = -1
        self.recording = False
        self.next_poll = 0.0
        self.poll_dead = False
        self._p404 = 0
        self._seen = collections.OrderedDict()
        self._hb = collections.deque(maxlen=KEEP_HEARTBEATS)
        # training thread state of the capture in progress
        self._cur = None  # {"plan", "first", "done", "segs": [segment], "t_train"}; see _Session.stop
        self._prof = None  # the running _Session
        self._rf = None
        self._closed = False
        self._owner = None  # ident of the thread that started the profiler
        self._close_req = False  # close() on another thread: the training thread ends the capture
        self._abandoned = False  # ...and it did not in time: it only stops its profiler
        self._tlock = threading.RLock()  # close() vs the training thread, on those rare paths only
        self._forked = False  # this process is a fork taken mid-life: inert
        # uploader
        self._jobs = collections.deque()
        self._up_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._up_thread = None
        self._up_running = False  # under _up_lock: the uploader thread will still look at _jobs
        self._idle = threading.Event()
        self._idle.set()
        self._stop_by = None  # monotonic deadline set by close()
        # counters (single writer each)
        self.polls = 0
        self.poll_errors = 0
        self.plans = 0
        self.refused = 0
        self.cancelled = 0
        self.started = 0
        self.steps_recorded = 0
        self.uploaded = 0
        self.upload_bytes = 0
        self.upload_retries = 0
        self.failed = 0
        self.reported = 0
        self.profiler_errors = 0
        self.errors = 0
        self.truncated = 0  # captures cut short by max_events
        self.swept = 0  # leftover files removed
        self.export_ms_last = 0.0
        self.train_ms_last = 0.0
        self.last_error = ""
        _LIVE.add(self)

    # --- wiring ------------------------------------------------------------
    def attach(self, sink, rank):
        """Whether this sink can take captures (it has poll_capture)."""
        # A sink is not thread-safe and the uploader is another thread: a
        # sink that cannot clone itself cannot take captures.
        clone = getattr(sink, "clone", None)
        if not callable(getattr(sink, "poll_capture", None)) or not callable(clone):
            return False
        try:
            up = clone(timeout=self.upload_timeout)
        except Exception as e:
            self._fail_note("sink clone: %s: %s" % (type(e).__name__, e))
            return False
        self.rank = int(rank)
        self._sink = sink
        self._up_sink = up
        return True

    @property
    def attached(self):
        return self._sink is not None

    # --- shipper thread ------------------------------------------------------
    def poll(self):
        """One poll (and heartbeat). Never raises."""
        self.polls += 1
        try:
            cap, hb = self._sink.poll_capture(self.rank, self.step_seen)
        except ShipError as e:
            self.poll_errors += 1
            if e.status == 404:
                self._p404 += 1
                if self._p404 >= 3:
                    self.poll_dead = True
                    log.info("laggard: the server has no capture endpoint (404 x3); not polling it")
            elif e.status in (401, 403):
                self.poll_dead = True
                log.warning("laggard: server refused capture polls (HTTP %d); traces are off", e.status)
            return
        except Exception as e:
            self.poll_errors += 1
            self._fail_note("poll: %s: %s" % (type(e).__name__, e))
            return
        self._p404 = 0
        if hb is not None and _ordered(hb):
            self._hb.append(hb)
        self.offer(cap)

    def offer(self, obj):
        """A capture as the server sent it (None: nothing for this rank)."""
        if obj is None:
            p = self.plan
            if p is not None:  # withdrawn (cancelled, expired) before it started here
                self.plan = None
                self.cancelled += 1
            return
        cid = obj.get("id") if isinstance(obj, dict) else None
        if isinstance(cid, str) and cid in self._seen:
            return
        try:
            plan = parse_plan(obj)
        except PlanError as e:
            self.refused += 1
            self._remember(str(cid))
            if isinstance(cid, str) and _ID_RE.match(cid):
                self._report(cid, "plan refused: %s" % e)
            log.warning("laggard: capture plan %.40r refused: %s", cid, e)
            return
        if plan["state"] not in ("pending", "recording"):
            return
        self._remember(plan["id"])
        self.plans += 1
        if self._closed:
            return
        self._sweep()  # shipper thread, before this process's first capture
        self.plan = plan

    def heartbeats(self):
        return [list(h) for h in list(self._hb)]

    def _remember(self, cid):
        self._seen[cid] = True
        while len(self._seen) > 64:
            self._seen.popitem(last=False)

    # --- training thread -------------------------------------------------------
    def begin(self, step):
        """At a step's start (Perf._begin_step). Never raises."""
        self.step_seen = step
        try:
            cur = self._cur
            if cur is not None:
                if self._close_req or self._abandoned:
                    self._on_close_req()
                    return
                plan = cur["plan"]
                if step < cur["first"] or step - cur["last"] > _GIVE_UP_EVERY * plan["every"]:
                    # the step counter went back (a new epoch) or has long
                    # passed the sampled steps: they will not come
                    self._give_up(cur, step)
                    return
                if (step - plan["start_step"]) % plan["every"] == 0:
                    self._enter(step)
                return
            plan = self.plan
            if plan is None or step < plan["start_step"] or (step - plan["start_step"]) % plan["every"]:
                return
            self.plan = None
            self._start(plan, step)
        except BaseException as e:
            self._inc("errors")
            self._fail_note("begin: %s: %s" % (type(e).__name__, e))
            self._abort_quiet("begin: %s" % type(e).__name__)
            if not isinstance(e, Exception):
                raise  # KeyboardInterrupt/SystemExit: the profiler is off, training decides

    def end(self, step):
        """At a step's end (Perf._end_step, also for a step that raised)."""
        if self._rf is None and not self._close_req and not self._abandoned:
            return
        try:
            if self._rf is not None:
                self._exit_step()
            if self._cur is not None and (self._close_req or self._abandoned):
                self._on_close_req()
        except BaseException as e:
            self._inc("errors")
            self._fail_note("end: %s: %s" % (type(e).__name__, e))
            self._abort_quiet("end: %s" % type(e).__name__)
            if not isinstance(e, Exception):
                raise

    def _abort_quiet(self, why):
        cur = self._cur
        if cur is not None:
            self._abort(cur["plan"], why)

    def _give_up(self, cur, step):
        if cur["done"] and self._rf is None:
            try:
                if self._prof is not None:
                    self._end_segment()
                self._finish()  # what was recorded is still a trace
                return
            except Exception as e:
                self._abort(cur["plan"], "ending at step %d: %s: %.300s" % (step, type(e).__name__, e))
                return
        self._abort(cur["plan"], "sampled steps never came (step %d after %d)" % (step, cur["first"]))

    def _on_close_req(self):
        """close() ran on another thread: this (the training) thread ends the
        capture; if close() gave up waiting, it only stops the profiler."""
        with self._tlock:
            cur = self._cur
            if cur is None:
                return
            if self._abandoned:  # already reported by close()
                self._cur = None
                self.recording = False
                rf, self._rf = self._rf, None
                p, self._prof = self._prof, None
                self._abandoned = False
                if rf is not None:
                    try:
                        rf.__exit__(None, None, None)
                    except Exception:
                        pass
                if p is not None:
                    p.abort()
                _remove(_files(cur["segs"]))
                return
            try:
                if self._rf is not None:
                    self._rf.__exit__(None, None, None)
                    self._rf = None
                if cur["done"] == 0:
                    raise RuntimeError("closed before the first sampled step finished")
                if self._prof is not None:
                    self._end_segment()
                self._finish()
            except Exception as e:
                self._abort(cur["plan"], "at close: %s: %.300s" % (type(e).__name__, e))

    def _start(self, plan, step):
        self.started += 1
        torch = sys.modules.get("torch")
        if torch is None:
            self._abort(plan, "torch is not imported by this process")
            return
        used = self._dir_bytes()
        if used >= self.max_dir_bytes:
            self._abort(plan, "capture directory %s holds %d bytes (limit %d)" % (self.dir, used, self.max_dir_bytes))
            return
        # limit: steps this capture records (cut by max_events); seg_n: steps
        # in the running session; per_seg: steps per session; events: so far.
        self._cur = {"plan": plan, "first": step, "done": 0, "segs": [], "seg_steps": [], "t_train": 0.0,
                     "limit": plan["steps"], "seg_n": 0, "per_seg": 1, "events": 0, "per_step": 0}
        self._owner = threading.get_ident()
        self.recording = True
        self._enter(step)

    def _enter(self, step):
        cur = self._cur
        t0 = time.perf_counter()
        try:
            import torch
            if self._prof is None:
                self._prof = _start_profiler(torch)
            rf = torch.autograd.profiler.record_function("ProfilerStep#%d" % step)
            rf.__enter__()
            self._rf = rf
            cur["last"] = step
        except Exception as e:
            self.profiler_errors += 1
            self._abort(cur["plan"], "profiler start at step %d: %s: %.300s" % (step, type(e).__name__, e))
            return
        finally:
            cur["t_train"] += time.perf_counter() - t0

    def _exit_step(self):
        cur = self._cur
        plan = cur["plan"]
        t0 = time.perf_counter()
        rf, self._rf = self._rf, None
        try:
            rf.__exit__(None, None, None)
            cur["done"] += 1
            cur["seg_n"] += 1
            self.steps_recorded += 1
            # The first step is a session of its own: its event count sizes
            # the rest (max_events, session length).
            if (cur["done"] >= cur["limit"] or plan["every"] > 1 or cur["done"] == 1
                    or cur["seg_n"] >= cur["per_seg"]):
                self._end_segment()
                self._resize(cur)
            last = cur["done"] >= cur["limit"]
        except Exception as e:
            self.profiler_errors += 1
            cur["t_train"] += time.perf_counter() - t0
            self._abort(plan, "profiler stop: %s: %.300s" % (type(e).__name__, e))
            return
        cur["t_train"] += time.perf_counter() - t0
        if last:
            self._finish()

    def _resize(self, cur):
        """After a session: the steps still allowed under max_events (from
        the most events a step has had so far) and the next session's length."""
        per_step = max(cur["per_step"], -(-cur["seg_events"] // max(1, cur["seg_steps"][-1])))
        cur["per_step"] = per_step
        if cur["done"] == 1 and cur["events"] > self.max_events:
            raise OSError("one step recorded %d events, more than the %d a capture may hold "
                          "(LAGGARD_CAPTURE_MAX_EVENTS)" % (cur["events"], self.max_events))
        allowed = cur["done"] + max(0, self.max_events - cur["events"]) // max(1, per_step)
        if allowed < cur["limit"]:
            cur["limit"] = allowed
        cur["per_seg"] = max(1, _SEG_EVENTS // max(1, per_step))

    def _end_segment(self):
        """Stops the profiler; exports its trace unless the uploader can
        write it (training thread)."""
        cur = self._cur
        p, self._prof = self._prof, None
        path = os.path.join(self.dir, "laggard-%s-%s-rank%d-%d-seg%d.json" % (
            _safe(self.job), cur["plan"]["id"], self.rank if self.rank is not None else -1, os.getpid(),
            len(cur["segs"])))
        if p.exports:
            os.makedirs(self.dir, exist_ok=True)
            used = self._dir_bytes()
            if used >= self.max_dir_bytes:
                p.abort()
                raise OSError("capture directory %s holds %d bytes (limit %d)" % (
                    self.dir, used, self.max_dir_bytes))
            cur["segs"].append(("file", path, 0))  # listed first: removed on failure even if half-written
        t0 = time.perf_counter()
        seg = p.stop(path)
        self.export_ms_last = (time.perf_counter() - t0) * 1e3
        if p.exports:
            cur["segs"][-1] = seg
            used = self._dir_bytes()
            if used > self.max_dir_bytes:
                raise OSError("trace export left %d bytes in %s (limit %d)" % (used, self.dir, self.max_dir_bytes))
        else:
            cur["segs"].append(seg)
        cur["seg_steps"].append(cur["seg_n"])
        cur["seg_n"] = 0
        cur["seg_events"] = p.count
        cur["events"] += p.count

    def _finish(self):
        cur, self._cur = self._cur, None
        self.recording = False
        self.train_ms_last = cur["t_train"] * 1e3
        cut = cur["plan"]["steps"] - cur["limit"]
        if cut > 0:
            self._inc("truncated")
            log.warning("laggard: capture %s stopped after %d of %d steps: %d events reached the cap of %d "
                        "(LAGGARD_CAPTURE_MAX_EVENTS)", cur["plan"]["id"], cur["done"], cur["plan"]["steps"],
                        cur["events"], self.max_events)
        self._enqueue(("trace", cur["plan"]["id"], cur["segs"],
                       {"seg_steps": cur["seg_steps"], "cut": max(0, cut)}))

    def _abort(self, plan, why):
        """The capture failed on this rank: clean up, count, report."""
        self._inc("failed")
        self._fail_note(why)
        cur, self._cur = self._cur, None
        self.recording = False
        rf, self._rf = self._rf, None
        p, self._prof = self._prof, None
        if rf is not None:
            try:
                rf.__exit__(None, None, None)
            except Exception:
                pass
        if p is not None:
            p.abort()
        if cur is not None:
            self.train_ms_last = cur["t_train"] * 1e3
            _remove(_files(cur["segs"]))
        log.warning("laggard: capture %s failed on this rank: %s (training continues)", plan["id"], why)
        self._report(plan["id"], why)

    def close(self, timeout=5.0):
        """Ends a capture in progress (what was recorded is uploaded) and
        waits for uploads up to timeout. Never raises.

        On a thread other than the one that started the profiler (torch 1.13
        profiler state is per thread) it does not touch torch: the training
        thread ends the capture at its next step boundary; when none comes
        within half the timeout the capture is reported failed ("closed
        before the capture finished") and the training thread, should it
        come back, only stops its profiler."""
        self._closed = True
        self.plan = None
        deadline = time.monotonic() + max(0.0, timeout)
        cur = self._cur
        if cur is not None and self._owner is not None and threading.get_ident() != self._owner:
            self._close_req = True
            handoff = time.monotonic() + max(0.0, timeout) / 2
            while self._cur is not None and time.monotonic() < handoff:
                time.sleep(0.005)
            with self._tlock:
                cur = self._cur
                if cur is not None and not self._abandoned:
                    self._abandoned = True
                    self._inc("failed")
                    why = ("closed from another thread before the capture finished (the training thread "
                           "reached no step boundary in time)")
                    self._fail_note(why)
                    self._report(cur["plan"]["id"], why)
        elif cur is not None:
            with self._tlock:
                self._close_req = True
                self._abandoned = False
                self._on_close_req()
        self._stop_by = deadline
        self._idle.wait(max(0.0, deadline - time.monotonic()))
        return self._idle.is_set()

    def _after_fork_child(self):
        """os.register_at_fork(after_in_child): a fork taken mid-capture (a
        DataLoader worker) inherits the forking thread's profiler; stop it
        and never record or upload here."""
        if self._prof is not None or self._rf is not None:
            try:
                torch = sys.modules.get("torch")
                if torch is not None and torch.autograd._profiler_enabled():
                    torch.autograd._disable_profiler()
            except Exception:
                pass
        self._forked = True
        self._closed = True
        self.plan = None
        # Training thread -> shipper thread: the step last begun, sent with
        # each poll so the server starts a plan at a step every rank will
        # reach (issue 16 item 7b). -1 before the first step.
        self.step_seen = -1
        self.recording = False
        self._cur = self._prof = self._rf = None
        self._close_req = self._abandoned = False
        self._jobs = collections.deque()
        self._up_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._tlock = threading.RLock()
        self._up_thread = None
        self._up_running = False
        self._idle = threading.Event()
        self._idle.set()
        self._sink = self._up_sink = None  # the parent's connections

    def _sweep(self):
        """Removes leftovers of this client (its own file-name pattern) whose
        process is gone or that are older than _STALE_S; once per directory
        and process."""
        d = self.dir
        if d in _SWEPT:
            return
        _SWEPT.add(d)
        me = os.getpid()
        now = time.time()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            return
        for e in entries:
            m = _OWN_FILE_RE.match(e.name)
            if not m:
                continue
            pid = int(m.group(1))
            if pid == me:
                continue
            try:
                if not e.is_file(follow_symlinks=False):
                    continue
                old = now - e.stat(follow_symlinks=False).st_mtime > _STALE_S
            except OSError:
                continue
            if old or not _pid_alive(pid):
                try:
                    os.remove(e.path)
                    self.swept += 1
                except OSError:
                    pass

    # --- uploader thread -----------------------------------------------------
    def _report(self, cid, why):
        self._enqueue(("error", cid, clean_error(why)))

    def _enqueue(self, job):
        if self._up_sink is None or self._forked:
            if job[0] == "trace":
                _remove(_files(job[2]))
            return
        with self._up_lock:
            self._jobs.append(job)
            self._idle.clear()
            # _up_running, not is_alive(): a thread that has decided to exit
            # (under this lock) is still alive for a moment.
            if not self._up_running:
                self._up_running = True
                self._up_thread = threading.Thread(target=self._upload_loop, name="laggard-capture", daemon=True)
                self._up_thread.start()

    def _upload_loop(self):
        while True:
            with self._up_lock:
                if not self._jobs:
                    try:
                        self._up_sink.close()  # its own connection; reopened by the next upload
                    except Exception:
                        pass
                    self._up_running = False
                    self._idle.set()
                    return
                job = self._jobs.popleft()
            try:
                if job[0] == "trace":
                    self._upload_trace(job[1], job[2], job[3] if len(job) > 3 else None)
                else:
                    self._post(job[1], None, 0, {"X-Laggard-Capture-Error": job[2]}, "error report")
            except Exception as e:  # a bug here must not kill later uploads
                self._inc("errors")
                self._fail_note("upload: %s: %s" % (type(e).__name__, e))

    def _upload_trace(self, cid, segs, meta=None):
        body = os.path.join(self.dir, "laggard-%s-%s-rank%s-%d.json.gz" % (_safe(self.job), cid, self.rank,
                                                                           os.getpid()))
        try:
            try:
                os.makedirs(self.dir, exist_ok=True)
                info = {"seg_steps": (meta or {}).get("seg_steps")}
                base = write_body(body, segs, max(0, self.max_dir_bytes - self._dir_bytes()), self.max_events, info)
                _remove(_files(segs))
                segs = None  # profiler results: free them before the upload
                size = os.path.getsize(body)
            except Exception as e:
                self._inc("failed")
                why = "preparing the trace: %s: %.300s" % (type(e).__name__, e)
                self._fail_note(why)
                self._post(cid, None, 0, {"X-Laggard-Capture-Error": clean_error(why)}, "error report")
                return
            headers = {"Content-Encoding": "gzip", "X-Laggard-Clock": json.dumps(self.heartbeats(),
                                                                                 separators=(",", ":"))}
            if base is not None:
                headers["X-Laggard-Trace-Base-NS"] = str(base)
            cut = (meta or {}).get("cut", 0) + info.get("dropped_steps", 0)
            if cut > 0:
                # steps of the plan left out by max_events (the server ignores
                # headers it does not know)
                headers["X-Laggard-Capture-Truncated"] = str(cut)
                if info.get("dropped_steps") and not (meta or {}).get("cut"):
                    self._inc("truncated")
            ok, err = self._post(cid, body, size, headers, "trace")
            if ok:
                self.uploaded += 1
                self.upload_bytes += size
                return
            self._inc("failed")
            if err is not None and err.status not in (401, 403, 404, 409):  # 409: the capture is closed
                self._post(cid, None, 0, {"X-Laggard-Capture-Error": clean_error("upload failed: %s" % err)},
                           "error report")
        finally:
            _remove(_files(segs or []) + [body])

    def _post(self, cid, path, size, headers, what):
        """(ok, last ShipError). Retries transient failures with backoff."""
        sink = self._up_sink
        backoff = self.backoff_s
        err = None
        tries = self.tries if path is not None else min(self.tries, 3)
        for i in range(tries):
            if i:
                self.upload_retries += 1
                pause = backoff * self._rand.uniform(0.5, 1.0)
                if err is not None and err.retry_after:
                    pause = min(err.retry_after, _MAX_BACKOFF_S)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                if self._stop_by is not None and time.monotonic() + pause >= self._stop_by:
                    break  # close(): no retry outlives its deadline
                time.sleep(pause)
            try:
                if path is None:
                    sink.post_capture_trace(cid, self.rank, None, 0, headers)
                else:
                    with open(path, "rb") as f:
                        sink.post_capture_trace(cid, self.rank, f, size, headers)
                if path is None:
                    self.reported += 1
                return True, None
            except ShipError as e:
                err = e
                self._fail_note("%s for capture %s: %s" % (what, cid, e))
                if e.status is not None and e.status < 500 and e.status not in (408, 429):
                    break  # 400/401/403/404/409/413: the same request cannot succeed
            except Exception as e:
                self._inc("errors")
                self._fail_note("%s for capture %s: %s: %s" % (what, cid, type(e).__name__, e))
                break
        return False, err

    # --- common ------------------------------------------------------------
    def _inc(self, name):
        # failed and errors are counted by the training and uploader threads
        with self._count_lock:
            setattr(self, name, getattr(self, name) + 1)

    def _fail_note(self, why):
        self.last_error = str(why)[:500]

    def _dir_bytes(self):
        total = 0
        try:
            with os.scandir(self.dir) as it:
                for e in it:
                    try:
                        if e.is_file(follow_symlinks=False):
                            total += e.stat(follow_symlinks=False).st_size
                    except OSError:
                        pass
        except OSError:
            pass
        return total

    def stats(self):
        state = "recording" if self.recording else "pending" if self.plan is not None else (
            "uploading" if not self._idle.is_set() else "idle")
        return {"polling": self.attached and not self.poll_dead and not self._closed, "polls": self.polls,
                "poll_errors": self.poll_errors, "heartbeats": len(self._hb), "plans": self.plans,
                "refused": self.refused, "cancelled": self.cancelled, "started": self.started,
                "steps_recorded": self.steps_recorded, "uploaded": self.uploaded, "upload_bytes": self.upload_bytes,
                "upload_retries": self.upload_retries, "failed": self.failed, "reported": self.reported,
                "profiler_errors": self.profiler_errors, "errors": self.errors,
                "export_ms_last": round(self.export_ms_last, 3), "train_ms_last": round(self.train_ms_last, 3),
                "truncated": self.truncated, "swept": self.swept, "max_events": self.max_events,
                "state": state, "last_error": self.last_error}


# --- profiler helpers ---------------------------------------------------------

# Without Kineto (torch 1.13 CPU builds) torch.profiler's stop() turns every
# event into a Python FunctionEvent and builds their tree before export: ~0.3
# s per 10k events on the training thread. The legacy session below stops the
# same profiler with torch.autograd._disable_profiler() and leaves the raw
# events to the uploader thread, which writes the Chrome trace itself.
_FAST_LEGACY = True


def _start_profiler(torch):
    """A started _Session: CPU, plus CUDA when available."""
    try:
        legacy = (_FAST_LEGACY and not torch.autograd.kineto_available() and not torch.cuda.is_available()
                  and callable(getattr(torch.autograd, "_disable_profiler", None)))
    except Exception:
        legacy = False
    return _LegacySession(torch) if legacy else _Session(torch)


class _Session:
    """torch.profiler.profile; stop() exports the Chrome trace to a file."""

    exports = True

    def __init__(self, torch):
        tp = torch.profiler
        acts = [tp.ProfilerActivity.CPU]
        try:
            if torch.cuda.is_available() and tp.ProfilerActivity.CUDA in tp.supported_activities():
                acts.append(tp.ProfilerActivity.CUDA)
        except Exception:
            pass
        self.p = tp.profile(activities=acts)
        self.count = 0
        w0 = time.time_ns()
        self.p.start()
        self.fallback = (time.time_ns() + w0) // 2
        self.running = True

    def stop(self, path):
        """("file", path, base_ns)."""
        self.running = False
        self.p.stop()
        self.p.export_chrome_trace(path)
        self.count = _count_events(path)
        return ("file", path, _trace_start_ns(self.p, self.fallback))

    def abort(self):
        if self.running:
            self.running = False
            try:
                self.p.stop()
            except Exception:
                pass


class _LegacySession:
    """The same profiler (torch.autograd.profiler.profile, as torch.profiler
    builds it), stopped without parsing: stop() returns ("events", [event],
    base_ns) for write_body: the raw result's events as a list the writer
    empties as it goes (the result itself is dropped here)."""

    exports = False

    def __init__(self, torch):
        self.torch = torch
        self.p = torch.autograd.profiler.profile(use_kineto=True, use_cpu=True)
        self.p._prepare_trace()
        self.count = 0
        self.p._start_trace()
        self.running = True

    def stop(self, path):
        self.running = False
        r = self.torch.autograd._disable_profiler()
        base = int(r.trace_start_us()) * 1000
        evs = r.events()
        self.count = len(evs)
        return ("events", evs, base)

    def abort(self):
        if self.running:
            self.running = False
            try:
                self.torch.autograd._disable_profiler()
            except Exception:
                pass


def _count_events(path):
    """Events in an exported Chrome trace: its "ph" keys, counted in 1 MiB
    reads (bytes.count is C speed)."""
    n = 0
    tail = b""
    with open(path, "rb") as f:
        while True:
            b = f.read(_CHUNK)
            if not b:
                return n
            b = tail + b
            n += b.count(b'"ph"')
            tail = b[-3:]


def _ordered(hb):
    """A heartbeat (c_send, s_recv, s_send, c_recv) each clock of which runs
    forward (a clock stepped back mid-poll gives one that does not)."""
    try:
        cs, sr, ss, cr = hb
        return cs <= cr and sr <= ss
    except (TypeError, ValueError):
        return False


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: someone else's process
    return True


def _at_fork_child():
    for c in list(_LIVE):
        try:
            c._after_fork_child()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_at_fork_child)


def _files(segs):
    return [s[1] for s in segs if s[0] == "file"]


def _trace_start_ns(p, fallback):
    """Epoch ns of ts 0 of the exported trace when the profiler says
    (torch 1.13: trace_start_us(), realtime epoch µs), else fallback."""
    r = getattr(getattr(p, "profiler", None), "kineto_results", None)
    for name, mul in (("trace_start_ns", 1), ("trace_start_us", 1000)):
        f = getattr(r, name, None)
        if f is not None:
            try:
                v = int(f()) * mul
                if v > 0:
                    return v
            except Exception:
                pass
    return fallback


def _first_ts(path):
    """The first "ts" number in the file's first MiB, or None."""
    with open(path, "rb") as f:
        head = f.read(_CHUNK)
    m = re.search(rb'"ts"\s*:\s*(-?[0-9.eE+-]+)', head)
    if not m:
        return None
    try:
        return float(m.group(1))
    except ValueError:
        return None


def _has_base(path):
    """Whether the file carries baseTimeNanoseconds (Kineto writes it after
    traceEvents: look at the tail, then the head)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size > 2 * 65536:
            f.seek(size - 65536)
            if b'"baseTimeNanoseconds"' in f.read():
                return True
            f.seek(0)
            return b'"baseTimeNanoseconds"' in f.read(65536)
        return b'"baseTimeNanoseconds"' in f.read()


def write_body(out, segs, limit=MAX_DIR_BYTES, max_events=None, info=None):
    """Writes the gzip upload body from the segments: ("file", path,
    base_ns) exported by torch, or ("events", events, base_ns) with events a
    list of raw profiler events (emptied as it is written) or a
    _ProfilerResult. Returns the X-Laggard-Trace-Base-NS value (None when
    the trace's ts are absolute or it carries its own base). One file is
    copied as is; several are merged into one event list on the first
    segment's time base (ts shifted by the difference of their bases).
    OSError past limit bytes. With max_events, no more events than that are
    written, cut at a step boundary; info (a dict, optional; info["seg_steps"]
    the steps in each segment, when known) gets "events" and "dropped_steps"."""
    info = {} if info is None else info
    info.setdefault("dropped_steps", 0)
    cap = max_events if max_events else None
    if segs and segs[0][0] == "events":
        return _write_events(out, segs, limit, cap, info)
    if len(segs) == 1:
        _, path, base = segs[0]
        ts = _first_ts(path)
        rel = ts is not None and ts < _REL_TS_LIMIT_US and not _has_base(path)
        with open(path, "rb") as src, gzip.open(out, "wb", compresslevel=3) as dst:
            while True:
                b = src.read(_CHUNK)
                if not b:
                    break
                dst.write(b)  # zlib drops the GIL while it compresses
                time.sleep(0.0002)
        return base if rel else None
    return _merge(out, segs, cap, info)


def _dropped(info, k, extra=0):
    """Steps in segments k.. (when the caller said), plus extra."""
    ss = info.get("seg_steps")
    info["dropped_steps"] += extra + (sum(ss[k:]) if isinstance(ss, list) else 0)


def _merge(out, segs, cap=None, info=None):
    """Several exported files (each bounded: one session) into one; with
    cap, whole segments past it are left out (a Kineto file's events are not
    in step order)."""
    info = {"dropped_steps": 0} if info is None else info
    first = None
    header_base = None
    file_base = None
    n = 0
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=3) as dst:
        for k, (_, path, base) in enumerate(segs):
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            events = doc if isinstance(doc, list) else doc.get("traceEvents") or []
            fb = None if isinstance(doc, list) else doc.get("baseTimeNanoseconds")
            if isinstance(fb, bool) or not isinstance(fb, int):
                fb = None
            if cap is not None and k > 0 and n + len(events) > cap:
                del doc, events
                _dropped(info, k)
                break
            ts0 = next((e.get("ts") for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))),
                       None)
            if fb is not None:
                seg_base = fb
            elif ts0 is not None and ts0 < _REL_TS_LIMIT_US:
                seg_base = base
            else:
                seg_base = 0  # absolute epoch µs already
            if k == 0:
                first = doc
                ref = seg_base
                file_base = fb
                if fb is None and seg_base:
                    header_base = seg_base
                dst.write("[" if isinstance(doc, list) else '{"traceEvents":[')
            shift_ns = seg_base - ref
            for e in events:
                if not isinstance(e, dict):
                    continue
                if shift_ns and isinstance(e.get("ts"), (int, float)):
                    if shift_ns % 1000 == 0 and isinstance(e["ts"], int):
                        e["ts"] += shift_ns // 1000
                    else:
                        e["ts"] = round(e["ts"] + shift_ns / 1000.0, 3)
                dst.write(("," if n else "") + json.dumps(e, separators=(",", ":")))
                n += 1
                if n % 2048 == 0:
                    time.sleep(0.0002)  # json.dumps holds the GIL: let training run
            del doc, events
        if isinstance(first, list):
            dst.write("]")
        else:
            dst.write("]")
            for key, v in first.items():
                if key in ("traceEvents", "baseTimeNanoseconds"):
                    continue
                dst.write("," + json.dumps(key) + ":" + json.dumps(v, separators=(",", ":")))
            if file_base is not None:
                dst.write(',"baseTimeNanoseconds":%d' % file_base)
            dst.write("}")
    info["events"] = n
    return header_base


def _write_events(out, segs, limit, cap=None, info=None):
    """The legacy export's format (a bare array, ts integer µs since the
    first segment's start; torch's export_chrome_trace writes the same
    fields), written from the raw events in start order (a ProfilerStep
    range before the ops it encloses, as the server's decoder expects).
    One segment (a bounded session) at a time, its events list emptied
    while its rows are built, in slices that let the training thread take
    the GIL. With cap, stops at the last step boundary within cap events."""
    info = {"dropped_steps": 0} if info is None else info
    ref = segs[0][2]
    pid = os.getpid()
    n = 0
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as dst:
        dst.write(b"[")
        for k, (_, res, _base) in enumerate(segs):
            evs = res if isinstance(res, list) else list(res.events())
            rows = []
            for i in range(len(evs)):
                e = evs[i]
                evs[i] = None  # free the raw event as its row is made
                name = e.name()
                if name == "[memory]":
                    continue
                rows.append((int(e.start_us()), -int(e.duration_us()), name, int(e.start_thread_id())))
                if i % 4096 == 4095:
                    time.sleep(0.0002)
            del evs[:]
            del evs
            rows.sort()
            stop = False
            if cap is not None and n + len(rows) > cap:
                # the last step that fits: rows up to the next ProfilerStep start
                starts = [i for i, r in enumerate(rows) if r[2].startswith("ProfilerStep#")]
                cuts = [c for c in starts[1:] + [len(rows)] if n + c <= cap]
                keep = cuts[-1] if cuts else 0
                if k == 0 and keep == 0:
                    raise OSError("one step holds %d events, more than the cap of %d" % (len(rows), cap))
                info["dropped_steps"] += sum(1 for i in starts if i >= keep)
                del rows[keep:]
                _dropped(info, k + 1)
                stop = True
            shift = -(ref // 1000)  # start_us are epoch µs in every session: ts = start_us - first start
            buf = []
            for start, negdur, name, tid in rows:
                buf.append('{"name":%s,"ph":"X","cat":"cpu_op","ts":%d,"dur":%d,"pid":%d,"tid":%d}' % (
                    json.dumps(name), start + shift, -negdur, pid, tid))
                if len(buf) >= 2048:
                    dst.write(((b"," if n else b"") + ",".join(buf).encode()))
                    n += len(buf)
                    buf = []
                    if raw.tell() > limit:
                        raise OSError("trace passed %d bytes (capture directory limit)" % limit)
                    time.sleep(0.0002)
            if buf:
                dst.write(((b"," if n else b"") + ",".join(buf).encode()))
                n += len(buf)
            del rows, buf
            if stop:
                break
        dst.write(b"]")
    if os.path.getsize(out) > limit:
        raise OSError("trace passed %d bytes (capture directory limit)" % limit)
    info["events"] = n
    return ref


def _remove(paths):
    for p in paths:
        try:
            os.remove(p)
        except OSError:
            pass


def _safe(s):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(s))[:64]
