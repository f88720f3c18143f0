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
		it.Method, it.Rank, it.Period, it.ACF, it.Series = MethodACF, ref.Rank, ref.Period, round(ref.ACF, 4), ref.Iters
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
		rep.ChangePoints = changePoints(ref.Iters, cfg)
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
		rep.Validation = append(rep.Validation, ValidationView{ID: v.Plan.ID, State: st, GEMM: orEmpty(j.GEMM), Links: orEmpty(j.Links), Verdict: j.Verdict})
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
	switch {
	case state.Verdict != nil:
		rep.Verdict = *state.Verdict
	case state.Phase == PhaseProfiling || state.Phase == PhaseValidation:
		rep.Verdict = Verdict{Kind: VerdictInconclusive, Ranks: []int{}, Links: []Link{}, Confidence: ConfidenceLow,
			Text: fmt.Sprintf("slowdown detected; %s in progress", state.Phase)}
	default:
		rep.Verdict = Verdict{Kind: VerdictNone, Ranks: []int{}, Links: []Link{}, Confidence: ConfidenceHigh,
			Text: "no verified slowdown in the iteration time"}
		if ref == nil {
			rep.Verdict.Kind, rep.Verdict.Confidence = VerdictInconclusive, ConfidenceLow
			rep.Verdict.Text = "iteration time could not be derived from the calls"
		} else if rep.Telemetry.Limited {
			rep.Verdict.Confidence = ConfidenceLow
		}
	}
	return rep, nil
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
func changePoints(iters []Iter, cfg Config) []ChangePointView {
	ms := make([]float64, len(iters))
	for i, x := range iters {
		ms[i] = x.MS
	}
	view := func(c stats.ChangePoint, verified bool) ChangePointView {
		k := KindOnset
		if !c.Rise() {
			k = KindRelief
		}
		return ChangePointView{Index: c.Index, EndNS: iters[c.Index].EndNS, BeforeMS: round(c.Before, 3), AfterMS: round(c.After, 3),
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
				s, _ = Step(s, Observation{NowNS: c.EndNS, Results: v.Results, Lateness: &rep.Lateness}, cfg)
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
