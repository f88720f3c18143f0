"""Unit tests of eval/kair/score.py and proxy.py pure parts (no root, no
torch, no server):  /usr/bin/python3 -m unittest eval/kair/test_score.py"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "greyhound"))

import proxy  # noqa: E402
import score  # noqa: E402

MS = 1_000_000


def ev(name, start_ms, dur_ms, cat="cpu_op", lane="t1"):
    return {"name": name, "cat": cat, "lane": lane, "start_ns": int(start_ms * MS), "dur_ns": int(dur_ms * MS)}


# One step of the hidden rank, timeline axis starting at 5 ms (its step start).
SLOW_OP = [
    ev("ProfilerStep#40", 5, 200),
    ev("aten::randint", 5.1, 0.1),
    ev("DistributedDataParallel.forward", 6, 80),
    ev("aten::mm", 7, 1),                      # occurrence 0: an ordinary mm
    ev("layer.enc.layers.0.linear1", 10, 62),
    ev("aten::linear", 10.1, 1.5),
    ev("aten::mm", 12, 60),                    # occurrence 1: the injected matmul
    ev("aten::relu", 72.5, 0.2),
    ev("gloo:all_reduce", 120, 5, cat="collective", lane="t2"),
]


class Truth(unittest.TestCase):
    def test_occurrence_is_per_cat_and_name_in_start_order(self):
        occ = {(c, n, o) for c, n, o, *_ in score.with_occurrence(list(reversed(SLOW_OP)))}
        self.assertIn(("cpu_op", "aten::mm", 0), occ)
        self.assertIn(("cpu_op", "aten::mm", 1), occ)
        self.assertNotIn(("cpu_op", "aten::mm", 2), occ)

    def test_slow_op_duration_set_is_the_injected_op_and_its_enclosers(self):
        # Injected interval: 7..67 ms after the step enter (the rank's step starts at 5).
        dur, gap, coll = score.truth_sets("slow_op", SLOW_OP, [(7 * MS, 67 * MS)])
        self.assertEqual(dur, {("cpu_op", "aten::mm", 1), ("cpu_op", "layer.enc.layers.0.linear1", 0),
                               ("cpu_op", "DistributedDataParallel.forward", 0)})
        self.assertEqual(gap, set())
        self.assertEqual(coll, {("collective", "gloo:all_reduce", 0)})

    def test_data_gap_names_the_op_pushed_late(self):
        evs = [ev("ProfilerStep#31", 0, 300), ev("aten::randint", 0.1, 0.1), ev("aten::remainder", 0.3, 0.1),
               ev("DistributedDataParallel.forward", 60.6, 20), ev("aten::embedding", 60.65, 1),
               ev("aten::index_select", 60.9, 0.1), ev("gloo:all_reduce", 90, 3, cat="collective", lane="t2")]
        dur, gap, _ = score.truth_sets("data", evs, [(0.5 * MS, 60.5 * MS)])
        self.assertEqual(dur, set())  # only the step range covers the sleep
        # the first op after the gap and its child at its start; not the later ops
        self.assertEqual(gap, {("cpu_op", "DistributedDataParallel.forward", 0), ("cpu_op", "aten::embedding", 0)})

    def test_slow_link_expects_collectives(self):
        dur, gap, coll = score.truth_sets("slow_link", SLOW_OP, [])
        self.assertEqual(score.expected_set("slow_link", dur, gap, coll), {("collective", "gloo:all_reduce", 0)})
        self.assertEqual(score.truth_sets("data", [], [(0, 1)]), (set(), set(), set()))

    def test_late_collective_has_both_the_enclosing_op_and_the_gap(self):
        # the comm hook's sleep runs inside AccumulateGrad's evaluate_function, between two child ops
        evs = [ev("ProfilerStep#40", 0, 300), ev("autograd::engine::evaluate_function: AccumulateGrad", 10, 125),
               ev("aten::copy_", 10.1, 1), ev("aten::empty_strided", 131.5, 0.01), ev("aten::add_", 140, 1)]
        dur, gap, _ = score.truth_sets("late_collective", evs, [(11.2 * MS, 131.2 * MS)])
        self.assertEqual(dur, {("cpu_op", "autograd::engine::evaluate_function: AccumulateGrad", 0)})
        self.assertEqual(gap, {("cpu_op", "aten::empty_strided", 0)})
        # the compute fault has no gap set
        self.assertEqual(score.truth_sets("slow_op", evs, [(11.2 * MS, 131.2 * MS)])[1], set())


class Stages(unittest.TestCase):
    def test_stage1(self):
        rep = lambda v, s: {"rhythm": {"verdict": v, "straggler": s}}
        self.assertEqual(score.stage1(rep("straggler", 2), 2), ("straggler", 2, "correct"))
        self.assertEqual(score.stage1(rep("straggler", 1), 2), ("straggler", 1, "wrong"))
        self.assertEqual(score.stage1(rep("inconclusive", -1), 2), ("inconclusive", None, "withheld"))
        self.assertEqual(score.stage1({}, 2)[2], "withheld")
        # control run (no fault, rank -1): naming anyone is wrong, withholding right
        self.assertEqual(score.stage1(rep("inconclusive", -1), -1)[2], "correct")
        self.assertEqual(score.stage1(rep("straggler", 0), -1)[2], "wrong")
        self.assertEqual(score.classify_cause("none", -1, {"kind": "op", "rank": 0, "name": "aten::select"},
                                              set(), set(), set()), "false_culprit")
        self.assertEqual(score.stagefrontier({"groups": [{"report": {"leader_rank": -1}}]}, -1)["outcome"], "correct")

    def test_stage2_precision_recall(self):
        truth = {40: {("cpu_op", "aten::mm", 1), ("cpu_op", "layer.x", 0)}}
        rep = {"step_reports": [
            {"step": 40, "config": {"z_threshold": 3}, "outliers": [
                {"rank": 3, "cat": "cpu_op", "name": "aten::mm", "occurrence": 1, "z_dur": 40, "z_start": 0, "a": 40},
                {"rank": 3, "cat": "cpu_op", "name": "aten::relu", "occurrence": 0, "z_dur": 0.5, "z_start": 9},
                {"rank": 1, "cat": "cpu_op", "name": "aten::mm", "occurrence": 1, "z_dur": 5, "z_start": 0}]},
            {"step": 99, "outliers": [{"rank": 3, "cat": "cpu_op", "name": "aten::mm", "occurrence": 1}]}]}
        s = score.stage2(rep, 3, truth)
        self.assertEqual((s["steps"], s["truth"], s["flagged"], s["tp"]), (1, 2, 2, 1))
        self.assertAlmostEqual(s["precision"], 0.5)
        self.assertAlmostEqual(s["recall"], 0.5)
        self.assertEqual((s["flagged_dur"], s["tp_dur"]), (1, 1))
        self.assertEqual(s["rprec_hits"], 1)  # top-2 by a on rank 3: relu (a missing → 0) after mm
        self.assertAlmostEqual(s["r_precision"], 0.5)
        self.assertIsNone(score.stage2({}, 3, truth)["precision"])

    def test_classify_cause(self):
        nd, ng = {"aten::mm", "layer.x"}, {"DistributedDataParallel.forward"}
        op = lambda r, n: {"kind": "op", "rank": r, "name": n, "from_rank": -1}
        edge = lambda fr, f, r, n: {"kind": "edge", "rank": r, "name": n, "from_rank": fr, "from": f}
        cases = [
            ("slow_op", op(3, "aten::mm"), "culprit"),
            ("slow_op", op(1, "aten::mm"), "other_rank"),
            ("slow_op", op(0, "gloo:all_reduce"), "victim"),
            ("slow_op", op(3, "aten::relu"), "right_rank"),
            ("data", edge(3, "aten::remainder", 3, "DistributedDataParallel.forward"), "culprit"),
            ("data", edge(3, "aten::relu", 3, "aten::add"), "right_rank"),
            ("data", op(3, "DistributedDataParallel.forward"), "located"),
            ("slow_op", edge(3, "aten::t", 3, "aten::mm"), "located"),
            ("late_collective", edge(3, "aten::add", 3, "gloo:all_reduce"), "culprit"),
            ("late_collective", op(2, "gloo:all_reduce"), "victim"),
            ("slow_link", edge(1, "gloo:all_reduce", 3, "gloo:all_reduce"), "culprit"),
            ("slow_link", op(3, "gloo:all_reduce"), "culprit"),
            ("slow_link", op(2, "gloo:all_reduce"), "victim"),
            ("data", {"kind": "inconclusive", "rank": 3, "name": "x"}, "inconclusive"),
            ("data", None, "none"),
        ]
        for case, c, want in cases:
            self.assertEqual(score.classify_cause(case, 3, c, nd, ng, set()), want, (case, c))

    def test_stage3_top_and_per_step(self):
        rep = {"verdict": "culprit", "causes": [{"kind": "op", "rank": 3, "name": "aten::mm", "from_rank": -1}],
               "step_reports": [{"root_causes": [{"kind": "op", "rank": 3, "name": "aten::mm"}]},
                                {"root_causes": [{"kind": "op", "rank": 0, "name": "gloo:all_reduce"}]}]}
        s = score.stage3(rep, "slow_op", 3, {("cpu_op", "aten::mm", 1)}, set(), set())
        self.assertEqual(s["top_class"], "culprit")
        self.assertEqual(s["step_classes"], ["culprit", "victim"])
        self.assertAlmostEqual(s["step_culprit_rate"], 0.5)
        self.assertFalse(s["victim_named"])
        self.assertEqual((s["culprit_position"], s["located_position"], s["causes"]), (1, 1, 1))
        self.assertEqual((s["named_rank"], s["rank_class"]), (3, "right"))
        # culprit_rank asserts the rank only; on the control any named rank is wrong.
        cr = dict(rep, verdict="culprit_rank", impact={"rank": 3})
        s = score.stage3(cr, "slow_op", 3, {("cpu_op", "aten::mm", 1)}, set(), set())
        self.assertEqual((s["top_class"], s["named_rank"], s["rank_class"]), ("withheld", 3, "right"))
        self.assertEqual(score.stage3(cr, "none", 3, set(), set(), set())["rank_class"], "wrong")
        self.assertEqual(score.stage3(dict(rep, verdict="none"), "slow_op", 3, set(), set(), set())["rank_class"], "withheld")
        rep["causes"].insert(0, {"kind": "op", "rank": 0, "name": "aten::select", "from_rank": -1})
        s = score.stage3(rep, "slow_op", 3, {("cpu_op", "aten::mm", 1)}, set(), set())
        self.assertEqual((s["top_class"], s["culprit_position"]), ("other_rank", 2))
        rep["verdict"] = "inconclusive"  # a withheld report makes no claim
        s = score.stage3(rep, "slow_op", 3, {("cpu_op", "aten::mm", 1)}, set(), set())
        self.assertEqual((s["top_class"], s["top_class_any"]), ("withheld", "other_rank"))

    def test_side_by_side(self):
        sf = score.stagefrontier({"groups": [{"report": {"leader_rank": 3, "top1": "data.next_wait",
                                                         "headline": {"text": "rank 3"}}}]}, 3)
        self.assertEqual(sf["outcome"], "correct")
        self.assertEqual(score.stagefrontier({}, 3)["outcome"], "withheld")
        gh = score.greyhound({"verdict": {"kind": "slow_link", "ranks": [], "links": [{"src": 0, "dst": 3}]}},
                             "slow_link", 3)
        self.assertEqual(gh["outcome"], "correct")
        self.assertEqual(score.greyhound({"verdict": {"kind": "late_rank", "ranks": [2]}}, "data", 3)["outcome"], "wrong")
        self.assertEqual(score.agreement("correct", "correct", "correct"), "all")
        self.assertEqual(score.agreement("correct", "withheld", "correct"), "KAIR+GH")
        self.assertEqual(score.agreement("wrong", "withheld", "withheld"), "none")


class Proxy(unittest.TestCase):
    def test_trace_target(self):
        self.assertEqual(proxy.trace_target("/api/v1/jobs/j1/captures/c0123/traces?rank=2"), ("j1", "c0123", 2))
        self.assertIsNone(proxy.trace_target("/api/v1/jobs/j1/captures/c0123/traces?rank=x"))
        self.assertIsNone(proxy.trace_target("/api/v1/jobs/j1/vectors"))

    def test_upload_name(self):
        self.assertEqual(proxy.upload_name(1, "application/json", b"\x1f\x8bxx"), "rank1.json.gz")
        self.assertEqual(proxy.upload_name(1, "application/x-protobuf", b"\x0a"), "rank1.optrace.pb")
        self.assertEqual(proxy.upload_name(0, "application/json", b"[{"), "rank0.json")


if __name__ == "__main__":
    unittest.main()
