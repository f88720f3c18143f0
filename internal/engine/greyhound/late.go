package greyhound

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// LateEvidence is what entry lateness (contract §5) says about one rank
// since the onset: the rank the others wait for.
type LateEvidence struct {
	Rank int `json:"rank"`
	// Comm and Op name the collective it is most consistently last into:
	// Last of its Instances (with ≥ 2 members) since the onset, Share =
	// Last/Instances, by a median MarginMS over the next-latest member.
	Comm      string        `json:"comm"`
	Op        collective.Op `json:"op"`
	Instances int           `json:"instances"`
	Last      int           `json:"last"`
	Share     float64       `json:"share"`
	MarginMS  float64       `json:"margin_ms"`
	// WaitMS is what the others spend waiting for it per iteration, over
	// every collective: the sum of its margins where it entered last, per
	// iteration of the span they cover. IncreaseMS is the onset's
	// iteration-time increase (0: no onset, e.g. a manual episode or a
	// straggler present from the start) and Frac = WaitMS / IncreaseMS
	// (without an onset, / the iteration time).
	WaitMS     float64 `json:"wait_ms"`
	IncreaseMS float64 `json:"increase_ms"`
	Frac       float64 `json:"frac"`
}

// LateRank reports the rank that entry lateness singles out since the
// onset, if one does: the rank the others wait for longest, entering last
// into one collective on ≥ LateShare of ≥ LateMinInstances instances by a
// median margin ≥ 1 ms, whose wait accounts for a material part of the
// slowdown — ≥ ExplainFrac of the iteration-time increase after an onset
// (a few microseconds of skew cannot explain a 30 % slowdown), ≥ VerifyRel
// of the iteration time without one (a straggler that costs the job a
// fail-slow's worth although no change was seen: it was there from the
// start). iterMS is the iteration time without an onset.
//
// Lateness is judged per collective (comm, op): a rank late into the
// first gradient bucket is in step again for the second, and over both it
// would be last on only half of the instances.
func LateRank(l *Lateness, onset *ChangePointView, iterMS float64, cfg Config) (LateEvidence, bool) {
	cfg = cfg.withDefaults()
	if l == nil || len(l.Ranks) < 2 {
		return LateEvidence{}, false
	}
	var from int64
	inc := 0.0
	if onset != nil {
		// The onset's EndNS closes the first slow iteration: instances
		// ending in it or later are inside the episode.
		from = onset.EndNS - int64(max(onset.AfterMS, 0)*1e6)
		inc = max(onset.AfterMS-onset.BeforeMS, 0)
		iterMS = onset.AfterMS
	}
	type key struct {
		comm string
		op   collective.Op
	}
	type tally struct {
		n       int
		last    []int
		margins [][]float64
	}
	byKey := map[key]*tally{}
	wait := make([]float64, len(l.Ranks))
	var first, lastEnd int64
	for _, in := range l.Instances {
		if in.EndNS < from {
			continue
		}
		top, second, seen := -1, 0.0, 0
		for i, p := range in.LateMS {
			if p == nil {
				continue
			}
			seen++
			switch {
			case top < 0 || *p > *in.LateMS[top]:
				if top >= 0 {
					second = *in.LateMS[top]
				}
				top = i
			case *p > second:
				second = *p
			}
		}
		if seen < 2 {
			continue
		}
		k := key{in.Comm, in.Op}
		t := byKey[k]
		if t == nil {
			t = &tally{last: make([]int, len(l.Ranks)), margins: make([][]float64, len(l.Ranks))}
			byKey[k] = t
		}
		t.n++
		t.last[top]++
		m := *in.LateMS[top] - second
		t.margins[top] = append(t.margins[top], m)
		wait[top] += m
		if first == 0 || in.EndNS < first {
			first = in.EndNS
		}
		lastEnd = max(lastEnd, in.EndNS)
	}
	if len(byKey) == 0 {
		return LateEvidence{}, false
	}
	best := 0
	for i := range wait {
		if wait[i] > wait[best] {
			best = i
		}
	}
	e := LateEvidence{Rank: l.Ranks[best], IncreaseMS: inc}
	// Its most consistent collective (ties: more instances, then names).
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.comm, b.comm), cmp.Compare(a.op, b.op)) })
	for _, k := range keys {
		t := byKey[k]
		share := float64(t.last[best]) / float64(t.n)
		if t.last[best] > 0 && (e.Instances == 0 || share > e.Share || share == e.Share && t.n > e.Instances) {
			e.Comm, e.Op, e.Instances, e.Last, e.Share = k.comm, k.op, t.n, t.last[best], share
			e.MarginMS = medianSigned(slices.Clone(t.margins[best]))
		}
	}
	// Per iteration: the span the instances cover, in iterations (one more
	// for the window's edges).
	if iterMS > 0 {
		iters := float64(lastEnd-first)/1e6/iterMS + 1
		e.WaitMS = wait[best] / iters
	}
	switch {
	case inc > 0:
		e.Frac = e.WaitMS / inc
	case iterMS > 0:
		e.Frac = e.WaitMS / iterMS
	}
	need := cfg.ExplainFrac
	if inc == 0 {
		need = cfg.VerifyRel
	}
	ok := e.Instances >= cfg.LateMinInstances && e.Share >= cfg.LateShare && e.MarginMS >= 1 &&
		(iterMS <= 0 || e.Frac >= need)
	return e, ok
}

// Caveats are what limits entry lateness as evidence that the rank is the
// one the others wait for (issue 16 item 6): last on under 80 % of the
// instances, on fewer than 4 × LateMinInstances of them, or a wait that
// accounts for under twice ExplainFrac of the onset's increase (other
// causes may add to it). Conclude's late_rank verdict carries them;
// internal/analysis states lateness with high confidence only without any.
func (e LateEvidence) Caveats(cfg Config) []string {
	cfg = cfg.withDefaults()
	var out []string
	if e.Share < 0.8 {
		out = append(out, fmt.Sprintf("last on only %.0f%% of the instances", 100*e.Share))
	}
	if e.Instances < 4*cfg.LateMinInstances {
		out = append(out, fmt.Sprintf("only %d instances since the onset", e.Instances))
	}
	if c, ok := partialCaveat(e.IncreaseMS, e.Frac, cfg); ok {
		out = append(out, c)
	}
	return out
}

// ReportLate is the entry-lateness finding a report supports: LateRank
// over its matrix since onset (nil: none, judged against the report's
// recent iteration time, as the report's own verdict is in tracking).
func ReportLate(rep *Report, onset *ChangePointView, cfg Config) (LateEvidence, bool) {
	return LateRank(&rep.Lateness, onset, recentMS(rep.Iteration.Series), cfg)
}
