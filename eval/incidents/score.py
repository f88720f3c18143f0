"""Scoring of one incident-evaluation run (pure functions; unit-tested in
eval/tests/test_incidents_score.py). Definitions: eval/incidents/README.md.

Inputs: the watcher's record of GET /api/v1/incidents?job=<job> polled
every 0.5 s (compact snapshots, see compact()), the run's ground truth
(which rank/link, which cause, when it was injected) and the single
engines' own outcomes on the same run (scored by each harness's own
scorer). Nothing here talks to a server or reads a clock.
"""

import math

# Chain layers below the stage layer: a hypothesis with one of these says
# *why*, not only *where in the step* (internal/incident/evidence.go).
BELOW_STAGE = ("collective", "operator", "gpu", "cpu", "os", "network")
UNKNOWN_CATEGORIES = ("", "unknown")

# Per family: the categories (internal/incident Category) a right cause may
# carry, and what the truth target is ("rank", "link": the injected rank's
# link, "job": every rank alike). A hypothesis whose category is unknown
# makes no claim about the kind of cause and is judged on its target alone.
# Why each set (README "Compatibility"):
#   a sleep inside a stage of one rank is that rank's host-side compute
#   (compute), or, where the stage ends in a collective/barrier the rank
#   enters late, communication; a delay in the data stage is data or, seen
#   from the stage vectors alone, compute; a CPU hog or another OS
#   interferer is os (or compute: the rank computes slower); a shaped link
#   is network or communication.
COMPAT = {
    "e3:data": ("rank", ("data", "compute")),
    "e3:backward": ("rank", ("compute", "communication")),
    "e3:backward_comm": ("rank", ("communication", "compute")),
    "e3:forward_host": ("rank", ("compute",)),
    "e3:callback_sync": ("rank", ("compute", "communication")),
    "e3:callback_host": ("rank", ("compute", "communication")),
    "greyhound:hog": ("rank", ("os", "compute")),
    "greyhound:sleep": ("rank", ("compute", "communication")),
    "greyhound:link": ("link", ("network", "communication")),
    "sysom:hog": ("rank", ("os", "compute")),
    "sysom:softirq": ("rank", ("os", "compute", "network")),
    "sysom:vfs": ("rank", ("os", "compute")),
    "sysom:logging": ("job", ("uniform",)),
    "kair:slow_op": ("rank", ("compute",)),
    "kair:late_collective": ("rank", ("communication", "compute")),
    "kair:data": ("rank", ("data", "compute")),
    "kair:slow_link": ("link", ("network", "communication")),
    # extra runs: one entry per fault kind they combine
    "extra:data": ("rank", ("data", "compute")),
    "extra:hog": ("rank", ("os", "compute")),
}

# Controls: no fault; any stated cause is wrong, any incident is too many.
CONTROLS = ("greyhound:none", "kair:none")

OUTCOMES = ("right", "partial", "withheld", "wrong")


def fault(family, rank, inject_ns, end_ns=None, delay_ms=None):
    """A ground-truth fault record (run.py builds these)."""
    kind, cats = COMPAT[family]
    return {"family": family, "rank": rank, "kind": kind, "categories": list(cats), "inject_ns": inject_ns,
            "end_ns": end_ns, "delay_ms": delay_ms}


# --- the incident JSON (internal/incident/incident.go) -----------------------

def target_key(t):
    """incident.Target.Key() in Python (the cause strings use it)."""
    k = (t or {}).get("kind") or ""
    if k == "rank":
        return "rank:%d" % t.get("rank", 0)
    if k == "link":
        return "link:%d-%d" % (t.get("src", 0), t.get("dst", 0))
    if k == "operator":
        return "op:%s@%d" % (t.get("name", ""), t.get("rank", 0))
    if k == "job":
        return "job"
    return "%s:%s" % (k, t.get("name", ""))


def compact(inc):
    """The fields of one incident this evaluation reads, small enough to
    keep one copy per change. inc: an incident as the API returns it."""
    inc = inc or {}
    opened = inc.get("opened") or {}
    resolved = inc.get("resolved") or {}
    lost = inc.get("lost") or {}
    hyps = []
    for h in inc.get("hypotheses") or []:
        t = h.get("target") or {}
        hyps.append({
            "target": target_key(t), "kind": t.get("kind") or "", "rank": t.get("rank", 0), "src": t.get("src", 0),
            "dst": t.get("dst", 0), "name": t.get("name") or "", "stated": bool(h.get("stated")),
            "confidence": h.get("confidence") or "", "category": h.get("category") or "",
            "layers": [c.get("layer") or "" for c in h.get("chain") or []],
            "engines": sorted(set(h.get("engines") or [])), "against": len(h.get("against") or [])})
    return {
        "id": inc.get("id") or "", "state": inc.get("state") or "", "opened_ns": opened.get("wall_ns", 0),
        "opened_step": opened.get("step", 0), "detected_ns": inc.get("detected_ns", 0),
        "updated_ns": (inc.get("updated") or {}).get("wall_ns", 0),
        "resolved_ns": resolved.get("wall_ns", 0) if resolved else 0, "resolved_by": inc.get("resolved_by") or "",
        "cause": list(inc.get("cause") or []),
        "category": inc.get("category") or "", "confidence": inc.get("confidence") or "", "hyps": hyps,
        "lost_s": lost.get("seconds", 0.0), "lost_steps": lost.get("steps", 0), "lost_partial": bool(lost.get("partial")),
        "healthy_ms": inc.get("healthy_ms", 0.0), "slow_ms": inc.get("slow_ms", 0.0), "relapses": inc.get("relapses", 0),
        "waiting": [w.get("kind") or "" for w in inc.get("waiting") or []], "audit": len(inc.get("audit") or []),
        "contradictions": len(inc.get("contradictions") or []), "headline": (inc.get("headline") or "")[:300],
    }


def stated(ci):
    return [h for h in ci.get("hyps") or [] if h.get("stated")]


def is_localized(ci):
    """Localized: the incident states a cause (a rank, link, operator or the
    whole job): its cause list is not empty."""
    return bool(ci.get("cause"))


def is_explained(ci):
    """Explained: a stated hypothesis says why, not only where in the step —
    its chain has a link below the stage layer (collective, operator, GPU,
    CPU, OS, network) or its category is known (not unknown)."""
    for h in stated(ci):
        if any(l in BELOW_STAGE for l in h.get("layers") or []):
            return True
        if (h.get("category") or "") not in UNKNOWN_CATEGORIES:
            return True
    return False


# --- judging stated causes against the truth ---------------------------------

def target_matches(h, f):
    """Whether hypothesis h's target is the fault's: the injected rank (or an
    operator on it) for a rank fault, a link with the injected rank at one
    end (or that rank) for a link fault, the whole job for a uniform one.
    Hosts and groups never match: every rank of these runs shares one host."""
    k = h.get("kind")
    if f["kind"] == "job":
        return k == "job"
    if k == "rank":
        return h.get("rank") == f["rank"]
    if k == "operator":
        return f["kind"] == "rank" and h.get("rank") == f["rank"]
    if k == "link":
        return f["kind"] == "link" and f["rank"] in (h.get("src"), h.get("dst"))
    return False


def category_ok(h, f):
    c = h.get("category") or ""
    return c in UNKNOWN_CATEGORIES or c in f["categories"]


def judge(hyps, faults):
    """Judges stated hypotheses against the faults.

    Returns (outcome, detail): outcome "right" (every fault has a stated
    hypothesis whose target and category fit it, and nothing else is
    stated), "partial" (no wrong statement but a fault is not covered —
    only with several faults), "withheld" (nothing stated) or "wrong" (a
    stated hypothesis fits no fault: another target, or the right target
    with an incompatible category). A control (no faults) is "right" when
    nothing is stated and "wrong" otherwise."""
    hs = [h for h in hyps if h.get("stated")]
    if not faults:
        return ("wrong" if hs else "right"), {"wrong": [h["target"] for h in hs], "covered": []}
    if not hs:
        return "withheld", {"wrong": [], "covered": []}
    wrong, covered = [], set()
    for h in hs:
        fits = [i for i, f in enumerate(faults) if target_matches(h, f) and category_ok(h, f)]
        if fits:
            covered.update(fits)
        else:
            wrong.append("%s (%s)" % (h["target"], h.get("category") or "unknown"))
    detail = {"wrong": wrong, "covered": sorted(covered)}
    if wrong:
        return "wrong", detail
    if len(covered) == len(faults):
        return "right", detail
    return "partial", detail


def wrong_high(hyps, faults):
    """Stated hypotheses with high confidence that fit no fault (the target:
    none, ever)."""
    out = []
    for h in hyps:
        if not h.get("stated") or h.get("confidence") != "high":
            continue
        if not faults or not any(target_matches(h, f) and category_ok(h, f) for f in faults):
            out.append(h["target"])
    return out


# --- milestones ----------------------------------------------------------------

def _live(snapshot, t0):
    """The incidents of a snapshot that concern the fault: every one that
    was not already resolved before the injection."""
    return [ci for ci in snapshot.get("incidents") or [] if not (ci.get("resolved_ns") and ci["resolved_ns"] < t0)]


def milestones(snapshots, truth):
    """Times from the injection (s) and counts, from the polled snapshots.

    snapshots: [{"t_ns", "incidents": [compact...]}] in poll order (the
    watcher keeps one per change, so "first seen" is exact to a poll).
    truth: {"faults": [...], "inject_ns", "control"}. A milestone is the
    first poll at or after the injection that shows it; None when no poll
    did. An incident first seen before the injection is counted apart (a
    false onset; if it absorbs the fault, its later states still count for
    localized/explained/recovering/resolved, not for opened)."""
    faults = truth.get("faults") or []
    t0 = truth.get("inject_ns") or 0
    first_seen = {}
    for s in snapshots:
        for ci in s.get("incidents") or []:
            first_seen.setdefault(ci["id"], s["t_ns"])
    pre = sorted(i for i, t in first_seen.items() if t < t0)
    post = sorted(i for i, t in first_seen.items() if t >= t0)
    out = {"opened_total": len(first_seen), "opened_pre": len(pre), "opened_post": len(post), "ids": sorted(first_seen)}

    def sec(t):
        return None if t is None else round((t - t0) / 1e9, 2)

    opened = min((first_seen[i] for i in post), default=None)
    loc = expl = loc_right = expl_right = rec = res = None
    wrong_ever, wrong_hi = [], []
    for s in snapshots:
        t = s["t_ns"]
        if t < t0 and faults:
            continue
        live = _live(s, t0) if faults else s.get("incidents") or []
        hyps = [h for ci in live for h in ci.get("hyps") or []]
        for w in wrong_high(hyps, faults):
            if w not in wrong_hi:
                wrong_hi.append(w)
        outcome, det = judge(hyps, faults)
        for w in det["wrong"]:
            if w not in wrong_ever:
                wrong_ever.append(w)
        if loc is None and any(is_localized(ci) for ci in live):
            loc = t
        if expl is None and any(is_explained(ci) for ci in live):
            expl = t
        if faults and outcome == "right":
            if loc_right is None:
                loc_right = t
            if expl_right is None and any(is_explained(ci) for ci in live):
                expl_right = t
        # A job that stopped reporting while slow resolves as job_stopped:
        # that is the end of the run, not a recovery.
        recovered = [ci for ci in live if ci.get("resolved_by") != "job_stopped"]
        if rec is None and any(ci.get("state") in ("recovering", "resolved") for ci in recovered):
            rec = t
        if res is None and any(ci.get("state") == "resolved" for ci in recovered):
            res = t
    out.update(opened_s=sec(opened), localized_s=sec(loc), explained_s=sec(expl), localized_right_s=sec(loc_right),
               explained_right_s=sec(expl_right), recovering_s=sec(rec), resolved_s=sec(res),
               wrong_ever=wrong_ever, wrong_high=wrong_hi)
    if snapshots:
        out["observed_s"] = sec(snapshots[-1]["t_ns"])
    return out


# A fault slowed the job when its step time rose by at least this much: the
# issue's own band (a job within 10 % of healthy has recovered).
MATERIAL = 0.10


def slowdown(base_ms, fault_ms):
    """Relative rise of the job's median step time during the fault, or None."""
    if not base_ms or fault_ms is None:
        return None
    return round(fault_ms / base_ms - 1.0, 3)


def steps_until(truth, horizon_ns):
    """Steps run with the fault up to horizon_ns (the newest point the
    incident had reached at the last poll, so the incident's lost time and
    its expectation cover the same steps) and before the fault ended.
    truth["fault_step_ends"]: end_ns of the job's steps after the
    injection, as logged; past the last logged one (a block-buffered log
    cut by the kill) the tail is counted at the fault's step time. Without
    the list: truth["steps_in_fault"] (the whole observation)."""
    ends = truth.get("fault_step_ends")
    if not ends or not horizon_ns:
        return truth.get("steps_in_fault")
    t0 = truth.get("inject_ns") or 0
    h = horizon_ns if not truth.get("end_ns") else min(horizon_ns, truth["end_ns"])
    n = sum(1 for e in ends if t0 <= e <= h)
    last = max(ends)
    if h > last and truth.get("fault_ms"):
        n += int((h - max(last, t0)) / 1e6 / truth["fault_ms"])
    return n


def expected_lost(faults, steps_in_fault, base_ms=None, fault_ms=None):
    """The lost time the injection should cost (s), and how it was got:
    "nominal" = the injected delay per step × the steps run with it (when
    the fault has a nominal delay), else "measured" = (median step time
    during the fault − before it) × those steps, from the run's own step
    logs. With several faults, the largest (they overlap: the job waits
    for the slowest rank)."""
    if not steps_in_fault:
        return None, None
    nominal = [f["delay_ms"] for f in faults if f.get("delay_ms")]
    if nominal and len(nominal) == len(faults):
        return round(max(nominal) / 1e3 * steps_in_fault, 3), "nominal"
    if base_ms and fault_ms and fault_ms > base_ms:
        return round((fault_ms - base_ms) / 1e3 * steps_in_fault, 3), "measured"
    return None, None


def score_run(run):
    """One scored row from a run record (run.py writes them):
    {harness, case, seed, truth: {control, faults, inject_ns, end_ns,
    steps_in_fault, base_ms, fault_ms}, watch: {snapshots, ...},
    engines: {name: outcome}, absorbed: bool}."""
    truth = run.get("truth") or {}
    faults = truth.get("faults") or []
    control = bool(truth.get("control"))
    watch = run.get("watch") or {}
    snaps = watch.get("snapshots") or []
    row = {"harness": run.get("harness"), "case": run.get("case"), "family": run.get("family"), "seed": run.get("seed"),
           "control": control, "error": run.get("error"), "layer": watch.get("layer")}
    m = milestones(snaps, truth)
    row.update(m)
    last = snaps[-1] if snaps else {"incidents": []}
    t0 = truth.get("inject_ns") or 0
    live = _live(last, t0) if faults else last.get("incidents") or []
    hyps = [h for ci in live for h in ci.get("hyps") or []]
    row["outcome"], det = judge(hyps, faults)
    row["stated"] = [h["target"] + "/" + (h.get("category") or "unknown") for h in hyps if h.get("stated")]
    row["suspects"] = [h["target"] for h in hyps if not h.get("stated")]
    row["wrong_detail"] = det["wrong"]
    # Incidents wanted: one per injected fault (two faults at once: one
    # incident with both, or one each); none in a control.
    n = m["opened_total"]
    row["slowdown"] = slowdown(truth.get("base_ms"), truth.get("fault_ms"))
    row["material"] = not control and (row["slowdown"] is None or row["slowdown"] >= MATERIAL)
    if control:
        row["incidents_ok"] = n == 0
    elif not row["material"]:
        # The fault did not slow the job (an interferer the job does not
        # wait for): no incident is as right as one.
        row["incidents_ok"] = m["opened_pre"] == 0 and n <= len(faults)
    else:
        row["incidents_ok"] = m["opened_pre"] == 0 and (n == 1 or n == len(faults))
    # Lost time of the incidents that concern the fault, at the last poll.
    lost = sum(ci.get("lost_s") or 0.0 for ci in live)
    row["lost_s"] = round(lost, 3) if live else None
    row["lost_partial"] = any(ci.get("lost_partial") for ci in live)
    horizon = max((ci.get("updated_ns") or 0 for ci in live), default=0)
    row["expected_steps"] = steps_until(truth, horizon)
    exp, basis = expected_lost(faults, row["expected_steps"], truth.get("base_ms"), truth.get("fault_ms")) \
        if faults else (None, None)
    row["expected_lost_s"], row["expected_basis"] = exp, basis
    # No injected delay to compare with in a control, and none worth the
    # name where the fault did not slow the job (a ratio to noise).
    row["lost_ratio"] = round(lost / exp, 3) if exp and live and row["material"] else None
    row["engines"] = dict(run.get("engines") or {})
    row["absorbed"] = bool(run.get("absorbed"))
    row["fault_kinds"] = sorted({f["kind"] for f in faults})
    row["headline"] = next((ci.get("headline") for ci in live if ci.get("headline")), "")
    return row


# --- small statistics (table.py) ---------------------------------------------

def percentile(xs, q):
    """Nearest-rank percentile over xs, where None means "never reached"
    (+inf): with small samples an unreached run must pull the figure up,
    not drop out of it. Returns None for an empty list, inf when the rank
    falls on an unreached run."""
    vals = sorted(math.inf if x is None else x for x in xs)
    if not vals:
        return None
    k = max(1, math.ceil(q / 100.0 * len(vals)))
    return vals[k - 1]
