"""laggard.agent_socket: registration with the node agent over a Unix socket
(a fake agent here; the Go side is internal/agent/register)."""

import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from laggard import agent_socket  # noqa: E402

from envutil import module_fixture  # noqa: E402

setUpModule, tearDownModule = module_fixture()


class FakeAgent:
    """Accepts connections, records each line, answers with answer(msg)."""

    def __init__(self, answer=None):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "agent.sock")
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(8)
        self.lines = []
        self.eof = threading.Event()
        self.got = threading.Event()
        self.answer = answer or (lambda msg: {"ok": True})
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        for raw in f:
            msg = json.loads(raw)
            self.lines.append(msg)
            c.sendall((json.dumps(self.answer(msg)) + "\n").encode())
            self.got.set()
        self.eof.set()

    def close(self):
        self.srv.close()
        for c in self.conns:
            c.close()
        self.dir.cleanup()


class AgentSocketTest(unittest.TestCase):
    def setUp(self):
        agent_socket._warned = False
        agent_socket._after_fork_in_child()  # drop any connection of an earlier test
        # Runs last (cleanups are LIFO): after the test's FakeAgent closed,
        # wait for its registration thread, which may log "closed the
        # registration connection" and so spend the once-only warning of
        # the next test.
        self.addCleanup(self._join_register_threads)

    @staticmethod
    def _join_register_threads():
        for t in threading.enumerate():
            if t.name == "laggard-agent-register" and t is not threading.current_thread():
                t.join(5)

    def tearDown(self):
        agent_socket._after_fork_in_child()

    def test_announce_keeps_connection_open(self):
        a = FakeAgent()
        self.addCleanup(a.close)
        comms = [{"id": "c0", "size": 2, "ranks": [0, 1]}]
        t = agent_socket.announce("job-1", 1, 2, local_rank=1, comms=comms, host="h", path=a.path)
        t.join(5)
        self.assertTrue(a.got.wait(5))
        self.assertEqual(a.lines[0], {"v": 1, "pid": os.getpid(), "job": "job-1", "rank": 1, "world": 2,
                                      "local_rank": 1, "host": "h", "comms": comms})
        self.assertEqual(agent_socket.last_answer(), (True, ""))
        # The connection stays open: the agent sees no EOF...
        self.assertFalse(a.eof.wait(0.3))
        # ...and a second announcement goes over the same connection.
        a.got.clear()
        agent_socket.announce("job-1", 1, 2, local_rank=1, path=a.path).join(5)
        self.assertTrue(a.got.wait(5))
        self.assertEqual(len(a.conns), 1)
        self.assertEqual(len(a.lines), 2)
        # Closing it (process exit) is the agent's EOF.
        agent_socket._after_fork_in_child()
        self.assertTrue(a.eof.wait(5))

    def test_refusal_logged_once_never_raised(self):
        a = FakeAgent(answer=lambda msg: {"ok": False, "error": "rank: outside [0, world=2)"})
        self.addCleanup(a.close)
        with self.assertLogs("laggard", level="WARNING") as cm:
            agent_socket.announce("j", 1, 2, path=a.path).join(5)
            agent_socket._after_fork_in_child()
            agent_socket.announce("j", 1, 2, path=a.path).join(5)
        warnings = [r for r in cm.records if r.levelname == "WARNING"]
        self.assertEqual(len(warnings), 1)
        self.assertIn("rank: outside", warnings[0].getMessage())
        self.assertEqual(agent_socket.last_answer(), (False, "rank: outside [0, world=2)"))

    def test_concurrent_announces_share_one_connection(self):
        # Review finding 15: announces racing each other must not open two
        # connections and close the one that owns the agent's entry.
        gate = threading.Event()

        def slow(msg):
            gate.wait(5)
            return {"ok": True}

        a = FakeAgent(answer=slow)
        self.addCleanup(a.close)
        ts = [agent_socket.announce("j", 0, 1, path=a.path) for _ in range(4)]
        time.sleep(0.3)
        gate.set()
        for t in ts:
            t.join(10)
        self.assertEqual(len(a.lines), 4)
        self.assertEqual(len(a.conns), 1)
        self.assertFalse(a.eof.wait(0.3))

    def test_no_agent_does_not_block_or_raise(self):
        path = os.path.join(tempfile.gettempdir(), "laggard-no-agent-%d.sock" % os.getpid())
        t0 = time.monotonic()
        with self.assertLogs("laggard", level="WARNING"):
            t = agent_socket.announce("j", 0, 1, path=path)
            self.assertLess(time.monotonic() - t0, 0.1)  # the caller never waits
            t.join(5)
        self.assertFalse(t.is_alive())

    def test_unset_env_does_nothing(self):
        self.assertIsNone(agent_socket.announce("j", 0, 1))
        self.assertIsNone(agent_socket.announce_perf(laggard.NullPerf()))

    def test_init_announces_when_env_set(self):
        a = FakeAgent()
        self.addCleanup(a.close)
        env = {"LAGGARD_AGENT_SOCKET": a.path, "LAGGARD_JOB": "demo-job", "RANK": "3", "WORLD_SIZE": "4",
               "LOCAL_RANK": "1", "LAGGARD_OUT": os.path.join(a.dir.name, "out-{rank}.jsonl")}
        with mock.patch.dict(os.environ, env):
            perf = laggard.init()
            self.addCleanup(perf.close)
            self.assertTrue(a.got.wait(5))
        msg = a.lines[0]
        self.assertEqual((msg["job"], msg["rank"], msg["world"], msg["local_rank"], msg["pid"]),
                         ("demo-job", 3, 4, 1, os.getpid()))


if __name__ == "__main__":
    unittest.main()
