package kair

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

func mustRun(t testing.TB, tr []optrace.Trace, hb map[int][]Heartbeat, cfg RunConfig) *TraceReport {
	t.Helper()
	rep, err := Run(tr, hb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
	return rep
}

func dumpRun(rep *TraceReport) string {
	b, _ := json.MarshalIndent(struct {
		Verdict  TraceVerdict
		Headline string
		Causes   []Cause
		Rhythm   any
		Clock    []ClockEstimate
	}{rep.Verdict, rep.Headline, rep.Causes, struct {
		V     RhythmVerdict
		S     int
		Why   string
		Score []float64
		P     []float64
	}{rep.Rhythm.Verdict, rep.Rhythm.Straggler, rep.Rhythm.Why, rep.Rhythm.Score, rep.Rhythm.P}, rep.Clock}, "", "  ")
	return string(b)
}

// slowOp: rank 5's forward op fwd2 runs 60× longer in every step (about
// half a step: Stage 1's D of a delay that the next AllReduce absorbs is
// about delay / capture span, see doc.go, so a short capture of ~80 ops a
// step needs a large one to reach p < 0.01).
func slowOp(n int) func(int64) [][]op {
	return everyStep(n, func() []op { return richProgram(40, 40) }, func(_ int64, p [][]op) {
		p[5][2].dur *= 60
	})
}

// One rank with a slow backward op: Stage 1 names the rank, Stage 3
// blames the op (not the AllReduce that waited for it), and the headline
// says both agree.
func TestRunSlowOpOneRank(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), slowOp(8))
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if rep.Rhythm.Verdict != RhythmStraggler || rep.Rhythm.Straggler != 5 {
		t.Fatalf("Stage 1: %s rank %d, want straggler 5\n%s", rep.Rhythm.Verdict, rep.Rhythm.Straggler, dumpRun(rep))
	}
	if rep.Verdict != VerdictCulprit || len(rep.Causes) == 0 {
		t.Fatalf("verdict %s\n%s", rep.Verdict, dumpRun(rep))
	}
	c := rep.Causes[0]
	if c.Kind != KindOp || c.Rank != 5 || c.Name != "aten::fwd2" || c.Steps != 3 {
		t.Fatalf("top cause %+v\n%s", c, dumpRun(rep))
	}
	for _, c := range rep.Causes {
		if c.Name == arName || c.From == arName {
			t.Errorf("AllReduce blamed: %+v", c)
		}
	}
	if len(rep.StragglerOutliers) == 0 {
		t.Fatal("no outliers within the straggler")
	}
	for _, in := range rep.StragglerOutliers {
		if in.Rank != 5 {
			t.Errorf("straggler outlier on rank %d", in.Rank)
		}
	}
	if rep.StragglerOutliers[0].Name != "aten::fwd2" {
		t.Errorf("top straggler outlier %+v", rep.StragglerOutliers[0])
	}
	for _, want := range []string{"Culprit: operator aten::fwd2 on rank 5", "3 of 3", "Stage 1 localizes the same rank"} {
		if !strings.Contains(rep.Headline, want) {
			t.Errorf("headline lacks %q: %s", want, rep.Headline)
		}
	}
	if len(rep.Steps) != 3 || len(rep.Analysed) != 3 || len(rep.StepReports) != 3 {
		t.Errorf("steps %d analysed %d reports %d", len(rep.Steps), len(rep.Analysed), len(rep.StepReports))
	}
	// simulate shares one clock: collectives find offsets ≈ 0.
	for _, ce := range rep.Clock {
		if ce.Method != ClockCollectives || absInt(ce.OffsetNS) > ce.ResidualNS || ce.Violations != 0 {
			t.Errorf("clock %+v", ce)
		}
	}
}

func TestRunUniformNone(t *testing.T) {
	tr := simulateSteps(stepsUpTo(5), everyStep(8, func() []op { return richProgram(20, 20) }, nil))
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if rep.Verdict != VerdictNone || rep.Rhythm.Verdict != RhythmNone || rep.Rhythm.Straggler != -1 {
		t.Fatalf("want none/none\n%s", dumpRun(rep))
	}
	if len(rep.Causes) != 0 || len(rep.StragglerOutliers) != 0 {
		t.Errorf("causes %+v", rep.Causes)
	}
}

func TestRunTwoRanksInconclusive(t *testing.T) {
	tr := simulateSteps(stepsUpTo(4), everyStep(2, func() []op { return richProgram(20, 20) }, func(_ int64, p [][]op) {
		p[1][22].dur *= 4
	}))
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if rep.Verdict != VerdictInconclusive || rep.Rhythm.Verdict != RhythmInconclusive || rep.Rhythm.Straggler != -1 {
		t.Fatalf("want inconclusive\n%s", dumpRun(rep))
	}
	if !strings.Contains(rep.Headline, "only 2 rank(s)") || !strings.Contains(rep.Rhythm.Why, "2 ranks") {
		t.Errorf("headline %q why %q", rep.Headline, rep.Rhythm.Why)
	}
	for _, p := range rep.Rhythm.P {
		if p < -1 || p > 1 {
			t.Errorf("p %v", p)
		}
	}
}

// Skewed clocks: collectives recover the offsets and the report matches
// the unskewed one.
func TestRunClockSkewRecovered(t *testing.T) {
	base := simulateSteps(stepsUpTo(3), slowOp(8))
	skew := map[int]int64{3: 7_000_000, 6: -3_000_123, 7: 40_000_000_000}
	tr := skewed(base, skew)
	before := deepCopy(tr)
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if !reflect.DeepEqual(tr, before) {
		t.Fatal("Run modified its input")
	}
	for _, ce := range rep.Clock {
		if d := absInt(ce.OffsetNS + skew[ce.Rank]); ce.Method != ClockCollectives || d > ce.ResidualNS || ce.Violations != 0 {
			t.Errorf("rank %d: %+v, want offset %d", ce.Rank, ce, -skew[ce.Rank])
		}
	}
	want := mustRun(t, base, nil, DefaultRunConfig())
	if rep.Verdict != want.Verdict || rep.Rhythm.Straggler != want.Rhythm.Straggler || len(rep.Causes) == 0 ||
		rep.Causes[0].Rank != want.Causes[0].Rank || rep.Causes[0].Name != want.Causes[0].Name {
		t.Fatalf("skewed report differs\n%s\nvs\n%s", dumpRun(rep), dumpRun(want))
	}
	// Without alignment the skewed rank 7 (40 s ahead) has nothing in
	// common with the others' windows on the capture clock: Stage 1 in
	// FrameCapture must not name rank 5. FrameStep measures each rank
	// from its own step starts, so it needs no alignment and still does.
	cfg := DefaultRunConfig()
	cfg.Align = ClockNone
	cfg.Rhythm.Frame = FrameCapture
	un := mustRun(t, tr, nil, cfg)
	if un.Rhythm.Straggler == 5 {
		t.Errorf("unaligned capture-frame Stage 1 still named rank 5: %s", un.Rhythm.Why)
	}
	cfg.Rhythm.Frame = FrameStep
	if st := mustRun(t, tr, nil, cfg); st.Rhythm.Straggler != want.Rhythm.Straggler || st.Rhythm.Frame != FrameStep {
		t.Errorf("unaligned step-frame Stage 1 named %d, want %d: %s", st.Rhythm.Straggler, want.Rhythm.Straggler, st.Rhythm.Why)
	}
	if un.Clock[0].Method != ClockNone || un.Clock[7].OffsetNS != 0 {
		t.Errorf("clock %+v", un.Clock)
	}
}

// Heartbeats only (no shared collective): offsets come from round trips.
func TestRunHeartbeatAlignment(t *testing.T) {
	base := simulateSteps(stepsUpTo(4), everyStep(4, func() []op { return richProgram(20, 20) }, nil))
	skew := map[int]int64{1: 5_000_000, 2: -2_000_000}
	tr := skewed(base, skew)
	for i := range tr {
		// No collective at all: nothing for barrier semantics (id-less
		// collectives would still align by occurrence).
		tr[i].Events = slices.DeleteFunc(tr[i].Events, func(e optrace.Event) bool { return e.Cat == optrace.Collective })
	}
	hb := map[int][]Heartbeat{}
	for r := range 4 {
		// Client clock = server − skew... the rank's clock runs skew ahead:
		// server = client − skew.
		c := int64(1_000_000_000) + skew[r]
		hb[r] = []Heartbeat{{c, c - skew[r] + 300, c - skew[r] + 400, c + 900}, {c + 10, c + 10 - skew[r] + 100, c + 10 - skew[r] + 150, c + 260}}
	}
	rep := mustRun(t, tr, hb, DefaultRunConfig())
	for _, ce := range rep.Clock {
		if d := absInt(ce.OffsetNS + skew[ce.Rank]); ce.Method != ClockHeartbeat || d > ce.ResidualNS || ce.Samples != 2 {
			t.Errorf("rank %d: %+v", ce.Rank, ce)
		}
	}
}

func TestRunStepChoice(t *testing.T) {
	// Steps 1 and 4 are slow on rank 2; the two slowest are chosen.
	tr := simulateSteps(stepsUpTo(6), everyStep(6, func() []op { return richProgram(10, 10) }, func(s int64, p [][]op) {
		if s == 1 || s == 4 {
			p[2][12].dur *= 6
		}
	}))
	cfg := DefaultRunConfig()
	cfg.MaxSteps = 2
	rep := mustRun(t, tr, nil, cfg)
	if !reflect.DeepEqual(rep.Analysed, []int64{1, 4}) {
		t.Fatalf("analysed %v", rep.Analysed)
	}
	if rep.Verdict != VerdictCulprit || rep.Causes[0].Rank != 2 || rep.Causes[0].Steps != 2 {
		t.Fatalf("%s", dumpRun(rep))
	}
	// Asking for all six: the cause is in 2 of 6 steps → not named.
	cfg.Steps = stepsUpTo(6)
	rep = mustRun(t, tr, nil, cfg)
	if rep.Verdict != VerdictInconclusive || !strings.Contains(rep.Headline, "2 of 6") {
		t.Fatalf("%s", dumpRun(rep))
	}
	cfg.Steps = []int64{9}
	_, err := Run(tr, nil, cfg)
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "steps[0]" {
		t.Fatalf("err %v", err)
	}
}

// A different rank slow in each step: no consistent culprit.
func TestRunInconsistentCulprit(t *testing.T) {
	tr := simulateSteps(stepsUpTo(4), everyStep(8, func() []op { return richProgram(10, 10) }, func(s int64, p [][]op) {
		p[1+s][12].dur *= 6
	}))
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if rep.Verdict != VerdictInconclusive || !strings.Contains(rep.Headline, "1 of 4") {
		t.Fatalf("%s", dumpRun(rep))
	}
}

// Ranks that captured different numbers of steps compare on the steps
// all of them have.
func TestRunCommonSteps(t *testing.T) {
	prog := everyStep(6, func() []op { return richProgram(10, 10) }, nil)
	tr := simulateSteps(stepsUpTo(5), prog)
	extra := simulateSteps([]int64{0, 1, 2, 3, 4, 5, 6, 7}, prog)
	tr[0] = extra[0]
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if len(rep.Steps) != 5 || rep.Steps[4].Step != 4 {
		t.Fatalf("steps %+v", rep.Steps)
	}
	for _, tot := range rep.Rhythm.Totals {
		if tot != rep.Rhythm.Totals[1] {
			t.Errorf("totals %v differ", rep.Rhythm.Totals)
		}
	}
	if rep.Rhythm.Verdict == RhythmStraggler {
		t.Errorf("rank 0's extra steps made it a straggler: %s", rep.Rhythm.Why)
	}
}

func TestRunConfigValidate(t *testing.T) {
	tests := []struct {
		field string
		mut   func(*RunConfig)
	}{
		{"rhythm.windows", func(c *RunConfig) { c.Rhythm.Windows = -1 }},
		{"rhythm.alpha", func(c *RunConfig) { c.Rhythm.Alpha = 1.5 }},
		{"rhythm.separation", func(c *RunConfig) { c.Rhythm.Separation = 0.5 }},
		{"rhythm.categories[0]", func(c *RunConfig) { c.Rhythm.Categories = []optrace.Category{0} }},
		{"rhythm.categories[1]", func(c *RunConfig) { c.Rhythm.Categories = []optrace.Category{optrace.CPUOp, 0} }},
		{"pinpoint.z_threshold", func(c *RunConfig) { c.Config.ZThreshold = -1 }},
		{"pinpoint.min_ranks", func(c *RunConfig) { c.Config.MinRanks = 2 }},
		{"align", func(c *RunConfig) { c.Align = "ntp" }},
		{"max_steps", func(c *RunConfig) { c.MaxSteps = -3 }},
		{"steps[1]", func(c *RunConfig) { c.Steps = []int64{0, -1} }},
	}
	tr := simulateSteps(stepsUpTo(1), everyStep(3, program, nil))
	for _, tc := range tests {
		cfg := DefaultRunConfig()
		tc.mut(&cfg)
		_, err := Run(tr, nil, cfg)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want field %q, got %v", tc.field, err)
		}
	}
	// Zero config = defaults.
	if err := (RunConfig{}).Validate(); err != nil {
		t.Fatal(err)
	}
	rep := mustRun(t, tr, nil, RunConfig{})
	if !reflect.DeepEqual(rep.Config, DefaultRunConfig()) {
		t.Errorf("effective config %+v", rep.Config)
	}
}

func TestRunBadTraces(t *testing.T) {
	tr := simulateSteps(stepsUpTo(1), everyStep(3, program, nil))
	for _, tc := range []struct {
		field string
		mut   func([]optrace.Trace) []optrace.Trace
	}{
		{"traces", func([]optrace.Trace) []optrace.Trace { return nil }},
		{"traces[1].rank", func(t []optrace.Trace) []optrace.Trace { t[1].Rank = 0; return t }},
		{"traces[2].rank", func(t []optrace.Trace) []optrace.Trace { t[2].Rank = -4; return t }},
		{"traces[1].events[2].dur_ns", func(t []optrace.Trace) []optrace.Trace { t[1].Events[2].DurNS = -1; return t }},
		{"traces[0].events[1].cat", func(t []optrace.Trace) []optrace.Trace { t[0].Events[1].Cat = 0; return t }},
		{"traces[0].clock_offset_ns", func(t []optrace.Trace) []optrace.Trace { t[0].ClockOffsetNS = optrace.MaxAbsNS + 1; return t }},
	} {
		_, err := Run(tc.mut(deepCopy(tr)), nil, DefaultRunConfig())
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want field %q, got %v", tc.field, err)
		}
	}
}

// Traces without step numbers are analysed whole, and the headline says so.
func TestRunNoSteps(t *testing.T) {
	progs := uniform(4)
	progs[2][2].dur *= 3
	tr := simulate(progs, true)
	for i := range tr {
		for j := range tr[i].Events {
			tr[i].Events[j].Step = -1
		}
	}
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if !reflect.DeepEqual(rep.Analysed, []int64{-1}) || len(rep.Steps) != 0 {
		t.Fatalf("analysed %v steps %v", rep.Analysed, rep.Steps)
	}
	if rep.Verdict != VerdictCulprit || rep.Causes[0].Rank != 2 || !strings.Contains(rep.Headline, "no step every rank has") {
		t.Fatalf("%s", dumpRun(rep))
	}
}

// Auto alignment mixes methods: collectives where they reach, heartbeats
// (relative to the lowest rank) for a rank that shares none; offsets set
// by the caller are used as given.
func TestRunAlignMixedAndGiven(t *testing.T) {
	base := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(20, 20) }, nil))
	skew := map[int]int64{0: 1_000_000, 2: -4_000_000, 3: 9_000_000}
	tr := skewed(base, skew)
	for j := range tr[3].Events {
		tr[3].Events[j].Comm, tr[3].Events[j].Seq = "", -1
	}
	hb := map[int][]Heartbeat{}
	for _, r := range []int{0, 3} {
		c := int64(5e9) + skew[r]
		hb[r] = []Heartbeat{hbSample(c, -skew[r], 400, 50, 400)}
	}
	rep := mustRun(t, tr, hb, DefaultRunConfig())
	want := []ClockMethod{ClockCollectives, ClockCollectives, ClockCollectives, ClockHeartbeat}
	for j, ce := range rep.Clock {
		if d := absInt(ce.OffsetNS - (skew[0] - skew[ce.Rank])); ce.Method != want[j] || d > ce.ResidualNS {
			t.Errorf("rank %d: %+v, want %s offset %d", ce.Rank, ce, want[j], skew[0]-skew[ce.Rank])
		}
	}
	// Given offsets win over everything in auto mode.
	g := skewed(base, skew)
	for i := range g {
		g[i].ClockOffsetNS = -skew[g[i].Rank]
	}
	rep = mustRun(t, g, hb, DefaultRunConfig())
	for _, ce := range rep.Clock {
		if ce.Method != ClockGiven || ce.OffsetNS != -skew[ce.Rank] {
			t.Errorf("given: %+v", ce)
		}
	}
	if rep.Verdict != VerdictNone {
		t.Errorf("given offsets: %s", dumpRun(rep))
	}
}

// Stage 1 and Stage 3 disagree: rank 6's rhythm differs (a burst of
// extra copies no other rank has, which Stage 2 cannot score), rank 2 has
// the slow op. The headline says so instead of picking one.
func TestRunStagesDisagree(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), everyStep(8, func() []op { return richProgram(20, 20) }, func(_ int64, p [][]op) {
		p[2][22].dur *= 10
	}))
	copyBurst(tr, 6, 3)
	// Host ops and copies counted together (auto would pick host work:
	// the other ranks have no device events).
	cfg := DefaultRunConfig()
	cfg.Rhythm.Categories = []optrace.Category{optrace.CPUOp, optrace.Memcpy, optrace.Collective}
	rep := mustRun(t, tr, nil, cfg)
	if rep.Rhythm.Straggler != 6 || rep.Verdict != VerdictCulprit || rep.Causes[0].Rank != 2 {
		t.Fatalf("%s", dumpRun(rep))
	}
	if !strings.Contains(rep.Headline, "Stage 1's rhythm straggler is rank 6, not the culprit's rank 2") {
		t.Errorf("headline %s", rep.Headline)
	}
}

// Ranks that recorded different training steps (a plan picked up late)
// share no step: they are not compared — matching their k-th operators
// would blame the misalignment. When no group of 3 ranks shares a step,
// nothing is analysed and the headline lists what each recorded; when one
// rank alone is off (issue 16 item 7b), the others are compared on the
// steps they share and the headline says who was left out.
func TestRunDifferentStepsInconclusive(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(10, 10) }, nil))
	shift := func(tr []optrace.Trace, r int, by int64) {
		for j := range tr[r].Events {
			if tr[r].Events[j].Step >= 0 {
				tr[r].Events[j].Step += by
			}
		}
	}
	apart := deepCopy(tr)
	shift(apart, 2, 20)
	shift(apart, 3, 10)
	rep := mustRun(t, apart, nil, DefaultRunConfig())
	if rep.Verdict != VerdictInconclusive || len(rep.Analysed) != 0 || len(rep.Causes) != 0 ||
		!strings.Contains(rep.Headline, "rank 3: 10–12") || len(rep.LeftOut) != 0 {
		t.Fatalf("%s", dumpRun(rep))
	}
	one := deepCopy(tr)
	shift(one, 3, 10)
	rep = mustRun(t, one, nil, DefaultRunConfig())
	if !slices.Equal(rep.Ranks, []int{0, 1, 2}) || len(rep.Analysed) != 3 || len(rep.LeftOut) != 1 ||
		rep.LeftOut[0] != (LeftOutRank{Rank: 3, FirstStep: 10, LastStep: 12, Steps: 3}) ||
		!strings.Contains(rep.Headline, "rank 3 (steps 10–12) shared no step with the others and is left out; the other 3 ranks are compared") {
		t.Fatalf("%s\nleft out %+v", dumpRun(rep), rep.LeftOut)
	}
}

// A deviation below MinShare of the step is not a culprit: the verdict is
// none, and the headline says how small it is. Above it, it is named.
func TestRunMinShare(t *testing.T) {
	mk := func(f int64) []optrace.Trace {
		return simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(20, 20) }, func(_ int64, p [][]op) {
			p[2][22].dur *= f
		}))
	}
	small := mustRun(t, mk(3), nil, DefaultRunConfig())
	if small.Verdict != VerdictNone || !strings.Contains(small.Headline, "No material slowdown") {
		t.Errorf("small deviation: %s: %s", small.Verdict, small.Headline)
	}
	big := mustRun(t, mk(20), nil, DefaultRunConfig())
	if big.Verdict != VerdictCulprit || big.Causes[0].Rank != 2 {
		t.Errorf("large deviation: %s: %s", big.Verdict, big.Headline)
	}
	cfg := DefaultRunConfig()
	cfg.MinShare = 1.5
	if _, err := Run(mk(3), nil, cfg); err == nil || !strings.Contains(err.Error(), "min_share") {
		t.Errorf("min_share 1.5 accepted: %v", err)
	}
}

// Both alignments available: per rank the tighter bound wins. A late rank
// widens every barrier interval by its delay; the poll round trips bound
// the error to a few hundred ns here.
func TestRunPrefersTighterClock(t *testing.T) {
	base := simulateSteps(stepsUpTo(4), everyStep(4, func() []op { return richProgram(20, 20) }, func(_ int64, p [][]op) {
		p[2][22].dur *= 20 // rank 2 late at the collective: loose barrier intervals
	}))
	skew := map[int]int64{1: 5_000_000, 2: -2_000_000}
	tr := skewed(base, skew)
	hb := map[int][]Heartbeat{}
	for r := range 4 {
		c := int64(1_000_000_000) + skew[r]
		hb[r] = []Heartbeat{{c, c - skew[r] + 100, c - skew[r] + 150, c + 260}}
	}
	rep := mustRun(t, tr, hb, DefaultRunConfig())
	for _, ce := range rep.Clock[1:] {
		if ce.Method != ClockHeartbeat || absInt(ce.OffsetNS+skew[ce.Rank]) > ce.ResidualNS {
			t.Errorf("rank %d: %+v, want the tighter heartbeat estimate of %d", ce.Rank, ce, -skew[ce.Rank])
		}
	}
	if col, _ := AlignByCollectives(tr); col[2].ResidualNS <= rep.Clock[2].ResidualNS {
		t.Errorf("scenario: collectives residual %d should be looser than the heartbeat's %d", col[2].ResidualNS, rep.Clock[2].ResidualNS)
	}
}
