package stagefrontier

import (
	"fmt"

	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Label axes (StageFrontier App. B Table 12): labels are orthogonal
// evidence axes, not a confidence ladder.
const (
	AxisAccounting = "accounting"
	AxisModelFit   = "model_fit"
	AxisDirectGain = "direct_gain"
	AxisDevice     = "device_evidence"
	AxisAmbiguity  = "ambiguity"
	AxisRole       = "role_clarity"
	AxisTelemetry  = "telemetry"
)

// label runs the deterministic labeler of App. B with the gates of App. C.
// Strong labels (model fit, direct gain, device support) are emitted only
// when the telemetry, role and denominator gates pass; downgrade labels
// (co_critical, gradient_accumulation_ambiguous, role_aware_needed,
// telemetry_limited, forward_event_scope_limited) explain why not.
func label(rep *Report, a *analyzer) {
	cfg, q := a.cfg, rep.Quality
	var out []Label
	add := func(name, axis, stage, format string, args ...any) {
		out = append(out, Label{Name: name, Axis: axis, Stage: stage, Reason: fmt.Sprintf(format, args...)})
	}

	// Telemetry gates (App. A Table 11, App. C Table 13).
	var limited []string
	lim := func(format string, args ...any) { limited = append(limited, fmt.Sprintf(format, args...)) }
	if q.MaxClosureShare > cfg.ClosureResidualShare {
		lim("closure residual share %.3f > gate %.3f", q.MaxClosureShare, cfg.ClosureResidualShare)
	}
	if q.MaxOverlapShare > cfg.OverlapErrorShare {
		lim("overlap error share %.3f > gate %.3f", q.MaxOverlapShare, cfg.OverlapErrorShare)
	}
	if len(q.MissingRanks) > cfg.MaxMissingRanks {
		lim("%d of %d ranks missing > gate %d", len(q.MissingRanks), a.R, cfg.MaxMissingRanks)
	}
	if partial := q.MissingCells - len(q.MissingRanks)*a.T; partial > 0 {
		lim("%d (step,rank) cells missing from reporting ranks", partial)
	}
	if q.Dropped > 0 {
		lim("clients dropped %d vectors", q.Dropped)
	}
	if q.Nested > 0 {
		lim("%d nested ordered spans rejected (one-active-stage check)", q.Nested)
	}
	if hasFinding(a.w, FindingDuplicate) {
		lim("duplicate (step,rank,micro) vectors")
	}
	if hasFinding(a.w, FindingPrefetch) {
		lim("prefetched data waits fetched before the window could not be reassigned")
	}
	roleAware := q.RoleGroups > 1
	collapsed := a.collapsedCells()
	accum := a.K > 1 && (collapsed > 0 || hasFinding(a.w, FindingAccumulation))

	// Frontier shares and gains on schema stages.
	rt := route(rep.Stages, rep.AdvanceMS, cfg.CandidateThreshold)
	top1 := slices.Index(rep.Stages, rep.Top1)
	var top1Share, top2Share float64
	if top1 >= 0 {
		top1Share = rt.Share[top1]
		if len(rt.Order) > 1 {
			top2Share = rt.Share[rt.Order[1]]
		}
	}
	gainBest := make([]float64, len(rep.Stages))
	for g := range gainBest {
		gainBest[g] = max(rep.GainMS[BaselineRankMedian][g], rep.GainMS[BaselineCohortMedian][g])
	}
	gainRatio := 0.0
	if top1 >= 0 && rep.AdvanceMS[top1] > 0 {
		gainRatio = gainBest[top1] / rep.AdvanceMS[top1]
	}
	gr := route(rep.Stages, gainBest, 1)

	dominant := top1 >= 0 && top1Share >= cfg.DominanceShare
	lowGain := gainRatio < cfg.StaticGainThreshold
	nearTie := len(rt.Order) > 1 && top1Share-top2Share <= cfg.TieTolerance
	gainTie := false
	if len(gr.Order) > 1 && rep.ExposedMS > 0 {
		g1, g2 := gainBest[gr.Order[0]]/rep.ExposedMS, gainBest[gr.Order[1]]/rep.ExposedMS
		gainTie = g2 >= cfg.TieTolerance && g1-g2 <= cfg.TieTolerance
	}
	highSwitch := a.acct.confident > 1 && rep.LeaderSwitchRate > cfg.LeaderSwitchRate
	strong := len(limited) == 0 && !roleAware && !accum && !rep.RawOnly && top1 >= 0
	topName := rep.Top1

	// frontier_accounting: the base claim (Theorem 1).
	raw := ""
	if rep.RawOnly {
		raw = fmt.Sprintf("; denominator %.3f ms below floor %.3f ms, raw advances only", rep.ExposedMS, cfg.DenominatorFloorMS)
	}
	add(LabelFrontierAccounting, AxisAccounting, "", "advances sum to %.3f ms = exposed makespan Σ_t F[t,S] %.3f ms over %d steps × %d ranks (telescoping error %.2g ms)%s",
		sumOf(rep.AdvanceMS), rep.ExposedMS, a.T, a.R, rep.TelescopeErrMS, raw)

	absorb, absorbMS, lagAtTop := -1, 0.0, 0.0
	if top1 >= 0 {
		absorb, absorbMS, lagAtTop = absorption(rep, top1)
	}
	if strong && dominant && cfg.ModelFit && !nearTie && absorb >= 0 && lagAtTop > 0 && absorbMS >= 0.5*lagAtTop {
		add(LabelLikelySyncWait, AxisModelFit, topName, "%s leads with share %.3f ≥ %.2f; ranks behind at its boundary (Σ lag %.1f ms) catch up %.1f ms in %s, the wait-displacement pattern; model_fit=true",
			topName, top1Share, cfg.DominanceShare, lagAtTop, absorbMS, rep.Stages[absorb])
	}
	if strong && dominant && lowGain && cfg.ModelFit {
		add(LabelSyncWaitDependent, AxisModelFit, topName, "%s share %.3f ≥ %.2f but clipped gain/advance %.3f < %.2f; actionability depends on the sync-wait model (model_fit=true)",
			topName, top1Share, cfg.DominanceShare, gainRatio, cfg.StaticGainThreshold)
	}
	agree := ""
	for _, b := range rep.Baselines {
		if (b.Method == MethodPerStageMax || b.Method == MethodRankSpread) && b.Top1 == topName && agree == "" {
			agree = b.Method
		}
	}
	if strong && dominant && !lowGain && !nearTie && agree != "" {
		add(LabelDirectExposure, AxisDirectGain, topName, "%s share %.3f ≥ %.2f, clipped gain/advance %.3f ≥ %.2f, and %s also ranks it first",
			topName, top1Share, cfg.DominanceShare, gainRatio, cfg.StaticGainThreshold, agree)
	}

	out = append(out, a.forwardLabels(rep, strong && len(limited) == 0)...)

	// co_critical: near ties, low gain without model fit, or unstable leaders (App. C).
	if !rep.RawOnly && top1 >= 0 {
		var why []string
		set := map[int]bool{}
		if nearTie {
			why = append(why, fmt.Sprintf("top shares %.3f and %.3f within tie tolerance %.3f", top1Share, top2Share, cfg.TieTolerance))
			for _, g := range rt.Order {
				if top1Share-rt.Share[g] <= cfg.TieTolerance {
					set[g] = true
				}
			}
		}
		if gainTie {
			why = append(why, fmt.Sprintf("top clipped gains %.1f and %.1f ms within tie tolerance of the exposed makespan", gainBest[gr.Order[0]], gainBest[gr.Order[1]]))
			for _, g := range gr.Order {
				if (gainBest[gr.Order[0]]-gainBest[g])/rep.ExposedMS <= cfg.TieTolerance {
					set[g] = true
				}
			}
		}
		if dominant && lowGain && !cfg.ModelFit {
			why = append(why, fmt.Sprintf("%s share %.3f ≥ %.2f but clipped gain/advance %.3f < %.2f with model_fit=false", topName, top1Share, cfg.DominanceShare, gainRatio, cfg.StaticGainThreshold))
			set[top1] = true
			if len(gr.Order) > 0 {
				set[gr.Order[0]] = true
			}
			if absorb >= 0 {
				set[absorb] = true
			}
			if len(set) == 1 && len(rt.Order) > 1 {
				set[rt.Order[1]] = true
			}
		}
		if highSwitch {
			why = append(why, fmt.Sprintf("leader switch rate %.2f > %.2f over %d confident steps", rep.LeaderSwitchRate, cfg.LeaderSwitchRate, a.acct.confident))
			set[top1] = true
		}
		if len(why) > 0 {
			rep.CoCriticalStages = orderedSet(set, rt.Order, rep.Stages)
			add(LabelCoCritical, AxisAmbiguity, "", "%s; ambiguity set {%s}", strings.Join(why, "; "), strings.Join(rep.CoCriticalStages, ", "))
		}
	}
	if accum {
		add(LabelGradAccumAmbiguous, AxisAmbiguity, "", "accumulation factor %d: %d (step,rank) cells have collapsed or missing microsteps; data/backward displacement cannot be separated", a.K, collapsed)
	}
	if roleAware {
		add(LabelRoleAwareNeeded, AxisRole, "", "%d role groups (pipeline stage, role name) among reporting ranks; a global frontier across them is unsafe", q.RoleGroups)
	}
	if len(limited) > 0 {
		add(LabelTelemetryLimited, AxisTelemetry, "", "%s; strong labels suppressed", strings.Join(limited, "; "))
	}
	rep.Labels = out
}

// forwardLabels reads the sampled CUDA-event forward channel (§5, App. B).
// The event/CPU ratio is taken on the rank that most often advances the
// forward boundary, where the frontier points, falling back to all ranks.
func (a *analyzer) forwardLabels(rep *Report, strong bool) []Label {
	cfg := a.cfg
	fwd := a.w.Schema.Index(stagevec.StageForward)
	all := a.events(-1)
	if fwd < 0 || all.samples == 0 {
		return nil
	}
	readyRatio := float64(all.ready) / float64(all.samples)
	if all.ready < cfg.MinEventSamples || readyRatio < cfg.EventReadyRatio {
		return []Label{{Name: LabelForwardEventScopeLimits, Axis: AxisDevice, Stage: stagevec.StageForward,
			Reason: fmt.Sprintf("event ready ratio %.2f (gate %.2f) with %d ready of %d samples (minimum %d)", readyRatio, cfg.EventReadyRatio, all.ready, all.samples, cfg.MinEventSamples)}}
	}
	if !strong {
		return nil
	}
	ev, scope := all, "all ranks"
	if r := a.boundaryLeader(fwd); r >= 0 {
		if e := a.events(r); e.ready >= cfg.MinEventSamples {
			ev, scope = e, fmt.Sprintf("forward-leading rank %d", r)
		}
	}
	ratio := ev.ratio()
	bwd := stagevec.StageBackward
	var out []Label
	inTop2 := slices.Contains(rep.Top2, stagevec.StageForward)
	if ratio >= cfg.ForwardEventHighRatio && inTop2 {
		out = append(out, Label{Name: LabelForwardDeviceSupported, Axis: AxisDevice, Stage: stagevec.StageForward,
			Reason: fmt.Sprintf("forward in top-2; CUDA-event/CPU-wall forward ratio %.2f ≥ %.2f on %s (%d ready samples, ready ratio %.2f)", ratio, cfg.ForwardEventHighRatio, scope, ev.ready, readyRatio)})
	}
	if ratio >= cfg.ForwardEventHighRatio && rep.Top1 == bwd {
		out = append(out, Label{Name: LabelForwardSpillover, Axis: AxisDevice, Stage: stagevec.StageForward,
			Reason: fmt.Sprintf("CUDA-event forward ratio %.2f ≥ %.2f on %s while %s leads the frontier: forward device work likely surfaces in backward", ratio, cfg.ForwardEventHighRatio, scope, bwd)})
	}
	if ratio <= cfg.ForwardEventLowRatio && rep.Top1 == stagevec.StageForward {
		out = append(out, Label{Name: LabelForwardHostOverhead, Axis: AxisDevice, Stage: stagevec.StageForward,
			Reason: fmt.Sprintf("forward leads the frontier but CUDA-event/CPU-wall forward ratio %.2f ≤ %.2f on %s: host overhead suspected", ratio, cfg.ForwardEventLowRatio, scope)})
	}
	return out
}

// boundaryLeader is the rank most often in the tie set of an advancing
// boundary of schema stage g, or -1.
func (a *analyzer) boundaryLeader(g int) int {
	best, bestN := -1, int64(0)
	for r := 0; r < a.R; r++ {
		n := int64(0)
		for s := 0; s < a.S; s++ {
			if a.group[s] == g {
				n += int64(a.acct.leadAdv[r*a.S+s])
			}
		}
		if n > bestN {
			best, bestN = r, n
		}
	}
	return best
}

// collapsedCells counts present cells with accumulation where some
// microstep block is all zero while the cell is not: a microstep that was
// missing or folded into another.
func (a *analyzer) collapsedCells() int {
	if a.K < 2 {
		return 0
	}
	n := 0
	for t := 0; t < a.T; t++ {
		for r := 0; r < a.R; r++ {
			if !a.present(t, r) {
				continue
			}
			row := a.w.Row(t, r)
			empty, total := false, 0.0
			for m := 0; m < a.K; m++ {
				blk := sumOf(row[m*a.G : (m+1)*a.G])
				total += blk
				empty = empty || blk == 0
			}
			if empty && total > 0 {
				n++
			}
		}
	}
	return n
}

// orderedSet lists the set leader-first by frontier share, then by stage.
func orderedSet(set map[int]bool, order []int, names []string) []string {
	out := []string{}
	for _, g := range order {
		if set[g] {
			out = append(out, names[g])
			delete(set, g)
		}
	}
	for g := range names {
		if set[g] {
			out = append(out, names[g])
		}
	}
	return out
}
