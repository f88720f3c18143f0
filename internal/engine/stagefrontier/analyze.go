package stagefrontier

import (
	"fmt"
	"math"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Gain baselines of §4 eq.4.
const (
	BaselineRankMedian   = "rank_median"
	BaselineCohortMedian = "cohort_median"
)

// analyzer holds the window-level accumulators and the per-step scratch of
// one Analyze call. sweep reads the durations once, in rank blocks, into
// per-step and per-rank state; finishStep then settles each step
// (accounting.go).
type analyzer struct {
	w          *stagevec.Window
	cfg        Config
	T, R, S, G int
	K          int
	group      []int
	pres       []bool // nil: every cell present
	generic    bool   // skip the unrolled six-stage sweep (tests)

	// Per-step scratch.
	F, second []float64 // S
	thr       []float64 // S
	advances  []bool    // S
	nPresent  int

	// Sweep state.
	bnd      []colState  // T*S
	steps    []stepState // T
	cand     [][]tieCand // T*S tie candidates
	candOver []bool      // T*S: candidates overflowed

	acct      accounting
	base      baselineAcc
	gain      gainAcc
	series    []StepPoint
	seriesAdv []float64 // T*G backing of StepPoint.AdvanceMS
	badTotal  int       // cells whose prefix is not finite
}

func analyze(w *stagevec.Window, cfg Config) (*Report, error) { return analyzeWith(w, cfg, false) }

// analyzeWith runs Analyze; generic disables the unrolled six-stage sweep
// so tests can check the fast path against the plain loop.
func analyzeWith(w *stagevec.Window, cfg Config, generic bool) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k, err := checkWindow(w)
	if err != nil {
		return nil, err
	}
	a := newAnalyzer(w, cfg, k)
	a.generic = generic
	a.rankMedians() // §4 eq.4 baselines are needed by the sweep
	a.cohortMedians()
	a.sweep()
	for t := 0; t < a.T; t++ {
		a.finishStep(t)
	}
	if a.badTotal > 0 {
		return nil, &signal.FieldError{Field: "d", Msg: fmt.Sprintf("%d cells have non-finite durations", a.badTotal)}
	}
	rep := a.report()
	label(rep, a)
	Diagnose(rep, nil)
	return rep, nil
}

func newAnalyzer(w *stagevec.Window, cfg Config, k int) *analyzer {
	T, R, S := w.Dims()
	a := &analyzer{w: w, cfg: cfg, T: T, R: R, S: S, G: len(w.Schema.Stages), K: k, group: w.Group, pres: w.Present,
		F: make([]float64, S), second: make([]float64, S), thr: make([]float64, S), advances: make([]bool, S),
		series: make([]StepPoint, T), seriesAdv: make([]float64, T*len(w.Schema.Stages))}
	a.bnd, a.steps = make([]colState, T*S), make([]stepState, T)
	inf := math.Inf(1)
	for i := range a.bnd {
		a.bnd[i] = colState{gate: -inf, F: -inf, sec: -inf, thr: -inf, mx: -inf, mn: inf}
	}
	for i := range a.steps {
		a.steps[i] = stepState{slow: -1, slowTot: -inf}
	}
	a.cand, a.candOver = make([][]tieCand, T*S), make([]bool, T*S)
	inline := make([]tieCand, T*S*candInline)
	for i := range a.cand {
		a.cand[i] = inline[i*candInline : i*candInline : (i+1)*candInline]
	}
	a.acct.init(a)
	a.base.init(a)
	a.gain.init(a)
	return a
}

func (a *analyzer) present(t, r int) bool { return a.pres == nil || a.pres[t*a.R+r] }

// step returns the R*S block of step t.
func (a *analyzer) step(t int) []float64 {
	n := a.R * a.S
	return a.w.D[t*n : (t+1)*n : (t+1)*n]
}

// report assembles the Report from the accumulators.
func (a *analyzer) report() *Report {
	w, G := a.w, a.G
	rep := &Report{
		JobID: w.JobID, FirstStep: w.Steps[0], LastStep: w.Steps[a.T-1], NumSteps: a.T, NumRanks: a.R,
		Stages: append([]string(nil), w.Schema.Stages...), OrderHash: w.Schema.OrderHash(), Config: a.cfg,
		ExposedMS: a.acct.exposed, StepSeries: a.series, LeaderRank: -1,
	}
	rep.AdvanceMS = a.groupSum(a.acct.adv)
	sum := 0.0
	for _, x := range rep.AdvanceMS {
		sum += x
	}
	rep.TelescopeErrMS = math.Abs(sum - rep.ExposedMS) // Theorem 1
	rt := route(rep.Stages, rep.AdvanceMS, a.cfg.CandidateThreshold)
	rep.RawOnly = rep.ExposedMS < a.cfg.DenominatorFloorMS || rt.Share == nil
	if !rep.RawOnly {
		rep.Share = rt.Share // §3 eq.2
	}
	rep.Routing, rep.Top1, rep.Top2 = rt.Routing, rt.Top1, rt.Top2
	rep.CoCriticalStages = []string{}
	rep.GainMS = map[string][]float64{
		BaselineRankMedian:   append([]float64(nil), a.gain.rank[:G]...),
		BaselineCohortMedian: append([]float64(nil), a.gain.cohort[:G]...),
	}
	rep.Ranks = a.rankStats()
	a.leaderSwitches(rep)
	rep.Evidence = a.stageEvidence(rep)
	rep.Quality = a.quality()
	rep.Baselines = a.baselines()
	rep.Contract = append([]stagevec.Finding(nil), w.Findings...)
	return rep
}

// groupSum aggregates an effective-stage vector onto schema stages; §3
// aggregates accumulation groups only after the frontier is taken.
func (a *analyzer) groupSum(eff []float64) []float64 {
	out := make([]float64, a.G)
	for s, x := range eff {
		out[a.group[s]] += x
	}
	return out
}
