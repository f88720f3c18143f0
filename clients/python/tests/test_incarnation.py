"""The client side of incarnations (issue 16 item 1, the protocol in
docs/design/roles-and-runs.md): every process start registers with its
launch/process identity, ships with the incarnation the server answered,
survives restarts, resubmissions and conflicting re-sends without going
dark, and speaks to a server from before incarnations as before."""

import json
import logging
import os
import socket
import sys
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from laggard import config  # noqa: E402
from laggard import perf as perf_mod  # noqa: E402
from laggard import shipper as shipper_mod  # noqa: E402
from laggard import validation  # noqa: E402
from laggard.sinks import HTTPSink  # noqa: E402
from envutil import module_fixture  # noqa: E402
from fakeserver import SERVE_UNKNOWN_BEFORE_F968958, FakeServer  # noqa: E402

setUpModule, tearDownModule = module_fixture()

IDENTITY = {"launch", "process", "started_ns"}


def wait_for(pred, timeout=5.0):
    end = time.monotonic() + timeout
    while not pred() and time.monotonic() < end:
        time.sleep(0.01)
    return pred()


def timed_steps(perf, steps, ms):
    """Steps with exact stage times (ms of forward, on the explicit clock),
    so two runs of the same steps send different or equal values at will."""
    t = 1_000_000_000
    for s in steps:
        perf.begin_step(step=s, at=t)
        perf.begin_stage("forward", at=t)
        t += int(ms * 1e6)
        perf.end_step(at=t)


def vector_posts(srv):
    return [r for r in list(srv.requests) if r["path"].endswith("/vectors")]


class IdentityTest(unittest.TestCase):
    def test_launch_from_env(self):
        cases = [
            ({}, ""),
            ({"LAGGARD_INCARNATION": "launch-7", "TORCHELASTIC_RUN_ID": "r"}, "launch-7"),
            ({"TORCHELASTIC_RUN_ID": "r1", "TORCHELASTIC_RESTART_COUNT": "2"}, "te:r1:2"),
            ({"TORCHELASTIC_RUN_ID": "r1"}, "te:r1:0"),
            ({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "1"}, ""),  # every launch says none
            ({"SLURM_JOB_ID": "55", "SLURM_STEP_ID": "3", "SLURM_RESTART_COUNT": "1"}, "slurm:55.3:1"),
            ({"SLURM_JOB_ID": "55"}, "slurm:55:0"),
            ({"LAGGARD_INCARNATION": "x" * 300}, "x" * 128),
        ]
        for env, want in cases:
            with self.subTest(env=env):
                self.assertEqual(config.launch_from_env(env), want)

    def test_process_identity(self):
        proc, started = config.process_ident("h1")
        self.assertEqual(proc, "h1/%d/%d" % (os.getpid(), started))
        self.assertLessEqual(started, time.time_ns())
        self.assertGreater(started, time.time_ns() - 7 * 86400 * 10**9)  # a test run is younger than a week
        self.assertEqual(config.process_ident("h1"), (proc, started))  # read once
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a forked child is another process start
            try:
                os.write(w, config.process_ident("h1")[0].encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        child = os.read(r, 200).decode()
        os.close(r)
        os.close(w)
        self.assertTrue(child.startswith("h1/%d/" % pid), child)

    def test_env_incarnation_override(self):
        self.assertEqual(config.from_env({"LAGGARD_INCARNATION": "a"}), {"incarnation": "a"})
        self.assertEqual(config.from_env({"LAGGARD_INCARNATION": "a" * 200}), {})


class NewServerTest(unittest.TestCase):
    def setUp(self):
        # A job id of its own per test.
        self.job = "inc-" + self._testMethodName[5:40].replace("_", "-")
    def perf(self, srv, **kw):
        kw.setdefault("job", self.job)
        kw.setdefault("rank", 0)
        kw.setdefault("world_size", 1)
        kw.setdefault("flush_interval", 0.01)
        return laggard.Perf(server=srv.url, capture=False, **kw)

    def test_identity_sent_and_incarnation_on_every_batch(self):
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        p = self.perf(srv)
        timed_steps(p, range(5), 1)
        self.assertTrue(p.close(5))
        put, join = srv.requests[0], srv.requests[1]
        host = socket.gethostname()
        for r in (put, join):
            self.assertLessEqual(IDENTITY, set(r["body"]))
            self.assertEqual(r["body"]["launch"], "")
            self.assertEqual(r["body"]["process"], "%s/%d/%d" % (host, os.getpid(), r["body"]["started_ns"]))
        posts = vector_posts(srv)
        self.assertTrue(posts)
        self.assertTrue(all(r["body"].get("incarnation") == 0 for r in posts))
        self.assertEqual(p.stats()["incarnation"], 0)

    def test_batches_carry_only_what_the_server_takes(self):
        # `laggard serve` refuses any batch member but the items and
        # "incarnation" (400 unknown field), and so does the fake server.
        # Before: every batch carried "client" counters (a refused first
        # batch per route, re-sent without), and a clean close sent an
        # empty batch only to carry the final counters.
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        p = self.perf(srv, flush_interval=60)
        timed_steps(p, range(5), 1)
        self.assertTrue(p.close(5))
        self.assertEqual([(r["method"], r["path"], r["status"]) for r in srv.requests if r["status"] >= 400], [])
        posts = vector_posts(srv)
        self.assertEqual([sorted(r["body"]) for r in posts], [["incarnation", "vectors"]])
        self.assertEqual([v["step"] for v in posts[0]["body"]["vectors"]], list(range(5)))

    def test_local_counters_account_for_every_vector(self):
        # A slow first request and a tiny queue: some vectors are dropped.
        # stats() accounts for every vector (sent + dropped), and the
        # server acknowledged exactly the ones counted as sent.
        srv = FakeServer(lambda m, path, n: (200, {}, {"accepted": 0}, 0.3) if path.endswith("/vectors") and n == 0
                         else None, incarnations=True)
        self.addCleanup(srv.close)
        p = self.perf(srv, queue_size=8, batch_size=4)
        timed_steps(p, range(4), 1)
        self.assertTrue(wait_for(lambda: vector_posts(srv)))
        timed_steps(p, range(4, 60), 1)
        self.assertTrue(p.close(5))
        st = p.stats()
        self.assertGreater(st["dropped"], 0)
        self.assertEqual((st["sent"] + st["dropped"], st["refused"], st["queued"]), (60, 0, 0))
        self.assertEqual(sum(len(r["body"]["vectors"]) for r in vector_posts(srv) if r["status"] == 200), st["sent"])

    def test_restart_without_launcher_is_a_new_incarnation(self):
        # A second process start of the same rank (plain `python train.py`,
        # no launcher variables) re-sends steps 0-29 with other values:
        # kept apart as incarnation 1, nothing overwritten, no 409.
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        a = self.perf(srv, run_id="")
        timed_steps(a, range(30), 1)
        self.assertTrue(a.close(5))
        with mock.patch.object(config, "process_ident", return_value=("h/99999/1", 1)):
            b = self.perf(srv, run_id="")
            timed_steps(b, range(30), 2)
            self.assertTrue(b.close(5))
        self.assertEqual((a.stats()["incarnation"], b.stats()["incarnation"]), (0, 1))
        self.assertEqual((b.stats()["conflicts"], b.stats()["refused"], b.stats()["sent"]), (0, 0, 30))
        for inc, ms in ((0, 1.0), (1, 2.0)):
            cells = srv.incarnation_of(self.job, inc)["cells"]
            self.assertEqual(len(cells), 30)
            self.assertEqual(json.loads(cells[(0, 0, 0)])["durations_ms"][1], ms)

    def test_torchelastic_restart_and_resubmission_are_new_incarnations(self):
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        incs = []
        for env, run_id in (({"TORCHELASTIC_RUN_ID": "r", "TORCHELASTIC_RESTART_COUNT": "0"}, None),
                            ({"TORCHELASTIC_RUN_ID": "r", "TORCHELASTIC_RESTART_COUNT": "1"}, None),
                            ({}, "resubmitted")):
            with mock.patch.dict(os.environ, env):
                p = self.perf(srv, run_id=run_id)
                timed_steps(p, range(3), len(incs) + 1)
                self.assertTrue(p.close(5))
            st = p.stats()
            self.assertEqual((st["conflicts"], st["sent"]), (0, 3), st)
            incs.append(st["incarnation"])
        self.assertEqual(incs, [0, 1, 2])
        launches = [r["body"]["launch"] for r in srv.requests if r["method"] == "PUT"]
        self.assertEqual(launches, ["te:r:0", "te:r:1", ""])

    def test_rank_again_in_one_launch_is_a_restart(self):
        # docs/design/roles-and-runs.md rule 4: a process whose rank is
        # already bound to another process in the incarnation its launch id
        # names opens a new incarnation (a restart), never overwrites. The
        # job registration's answer names the launch's incarnation, the
        # rank join's the new one: the client keeps the join's.
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        got = []
        for proc, ms in (("h/1/1", 1), ("h/2/2", 2)):
            with mock.patch.dict(os.environ, {"LAGGARD_INCARNATION": "L1"}), \
                    mock.patch.object(config, "process_ident", return_value=(proc, 1)):
                p = self.perf(srv)
                timed_steps(p, range(3), ms)
                self.assertTrue(p.close(5))
            got.append((p.stats()["incarnation"], p.stats()["sent"], p.stats()["refused"]))
        self.assertEqual(got, [(0, 3, 0), (1, 3, 0)])
        self.assertEqual([r["body"].get("incarnation") for r in vector_posts(srv)], [0, 1])
        self.assertEqual(json.loads(srv.incarnation_of(self.job, 0)["cells"][(2, 0, 0)])["durations_ms"][1], 1.0)

    def test_conflicting_resend_drops_only_those_vectors(self):
        # Within one incarnation, a re-sent step with other values is
        # refused (409 naming the cell) and counted; the rest of the batch
        # ships, an identical re-send is idempotent, and nothing is logged
        # at ERROR or turned off.
        for list_conflicts in (True, False):
            self.job = "inc-resend-%s" % list_conflicts
            with self.subTest(list_conflicts=list_conflicts):
                srv = FakeServer(incarnations=True, list_conflicts=list_conflicts)
                self.addCleanup(srv.close)
                a = self.perf(srv, batch_size=64, flush_interval=60)
                timed_steps(a, range(10), 1)
                self.assertTrue(a.close(5))
                # The same process stream re-sending (as a retry would): a
                # second Perf of the job in one process is otherwise a new
                # incarnation (SecondStreamTest).
                with mock.patch.object(perf_mod, "_stream_ident", lambda job, proc: proc), \
                        self.assertNoLogs("laggard", logging.ERROR):  # a WARNING, once per process
                    b = self.perf(srv, batch_size=64, flush_interval=60)
                    timed_steps(b, [0, 1], 1)  # identical: idempotent
                    timed_steps(b, range(7, 12), 2)  # 7, 8, 9 conflict; 10, 11 are new
                    self.assertTrue(b.close(5))
                st = b.stats()
                self.assertEqual((st["refused"], st["sent"], st["dropped"]), (3, 4, 0), st)
                self.assertEqual(st["conflicts"], 1 if list_conflicts else 3)
                cells = srv.incarnation_of(self.job, 0)["cells"]
                self.assertEqual(sorted(k[0] for k in cells), list(range(12)))
                self.assertEqual(json.loads(cells[(8, 0, 0)])["durations_ms"][1], 1.0)  # never overwritten
                self.assertEqual(json.loads(cells[(11, 0, 0)])["durations_ms"][1], 2.0)

    def test_refusals_one_at_a_time_are_bounded(self):
        # A server that refuses one vector per answer, forever: a batch costs
        # at most _CELL_ROUNDS + 1 requests, then the rest of it is dropped.
        srv = FakeServer(lambda m, path, n: None if not path.endswith("/vectors") else
                         (409, {}, {"error": "conflict", "field": "vectors[0]"}, 0), incarnations=True)
        self.addCleanup(srv.close)
        p = self.perf(srv, batch_size=20, flush_interval=60)
        timed_steps(p, range(20), 1)
        self.assertTrue(p.close(5))
        rounds = shipper_mod._CELL_ROUNDS
        st = p.stats()
        self.assertEqual(len([r for r in vector_posts(srv) if r["body"]["vectors"]]), rounds + 1)
        self.assertEqual((st["refused"], st["dropped"], st["sent"]), (rounds, 20 - rounds, 0))

    def test_refused_rank_join_retried_and_recovers(self):
        # A real contract conflict on registration (the role group's stage
        # list): one ERROR naming the field and the fix, counted, tried
        # again with backoff while training goes on, shipping once a later
        # registration fits.
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        role = {"pp": 1}
        a = self.perf(srv, rank=0, world_size=2, role=role, schema=["pp.recv_wait"])
        timed_steps(a, [0], 1)
        self.assertTrue(a.close(5))
        b = self.perf(srv, rank=1, world_size=2, role=role, schema=["model.fwd_loss_cpu_wall"])
        worst = [0.0]

        def step():
            t = time.perf_counter()
            with b.step():
                with b.stage("forward"):
                    time.sleep(0.002)
            worst[0] = max(worst[0], time.perf_counter() - t)
            return b.stats()["registration_conflicts"] >= 2

        with self.assertLogs("laggard", logging.WARNING) as cm:
            self.assertTrue(wait_for(step, 5), b.stats())
            self.assertTrue(b.stats()["shipping"])
            with srv._lock:
                srv.jobs[self.job]["groups"]["pp1"] = dict(srv.jobs[self.job]["groups"]["pp1"],
                                                        stages=["model.fwd_loss_cpu_wall", "step.other_cpu_wall"])
            self.assertTrue(wait_for(lambda: step() is None or b.stats()["sent"] > 0, 10), b.stats())
            self.assertTrue(b.close(5))
        self.assertLess(worst[0], 0.5)
        errs = [r.getMessage() for r in cm.records if r.levelno >= logging.ERROR]
        self.assertEqual(len(errs), 1, cm.output)
        self.assertIn("field schema.stages", errs[0])
        self.assertIn("pp1", errs[0])
        self.assertIn("tried again with backoff", errs[0])
        self.assertTrue(any("registered after" in r.getMessage() for r in cm.records))


class OldServerTest(unittest.TestCase):
    def test_server_before_incarnations(self):
        # Its strict decoders refuse the identity fields: the client
        # registers again without them, once, quietly, and sends no
        # incarnation — everything ships as before.
        srv = FakeServer(old=True)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="old", rank=0, world_size=1, flush_interval=0.01, capture=False)
        with self.assertNoLogs("laggard", logging.WARNING):
            timed_steps(p, range(20), 1)
            self.assertTrue(p.close(5))
        st = p.stats()
        self.assertEqual((st["sent"], st["dropped"], st["errors"], st["incarnation"]), (20, 0, 0, None))
        refused = [r for r in srv.requests if r["status"] == 400]
        self.assertEqual([(r["method"], r["path"]) for r in refused], [("PUT", "/api/v1/jobs/old")])
        self.assertTrue(all(set(r["body"]) == {"vectors"} for r in vector_posts(srv)))
        joins = [r for r in srv.requests if r["path"].endswith("/ranks")]
        self.assertEqual(len(joins), 1)
        self.assertFalse(IDENTITY & set(joins[0]["body"]))

    def test_answer_without_incarnation_sends_none(self):
        srv = FakeServer()  # takes the identity, answers no incarnation
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="noinc", rank=0, world_size=1, flush_interval=0.01, capture=False)
        timed_steps(p, range(5), 1)
        self.assertTrue(p.close(5))
        self.assertTrue(all(set(r["body"]) == {"vectors"} for r in vector_posts(srv)))
        self.assertEqual(p.stats()["sent"], 5)

    def test_file_sink_header_has_no_identity(self):
        # `laggard analyze` reads the stage-matrix header strictly.
        import tempfile
        d = tempfile.mkdtemp()
        path = os.path.join(d, "f.jsonl")
        p = laggard.Perf(job="file", out=path, rank=0, world_size=1, flush_interval=0.01)
        timed_steps(p, range(3), 1)
        self.assertTrue(p.close(5))
        with open(path) as f:
            header = json.loads(f.readline())["job"]
            rows = [json.loads(x) for x in f]
        self.assertFalse(IDENTITY & set(header))
        self.assertFalse(any("incarnation" in r or "client" in r for r in rows))


def _record(seq):
    from laggard import collectives as c
    t = 1_700_000_000_000_000_000 + seq * 1000
    return [json.dumps("pg0-world"), seq, c.ALL_REDUCE, 400, 100, "float32", -1, -1, t, t + 500, t, t + 500, 0]


class CollectivesAndPollsTest(unittest.TestCase):
    def make(self, behaviour=None, **kw):
        from laggard import collectives as c
        srv = FakeServer(behaviour=behaviour, incarnations=True, **kw)
        self.addCleanup(srv.close)
        cap = c.Capture(queue_size=100)
        cap.rank = 0
        job = {"id": "cj", "name": "cj", "world_size": 2, "schema": laggard.default_schema(), "accumulation": 1,
               "labels": {}}
        rank = {"rank": 0, "host": "h", "local_rank": 0, "role": {"dp": 0, "tp": -1, "pp": -1, "ep": -1}}
        sh = shipper_mod.Shipper(HTTPSink(srv.url, "cj", timeout=1.0), job, rank, flush_interval=0.05,
                                 collectives=cap, identity={"launch": "", "process": "h/1/2", "started_ns": 2})
        return srv, cap, sh

    def test_collective_batches_carry_incarnation(self):
        srv, cap, sh = self.make()
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))  # registers the job first
        self.assertTrue(wait_for(lambda: sh.sent == 1))
        for i in range(5):
            cap._put(_record(i))
        self.assertTrue(sh.close(3))
        batches = srv.collective_batches()
        self.assertTrue(batches)
        self.assertTrue(all(sorted(b) == ["calls", "comms", "dropped", "incarnation"] and b["incarnation"] == 0
                            for b in batches))
        self.assertEqual([r["path"] for r in srv.requests if r["status"] >= 400], [])
        st = sh.stats()
        self.assertEqual((st["collectives_sent"], st["collectives_dropped"], st["collectives_refused"]), (5, 0, 0))

    def test_refused_call_dropped_alone(self):
        # 409 naming one call (a conflicting re-send): that call alone is
        # dropped and counted; the others ship at once; collectives stay on.
        def behaviour(method, path, n):
            if "/collectives" in path and n == 0:
                return (409, {}, {"error": "calls[1]: conflicts with a stored call", "field": "calls[1]"}, 0)
            return None
        srv, cap, sh = self.make(behaviour)
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(wait_for(lambda: sh.sent == 1))
        for i in range(3):
            cap._put(_record(i))
        self.assertTrue(wait_for(lambda: len(srv.calls()) == 2))
        for i in range(3, 5):
            cap._put(_record(i))
        self.assertTrue(sh.close(3))
        self.assertEqual([x["seq"] for x in srv.calls()], [0, 2, 3, 4])
        st = sh.stats()
        self.assertEqual((st["collectives_refused"], st["collectives_dropped"]), (1, 0))
        self.assertTrue(st["collectives_shipping"])

    def test_unnamed_409_on_collectives_does_not_stop_them(self):
        # Before: any 409 on a collectives batch stopped collectives for good.
        def behaviour(method, path, n):
            if "/collectives" in path and n == 0:
                return (409, {}, {"error": "conflict"}, 0)
            return None
        srv, cap, sh = self.make(behaviour)
        cap._put(_record(0))
        self.assertTrue(wait_for(lambda: sh.coll_drops == 1))
        for i in range(1, 3):
            cap._put(_record(i))
        self.assertTrue(wait_for(lambda: len(srv.calls()) == 2, 5))
        self.assertTrue(sh.stats()["collectives_shipping"])
        sh.close(3)

    def test_polls_and_results_carry_incarnation(self):
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        sink = HTTPSink(srv.url, "pj", timeout=2.0)
        sink.set_identity({"launch": "", "process": "h/1/2", "started_ns": 2})
        clone = sink.clone()  # made before registration (the capture uploader's)
        self.addCleanup(sink.close)
        self.addCleanup(clone.close)
        job = {"id": "pj", "name": "pj", "world_size": 1, "schema": laggard.default_schema()}
        self.assertEqual(sink.register(job, {"rank": 0, "host": "h", "local_rank": 0}), 0)
        self.assertIsNone(sink.poll_validation(0))
        sink.post_validation("v1", {"rank": 0})
        clone.poll_capture(0, 7)
        clone.post_capture_trace("c1", 0, None, 0, {"X-Laggard-Capture-Error": "profiler failed"})
        self.assertEqual(srv.query_incarnations, [("validation", 0), ("captures", 0), ("traces", 0)])
        self.assertEqual(srv.poll_steps, {("pj", 0): [7]})  # the KAIR start step rides beside it
        self.assertTrue(any(r["path"].endswith("/results?incarnation=0") for r in srv.requests))

    def test_validator_learns_the_incarnation_of_its_plans(self):
        # laggard.validation reads Validator.incarnation (set by the shipper
        # before each plan it offers): the incarnation the plan was polled
        # with.
        self.assertIsNone(validation.Validator({"id": "cj"}).incarnation)  # before any plan

        class StubValidator:
            rank, pollable, _outbox, incarnation = 0, True, (), "unset"

            def __init__(self):
                self.seen = []

            def offer(self, plan):
                self.seen.append((plan["id"], self.incarnation))

            def take_results(self):
                return []
        srv, cap, sh = self.make()
        srv.plans["cj"] = {"id": "v-1"}
        v = StubValidator()
        sh.attach(validator=v)
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(wait_for(lambda: v.seen))
        sh.close(3)
        self.assertEqual(v.seen[0], ("v-1", 0))
        self.assertIn(("validation", 0), srv.query_incarnations)

    def test_polls_without_incarnation_for_a_server_without_them(self):
        srv = FakeServer()  # answers no incarnation
        self.addCleanup(srv.close)
        sink = HTTPSink(srv.url, "pn", timeout=2.0)
        sink.set_identity({"launch": "", "process": "h/1/2", "started_ns": 2})
        self.addCleanup(sink.close)
        job = {"id": "pn", "name": "pn", "world_size": 1, "schema": laggard.default_schema()}
        self.assertIsNone(sink.register(job, {"rank": 0, "host": "h", "local_rank": 0}))
        self.assertIsNone(sink.incarnation)
        sink.poll_capture(0, 3)
        sink.post_capture_trace("c1", 0, None, 0, {"X-Laggard-Capture-Error": "profiler failed"})
        sink.poll_validation(0)
        self.assertEqual(srv.query_incarnations, [])
        self.assertFalse(any("incarnation" in r["path"] for r in srv.requests))

    def test_collectives_route_without_incarnation_keeps_it_elsewhere(self):
        # A `laggard serve` that keeps incarnations but whose collectives
        # decoder does not know the member (400 "incarnation: unknown
        # field"; fe9f1ab..f968958):
        # the batch goes again without it — not dropped — and vectors and
        # polls keep theirs. Before: the first such 400 cleared the
        # process's incarnation, so its vectors went to the newest one.
        srv, cap, sh = self.make(unknown=SERVE_UNKNOWN_BEFORE_F968958)
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(wait_for(lambda: sh.sent == 1))
        for i in range(3):
            cap._put(_record(i))
        self.assertTrue(wait_for(lambda: len(srv.calls()) == 3))
        sh.offer((1, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(sh.close(3))
        st = sh.stats()
        self.assertEqual((st["sent"], st["dropped"], st["collectives_dropped"], st["incarnation"]), (2, 0, 0, 0))
        self.assertTrue(all("incarnation" not in b for b in srv.collective_batches()))
        ok = [r["body"] for r in vector_posts(srv) if r["status"] == 200]
        self.assertEqual([v["step"] for b in ok for v in b["vectors"]], [0, 1])
        self.assertTrue(all(sorted(b) == ["incarnation", "vectors"] and b["incarnation"] == 0 for b in ok))
        clone = sh._sink.clone()
        self.addCleanup(clone.close)
        clone.poll_capture(0, 1)
        self.assertEqual(srv.query_incarnations, [("captures", 0)])

    def test_incarnation_the_server_lost_registers_again(self):
        # A 400 naming "incarnation" that is not "unknown field" (the job
        # was deleted and registered anew meanwhile): that batch is dropped
        # and counted and the process registers again — never re-sent
        # without the incarnation into whatever launch is newest.
        def behaviour(method, path, n):
            if path.endswith("/vectors") and n == 0:
                return (400, {}, {"error": "incarnation: job \"cj\" has no incarnation 0 (its newest is 0)",
                                  "field": "incarnation"}, 0)
            return None
        srv, cap, sh = self.make(behaviour)
        sh.offer((0, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(wait_for(lambda: sh.stats()["dropped"] == 1))
        sh.offer((1, 0, 0, [1.0] * 6, 6.0, 0, None, 0))
        self.assertTrue(sh.close(3))
        self.assertEqual((sh.stats()["sent"], sh.stats()["dropped"]), (1, 1))
        self.assertEqual(len([r for r in srv.requests if r["method"] == "PUT"]), 2)
        self.assertTrue(all("incarnation" in r["body"] for r in vector_posts(srv)))


class LargeBatchBodyTest(unittest.TestCase):
    def test_large_batch_posted_in_pieces(self):
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        sink = HTTPSink(srv.url, "big", timeout=5.0)
        self.addCleanup(sink.close)
        sink.register({"id": "big", "world_size": 1, "schema": laggard.default_schema()}, {"rank": 0})
        texts = [shipper_mod.encode_vector((i, 0, 0, [0.5] * 6, 3.0, 0, None, 0), "20c8b074ceccc24f")
                 for i in range(1000)]
        pauses = []
        sink.send_encoded(texts, pause=lambda: pauses.append(1))
        self.assertEqual(len(pauses), 3)  # 1000 vectors: 4 pieces of <= 256, a pause between each
        self.assertEqual([v["step"] for v in srv.vectors()], list(range(1000)))
        self.assertEqual(sorted(vector_posts(srv)[-1]["body"]), ["incarnation", "vectors"])


if __name__ == "__main__":
    unittest.main()


class SecondStreamTest(unittest.TestCase):
    """A second telemetry stream for the same job in one process (a notebook
    re-running laggard.init, an HPO loop, trainer.fit() twice) is another
    process to the server: it opens a new incarnation instead of staying in
    the first, where every re-sent step would be a conflicting re-send."""

    def test_second_stream_is_a_new_incarnation(self):
        srv = FakeServer(incarnations=True)
        self.addCleanup(srv.close)
        job = "inc-second-stream"
        procs, incs = [], []
        for run in range(2):
            p = laggard.Perf(server=srv.url, capture=False, job=job, rank=0, world_size=1, flush_interval=0.01)
            timed_steps(p, range(5), 1)  # both runs count from step 0
            self.assertTrue(p.close(5))
            incs.append(p.stats()["incarnation"])
        joins = [r for r in srv.requests if r["path"].endswith("/ranks")]
        procs = [r["body"]["process"] for r in joins]
        self.assertEqual(len(set(procs)), 2, procs)
        self.assertTrue(procs[1].startswith(procs[0] + "/"), procs)
        self.assertEqual(incs, [0, 1])
        refused = [r for r in srv.requests if r.get("status") == 409]
        self.assertEqual(refused, [])
