"""Adaptive batching (issue 16 item 3): when requests cannot keep up (a slow
server, a high step rate) the shipper sends fewer, larger batches before it
drops anything; batches stay bounded by bytes; they shrink back when the
shipper has caught up. bench/drops.py measures drops and the training
thread's cost against a real server."""

import json
import os
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from laggard import shipper as shipper_mod  # noqa: E402
from laggard.sinks import ShipError  # noqa: E402
from envutil import module_fixture  # noqa: E402

setUpModule, tearDownModule = module_fixture()


class SlowSink:
    """A server whose every request takes `delay` seconds, plus per_vector
    seconds for each vector (a busy server); records batches."""

    def __init__(self, delay, limit=None, per_vector=0.0, request_timeout=None):
        self.delay = delay
        self.per_vector = per_vector
        self.limit = limit  # batches of more vectors are refused with 413
        self.request_timeout = request_timeout
        self.batches = []
        self.timeouts = 0
        self.lock = threading.Lock()

    def register(self, job, rank):
        pass

    def send_encoded(self, texts):
        took = self.delay + self.per_vector * len(texts)
        if self.request_timeout and took > self.request_timeout:
            time.sleep(self.request_timeout)
            self.timeouts += 1
            raise ShipError("no complete response", op="vectors", timed_out=True)
        time.sleep(took)
        if self.limit is not None and len(texts) > self.limit:
            raise ShipError("too large", status=413, permanent=True, op="vectors")
        with self.lock:
            self.batches.append(list(texts))

    def close(self):
        pass


def item(i):
    return (i, 0, 0, [0.123456, 12.0, 3.5, 1.25, 86.0, 0.5], 103.623457, 0, None, 0)


def offer_paced(sh, n, rate):
    """n vectors at `rate` per second, as a training loop makes them."""
    t = time.perf_counter()
    for i in range(n):
        sh.offer(item(i))
        d = t + (i + 1) / rate - time.perf_counter()
        if d > 0:
            time.sleep(d)


class AdaptiveBatchTest(unittest.TestCase):
    def test_slow_server_gets_larger_batches_not_drops(self):
        # 1,000 vectors/s against requests of 0.5 s: at a fixed 256 per
        # batch the shipper moves 512/s and the 1024-vector queue overflows
        # within about two seconds (about a third dropped before this fix).
        sink = SlowSink(0.5)
        sh = shipper_mod.Shipper(sink, {"id": "slow"}, {"rank": 0}, queue_size=1024, batch_size=256,
                                 flush_interval=0.2)
        self.addCleanup(sh.close, 1)
        offer_paced(sh, 3000, 1000)
        st = sh.stats()
        self.assertEqual(st["dropped"], 0, st)  # none while training ran
        self.assertTrue(sh.close(10))
        st = sh.stats()
        self.assertEqual(st["sent"], 3000)
        sizes = [len(b) for b in sink.batches]
        self.assertGreater(max(sizes), 256)  # it grew
        self.assertLessEqual(max(sizes), 1024)  # never past the queue size
        self.assertGreaterEqual(st["batch_grown"], 1)
        steps = [json.loads(v)["step"] for b in sink.batches for v in b]
        self.assertEqual(steps, list(range(3000)))

    def test_batches_bounded_by_bytes(self):
        sink = SlowSink(0.2)
        sh = shipper_mod.Shipper(sink, {"id": "bytes"}, {"rank": 0}, queue_size=4096, batch_size=64,
                                 flush_interval=0.2, max_batch_bytes=8192)
        self.addCleanup(sh.close, 1)
        offer_paced(sh, 2000, 4000)
        self.assertTrue(sh.close(10))
        self.assertEqual(sh.stats()["sent"], 2000)
        one = max(len(v) for b in sink.batches for v in b)
        for b in sink.batches:
            self.assertLessEqual(sum(len(v) + 1 for v in b), 8192 + one + 1)  # at most one vector past it

    def test_batch_shrinks_back_when_caught_up(self):
        sink = SlowSink(0.3)
        sh = shipper_mod.Shipper(sink, {"id": "shrink"}, {"rank": 0}, queue_size=1024, batch_size=64,
                                 flush_interval=0.05)
        self.addCleanup(sh.close, 1)
        offer_paced(sh, 1500, 1000)  # a slow server at a high rate: the batch grows
        grown = sh.stats()["batch"]
        self.assertGreater(grown, 64)
        sink.delay = 0.0
        offer_paced(sh, 100, 50)  # then a modest rate: part-full batches, nothing waiting
        self.assertEqual(sh.stats()["batch"], 64)
        self.assertTrue(sh.close(5))
        self.assertEqual(sh.stats()["dropped"], 0)

    def test_busy_server_batches_stay_under_half_the_timeout(self):
        # A server whose answer takes longer the more it is sent (1 ms a
        # vector) and a 1 s request timeout: batches grow only while their
        # request, scaled from the last one, stays under 0.5 s — a batch
        # that times out is lost whole (seen at 10,000 steps/s x 8 ranks:
        # 4096-vector batches timing out).
        sink = SlowSink(0.0, per_vector=0.001, request_timeout=1.0)
        sh = shipper_mod.Shipper(sink, {"id": "busy"}, {"rank": 0}, queue_size=8192, batch_size=64,
                                 flush_interval=0.2)
        self.addCleanup(sh.close, 1)
        offer_paced(sh, 6000, 2000)
        self.assertTrue(sh.close(20))
        self.assertEqual(sink.timeouts, 0)
        self.assertLessEqual(max(len(b) for b in sink.batches), 500 * 2)  # grown, but within the bound's rounding
        self.assertGreater(max(len(b) for b in sink.batches), 64)

    def test_timed_out_batch_lowers_the_ceiling(self):
        sink = SlowSink(0.0, per_vector=0.001, request_timeout=0.3)
        sh = shipper_mod.Shipper(sink, {"id": "tmo"}, {"rank": 0}, queue_size=4096, batch_size=512,
                                 flush_interval=0.05)
        self.addCleanup(sh.close, 1)
        sh._batch_size = 2048  # as if it had grown
        offer_paced(sh, 4000, 8000)
        self.assertTrue(sh.close(20))
        self.assertGreaterEqual(sink.timeouts, 1)
        self.assertLessEqual(sh._max_batch, 1024)

    def test_413_lowers_the_ceiling(self):
        sink = SlowSink(0.05, limit=100)
        sh = shipper_mod.Shipper(sink, {"id": "413"}, {"rank": 0}, queue_size=2048, batch_size=256,
                                 flush_interval=0.05)
        self.addCleanup(sh.close, 1)
        offer_paced(sh, 1000, 5000)
        self.assertTrue(sh.close(10))
        st = sh.stats()
        self.assertLessEqual(st["batch"], 100)
        self.assertTrue(all(len(b) <= 100 for b in sink.batches))
        self.assertEqual((st["sent"], st["dropped"]), (1000, 0))  # the refused batch went again in halves
        steps = [json.loads(v)["step"] for b in sink.batches for v in b]
        self.assertEqual(steps, list(range(1000)))


if __name__ == "__main__":
    unittest.main()
