"""Test doubles shared by the unit tests: a settable clock, a sink that
keeps what it is sent, a CUDA event, and a test case on a fake clock."""

import unittest

from laggard import perf as perf_mod


class FakeClock:
    def __init__(self):
        self.t = 1_000_000_000

    def __call__(self):
        return self.t

    def advance_ms(self, ms):
        self.t += int(ms * 1_000_000)


class CaptureSink:
    def __init__(self):
        self.job = None
        self.rank = None
        self.vectors = []

    def register(self, job, rank):
        self.job, self.rank = job, rank

    def send(self, vectors):
        self.vectors.extend(vectors)

    def close(self):
        pass


class FakeEvent:
    """Stands in for torch.cuda.Event: ready after `ready_after` queries."""

    def __init__(self, ready_after, value):
        self.ready_after = ready_after
        self.value = value
        self.queries = 0
        self.recorded = False

    def record(self):
        self.recorded = True

    def query(self):
        self.queries += 1
        return self.queries > self.ready_after

    def elapsed_time(self, other):
        return other.value


class ClockedTest(unittest.TestCase):
    """Runs each test on a FakeClock (self.clock) with a CaptureSink
    (self.sink)."""

    def setUp(self):
        self.clock = FakeClock()
        self._saved = perf_mod._now
        perf_mod._now = self.clock
        self.sink = CaptureSink()

    def tearDown(self):
        perf_mod._now = self._saved
