"""Unit tests of eval/incidents' pure parts (score.py, table.py and run.py's
helpers) on synthetic incident JSON in the shape of
internal/incident/incident.go (no server, no torch, no root)."""

import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "incidents"))

import score  # noqa: E402  (eval/incidents/score.py)
import table  # noqa: E402
import run  # noqa: E402

S = 1_000_000_000
T0 = 1_800_000_000 * S  # the injection instant


def target(kind, rank=0, src=0, dst=0, name=""):
    t = {"kind": kind}
    if rank:
        t["rank"] = rank
    if src:
        t["src"] = src
    if dst:
        t["dst"] = dst
    if name:
        t["name"] = name
    return t


def hyp(t, stated=True, conf="high", cat="unknown", layers=("stage",), engines=("stagefrontier",), against=()):
    """A Hypothesis as the API encodes it (zero rank omitted, like Go's
    omitempty)."""
    return {"target": t, "stated": stated, "confidence": conf, "reason": "r", "category": cat,
            "chain": [{"layer": l, "engine": engines[0], "evidence": ["e1"], "text": "t", "confidence": conf}
                      for l in layers],
            "support": ["e1"], "against": list(against), "engines": list(engines)}


def incident(iid="inc-1", state="open", hyps=(), opened_ns=T0, lost=0.0, resolved_ns=0):
    """An Incident as GET /api/v1/incidents returns it (evidence omitted)."""
    hs = list(hyps)
    stated = [h for h in hs if h["stated"]]
    cause = [score.target_key(h["target"]) for h in stated]
    inc = {"schema": "laggard.incident/v1", "id": iid, "job": "j", "incarnation": 0, "state": state,
           "opened": {"wall_ns": opened_ns, "step": 100}, "detected_ns": opened_ns + S,
           "updated": {"wall_ns": opened_ns + 5 * S, "step": 140}, "onset": ["ev-onset"], "healthy_ms": 100.0,
           "slow_ms": 220.0, "scope": {"whole": not cause}, "cause": cause,
           "category": stated[0]["category"] if stated else "unknown",
           "confidence": "high" if stated else ("low" if hs else "withheld"), "headline": "h", "hypotheses": hs,
           "lost": {"seconds": lost, "rank_seconds": lost * 4, "steps": 40}, "recommendations": [],
           "waiting": [{"kind": "kair_capture", "ranks": [2], "reason": "x", "asked": True}], "audit": [],
           "windows": {"before": {"from_step": 0, "to_step": 99}, "during": {"from_step": 100, "to_step": 140},
                       "after": {"from_step": 0, "to_step": 0}}, "evidence": None}
    if resolved_ns:
        inc["resolved"] = {"wall_ns": resolved_ns, "step": 150}
    return inc


def snap(t_ns, *incs):
    return {"t_ns": t_ns, "incidents": [score.compact(i) for i in incs]}


def C(h):
    """A compact hypothesis."""
    return score.compact(incident(hyps=[h]))["hyps"][0]


class Compact(unittest.TestCase):
    def test_keys_and_fields(self):
        inc = incident(hyps=[hyp(target("rank", rank=2), layers=("stage", "collective"), cat="communication",
                                 engines=("greyhound", "stagefrontier")),
                             hyp(target("link", src=1, dst=2), stated=False, conf="low"),
                             hyp(target("operator", rank=3, name="aten::mm"), stated=False, conf="low"),
                             hyp(target("job"), stated=False, conf="low"),
                             hyp(target("rank"), stated=False, conf="low")], lost=3.5, resolved_ns=T0 + 60 * S)
        c = score.compact(inc)
        self.assertEqual([h["target"] for h in c["hyps"]], ["rank:2", "link:1-2", "op:aten::mm@3", "job", "rank:0"])
        self.assertEqual(c["cause"], ["rank:2"])
        self.assertEqual(c["hyps"][0]["layers"], ["stage", "collective"])
        self.assertEqual(c["hyps"][0]["engines"], ["greyhound", "stagefrontier"])
        self.assertEqual(c["hyps"][4]["rank"], 0)  # rank 0: omitted in the JSON, still rank 0
        self.assertEqual((c["lost_s"], c["lost_steps"], c["resolved_ns"]), (3.5, 40, T0 + 60 * S))
        self.assertEqual(c["waiting"], ["kair_capture"])

    def test_missing_fields(self):
        c = score.compact({"id": "x"})
        self.assertEqual((c["cause"], c["hyps"], c["resolved_ns"], c["lost_s"]), ([], [], 0, 0.0))


class LocalizedExplained(unittest.TestCase):
    def ci(self, *hs):
        return score.compact(incident(hyps=hs))

    def test_table(self):
        rk = target("rank", rank=2)
        cases = [
            # hypotheses, localized, explained
            ((), False, False),
            ((hyp(rk, stated=False, conf="low", layers=("stage", "os"), cat="os"),), False, False),
            ((hyp(rk, layers=("stage",), cat="unknown"),), True, False),
            ((hyp(rk, layers=("stage",), cat="data"),), True, True),
            ((hyp(rk, layers=("stage", "collective"), cat="unknown"),), True, True),
            ((hyp(rk, layers=("network",), cat=""),), True, True),
            ((hyp(target("job"), layers=("stage",), cat="uniform"),), True, True),
        ]
        for hs, loc, expl in cases:
            with self.subTest(hs=hs):
                ci = self.ci(*hs)
                self.assertEqual(score.is_localized(ci), loc)
                self.assertEqual(score.is_explained(ci), expl)


class Judge(unittest.TestCase):
    def test_single_rank_fault(self):
        f = [score.fault("e3:data", 2, T0, None, 120)]
        cases = [
            ([], "withheld"),
            ([C(hyp(target("rank", rank=2), stated=False, conf="low"))], "withheld"),  # a suspect is not a statement
            ([C(hyp(target("rank", rank=2), cat="data"))], "right"),
            ([C(hyp(target("rank", rank=2), cat="compute"))], "right"),
            ([C(hyp(target("rank", rank=2), cat="unknown"))], "right"),  # no claim on the kind
            ([C(hyp(target("rank", rank=2), cat="network"))], "wrong"),  # right rank, wrong kind
            ([C(hyp(target("rank", rank=1), cat="data"))], "wrong"),
            ([C(hyp(target("rank", rank=2), cat="data")), C(hyp(target("rank", rank=0), cat="data"))], "wrong"),
            ([C(hyp(target("operator", rank=2, name="aten::mm"), cat="compute"))], "right"),
            ([C(hyp(target("operator", rank=1, name="aten::mm"), cat="compute"))], "wrong"),
            ([C(hyp(target("link", src=1, dst=2), cat="network"))], "wrong"),  # a link is not the rank
            ([C(hyp(target("host", name="h1"), cat="os"))], "wrong"),  # every rank shares the host
            ([C(hyp(target("job"), cat="uniform"))], "wrong"),
        ]
        for hs, want in cases:
            with self.subTest(hs=[h["target"] + "/" + h["category"] for h in hs]):
                self.assertEqual(score.judge(hs, f)[0], want)

    def test_link_fault(self):
        f = [score.fault("greyhound:link", 1, T0)]
        self.assertEqual(score.judge([C(hyp(target("link", src=0, dst=1), cat="network"))], f)[0], "right")
        self.assertEqual(score.judge([C(hyp(target("link", src=1, dst=2), cat="communication"))], f)[0], "right")
        self.assertEqual(score.judge([C(hyp(target("link", src=2, dst=3), cat="network"))], f)[0], "wrong")
        self.assertEqual(score.judge([C(hyp(target("rank", rank=1), cat="network"))], f)[0], "right")
        self.assertEqual(score.judge([C(hyp(target("rank", rank=1), cat="compute"))], f)[0], "wrong")

    def test_uniform_fault(self):
        f = [score.fault("sysom:logging", -1, T0)]
        self.assertEqual(score.judge([C(hyp(target("job"), cat="uniform"))], f)[0], "right")
        self.assertEqual(score.judge([C(hyp(target("rank", rank=0), cat="os"))], f)[0], "wrong")

    def test_control(self):
        self.assertEqual(score.judge([], [])[0], "right")
        self.assertEqual(score.judge([C(hyp(target("rank", rank=1), stated=False, conf="low"))], [])[0], "right")
        out, det = score.judge([C(hyp(target("rank", rank=1)))], [])
        self.assertEqual((out, det["wrong"]), ("wrong", ["rank:1"]))

    def test_two_faults(self):
        f = [score.fault("extra:data", 0, T0, None, 60), score.fault("extra:hog", 3, T0 + 2 * S)]
        a = C(hyp(target("rank"), cat="data"))  # rank 0
        b = C(hyp(target("rank", rank=3), cat="os"))
        merged = C(hyp(target("rank", rank=1), cat="data"))
        self.assertEqual(score.judge([a, b], f)[0], "right")
        self.assertEqual(score.judge([a], f)[0], "partial")
        self.assertEqual(score.judge([a, merged], f)[0], "wrong")
        self.assertEqual(score.judge([C(hyp(target("rank", rank=3), cat="data"))], f)[0], "wrong")  # hog called data

    def test_wrong_high(self):
        f = [score.fault("e3:data", 2, T0)]
        hs = [C(hyp(target("rank", rank=1), conf="high")), C(hyp(target("rank", rank=3), stated=False, conf="low")),
              C(hyp(target("rank", rank=2), conf="high"))]
        self.assertEqual(score.wrong_high(hs, f), ["rank:1"])
        self.assertEqual(score.wrong_high(hs, []), ["rank:1", "rank:2"])


class Milestones(unittest.TestCase):
    f = [score.fault("e3:backward_comm", 2, T0, None, 120)]

    def truth(self, faults=None):
        fs = self.f if faults is None else faults
        return {"faults": fs, "inject_ns": T0, "control": not fs}

    def test_timeline(self):
        stage_only = hyp(target("rank", rank=2), layers=("stage",), cat="unknown")
        deep = hyp(target("rank", rank=2), layers=("stage", "collective"), cat="communication",
                   engines=("greyhound",))
        snaps = [
            snap(T0 - 10 * S),  # the job before the fault: no incident
            snap(T0 + S // 2),
            snap(T0 + 3 * S, incident()),  # opened, nothing stated
            snap(T0 + 6 * S, incident(hyps=[hyp(target("rank", rank=2), stated=False, conf="low")])),
            snap(T0 + 8 * S, incident(hyps=[stage_only])),  # localized, not explained
            snap(T0 + 15 * S, incident(hyps=[deep])),  # explained
            snap(T0 + 40 * S, incident(state="recovering", hyps=[deep])),
            snap(T0 + 170 * S, incident(state="resolved", hyps=[deep], resolved_ns=T0 + 40 * S)),
        ]
        m = score.milestones(snaps, self.truth())
        self.assertEqual((m["opened_total"], m["opened_pre"], m["opened_post"]), (1, 0, 1))
        self.assertEqual((m["opened_s"], m["localized_s"], m["explained_s"]), (3.0, 8.0, 15.0))
        self.assertEqual((m["localized_right_s"], m["explained_right_s"]), (8.0, 15.0))
        self.assertEqual((m["recovering_s"], m["resolved_s"], m["observed_s"]), (40.0, 170.0, 170.0))
        self.assertEqual((m["wrong_ever"], m["wrong_high"]), ([], []))

    def test_job_stopped_is_not_a_recovery(self):
        stopped = incident(state="resolved", resolved_ns=T0 + 30 * S)
        stopped["resolved_by"] = "job_stopped"
        m = score.milestones([snap(T0 + 2 * S, incident()), snap(T0 + 31 * S, stopped)], self.truth())
        self.assertEqual((m["opened_s"], m["recovering_s"], m["resolved_s"]), (2.0, None, None))

    def test_wrong_then_corrected(self):
        wrong = hyp(target("rank", rank=1), cat="compute")
        right = hyp(target("rank", rank=2), cat="communication", layers=("collective",))
        snaps = [snap(T0 + 2 * S, incident(hyps=[wrong])), snap(T0 + 9 * S, incident(hyps=[right]))]
        m = score.milestones(snaps, self.truth())
        self.assertEqual(m["localized_s"], 2.0)  # a cause was stated at 2 s …
        self.assertEqual(m["localized_right_s"], 9.0)  # … the right one at 9 s
        self.assertEqual(m["wrong_high"], ["rank:1"])  # and the wrong one is counted, though corrected
        self.assertEqual(score.score_run({"truth": self.truth(), "watch": {"snapshots": snaps}})["outcome"], "right")

    def test_false_onset_before_the_injection(self):
        pre = incident("inc-pre", opened_ns=T0 - 20 * S)
        gone = incident("inc-gone", opened_ns=T0 - 300 * S, state="resolved", resolved_ns=T0 - 200 * S,
                        hyps=[hyp(target("rank", rank=0))])
        snaps = [snap(T0 - 250 * S, gone), snap(T0 - 5 * S, gone, pre),
                 snap(T0 + 4 * S, gone, incident("inc-pre", opened_ns=T0 - 20 * S, hyps=[hyp(target("rank", rank=2))]))]
        m = score.milestones(snaps, self.truth())
        self.assertEqual((m["opened_total"], m["opened_pre"], m["opened_post"]), (2, 2, 0))
        self.assertIsNone(m["opened_s"])  # no incident opened for the fault …
        self.assertEqual(m["localized_s"], 4.0)  # … the open one absorbed it and states it
        self.assertEqual(m["wrong_high"], [])  # the incident resolved before the fault is not about it
        r = score.score_run({"truth": self.truth(), "watch": {"snapshots": snaps}})
        self.assertEqual((r["outcome"], r["incidents_ok"]), ("right", False))

    def test_control(self):
        snaps = [snap(T0 - 5 * S), snap(T0 + 30 * S)]
        r = score.score_run({"truth": self.truth([]), "watch": {"snapshots": snaps}})
        self.assertEqual((r["outcome"], r["incidents_ok"], r["opened_total"]), ("right", True, 0))
        snaps.append(snap(T0 + 35 * S, incident(hyps=[hyp(target("rank", rank=1), stated=False, conf="low")])))
        r = score.score_run({"truth": self.truth([]), "watch": {"snapshots": snaps}})
        self.assertEqual((r["outcome"], r["incidents_ok"], r["opened_total"]), ("right", False, 1))

    def test_two_faults_two_incidents(self):
        f = [score.fault("extra:data", 0, T0, None, 60), score.fault("extra:hog", 3, T0 + 2 * S)]
        a = incident("inc-a", hyps=[hyp(target("rank"), cat="data")], lost=2.0)
        b = incident("inc-b", hyps=[hyp(target("rank", rank=3), cat="os", layers=("os",))], lost=1.0)
        snaps = [snap(T0 + 3 * S, a), snap(T0 + 7 * S, a, b)]
        r = score.score_run({"truth": self.truth(f) | {"steps_in_fault": 50}, "watch": {"snapshots": snaps}})
        self.assertEqual((r["outcome"], r["incidents_ok"], r["localized_right_s"]), ("right", True, 7.0))
        self.assertEqual((r["lost_s"], r["expected_lost_s"], r["expected_basis"]), (3.0, None, None))


class Lost(unittest.TestCase):
    def test_expected(self):
        f1 = [score.fault("e3:data", 2, T0, None, 120)]
        self.assertEqual(score.expected_lost(f1, 100), (12.0, "nominal"))
        f2 = [score.fault("greyhound:hog", 1, T0)]
        self.assertEqual(score.expected_lost(f2, 100, 100.0, 130.0), (3.0, "measured"))
        self.assertEqual(score.expected_lost(f2, 100, 100.0, 90.0), (None, None))
        self.assertEqual(score.expected_lost(f2, 0, 100.0, 130.0), (None, None))

    def test_ratio(self):
        truth = {"faults": [score.fault("e3:data", 2, T0, None, 100)], "inject_ns": T0, "steps_in_fault": 50}
        snaps = [snap(T0 + S, incident(lost=4.0))]
        r = score.score_run({"truth": truth, "watch": {"snapshots": snaps}})
        self.assertEqual((r["lost_s"], r["expected_lost_s"], r["lost_ratio"]), (4.0, 5.0, 0.8))


class Material(unittest.TestCase):
    def test_no_slowdown_wants_no_incident_or_one(self):
        truth = {"faults": [score.fault("sysom:vfs", 2, T0)], "inject_ns": T0, "base_ms": 100.0, "fault_ms": 104.0}
        r = score.score_run({"truth": truth, "watch": {"snapshots": [snap(T0 + S)]}})
        self.assertEqual((r["slowdown"], r["material"], r["incidents_ok"]), (0.04, False, True))
        self.assertIsNone(r["lost_ratio"])  # no ratio to a slowdown that is noise
        truth["fault_ms"] = 130.0
        r = score.score_run({"truth": truth, "watch": {"snapshots": [snap(T0 + S)]}})
        self.assertEqual((r["slowdown"], r["material"], r["incidents_ok"]), (0.3, True, False))
        del truth["fault_ms"]  # unknown: treated as a slowdown
        r = score.score_run({"truth": truth, "watch": {"snapshots": [snap(T0 + S, incident())]}})
        self.assertEqual((r["slowdown"], r["material"], r["incidents_ok"]), (None, True, True))


class Horizon(unittest.TestCase):
    def test_steps_until(self):
        ends = [T0 + k * S // 10 for k in range(1, 101)]  # a step every 100 ms for 10 s
        truth = {"inject_ns": T0, "fault_step_ends": ends, "steps_in_fault": 100, "fault_ms": 100.0}
        self.assertEqual(score.steps_until(truth, T0 + 4 * S), 40)
        self.assertEqual(score.steps_until(dict(truth, end_ns=T0 + 2 * S), T0 + 4 * S), 20)  # the fault ended
        self.assertEqual(score.steps_until(truth, T0 + 12 * S), 120)  # 2 s past the logged tail at 100 ms
        self.assertEqual(score.steps_until(truth, 0), 100)
        self.assertEqual(score.steps_until({"steps_in_fault": 7}, T0 + S), 7)

    def test_lost_ratio_at_the_incidents_horizon(self):
        ends = [T0 + k * S // 10 for k in range(1, 301)]  # 30 s of 100 ms steps
        truth = {"faults": [score.fault("e3:data", 2, T0, None, 100)], "inject_ns": T0, "fault_step_ends": ends,
                 "steps_in_fault": 300}
        inc = incident(lost=1.0)
        inc["updated"] = {"wall_ns": T0 + 10 * S, "step": 200}  # the incident's lost time covers 10 s
        r = score.score_run({"truth": truth, "watch": {"snapshots": [snap(T0 + 30 * S, inc)]}})
        self.assertEqual((r["expected_steps"], r["expected_lost_s"], r["lost_ratio"]), (100, 10.0, 0.1))


class Percentile(unittest.TestCase):
    def test_unreached_counts_as_infinite(self):
        self.assertEqual(score.percentile([3.0, 1.0, 2.0], 50), 2.0)
        self.assertEqual(score.percentile([1.0, None, 2.0, 4.0], 50), 2.0)
        self.assertEqual(score.percentile([1.0, None], 90), math.inf)
        self.assertIsNone(score.percentile([], 50))


def row(family, seed=1, outcome="right", engines=None, control=False, **kw):
    r = {"family": family, "seed": seed, "outcome": outcome, "control": control, "engines": engines or {},
         "fault_kinds": [] if control else ["rank"],
         "opened_total": 0 if control else 1, "incidents_ok": True, "wrong_high": [], "opened_s": 2.0,
         "localized_s": 5.0, "explained_s": 12.0, "localized_right_s": 5.0, "explained_right_s": 12.0,
         "lost_ratio": 1.0, "absorbed": False}
    r.update(kw)
    return r


class Table(unittest.TestCase):
    def test_best_engine(self):
        rows = [row("e3:data", engines={"stagefrontier": "right", "greyhound": "withheld", "sysom": None}),
                row("e3:data", 2, engines={"stagefrontier": "right", "greyhound": "right"})]
        self.assertEqual(table.best_engine(rows), (2, ["stagefrontier"]))
        self.assertEqual(table.best_engine([row("x:y")]), (None, []))

    def test_group(self):
        rows = [row("e3:backward_comm", outcome="right", engines={"stagefrontier": "withheld", "greyhound": "right"},
                    absorbed=True),
                # SF withheld as absorbed, but no collective analysis ran: not the class
                row("sysom:hog", outcome="withheld", absorbed=True, engines={"sysom": "right", "greyhound": None}),
                row("e3:backward_comm", 2, outcome="withheld", localized_s=None, explained_s=None,
                    localized_right_s=None, explained_right_s=None, engines={"greyhound": "right"}, absorbed=True),
                row("kair:none", control=True, incidents_ok=True),
                row("kair:slow_link", fault_kinds=["link"], absorbed=True),
                row("greyhound:hog", outcome="wrong", wrong_high=["rank:0"], localized_right_s=None,
                    explained_right_s=None, engines={"greyhound": "wrong"}),
                row("sysom:vfs", outcome="withheld", material=False, localized_right_s=None, explained_right_s=None)]
        g = {s["family"]: s for s in table.group(rows)}
        bc = g["e3:backward_comm"]
        self.assertEqual((bc["runs"], bc["right"], bc["withheld"], bc["best_right"], bc["fused_ge_best"]),
                         (2, 1, 1, 2, False))
        self.assertEqual((bc["localized_s_p50"], bc["localized_s_p90"]), (5.0, math.inf))
        self.assertEqual((bc["loc10"], bc["expl20"]), (1, 1))
        self.assertEqual(g[table.ABSORBED]["runs"], 2)
        self.assertEqual((g["all faults"]["runs"], g["all controls"]["runs"]), (6, 1))
        self.assertEqual((g["all faults"]["material"], g["all faults"]["loc10"]), (5, 3))  # vfs did not slow the job
        self.assertEqual([s["family"] for s in table.group(rows)][:4],
                         ["e3:backward_comm", "greyhound:hog", "sysom:hog", "sysom:vfs"])
        self.assertEqual(g["greyhound:hog"]["wrong_high"], 1)
        self.assertTrue(g["greyhound:hog"]["fused_ge_best"])  # 0 right ≥ 0 right
        md = table.render_summary(table.group(rows))
        self.assertIn("never", md)
        self.assertIn("**no**", md)
        t = table.targets(table.group(rows))
        self.assertIn("not on e3:backward_comm, sysom:hog", t)
        self.assertIn("1 runs (target 0)", t)


class RunHelpers(unittest.TestCase):
    def test_step_stats(self):
        # the slowest rank's step ends every 100 ms, then every 150 ms from the injection
        ends, t = {}, T0 - 10 * S
        for s in range(300):
            t += (100 if t < T0 else 150) * 1_000_000
            ends[s] = t
        base, flt, n = run.step_stats(ends, T0)
        self.assertEqual((base, flt), (100.0, 150.0))
        self.assertEqual(n, sum(1 for e in ends.values() if e >= T0))
        # a fault window that ends: only its steps
        _, _, n2 = run.step_stats(ends, T0, end_ns=T0 + 3 * S)
        self.assertEqual(n2, 21)  # ends at T0+0.1 … T0+3.0 s, and the step that started before T0+3 s
        # the job stopped 3 s after its last logged step: 20 more steps at 150 ms
        _, _, n3 = run.step_stats(ends, T0, stop_ns=ends[299] + 3 * S)
        self.assertEqual(n3, n + 20)

    def test_truth_ends(self):
        import tempfile
        d = tempfile.mkdtemp()
        a, b = os.path.join(d, "t0"), os.path.join(d, "t1")
        with open(a, "w") as f:
            f.write('{"rank":0,"step":0,"start_ns":1,"end_ns":10}\n{"rank":0,"step":1,"start_ns":10,"end_ns":20}\n{"rank"')
        with open(b, "w") as f:
            f.write('{"rank":1,"step":0,"start_ns":2,"end_ns":12}\n')
        self.assertEqual(run.truth_ends([a, b, os.path.join(d, "missing")]), {0: 12, 1: 20})

    def test_engine_outcomes(self):
        f = [score.fault("e3:data", 2, T0)]
        self.assertEqual(run.sf_outcome({"leader_rank": 2}, f), "right")
        self.assertEqual(run.sf_outcome({"leader_rank": -1, "withheld": "absorbed_in_stage"}, f), "withheld")
        self.assertEqual(run.sf_outcome({"leader_rank": 0}, f), "wrong")
        self.assertEqual(run.sf_outcome({"leader_rank": 0}, []), "wrong")
        self.assertIsNone(run.sf_outcome(None, f))
        v = {"kind": "late_rank", "ranks": [2], "links": []}
        self.assertEqual(run.gh_outcome({"verdict": v}, f, "sleep"), "right")
        self.assertEqual(run.gh_outcome({"verdict": None}, f, "sleep"), "withheld")
        two = f + [score.fault("extra:hog", 3, T0)]
        self.assertEqual(run.gh_outcome({"verdict": v}, two, "sleep"), "partial")
        self.assertEqual(run.gh_outcome({"verdict": {"kind": "slow_rank", "ranks": [2, 3]}}, two, "sleep"), "right")

    def test_during(self):
        ev = [{"t_ns": T0 - 5 * S, "engine": "stagefrontier", "summary": {"leader_rank": -1}, "until_ns": T0 + S},
              {"t_ns": T0 + 10 * S, "engine": "stagefrontier", "summary": {"leader_rank": 2}},
              {"t_ns": T0 + 50 * S, "engine": "stagefrontier", "summary": {"leader_rank": -1}}]
        self.assertEqual(run.during(ev, "stagefrontier", T0, T0 + 30 * S), {"leader_rank": 2})
        self.assertEqual(run.during(ev, "stagefrontier", T0, T0 + 5 * S), {"leader_rank": -1})
        self.assertIsNone(run.during(ev, "greyhound", T0, None))

    def test_two_fault_ranks(self):
        for seed in range(20):
            a, b = run.two_fault_ranks(seed)
            self.assertNotEqual(a, b)
            self.assertTrue(0 <= a < 4 and 0 <= b < 4)

    def test_has_flag(self):
        text = "Flags:\n  -addr string\n    \tlisten address\n  -detect-interval duration\n    \thow often\n"
        self.assertTrue(run.has_flag(text, "-detect-interval"))
        self.assertFalse(run.has_flag(text, "-detect"))


if __name__ == "__main__":
    unittest.main()
