"""Test doubles shared by the unit tests: a settable clock, a sink that
keeps what it is sent, a CUDA event."""


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
