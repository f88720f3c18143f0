package greyhound

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

// StepTruth is a client-reported training step (for §7.2's iteration-time
// error only; detection never uses it).
type StepTruth struct {
	Step    int64 `json:"step"`
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
}

// Input is everything Analyze needs (contract §4). Job, NowNS and State
// are additions: the report's name and time come from the caller (no
// clock here), and State is the server's live controller state; without
// it Analyze replays the controller over what the calls show.
type Input struct {
	Job         string
	NowNS       int64
	Calls       []collective.Call
	Comms       []collective.Comm
	World       int
	Dropped     int64
	Validations []ValidationRun
	Steps       []StepTruth
	State       *ControllerState
}

// NewDetector returns the configured slow-iteration detector (§4.2).
func NewDetector(cfg Config) stats.Online {
	switch cfg.Detector {
	case DetectorBOCD:
		return stats.DefaultBOCD()
	case DetectorWindow:
		w := stats.DefaultSlidingWindow()
		w.MinRel = cfg.VerifyRel
		return w
	}
	v := stats.DefaultVerified()
	v.MinRel = cfg.VerifyRel
	if cfg.VerifyWindow > 0 {
		v.After = cfg.VerifyWindow
	}
	v.MinSpan = cfg.VerifyMinSpanMS
	return v
}

// Analyze runs Greyhound-Detect over a window of calls.
func Analyze(in Input, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for i := range in.Calls {
		if err := in.Calls[i].Validate(in.World); err != nil {
			return nil, fmt.Errorf("calls[%d].%w", i, err)
		}
	}
	rep := &Report{Job: in.Job, GeneratedNS: in.NowNS, Detector: cfg.Detector,
		ChangePoints: []ChangePointView{}, Groups: []Cluster{}, Validation: []ValidationView{}}
	// Per rank, enter order.
	calls := slices.Clone(in.Calls)
	slices.SortStableFunc(calls, func(a, b collective.Call) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.EnterNS, b.EnterNS))
	})
	var perRank [][]collective.Call
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j].Rank == calls[i].Rank {
			j++
		}
		perRank = append(perRank, calls[i:j])
		i = j
	}
	rep.Telemetry = Telemetry{Calls: len(calls), Ranks: len(perRank), Dropped: in.Dropped,
		Limited: in.Dropped > 0 || (in.World > 0 && len(perRank) < in.World)}

	// §4.2 iteration time per rank; the reference rank's series is the job's.
	it := Iteration{Method: MethodNone, Rank: -1, Ranks: []RankPeriod{}, Series: []Iter{}}
	var ref *IterSeries
	for _, rc := range perRank {
		s, err := IterationTimes(rc, cfg)
		if err != nil {
			return nil, err
		}
		it.Ranks = append(it.Ranks, RankPeriod{Rank: s.Rank, Period: s.Period, ACF: round(s.ACF, 4), OK: s.OK, Reason: s.Reason})
		if s.OK && (ref == nil || betterRef(&s, ref)) {
			ref = &s
		}
	}
	if ref != nil {
		it.Method, it.Rank, it.Period, it.ACF, it.Series = MethodACF, ref.Rank, ref.Period, round(ref.ACF, 4), slices.Clone(ref.Iters)
		ms := make([]float64, len(ref.Iters))
		for i, x := range ref.Iters {
			ms[i] = x.MS
		}
		it.MedianMS = stats.Median(ms)
		if e, ok := truthError(ref.Iters, in.Steps); ok {
			it.TruthErrorPct = &e
		}
		if ref.Warmup > 0 || ref.Unmatched > 0 || ref.Resyncs > 0 {
			it.Note = fmt.Sprintf("rank %d: %d warm-up call(s), %d unaligned call(s), %d resync(s)", ref.Rank, ref.Warmup, ref.Unmatched, ref.Resyncs)
		}
		if n := maskPauses(it.Series, in.Validations); n > 0 {
			note := fmt.Sprintf("%d iteration(s) overlap a validation pause and are left out of change-point detection", n)
			if it.Note != "" {
				note = it.Note + "; " + note
			}
			it.Note = note
		}
		rep.ChangePoints = changePoints(it.Series, cfg)
	} else if len(perRank) > 0 {
		it.Note = "no rank shows a recurring call pattern: iteration time unknown"
	}
	rep.Iteration = it

	// §4.3 profiling over the latest ProfileIters iterations.
	window := calls
	if ref != nil && len(ref.Iters) > 0 {
		k := max(0, len(ref.Iters)-cfg.ProfileIters)
		from := ref.Iters[k].EndNS - int64(ref.Iters[k].MS*1e6)
		window = nil
		for _, c := range calls {
			if c.EnterNS >= from {
				window = append(window, c)
			}
		}
	}
	rep.Groups = CompareGroups(window, in.Comms, cfg)
	rep.Lateness = EntryLateness(window, cfg.MaxLatenessInstances)

	// Validation runs.
	for _, v := range in.Validations {
		j := JudgeAll(v.Plan, v.Results, cfg)
		st := ValidationPending
		switch {
		case j.Complete:
			st = ValidationDone
		case v.Expired:
			st = ValidationExpired
		}
		vv := ValidationView{ID: v.Plan.ID, State: st, AtStep: v.Plan.AtStep, CreatedNS: v.CreatedNS, DeadlineMS: v.Plan.DeadlineMS,
			GEMM: orEmpty(j.GEMM), Links: orEmpty(j.Links), Verdict: j.Verdict}
		for _, r := range v.Results {
			if r.PausedFromNS > 0 && r.PausedToNS >= r.PausedFromNS {
				if vv.PausedFromNS == 0 || r.PausedFromNS < vv.PausedFromNS {
					vv.PausedFromNS = r.PausedFromNS
				}
				vv.PausedToNS = max(vv.PausedToNS, r.PausedToNS)
			}
		}
		rep.Validation = append(rep.Validation, vv)
	}

	// Controller: the server's, or a replay over this window.
	state := in.State
	if state == nil {
		s := replay(rep, in, cfg)
		state = &s
	}
	rep.Controller = ControllerView{Phase: state.Phase, SinceNS: state.Since, History: state.History, Plan: state.Plan}
	if rep.Controller.History == nil {
		rep.Controller.History = []Transition{}
	}
	rep.Verdict = currentVerdict(rep, state, ref != nil, cfg)
	return rep, nil
}

// currentVerdict is the verdict a report shows: the controller's, or one
// for where it stands. Entry lateness is weighed in every phase (issue 16,
// item 6): a rank the others consistently wait for is named even before
// (or without) a validation — with low confidence, saying what was not
// tested — never hidden behind "none" or "in progress".
func currentVerdict(rep *Report, state *ControllerState, haveSeries bool, cfg Config) Verdict {
	iterMS := recentMS(rep.Iteration.Series)
	switch {
	case state.Verdict != nil:
		return *state.Verdict
	case state.Phase == PhaseProfiling || state.Phase == PhaseValidation:
		text := fmt.Sprintf("slowdown detected; %s in progress", state.Phase)
		if late, ok := LateRank(&rep.Lateness, state.Onset, iterMS, cfg); ok {
			return lateOnly(late, text+"; meanwhile ", []string{"compute and network not validated yet"})
		}
		return newVerdict(VerdictInconclusive, nil, nil, text, nil)
	case !haveSeries:
		return newVerdict(VerdictInconclusive, nil, nil, "iteration time could not be derived from the calls", nil)
	}
	var caveats []string
	if rep.Telemetry.Limited {
		caveats = append(caveats, "telemetry limited: calls were dropped or ranks are missing")
	}
	if late, ok := LateRank(&rep.Lateness, nil, iterMS, cfg); ok {
		return lateOnly(late, "no change in the iteration time was detected, but ",
			append(caveats, "no slowdown was detected: the straggler may have been there since the window began", "compute and network not validated"))
	}
	return newVerdict(VerdictNone, nil, nil, "no verified slowdown in the iteration time", caveats)
}

// lateOnly names a late rank from lateness alone (no validation).
func lateOnly(late LateEvidence, lead string, caveats []string) Verdict {
	text := fmt.Sprintf("%srank %d enters %s on %s last on %d of %d instances, a median %.1f ms after the next member; the others wait %.1f ms per iteration for it",
		lead, late.Rank, late.Op, late.Comm, late.Last, late.Instances, late.MarginMS, late.WaitMS)
	e := Explanation{IncreaseMS: late.IncreaseMS, AccountedMS: late.WaitMS, Frac: late.Frac, Explains: true,
		Basis: "the others' wait for it per iteration, over every collective"}
	if late.IncreaseMS > 0 {
		text += fmt.Sprintf(" (%.0f%% of the +%.1f ms increase)", 100*late.Frac, late.IncreaseMS)
	} else {
		text += fmt.Sprintf(" (%.0f%% of the iteration time)", 100*late.Frac)
		e.Basis += ", against the iteration time (no onset)"
	}
	v := newVerdict(VerdictLateRank, []int{late.Rank}, nil, text, caveats)
	v.Explanation = &e
	return v
}

// recentMS is the median of the latest ProfileIters-like span (20) of the
// series, 0 when empty.
func recentMS(it []Iter) float64 {
	k := max(0, len(it)-20)
	ms := make([]float64, 0, len(it)-k)
	for _, x := range it[k:] {
		ms = append(ms, x.MS)
	}
	if len(ms) == 0 {
		return 0
	}
	return stats.Median(ms)
}

func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// betterRef prefers more iterations, then a higher ACF, then the lower rank.
func betterRef(a, b *IterSeries) bool {
	if len(a.Iters) != len(b.Iters) {
		return len(a.Iters) > len(b.Iters)
	}
	if a.ACF != b.ACF {
		return a.ACF > b.ACF
	}
	return a.Rank < b.Rank
}

func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// changePoints runs the configured detector on the series. With BOCD+V
// the plain BOCD candidates are listed too, marked unverified, so the UI
// can show what verification dropped.
//
// Iterations that overlap a validation pause (Paused) are left out of the
// detector's input: the pause is one huge iteration whose aftermath would
// read as an onset and then a relief. Indexes stay those of the series.
func changePoints(iters []Iter, cfg Config) []ChangePointView {
	ms := make([]float64, 0, len(iters))
	at := make([]int, 0, len(iters)) // detector index → series index
	for i, x := range iters {
		if !x.Paused {
			ms = append(ms, x.MS)
			at = append(at, i)
		}
	}
	view := func(c stats.ChangePoint, verified bool) ChangePointView {
		k := KindOnset
		if !c.Rise() {
			k = KindRelief
		}
		i := at[c.Index]
		return ChangePointView{Index: i, EndNS: iters[i].EndNS, BeforeMS: round(c.Before, 3), AfterMS: round(c.After, 3),
			Rel: round(c.RelChange(), 4), Kind: k, Prob: round(c.Score, 4), Verified: verified}
	}
	out := []ChangePointView{}
	det := NewDetector(cfg)
	got := det.Detect(ms)
	if cfg.Detector != DetectorBOCDV {
		for _, c := range got {
			out = append(out, view(c, false))
		}
	} else {
		ver := map[int]stats.ChangePoint{}
		for _, c := range got {
			ver[c.Index] = c
		}
		for _, c := range stats.DefaultBOCD().Detect(ms) {
			if v, ok := ver[c.Index]; ok {
				out = append(out, view(v, true))
				delete(ver, c.Index)
			} else {
				out = append(out, view(c, false))
			}
		}
		for _, v := range ver { // cannot happen (verified ⊆ candidates) but never lose one
			out = append(out, view(v, true))
		}
		slices.SortFunc(out, func(a, b ChangePointView) int { return cmp.Compare(a.Index, b.Index) })
	}
	if len(out) > 256 {
		out = out[len(out)-256:]
	}
	return out
}

// maskPauses marks the iterations that overlap a validation pause the
// ranks reported (their clocks are the calls' clocks) and returns how many.
func maskPauses(iters []Iter, runs []ValidationRun) int {
	type span struct{ from, to int64 }
	var pauses []span
	for _, v := range runs {
		for _, r := range v.Results {
			if r.PausedFromNS > 0 && r.PausedToNS >= r.PausedFromNS {
				pauses = append(pauses, span{r.PausedFromNS, r.PausedToNS})
			}
		}
	}
	n := 0
	for i := range iters {
		start := iters[i].EndNS - int64(math.Round(iters[i].MS*1e6))
		for _, p := range pauses {
			if start < p.to && iters[i].EndNS > p.from {
				iters[i].Paused = true
				n++
				break
			}
		}
	}
	return n
}

// decisive reports whether a change point drives the controller: the
// verified ones under BOCD+V, every one under the baselines.
func decisive(c ChangePointView, cfg Config) bool {
	return cfg.Detector != DetectorBOCDV || c.Verified
}

// replay runs the controller over the change points of this window, the
// comparison and the validation runs, for reports made without a server
// (the CLI, evaluation).
func replay(rep *Report, in Input, cfg Config) ControllerState {
	start := in.NowNS
	if len(rep.Iteration.Series) > 0 {
		start = rep.Iteration.Series[0].EndNS
	}
	s := NewController(start)
	vi := 0
	for _, c := range rep.ChangePoints {
		if !decisive(c, cfg) {
			continue
		}
		obs := Observation{NowNS: c.EndNS, Step: int64(c.Index)}
		cp := c
		if c.Kind == KindOnset {
			if s.Phase == PhaseVerdict { // a new onset after a verdict: start over
				s, _ = Step(s, Observation{NowNS: c.EndNS, Relief: &cp}, cfg)
			}
			obs.Onset = &cp
			s, _ = Step(s, obs, cfg)
			s, _ = Step(s, Observation{NowNS: c.EndNS, Step: int64(c.Index), Clusters: orEmpty(rep.Groups)}, cfg)
			if s.Phase == PhaseValidation && vi < len(in.Validations) {
				v := in.Validations[vi]
				vi++
				s, _ = Step(s, Observation{NowNS: c.EndNS, Results: v.Results, Lateness: &rep.Lateness, IterMS: recentMS(rep.Iteration.Series)}, cfg)
			}
		} else {
			obs.Relief = &cp
			s, _ = Step(s, obs, cfg)
		}
	}
	return s
}

// truthError is §7.2's relative error of the iteration time against the
// client's steps over the same span (percent), by medians.
func truthError(iters []Iter, steps []StepTruth) (float64, bool) {
	if len(iters) == 0 || len(steps) == 0 {
		return 0, false
	}
	from := iters[0].EndNS - int64(iters[0].MS*1e6)
	to := iters[len(iters)-1].EndNS
	n := 0
	for _, s := range steps {
		if s.EndNS > s.StartNS && s.StartNS >= from && s.EndNS <= to {
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	// Medians, not means: a validation pause (Greyhound §4.3) lies
	// between two steps — inside one collective period but outside the
	// client's step wall times — and one such 10 s iteration would move a
	// mean of 150 by 20%; neither median moves.
	walls := make([]float64, 0, n)
	for _, s := range steps {
		if s.EndNS > s.StartNS && s.StartNS >= from && s.EndNS <= to {
			walls = append(walls, float64(s.EndNS-s.StartNS)/1e6)
		}
	}
	truth := stats.Median(walls)
	mine := make([]float64, len(iters))
	for i, x := range iters {
		mine[i] = x.MS
	}
	ours := stats.Median(mine)
	if truth <= 0 {
		return 0, false
	}
	return round(100*math.Abs(ours-truth)/truth, 3), true
}
