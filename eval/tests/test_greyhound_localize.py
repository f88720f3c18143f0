"""Unit tests of eval/greyhound/localize.py and overhead.py pure parts (no
root, no torch, no server)."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "greyhound"))

import localize  # noqa: E402
import overhead  # noqa: E402


def V(kind, ranks=(), links=()):
    return {"kind": kind, "ranks": list(ranks), "links": [{"src": s, "dst": d} for s, d in links], "text": ""}


class Score(unittest.TestCase):
    def test_table(self):
        cases = [
            # scenario, fault rank, verdict, want
            ("hog", 1, V("slow_rank", [1]), "correct"),
            ("hog", 1, V("late_rank", [1]), "correct"),
            ("hog", 1, V("slow_rank", [1, 3]), "partial"),
            ("hog", 1, V("slow_rank", [2]), "wrong"),
            ("hog", 1, V("inconclusive"), "withheld"),
            ("hog", 1, V("none"), "withheld"),
            ("hog", 1, V("uniform"), "withheld"),
            ("hog", 1, None, "withheld"),
            ("sleep", 2, V("late_rank", [2]), "correct"),
            ("sleep", 2, V("late_rank", [0]), "wrong"),
            ("link", 1, V("slow_link", links=[(0, 1), (1, 2)]), "correct"),
            ("link", 1, V("slow_link", links=[(0, 1), (2, 3)]), "wrong"),
            ("link", 1, V("slow_rank", [1]), "partial"),
            ("link", 1, V("slow_rank", [1], links=[(1, 2)]), "correct"),
            ("link", 1, V("slow_rank", [0]), "wrong"),
            ("link", 1, V("inconclusive"), "withheld"),
            ("none", -1, None, "correct"),
            ("none", -1, V("inconclusive"), "correct"),
            ("none", -1, V("slow_rank", [3]), "wrong"),
            # a named kind with nothing named names nothing
            ("hog", 1, V("slow_rank", []), "withheld"),
        ]
        for sc, fr, v, want in cases:
            with self.subTest(sc=sc, v=v):
                self.assertEqual(localize.score(sc, fr, v), want)


class Layout(unittest.TestCase):
    def test_two_cores(self):
        self.assertEqual(localize.core_layout(4, 1, 2), [0, 1, 0, 0])
        self.assertEqual(localize.core_layout(4, 3, 2), [0, 0, 0, 1])
        # the control uses fault rank 1's layout
        self.assertEqual(localize.core_layout(4, -1, 2), [0, 1, 0, 0])

    def test_more_cores(self):
        self.assertEqual(localize.core_layout(4, 1, 4), [0, 3, 1, 2])
        self.assertEqual(localize.core_layout(4, 0, 3), [2, 0, 1, 0])

    def test_one_core(self):
        self.assertEqual(localize.core_layout(3, 1, 1), [0, 0, 0])


class Timeline(unittest.TestCase):
    ends = {s: 1000 * (s + 1) for s in range(10)}  # step s runs (1000s, 1000(s+1)]

    def test_step_of(self):
        self.assertEqual(localize.step_of(self.ends, 0), 0)
        self.assertEqual(localize.step_of(self.ends, 2500), 2)
        self.assertEqual(localize.step_of(self.ends, 3000), 2)
        self.assertIsNone(localize.step_of(self.ends, 10001))

    def test_first_after(self):
        hist = [{"from": "tracking", "to": "profiling", "at_ns": 50},
                {"from": "profiling", "to": "verdict", "at_ns": 60},
                {"from": "verdict", "to": "tracking", "at_ns": 70},
                {"from": "tracking", "to": "profiling", "at_ns": 200}]
        self.assertEqual(localize.first_after(hist, 100, "profiling")["at_ns"], 200)
        self.assertEqual(localize.first_after(hist, 0, "verdict")["at_ns"], 60)
        self.assertIsNone(localize.first_after(hist, 100, "verdict"))
        self.assertIsNone(localize.first_after(None, 0, "verdict"))

    def test_evaluate_run(self):
        run = {"name": "loc-hog-s1", "scenario": "hog", "seed": 1, "fault_rank": 1, "onset": 3, "fault_steps": 5,
               "hogs": 4, "inject_ns": 3000, "start_ns": 0, "base_ms": 100.0, "fault_ms": 150.0}
        report = {"changepoints": [{"kind": "onset", "verified": True, "end_ns": 1500},  # before: a false onset
                                   {"kind": "onset", "verified": True, "end_ns": 4500},
                                   {"kind": "relief", "verified": True, "end_ns": 9000}],
                  "controller": {"history": [{"from": "tracking", "to": "profiling", "at_ns": 5200},
                                             {"from": "profiling", "to": "validation", "at_ns": 6100},
                                             {"from": "validation", "to": "verdict", "at_ns": 8000}]},
                  "validation": [{"id": "v-1", "state": "done"}],
                  "verdict": V("slow_rank", [1])}
        timeline = [{"t_ns": 7000, "phase": "validation", "verdict": V("inconclusive")},
                    {"t_ns": 8100, "phase": "verdict", "verdict": V("slow_rank", [1])}]
        row = localize.evaluate_run(run, report, timeline, self.ends)
        self.assertEqual(row["cp_step"], 4)
        self.assertEqual(row["cp_steps"], 1)
        self.assertAlmostEqual(row["cp_s"], 0.0)  # 1.5 µs rounds to 0.00 s
        self.assertEqual(row["detect_steps"], 2)
        self.assertEqual(row["verdict_steps"], 4)
        self.assertEqual(row["verdict_kind"], "slow_rank")
        self.assertEqual(row["named"], "rank 1")
        self.assertEqual(row["score"], "correct")
        self.assertEqual(row["other_onsets"], 1)
        self.assertEqual(row["slowdown_pct"], 50.0)
        self.assertEqual(row["phases"], "tracking→profiling→validation→verdict")
        self.assertEqual(row["validation_states"], "done")

    def test_episode_before_injection(self):
        # a false onset just before the injection opens the episode whose
        # validation runs during the fault: the verdict counts, the detection does not
        run = {"name": "loc-sleep-s2", "scenario": "sleep", "seed": 2, "fault_rank": 1, "onset": 3, "fault_steps": 5,
               "sleep_ms": 100, "inject_ns": 3000, "start_ns": 0}
        report = {"changepoints": [], "controller": {"history": [
            {"from": "tracking", "to": "profiling", "at_ns": 2500},
            {"from": "profiling", "to": "validation", "at_ns": 3500},
            {"from": "validation", "to": "verdict", "at_ns": 7000},
            {"from": "verdict", "to": "tracking", "at_ns": 8000},
            {"from": "tracking", "to": "profiling", "at_ns": 9500}]}, "verdict": V("late_rank", [1])}
        row = localize.evaluate_run(run, report, [{"t_ns": 7100, "phase": "verdict", "verdict": V("late_rank", [1])}],
                                    self.ends)
        self.assertNotIn("detect_s", row)
        self.assertIn("before the injection", row["note"])
        self.assertEqual(row["verdict_steps"], 3)
        self.assertEqual(row["score"], "correct")
        self.assertEqual(localize.episode_start(report["controller"]["history"], 7000)["at_ns"], 2500)

    def test_evaluate_control(self):
        run = {"name": "loc-none-s1", "scenario": "none", "seed": 1, "fault_rank": -1, "onset": 3, "fault_steps": 5,
               "start_ns": 0}
        row = localize.evaluate_run(run, {"changepoints": [], "controller": {"history": []}}, [], self.ends)
        self.assertEqual(row["score"], "correct")
        self.assertEqual(row["other_onsets"], 0)
        self.assertEqual(row["injected"], "none")
        self.assertEqual(row["phases"], "tracking")

    def test_tables_from_saved_runs(self):
        d = tempfile.mkdtemp()
        rd = os.path.join(d, "real", "loc-link-s2")
        os.makedirs(rd)
        with open(os.path.join(rd, "run.json"), "w") as f:
            json.dump({"name": "loc-link-s2", "scenario": "link", "seed": 2, "fault_rank": 1, "onset": 3,
                       "fault_steps": 5, "rate": "1gbit", "inject_ns": 3000, "start_ns": 0}, f)
        with open(os.path.join(rd, "greyhound.json"), "w") as f:
            json.dump({"changepoints": [], "controller": {"history": [
                {"from": "tracking", "to": "profiling", "at_ns": 5000},
                {"from": "profiling", "to": "verdict", "at_ns": 6000}]},
                "verdict": V("slow_link", links=[(1, 2)])}, f)
        with open(os.path.join(rd, "step_ends.json"), "w") as f:
            json.dump({str(k): v for k, v in self.ends.items()}, f)
        rows = localize.load_runs(d)
        self.assertEqual(len(rows), 1)
        # a single verdict transition: the final report's verdict is that one
        self.assertEqual(rows[0]["score"], "correct")
        localize.write_tables(rows, d)
        for name in ("localization.md", "localization.tsv", "reaction_e2e.md", "reaction_e2e.tsv"):
            self.assertTrue(os.path.getsize(os.path.join(d, name)) > 0, name)
        with open(os.path.join(d, "localization.tsv")) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertIn("link 1→2", lines[1])


class Overhead(unittest.TestCase):
    def test_job_step_times(self):
        rows = [{"rank": 0, "step": s, "start_ns": 0, "end_ns": 1_000_000 * (s + 1)} for s in range(5)]
        rows += [{"rank": 1, "step": s, "start_ns": 0, "end_ns": 1_000_000 * (s + 1) + (500_000 if s == 3 else 0)}
                 for s in range(5)]
        # slowest rank's ends: 1, 2, 3, 4.5, 5 ms
        self.assertEqual(overhead.job_step_times(rows, 0), [1.0, 1.0, 1.5, 0.5])
        self.assertEqual(overhead.job_step_times(rows, 2), [1.5, 0.5])  # steps 3 and 4

    def test_order_alternates(self):
        self.assertEqual([overhead.pair_order(i) for i in range(3)], [("off", "on"), ("on", "off"), ("off", "on")])

    def test_summarize(self):
        s = overhead.summarize([{"off": 100.0, "on": 101.0}, {"off": 100.0, "on": 99.0}, {"off": 50.0, "on": 51.0}])
        self.assertEqual([round(x, 6) for x in s["rel_pct"]], [1.0, -1.0, 2.0])
        self.assertAlmostEqual(s["median_rel_pct"], 1.0)
        self.assertEqual(s["median_off_ms"], 100.0)
        self.assertIsNone(overhead.summarize([])["median_rel_pct"])


if __name__ == "__main__":
    unittest.main()
