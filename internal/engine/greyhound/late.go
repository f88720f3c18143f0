package greyhound

import (
	"fmt"
	"slices"
)

// LateEvidence is what entry lateness (contract §5) says about one rank
// since the onset: the rank the others wait for.
type LateEvidence struct {
	Rank int `json:"rank"`
	// Instances is how many collective instances since the onset had at
	// least two members; Last how many of them Rank entered last.
	Instances int `json:"instances"`
	Last      int `json:"last"`
	// Share = Last / Instances.
	Share float64 `json:"share"`
	// MarginMS is the median, over the instances Rank entered last, of
	// its lead over the next-latest member.
	MarginMS float64 `json:"margin_ms"`
	// IncreaseMS is the onset's iteration-time increase (0: unknown,
	// e.g. a manual episode) and Frac = MarginMS / IncreaseMS.
	IncreaseMS float64 `json:"increase_ms"`
	Frac       float64 `json:"frac"`
}

// LateRank reports the rank that entry lateness singles out since the
// onset, if one does: it enters last on ≥ LateShare of ≥ LateMinInstances
// instances, and its median margin is ≥ LateMinFrac of the iteration-time
// increase (a few microseconds of skew cannot explain a 30% slowdown).
// Without an onset (a manual episode) every instance counts and the
// margin must be ≥ 1 ms.
func LateRank(l *Lateness, onset *ChangePointView, cfg Config) (LateEvidence, bool) {
	share, minN, frac := cfg.LateShare, cfg.LateMinInstances, cfg.LateMinFrac
	def := DefaultConfig()
	if share == 0 {
		share = def.LateShare
	}
	if minN == 0 {
		minN = def.LateMinInstances
	}
	if frac == 0 {
		frac = def.LateMinFrac
	}
	if l == nil || len(l.Ranks) < 2 {
		return LateEvidence{}, false
	}
	var from int64
	inc := 0.0
	if onset != nil {
		// The onset's EndNS closes the first slow iteration: instances
		// ending in it or later are inside the episode.
		from = onset.EndNS - int64(max(onset.AfterMS, 0)*1e6)
		inc = onset.AfterMS - onset.BeforeMS
	}
	last := make([]int, len(l.Ranks))
	margins := make([][]float64, len(l.Ranks))
	n := 0
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
		n++
		last[top]++
		margins[top] = append(margins[top], *in.LateMS[top]-second)
	}
	if n < minN {
		return LateEvidence{}, false
	}
	best := 0
	for i := range last {
		if last[i] > last[best] {
			best = i
		}
	}
	e := LateEvidence{Rank: l.Ranks[best], Instances: n, Last: last[best], Share: float64(last[best]) / float64(n),
		MarginMS: medianSigned(slices.Clone(margins[best])), IncreaseMS: max(inc, 0)}
	if e.IncreaseMS > 0 {
		e.Frac = e.MarginMS / e.IncreaseMS
	}
	ok := e.Share >= share && e.MarginMS >= 1 && (e.IncreaseMS == 0 || e.Frac >= frac)
	return e, ok
}

// Combine is the verdict from validation and lateness together. Slow
// compute or links found by validation come first (§4.3); when validation
// found every tested GEMM and link healthy and lateness singles out a
// rank, the cause is on that rank's host side (data loading, CPU, Python),
// which neither benchmark exercises. Otherwise the validation verdict
// stands.
func Combine(j Judgement, late LateEvidence, cfg Config) Verdict {
	v := j.Verdict
	if v.Kind != VerdictNone {
		return v
	}
	healthyGEMM := slices.ContainsFunc(j.GEMM, func(g GEMMView) bool { return g.Rank == late.Rank })
	links := 0
	for _, l := range j.Links {
		if l.Src == late.Rank || l.Dst == late.Rank {
			links++
		}
	}
	out := Verdict{Kind: VerdictLateRank, Ranks: []int{late.Rank}, Links: []Link{}}
	out.Text = fmt.Sprintf("rank %d enters collectives %.1f ms late on %.0f%% of %d instances since the onset", late.Rank, late.MarginMS, 100*late.Share, late.Instances)
	if late.IncreaseMS > 0 {
		out.Text += fmt.Sprintf(" (%.0f%% of the %.1f ms iteration-time increase)", 100*late.Frac, late.IncreaseMS)
	}
	switch {
	case healthyGEMM && links > 0:
		out.Text += fmt.Sprintf("; its compute (GEMM) and %d link(s) validated healthy, so the cause is on its host side (data loading, CPU, Python) — not GPU/CPU compute or network", links)
	case healthyGEMM:
		out.Text += "; its compute (GEMM) validated healthy and no link of it was tested, so the cause is on its host side (data loading, CPU, Python) or its network"
	default:
		out.Text += "; it was not among the validated ranks, so compute or network on it is not ruled out"
	}
	// Strength of evidence: a rank last on most instances by a margin
	// that explains most of the slowdown, after a complete validation.
	out.Confidence = ConfidenceLow
	if j.Complete && healthyGEMM && late.Share >= 0.8 && late.Instances >= 4*max(cfg.LateMinInstances, 5) &&
		(late.IncreaseMS == 0 || late.Frac >= 0.5) {
		out.Confidence = ConfidenceHigh
	}
	return out
}
