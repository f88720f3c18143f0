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
	AxisAccounting Axis = "accounting"
	AxisModelFit   Axis = "model_fit"
	AxisDirectGain Axis = "direct_gain"
	AxisDevice     Axis = "device_evidence"
	AxisAmbiguity  Axis = "ambiguity"
	AxisRole       Axis = "role_clarity"
	AxisTelemetry  Axis = "telemetry"
)

// labeler holds what the App. B labeler derives once from the report and
// the analyzer; each label family is one method on it.
type labeler struct {
	rep *Report
	a   *analyzer
	cfg Config
	out []Label

	limited   []string // telemetry gates that failed (App. A Table 11)
	roleAware bool
	accum     bool
	collapsed int

	rt                   routed // frontier shares on schema stages
	top1                 int
	top1Share, top2Share float64
	gainBest             []float64 // max of the two §4 eq.4 baselines
	gainRatio            float64   // G/A of the top-1 stage
	gr                   routed    // stages ranked by gain

	dominant, lowGain, nearTie, gainTie, highSwitch bool
	// strong: telemetry, role and denominator gates all pass (App. C).
	strong bool
}

// label runs the deterministic labeler of App. B with the gates of App. C.
// Strong labels (model fit, direct gain, device support) are emitted only
// when the telemetry, role and denominator gates pass; downgrade labels
// (co_critical, gradient_accumulation_ambiguous, role_aware_needed,
// telemetry_limited, forward_event_scope_limited) explain why not.
func label(rep *Report, a *analyzer) {
	l := &labeler{rep: rep, a: a, cfg: a.cfg}
	l.telemetryGates()
	l.shares()
	l.accounting()
	l.modelFit()
	l.directExposure()
	l.out = append(l.out, a.forwardLabels(rep, l.strong)...)
	l.coCritical()
	l.downgrades()
	rep.Labels = l.out
}

func (l *labeler) add(name LabelName, axis Axis, stage, format string, args ...any) {
	l.out = append(l.out, Label{Name: name, Axis: axis, Stage: stage, Reason: fmt.Sprintf(format, args...)})
}

// telemetryGates collects the App. A Table 11 / App. C Table 13 telemetry
// failures and the role and accumulation conditions.
func (l *labeler) telemetryGates() {
	cfg, q, a := l.cfg, l.rep.Quality, l.a
	lim := func(format string, args ...any) { l.limited = append(l.limited, fmt.Sprintf(format, args...)) }
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
	if a.w.Has(FindingDuplicate) {
		lim("duplicate (step,rank,micro) vectors")
	}
	if a.w.Has(FindingPrefetch) {
		lim("prefetched data waits fetched before the window could not be reassigned")
	}
	l.roleAware = q.RoleGroups > 1
	l.collapsed = a.collapsedCells()
	l.accum = a.K > 1 && (l.collapsed > 0 || a.w.Has(FindingAccumulation))
}

// shares derives the frontier and gain rankings the model-fit and
// ambiguity labels read (§4, App. C).
func (l *labeler) shares() {
	rep, cfg := l.rep, l.cfg
	l.rt = route(rep.Stages, rep.AdvanceMS, cfg.CandidateThreshold)
	l.top1 = slices.Index(rep.Stages, rep.Top1)
	if l.top1 >= 0 {
		l.top1Share = l.rt.Share[l.top1]
		if len(l.rt.Order) > 1 {
			l.top2Share = l.rt.Share[l.rt.Order[1]]
		}
	}
	l.gainBest = make([]float64, len(rep.Stages))
	for g := range l.gainBest {
		l.gainBest[g] = max(rep.GainMS[BaselineRankMedian][g], rep.GainMS[BaselineCohortMedian][g])
	}
	if l.top1 >= 0 && rep.AdvanceMS[l.top1] > 0 {
		l.gainRatio = l.gainBest[l.top1] / rep.AdvanceMS[l.top1]
	}
	l.gr = route(rep.Stages, l.gainBest, 1)
	l.dominant = l.top1 >= 0 && l.top1Share >= cfg.DominanceShare
	l.lowGain = l.gainRatio < cfg.StaticGainThreshold
	l.nearTie = len(l.rt.Order) > 1 && l.top1Share-l.top2Share <= cfg.TieTolerance
	if len(l.gr.Order) > 1 && rep.ExposedMS > 0 {
		g1, g2 := l.gainBest[l.gr.Order[0]]/rep.ExposedMS, l.gainBest[l.gr.Order[1]]/rep.ExposedMS
		l.gainTie = g2 >= cfg.TieTolerance && g1-g2 <= cfg.TieTolerance
	}
	l.highSwitch = l.a.acct.confident > 1 && rep.LeaderSwitchRate > cfg.LeaderSwitchRate
	l.strong = len(l.limited) == 0 && !l.roleAware && !l.accum && !rep.RawOnly && l.top1 >= 0
}

// accounting emits frontier_accounting, the base claim (Theorem 1).
func (l *labeler) accounting() {
	rep, a := l.rep, l.a
	raw := ""
	if rep.RawOnly {
		raw = fmt.Sprintf("; denominator %.3f ms below floor %.3f ms, raw advances only", rep.ExposedMS, l.cfg.DenominatorFloorMS)
	}
	l.add(LabelFrontierAccounting, AxisAccounting, "", "advances sum to %.3f ms = exposed makespan Σ_t F[t,S] %.3f ms over %d steps × %d ranks (telescoping error %.2g ms)%s",
		sumOf(rep.AdvanceMS), rep.ExposedMS, a.T, a.R, rep.TelescopeErrMS, raw)
}

// modelFit emits likely_sync_wait and sync_wait_dependent (App. B model-fit
// axis). likely_sync_wait needs per-rank displacement evidence: at least
// half of the ranks trail the frontier at the top stage's boundary by a
// material share of its advance, and that lag is absorbed downstream. A
// leading share alone (every rank slow alike) is no wait displacement.
func (l *labeler) modelFit() {
	rep, cfg := l.rep, l.cfg
	if !l.strong || !l.dominant || !cfg.ModelFit {
		return
	}
	top := rep.Stages[l.top1]
	if !l.nearTie {
		absorb, absorbMS, lagAtTop := absorption(rep, l.top1)
		ev := rep.Evidence[l.top1]
		displaced := ev.AdvanceMS > 0 && ev.TypicalLagMS >= cfg.DisplacementShare*ev.AdvanceMS
		if displaced && absorb >= 0 && lagAtTop > 0 && absorbMS >= 0.5*lagAtTop {
			l.add(LabelLikelySyncWait, AxisModelFit, top, "%s leads with share %.3f ≥ %.2f; at least half of the ranks trail its boundary by %.1f ms/step (≥ %.0f%% of its %.1f ms advance) and catch up %.1f ms in %s, the wait-displacement pattern; model_fit=true",
				top, l.top1Share, cfg.DominanceShare, ev.TypicalLagMS, 100*cfg.DisplacementShare, ev.AdvanceMS, absorbMS/float64(rep.NumSteps), rep.Stages[absorb])
		}
	}
	if l.lowGain {
		l.add(LabelSyncWaitDependent, AxisModelFit, top, "%s share %.3f ≥ %.2f but clipped gain/advance %.3f < %.2f; actionability depends on the sync-wait model (model_fit=true)",
			top, l.top1Share, cfg.DominanceShare, l.gainRatio, cfg.StaticGainThreshold)
	}
}

// directExposure emits direct_exposure when raw spread, frontier share and
// clipped static gain agree (App. B direct-gain axis).
func (l *labeler) directExposure() {
	rep, cfg := l.rep, l.cfg
	if !l.strong || !l.dominant || l.lowGain || l.nearTie {
		return
	}
	agree := ""
	for _, b := range rep.Baselines {
		if (b.Method == MethodPerStageMax || b.Method == MethodRankSpread) && b.Top1 == rep.Top1 && agree == "" {
			agree = b.Method
		}
	}
	if agree != "" {
		l.add(LabelDirectExposure, AxisDirectGain, rep.Top1, "%s share %.3f ≥ %.2f, clipped gain/advance %.3f ≥ %.2f, and %s also ranks it first",
			rep.Top1, l.top1Share, cfg.DominanceShare, l.gainRatio, cfg.StaticGainThreshold, agree)
	}
}

// coCritical emits co_critical with its ambiguity set: near ties, low gain
// without model fit, or unstable leaders (App. C).
func (l *labeler) coCritical() {
	rep, cfg := l.rep, l.cfg
	if rep.RawOnly || l.top1 < 0 {
		return
	}
	top := rep.Top1
	var why []string
	set := map[int]bool{}
	if l.nearTie {
		why = append(why, fmt.Sprintf("top shares %.3f and %.3f within tie tolerance %.3f", l.top1Share, l.top2Share, cfg.TieTolerance))
		for _, g := range l.rt.Order {
			if l.top1Share-l.rt.Share[g] <= cfg.TieTolerance {
				set[g] = true
			}
		}
	}
	if l.gainTie {
		g0 := l.gainBest[l.gr.Order[0]]
		why = append(why, fmt.Sprintf("top clipped gains %.1f and %.1f ms within tie tolerance of the exposed makespan", g0, l.gainBest[l.gr.Order[1]]))
		for _, g := range l.gr.Order {
			if (g0-l.gainBest[g])/rep.ExposedMS <= cfg.TieTolerance {
				set[g] = true
			}
		}
	}
	if l.dominant && l.lowGain && !cfg.ModelFit {
		why = append(why, fmt.Sprintf("%s share %.3f ≥ %.2f but clipped gain/advance %.3f < %.2f with model_fit=false", top, l.top1Share, cfg.DominanceShare, l.gainRatio, cfg.StaticGainThreshold))
		set[l.top1] = true
		if len(l.gr.Order) > 0 {
			set[l.gr.Order[0]] = true
		}
		if absorb, _, _ := absorption(rep, l.top1); absorb >= 0 {
			set[absorb] = true
		}
		if len(set) == 1 && len(l.rt.Order) > 1 {
			set[l.rt.Order[1]] = true
		}
	}
	if l.highSwitch {
		why = append(why, fmt.Sprintf("leader switch rate %.2f > %.2f over %d confident steps", rep.LeaderSwitchRate, cfg.LeaderSwitchRate, l.a.acct.confident))
		set[l.top1] = true
	}
	if len(why) > 0 {
		rep.CoCriticalStages = orderedSet(set, l.rt.Order, rep.Stages)
		l.add(LabelCoCritical, AxisAmbiguity, "", "%s; ambiguity set {%s}", strings.Join(why, "; "), strings.Join(rep.CoCriticalStages, ", "))
	}
}

// downgrades emits the accumulation, role and telemetry downgrade labels.
func (l *labeler) downgrades() {
	if l.accum {
		l.add(LabelGradAccumAmbiguous, AxisAmbiguity, "", "accumulation factor %d: %d (step,rank) cells have collapsed or missing microsteps; data/backward displacement cannot be separated", l.a.K, l.collapsed)
	}
	if l.roleAware {
		l.add(LabelRoleAwareNeeded, AxisRole, "", "%d role groups (pipeline stage, role name) among reporting ranks; a global frontier across them is unsafe", l.rep.Quality.RoleGroups)
	}
	if len(l.limited) > 0 {
		l.add(LabelTelemetryLimited, AxisTelemetry, "", "%s; strong labels suppressed", strings.Join(l.limited, "; "))
	}
}

// forwardLabels reads the sampled CUDA-event forward channel (§5, App. B).
// The event/CPU ratio is taken on the rank that most often advances the
// forward boundary, where the frontier points, falling back to all ranks.
func (a *analyzer) forwardLabels(rep *Report, strong bool) []Label {
	// strong already requires every telemetry gate to pass.
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
			ev, scope = e, fmt.Sprintf("forward-leading rank %d", a.rankID(r))
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
