package stagefrontier

import (
	"fmt"
	"slices"
	"strings"
)

// Diagnose writes rep's plain-language Headline and LeaderRank, reading
// the comparison with a reference window when there is one (nil
// otherwise). Analyze calls it without a comparison; callers that have a
// reference call it again.
//
// The stage it points at is, strongest evidence first: the stage whose
// exposed time rose most against the reference (when the step time rose
// materially); else the stage where a named straggler creates a material
// exposed tail; else the largest share of exposed time (§3 eq.2). A rank
// is named only when that stage's leader gate passes (LeaderEvidence);
// otherwise the headline says why no rank is named.
func Diagnose(rep *Report, cmp *Comparison) {
	cfg := rep.Config
	h := Headline{Rank: -1, Basis: BasisNone}
	exposed := perStep(rep.ExposedMS, rep.NumSteps)
	var text []string
	if cmp != nil {
		text = append(text, cmp.describe())
	} else {
		text = append(text, fmt.Sprintf("Exposed step time %.1f ms/step over steps %d–%d (%d ranks).", exposed, rep.FirstStep, rep.LastStep, rep.NumRanks))
	}

	g := -1
	if cmp != nil && cmp.Material && cmp.DeltaMS > 0 && cmp.ExcessTop1 != "" {
		g, h.Basis = slices.Index(rep.Stages, cmp.ExcessTop1), BasisExcess
	}
	if g < 0 {
		best := 0.0
		for i, ev := range rep.Evidence {
			if ev.Leader.Rank >= 0 && ev.TailMS >= cfg.StragglerMinShare*exposed && ev.TailMS > best {
				g, best, h.Basis = i, ev.TailMS, BasisStraggler
			}
		}
	}
	if g < 0 && rep.Top1 != "" {
		g, h.Basis = slices.Index(rep.Stages, rep.Top1), BasisShare
	}
	if g < 0 {
		text = append(text, "No stage advances the frontier in this window.")
		h.Text = strings.Join(text, " ")
		rep.Headline, rep.LeaderRank = h, -1
		return
	}
	h.Stage = rep.Stages[g]
	text = append(text, stageSentence(rep, cmp, g, h.Basis, exposed))

	ev := rep.Evidence[g].Leader
	h.Confidence = ev.Fraction
	if ev.Rank >= 0 && h.Basis == BasisExcess {
		ev = explains(ev, cmp, h.Stage, cfg)
	}
	if ev.Rank >= 0 {
		h.Rank, h.Host = ev.Rank, ev.Host
		on := ""
		if ev.Host != "" {
			on = " on " + ev.Host
		}
		text = append(text, fmt.Sprintf("Straggler: rank %d%s — %s.", ev.Rank, on, ev.Why))
	} else {
		h.Withheld, h.WithheldWhy, h.TieSet = ev.Withheld, ev.Why, ev.TieSet
		if d, ok := cmp.stageDelta(h.Stage); ok && d.DeltaMS > 0 && d.CurTypicalMS-d.RefTypicalMS >= cfg.UniformShare*d.DeltaMS {
			rose := fmt.Sprintf("every rank's own %s time rose alike (typical rank %.1f → %.1f ms/step while the frontier rose %.1f ms/step)",
				h.Stage, d.RefTypicalMS, d.CurTypicalMS, d.DeltaMS)
			switch ev.Withheld {
			case WithheldSpread:
				h.Withheld = WithheldUniform
				// Stage vectors cannot tell a shared slowdown from every rank
				// waiting inside the stage (a collective) on one late rank.
				h.WithheldWhy = rose + ", and no rank leads consistently: either every rank slowed down, or a collective or barrier inside the stage makes all of them wait for a different rank each step; stage vectors cannot tell which — collective-level evidence is needed"
			case WithheldAbsorbed:
				h.WithheldWhy += "; " + rose
			}
		}
		text = append(text, "No consistent straggler rank: "+h.WithheldWhy+".")
	}
	h.Caveats = caveats(rep)
	if len(h.Caveats) > 0 {
		text = append(text, "Caveats: "+strings.Join(h.Caveats, "; ")+".")
	}
	h.Text = strings.Join(text, " ")
	rep.Headline, rep.LeaderRank = h, h.Rank
}

// explains checks that a named leader of stage accounts for a material
// part of the stage's rise against the reference: the tail it creates
// there must have grown by ExplainShare of the rise. Otherwise the rank is
// withheld as the cause (it is still the frontier's leader in the
// evidence); when it explains part of it, its share is said.
func explains(ev LeaderEvidence, cmp *Comparison, stage string, cfg Config) LeaderEvidence {
	d, ok := cmp.stageDelta(stage)
	if !ok || d.DeltaMS <= 0 {
		return ev
	}
	grew := d.CurTailMS - d.RefTailMS
	share := grew / d.DeltaMS
	if share >= cfg.ExplainShare {
		if share < 1-cfg.ExplainShare {
			ev.Why += fmt.Sprintf("; the tail it creates grew %.1f ms/step, %.0f%% of the stage's %+.1f ms/step rise (the rest every rank shares)", grew, 100*share, d.DeltaMS)
		}
		return ev
	}
	out := ev
	out.Rank = -1
	out.Withheld = WithheldNotCause
	out.Why = fmt.Sprintf("rank %d leads the frontier in %s (%s), but the tail it creates there grew by only %.1f ms/step of the stage's %+.1f ms/step rise (%.0f%%), so it does not explain the slowdown; the typical rank's own time there went %.1f → %.1f ms/step",
		ev.Rank, stage, ev.Why, grew, d.DeltaMS, 100*max(share, 0), d.RefTypicalMS, d.CurTypicalMS)
	return out
}

// stageSentence says why the headline points at stage g.
func stageSentence(rep *Report, cmp *Comparison, g int, basis Basis, exposed float64) string {
	name := rep.Stages[g]
	largest := ""
	if rep.Top1 != "" && rep.Top1 != name && !rep.RawOnly {
		t := slices.Index(rep.Stages, rep.Top1)
		largest = fmt.Sprintf(" %s still holds the largest share of exposed time (%.0f%%).", rep.Top1, 100*rep.Share[t])
	}
	switch basis {
	case BasisExcess:
		d, _ := cmp.stageDelta(name)
		return fmt.Sprintf("The increase is in %s: %+.1f ms/step of exposed time (share %.0f%% → %.0f%%).%s",
			name, d.DeltaMS, 100*d.RefShare, 100*d.CurShare, largest)
	case BasisStraggler:
		ev := rep.Evidence[g]
		return fmt.Sprintf("A straggler makes %s expose %.1f ms/step (%.0f%% of the step time) more than the typical rank.%s",
			name, ev.TailMS, 100*ev.TailMS/max(exposed, 1e-12), largest)
	}
	if rep.RawOnly {
		return fmt.Sprintf("%s advances the frontier most (%.2f ms/step; below the %.1f ms floor, raw advances only).",
			name, perStep(rep.AdvanceMS[g], rep.NumSteps), rep.Config.DenominatorFloorMS)
	}
	return fmt.Sprintf("The largest share of exposed time is %s (%.0f%%, %.1f ms/step).", name, 100*rep.Share[g], perStep(rep.AdvanceMS[g], rep.NumSteps))
}

// caveats turns the downgrade labels into plain words.
func caveats(rep *Report) []string {
	var out []string
	for _, l := range rep.Labels {
		switch l.Name {
		case LabelTelemetryLimited:
			out = append(out, "telemetry is incomplete ("+strings.TrimSuffix(l.Reason, "; strong labels suppressed")+")")
		case LabelCoCritical:
			out = append(out, fmt.Sprintf("stages {%s} are co-critical: fixing one may expose another", strings.Join(rep.CoCriticalStages, ", ")))
		case LabelRoleAwareNeeded:
			out = append(out, "ranks have different roles; diagnose each role group on its own")
		case LabelGradAccumAmbiguous:
			out = append(out, "accumulation microsteps are collapsed or missing")
		case LabelForwardEventScopeLimits:
			out = append(out, "too few CUDA-event forward samples completed to judge device time")
		case LabelForwardHostOverhead:
			out = append(out, "forward looks like host overhead, not device work (CUDA-event time is low)")
		case LabelForwardSpillover:
			out = append(out, "forward device work likely surfaces in backward")
		}
	}
	return out
}
