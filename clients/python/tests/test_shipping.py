"""Background shipping against a local fake server: the HTTP contract,
drops counted (never raised) when the server is down, failing, slow or
saturated, and the stage-matrix file sink."""

import json
import logging
import os
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from fakeserver import FakeServer, free_port  # noqa: E402

def setUpModule():
    logging.getLogger("laggard").setLevel(logging.CRITICAL)  # expected failures


VECTOR_KEYS = {"step", "rank", "micro", "durations_ms", "wall_ms", "data_lead", "probes", "dropped", "nested",
               "order_hash"}
JOB_KEYS = {"id", "name", "world_size", "schema", "accumulation", "labels"}
DEFAULT_ORDER_HASH = "20c8b074ceccc24f"  # Go: stagevec.DefaultSchema().OrderHash()


def run_steps(perf, n, sleep_s=0.0):
    """Runs n instrumented steps; returns the slowest step's wall seconds."""
    worst = 0.0
    for _ in range(n):
        t = time.perf_counter()
        with perf.step():
            with perf.stage("data.next_wait"):
                if sleep_s:
                    time.sleep(sleep_s)
            with perf.stage("model.fwd_loss_cpu_wall"):
                pass
            with perf.stage("model.backward_cpu_wall"):
                pass
        worst = max(worst, time.perf_counter() - t)
    return worst


class HTTPContractTest(unittest.TestCase):
    def test_register_then_vectors_match_contract(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="job-a", rank=2, world_size=4, flush_interval=0.05,
                         labels={"k": "v"})
        run_steps(p, 10)
        self.assertTrue(p.close(5))
        st = p.stats()
        self.assertEqual((st["sent"], st["dropped"]), (10, 0))
        first, second = srv.requests[0], srv.requests[1]
        self.assertEqual((first["method"], first["path"]), ("PUT", "/api/v1/jobs/job-a"))
        self.assertEqual(set(first["body"]), JOB_KEYS)
        self.assertEqual(first["body"]["world_size"], 4)
        self.assertEqual(first["body"]["schema"], laggard.default_schema())
        self.assertEqual((second["method"], second["path"]), ("POST", "/api/v1/jobs/job-a/ranks"))
        self.assertEqual(set(second["body"]), {"rank", "host", "local_rank", "role", "schema"})
        self.assertEqual(second["body"]["schema"], laggard.default_schema())
        self.assertEqual(set(second["body"]["role"]), {"dp", "tp", "pp", "ep"})
        vec_reqs = [r for r in srv.requests if r["path"] == "/api/v1/jobs/job-a/vectors"]
        self.assertTrue(vec_reqs)
        self.assertTrue(all(r["method"] == "POST" and r["content_type"] == "application/json" for r in vec_reqs))
        vs = srv.vectors()
        self.assertEqual([v["step"] for v in vs], list(range(10)))
        for v in vs:
            self.assertLessEqual(set(v), VECTOR_KEYS)
            self.assertEqual(v["rank"], 2)
            self.assertEqual(v["order_hash"], DEFAULT_ORDER_HASH)
            self.assertEqual(len(v["durations_ms"]), len(laggard.DEFAULT_STAGES))
            self.assertTrue(all(isinstance(d, float) and d >= 0 for d in v["durations_ms"]))
            self.assertGreaterEqual(v["wall_ms"] + 1e-6, sum(v["durations_ms"][:-1]))

    def test_batches_by_size(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="job-b", rank=0, world_size=1, batch_size=4, flush_interval=60)
        run_steps(p, 8)
        deadline = time.time() + 5
        while len(srv.vectors()) < 8 and time.time() < deadline:
            time.sleep(0.01)  # size-triggered batches ship long before the 60 s timer
        sizes = [len(r["body"]["vectors"]) for r in srv.requests if r["path"].endswith("/vectors")]
        self.assertEqual(sizes, [4, 4])
        p.close(5)


class FailureTest(unittest.TestCase):
    def test_server_down_counts_drops_never_raises(self):
        p = laggard.Perf(server="http://127.0.0.1:%d" % free_port(), job="down", rank=0, world_size=1,
                         flush_interval=0.01, timeout=0.2)
        run_steps(p, 50)
        p.close(5)
        st = p.stats()
        self.assertEqual(st["sent"], 0)
        self.assertEqual(st["dropped"], 50)
        self.assertGreaterEqual(st["errors"], 1)
        self.assertIn("Connection refused", st["last_error"])

    def test_failed_post_reported_in_next_vector(self):
        def behaviour(method, path, n):
            if path.endswith("/vectors") and n == 0:
                return (500, {}, {"error": "disk"}, 0)
            return None

        srv = FakeServer(behaviour)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="flaky", rank=0, world_size=1, batch_size=3, flush_interval=60)
        run_steps(p, 6)
        p.close(5)
        accepted = srv.vectors()
        self.assertEqual([v["step"] for v in accepted], [3, 4, 5])
        self.assertEqual(accepted[0]["dropped"], 3)
        self.assertNotIn("dropped", accepted[1])
        st = p.stats()
        self.assertEqual((st["sent"], st["dropped"], st["errors"]), (3, 3, 1))

    def test_429_backpressure_drops_and_counts(self):
        def behaviour(method, path, n):
            if path.endswith("/vectors") and n == 0:
                return (429, {"Retry-After": "0.2"}, {"error": "queue full"}, 0)
            return None

        srv = FakeServer(behaviour)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="busy", rank=0, world_size=1, batch_size=2, flush_interval=60)
        run_steps(p, 6)
        p.close(5)
        accepted = srv.vectors()
        self.assertEqual(len(accepted), 4)
        self.assertEqual(accepted[0]["dropped"], 2)
        self.assertEqual(p.stats()["dropped"], 2)

    def test_slow_server_never_blocks_training(self):
        srv = FakeServer(lambda m, path, n: (200, {}, {"accepted": 0}, 1.0) if path.endswith("/vectors") else None)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="slow", rank=0, world_size=1, queue_size=8, batch_size=4,
                         flush_interval=0.01, timeout=5)
        worst = run_steps(p, 200)
        # The shipper sits in a 1 s request while the 8-slot queue overflows;
        # the training thread must keep going (bound far above a step's cost).
        self.assertLess(worst, 0.5)
        p.close(0.1)
        st = p.stats()
        self.assertGreater(st["dropped"], 100)
        self.assertEqual(st["errors"], 0)

    def test_conflict_gives_up_quietly(self):
        srv = FakeServer(lambda m, path, n: (409, {}, {"error": "schema conflict", "field": "schema.stages"}, 0)
                         if m == "PUT" else None)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="clash", rank=0, world_size=1, flush_interval=0.01)
        run_steps(p, 20)
        p.close(5)
        puts = [r for r in srv.requests if r["method"] == "PUT"]
        self.assertEqual(len(puts), 1)  # a 409 is not retried
        self.assertEqual(p.stats()["dropped"], 20)
        self.assertFalse(any(r["path"].endswith("/vectors") for r in srv.requests))


class FileSinkTest(unittest.TestCase):
    def test_stage_matrix_jsonl_and_merge(self):
        d = tempfile.mkdtemp()
        parts = []
        for r in range(2):
            path = os.path.join(d, "{job}.r{rank}.jsonl")
            p = laggard.Perf(job="filejob", out=path, rank=r, world_size=2, flush_interval=0.01)
            run_steps(p, 3)
            self.assertTrue(p.close(5))
            parts.append(os.path.join(d, "filejob.r%d.jsonl" % r))
        out = os.path.join(d, "filejob.jsonl")
        ranks = [{"rank": r, "host": "h", "local_rank": r, "role": {"dp": r, "tp": -1, "pp": -1, "ep": -1}}
                 for r in range(2)]
        n = laggard.merge_stage_files(out, parts, ranks=ranks)
        self.assertEqual(n, 6)
        with open(out) as f:
            lines = [json.loads(x) for x in f]
        self.assertEqual(set(lines[0]), {"job"})
        self.assertEqual(lines[0]["job"]["id"], "filejob")
        self.assertEqual(lines[0]["job"]["world_size"], 2)
        self.assertEqual(lines[0]["job"]["ranks"], ranks)
        self.assertEqual(sorted((v["rank"], v["step"]) for v in lines[1:]),
                         [(r, s) for r in range(2) for s in range(3)])

    def test_merge_without_header_fails(self):
        d = tempfile.mkdtemp()
        empty = os.path.join(d, "empty")
        open(empty, "w").close()
        with self.assertRaises(ValueError):
            laggard.merge_stage_files(os.path.join(d, "out"), [empty])
        self.assertFalse(os.path.exists(os.path.join(d, "out.tmp")))


if __name__ == "__main__":
    unittest.main()
