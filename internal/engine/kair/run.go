package kair

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// The full "localize, then pinpoint" pipeline of KAIR §III-B over one
// capture: clock alignment (Feature 4), Stage 1 on the steps every rank
// captured, Stages 2–3 on the slowest of them, root causes aggregated
// across steps, and a verdict that says when the evidence is weak.

// RunConfig configures Run. Zero fields take the defaults (a zero
// Config — "pinpoint" — means DefaultConfig()).
type RunConfig struct {
	Rhythm RhythmConfig `json:"rhythm"`
	Config Config       `json:"pinpoint"` // Stages 2–3
	// Align is the clock method; "" = auto: given if any trace carries a
	// ClockOffsetNS, else per rank the tighter of collectives (where
	// consistent) and heartbeats, else none.
	Align ClockMethod `json:"align"`
	// Steps lists the steps Stages 2–3 run on; nil = choose (MaxSteps).
	Steps []int64 `json:"steps,omitempty"`
	// MaxSteps: when Steps is nil, the MaxSteps slowest steps (by the
	// largest step span of any rank) are analysed.
	MaxSteps int `json:"max_steps"`
	// MinShare is the share of the median step a culprit must cost per
	// step to be named (0.10, the size of slowdown Greyhound's
	// verification counts, §4.2): a healthy job on a busy host always has
	// some rank losing a few milliseconds somewhere, and naming it as the
	// cause of anything is the confidently wrong answer.
	MinShare float64 `json:"min_share"`
}

const (
	defaultMinShare = 0.10
	defaultMaxSteps = 16
	// maxMaxSteps bounds the work of one Run (each step is a pass over
	// every event).
	maxMaxSteps = 1024
	// maxCauses and maxStragglerOutliers bound the report.
	maxCauses            = 20
	maxStragglerOutliers = 50
)

// DefaultRunConfig returns the documented defaults.
func DefaultRunConfig() RunConfig {
	return RunConfig{Rhythm: DefaultRhythmConfig(), Config: DefaultConfig(), MaxSteps: defaultMaxSteps, MinShare: defaultMinShare}
}

func (c RunConfig) withDefaults() RunConfig {
	c.Rhythm = c.Rhythm.withDefaults()
	if c.Config == (Config{}) {
		c.Config = DefaultConfig()
	}
	if c.MaxSteps == 0 {
		c.MaxSteps = defaultMaxSteps
	}
	if c.MinShare == 0 {
		c.MinShare = defaultMinShare
	}
	return c
}

// Validate checks c as Run uses it (zero fields defaulted); errors name
// the field ("rhythm.alpha", "pinpoint.z_threshold", "steps[2]").
func (c RunConfig) Validate() error {
	c = c.withDefaults()
	if err := c.Rhythm.Validate(); err != nil {
		return prefixField("rhythm.", err)
	}
	if err := c.Config.Validate(); err != nil {
		return prefixField("pinpoint.", err)
	}
	switch {
	case !c.Align.valid():
		return signal.FieldErrorf("align", "unknown method %q (want none, given, heartbeat, collectives or empty for auto)", signal.Clip(string(c.Align)))
	case c.MaxSteps < 1 || c.MaxSteps > maxMaxSteps:
		return signal.FieldErrorf("max_steps", "must be in [1,%d], got %d", maxMaxSteps, c.MaxSteps)
	case !(c.MinShare > 0 && c.MinShare < 1):
		return signal.FieldErrorf("min_share", "must be in (0,1), got %v", c.MinShare)
	case len(c.Steps) > maxMaxSteps:
		return signal.FieldErrorf("steps", "%d steps, more than %d", len(c.Steps), maxMaxSteps)
	}
	for i, s := range c.Steps {
		if s < 0 || s > optrace.MaxStep {
			return signal.FieldErrorf(fmt.Sprintf("steps[%d]", i), "%d out of range [0,%d]", s, optrace.MaxStep)
		}
	}
	return nil
}

func prefixField(p string, err error) error {
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		return signal.FieldErrorf(p+fe.Field, "%s", fe.Msg)
	}
	return err
}

// Cause is a root cause aggregated over the analysed steps.
type Cause struct {
	// RootCause: Step is the first analysed step naming it, Symptoms the
	// sum over steps, Score the largest, Evidence the chain of the
	// highest-scoring step, Explains prefixed by their step.
	RootCause
	Steps int `json:"steps"` // analysed steps naming this cause
}

// TraceVerdict is Run's conclusion.
type TraceVerdict string

const (
	VerdictCulprit TraceVerdict = "culprit" // a consistent top root cause
	// VerdictRank: the top candidates compete (none costs 2× the others)
	// but are all on one rank, so the rank is certain and the operator is
	// one of Impact.Causes.
	VerdictRank         TraceVerdict = "culprit_rank"
	VerdictNone         TraceVerdict = "none"         // no outliers: nothing to blame
	VerdictInconclusive TraceVerdict = "inconclusive" // too little or inconsistent evidence
)

// StepSpan is one step's extent per rank (Ranks order, reference clock).
type StepSpan struct {
	Step    int64   `json:"step"`
	StartNS []int64 `json:"start_ns"`
	EndNS   []int64 `json:"end_ns"`
}

// LeftOutRank is a rank whose trace shares no step with the ranks Run
// compared (it recorded other steps: the plan reached it late).
type LeftOutRank struct {
	Rank int `json:"rank"`
	// FirstStep, LastStep and Steps are the steps it recorded (-1, -1, 0:
	// none).
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	Steps     int   `json:"steps"`
}

// TraceReport is the result of Run.
type TraceReport struct {
	// Ranks are the ranks compared; LeftOut those whose traces share no
	// step with them (only when no step is common to every rank).
	Ranks   []int           `json:"ranks"`
	LeftOut []LeftOutRank   `json:"left_out,omitempty"`
	Events  []int           `json:"events"` // per rank
	Steps   []StepSpan      `json:"steps"`  // steps every rank has, ascending
	Clock   []ClockEstimate `json:"clock"`
	Rhythm  *Rhythm         `json:"rhythm"`
	// Analysed are the steps Stages 2–3 ran on (ascending); -1 when the
	// traces carry no step numbers and the capture was analysed whole.
	Analysed    []int64   `json:"analysed"`
	StepReports []*Report `json:"step_reports"`
	// StragglerOutliers: Stage 2's ranked list within the Stage 1
	// straggler, over all analysed steps, highest a first, ≤ 50; empty
	// unless Stage 1 named a straggler.
	StragglerOutliers []Instance `json:"straggler_outliers"`
	// Causes are ranked: steps desc, then score desc; ≤ 20.
	Causes []Cause `json:"causes"`
	// Impact is what the judged candidate(s) explain of the step time —
	// the wait the other ranks spent on their rank; nil when no
	// candidate was judged (no material, consistent, separated cause).
	Impact   *Impact      `json:"impact,omitempty"`
	Verdict  TraceVerdict `json:"verdict"`
	Headline string       `json:"headline"`
	Config   RunConfig    `json:"config"`
}

// Run runs the whole pipeline on one capture: traces (one per rank, any
// order) and optional heartbeats per rank. The caller's traces are not
// modified: alignment sets ClockOffsetNS on copies of the Trace values,
// whose Events are shared read-only.
func Run(traces []optrace.Trace, hb map[int][]Heartbeat, cfg RunConfig) (*TraceReport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(traces) == 0 {
		return nil, signal.FieldErrorf("traces", "no trace to analyse")
	}
	if err := checkRanks(traces); err != nil {
		return nil, err
	}
	if err := checkEvents(traces); err != nil {
		return nil, err
	}
	work := slices.Clone(traces)
	slices.SortFunc(work, func(a, b optrace.Trace) int { return cmp.Compare(a.Rank, b.Rank) })
	var notes []string
	var leftOut []LeftOutRank
	if cfg.Steps == nil && len(commonSteps(work)) == 0 {
		// No step every rank recorded (the plan reached them at different
		// steps): compare the largest group of ranks that shares steps,
		// and say who is left out, rather than nothing at all.
		if keep, out := sharedRanks(work, cfg.Config.MinRanks); keep != nil {
			work, leftOut = keep, out
			notes = append(notes, leftOutNote(out, work))
		}
	}
	n := len(work)
	rep := &TraceReport{Ranks: make([]int, n), Events: make([]int, n), Steps: []StepSpan{},
		Analysed: []int64{}, StepReports: []*Report{}, StragglerOutliers: []Instance{},
		Causes: []Cause{}, Config: cfg, LeftOut: leftOut}
	for j := range work {
		rep.Ranks[j], rep.Events[j] = work[j].Rank, len(work[j].Events)
	}
	var clockNotes []string
	rep.Clock, clockNotes = alignTraces(work, hb, cfg.Align)
	notes = append(notes, clockNotes...)

	notes = append(notes, stepOrderNotes(work)...)
	steps := commonSteps(work)
	rep.Steps = stepSpans(work, steps)
	rh, err := Localize(work, cfg.Rhythm)
	if err != nil {
		return nil, err
	}
	rep.Rhythm = rh

	analysed, note, err := chooseSteps(work, rep.Steps, cfg)
	if err != nil {
		return nil, err
	}
	if note != "" {
		notes = append(notes, note)
	}
	rep.Analysed = analysed
	pin := cfg.Config
	if pin.ClockErrorNS == 0 {
		// Joined collectives are scored across ranks: their spread must
		// exceed the alignment error to count (outliers.go).
		for _, ce := range rep.Clock {
			if ce.Method != ClockNone {
				pin.ClockErrorNS = max(pin.ClockErrorNS, min(ce.ResidualNS, optrace.MaxDurNS))
			}
		}
	}
	for _, s := range analysed {
		r, err := Analyze(work, s, pin)
		if err != nil {
			return nil, err
		}
		rep.StepReports = append(rep.StepReports, r)
	}
	rep.Causes = aggregateCauses(rep.StepReports)
	if rh.Verdict == RhythmStraggler {
		rep.StragglerOutliers = stragglerOutliers(rep.StepReports, rh.Straggler)
	}
	rep.Verdict, rep.Headline = verdict(rep, cfg, notes)
	return rep, nil
}

// checkEvents rejects what would make the arithmetic meaningless
// (negative durations, times beyond optrace bounds, unknown categories);
// the error names the element. The index is formatted only on failure:
// traces run to millions of events.
func checkEvents(traces []optrace.Trace) error {
	for i := range traces {
		t := &traces[i]
		if t.ClockOffsetNS < -optrace.MaxAbsNS || t.ClockOffsetNS > optrace.MaxAbsNS {
			return signal.FieldErrorf(fmt.Sprintf("traces[%d].clock_offset_ns", i), "%d out of range", t.ClockOffsetNS)
		}
		for j := range t.Events {
			e := &t.Events[j]
			var field string
			switch {
			case !e.Cat.Valid():
				field = "cat"
			case e.DurNS < 0 || e.DurNS > optrace.MaxDurNS:
				field = "dur_ns"
			case e.StartNS < -optrace.MaxAbsNS || e.StartNS > optrace.MaxAbsNS:
				field = "start_ns"
			default:
				continue
			}
			return signal.FieldErrorf(fmt.Sprintf("traces[%d].events[%d].%s", i, j, field), "out of range (run Trace.Validate)")
		}
	}
	return nil
}

// alignTraces sets ClockOffsetNS on work (sorted by rank) by method m and
// returns the estimates (work order) and notes for the headline.
func alignTraces(work []optrace.Trace, hb map[int][]Heartbeat, m ClockMethod) ([]ClockEstimate, []string) {
	n := len(work)
	est := make([]ClockEstimate, n)
	given := false
	for j := range work {
		given = given || work[j].ClockOffsetNS != 0
	}
	hbOf := func(j int) (ClockEstimate, bool) {
		s, ok := hb[work[j].Rank]
		if !ok {
			return ClockEstimate{}, false
		}
		e, err := OffsetFromHeartbeats(work[j].Rank, s)
		return e, err == nil
	}
	heartbeatAll := func() {
		for j := range work {
			if e, ok := hbOf(j); ok {
				est[j] = e
			} else {
				est[j] = ClockEstimate{Rank: work[j].Rank, Method: ClockNone}
			}
		}
	}
	switch {
	case m == ClockGiven || (m == "" && given):
		for j := range work {
			est[j] = ClockEstimate{Rank: work[j].Rank, Method: ClockGiven, OffsetNS: work[j].ClockOffsetNS}
		}
	case m == ClockNone:
		for j := range work {
			est[j] = ClockEstimate{Rank: work[j].Rank, Method: ClockNone}
		}
	case m == ClockHeartbeat:
		heartbeatAll()
	case m == ClockCollectives:
		est, _ = AlignByCollectives(work) // ranks checked by Run
	default: // auto
		col, _ := AlignByCollectives(work)
		reached := 0
		for j := 1; j < n; j++ {
			if col[j].Method == ClockCollectives {
				reached++
			}
		}
		anyHB := false
		for j := range work {
			_, ok := hbOf(j)
			anyHB = anyHB || ok
		}
		switch {
		case reached == 0 && anyHB:
			heartbeatAll()
		case reached == 0:
			for j := range work {
				est[j] = ClockEstimate{Rank: work[j].Rank, Method: ClockNone}
			}
		default:
			// Per rank, the tighter of the two bounds: collectives where
			// consistent, heartbeats (made relative to the reference, the
			// lowest rank) where they are tighter or the collectives leave
			// the rank out or contradict themselves. Both residuals are
			// true bounds, so the smaller one is the better estimate: a
			// collective's barrier interval is as wide as the wait for its
			// last member — the injected delay itself when a rank is late
			// — while a poll round trip is a millisecond.
			ref, refOK := hbOf(0)
			for j := range work {
				est[j] = col[j]
				if j == 0 || !refOK {
					continue
				}
				good := col[j].Method == ClockCollectives && col[j].Violations == 0
				if e, ok := hbOf(j); ok {
					off, ok1 := sub(e.OffsetNS, ref.OffsetNS)
					res, ok2 := addSat(e.ResidualNS, ref.ResidualNS)
					if ok1 && ok2 && (!good || res < col[j].ResidualNS) {
						est[j] = ClockEstimate{Rank: e.Rank, Method: ClockHeartbeat, OffsetNS: off,
							ResidualNS: res, Samples: e.Samples}
					}
				}
			}
		}
	}
	var none []string
	var notes []string
	for j := range work {
		if o := est[j].OffsetNS; o < -optrace.MaxAbsNS || o > optrace.MaxAbsNS {
			// An offset beyond any real clock difference comes from
			// corrupt input; applying it would overflow event times.
			notes = append(notes, fmt.Sprintf("clock: rank %d's %s offset %d ns is out of range and was not applied", work[j].Rank, est[j].Method, o))
			est[j] = ClockEstimate{Rank: work[j].Rank, Method: ClockNone}
		}
		work[j].ClockOffsetNS = est[j].OffsetNS
		if est[j].Method == ClockNone {
			none = append(none, fmt.Sprint(work[j].Rank))
		}
		if v := est[j].Violations; v > 0 {
			notes = append(notes, fmt.Sprintf("clock: rank %d's collectives contradict barrier semantics in %d instances, so its offset (±%d ns) is an estimate, not a bound", work[j].Rank, v, est[j].ResidualNS))
		}
	}
	if n > 1 && len(none) > 0 && m != ClockNone {
		notes = append(notes, fmt.Sprintf("clock: rank(s) %s not aligned (no shared collective or heartbeat), cross-rank arrival times may be off", clipList(none)))
	}
	return est, notes
}

func clipList(xs []string) string {
	if len(xs) > 8 {
		return strings.Join(xs[:8], ", ") + fmt.Sprintf(" and %d more", len(xs)-8)
	}
	return strings.Join(xs, ", ")
}

// stepSpans is each common step's [first start, last end] per rank on
// the aligned clock.
func stepSpans(work []optrace.Trace, steps []int64) []StepSpan {
	out := make([]StepSpan, len(steps))
	at := make(map[int64]int, len(steps))
	for i, s := range steps {
		at[s] = i
		out[i] = StepSpan{Step: s, StartNS: make([]int64, len(work)), EndNS: make([]int64, len(work))}
		for j := range work {
			out[i].StartNS[j], out[i].EndNS[j] = math.MaxInt64, math.MinInt64
		}
	}
	for j := range work {
		t := &work[j]
		for k := range t.Events {
			e := &t.Events[k]
			i, ok := at[e.Step]
			if !ok {
				continue
			}
			s := e.StartNS + t.ClockOffsetNS // bounded by checkEvents: no overflow
			out[i].StartNS[j] = min(out[i].StartNS[j], s)
			out[i].EndNS[j] = max(out[i].EndNS[j], s+e.DurNS)
		}
	}
	return out
}

// chooseSteps picks the steps Stages 2–3 run on: cfg.Steps (each must be
// one every rank has), else the MaxSteps slowest by their largest rank
// span — a straggler's slow step is the one worth pinpointing. Without
// any common step but with step-less events on every rank, the capture is
// analysed whole as "step" -1.
func chooseSteps(work []optrace.Trace, spans []StepSpan, cfg RunConfig) ([]int64, string, error) {
	if cfg.Steps != nil {
		have := make(map[int64]bool, len(spans))
		for _, s := range spans {
			have[s.Step] = true
		}
		out := []int64{}
		for i, s := range cfg.Steps {
			if !have[s] {
				return nil, "", signal.FieldErrorf(fmt.Sprintf("steps[%d]", i), "step %d is not captured by every rank", s)
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		slices.Sort(out)
		return out, "", nil
	}
	if len(spans) == 0 {
		// Whole capture as one step only for traces without step numbers:
		// ranks that recorded different steps are not comparable, and
		// matching their k-th operators would blame the misalignment.
		var have []string
		for j := range work {
			lo, hi := int64(-1), int64(-1)
			for _, e := range work[j].Events {
				if e.Step >= 0 {
					if lo < 0 || e.Step < lo {
						lo = e.Step
					}
					hi = max(hi, e.Step)
				}
			}
			if lo >= 0 {
				have = append(have, fmt.Sprintf("rank %d: %d–%d", work[j].Rank, lo, hi))
			}
		}
		if len(have) > 0 {
			if len(have) > 8 {
				have = append(have[:8], "…")
			}
			return []int64{}, "the ranks recorded different steps (" + strings.Join(have, ", ") + "): nothing to compare", nil
		}
		for j := range work {
			if !slices.ContainsFunc(work[j].Events, func(e optrace.Event) bool { return e.Step < 0 }) {
				return []int64{}, "", nil
			}
		}
		return []int64{-1}, "the traces carry no step numbers: the whole capture was analysed as one step", nil
	}
	type sd struct {
		step int64
		dur  int64
	}
	ds := make([]sd, len(spans))
	for i, s := range spans {
		d := int64(0)
		for j := range s.StartNS {
			d = max(d, s.EndNS[j]-s.StartNS[j])
		}
		ds[i] = sd{s.Step, d}
	}
	slices.SortStableFunc(ds, func(a, b sd) int { return cmp.Compare(b.dur, a.dur) })
	out := make([]int64, 0, min(len(ds), cfg.MaxSteps))
	for _, x := range ds[:min(len(ds), cfg.MaxSteps)] {
		out = append(out, x.step)
	}
	slices.Sort(out)
	return out, "", nil
}

// aggregateCauses merges the steps' root causes by (kind, rank, name,
// from_rank, from).
func aggregateCauses(reps []*Report) []Cause {
	var out []Cause
	at := map[causeKey]int{}
	for _, r := range reps {
		for _, rc := range r.RootCauses {
			k := causeKey{rc.Kind, rc.Rank, rc.Name, rc.FromRank, rc.From}
			ex := make([]string, 0, len(rc.Explains))
			for _, e := range rc.Explains {
				ex = append(ex, fmt.Sprintf("step %d: %s", r.Step, e))
			}
			i, ok := at[k]
			if !ok {
				c := Cause{RootCause: rc, Steps: 1}
				c.Explains = ex[:min(len(ex), maxExplains)]
				c.Evidence = slices.Clone(rc.Evidence)
				at[k] = len(out)
				out = append(out, c)
				continue
			}
			c := &out[i]
			c.Steps++
			c.Symptoms += rc.Symptoms
			c.ExcessNS = min(c.ExcessNS+rc.ExcessNS, optrace.MaxDurNS)
			if rc.Score > c.Score {
				c.Score, c.Evidence = rc.Score, slices.Clone(rc.Evidence)
			}
			c.Explains = append(c.Explains, ex[:min(len(ex), maxExplains-len(c.Explains))]...)
		}
	}
	slices.SortFunc(out, func(a, b Cause) int {
		return cmp.Or(kindRank(a.Kind)-kindRank(b.Kind), cmp.Compare(b.ExcessNS, a.ExcessNS),
			cmp.Compare(b.Steps, a.Steps), cmp.Compare(b.Score, a.Score), cmp.Compare(b.Symptoms, a.Symptoms),
			cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.FromRank, b.FromRank), cmp.Compare(a.From, b.From))
	})
	if out == nil {
		return []Cause{}
	}
	return out[:min(len(out), maxCauses)]
}

// stragglerOutliers is Stage 2's ranked list within the Stage 1 straggler
// (§III-B Stage 2: "a ranked list of the most suspicious operations within
// the straggler"), across steps.
func stragglerOutliers(reps []*Report, rank int) []Instance {
	out := []Instance{}
	for _, r := range reps {
		out = append(out, r.OutliersOf(rank)...)
	}
	slices.SortStableFunc(out, func(a, b Instance) int { return cmp.Compare(b.A, a.A) })
	return out[:min(len(out), maxStragglerOutliers)]
}

// immaterial: the cause costs less than minShare of the median step per
// analysed step it appears in (no span known: never immaterial).
func immaterial(c *Cause, reps []*Report, minShare float64) bool {
	sp := medianStepSpan(reps)
	return sp > 0 && float64(c.ExcessNS)/float64(max(1, c.Steps)) < minShare*float64(sp)
}

// Material reports whether cause c costs its rank at least MinShare of
// the median step per analysed step it appears in (the verdict's own
// test: a smaller deviation is noise a busy host makes on any rank).
func (rep *TraceReport) Material(c *Cause) bool {
	return !immaterial(c, rep.StepReports, rep.Config.withDefaults().MinShare)
}

// medianStepSpan / medianComm are the medians over analysed steps of
// Report.SpanNS / Report.CommNS.
func medianStepSpan(reps []*Report) int64 {
	return medianOf(reps, func(r *Report) int64 { return r.SpanNS })
}
func medianComm(reps []*Report) int64 {
	return medianOf(reps, func(r *Report) int64 { return r.CommNS })
}

func medianOf(reps []*Report, f func(*Report) int64) int64 {
	xs := make([]int64, 0, len(reps))
	for _, r := range reps {
		xs = append(xs, f(r))
	}
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return medianInt(xs)
}

// culpritSeparation: the top cause is named only if it cost at least this
// many times the runner-up's excess time — the same guard Stage 1 applies
// to scores (RhythmConfig.Separation): busy hosts stall some op on some
// rank in every step, and a sum over steps must stand out from that.
const culpritSeparation = 2

// fmtNS is a duration in words for headlines.
func fmtNS(ns int64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	}
	return fmt.Sprintf("%d ns", ns)
}

// describeCause is a cause in words.
func describeCause(c *Cause) string {
	switch c.Kind {
	case KindOp:
		return fmt.Sprintf("operator %s on rank %d, which ran abnormally long", c.Name, c.Rank)
	case KindEdge:
		if c.From == StepStart {
			return fmt.Sprintf("the gap before %s on rank %d (it started late with no operator before it in the step: time spent outside profiled operators — data loading, Python, a host wait)",
				c.Name, c.Rank)
		}
		if c.FromRank == c.Rank {
			return fmt.Sprintf("the gap on rank %d between %s and %s (%s finished on time, %s started late: a wait or un-profiled host work in between)",
				c.Rank, c.From, c.Name, c.From, c.Name)
		}
		return fmt.Sprintf("the dependency edge rank %d %s → rank %d %s (its predecessor finished on time but the op started late: transfer or synchronization)",
			c.FromRank, c.From, c.Rank, c.Name)
	}
	return fmt.Sprintf("%s on rank %d (the blame walk could not judge it)", c.Name, c.Rank)
}

// verdict decides the TraceVerdict and writes the headline. A culprit is
// named only when the top cause is actionable, material, appears in at
// least half the analysed steps, costs 2× any candidate on another rank
// and the other ranks waited for its time (impact.go); candidates within
// 2× on one rank name the rank. Stage 1 and Stage 3 disagreeing is said.
func verdict(rep *TraceReport, cfg RunConfig, notes []string) (TraceVerdict, string) {
	var parts []string
	v := VerdictInconclusive
	na := len(rep.Analysed)
	outliers := 0
	for _, r := range rep.StepReports {
		outliers += len(r.Outliers)
	}
	var top *Cause
	if len(rep.Causes) > 0 {
		top = &rep.Causes[0]
	}
	switch {
	case len(rep.Ranks) < cfg.Config.MinRanks:
		parts = append(parts, fmt.Sprintf("Inconclusive: only %d rank(s) — Stage 2 needs at least %d ranks sharing an operator to tell which one deviates, so no operator can be judged.",
			len(rep.Ranks), cfg.Config.MinRanks))
	case na == 0:
		parts = append(parts, "Inconclusive: no training step was captured by every rank, so there is nothing to compare across ranks.")
	case top == nil && outliers == 0:
		v = VerdictNone
		parts = append(parts, fmt.Sprintf("No operator outliers (a_i > %g) in the %d analysed step(s): nothing to blame.", cfg.Config.ZThreshold, na))
	case top == nil:
		v = VerdictNone
		parts = append(parts, fmt.Sprintf("%d operator outlier(s) in the %d analysed step(s), all early or fast: nothing late or slow to blame.", outliers, na))
	case top.Kind != KindInconclusive && immaterial(top, rep.StepReports, cfg.MinShare):
		v = VerdictNone
		sp := medianStepSpan(rep.StepReports)
		parts = append(parts, fmt.Sprintf("No material slowdown to blame: the largest deviation, %s, costs %s per step (%.1f%% of the median step, %s), below the %.0f%% a culprit must cost.",
			describeCause(top), fmtNS(top.ExcessNS/int64(max(1, top.Steps))), 100*float64(top.ExcessNS)/float64(max(1, top.Steps))/float64(max(1, sp)), fmtNS(sp), 100*cfg.MinShare))
	case top.Kind != KindInconclusive && 2*top.Steps >= na:
		// The candidates: the top cause and every actionable one within
		// culpritSeparation of it. On different ranks they compete; on
		// one rank, the rank is certain (issue 16 item 7c).
		comp := []int{0}
		for i := 1; i < len(rep.Causes); i++ {
			if c := &rep.Causes[i]; c.Kind != KindInconclusive && top.ExcessNS < culpritSeparation*c.ExcessNS {
				comp = append(comp, i)
			}
		}
		var same, others []int
		for _, i := range comp {
			if rep.Causes[i].Rank == top.Rank {
				same = append(same, i)
			} else {
				others = append(others, i)
			}
		}
		im := impact(rep, same, cfg.MinShare)
		// A candidate on another rank competes only if its rank arrived
		// at the collectives about as late (6a): where arrivals were
		// measured, one whose lateness explains under half of the top's is
		// time its own rank lost, not the job. Lateness against the median
		// member, not the marginal hold: a second straggler masked by a
		// later one still competes.
		var rival *Cause
		var rim *Impact
		for _, i := range others {
			o := impact(rep, []int{i}, cfg.MinShare)
			if !im.Checked || culpritSeparation*o.LateExplainedNS > im.LateExplainedNS {
				rival, rim = &rep.Causes[i], o
				break
			}
		}
		if rival != nil {
			parts = append(parts, fmt.Sprintf("Inconclusive: two candidates cost comparable time — %s (%s over peers in %d step(s)) and %s (%s in %d) — not %g× apart, so neither is named.",
				describeCause(top), fmtNS(top.ExcessNS), top.Steps, describeCause(rival), fmtNS(rival.ExcessNS), rival.Steps, float64(culpritSeparation)))
			if im.Checked {
				parts = append(parts, fmt.Sprintf("At the collectives rank %d arrived %s per step after the median rank, rank %d %s.", im.Rank, fmtNS(im.LateNS), rim.Rank, fmtNS(rim.LateNS)))
			}
			break
		}
		comp = same
		rep.Impact = im
		what := describeCause(top)
		if len(comp) > 1 {
			var names []string
			for _, i := range comp {
				names = append(names, describeCause(&rep.Causes[i]))
			}
			what = fmt.Sprintf("rank %d's %d candidates (%s)", top.Rank, len(comp), strings.Join(names, "; "))
		}
		switch {
		case !im.Material:
			// A deviation its rank paid for is real, but what slowed the
			// job is not shown: inconclusive, not "nothing to blame".
			parts = append(parts, notExplained(im, na, what, cfg.MinShare))
		case len(comp) == 1:
			v = VerdictCulprit
			parts = append(parts, fmt.Sprintf("Culprit: %s — %s over peers in %d of %d analysed step(s), explaining %d flagged instance(s) (a = %.1f).",
				describeCause(top), fmtNS(top.ExcessNS), top.Steps, na, top.Symptoms, top.Score))
			parts = append(parts, impactWords(im, na, "this cause accounts", cfg.MinShare))
		default:
			v = VerdictRank
			var list []string
			for k, i := range comp {
				c := &rep.Causes[i]
				list = append(list, fmt.Sprintf("(%d) %s — %s over peers in %d step(s)", k+1, describeCause(c), fmtNS(c.ExcessNS), c.Steps))
			}
			parts = append(parts, fmt.Sprintf("Culprit rank %d: its top %d candidates cost comparable time (none %g× another), so which one is not certain, but all are on rank %d: %s.",
				top.Rank, len(comp), float64(culpritSeparation), top.Rank, strings.Join(list, "; ")))
			parts = append(parts, impactWords(im, na, "together they account", cfg.MinShare))
		}
	default:
		var lead *Cause
		for i := range rep.Causes {
			if rep.Causes[i].Kind != KindInconclusive {
				lead = &rep.Causes[i]
				break
			}
		}
		if lead != nil {
			parts = append(parts, fmt.Sprintf("Inconclusive: the leading candidate, %s, appears in only %d of %d analysed step(s) — too inconsistent to name.",
				describeCause(lead), lead.Steps, na))
		} else {
			why := ""
			if len(top.Evidence) > 0 {
				why = " (" + top.Evidence[len(top.Evidence)-1] + ")"
			}
			parts = append(parts, fmt.Sprintf("Inconclusive: every blame walk stopped at an operator it could not judge%s.", why))
		}
	}
	if sp, cm := medianStepSpan(rep.StepReports), medianComm(rep.StepReports); sp > 0 && 4*cm >= sp {
		parts = append(parts, fmt.Sprintf("Every rank also spends %s per step (%.0f%% of the step) in one collective after its last member arrived — time spent alike on all ranks, which cross-rank comparison cannot attribute; if it is longer than the data volume warrants, suspect the network (a slow link or congestion: Greyhound's link validation, Vedrfolnir).",
			fmtNS(cm), 100*float64(cm)/float64(sp)))
	}
	rh := rep.Rhythm
	switch {
	case rh == nil:
	case rh.Verdict == RhythmStraggler && (v == VerdictCulprit || v == VerdictRank) &&
		rh.Straggler != top.Rank && !(top.Kind == KindEdge && rh.Straggler == top.FromRank):
		parts = append(parts, fmt.Sprintf("Stage 1's rhythm straggler is rank %d, not the culprit's rank %d: the culprit is where the delay starts, the straggler the rank whose completions diverge most — look at both.",
			rh.Straggler, top.Rank))
	case rh.Verdict == RhythmStraggler && (v == VerdictCulprit || v == VerdictRank):
		parts = append(parts, fmt.Sprintf("Stage 1 localizes the same rank (S = %.3f).", rh.Score[slices.Index(rh.Ranks, rh.Straggler)]))
	case rh.Verdict == RhythmStraggler:
		s := fmt.Sprintf("Stage 1 localizes rank %d as the straggler: %s.", rh.Straggler, rh.Why)
		if holds, measured := rep.HoldsBack(rh.Straggler); measured && !holds {
			held, _ := rep.TypicalHeld(rh.Straggler)
			// A rhythm that differs is not a delay of the job (6a).
			s += fmt.Sprintf(" But the other ranks did not wait for rank %d at collectives (%s per step): its rhythm differs without holding the job back.", rh.Straggler, fmtNS(held))
		}
		parts = append(parts, s)
	case rh.Verdict == RhythmNone:
		parts = append(parts, "Stage 1: "+rh.Why+".")
	default:
		parts = append(parts, "Stage 1 inconclusive: "+rh.Why+".")
	}
	for _, n := range notes {
		parts = append(parts, strings.ToUpper(n[:1])+n[1:]+".")
	}
	return v, strings.Join(parts, " ")
}

// stepOrderNotes says where a rank's ProfilerStep ranges on one thread go
// back in time — a later step starting before an earlier one ends, which
// one thread cannot do: the trace's clock stepped back (an NTP correction
// of the realtime clock profilers stamp with) or traces of different runs
// were merged. Events may come in any order; times may not (issue 16 item
// 12): step-relative times of those steps are not trustworthy.
func stepOrderNotes(work []optrace.Trace) []string {
	type rng struct {
		tid, step, start, end int64
	}
	var notes []string
	for j := range work {
		var rs []rng
		for i := range work[j].Events {
			e := &work[j].Events[i]
			if e.Cat == optrace.UserRange && e.Step >= 0 && e.Device < 0 && strings.HasPrefix(e.Name, "ProfilerStep#") {
				rs = append(rs, rng{e.TID, e.Step, e.StartNS, e.EndNS()})
			}
		}
		slices.SortFunc(rs, func(a, b rng) int {
			return cmp.Or(cmp.Compare(a.tid, b.tid), cmp.Compare(a.step, b.step), cmp.Compare(a.start, b.start))
		})
		n, first := 0, ""
		for i := 1; i < len(rs); i++ {
			p, c := rs[i-1], rs[i]
			if p.tid != c.tid || p.step == c.step || c.start >= p.end {
				continue
			}
			if n == 0 {
				first = fmt.Sprintf("ProfilerStep#%d starts %s before ProfilerStep#%d ends on thread %d", c.step, fmtNS(p.end-c.start), p.step, c.tid)
			}
			n++
		}
		if n > 0 {
			notes = append(notes, fmt.Sprintf("rank %d's trace goes back in time at %d step boundary(ies) (%s): its clock stepped back or traces of different runs were merged, so those steps' times are not trustworthy",
				work[j].Rank, n, first))
		}
	}
	return notes
}

// maxSharedSteps bounds the distinct steps sharedRanks looks at (a trace
// may carry any step number on any event).
const maxSharedSteps = 1 << 16

// sharedRanks picks, when no step is common to every rank, the largest
// group of at least minRanks ranks that shares steps (ties: the group
// sharing more steps, then the lower ranks): the traces to compare, and
// the others with the steps they recorded. nil when no such group exists
// or every rank would stay.
func sharedRanks(work []optrace.Trace, minRanks int) ([]optrace.Trace, []LeftOutRank) {
	byStep := map[int64][]int{} // step → indexes into work, ascending
	for j := range work {
		seen := map[int64]bool{}
		for i := range work[j].Events {
			st := work[j].Events[i].Step
			if st < 0 || seen[st] || (len(byStep) >= maxSharedSteps && byStep[st] == nil) {
				continue
			}
			seen[st] = true
			byStep[st] = append(byStep[st], j)
		}
	}
	type group struct {
		members []int
		steps   int
	}
	groups := map[string]*group{}
	for _, m := range byStep {
		if len(m) < minRanks {
			continue
		}
		k := fmt.Sprint(m)
		if g := groups[k]; g != nil {
			g.steps++
		} else {
			groups[k] = &group{members: m, steps: 1}
		}
	}
	var best *group
	for _, g := range groups {
		if best == nil || len(g.members) > len(best.members) || (len(g.members) == len(best.members) &&
			(g.steps > best.steps || (g.steps == best.steps && slices.Compare(g.members, best.members) < 0))) {
			best = g
		}
	}
	if best == nil || len(best.members) == len(work) {
		return nil, nil
	}
	keep := make([]optrace.Trace, 0, len(best.members))
	var out []LeftOutRank
	for j := range work {
		if slices.Contains(best.members, j) {
			keep = append(keep, work[j])
			continue
		}
		lo := LeftOutRank{Rank: work[j].Rank, FirstStep: -1, LastStep: -1}
		seen := map[int64]bool{}
		for i := range work[j].Events {
			if st := work[j].Events[i].Step; st >= 0 {
				if lo.FirstStep < 0 || st < lo.FirstStep {
					lo.FirstStep = st
				}
				lo.LastStep = max(lo.LastStep, st)
				if !seen[st] && len(seen) < maxSharedSteps {
					seen[st] = true
				}
			}
		}
		lo.Steps = len(seen)
		out = append(out, lo)
	}
	return keep, out
}

// leftOutNote says which ranks were left out and why.
func leftOutNote(out []LeftOutRank, kept []optrace.Trace) string {
	var parts []string
	for i, lo := range out {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("and %d more", len(out)-i))
			break
		}
		switch {
		case lo.Steps == 0:
			parts = append(parts, fmt.Sprintf("rank %d (no step numbers)", lo.Rank))
		default:
			parts = append(parts, fmt.Sprintf("rank %d (steps %d–%d)", lo.Rank, lo.FirstStep, lo.LastStep))
		}
	}
	return fmt.Sprintf("no step was recorded by every rank: %s shared no step with the others and %s left out; the other %d ranks are compared on the steps they share (a capture plan that reached ranks at different steps records different steps)",
		strings.Join(parts, ", "), map[bool]string{true: "is", false: "are"}[len(out) == 1], len(kept))
}

// TypicalHeld is how long the other ranks typically waited for rank at
// collectives per analysed step (reached in more than half, as
// Impact.HeldNS);
// ok is false when no analysed step joined ranks at a collective.
func (rep *TraceReport) TypicalHeld(rank int) (held int64, ok bool) {
	return rep.typicalOf(func(r *Report) int64 { return r.HeldNS(rank) })
}

// TypicalLate is rank's typical lateness against the median member at the
// step's collectives (as Impact.LateNS).
func (rep *TraceReport) TypicalLate(rank int) (late int64, ok bool) {
	return rep.typicalOf(func(r *Report) int64 { return r.LateNS(rank) })
}

// HoldsBack reports whether the other ranks typically waited for rank at
// the step's collectives for at least MinShare of the median step (§6a: a
// rhythm that differs is not a delay of the job); measured is false when
// no analysed step joined ranks at a collective, so the wait is unknown.
func (rep *TraceReport) HoldsBack(rank int) (holds, measured bool) {
	held, ok := rep.TypicalHeld(rank)
	if !ok {
		return false, false
	}
	return float64(held) >= rep.Config.withDefaults().MinShare*float64(medianStepSpan(rep.StepReports)), true
}

func (rep *TraceReport) typicalOf(f func(*Report) int64) (int64, bool) {
	xs := make([]int64, 0, len(rep.StepReports))
	ok := false
	for _, r := range rep.StepReports {
		if r != nil {
			ok = ok || r.Joined
			xs = append(xs, f(r))
		}
	}
	return typical(xs), ok
}
