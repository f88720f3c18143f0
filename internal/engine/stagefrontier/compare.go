package stagefrontier

import (
	"fmt"
	"math"
)

// Comparison sets a window against a reference window: the job's own
// healthy steps before a change point (before/after), an explicit
// baseline, or another run (run A vs run B). Absolute frontier shares
// (§3 eq.2) rank a steady large stage first however healthy it is; the
// per-step excess over the reference ranks what changed, so an exposed
// tail that appeared cannot hide behind it. Both are reported.
type Comparison struct {
	Reference WindowRef `json:"reference"`
	// RefExposedMS and CurExposedMS are the mean exposed step times
	// Σ_t F[t,S]/T of the two windows.
	RefExposedMS float64 `json:"ref_exposed_ms"`
	CurExposedMS float64 `json:"cur_exposed_ms"`
	DeltaMS      float64 `json:"delta_ms"`
	// Rel is DeltaMS/RefExposedMS (0 when the reference is empty).
	Rel float64 `json:"rel"`
	// Material: |DeltaMS| ≥ max(ExcessMinRel·RefExposedMS, ExcessMinMS).
	Material bool         `json:"material"`
	Stages   []StageDelta `json:"stages"`
	// ExcessRouting is the routing set (§4, same τ) over the stages'
	// positive per-step advance increases; ExcessTop1 leads it.
	ExcessRouting []string `json:"excess_routing"`
	ExcessTop1    string   `json:"excess_top1"`
}

// WindowRef names a window.
type WindowRef struct {
	JobID     string `json:"job_id"`
	Group     string `json:"group,omitempty"`
	FirstStep int64  `json:"first_step"`
	LastStep  int64  `json:"last_step"`
	NumSteps  int    `json:"num_steps"`
	// Basis says how it was chosen, in words ("steps before the change
	// point at step 412", "explicit baseline", "run B").
	Basis string `json:"basis"`
}

// StageDelta is one stage in both windows, per step.
type StageDelta struct {
	Stage string `json:"stage"`
	// RefMS/CurMS are mean frontier advances per step; DeltaMS = Cur−Ref.
	RefMS   float64 `json:"ref_ms"`
	CurMS   float64 `json:"cur_ms"`
	DeltaMS float64 `json:"delta_ms"`
	// Shares of exposed time (§3 eq.2) in each window.
	RefShare   float64 `json:"ref_share"`
	CurShare   float64 `json:"cur_share"`
	DeltaShare float64 `json:"delta_share"`
	// The typical rank's own mean time in the stage, per step.
	RefTypicalMS float64 `json:"ref_typical_ms"`
	CurTypicalMS float64 `json:"cur_typical_ms"`
	// The exposed tail created in the stage (StageEvidence.TailMS).
	RefTailMS float64 `json:"ref_tail_ms"`
	CurTailMS float64 `json:"cur_tail_ms"`
}

// Compare sets cur against ref. Stages are matched by name in cur's
// order; a stage ref lacks counts as zero there. cur's Config supplies
// τ and the materiality gates.
func Compare(cur, ref *Report, basis string) *Comparison {
	cfg := cur.Config
	c := &Comparison{
		Reference: WindowRef{JobID: ref.JobID, FirstStep: ref.FirstStep, LastStep: ref.LastStep, NumSteps: ref.NumSteps, Basis: basis},
	}
	c.RefExposedMS, c.CurExposedMS = perStep(ref.ExposedMS, ref.NumSteps), perStep(cur.ExposedMS, cur.NumSteps)
	c.DeltaMS = c.CurExposedMS - c.RefExposedMS
	if c.RefExposedMS > 0 {
		c.Rel = c.DeltaMS / c.RefExposedMS
	}
	c.Material = math.Abs(c.DeltaMS) >= max(cfg.ExcessMinRel*c.RefExposedMS, cfg.ExcessMinMS)
	excess := make([]float64, len(cur.Stages))
	for g, name := range cur.Stages {
		d := StageDelta{Stage: name, CurMS: perStep(cur.AdvanceMS[g], cur.NumSteps), CurShare: shareOf(cur, g)}
		if g < len(cur.Evidence) {
			d.CurTypicalMS, d.CurTailMS = cur.Evidence[g].TypicalStageMS, cur.Evidence[g].TailMS
		}
		for h, rn := range ref.Stages {
			if rn != name {
				continue
			}
			d.RefMS, d.RefShare = perStep(ref.AdvanceMS[h], ref.NumSteps), shareOf(ref, h)
			if h < len(ref.Evidence) {
				d.RefTypicalMS, d.RefTailMS = ref.Evidence[h].TypicalStageMS, ref.Evidence[h].TailMS
			}
		}
		d.DeltaMS, d.DeltaShare = d.CurMS-d.RefMS, d.CurShare-d.RefShare
		excess[g] = max(d.DeltaMS, 0)
		c.Stages = append(c.Stages, d)
	}
	rt := route(cur.Stages, excess, cfg.CandidateThreshold)
	c.ExcessRouting, c.ExcessTop1 = rt.Routing, rt.Top1
	return c
}

func perStep(total float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return total / float64(n)
}

func shareOf(r *Report, g int) float64 {
	if r.RawOnly || g >= len(r.Share) {
		return 0
	}
	return r.Share[g]
}

// stageDelta returns the delta of the named stage; false on a nil
// comparison.
func (c *Comparison) stageDelta(name string) (StageDelta, bool) {
	if c == nil {
		return StageDelta{}, false
	}
	for _, d := range c.Stages {
		if d.Stage == name {
			return d, true
		}
	}
	return StageDelta{}, false
}

// describe says how the exposed step time moved, in words.
func (c *Comparison) describe() string {
	ref := c.Reference
	against := fmt.Sprintf("steps %d–%d", ref.FirstStep, ref.LastStep)
	if ref.Basis != "" {
		against += " (" + ref.Basis + ")"
	}
	if !c.Material {
		return fmt.Sprintf("Step time is steady at %.1f ms/step (%.1f ms/step in %s).", c.CurExposedMS, c.RefExposedMS, against)
	}
	verb := "rose"
	if c.DeltaMS < 0 {
		verb = "fell"
	}
	return fmt.Sprintf("Step time %s from %.1f to %.1f ms/step (%+.0f%%) against %s.", verb, c.RefExposedMS, c.CurExposedMS, 100*c.Rel, against)
}
