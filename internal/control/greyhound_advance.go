package control

import (
	"context"
	"math"

	"github.com/laggard-dev/laggard/internal/analysis"
)

// requestValidation records on s a validation asked for through the API
// at nowNS; the next Advance acts on it. It reports false, recording
// nothing, while the controller is already validating.
func requestValidation(s *analysis.GreyhoundState, nowNS int64) bool {
	if s.Controller.Phase == analysis.PhaseValidation {
		return false
	}
	s.ManualNS = nowNS
	if s.Controller.Phase == "" {
		s.Controller = analysis.NewGreyhoundController(nowNS)
	}
	return true
}

// AdvanceOptions shape one controller step. Zero fields are taken as 0:
// the caller (Greyhound, the loop) owns the defaults.
type AdvanceOptions struct {
	// WindowNS is the span of calls analysed: the latest WindowNS before
	// the newest call.
	WindowNS int64
	// MarginNS is how far ahead of the ranks a plan's at_step is
	// scheduled (clients poll every ~2 s, plus their shipping delay).
	MarginNS int64
}

// ValidationOutcome is how a validation run ended (or began), as the
// server counts them.
type ValidationOutcome string

// Validation outcomes.
const (
	OutcomePublished ValidationOutcome = "published" // a plan was published
	OutcomeDone      ValidationOutcome = "done"      // every asked rank answered
	OutcomeExpired   ValidationOutcome = "expired"   // the deadline passed with ranks missing
	OutcomeAbandoned ValidationOutcome = "abandoned" // a relief ended the episode
)

// Advanced is one transition an Advance made, with what the server
// measures of it.
type Advanced struct {
	analysis.Transition
	// DetectNS is the detection latency — from the end of the onset
	// iteration to entering profiling — on the transition an onset made;
	// -1 on the others.
	DetectNS int64
	// VerdictNS is the verdict latency — from the episode's onset to the
	// verdict — on a transition into verdict in an episode an onset
	// started; -1 on the others.
	VerdictNS int64
	// Outcome is how the validation this transition leaves ended; ""
	// when it leaves none.
	Outcome ValidationOutcome
}

// AdvanceResult is one controller step: the state to store, the plan to
// publish with it and the report the step saw.
type AdvanceResult struct {
	// Next is the state to store; Changed says it differs from the one
	// given (store it, with Plan, in one write).
	Next    *analysis.GreyhoundState
	Changed bool
	// Plan is the validation plan this step publishes, nil when none.
	Plan *analysis.GreyhoundPlan
	// Report is the analysis of the window this step fed the controller,
	// with the controller state the step leaves.
	Report *analysis.GreyhoundReport
	// Transitions are the phase changes made in this step, oldest first.
	Transitions []Advanced
}

// Advance moves job's controller one step at nowNS from the stored state
// st: it analyses the latest calls (Analyze), turns the report into an
// observation — the newest change point not yet consumed, the groups
// once profiling has enough post-onset iterations, the results posted
// for the open plan, the newest step — and runs the engine's pure Step
// (§4.1). A pending manual request first moves tracking or a held
// verdict to profiling. It reads the store, never a clock, and writes
// nothing: the caller persists AdvanceResult.Next and Plan.
func (g *GreyhoundLifecycle) Advance(ctx context.Context, job string, nowNS int64, st *analysis.GreyhoundState, opt AdvanceOptions) (*AdvanceResult, error) {
	gi, err := g.Load(ctx, analysis.GreyhoundRequest{Job: job, LastNS: opt.WindowNS, NowNS: nowNS})
	if err != nil {
		return nil, err
	}
	cfg := g.Config()
	if st.Incarnation != gi.Incarnation {
		// The job restarted: the episode, its change points and any plan
		// were the previous launch's, whose processes are gone. Start
		// over on the new launch's calls (the window holds only them).
		st = &analysis.GreyhoundState{Incarnation: gi.Incarnation, ManualNS: st.ManualNS}
	}
	cs := st.Controller
	if cs.Phase == "" {
		cs = analysis.NewGreyhoundController(nowNS)
	}
	rep, err := gi.Analyze(&cs, cfg)
	if err != nil {
		return nil, err
	}
	before := cs
	next := *st
	obs := analysis.GreyhoundObservation{NowNS: nowNS, Step: max(gi.LastStep, 0)}
	// A manual request (API) starts an episode without an onset: the
	// controller enters profiling from tracking or a held verdict.
	if st.ManualNS > 0 {
		if cs.Phase == analysis.PhaseTracking || cs.Phase == analysis.PhaseVerdict {
			obs.Manual = true
			next.OnsetNS = 0
		}
		next.ManualNS = 0
	}
	// With the validation results, lateness lets the verdict name a rank
	// that enters collectives late while its GEMM and links are healthy.
	obs.Lateness = &rep.Lateness
	obs.IterMS = recentIterNS(rep) / 1e6
	if cp := analysis.LatestChange(rep, st.SeenNS, cfg); cp != nil {
		next.SeenNS = cp.EndNS
		if cp.Kind == analysis.GreyhoundOnset {
			obs.Onset = cp
		} else {
			obs.Relief = cp
		}
	}
	if cs.Phase == analysis.PhaseProfiling && profileReady(rep, cs, st, cfg, nowNS) {
		obs.Clusters = rep.Groups
		if obs.Clusters == nil {
			obs.Clusters = []analysis.GreyhoundCluster{}
		}
	}
	if cs.Phase == analysis.PhaseValidation && cs.Plan != nil {
		if obs.Results, err = g.Results(job, cs.Plan.ID); err != nil {
			return nil, err
		}
	}
	cfg.PlanLeadSteps = leadSteps(gi, rep, nowNS, opt.MarginNS)
	stepped, plan := analysis.StepGreyhound(cs, obs, cfg)
	if plan != nil {
		// The engine's deadline is a constant; the ranks need the lead
		// to at_step, the agreement and the benchmark on a slow link.
		d := PlanDeadlineMS(plan, gi.LastStepNS+(cfg.PlanLeadSteps+1)*int64(recentIterNS(rep))-nowNS, g.Config().DeadlineMS)
		plan.DeadlineMS = d
		if stepped.Plan != nil {
			p := *stepped.Plan
			p.DeadlineMS = d
			stepped.Plan = &p
		}
		next.PlanCreatedNS = nowNS
		next.Published = &analysis.PublishedPlan{ID: plan.ID, CreatedNS: nowNS, DeadlineMS: d}
	}
	next.Controller = stepped
	if stepped.Phase == analysis.PhaseTracking {
		next.PlanCreatedNS = 0
	}
	res := &AdvanceResult{Next: &next, Plan: plan, Report: rep}
	// Transitions made in this step (manual + engine), in order: the
	// episode's onset is known from the one that entered profiling on.
	for _, t := range newTransitions(before.History, stepped.History) {
		a := Advanced{Transition: t, DetectNS: -1, VerdictNS: -1}
		switch {
		case t.From == analysis.PhaseTracking && t.To == analysis.PhaseProfiling && obs.Onset != nil:
			next.OnsetNS = obs.Onset.EndNS
			a.DetectNS = max(0, t.AtNS-obs.Onset.EndNS)
		case t.To == analysis.PhaseVerdict && next.OnsetNS > 0:
			a.VerdictNS = max(0, t.AtNS-next.OnsetNS)
		}
		if t.From == analysis.PhaseValidation {
			a.Outcome = OutcomeDone
			switch {
			case t.To == analysis.PhaseTracking:
				a.Outcome = OutcomeAbandoned
			case len(obs.Results) < len(validationRanks(before.Plan)):
				a.Outcome = OutcomeExpired
			}
		}
		res.Transitions = append(res.Transitions, a)
	}
	if len(res.Transitions) > 0 || plan != nil {
		// The report should show the state this step leaves (it is what
		// the server serves until the next round): analyse again with it.
		if res.Report, err = gi.Analyze(&next.Controller, g.Config()); err != nil {
			return nil, err
		}
	}
	res.Changed = len(res.Transitions) > 0 || plan != nil || next.SeenNS != st.SeenNS || next.ManualNS != st.ManualNS || st.Controller.Phase == ""
	return res, nil
}

// profileReady: cross-group comparison looks at the latest ProfileIters
// iterations (§4.3), so it is fed once that many follow the onset — a
// window of mostly healthy iterations would hide the degraded group —
// or half the profiling timeout has passed with at least 3 of them.
// A manual request profiles at once.
func profileReady(rep *analysis.GreyhoundReport, cs analysis.ControllerState, st *analysis.GreyhoundState, cfg analysis.GreyhoundConfig, nowNS int64) bool {
	if st.OnsetNS == 0 {
		return true
	}
	n := 0
	for _, it := range rep.Iteration.Series {
		if it.EndNS > st.OnsetNS {
			n++
		}
	}
	return n >= cfg.ProfileIters || (n >= 3 && nowNS-cs.Since >= cfg.ProfileTimeoutNS/2)
}

// leadSteps sizes the plan's margin in steps: the ranks are ahead of the
// newest stored step by the shipping delay, and every rank must poll the
// plan before reaching at_step, so it is scheduled marginNS beyond where
// the ranks are now, in iterations of the current (slow) iteration time.
func leadSteps(gi *analysis.GreyhoundInput, rep *analysis.GreyhoundReport, nowNS, marginNS int64) int64 {
	iterNS := recentIterNS(rep)
	if iterNS <= 0 {
		return 1
	}
	lag := float64(max(0, nowNS-gi.LastStepNS))
	return max(1, int64(math.Ceil((lag+float64(marginNS))/iterNS)))
}

func validationRanks(p *analysis.GreyhoundPlan) []int {
	if p == nil {
		return nil
	}
	return p.GEMM.Ranks
}

// recentIterNS is the mean of the latest 5 iterations in ns, 0 unknown:
// after an onset the median of the whole window is the healthy time.
func recentIterNS(rep *analysis.GreyhoundReport) float64 {
	s := rep.Iteration.Series
	if len(s) == 0 {
		return 0
	}
	k := max(0, len(s)-5)
	var sum float64
	for _, it := range s[k:] {
		sum += it.MS
	}
	return sum / float64(len(s)-k) * 1e6
}

// Deadline model (docs/format/greyhound.md): the floors are the slow
// hardware validation must still finish on — a link degraded to
// 100 Mbit/s, a CPU GEMM — and the agreement is the client's wait for
// every rank to reach at_step (clients/python: at most 15 s).
const (
	deadlineAgreeMS   = 15_000
	deadlineLinkBps   = 12.5e6 // 100 Mbit/s
	deadlineGEMMFlops = 10e9
	deadlineSlack     = 1.25
	// MaxPlanDeadlineMS caps a plan's deadline: a verdict must not wait
	// on a missing rank for longer.
	MaxPlanDeadlineMS = 600_000
)

// PlanDeadlineMS sizes a plan's deadline from its publication:
//
//	deadline = clamp(lead + agree + 1.25·bench, base, 600 s)
//	bench    = min(gemm + p2p, budget + passes · largest / 100 Mbit/s)
//	lead     = time until the ranks end at_step (leadNS, ≥ 0)
//	gemm     = reps · 2n³ / 10 GFLOP/s
//	p2p      = passes · reps · Σ sizes / 100 Mbit/s
//
// where base is the configured deadline (30 s). With a budget the ranks
// stop benchmarking once it is spent, but a transfer in flight completes
// (gloo cannot cancel one): at most one of the largest per pass. Results
// that arrive within it are judged; the deadline counts from the plan's
// creation, so it has to cover the lead to at_step too.
func PlanDeadlineMS(p *analysis.GreyhoundPlan, leadNS, baseMS int64) int64 {
	var sizes, largest float64
	for _, b := range p.P2P.SizesBytes {
		sizes += float64(b)
		largest = max(largest, float64(b))
	}
	n := float64(p.GEMM.N)
	passes := float64(len(p.P2P.Passes))
	benchS := float64(p.GEMM.Reps)*2*n*n*n/deadlineGEMMFlops + passes*float64(p.P2P.Reps)*sizes/deadlineLinkBps
	if p.BudgetMS > 0 {
		benchS = min(benchS, float64(p.BudgetMS)/1e3+passes*largest/deadlineLinkBps)
	}
	ms := float64(max(leadNS, 0))/1e6 + deadlineAgreeMS + deadlineSlack*benchS*1e3
	return min(max(int64(math.Ceil(ms)), baseMS), MaxPlanDeadlineMS)
}

// newTransitions are the transitions after holds that before lacks. The
// history is trimmed to the engine's MaxHistory, so once full a new
// transition does not lengthen it: the new ones follow before's last.
func newTransitions(before, after []analysis.Transition) []analysis.Transition {
	if len(before) == 0 {
		return after
	}
	last := before[len(before)-1]
	for i := len(after) - 1; i >= 0; i-- {
		t := after[i]
		if t.AtNS == last.AtNS && t.From == last.From && t.To == last.To && t.Reason == last.Reason {
			return after[i+1:]
		}
	}
	return after
}
