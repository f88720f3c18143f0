"""Every way a process ends flushes what the client holds, within a
deadline, without changing how the process ends (issue 16 item 2): the
default SIGTERM/SIGHUP/SIGINT actions, a launcher's or the program's own
handler, an ignored signal, a main thread blocked in C, forked children.

Each case runs a real child process against the fake server: the child
times steps with flush_interval=60 (so nothing would ship before its end
on its own), writes the number of steps it ended to a file after each,
prints "ready" after a number of steps, and the test sends the signal."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "..")
sys.path.insert(0, CLIENT)
sys.path.insert(0, HERE)

import laggard  # noqa: E402
from envutil import module_fixture  # noqa: E402
from fakeserver import FakeServer  # noqa: E402

setUpModule, tearDownModule = module_fixture()

CHILD = textwrap.dedent(r'''
    import ctypes, os, signal, sys, time
    sys.path.insert(0, CLIENT)
    stop = [False]

    def say(*args):  # one write per line: the forked worker writes to the same pipe
        os.write(1, (" ".join(str(a) for a in args) + "\n").encode())

    if MODE == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE == "user-before":  # the program's own handler, installed first: "stop after this step"
        def mine(s, f):
            stop[0] = True
            say("user handler")
        signal.signal(signal.SIGTERM, mine)
    import laggard
    perf = laggard.Perf(server=URL, job=JOB, rank=0, world_size=1, flush_interval=60, capture=False,
                        timeout=float(os.environ.get("CHILD_REQUEST_TIMEOUT", "2")))
    if MODE == "user-after":  # a framework that chains the handler it finds (Lightning does)
        prev = signal.getsignal(signal.SIGTERM)
        def theirs(s, f):
            stop[0] = True
            say("framework handler")
            prev(s, f)
        signal.signal(signal.SIGTERM, theirs)

    def block_in_c():
        # A second lock of a normal pthread mutex never returns and never
        # checks for signals: a main thread stuck in C (a collective
        # waiting for a dead peer).
        libc = ctypes.CDLL(None)
        m = ctypes.create_string_buffer(64)
        libc.pthread_mutex_lock(m)
        say("blocking")
        libc.pthread_mutex_lock(m)

    count = os.open(COUNT, os.O_WRONLY)
    n = 0
    while True:
        with perf.step():
            with perf.stage("forward"):
                pass
        n += 1
        os.pwrite(count, n.to_bytes(8, "little"), 0)
        if n == STEPS:
            say("ready")
            if MODE == "block":
                block_in_c()
            if MODE == "fork":
                pid = os.fork()
                if pid == 0:  # a DataLoader-like worker: as if laggard had installed nothing
                    try:
                        say("child", os.getpid(), signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
                              signal.set_wakeup_fd(-1))
                        block_in_c()
                    finally:
                        os._exit(3)
                say("forked", pid)
                _, status = os.waitpid(pid, 0)
                say("worker status", status)
                break
        if stop[0] or (MODE == "ignore" and n >= 2 * STEPS):
            break
        time.sleep(0.001)
    say("exiting", n, "ignored" if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN else "")
''')


class Child:
    def __init__(self, test, mode, steps=50, env=None, srv=None):
        self.srv = srv or FakeServer(incarnations=True)
        test.addCleanup(self.srv.close)
        self.job = "sd-" + mode
        fd, self.count = tempfile.mkstemp(prefix="laggard-sd-")
        os.close(fd)
        test.addCleanup(os.unlink, self.count)
        code = "CLIENT=%r\nURL=%r\nJOB=%r\nMODE=%r\nSTEPS=%d\nCOUNT=%r\n" % (
            CLIENT, self.srv.url, self.job, mode, steps, self.count) + CHILD
        e = {k: v for k, v in os.environ.items() if not k.startswith("LAGGARD_")}
        e.update(env or {})
        self.p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=e)
        test.addCleanup(self._kill)
        self.lines = []
        self.err = ""
        self.others = []
        self._cv = threading.Condition()
        self._readers = [threading.Thread(target=self._read, args=(self.p.stdout, False), daemon=True),
                         threading.Thread(target=self._read, args=(self.p.stderr, True), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, f, err):
        for line in f:
            with self._cv:
                if err:
                    self.err += line
                else:
                    self.lines.append(line.strip())
                self._cv.notify_all()

    def _kill(self):
        for pid in self.others:  # a forked worker holds the pipes open too
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        for t in self._readers:
            t.join(5)
        if not any(t.is_alive() for t in self._readers):  # closing under a blocked reader would hang
            self.p.stdout.close()
            self.p.stderr.close()

    def wait_line(self, prefix, timeout=20):
        with self._cv:
            ok = self._cv.wait_for(lambda: any(x.startswith(prefix) for x in self.lines), timeout)
            if not ok:
                raise AssertionError("child never printed %r: %s / %s" % (prefix, self.lines, self.err[-2000:]))
            return next(x for x in self.lines if x.startswith(prefix))

    def finish(self, timeout=20):
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError("child outlived its signal by %d s: %s %s" % (timeout, self.lines, self.err[-2000:]))
        for t in self._readers:
            t.join(5)
        return self.p.returncode

    def vectors(self):
        return self.srv.vectors()

    def ended(self):
        """Steps the child ended (each made a vector)."""
        with open(self.count, "rb") as f:
            return int.from_bytes(f.read(8) or b"\0", "little")


class SignalFlushTest(unittest.TestCase):
    def assert_all_shipped(self, c, at_least):
        """Every vector the child made reached the server, in order: as
        many as the steps it ended (one more where the signal came between
        a step's end and the count's write)."""
        steps = [v["step"] for v in c.vectors()]
        self.assertGreaterEqual(len(steps), at_least, c.err[-2000:])
        self.assertEqual(steps, list(range(len(steps))))
        ended = c.ended()
        self.assertGreaterEqual(ended, at_least)
        self.assertIn(len(steps) - ended, (0, 1), (len(steps), ended))

    def test_sigterm_default_flushes_then_dies_of_sigterm(self):
        # Before: the vectors queued behind a 60 s flush interval died with
        # the process (3-10 steps at a 1 s interval; here all of them).
        c = Child(self, "default")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(), -signal.SIGTERM)  # still "killed by SIGTERM" for the launcher
        self.assert_all_shipped(c, 50)

    def test_sighup_default_flushes_then_dies_of_sighup(self):
        c = Child(self, "default")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGHUP)
        self.assertEqual(c.finish(), -signal.SIGHUP)
        self.assert_all_shipped(c, 50)

    def test_sigterm_while_main_thread_blocked_in_c(self):
        # The Python handler cannot run while the main thread is in C; the
        # watcher thread flushes and ends the process by SIGTERM all the
        # same (without it, the process would outlive its SIGTERM).
        c = Child(self, "block")
        c.wait_line("blocking")
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(timeout=15), -signal.SIGTERM)
        self.assert_all_shipped(c, 50)

    def test_sigint_keyboard_interrupt_flushes_at_exit(self):
        c = Child(self, "default")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGINT)
        rc = c.finish()
        self.assertEqual(rc, -signal.SIGINT)  # Python's own ending for an uncaught KeyboardInterrupt
        self.assertIn("KeyboardInterrupt", c.err)
        self.assert_all_shipped(c, 50)

    def test_program_handler_keeps_its_meaning(self):
        # A handler the program installed before laggard: called as before
        # (training stops after the step, the process exits 0), and the
        # exit flushes.
        c = Child(self, "user-before")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(), 0)
        self.assertIn("user handler", c.lines)
        self.assertTrue(any(x.startswith("exiting") for x in c.lines), c.lines)
        self.assert_all_shipped(c, 50)

    def test_framework_chaining_our_handler_keeps_its_meaning(self):
        # A framework installed after laggard and calls the handler it found
        # (ours): laggard must not end the process it decided to keep.
        c = Child(self, "user-after")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(), 0)
        self.assertIn("framework handler", c.lines)
        self.assert_all_shipped(c, 50)

    def test_ignored_signal_stays_ignored(self):
        c = Child(self, "ignore")
        c.wait_line("ready")
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(), 0)
        last = [x for x in c.lines if x.startswith("exiting")][0]
        self.assertTrue(last.endswith("ignored"), last)
        self.assert_all_shipped(c, 100)

    def test_flush_bounded_by_shutdown_timeout(self):
        # A server that answers nothing in time: the process still ends
        # within LAGGARD_SHUTDOWN_TIMEOUT (0.5 s here) of its SIGTERM.
        srv = FakeServer(lambda m, path, n: (200, {}, {}, 30) if path.endswith("/vectors") else None)
        c = Child(self, "default", env={"LAGGARD_SHUTDOWN_TIMEOUT": "0.5"}, srv=srv)
        c.wait_line("ready")
        t = time.monotonic()
        c.p.send_signal(signal.SIGTERM)
        self.assertEqual(c.finish(), -signal.SIGTERM)
        self.assertLess(time.monotonic() - t, 5.0)  # 0.5 s and the process's own exit; generous

    def test_second_signal_ends_at_once(self):
        # A flush waiting on a server that does not answer (deadline 20 s):
        # a second SIGTERM ends the process at once, also with the main
        # thread blocked in C.
        for mode in ("default", "block"):
            with self.subTest(mode=mode):
                srv = FakeServer(lambda m, path, n: (200, {}, {}, 60) if path.endswith("/vectors") else None)
                c = Child(self, mode, env={"LAGGARD_SHUTDOWN_TIMEOUT": "20", "CHILD_REQUEST_TIMEOUT": "30"}, srv=srv)
                c.wait_line("blocking" if mode == "block" else "ready")
                c.p.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                self.assertIsNone(c.p.poll())  # flushing
                c.p.send_signal(signal.SIGTERM)
                self.assertEqual(c.finish(timeout=10), -signal.SIGTERM)

    def test_forked_worker_ends_as_without_laggard(self):
        # A fork of the training process (DataLoader worker) has none of
        # the handlers, the wakeup fd or the hooks: SIGTERM ends it at once
        # even blocked in C, and its signal does not reach the parent.
        c = Child(self, "fork")
        line = c.wait_line("child").split()
        c.others.append(int(line[1]))  # killed at cleanup whatever happens below
        self.assertEqual(line[2:], ["True", "-1"], c.lines)
        c.wait_line("blocking")
        pid = int(c.wait_line("forked").split()[1])
        self.assertGreater(pid, 0)
        os.kill(pid, signal.SIGTERM)
        self.assertEqual(c.finish(), 0)
        self.assertIn("worker status %d" % signal.SIGTERM, c.lines)  # killed by the signal, at once
        self.assert_all_shipped(c, 50)


class InProcessTest(unittest.TestCase):
    def setUp(self):
        global shutdown
        from laggard import shutdown

    def test_install_off_main_thread_does_nothing(self):
        out = []
        t = threading.Thread(target=lambda: out.append(shutdown.install()))
        t.start()
        t.join()
        self.assertEqual(out, [False])

    def test_a_raising_hook_is_counted_and_the_others_run(self):
        ran = []

        def bad(deadline, from_signal):
            raise RuntimeError("boom")

        def good(deadline, from_signal):
            ran.append(from_signal)
            return lambda d: ran.append("waited")

        before = shutdown.flushes["hook_errors"]
        k1, k2 = shutdown.register(bad, on_signal=True), shutdown.register(good, on_signal=True)
        try:
            shutdown.flush_all(True, time.monotonic() + 1)
        finally:
            shutdown.unregister(k1)
            shutdown.unregister(k2)
        self.assertEqual(ran, [True, "waited"])
        self.assertEqual(shutdown.flushes["hook_errors"], before + 1)

    def test_hurry_ships_now_without_blocking(self):
        srv = FakeServer()
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="hurry", rank=0, world_size=1, flush_interval=60, capture=False)
        for _ in range(5):
            with p.step():
                pass
        t = time.monotonic()
        shutdown.hurry()  # what a program's own signal handler triggers
        self.assertLess(time.monotonic() - t, 0.1)
        end = time.monotonic() + 5
        while len(srv.vectors()) < 5 and time.monotonic() < end:
            time.sleep(0.01)
        self.assertEqual(len(srv.vectors()), 5)  # long before the 60 s interval
        self.assertTrue(p.stats()["shipping"])
        self.assertTrue(p.close(5))

    def test_signal_flush_leaves_training_state_alone(self):
        # From a signal the flush touches only the shipper: the step in
        # progress and vectors held for CUDA events stay as they are.
        srv = FakeServer()
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="sigflush", rank=0, world_size=1, flush_interval=60, capture=False)
        for _ in range(3):
            with p.step():
                pass
        p.begin_step()
        held = list(p._held)
        w = p._exit_flush(time.monotonic() + 2, True)
        self.assertIsNotNone(w)
        self.assertTrue(w(time.monotonic() + 2))
        self.assertIsNotNone(p._cur)  # the open step was not ended
        self.assertEqual(p._held, held)
        self.assertEqual(len(srv.vectors()), 3)
        p.end_step()
        p.close(1)

    def test_flush_is_bounded_with_a_dead_server(self):
        srv = FakeServer(lambda m, path, n: (200, {}, {}, 30) if path.endswith("/vectors") else None)
        self.addCleanup(srv.close)
        p = laggard.Perf(server=srv.url, job="deadflush", rank=0, world_size=1, flush_interval=60, timeout=0.3,
                         capture=False)
        for _ in range(3):
            with p.step():
                pass
        t = time.monotonic()
        p.flush(0.5)  # the request times out (0.3 s): dropped and counted, which ends the flush
        self.assertLess(time.monotonic() - t, 2.0)
        self.assertEqual(p.stats()["dropped"], 3)
        p.close(1)


if __name__ == "__main__":
    unittest.main()
