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
	return rep, nil
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
			} else {
				// flagged is sorted by a_i: the first walk sets Score.
				rc.Score, rc.Step = aScore(nd.zs, nd.zd), d.step
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
	out := make([]RootCause, 0, len(causes))
	for _, c := range causes {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b RootCause) int {
		return cmp.Or(kindRank(a.Kind)-kindRank(b.Kind), cmp.Compare(b.Symptoms, a.Symptoms),
			cmp.Compare(b.Score, a.Score), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.FromRank, b.FromRank), cmp.Compare(a.From, b.From))
	})
	return out
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
		return RootCause{Kind: kind, Rank: nd.rank, Name: nd.ev.Name, FromRank: -1, Evidence: ev}, path, -1
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
			return stop(KindOp, k, "abnormal execution time: culprit (rule 1)")
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
		return RootCause{Kind: KindEdge, Rank: nd.rank, Name: nd.ev.Name, FromRank: pn.rank, From: pn.ev.Name, Evidence: ev}, path, -1
	}
}
