"""Cooperative validation for CPU (gloo) jobs — Greyhound §4.3 and §6,
protocol in contracts §3.

The server publishes a plan (GET …/validation?rank=R, polled every ~2 s by
the shipper thread). At the end of the plan's step `at_step` — inside
perf.step()'s exit, on the training thread, after the optimizer and before
the next step's first collective — every rank:

1. agrees through the job's c10d store that every rank has arrived (a
   counter per plan: the rank that completes it writes "run"), and a rank
   that cannot take part (learnt of the plan too late, its group is broken
   or could not be made, torch.distributed is gone) writes "skip:<why>" at
   once instead; the first decision wins (compare_set), so all ranks take
   the same branch, and waiting ranks poll only the decision key, backing
   off from 1 ms to 50 ms (512 ranks must not hammer rank 0's TCPStore);
2. times `reps` torch.matmul of n×n matrices if it is in gemm.ranks;
3. for each P2P pass, size and repetition: an all_reduce(MAX) of "past the
   deadline" and "past the pass budget" (it doubles as the barrier that
   starts a pass's transfers together, and makes every rank stop at the
   same repetition), then the pass's transfers (isend/irecv) timed one by
   one; after each size of a pass of several transfers, an all_reduce(MAX)
   of its slowest best and (negated) fastest worst repetition: when the
   slowest transfer at its best took stop_ratio times the fastest at its
   worst, that link is proven slow and the pass skips its larger sizes;
4. a final barrier; the result is posted per rank by the shipper thread,
   with the wall-clock span the rank spent away from training
   (paused_from_ns, paused_to_ns), so the server can leave that pause out
   of its iteration-time detector.

The whole run is bounded by the plan's deadline_ms (capped by the group's
timeout, validation_timeout) and, once every rank agreed to run it, by its
budget_ms: the remaining time is checked before each GEMM repetition and
each pass/size/repetition; past it the rank stops with what it measured so
far and error "deadline: …" (or "budget: …"). A pass that has run
pass_budget_ms skips the
rest of its repetitions and sizes (issue 16: one throttled link paused
training for ~40 s); a transfer in flight always completes — gloo cannot
cancel one. Plans are bounded too: n ≤ 4096, a message ≤ 64 MiB, a rank
sends at most once and receives at most once per pass, so one send and
one receive buffer (of the largest size) serve every transfer.

Every communication runs on a dedicated gloo group created by setup() —
new_group() is collective, so setup() runs on every rank at the same point
(laggard.init(validation=True), or the first step when the default group
is initialised later). Its timeout bounds every wait: a peer that never
comes costs at most that long, then the error is reported and training
continues; the group is then marked unusable (a gloo pair that timed out
may hold stale bytes), so later plans report an error without running.
The agreement step makes that rare: passes start only when every rank has
arrived at the same step boundary.

Nothing here raises into training: any failure becomes the result's
`error` string.
"""

import collections
import datetime
import logging
import random
import sys
import threading
import time

from . import collectives

log = logging.getLogger("laggard")

POLL_PERIOD_S = 2.0
MAX_BYTES = 64 << 20  # one message (R4: two such buffers per rank at most)
MAX_SIZES = 8
MAX_REPS = 20
MAX_PASSES = 16
MAX_N = 4096  # float64 n=4096 is ~137 GFLOP a repetition on a CPU
POLL_MIN_S = 0.001  # agreement polling: exponential backoff between these
POLL_MAX_S = 0.05
DTYPES = ("float32", "float64", "bfloat16", "float16")
_KEEP_SEEN = 64


class PlanError(ValueError):
    """A plan the client refuses; the message names the field."""


def _int(obj, field, lo, hi):
    v = obj.get(field) if isinstance(obj, dict) else None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise PlanError("%s: want an integer in [%d, %d], got %.40r" % (field, lo, hi, v))
    return v


def parse_plan(obj, world):
    """Checks a plan (contracts §3) and returns it normalized:
    {"id", "at_step", "deadline_ms", "gemm": {"ranks","n","dtype","reps"} or
    None, "p2p": {"sizes_bytes","reps","passes": [[(src,dst),…],…]} or None}.
    Raises PlanError naming the field."""
    if not isinstance(obj, dict):
        raise PlanError("plan: want a JSON object")
    vid = obj.get("id")
    if not isinstance(vid, str) or not vid or len(vid) > 128 or any(not 0x21 <= ord(c) <= 0x7e for c in vid):
        raise PlanError("id: want 1-128 printable ASCII characters, got %.40r" % (vid,))
    plan = {"id": vid, "at_step": _int(obj, "at_step", 0, 1 << 48),
            "deadline_ms": _int(obj, "deadline_ms", 1, 3_600_000), "gemm": None, "p2p": None,
            "budget_ms": _int(obj, "budget_ms", 0, 3_600_000) if "budget_ms" in obj else 0}

    def rank_ok(r, field):
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world:
            raise PlanError("%s: rank %.20r not in [0, %d)" % (field, r, world))
        return r

    g = obj.get("gemm")
    if g is not None:
        if not isinstance(g, dict):
            raise PlanError("gemm: want an object")
        ranks = g.get("ranks")
        if not isinstance(ranks, list):
            raise PlanError("gemm.ranks: want a list")
        dtype = g.get("dtype", "float32")
        if dtype not in DTYPES:
            raise PlanError("gemm.dtype: want one of %s, got %.40r" % (", ".join(DTYPES), dtype))
        plan["gemm"] = {"ranks": sorted({rank_ok(r, "gemm.ranks[%d]" % i) for i, r in enumerate(ranks)}),
                        "n": _int(g, "n", 1, MAX_N), "dtype": dtype, "reps": _int(g, "reps", 1, MAX_REPS)}
    p = obj.get("p2p")
    if p is not None:
        if not isinstance(p, dict):
            raise PlanError("p2p: want an object")
        sizes = p.get("sizes_bytes")
        if not isinstance(sizes, list) or not 1 <= len(sizes) <= MAX_SIZES:
            raise PlanError("p2p.sizes_bytes: want 1-%d sizes" % MAX_SIZES)
        for i, s in enumerate(sizes):
            if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_BYTES:
                raise PlanError("p2p.sizes_bytes[%d]: want an integer in [1, %d], got %.40r" % (i, MAX_BYTES, s))
        passes = p.get("passes")
        if not isinstance(passes, list) or len(passes) > MAX_PASSES:
            raise PlanError("p2p.passes: want a list of at most %d passes" % MAX_PASSES)
        out = []
        for i, ps in enumerate(passes):
            if not isinstance(ps, list) or len(ps) > world:
                raise PlanError("p2p.passes[%d]: want a list of at most %d transfers" % (i, world))
            tr = []
            srcs, dsts = set(), set()
            for j, t in enumerate(ps):
                f = "p2p.passes[%d][%d]" % (i, j)
                if not isinstance(t, dict):
                    raise PlanError(f + ": want {src, dst}")
                s, d = rank_ok(t.get("src"), f + ".src"), rank_ok(t.get("dst"), f + ".dst")
                if s == d:
                    raise PlanError(f + ": src and dst are both %d" % s)
                # §4.3 Fig. 10: a pass is a set of disjoint transfers; a rank
                # repeated in one role would also cost a buffer per repeat.
                if s in srcs:
                    raise PlanError(f + ".src: rank %d sends twice in one pass" % s)
                if d in dsts:
                    raise PlanError(f + ".dst: rank %d receives twice in one pass" % d)
                srcs.add(s)
                dsts.add(d)
                tr.append((s, d))
            out.append(tr)
        stop = p.get("stop_ratio", 0)
        if isinstance(stop, bool) or not isinstance(stop, (int, float)) or not (stop == 0 or 1 < stop <= 1000):
            raise PlanError("p2p.stop_ratio: want 0 or a number in (1, 1000], got %.40r" % (stop,))
        plan["p2p"] = {"sizes_bytes": list(sizes), "reps": _int(p, "reps", 1, MAX_REPS), "passes": out,
                       "pass_budget_ms": _int(p, "pass_budget_ms", 0, 3_600_000) if "pass_budget_ms" in p else 0,
                       "stop_ratio": float(stop)}
    return plan


_groups = {}  # id(default group) -> (validation group, timeout_s)
_groups_lock = threading.Lock()


def _dist():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        d = torch.distributed
        return d if d.is_available() and d.is_initialized() else None
    except Exception:
        return None


class Validator:
    """Runs validation plans for one rank of one job. setup() on the
    training thread (collective); offer() from the shipper thread;
    at_step_end() on the training thread after every step; take_results()
    from the shipper thread."""

    def __init__(self, job, timeout_s=30.0, agree_timeout_s=None):
        self.job = job
        self.timeout_s = float(timeout_s)
        self._agree_timeout_s = agree_timeout_s
        self.rank = None
        self.world = None
        self.group = None
        # The incarnation the shipper polled the plan being offered with
        # (set by it before each offer(); None: a server without them).
        self.incarnation = None
        self._store = None
        self.ready = False
        self.setup_error = ""  # setup failed: plans are declined at once (R5)
        self.broken = ""
        self._lock = threading.Lock()
        self._pending = None
        self._seen = collections.OrderedDict()
        self._outbox = collections.deque(maxlen=64)
        self._rand = random.Random()
        self.last_done = -1  # last step completed by the training thread
        self.runs = 0
        self.missed = 0
        self.unable = 0
        self.deadlines = 0
        self.cut_passes = 0  # passes stopped by their budget or a proven-slow link
        self.errors = 0
        self.rejected = 0
        self.last_error = ""

    @property
    def pollable(self):
        """Whether the shipper should fetch plans: when ready, or when this
        rank can at least tell the others at once that it cannot take part."""
        return self.ready or bool(self.setup_error and self._store is not None and self.world)

    # --- training thread -------------------------------------------------
    def setup(self):
        """Creates (or reuses) the validation gloo group. Collective: every
        rank must call it at the same point. True when ready."""
        if self.ready:
            return True
        d = _dist()
        if d is None:
            return False
        try:
            self.rank, self.world = d.get_rank(), d.get_world_size()
            try:
                self._store = d.distributed_c10d._get_default_store()
            except Exception:
                self._store = None  # no agreement step: timeouts alone bound a missing rank
            key = id(d.distributed_c10d.GroupMember.WORLD)
            with _groups_lock:
                got = _groups.get(key)
                if got is None:
                    g = d.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout_s))
                    got = _groups[key] = (g, self.timeout_s)
            self.group, self.timeout_s = got
            collectives.exclude(self.group)
            self.ready = True
            self.setup_error = ""
            return True
        except Exception as e:
            self._fail("setup", e)
            self.setup_error = self.last_error
            log.warning("laggard: validation off: could not create its process group: %s", self.last_error)
            return False

    def at_step_end(self, step):
        """Runs a pending plan whose at_step is `step` (missed when later).
        Cheap when nothing is pending; never raises."""
        self.last_done = step
        if self._pending is None:
            return
        with self._lock:
            plan = self._pending
            if plan is None or step < plan["at_step"]:
                return
            self._pending = None
        if step > plan["at_step"]:
            self._missed(plan)
            return
        try:
            res = self.run(plan)
        except Exception as e:  # pragma: no cover - run() catches its own
            res = self._result(plan, error="%s: %s" % (type(e).__name__, e))
        self._outbox.append((plan["id"], res))

    # --- shipper thread --------------------------------------------------
    def offer(self, obj):
        """A plan as the server sent it. Returns the parsed plan when it is
        new, else None."""
        if not self.pollable:
            return None
        vid = obj.get("id") if isinstance(obj, dict) else None
        if isinstance(vid, str) and vid in self._seen:
            return None
        try:
            plan = parse_plan(obj, self.world)
        except PlanError as e:
            self.rejected += 1
            self._remember(str(vid))
            if isinstance(vid, str) and vid:
                self._outbox.append((vid, {"rank": self.rank, "missed": False, "gemm_ms": [], "p2p": [],
                                           "error": "plan refused: %s" % e}))
            log.warning("laggard: validation plan %.40r refused: %s", vid, e)
            return None
        self._remember(plan["id"])
        if not self.ready:  # R5: say so now, so no rank waits out the agreement for this one
            self._outbox.append((plan["id"], self._unable(plan, "validation setup failed: " + self.setup_error)))
            return plan
        with self._lock:
            if self.last_done < plan["at_step"]:
                self._pending = plan
                return plan
        self._missed(plan)  # this rank is already past at_step
        return plan

    def take_results(self):
        out = []
        while self._outbox:
            out.append(self._outbox.popleft())
        return out

    def stats(self):
        return {"ready": self.ready, "runs": self.runs, "missed": self.missed, "unable": self.unable,
                "deadline": self.deadlines, "cut_passes": self.cut_passes, "errors": self.errors, "rejected": self.rejected,
                "pending": self._pending is not None, "broken": self.broken, "last_error": self.last_error}

    # --- internals -------------------------------------------------------
    def _remember(self, vid):
        self._seen[vid] = True
        while len(self._seen) > _KEEP_SEEN:
            self._seen.popitem(last=False)

    def _fail(self, where, e):
        self.errors += 1
        self.last_error = "%s: %s: %.300s" % (where, type(e).__name__, e)

    def _result(self, plan, missed=False, error=""):
        return {"rank": self.rank, "missed": missed, "gemm_ms": [], "p2p": [], "error": error}

    def _key(self, plan, name):
        return "laggard/validation/%s/%s/%s" % (self.job, plan["id"], name)

    def _decline(self, plan, counter, why):
        """Counts this rank in `counter` and decides "skip" for every rank
        (unless a decision was made already); never raises."""
        st = self._store
        if st is None:
            return
        try:
            st.add(self._key(plan, counter), 1)  # for a person reading the store
            st.compare_set(self._key(plan, "decision"), "", "skip:" + why)
        except Exception as e:
            self._fail(counter, e)

    def _missed(self, plan):
        self.missed += 1
        self._decline(plan, "missed", "rank %s missed the plan" % self.rank)
        self._outbox.append((plan["id"], self._result(plan, missed=True)))

    def _unable(self, plan, why):
        """R5: a rank that cannot take part marks itself "unable" in the
        store at once, so the others stop waiting for it; its result."""
        self.unable += 1
        self._decline(plan, "unable", "rank %s unable: %.200s" % (self.rank, why))
        return self._result(plan, error="unable: " + why)

    def _agree(self, plan, left_s):
        """("run", "") when every rank arrived; ("skip", why) otherwise. All
        ranks get the same answer (compare_set: the first decision wins).
        Bounded by left_s, the time left of the plan's deadline."""
        st = self._store
        if st is None:
            return "run", ""
        arrived, decision = self._key(plan, "arrived"), self._key(plan, "decision")
        limit = self._agree_timeout_s
        if limit is None:
            # Longer than a poll period plus a request timeout: a rank still
            # in the step, or whose shipper has not seen the plan yet, either
            # arrives or declares itself missed within it.
            limit = max(5.0, min(plan["deadline_ms"] / 2000.0, 15.0))
        limit = max(0.0, min(limit, left_s))
        if st.add(arrived, 1) >= self.world:
            got = st.compare_set(decision, "", "run").decode()  # the last to arrive decides
        else:
            t0 = time.monotonic()
            pause = POLL_MIN_S
            while True:
                # One store operation per poll, a read: compare_set of a
                # missing key with a non-empty expected value sets nothing
                # and returns that value, and "?" is never written (torch
                # 1.13 stores lack check()).
                got = st.compare_set(decision, "?", "?").decode()
                if got != "?":
                    break
                if time.monotonic() - t0 >= limit:
                    a = st.add(arrived, 0)
                    got = st.compare_set(decision, "", "skip:only %d of %d ranks arrived within %.1f s" % (
                        a, self.world, limit)).decode()
                    break
                time.sleep(pause * self._rand.uniform(0.8, 1.2))
                pause = min(pause * 2, POLL_MAX_S)
        if got == "run":
            return "run", ""
        return "skip", got.partition(":")[2] or "skipped"

    def run(self, plan):
        """Executes a plan on this rank; returns the result body, with the
        span training was paused for it (paused_from_ns, paused_to_ns)."""
        paused_from = time.time_ns()
        res = self._run(plan)
        if not res.get("missed"):
            res["paused_from_ns"], res["paused_to_ns"] = paused_from, max(time.time_ns(), paused_from + 1)
        return res

    def _run(self, plan):
        t_start = time.monotonic()
        if self.broken:
            return self._unable(plan, "validation group unusable after an earlier failure (%s)" % self.broken)
        d = _dist()
        torch = sys.modules.get("torch")
        if d is None or torch is None:
            return self._unable(plan, "torch.distributed is not initialised")
        res = self._result(plan)
        self.runs += 1
        budget = min(plan["deadline_ms"] / 1000.0, self.timeout_s)
        t_end = t_start + budget
        stage = "agreement"
        with collectives.suspended():
            try:
                verdict, why = self._agree(plan, t_end - time.monotonic())
                if verdict != "run":
                    res["error"] = "skipped: " + why
                    return res
                limit = "deadline: %d ms" % round(budget * 1000)
                if plan.get("budget_ms"):
                    # The benchmarks' own cap, from the agreement on.
                    t_bench = time.monotonic() + plan["budget_ms"] / 1000.0
                    if t_bench < t_end:
                        t_end, limit = t_bench, "budget: %d ms" % plan["budget_ms"]
                late = ""
                g = plan["gemm"]
                if g and self.rank in g["ranks"]:
                    try:
                        res["gemm_ms"], late = self._gemm(torch, g, t_end)
                    except Exception as e:  # local: the barriers below still keep every rank in step
                        self._fail("gemm", e)
                        res["error"] = "gemm: %s: %.300s" % (type(e).__name__, e)
                stage = "p2p"
                grp = self.group
                p = plan["p2p"]
                if p:
                    res["p2p"], late2 = self._p2p(torch, d, grp, p, t_end)
                    late = late or late2
                if late:
                    self.deadlines += 1
                    res["error"] = "%s passed %s (partial result)%s" % (
                        limit, late, "; " + res["error"] if res["error"] else "")
                stage = "final barrier"
                d.barrier(group=grp)
            except Exception as e:
                self._fail(stage, e)
                res["error"] = "%s: %s: %.300s" % (stage, type(e).__name__, e)
                if stage != "agreement":
                    self.broken = res["error"]
        return res

    def _gemm(self, torch, g, t_end):
        """(times in ms, "" or where the deadline stopped it)."""
        n, dt = g["n"], getattr(torch, g["dtype"])
        a = torch.randn(n, n).to(dt)
        b = torch.randn(n, n).to(dt)
        out = []
        if time.monotonic() >= t_end:
            return out, "before the GEMM warm-up"
        torch.matmul(a, b)  # warm-up: allocator and kernel selection are not the rank's speed
        for i in range(g["reps"]):
            if time.monotonic() >= t_end:
                return out, "before GEMM repetition %d" % i
            t0 = time.perf_counter()
            torch.matmul(a, b)
            out.append(round((time.perf_counter() - t0) * 1e3, 4))
        return out, ""

    @staticmethod
    def _go(torch, d, grp, t_end, t_pass=None):
        """Every rank's "may we go on": an all_reduce(MAX) of "past the
        deadline" and "past the pass budget", so all stop at the same point
        (R4); it is also the barrier that starts a pass's transfers together
        (§4.3). Returns (go on, go on with this pass)."""
        now = time.monotonic()
        flag = torch.tensor([1 if now >= t_end else 0, 1 if t_pass is not None and now >= t_pass else 0],
                            dtype=torch.int32)
        d.all_reduce(flag, op=d.ReduceOp.MAX, group=grp)
        return int(flag[0].item()) == 0, int(flag[1].item()) == 0

    @staticmethod
    def _proven_slow(torch, d, grp, ms, stop_ratio):
        """After a size of a pass: whether its slowest transfer at its best
        took stop_ratio times its fastest at its worst (issue 16: stop a
        link once it is proven slow). One all_reduce(MAX) over every rank
        of [slowest best, −fastest worst]; a rank outside the pass adds
        nothing."""
        best = max((min(m) for m in ms if m), default=0.0)
        worst = min((max(m) for m in ms if m), default=float("inf"))
        t = torch.tensor([best, -worst], dtype=torch.float64)
        d.all_reduce(t, op=d.ReduceOp.MAX, group=grp)
        slowest_best, fastest_worst = float(t[0].item()), -float(t[1].item())
        return 0 < fastest_worst < float("inf") and slowest_best >= stop_ratio * fastest_worst

    def _p2p(self, torch, d, grp, p, t_end):
        """(entries, "" or where the deadline stopped it). Every rank walks
        the same passes × sizes × reps, in or out of a pass, so the _go and
        _proven_slow all_reduces line up; a pass stops early (on every rank
        together) once it has used its budget or proven a link slow."""
        rank = self.rank
        biggest = max(p["sizes_bytes"])
        send_buf = recv_buf = None  # one each: a rank sends/receives at most once per pass (parse_plan)
        pass_budget = p.get("pass_budget_ms", 0) / 1000.0
        stop_ratio = p.get("stop_ratio", 0)
        entries = []
        for pi, ps in enumerate(p["passes"]):
            mine = [(s, t) for s, t in ps if s == rank or t == rank]
            if send_buf is None and any(s == rank for s, _ in mine):
                send_buf = torch.ones(biggest, dtype=torch.uint8)
            if recv_buf is None and any(t == rank for _, t in mine):
                recv_buf = torch.empty(biggest, dtype=torch.uint8)
            t_pass = time.monotonic() + pass_budget if pass_budget > 0 else None
            cut = False
            for size in p["sizes_bytes"]:
                ms = [[] for _ in mine]
                for rep in range(p["reps"]):
                    go, go_pass = self._go(torch, d, grp, t_end, t_pass if (rep or size != p["sizes_bytes"][0]) else None)
                    if not go:
                        for (s, t), m in zip(mine, ms):
                            if m:
                                entries.append({"pass": pi, "src": s, "dst": t, "bytes": size, "ms": m})
                        return entries, "before pass %d, %d bytes, repetition %d" % (pi, size, rep)
                    if not go_pass:
                        cut = True
                        break
                    t0 = time.perf_counter()
                    works = []
                    for s, t in mine:
                        if s == rank:
                            works.append(d.isend(send_buf[:size], t, group=grp))
                        else:
                            works.append(d.irecv(recv_buf[:size], s, group=grp))
                    for i, dt in enumerate(_wait_all(works, t0)):
                        ms[i].append(round(dt * 1e3, 4))
                for (s, t), m in zip(mine, ms):
                    if m:
                        entries.append({"pass": pi, "src": s, "dst": t, "bytes": size, "ms": m})
                if not cut and stop_ratio and len(ps) >= 2:
                    cut = self._proven_slow(torch, d, grp, ms, stop_ratio)
                if cut:
                    self.cut_passes += 1
                    break
        return entries, ""


def _wait_all(works, t0):
    """Seconds from t0 to each work's completion. gloo send/recv works have
    no future and is_completed() stays False until wait(), so a second
    transfer is waited for on its own thread."""
    if not works:
        return []
    if len(works) == 1:
        works[0].wait()
        return [time.perf_counter() - t0]
    done = [None] * len(works)
    errs = []

    def waiter(i):
        try:
            works[i].wait()
        except Exception as e:
            errs.append(e)
        done[i] = time.perf_counter() - t0

    ths = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(1, len(works))]
    for th in ths:
        th.start()
    waiter(0)
    for th in ths:
        th.join()
    if errs:
        raise errs[0]
    return done
