package kair

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Analyze runs Stage 2 (operator outliers) and Stage 3 (backward blame
// attribution) of §III-B on one step of the per-rank traces.
func Analyze(traces []optrace.Trace, step int64, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := buildDAG(traces, step)
	if err != nil {
		return nil, err
	}
	d.score(cfg)
	rep := &Report{Step: step, Config: cfg, Ranks: len(traces), Nodes: len(d.nodes),
		Outliers: []Instance{}, RootCauses: []RootCause{}}
	var flagged []int32
	for k := range d.nodes {
		nd := &d.nodes[k]
		if nd.scored && aScore(nd.zs, nd.zd) > cfg.ZThreshold {
			flagged = append(flagged, int32(k))
		}
	}
	slices.SortFunc(flagged, func(a, b int32) int { return d.cmpNodes(a, b) })
	for _, k := range flagged {
		rep.Outliers = append(rep.Outliers, d.instance(k))
	}
	rep.RootCauses = d.blame(flagged, cfg)
	rep.SpanNS, rep.CommNS = d.spanAndComm()
	rep.Held, rep.Joined = d.holds()
	return rep, nil
}

// spanAndComm is Report.SpanNS and Report.CommNS.
func (d *dag) spanAndComm() (span, comm int64) {
	ends := map[int]int64{}
	var work [][]int64
	for k := range d.nodes {
		nd := &d.nodes[k]
		ends[nd.rank] = max(ends[nd.rank], nd.end)
		if nd.coll >= 0 {
			for len(work) <= int(nd.coll) {
				work = append(work, nil)
			}
			work[nd.coll] = append(work[nd.coll], nd.dur)
		}
	}
	spans := make([]int64, 0, len(ends))
	for _, e := range ends {
		spans = append(spans, e)
	}
	slices.Sort(spans)
	if len(spans) > 0 {
		span = medianInt(spans)
	}
	for _, w := range work {
		if len(w) >= 2 {
			slices.Sort(w)
			comm = max(comm, medianInt(w))
		}
	}
	return span, comm
}

// cmpNodes orders by a_i (highest first), then rank, name, occurrence.
func (d *dag) cmpNodes(a, b int32) int {
	x, y := &d.nodes[a], &d.nodes[b]
	return cmp.Or(cmp.Compare(aScore(y.zs, y.zd), aScore(x.zs, x.zd)), cmp.Compare(x.rank, y.rank),
		cmp.Compare(x.ev.Name, y.ev.Name), cmp.Compare(x.occ, y.occ))
}

func (d *dag) instance(k int32) Instance {
	nd := &d.nodes[k]
	return Instance{Rank: nd.rank, Name: nd.ev.Name, Cat: nd.ev.Cat, Occurrence: int(nd.occ),
		StartNS: nd.start, DurNS: nd.dur, WaitNS: nd.wait, ZStart: nd.zs, ZDur: nd.zd,
		A: aScore(nd.zs, nd.zd), AClassic: aScore(nd.cs, nd.cd), ARobust: aScore(nd.rs, nd.rd)}
}

func (d *dag) describe(k int32) string {
	nd := &d.nodes[k]
	s := fmt.Sprintf("rank %d %s#%d start +%dns (z %.1f) dur %dns (z %.1f)",
		nd.rank, nd.ev.Name, nd.occ, nd.start, nd.zs, nd.dur, nd.zd)
	if nd.wait > 0 {
		s += fmt.Sprintf(" wait %dns", nd.wait)
	}
	if !nd.scored {
		s += " (unscored)"
	}
	return s
}

// gating is O_{i-1}: among k's predecessors (program order, launch), the
// one that ends last — the one that let k start.
func (d *dag) gating(k int32) int32 {
	nd := &d.nodes[k]
	p := nd.lanePred
	if q := nd.launchPred; q >= 0 && (p < 0 || d.nodes[q].end > d.nodes[p].end) {
		p = q
	}
	return p
}

type causeKey struct {
	kind     Kind
	rank     int
	name     string
	fromRank int
	from     string
}

// blame walks back from every flagged instance that is late or slow
// (§III-B Stage 3) and merges the walks into ranked root causes. Early
// or fast outliers are Stage 2 findings with nothing to blame. A walk is
// a function of its start node, so every node a walk passed through is
// memoized to its cause: a late op deep in a chain of late ops costs one
// hop, not the chain again.
func (d *dag) blame(flagged []int32, cfg Config) []RootCause {
	thr := cfg.ZThreshold
	memo := make([]int32, len(d.nodes)) // cause index + 1
	seen := make([]int32, len(d.nodes)) // walk stamp: a revisit is a cycle (malformed input)
	var causes []*RootCause
	byKey := map[causeKey]int32{}
	counted := map[int32]bool{} // culprit nodes whose excess is summed
	for wi, k := range flagged {
		nd := &d.nodes[k]
		if !(nd.zs > thr || nd.zd > thr) {
			continue
		}
		rc, path, hit := d.walk(k, cfg, memo, seen, int32(wi+1))
		ci := hit
		if ci < 0 {
			key := causeKey{rc.Kind, rc.Rank, rc.Name, rc.FromRank, rc.From}
			var ok bool
			if ci, ok = byKey[key]; ok {
				// The longest chain is the most telling evidence (the
				// victim's walk back to the culprit, not the culprit alone).
				if c := causes[ci]; len(rc.Evidence) > len(c.Evidence) {
					c.Evidence = rc.Evidence
				}
				if !counted[rc.node] {
					counted[rc.node] = true
					causes[ci].ExcessNS += rc.ExcessNS
				}
			} else {
				// flagged is sorted by a_i: the first walk sets Score.
				rc.Score, rc.Step = aScore(nd.zs, nd.zd), d.step
				counted[rc.node] = true
				ci = int32(len(causes))
				causes = append(causes, &rc)
				byKey[key] = ci
			}
		}
		causes[ci].Symptoms++
		if c := causes[ci]; len(c.Explains) < maxExplains {
			c.Explains = append(c.Explains, fmt.Sprintf("rank %d %s#%d", nd.rank, nd.ev.Name, nd.occ))
		}
		for _, p := range path {
			memo[p] = ci + 1
		}
	}
	causes = d.fold(causes)
	out := make([]RootCause, 0, len(causes))
	for _, c := range causes {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b RootCause) int {
		return cmp.Or(kindRank(a.Kind)-kindRank(b.Kind), cmp.Compare(b.ExcessNS, a.ExcessNS),
			cmp.Compare(b.Symptoms, a.Symptoms),
			cmp.Compare(b.Score, a.Score), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.FromRank, b.FromRank), cmp.Compare(a.From, b.From))
	})
	return out
}

// span is where a cause's time went on its rank (step-relative ns): an
// op's run, an edge's gap from its tail's end (or the step start) to its
// head's start.
func (d *dag) span(c *RootCause) (lo, hi int64) {
	h := &d.nodes[c.node]
	if c.Kind != KindEdge {
		return h.start, h.end
	}
	if c.from >= 0 {
		return d.nodes[c.from].end, h.start
	}
	return 0, h.start
}

// fold merges nested causes (on one rank, one cause's time inside an op
// cause's run: aten::mm inside aten::linear inside a record_function
// range, or a gap between the children of a slow op) into the innermost
// one that accounts for at least half the outer op's excess: that is the
// specific culprit, and reporting every enclosing op beside it would
// list one delay several times and hide the runner-up. The outer op is
// kept in the evidence.
func (d *dag) fold(causes []*RootCause) []*RootCause {
	for {
		pi, ci := -1, -1
		// Edges from one tail are one gap seen by nested heads (aten::to
		// around aten::_to_copy around aten::empty_strided): keep the one
		// costing most (ties: the outermost, earliest in program order).
	edges:
		for i, p := range causes {
			if p.Kind != KindEdge {
				continue
			}
			for j, c := range causes {
				if j != i && c.Kind == KindEdge && c.Rank == p.Rank && c.from == p.from &&
					(c.ExcessNS > p.ExcessNS || (c.ExcessNS == p.ExcessNS && c.node < p.node)) {
					pi, ci = i, j
					break edges
				}
			}
		}
		for i, p := range causes {
			if ci >= 0 {
				break
			}
			if p.Kind != KindOp || p.ExcessNS <= 0 {
				continue
			}
			plo, phi := d.span(p)
			for j, c := range causes {
				if j == i || c.Kind == KindInconclusive || c.Rank != p.Rank || 2*c.ExcessNS < p.ExcessNS {
					continue
				}
				clo, chi := d.span(c)
				inner := clo >= plo && chi <= phi && (clo > plo || chi < phi || c.node > p.node)
				if inner && (ci < 0 || c.ExcessNS > causes[ci].ExcessNS) && (pi < 0 || pi == i) {
					pi, ci = i, j
				}
			}
			if ci >= 0 {
				break
			}
		}
		if ci < 0 {
			return causes
		}
		p, c := causes[pi], causes[ci]
		c.Symptoms += p.Symptoms
		c.Score = max(c.Score, p.Score)
		c.Explains = append(c.Explains, p.Explains[:min(len(p.Explains), maxExplains-min(maxExplains, len(c.Explains)))]...)
		if p.Kind == KindEdge {
			c.Evidence = append(c.Evidence, fmt.Sprintf("the same gap also delays rank %d %s", p.Rank, p.Name))
		} else {
			c.Evidence = append(c.Evidence, fmt.Sprintf("inside rank %d %s, which ran %dns over its peers: the time is here", p.Rank, p.Name, p.ExcessNS))
		}
		causes = slices.Delete(causes, pi, pi+1)
	}
}

// excess rounds x ≥ 0 to ns (0 for an unscored node: no peers, no
// expectation).
func excess(x float64, scored bool) int64 {
	if !scored || !(x > 0) {
		return 0
	}
	return int64(min(x, float64(optrace.MaxDurNS)) + 0.5)
}

// maxExplains bounds RootCause.Explains.
const maxExplains = 16

// maxEvidence bounds an evidence chain: long walks keep their two ends.
const maxEvidence = 64

// kindRank puts actionable causes before inconclusive walks.
func kindRank(k Kind) int {
	if k == KindInconclusive {
		return 1
	}
	return 0
}

// walk is the backward blame attribution of §III-B Stage 3 from one
// flagged node:
//  1. abnormal execution time → the node is the culprit; stop;
//  2. normal time, late start → examine the direct predecessor O_{i-1}:
//     abnormal time → blame it; late but normal → repeat from it; on time
//     → blame the edge O_{i-1} → O_i.
//
// A collective member that waited for a later member is explained by that
// member's arrival: the walk crosses to it (the cross-rank edge of the
// step DAG) and goes on from there.
//
// It returns the cause and the nodes it passed, or hit ≥ 0 when it reached
// a node memo already leads to cause hit. Within a rank every edge goes
// back in time, but cross-rank arrivals compare aligned clocks, so
// inconsistent traces can close a cycle: seen catches it.
func (d *dag) walk(k int32, cfg Config, memo, seen []int32, stamp int32) (rc RootCause, path []int32, hit int32) {
	thr := cfg.ZThreshold
	var ev []string
	stop := func(kind Kind, at int32, why string) (RootCause, []int32, int32) {
		if len(ev) > maxEvidence {
			ev = append(ev[:maxEvidence/2:maxEvidence/2], append([]string{fmt.Sprintf("… %d steps omitted …", len(ev)-maxEvidence)}, ev[len(ev)-maxEvidence/2:]...)...)
		}
		ev = append(ev, why)
		nd := &d.nodes[at]
		ex := float64(nd.start) - nd.mstart
		if kind == KindOp {
			ex = float64(nd.dur) - nd.mdur
		}
		return RootCause{Kind: kind, Rank: nd.rank, Name: nd.ev.Name, FromRank: -1, Evidence: ev,
			ExcessNS: excess(ex, nd.scored), node: at, from: -1}, path, -1
	}
	for hops := 0; ; hops++ {
		if memo[k] > 0 {
			return RootCause{}, path, memo[k] - 1
		}
		if hops >= cfg.MaxWalk || seen[k] == stamp {
			return stop(KindInconclusive, k, "walk stopped: revisited a node (inconsistent clocks?) or exceeded max_walk")
		}
		seen[k] = stamp
		path = append(path, k)
		nd := &d.nodes[k]
		ev = append(ev, d.describe(k))
		if !nd.scored {
			return stop(KindInconclusive, k, fmt.Sprintf("fewer than %d ranks share this instance: cannot judge it", cfg.MinRanks))
		}
		if nd.zd > thr {
			// Rule 1, unless the op is late by more than it ran long: then
			// its own excess is the smaller part of what the symptom lost
			// and the walk follows the lateness (a first op after a data
			// wait runs cold, 30 µs over 1 µs, but starts 120 ms late).
			late, long := float64(nd.start)-nd.mstart, float64(nd.dur)-nd.mdur
			if !(nd.zs > thr && late > long) {
				return stop(KindOp, k, "abnormal execution time: culprit (rule 1)")
			}
			ev = append(ev, fmt.Sprintf("also ran %.0fns long, but started %.0fns late: follow the lateness", long, late))
		}
		if nd.coll >= 0 {
			if l := d.collLast[nd.coll]; l != k && nd.wait > 0 {
				ev = append(ev, fmt.Sprintf("waited %dns for rank %d, the last to arrive", nd.wait, d.nodes[l].rank))
				k = l
				continue
			}
		}
		p := d.gating(k)
		if p < 0 {
			if nd.zs > thr && nd.ev.Device < 0 && nd.ev.TID == d.mainTID[nd.rank] {
				// Late with nothing before it in the step: the time went
				// between the step start and this op, outside every
				// profiled operator (data loading, Python, a host wait) —
				// the edge from the step start.
				ev = append(ev, "no operator before it in the step: the gap since the step start is the cause (rule 2c)")
				return RootCause{Kind: KindEdge, Rank: nd.rank, Name: nd.ev.Name, FromRank: nd.rank, From: StepStart, Evidence: ev,
					ExcessNS: excess(float64(nd.start)-nd.mstart, nd.scored), node: k, from: -1}, path, -1
			}
			// A worker thread's or stream's first op: what triggered it
			// (an enqueue on another thread) is not in the trace.
			return stop(KindInconclusive, k, "late start with no predecessor in the step DAG")
		}
		pn := &d.nodes[p]
		if !pn.scored {
			ev = append(ev, d.describe(p))
			return stop(KindInconclusive, p, fmt.Sprintf("predecessor shared by fewer than %d ranks: cannot judge it", cfg.MinRanks))
		}
		if pn.zd > thr {
			ev = append(ev, d.describe(p))
			return stop(KindOp, p, "predecessor has abnormal execution time: blame propagates to it (rule 2a)")
		}
		if pn.ze > thr {
			ev = append(ev, "predecessor normal but finished late: repeat from it (rule 2b)")
			k = p
			continue
		}
		ev = append(ev, d.describe(p))
		ev = append(ev, "predecessor completed on time, op started late: dependency edge (rule 2c)")
		return RootCause{Kind: KindEdge, Rank: nd.rank, Name: nd.ev.Name, FromRank: pn.rank, From: pn.ev.Name, Evidence: ev,
			ExcessNS: excess(float64(nd.start)-nd.mstart, nd.scored), node: k, from: p}, path, -1
	}
}
