package kair

import (
	"fmt"
	"slices"
)

// A cause that cost its own rank time has not necessarily cost the job
// any: the rank may have waited anyway (another rank was later still, or
// slack absorbed it), and on a busy host every rank loses a few
// milliseconds somewhere in every step. In synchronous training a delay
// slows the job only through the other ranks waiting for the delayed one
// at the next collective (§III-B Stage 3's victim, seen from the group),
// so before a culprit is named its time is checked against that wait
// (issue 16 item 6a): the part of the excess the others actually waited
// for, in more than half the analysed steps, must be a material share of
// the step and stand out from whom else the ranks wait for.

// Impact is what the judged candidate explains of the step time. Per-step
// values are typical ones: the (⌊n/2⌋+1)-th largest over the n analysed
// steps (a step the cause is absent from counts 0), so more than half the
// steps reach them and one noisy step cannot.
type Impact struct {
	Rank int `json:"rank"`
	// Causes are the judged causes (indexes into TraceReport.Causes): the
	// culprit, or the candidates on one rank.
	Causes []int `json:"causes"`
	// ExcessNS: the causes' time over their peers per step.
	ExcessNS int64 `json:"excess_ns"`
	// HeldNS: how long the other ranks waited for Rank per step at the
	// step's collectives (Report.Held); HeldSteps in how many analysed
	// steps that wait was material (≥ RunConfig.MinShare of the median
	// step), HeldMaxNS the most in one step.
	HeldNS    int64 `json:"held_ns"`
	HeldSteps int   `json:"held_steps"`
	HeldMaxNS int64 `json:"held_max_ns"`
	// ExplainedNS: per step, the part of the excess the others waited
	// for, min(excess, held).
	ExplainedNS int64 `json:"explained_ns"`
	// LateNS: how much later than the median member its rank arrived at
	// the step's collectives; LateExplainedNS: min(excess, late). Unlike
	// the hold they count a rank a later one masked: candidates on two
	// ranks are compared by them.
	LateNS          int64 `json:"late_ns"`
	LateExplainedNS int64 `json:"late_explained_ns"`
	// OtherRank / OtherHeldNS: the other rank the ranks waited for most
	// (typical per step; -1 / 0 when none): a culprit must stand out from it.
	OtherRank   int   `json:"other_rank"`
	OtherHeldNS int64 `json:"other_held_ns"`
	// StepNS is the median step span of the analysed steps.
	StepNS int64 `json:"step_ns"`
	// Checked: some analysed step joined ranks at a collective, so the
	// wait was measured. Unchecked, Material rests on the excess alone.
	Checked bool `json:"checked"`
	// Material: the explained time is at least RunConfig.MinShare of the
	// step and culpritSeparation × OtherHeldNS.
	Material bool `json:"material"`
}

// typical is the value more than half of xs reach: the (⌊n/2⌋+1)-th
// largest (0 for none); xs is reordered. With two steps both must.
func typical(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)-(len(xs)/2+1)]
}

// impact measures the causes idx (all on one rank) against the waits of
// the analysed steps.
func impact(rep *TraceReport, idx []int, minShare float64) *Impact {
	rank := rep.Causes[idx[0]].Rank
	im := &Impact{Rank: rank, Causes: slices.Clone(idx), OtherRank: -1, StepNS: medianStepSpan(rep.StepReports)}
	n := len(rep.StepReports)
	excess, held, expl := make([]int64, n), make([]int64, n), make([]int64, n)
	late, lateExpl := make([]int64, n), make([]int64, n)
	others := map[int][]int64{}
	for s, r := range rep.StepReports {
		for _, i := range idx {
			c := &rep.Causes[i]
			for _, rc := range r.RootCauses {
				if rc.Kind == c.Kind && rc.Rank == c.Rank && rc.Name == c.Name && rc.FromRank == c.FromRank && rc.From == c.From {
					excess[s] += rc.ExcessNS
				}
			}
		}
		im.Checked = im.Checked || r.Joined
		held[s] = r.HeldNS(rank)
		im.HeldMaxNS = max(im.HeldMaxNS, held[s])
		expl[s] = min(excess[s], held[s])
		late[s] = r.LateNS(rank)
		lateExpl[s] = min(excess[s], late[s])
		for _, h := range r.Held {
			if h.Rank != rank && h.NS > 0 {
				if others[h.Rank] == nil {
					others[h.Rank] = make([]int64, n)
				}
				others[h.Rank][s] = h.NS
			}
		}
	}
	need := minShare * float64(im.StepNS)
	for _, h := range held {
		if float64(h) >= need {
			im.HeldSteps++
		}
	}
	im.ExcessNS, im.HeldNS, im.ExplainedNS = typical(excess), typical(held), typical(expl)
	im.LateNS, im.LateExplainedNS = typical(late), typical(lateExpl)
	for r, xs := range others {
		if v := typical(xs); v > im.OtherHeldNS || (v == im.OtherHeldNS && v > 0 && r < im.OtherRank) {
			im.OtherRank, im.OtherHeldNS = r, v
		}
	}
	if im.Checked {
		im.Material = float64(im.ExplainedNS) >= need && im.ExplainedNS >= culpritSeparation*im.OtherHeldNS
	} else {
		im.Material = float64(im.ExcessNS) >= need
	}
	return im
}

// pct is 100·a/b for headlines.
func pct(a, b int64) float64 { return 100 * float64(a) / float64(max(b, 1)) }

// impactWords says what the judged causes explain, for a named culprit;
// what is the subject and verb ("this cause accounts").
func impactWords(im *Impact, na int, what string, minShare float64) string {
	if !im.Checked {
		return fmt.Sprintf("That is %s per step, %.0f%% of the median step (%s). No collective joins the ranks in the analysed steps, so whether the other ranks waited for this delay could not be measured.",
			fmtNS(im.ExcessNS), pct(im.ExcessNS, im.StepNS), fmtNS(im.StepNS))
	}
	s := fmt.Sprintf("The other ranks waited %s per step for rank %d at collectives (≥ %.0f%% of the step in %d of %d analysed step(s)); %s for %s of that (%.0f%%), %.0f%% of the median step (%s).",
		fmtNS(im.HeldNS), im.Rank, 100*minShare, im.HeldSteps, na, what, fmtNS(im.ExplainedNS), pct(im.ExplainedNS, im.HeldNS), pct(im.ExplainedNS, im.StepNS), fmtNS(im.StepNS))
	if na == 1 {
		s += " One analysed step: whether it repeats is not known."
	}
	return s
}

// notExplained is the headline of a candidate whose time the other ranks
// did not wait for.
func notExplained(im *Impact, na int, what string, minShare float64) string {
	s := fmt.Sprintf("Inconclusive: the largest deviation, %s, costs its rank %s per step over its peers, but the other ranks did not wait for it: ", what, fmtNS(im.ExcessNS))
	switch {
	case im.HeldMaxNS == 0:
		s += fmt.Sprintf("rank %d was never the last to arrive at a collective in the %d analysed step(s)", im.Rank, na)
	default:
		s += fmt.Sprintf("they waited %s per step for rank %d (at most %s in one step; ≥ %.0f%% of the step in %d of %d), of which this explains %s, %.1f%% of the median step (%s)",
			fmtNS(im.HeldNS), im.Rank, fmtNS(im.HeldMaxNS), 100*minShare, im.HeldSteps, na, fmtNS(im.ExplainedNS), pct(im.ExplainedNS, im.StepNS), fmtNS(im.StepNS))
	}
	if float64(im.OtherHeldNS) >= minShare*float64(im.StepNS) && im.ExplainedNS < culpritSeparation*im.OtherHeldNS {
		s += fmt.Sprintf("; they waited longer for rank %d (%s per step), where no operator deviates as much", im.OtherRank, fmtNS(im.OtherHeldNS))
	}
	return s + fmt.Sprintf(". It does not explain the step time (a culprit must explain at least %.0f%% of the step in more than half the analysed steps); on a shared CPU a rank that waits frees it for the others, which can hide a real delay.", 100*minShare)
}
