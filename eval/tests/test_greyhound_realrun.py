"""Unit tests of eval/greyhound/realrun.py's pure parts (no root, no torch)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "greyhound"))

import realrun  # noqa: E402


class LabelsFromSteps(unittest.TestCase):
    # steps end at 100, 200, ..., 1000 ns
    ends = {s: (s + 1) * 100 for s in range(10)}

    def test_window_inside(self):
        # injected at 250 (during step 2), stopped at 620 (during step 6):
        # step 2 is the first to end after the start; step 7 starts at 700,
        # the first start at or after the stop.
        self.assertEqual(realrun.labels_from_steps(self.ends, 250, 620), {"onset": 2, "relief": 7})

    def test_stop_on_boundary(self):
        self.assertEqual(realrun.labels_from_steps(self.ends, 200, 600), {"onset": 2, "relief": 6})

    def test_never_stopped(self):
        self.assertEqual(realrun.labels_from_steps(self.ends, 250, None), {"onset": 2, "relief": 10})

    def test_after_the_run(self):
        self.assertIsNone(realrun.labels_from_steps(self.ends, 5000, 6000))


class StepLogs(unittest.TestCase):
    def test_merge_and_series(self):
        d = tempfile.mkdtemp()
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        with open(a, "w") as f:
            f.write("0 1000000 5.0\n1 3000000 2.0\n2 4000000 1.0\nbroken line\n")
        with open(b, "w") as f:
            f.write("0 1500000 6.0\n1 2500000 1.0\n2 6000000 4.0\n")
        logs = realrun.read_step_logs([a, b, os.path.join(d, "missing")])
        self.assertEqual(logs, {0: (1500000, 6.0), 1: (3000000, 2.0), 2: (6000000, 4.0)})
        # step 0: its own (slowest) wall; then the slowest rank's end-to-end gaps
        self.assertEqual(realrun.step_series(logs), [(0, 6.0), (1, 1.5), (2, 3.0)])


class Names(unittest.TestCase):
    def test_prefix(self):
        # cleanup removes only objects with the harness prefix
        for r in range(3):
            for n in (realrun.ns(r), realrun.veth_host(r), realrun.veth_ns(r)):
                self.assertTrue(n.startswith(realrun.PREFIX))
                self.assertLessEqual(len(n), 15)  # IFNAMSIZ − 1
        self.assertEqual(realrun.in_ns(1, "tc", "qdisc")[:4], ["ip", "netns", "exec", "ghns1"])


if __name__ == "__main__":
    unittest.main()
