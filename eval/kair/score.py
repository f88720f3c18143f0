"""Scoring of one KAIR evaluation run (pure functions; unit-tested in
eval/tests/test_kair_score.py). Definitions are in eval/kair/README.md.

Inputs are the server's own answers (GET …/kair, …/kair/timeline,
…/report, …/greyhound) and the demo's ground truth (--fault-log: the
hidden rank's injected intervals per step, time_ns).
"""

CASES = {
    # case: (demo fault, what the truth is)
    "slow_op": "forward_compute",
    "late_collective": "backward_comm",
    "data": "data",
    "slow_link": "none",  # tc on the hidden rank's veth; the demo itself runs clean
    "none": "none",  # control: no fault; a manual capture at the "onset" step
}

DAG_CATS = ("cpu_op", "gpu_kernel", "memcpy", "memset", "collective", "runtime", "other")
STEP_PREFIX = "ProfilerStep#"
TOL_NS = 2_000_000  # 2 ms: step-enter (time_ns) vs the trace's step start
SLEEP_CASES = ("data", "late_collective")  # the injection is idle host time: a gap in profiled activity
GAP_NEST_NS = 100_000  # ops nested in the first op after a gap and starting ≤ 0.1 ms after it


def is_collective(name, cat=""):
    n = name or ""
    return cat == "collective" or n.startswith(("gloo:", "nccl:", "c10d::")) or n == "record_param_comms"


def rank_events(timeline, rank):
    """The rank's events in one /kair/timeline answer, or []."""
    for r in (timeline or {}).get("ranks") or []:
        if r.get("rank") == rank:
            return r.get("events") or []
    return []


def with_occurrence(events):
    """[(cat, name, occ, start, end, lane)] for the DAG events of one rank's
    step, occ = index among same (cat, name) in start order — the engine's
    instance key (engine/kair dag.go groupInstances)."""
    evs = [e for e in events if e.get("cat") in DAG_CATS]
    order = sorted(range(len(evs)), key=lambda i: (evs[i]["start_ns"], i))
    seen, out = {}, []
    for i in order:
        e = evs[i]
        k = (e["cat"], e["name"])
        occ = seen.get(k, 0)
        seen[k] = occ + 1
        out.append((e["cat"], e["name"], occ, e["start_ns"], e["start_ns"] + e.get("dur_ns", 0), e.get("lane", "")))
    return out


def truth_sets(case, events, intervals):
    """Injected operator instances of the hidden rank in one step.

    events: the hidden rank's timeline events of the step (start_ns on the
    timeline's axis); intervals: [(t0_rel, t1_rel)] the injected intervals
    relative to the rank's step start (ns). Returns (dur, gap, coll):
    dur  — instances whose own interval covers ≥ 50% of an injected
           interval (their duration carries the fault), ProfilerStep ranges
           excluded (they span every step on every rank);
    gap  — for the sleep cases (data, late_collective: the injection is
           idle host time, a gap in profiled activity even when an
           enclosing range spans it): the first op on the main lane that
           starts at or after the interval's end (− 2 ms), i.e. the op the
           gap pushed late (ties: the outermost), with the ops nested in it
           that start ≤ 0.1 ms after it (its first children, which a blame
           edge may name instead);
    coll — the rank's collective instances (slow_link's truth).
    Each is a set of (cat, name, occ)."""
    inst = with_occurrence(events)
    if not inst:
        return set(), set(), set()
    s0 = min(e["start_ns"] for e in events)
    lanes = {}
    for x in inst:
        lanes[x[5]] = lanes.get(x[5], 0) + 1
    main = max(lanes, key=lambda k: lanes[k])
    dur, gap = set(), set()
    for t0, t1 in intervals:
        a, b = s0 + t0, s0 + t1
        need = 0.5 * max(b - a, 1)
        cover = {(c, n, o) for c, n, o, s, e, _ in inst
                 if not n.startswith(STEP_PREFIX) and min(e, b) - max(s, a) >= need}
        dur |= cover
        if case in SLEEP_CASES:
            after = [x for x in inst if x[5] == main and x[3] >= b - TOL_NS and not x[1].startswith(STEP_PREFIX)]
            if after:
                # the first op (ties: the longest, i.e. the outermost) and
                # the ops nested in it that start right at its start
                f = min(after, key=lambda x: (x[3], -(x[4] - x[3])))
                gap |= {(x[0], x[1], x[2]) for x in after
                        if x[3] <= f[3] + GAP_NEST_NS and x[4] <= f[4]}
    coll = {(c, n, o) for c, n, o, *_ in inst if is_collective(n, c)}
    return dur, gap, coll


def expected_set(case, dur, gap, coll):
    if case == "slow_link":
        return set(coll)
    return set(dur) | set(gap)


def stage1(report, rank):
    """KAIR Stage 1 on the run: (verdict, named rank or None, outcome) with
    outcome correct / wrong / withheld."""
    rh = (report or {}).get("rhythm") or {}
    verdict = rh.get("verdict") or "missing"
    named = rh.get("straggler") if verdict == "straggler" else None
    if rank is None or rank < 0:  # control: naming any rank is wrong
        return verdict, named if named is not None and named >= 0 else None, \
            "wrong" if named is not None and named >= 0 else "correct"
    if named is None or named < 0:
        return verdict, None, "withheld"
    return verdict, named, "correct" if named == rank else "wrong"


def stage2(report, rank, truth_by_step, zthr=None):
    """Precision/recall of Stage 2 outliers on the hidden rank over the
    analysed steps that have truth. truth_by_step: {step: set((cat,name,occ))}.
    Returns dict with tp, flagged, truth, precision, recall, the same for
    duration-flagged outliers (|z_dur| > threshold), and R-precision (of
    the rank's |truth| highest-a outliers per step, the injected share)."""
    tp = fl = tr = tpd = fld = rp = 0
    steps = 0
    for sr in (report or {}).get("step_reports") or []:
        s = sr.get("step")
        if s not in truth_by_step:
            continue
        truth = truth_by_step[s]
        thr = zthr if zthr is not None else ((sr.get("config") or {}).get("z_threshold") or 3.0)
        steps += 1
        tr += len(truth)
        mine = [o for o in sr.get("outliers") or [] if o.get("rank") == rank]
        # R-precision: of the rank's |truth| highest-a outliers, how many are injected.
        top = sorted(mine, key=lambda o: -(o.get("a") or 0.0))[:len(truth)]
        rp += sum(1 for o in top if (o.get("cat"), o.get("name"), o.get("occurrence")) in truth)
        for o in mine:
            key = (o.get("cat"), o.get("name"), o.get("occurrence"))
            hit = key in truth
            fl += 1
            tp += hit
            if abs(o.get("z_dur") or 0.0) > thr:
                fld += 1
                tpd += hit
    rec = (tp / tr) if tr else None
    return {"steps": steps, "truth": tr, "flagged": fl, "tp": tp, "precision": (tp / fl) if fl else None,
            "recall": rec, "flagged_dur": fld, "tp_dur": tpd, "precision_dur": (tpd / fld) if fld else None,
            "rprec_hits": rp, "r_precision": (rp / tr) if tr else None}


def classify_cause(case, rank, cause, names_dur, names_gap, names_coll):
    """One root cause → culprit / located / right_rank / victim /
    other_rank / inconclusive / none. located: names the injected op or
    the op right after the injected gap on F, but as the other kind (an
    op that "ran long" where the truth is a gap, or vice versa). names_*: op names of the truth sets on the hidden rank."""
    if not cause:
        return "none"
    if case == "none":  # control: any op/edge blamed is a false culprit
        return "inconclusive" if cause.get("kind") == "inconclusive" else "false_culprit"
    kind = cause.get("kind")
    r, fr = cause.get("rank"), cause.get("from_rank", -1)
    name, frm = cause.get("name") or "", cause.get("from") or ""
    if kind == "inconclusive":
        return "inconclusive"
    if case == "slow_link":
        if kind == "edge" and rank in (r, fr) and (is_collective(name) or is_collective(frm)):
            return "culprit"
        if kind == "op" and r == rank and is_collective(name):
            return "culprit"
    elif kind == "op":
        if r == rank and name in names_dur:
            return "culprit"
    elif kind == "edge":
        if r == rank and (name in names_gap or (case == "late_collective" and is_collective(name))):
            return "culprit"
    if r == rank and (name in names_dur or name in names_gap):
        return "located"  # the injected place, but the wrong mechanism (op vs edge)
    if kind == "op" and is_collective(name) and r != rank:
        return "victim"  # e.g. the AllReduce that merely waited
    if case != "slow_link" and kind == "op" and is_collective(name):
        return "victim"
    if r == rank or fr == rank:
        return "right_rank"
    return "other_rank"


def stage3(report, case, rank, dur, gap, coll):
    """Top root cause over the analysed steps (TraceReport.causes[0]) and
    per-step top causes: hit rates."""
    nd = {n for _, n, _ in dur}
    ng = {n for _, n, _ in gap}
    nc = {n for _, n, _ in coll}
    causes = (report or {}).get("causes") or []
    top = causes[0] if causes else None
    verdict = (report or {}).get("verdict")
    top_any = classify_cause(case, rank, top, nd, ng, nc)
    # The report asserts its top cause only with verdict "culprit"; otherwise
    # it withholds (inconclusive / none) and the top cause is not a claim.
    # culprit_rank (issue 16 item 7c): the rank is asserted, the op is one of
    # the listed candidates; rank_class scores the rank either verdict names.
    named = None
    if verdict in ("culprit", "culprit_rank"):
        named = ((report or {}).get("impact") or {}).get("rank", top.get("rank") if top else None)
    rank_class = "withheld" if named is None else ("right" if case != "none" and named == rank else "wrong")
    out = {"verdict": verdict, "top": summarize_cause(top), "top_class_any": top_any,
           "named_rank": named, "rank_class": rank_class,
           "impact": (report or {}).get("impact"),
           "top_class": top_any if verdict == "culprit" else "withheld",
           "top_name": None if not top else ("%s → %s" % (top.get("from"), top.get("name")) if top.get("kind") == "edge"
                                             else top.get("name"))}
    per = []
    for sr in (report or {}).get("step_reports") or []:
        rc = sr.get("root_causes") or []
        per.append(classify_cause(case, rank, rc[0] if rc else None, nd, ng, nc))
    out["step_classes"] = per
    out["step_culprit_rate"] = (sum(1 for c in per if c == "culprit") / len(per)) if per else None
    out["victim_named"] = any(classify_cause(case, rank, c, nd, ng, nc) == "victim" for c in causes[:3])
    # 1-based position of the first culprit (and of the first culprit-or-located) in the ranked causes.
    cls = [classify_cause(case, rank, c, nd, ng, nc) for c in causes]
    out["culprit_position"] = cls.index("culprit") + 1 if "culprit" in cls else None
    loc = [i for i, c in enumerate(cls) if c in ("culprit", "located")]
    out["located_position"] = loc[0] + 1 if loc else None
    out["causes"] = len(causes)
    return out


def summarize_cause(c):
    if not c:
        return None
    if c.get("kind") == "edge":
        return "edge rank %s %s -> rank %s %s" % (c.get("from_rank"), c.get("from"), c.get("rank"), c.get("name"))
    return "%s rank %s %s" % (c.get("kind"), c.get("rank"), c.get("name"))


def stagefrontier(job_report, rank):
    """StageFrontier on the same run: the one role group's report."""
    groups = (job_report or {}).get("groups") or []
    rep = (groups[0].get("report") if groups else None) or {}
    lr = rep.get("leader_rank", -1)
    head = rep.get("headline") or {}
    if rank is None or rank < 0:
        outcome = "wrong" if lr is not None and lr >= 0 else "correct"
    else:
        outcome = "withheld" if lr is None or lr < 0 else ("correct" if lr == rank else "wrong")
    return {"leader_rank": lr, "top1": rep.get("top1"), "outcome": outcome,
            "headline": head.get("text") if isinstance(head, dict) else str(head)}


def greyhound(report, case, rank):
    """Greyhound's verdict on the same run, scored by
    eval/greyhound/localize.py's own score() (slow_link → its "link"
    scenario, the in-process faults → "sleep": exactly the hidden rank)."""
    import localize  # eval/greyhound (on sys.path via run.py / the tests)
    v = (report or {}).get("verdict") or {}
    scen = {"slow_link": "link", "none": "none"}.get(case, "sleep")
    outcome = localize.score(scen, rank, v)
    phase = ((report or {}).get("controller") or {}).get("phase")
    return {"kind": v.get("kind") or None, "ranks": sorted(set(v.get("ranks") or [])),
            "links": [(l.get("src"), l.get("dst")) for l in v.get("links") or []], "outcome": outcome,
            "phase": phase, "text": v.get("text")}


def agreement(k, s, g):
    """Which localizers named the hidden rank: a compact label."""
    who = [n for n, o in (("KAIR", k), ("SF", s), ("GH", g)) if o == "correct"]
    if len(who) == 3:
        return "all"
    if not who:
        return "none"
    return "+".join(who)
