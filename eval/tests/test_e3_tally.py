"""The E3 harness's tallying, checked against hand-written frontier.Report
JSON (the ranking itself belongs to the Go engine, not to this harness)."""

import json
import os
import stat
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import e3_routing as e3  # noqa: E402

DATA, FWD, BWD, CB = e3.DATA, e3.FWD, e3.BWD, e3.CB


def load(name):
    with open(os.path.join(HERE, "testdata", name)) as f:
        return json.load(f)


def row(report, family, ranks=4, seed=0, delay=120.0, p50=200.0, hidden=2):
    expected = e3.FAMILIES[family][1]
    return {"ranks": ranks, "seed": seed, "family": family, "delay_ms": delay, "expected": expected,
            "hidden_rank": hidden, "leader_rank": report.get("leader_rank"), "p50_ms": p50,
            "share": e3.stage_share(report, expected), "scores": e3.score_row(report, expected), "job": "j"}


class ScoreRowTest(unittest.TestCase):
    def test_data_hit_all_methods(self):
        s = e3.score_row(load("report_data_hit.json"), DATA)
        self.assertEqual(set(s), set(e3.METHOD_ORDER))
        sf = s["stagefrontier"]
        self.assertEqual((sf["top1"], sf["top2"], sf["hit"], sf["size"], sf["exact"]), (True, True, True, 2, True))
        mx = s["per_stage_max"]
        self.assertEqual((mx["top1"], mx["top2"], mx["hit"], mx["exact"]), (False, True, True, False))
        self.assertEqual(mx["routed_to"], BWD)
        self.assertEqual((s["rank_spread"]["top1"], s["rank_spread"]["size"]), (True, 3))
        self.assertFalse(s["slowest_rank_breakdown"]["hit"])
        # slowest-rank total equals the exposed makespan on this row.
        self.assertTrue(s["slowest_rank_breakdown"]["exact"])
        self.assertEqual((s["rank0_local"]["top2"], s["rank0_local"]["hit"]), (False, True))

    def test_raw_only_share_and_miss(self):
        rep = load("report_rawonly_miss.json")
        self.assertAlmostEqual(e3.stage_share(rep, CB), 0.1)
        self.assertIsNone(e3.stage_share(rep, "no.such.stage"))
        s = e3.score_row(rep, CB)
        self.assertEqual(set(s), {"stagefrontier"})
        sf = s["stagefrontier"]
        self.assertEqual((sf["top1"], sf["top2"], sf["hit"], sf["size"], sf["exact"]), (False, False, False, 3, False))

    def test_share_from_share_vector(self):
        self.assertEqual(e3.stage_share(load("report_data_hit.json"), BWD), 0.175)


class TallyTest(unittest.TestCase):
    def setUp(self):
        hit, miss = load("report_data_hit.json"), load("report_rawonly_miss.json")
        self.rows = [
            row(hit, "data", seed=0), row(hit, "data", seed=1, p50=100.0),
            row(miss, "forward_host", seed=0),
            row(miss, "callback_host", seed=0),  # control: excluded from Table 4
            row(hit, "data", seed=0, delay=30.0),  # sweep: excluded from Table 4
        ]

    def test_scenarios(self):
        scen, _, _, _ = e3.tally(self.rows, 120.0)
        keys = [(c["family"], c["ranks"], c["delay_ms"]) for c in scen]
        self.assertEqual(keys, [("data", 4, 30.0), ("data", 4, 120.0), ("forward_host", 4, 120.0),
                                ("callback_host", 4, 120.0)])
        d = scen[1]
        self.assertEqual((d["rows"], d["top1"], d["top2"], d["hit"], d["cand_size"]), (2, 2, 2, 2, 2))
        self.assertAlmostEqual(d["delay_p50"], (120 / 200 + 120 / 100) / 2)
        self.assertEqual(d["rank_hit"], 2)  # leader_rank 2 == hidden 2
        self.assertAlmostEqual(d["share"], 0.75)
        b = scen[2]
        self.assertEqual((b["top1"], b["top2"], b["hit"], b["cand_size"], b["rank_hit"]), (0, 0, 1, 3, 0))

    def test_table4_over_sync_bearing_default_delay_rows(self):
        _, t4, _, _ = e3.tally(self.rows, 120.0)
        self.assertEqual([t["key"] for t in t4], e3.METHOD_ORDER)
        sf = t4[0]
        self.assertEqual((sf["method"], sf["n"], sf["top1"], sf["top2"], sf["hit"]), ("StageFrontier", 3, 2, 2, 3))
        self.assertFalse(sf["exact"])  # the raw-only row's telescope error is not round-off
        self.assertAlmostEqual(sf["avg_cand"], 7 / 3)
        self.assertEqual(sf["max_cand"], 3)
        mx = t4[1]
        self.assertEqual((mx["n"], mx["top1"], mx["top2"]), (2, 0, 2))  # baselines only where reported

    def test_control_and_curve(self):
        _, _, control, curve = e3.tally(self.rows, 120.0)
        self.assertEqual(len(control), 1)
        c = control[0]
        self.assertEqual((c["rows"], c["routed_to_callback"], c["callback_in_candidates"]), (1, 0, 0))
        self.assertEqual(c["top1_stages"], BWD + ":1")
        self.assertAlmostEqual(c["callback_share"], 0.1)
        self.assertEqual([(x["family"], x["delay_ms"]) for x in curve], [("data", 30.0), ("data", 120.0)])

    def test_render_and_csv(self):
        scen, t4, control, curve = e3.tally(self.rows, 120.0)
        text = e3.render(scen, t4, control, curve)
        self.assertIn("| StageFrontier | no | 2/3 | 2/3 | 3/3 | 2.33 | 3 |", text)
        self.assertIn("| Data | 4 | 120 ms | 0.90 | 2 | 2/2 | 2/2 | 2/2 | 2.00 | 0.750 | 2/2 |", text)
        path = os.path.join(tempfile.mkdtemp(), "rows.csv")
        flat = e3.flat_rows(self.rows)
        e3.write_csv(path, flat, list(flat[0]))
        with open(path) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1 + len(flat))
        self.assertTrue(lines[0].startswith("ranks,seed,family"))


class PlumbingTest(unittest.TestCase):
    def test_analyze_invokes_cli_with_window(self):
        d = tempfile.mkdtemp()
        argv_file = os.path.join(d, "argv")
        fake = os.path.join(d, "fake-laggard")
        job_report = os.path.join(d, "job.json")
        with open(job_report, "w") as f:
            json.dump({"schema_version": e3.REPORT_SCHEMA, "groups": [{"report": load("report_data_hit.json")}]}, f)
        with open(fake, "w") as f:
            f.write('#!/bin/sh\necho "$@" > %s\ncat %s\n' % (argv_file, job_report))
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IEXEC)
        rep = e3.analyze([fake], {"from_step": 10, "to_step": 49, "file": "/x/y.jsonl"}, 0.8)
        self.assertEqual(rep["top1"], DATA)
        with open(argv_file) as f:
            self.assertEqual(f.read().split(), ["analyze", "--json", "--from", "10", "--to", "49", "--tau", "0.8",
                                                "/x/y.jsonl"])

    def test_analyze_failure_is_reported(self):
        with self.assertRaises(RuntimeError):
            e3.analyze(["false"], {"from_step": 1, "to_step": 2, "file": "/nonexistent"}, None)

    def test_p50_uses_slowest_rank_per_step_in_window(self):
        path = os.path.join(tempfile.mkdtemp(), "m.jsonl")
        with open(path, "w") as f:
            f.write('{"job":{"id":"m","world_size":2}}\n')
            for step, walls in ((0, (999, 1)), (1, (10, 30)), (2, (20, 5)), (3, (40, 40))):
                for r, w in enumerate(walls):
                    f.write(json.dumps({"step": step, "rank": r, "durations_ms": [w], "wall_ms": w}) + "\n")
        self.assertEqual(e3.p50_step_ms(path, 1, 3), 30)

    def test_phase_spec_and_hidden_rank(self):
        spec = e3.phase_spec(["data", "backward"], 120, 50, [12, 120, 180], ["data"])
        self.assertEqual(spec, "none@120:50,data@120:50,backward@120:50,data@12:50,data@180:50")
        ranks = {e3.hidden_rank(8, s) for s in range(20)}
        self.assertTrue(ranks <= set(range(8)) and len(ranks) > 1)
        self.assertEqual(e3.hidden_rank(8, 3), e3.hidden_rank(8, 3))


if __name__ == "__main__":
    unittest.main()


class JobReportTest(unittest.TestCase):
    def test_engine_report_unwraps_v2(self):
        rep = load("report_data_hit.json")
        self.assertIs(e3.engine_report({"schema_version": e3.REPORT_SCHEMA, "groups": [{"report": rep}]}), rep)

    def test_engine_report_rejects_other_shapes(self):
        with self.assertRaises(ValueError):
            e3.engine_report(load("report_data_hit.json"))  # a bare v1 engine report
        with self.assertRaises(ValueError):
            e3.engine_report({"schema_version": e3.REPORT_SCHEMA, "groups": [{}, {}]})


class RankTallyTest(unittest.TestCase):
    def test_right_withheld_wrong(self):
        base = load("report_data_hit.json")
        rows = []
        for leader in (2, -1, 3):
            rep = dict(base, leader_rank=leader)
            rows.append(row(rep, "data", seed=len(rows)))
        scen, _, _, _ = e3.tally(rows, 120.0)
        d = [c for c in scen if c["family"] == "data"][0]
        self.assertEqual((d["rank_hit"], d["rank_withheld"], d["rank_wrong"]), (1, 1, 1))
