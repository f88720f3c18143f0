"""Cooperative validation (laggard.validation, contracts §3): plan checks,
and a real 3-rank gloo job against the fake server that serves plans one
after another — a refused plan, a full run (GEMM + P2P passes), a run whose
GEMM fails (error string, passes still run), and a plan one rank learns of
too late (it posts missed, the others skip after the agreement timeout).
Skipped without torch (run with /usr/bin/python3)."""

import importlib.util
import os
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

from laggard import validation  # noqa: E402
from laggard.validation import PlanError, Validator, parse_plan  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None

from envutil import module_fixture  # noqa: E402

setUpModule, tearDownModule = module_fixture()

PLAN = {"id": "v-3", "at_step": 1234, "deadline_ms": 30000,
        "gemm": {"ranks": [0, 1, 2, 3], "n": 1024, "dtype": "float32", "reps": 3},
        "p2p": {"sizes_bytes": [16777216, 33554432, 67108864], "reps": 3,
                "passes": [[{"src": 0, "dst": 1}, {"src": 2, "dst": 3}], [{"src": 1, "dst": 2}, {"src": 3, "dst": 0}]]}}


class ParsePlanTest(unittest.TestCase):
    def test_contract_example(self):
        p = parse_plan(PLAN, 4)
        self.assertEqual((p["id"], p["at_step"], p["deadline_ms"]), ("v-3", 1234, 30000))
        self.assertEqual(p["gemm"], {"ranks": [0, 1, 2, 3], "n": 1024, "dtype": "float32", "reps": 3})
        self.assertEqual(p["p2p"]["passes"], [[(0, 1), (2, 3)], [(1, 2), (3, 0)]])

    def test_bounds_accepted(self):
        import copy
        p = copy.deepcopy(PLAN)
        p["gemm"]["n"] = 4096
        p["p2p"]["sizes_bytes"] = [64 << 20]
        p["p2p"]["passes"] = [[{"src": 0, "dst": 1}, {"src": 1, "dst": 2}, {"src": 2, "dst": 0}]]  # a ring pass
        q = parse_plan(p, 4)
        self.assertEqual((q["gemm"]["n"], q["p2p"]["sizes_bytes"]), (4096, [64 << 20]))

    def test_optional_parts(self):
        p = parse_plan({"id": "x", "at_step": 0, "deadline_ms": 1}, 1)
        self.assertEqual((p["gemm"], p["p2p"], p["budget_ms"]), (None, None, 0))
        q = parse_plan(PLAN, 4)["p2p"]
        self.assertEqual((q["pass_budget_ms"], q["stop_ratio"]), (0, 0.0))

    def test_budget(self):
        import copy
        p = copy.deepcopy(PLAN)
        p["budget_ms"] = 20000
        p["p2p"]["pass_budget_ms"], p["p2p"]["stop_ratio"] = 4000, 4
        q = parse_plan(p, 4)
        self.assertEqual((q["budget_ms"], q["p2p"]["pass_budget_ms"], q["p2p"]["stop_ratio"]), (20000, 4000, 4.0))

    def test_refusals_name_the_field(self):
        def mod(path, value):
            import copy
            p = copy.deepcopy(PLAN)
            o = p
            for k in path[:-1]:
                o = o[k]
            if value is KeyError:
                del o[path[-1]]
            else:
                o[path[-1]] = value
            return p

        cases = [
            (mod(["id"], ""), "id"),
            (mod(["id"], "a b"), "id"),
            (mod(["at_step"], -1), "at_step"),
            (mod(["at_step"], True), "at_step"),
            (mod(["deadline_ms"], KeyError), "deadline_ms"),
            (mod(["gemm", "n"], 10 ** 6), "n"),
            (mod(["gemm", "n"], 4097), "n"),  # R4: n <= 4096
            (mod(["p2p", "sizes_bytes"], [16, (64 << 20) + 1]), "p2p.sizes_bytes[1]"),  # R4: <= 64 MiB
            (mod(["p2p", "passes"], [[{"src": 0, "dst": 1}, {"src": 2, "dst": 1}]]), "p2p.passes[0][1].dst"),
            (mod(["p2p", "passes"], [[{"src": 0, "dst": 1}, {"src": 0, "dst": 2}]]), "p2p.passes[0][1].src"),
            (mod(["gemm", "dtype"], "int8"), "gemm.dtype"),
            (mod(["gemm", "ranks"], [0, 4]), "gemm.ranks[1]"),
            (mod(["p2p", "sizes_bytes"], [1 << 40]), "p2p.sizes_bytes[0]"),
            (mod(["p2p", "sizes_bytes"], []), "p2p.sizes_bytes"),
            (mod(["p2p", "reps"], 0), "reps"),
            (mod(["p2p", "passes"], [[{"src": 1, "dst": 1}]]), "p2p.passes[0][0]"),
            (mod(["p2p", "passes"], [[{"src": 1}]]), "p2p.passes[0][0].dst"),
            (mod(["p2p", "passes"], [[[0, 1]]]), "p2p.passes[0][0]"),
            (mod(["budget_ms"], -1), "budget_ms"),
            (mod(["p2p", "pass_budget_ms"], "1s"), "pass_budget_ms"),
            (mod(["p2p", "stop_ratio"], 0.5), "p2p.stop_ratio"),
            (mod(["p2p", "stop_ratio"], True), "p2p.stop_ratio"),
            ([], "plan"),
        ]
        for plan, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(PlanError) as cm:
                    parse_plan(plan, 4)
                self.assertTrue(str(cm.exception).startswith(field), str(cm.exception))


class FakeStore:
    """torch 1.13 c10d store semantics for add and compare_set, counting
    operations."""

    def __init__(self):
        self.d = {}
        self.ops = 0
        self.lock = threading.Lock()

    def add(self, k, n):
        with self.lock:
            self.ops += 1
            v = int(self.d.get(k, b"0")) + n
            self.d[k] = str(v).encode()
            return v

    def compare_set(self, k, expected, desired):
        with self.lock:
            self.ops += 1
            cur = self.d.get(k)
            if cur is None:
                if expected == "":
                    self.d[k] = desired.encode()
                    return desired.encode()
                return expected.encode()
            if cur == expected.encode():
                self.d[k] = desired.encode()
                return desired.encode()
            return cur


def _validator(store, rank, world, limit=10.0):
    v = Validator("job", agree_timeout_s=limit)
    v.rank, v.world, v._store, v.ready = rank, world, store, True
    return v


class AgreementTest(unittest.TestCase):
    """R5/R6 with an in-memory store: who decides, how fast a rank that
    cannot take part releases the others, and how often waiters poll."""

    PLAN = {"id": "v-9", "at_step": 5, "deadline_ms": 20000, "gemm": None, "p2p": None}

    def agree_in_thread(self, v, left=20.0):
        out = {}

        def go():
            t0 = time.monotonic()
            out["verdict"] = v._agree(self.PLAN, left)
            out["s"] = time.monotonic() - t0
        th = threading.Thread(target=go)
        th.start()
        return th, out

    def test_last_arrival_decides_run(self):
        st = FakeStore()
        a, b = _validator(st, 0, 2), _validator(st, 1, 2)
        th, out = self.agree_in_thread(a)
        time.sleep(0.05)
        self.assertEqual(b._agree(self.PLAN, 20.0), ("run", ""))
        th.join(5)
        self.assertEqual(out["verdict"], ("run", ""))

    def test_unable_rank_releases_waiters_at_once(self):
        st = FakeStore()
        waiters = [self.agree_in_thread(_validator(st, r, 3)) for r in (0, 1)]
        time.sleep(0.1)
        broken = _validator(st, 2, 3)
        broken.broken = "final barrier: RuntimeError: timed out"
        res = broken.run(self.PLAN)  # never reaches torch: declines first
        self.assertTrue(res["error"].startswith("unable: validation group unusable"), res)
        self.assertEqual(broken.stats()["unable"], 1)
        for th, out in waiters:
            th.join(5)
            self.assertEqual(out["verdict"][0], "skip")
            self.assertIn("rank 2 unable", out["verdict"][1])
            self.assertLess(out["s"], 1.5)  # not the 10 s agreement limit

    def test_failed_setup_declines_offered_plans(self):
        st = FakeStore()
        v = Validator("job")
        v.rank, v.world, v._store = 1, 3, st
        v.setup_error = "setup: RuntimeError: no gloo"
        self.assertTrue(v.pollable)
        plan = dict(self.PLAN, p2p={"sizes_bytes": [8], "reps": 1, "passes": [[{"src": 0, "dst": 1}]]})
        self.assertIsNotNone(v.offer(plan))
        (vid, body), = v.take_results()
        self.assertEqual(vid, "v-9")
        self.assertIn("unable: validation setup failed: setup: RuntimeError", body["error"])
        self.assertIsNone(v.offer(plan))  # once per plan
        waiter = _validator(st, 0, 3)
        self.assertEqual(waiter._agree(self.PLAN, 20.0)[0], "skip")
        v2 = Validator("job")
        v2.setup_error = "x"  # no store: nothing to tell anyone, so no polling
        self.assertFalse(v2.pollable)

    def test_missed_rank_releases_waiters(self):
        st = FakeStore()
        th, out = self.agree_in_thread(_validator(st, 0, 2))
        time.sleep(0.05)
        late = _validator(st, 1, 2)
        late.last_done = 10
        late.offer(dict(self.PLAN, id="v-9"))
        th.join(5)
        self.assertEqual(out["verdict"], ("skip", "rank 1 missed the plan"))
        self.assertTrue(late.take_results()[0][1]["missed"])

    def test_waiting_backs_off(self):
        # R6: alone for 0.6 s, a rank polls with a backoff from 1 ms to 50
        # ms (at a fixed 2 ms it made ~300 reads per waiting rank here).
        st = FakeStore()
        v = _validator(st, 0, 2, limit=0.6)
        t0 = time.monotonic()
        self.assertEqual(v._agree(self.PLAN, 20.0), ("skip", "only 1 of 2 ranks arrived within 0.6 s"))
        self.assertGreaterEqual(time.monotonic() - t0, 0.6)
        self.assertLess(st.ops, 30, st.ops)

    def test_agreement_bounded_by_deadline(self):
        st = FakeStore()
        v = _validator(st, 0, 2, limit=None)  # default: at least 5 s ...
        t0 = time.monotonic()
        verdict = v._agree(dict(self.PLAN, deadline_ms=300), 0.3)  # ... but never past the deadline
        self.assertEqual(verdict[0], "skip")
        self.assertLess(time.monotonic() - t0, 1.5)


class _FakeWork:
    def __init__(self, s):
        self.s = s

    def wait(self):
        time.sleep(self.s)


class _FakeDist:
    """One process standing for every rank: all_reduce is the identity (the
    MAX over one rank), and a transfer takes what the link's delay says."""

    class ReduceOp:
        MAX = "max"

    def __init__(self, delay):
        self.delay = delay  # (src, dst) -> seconds
        self.sent = []

    def all_reduce(self, t, op=None, group=None):
        pass

    def isend(self, buf, dst, group=None):
        self.sent.append((0, dst, len(buf)))
        return _FakeWork(self.delay.get((0, dst), 0.001))

    def irecv(self, buf, src, group=None):
        self.sent.append((src, 0, len(buf)))
        return _FakeWork(self.delay.get((src, 0), 0.001))


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class PassBudgetTest(unittest.TestCase):
    """Issue 16: one throttled link paused training for ~40 s. A pass stops
    once a link in it is proven slow (after the size that proves it) or
    once it has used its budget; the first repetition of a pass always runs."""

    def p2p(self, **kw):
        p = {"sizes_bytes": [1 << 10, 2 << 10, 4 << 10], "reps": 3,
             "passes": [[(0, 1), (2, 0)], [(1, 2)], [(0, 2)]], "pass_budget_ms": 0, "stop_ratio": 0.0}
        p.update(kw)
        return p

    def run_p2p(self, p, delay):
        import torch
        v = _validator(FakeStore(), 0, 3)
        d = _FakeDist(delay)
        entries, late = v._p2p(torch, d, None, p, time.monotonic() + 60)
        self.assertEqual(late, "")
        return v, entries

    def test_proven_slow_link_stops_its_pass(self):
        v, entries = self.run_p2p(self.p2p(stop_ratio=4.0), {(2, 0): 0.03})
        sizes = {(e["pass"], e["src"], e["dst"]): [] for e in entries}
        for e in entries:
            sizes[(e["pass"], e["src"], e["dst"])].append(e["bytes"])
        self.assertEqual(sizes[(0, 2, 0)], [1 << 10])  # proven slow on the first size: larger ones skipped
        self.assertEqual(sizes[(0, 0, 1)], [1 << 10])  # its pass-mate stops with it (every rank together)
        self.assertEqual(sizes[(2, 0, 2)], [1 << 10, 2 << 10, 4 << 10])  # other passes run in full
        self.assertEqual(v.cut_passes, 1)
        # without the ratio, all sizes run
        v, entries = self.run_p2p(self.p2p(), {(2, 0): 0.03})
        self.assertEqual(len([e for e in entries if e["pass"] == 0]), 6)
        self.assertEqual(v.cut_passes, 0)

    def test_pass_budget(self):
        v, entries = self.run_p2p(self.p2p(pass_budget_ms=50), {(2, 0): 0.03, (0, 1): 0.03, (0, 2): 0.03})
        # 30 ms a repetition, 50 ms a pass: one or two repetitions (the
        # first always runs), then the pass stops before its next size
        for e in entries:
            self.assertEqual(e["bytes"], 1 << 10, e)
            self.assertIn(len(e["ms"]), (1, 2), e)
        self.assertEqual(v.cut_passes, 2)


class Scheduler:
    """The fake server's side: serves each plan in turn once every rank has
    posted the previous one, with at_step a few steps past the newest step
    the server has seen (as the real controller does). The margin covers
    the vector flush (0.2 s) plus a poll period (0.2 s) of ~30 ms steps with
    room to spare; 8 was too few on an idle machine (every rank missed). The 'late' plan is
    served to rank 2 only after ranks 0 and 1 posted theirs."""

    def __init__(self, srv, job, world, plans, stop_file, margin=25):
        self.srv, self.job, self.world = srv, job, world
        self.plans = plans
        self.stop_file = stop_file
        self.margin = margin
        self.at = {}
        self.lock = threading.Lock()

    def posted(self, vid):
        return {b["rank"] for b in self.srv.results.get((self.job, vid), [])}

    def __call__(self, rank, n):
        with self.lock:
            for i, (plan, late_rank) in enumerate(self.plans):
                if len(self.posted(plan["id"])) < self.world:
                    break
            else:
                open(self.stop_file, "w").close()
                return None
            if rank in self.posted(plan["id"]):
                return None
            if late_rank == rank and not {r for r in range(self.world) if r != rank} <= self.posted(plan["id"]):
                return None
            if plan["id"] not in self.at:
                steps = [v["step"] for v in self.srv.vectors()] or [0]
                self.at[plan["id"]] = max(steps) + self.margin
            return dict(plan, at_step=self.at[plan["id"]])


@unittest.skipUnless(HAVE_TORCH, "needs torch (run with /usr/bin/python3)")
class ValidationJobTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from fakeserver import FakeServer
        from test_collectives import run_job
        cls.world = 3
        cls.job = "val-job"
        cls.srv = FakeServer()
        d = tempfile.mkdtemp()
        passes = [[{"src": 0, "dst": 1}, {"src": 1, "dst": 2}], [{"src": 2, "dst": 0}]]
        p2p = {"sizes_bytes": [1024, 262144], "reps": 2, "passes": passes}
        cls.plans = [
            ({"id": "v-bad", "at_step": 0, "deadline_ms": 20000, "p2p": {"sizes_bytes": [8], "reps": 1,
                                                                           "passes": [[{"src": 0, "dst": 0}]]}}, None),
            ({"id": "v-1", "deadline_ms": 20000, "gemm": {"ranks": [0, 1, 2], "n": 64, "dtype": "float32", "reps": 3},
              "p2p": p2p}, None),
            ({"id": "v-2", "deadline_ms": 20000, "gemm": {"ranks": [1], "n": 32, "dtype": "float16", "reps": 2},
              "p2p": p2p}, None),
            # R4: far more work than 300 ms allows (16 ring passes x 8
            # sizes up to 8 MiB x 20 reps): every rank stops at the same
            # repetition with a partial result.
            ({"id": "v-deadline", "deadline_ms": 300,
              "gemm": {"ranks": [0, 1, 2], "n": 64, "dtype": "float32", "reps": 20},
              "p2p": {"sizes_bytes": [(i + 1) << 20 for i in range(8)], "reps": 20,
                      "passes": [[{"src": 0, "dst": 1}, {"src": 1, "dst": 2}, {"src": 2, "dst": 0}]] * 16}}, None),
            # R5: rank 2 cannot take part (the worker makes it so); the
            # others skip at once, told by its mark, not by the timeout.
            ({"id": "v-unable", "deadline_ms": 20000,
              "gemm": {"ranks": [0], "n": 16, "dtype": "float32", "reps": 1}}, None),
            ({"id": "v-late", "deadline_ms": 20000, "gemm": {"ranks": [0], "n": 16, "dtype": "float32", "reps": 1}},
             2),
            # Issue 16: a 1 ms pass budget: every pass stops after its first
            # repetition, on every rank at the same point, and no error.
            ({"id": "v-budget", "deadline_ms": 20000, "budget_ms": 10000,
              "p2p": {"sizes_bytes": [1 << 20, 2 << 20, 4 << 20], "reps": 5, "pass_budget_ms": 1, "passes": passes}}, None),
        ]
        stop = os.path.join(d, "stop")
        cls.sched = Scheduler(cls.srv, cls.job, cls.world, cls.plans, stop)
        cls.srv.plans[cls.job] = cls.sched
        cls.out = run_job("validation", cls.world, cls.srv.url, cls.job, timeout=55,
                          env={"LAGGARD_TEST_STOP": stop, "LAGGARD_TEST_UNABLE": "2:v-unable"})

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def results(self, vid):
        rs = {b["rank"]: b for b in self.srv.results.get((self.job, vid), [])}
        self.assertEqual(sorted(rs), list(range(self.world)), vid)
        return rs

    def test_all_plans_answered_by_every_rank(self):
        for plan, _ in self.plans:
            self.results(plan["id"])
        for r in self.out.values():
            self.assertTrue(r["validation"]["ready"])

    def test_refused_plan(self):
        for b in self.results("v-bad").values():
            self.assertFalse(b["missed"])
            self.assertIn("plan refused: p2p.passes[0][0]", b["error"])

    def test_full_run_structure(self):
        rs = self.results("v-1")
        for r, b in rs.items():
            self.assertEqual(b["error"], "", b)
            self.assertFalse(b["missed"])
            self.assertEqual(len(b["gemm_ms"]), 3)
            self.assertTrue(all(x > 0 for x in b["gemm_ms"]))
            want = sorted((pi, s, d, size) for pi, ps in enumerate([[(0, 1), (1, 2)], [(2, 0)]]) for s, d in ps
                          for size in (1024, 262144) if r in (s, d))
            got = sorted((e["pass"], e["src"], e["dst"], e["bytes"]) for e in b["p2p"])
            self.assertEqual(got, want)
            for e in b["p2p"]:
                self.assertEqual(len(e["ms"]), 2)
                self.assertTrue(all(x > 0 for x in e["ms"]))

    def test_gemm_error_keeps_passes(self):
        rs = self.results("v-2")
        self.assertIn("gemm: RuntimeError", rs[1]["error"])
        self.assertEqual((rs[0]["error"], rs[2]["error"]), ("", ""))
        self.assertEqual((rs[0]["gemm_ms"], rs[2]["gemm_ms"]), ([], []))
        self.assertTrue(all(len(b["p2p"]) == 4 if r == 1 else len(b["p2p"]) for r, b in rs.items()))

    def test_deadline_stops_every_rank_at_the_same_point(self):
        rs = self.results("v-deadline")
        links = {}
        for r, b in rs.items():
            self.assertTrue(b["error"].startswith("deadline: 300 ms passed"), b["error"])
            self.assertLess(len(b["p2p"]), 16 * 8 * 2)  # partial
            for e in b["p2p"]:
                links.setdefault((e["pass"], e["src"], e["dst"], e["bytes"]), {})[r] = len(e["ms"])
        self.assertTrue(links)
        for k, per in links.items():  # src and dst measured the same repetitions
            self.assertEqual(len(set(per.values())), 1, (k, per))
        for r in self.out.values():
            self.assertGreaterEqual(r["validation"]["deadline"], 1)

    def test_pass_budget_stops_every_rank_together(self):
        rs = self.results("v-budget")
        for r, b in rs.items():
            self.assertEqual(b["error"], "", b)
            self.assertTrue(b["p2p"])
            for e in b["p2p"]:
                self.assertEqual((e["bytes"], len(e["ms"])), (1 << 20, 1), e)
        for r in self.out.values():
            self.assertGreaterEqual(r["validation"]["cut_passes"], 2)

    def test_results_carry_the_pause(self):
        for vid in ("v-1", "v-deadline", "v-budget"):
            for b in self.results(vid).values():
                self.assertLess(b["paused_from_ns"], b["paused_to_ns"], (vid, b))
                self.assertLess(b["paused_to_ns"] - b["paused_from_ns"], 30e9)
        for b in self.results("v-late").values():
            if b["missed"]:
                self.assertNotIn("paused_from_ns", b)

    def test_unable_rank_releases_the_others(self):
        rs = self.results("v-unable")
        self.assertTrue(rs[2]["error"].startswith("unable: test: cannot take part"), rs[2])
        for r in (0, 1):
            self.assertIn("skipped: rank 2 unable", rs[r]["error"])

    def test_late_rank_posts_missed_others_skip(self):
        rs = self.results("v-late")
        self.assertTrue(rs[2]["missed"])
        for r in (0, 1):
            self.assertFalse(rs[r]["missed"])
            self.assertIn("skipped", rs[r]["error"])
            self.assertEqual(rs[r]["gemm_ms"], [])
        self.assertEqual(self.out[2]["validation"]["missed"], 1)

    def test_training_continued(self):
        steps = {r["steps"] for r in self.out.values()}
        self.assertEqual(len(steps), 1)
        for r in self.out.values():
            self.assertEqual(r["validation"]["broken"], "")
            self.assertTrue(r["restored"])


if __name__ == "__main__":
    unittest.main()
