package render

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

func kairFixture() *kair.TraceReport {
	cfg := kair.DefaultRunConfig()
	cfg.Align = kair.ClockCollectives
	return &kair.TraceReport{
		Ranks:  []int{0, 1, 2, 3},
		Events: []int{1200, 1210, 1190, 1205},
		Steps: []kair.StepSpan{
			{Step: 10, StartNS: []int64{1e18, 1e18, 1e18, 1e18 + 5000}, EndNS: []int64{1e18 + 12e6, 1e18 + 12e6, 1e18 + 12.1e6, 1e18 + 12e6}},
			{Step: 11, StartNS: []int64{1e18 + 13e6, 1e18 + 13e6, 1e18 + 13e6, 1e18 + 13e6}, EndNS: []int64{1e18 + 25e6, 1e18 + 25e6, 1e18 + 25e6, 1e18 + 25e6}},
		},
		Clock: []kair.ClockEstimate{
			{Rank: 0, Method: kair.ClockCollectives},
			{Rank: 1, Method: kair.ClockCollectives, OffsetNS: 120_000, ResidualNS: 1_500, Samples: 5},
			{Rank: 2, Method: kair.ClockCollectives, OffsetNS: -3, ResidualNS: 900, Samples: 5, Violations: 1},
			{Rank: 3, Method: kair.ClockCollectives, OffsetNS: -250_000, ResidualNS: 2_000, Samples: 5},
		},
		Rhythm: &kair.Rhythm{T0NS: 1_751_371_200_001_000_000, WindowNS: 97_656, Windows: 256, Ranks: []int{0, 1, 2, 3},
			Totals: []int{115, 115, 115, 115}, Score: []float64{0.11, 0.12, 0.41, 0.1}, P: []float64{0.5, 0.43, 0.00001, -1},
			RefD: []float64{0.05, 0.06, 0.38, 0.04}, Order: []int{2, 1, 0, 3},
			Agreement: kair.RhythmAgreement{K: 4, Overlap: 4, Top1: true, Spearman: 0.8, Kendall: 0.667, Defined: true},
			Verdict:   kair.RhythmStraggler, Straggler: 2, Why: "rank 2's completions diverge from every peer (S 0.41, 3.4× the runner-up, p < 0.01)"},
		Analysed: []int64{10, 11},
		StragglerOutliers: []kair.Instance{
			{Rank: 2, Name: "sgemm_bwd", Cat: optrace.GPUKernel, Occurrence: 1, StartNS: 1_500_000, DurNS: 2_400_000, ZStart: 0.4, ZDur: 57.2, A: 57.2, AClassic: 1.7, ARobust: 57.2},
			{Rank: 2, Name: "ncclKernel_AllReduce", Cat: optrace.Collective, Occurrence: 0, StartNS: 5_900_000, DurNS: 300_000, WaitNS: 0, ZStart: 40.1, A: 40.1, AClassic: 1.7, ARobust: 40.1},
		},
		Causes: []kair.Cause{
			{RootCause: kair.RootCause{Kind: kair.KindOp, Rank: 2, Name: "sgemm_bwd", FromRank: -1, Step: 10, Symptoms: 7, Score: 57.2, ExcessNS: 8_200_000,
				Explains: []string{"step 10: rank 2 sgemm_bwd#1", "step 10: rank 2 sgemm_bwd#2", "step 10: rank 2 ncclKernel_AllReduce#0", "step 11: rank 2 sgemm_bwd#1", "step 11: rank 2 sgemm_bwd#2"},
				Evidence: []string{"rank 2 ncclKernel_AllReduce#0 start +5900000ns (z 40.1) dur 300000ns (z 0.0)", "rank 2 sgemm_bwd#2 start +4300000ns (z 30.0) dur 800000ns (z 0.1)", "rank 2 sgemm_bwd#1 start +1500000ns (z 0.4) dur 2400000ns (z 57.2)", "abnormal execution time: culprit (rule 1)"}},
				Steps: 2},
			{RootCause: kair.RootCause{Kind: kair.KindEdge, Rank: 1, Name: "nccl:all_reduce", FromRank: 1, From: "aten::bwd_b", Step: 11, Symptoms: 1, Score: 3.5}, Steps: 1},
		},
		Verdict:  kair.VerdictCulprit,
		Headline: "rank 2 is the straggler: sgemm_bwd runs 3.0× its peers' time in 2 of 2 analysed steps; the all-reduce on ranks 0, 1, 3 only waited for it.",
		Config:   cfg,
	}
}

func TestTraceReportText(t *testing.T) {
	var b bytes.Buffer
	if err := KAIR(&b, kairFixture()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"KAIR · 4 ranks (0–3) · 4,805 events · 2 common steps (10–11) · 2 analysed",
		"▶ culprit: rank 2 is the straggler: sgemm_bwd runs 3.0×",
		"steps (* analysed): 10* 12.1ms · 11* 12ms",
		"Stage 1 · rhythm localization: K-S over 256 windows of 97.7 µs from 2025-07-01 12:00:00.001000 UTC",
		"verdict: straggler rank 2 — rank 2's completions diverge",
		"top-1 agrees, top-4 overlap 4/4, Spearman 0.8, Kendall 0.667",
		"Stage 2 · operator outliers within straggler rank 2 (a = max |z start|, |z dur| > 3): 2",
		"sgemm_bwd#1", "+1.5 ms", "2.4 ms", "1.7 / 57.2",
		"1. op: rank 2 sgemm_bwd (abnormal execution time)",
		"in 2/2 analysed step(s) (first: step 10) · 8.2 ms over peers · 7 symptom(s) · top a = 57.2",
		"explains: step 10: rank 2 sgemm_bwd#1, step 10: rank 2 sgemm_bwd#2,", "step 11: rank 2 sgemm_bwd#1, … (+3)",
		"· rank 2 ncclKernel_AllReduce#0 start +5900000ns",
		"← abnormal execution time: culprit (rule 1)",
		"2. edge: rank 1 aten::bwd_b → rank 1 nccl:all_reduce (a gap on the rank",
		"config: align collectives · 256 windows · α 0.01 · separation 1.5 · z>3 robust=true loo=true · max 16 steps",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// Stage 1 rows: by descending score, the straggler marked, p "—" for no sample.
	lines := strings.Split(out, "\n")
	var rows []string
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "rank  completions") {
			rows = lines[i+1 : i+5]
		}
	}
	if len(rows) != 4 || !strings.HasPrefix(strings.TrimSpace(rows[0]), "2 ") || !strings.Contains(rows[0], "← straggler") ||
		!strings.Contains(rows[0], "<0.0001") || !strings.HasPrefix(strings.TrimSpace(rows[3]), "3 ") || !strings.Contains(rows[3], "—") {
		t.Errorf("Stage 1 rows:\n%s", strings.Join(rows, "\n"))
	}
	if !strings.Contains(out, "+120 µs") || !strings.Contains(out, "-250 µs") || !strings.Contains(out, "-3 ns") {
		t.Errorf("clock offsets:\n%s", out)
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
}

// Without a Stage 1 straggler the outliers of every rank are shown, and
// the weak verdict is said, not hidden.
func TestTraceReportTextNoStraggler(t *testing.T) {
	r := kairFixture()
	r.Rhythm.Verdict, r.Rhythm.Straggler, r.Rhythm.Why = kair.RhythmInconclusive, -1, "only 2 ranks"
	r.Rhythm.Agreement = kair.RhythmAgreement{}
	r.StragglerOutliers = nil
	r.StepReports = []*kair.Report{{Step: 10, Outliers: []kair.Instance{{Rank: 1, Name: "a", Cat: optrace.CPUOp, A: 4}, {Rank: 3, Name: "b", Cat: optrace.CPUOp, A: 9}}}, nil}
	r.Causes = nil
	r.Verdict, r.Headline = kair.VerdictInconclusive, "no rank stands out"
	var b bytes.Buffer
	if err := KAIR(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"▶ inconclusive: no rank stands out",
		"verdict: inconclusive — only 2 ranks",
		"exact vs reference-ECDF approximation: not comparable",
		"operator outliers over all ranks", "Stage 3 · root causes: none",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "← straggler") {
		t.Errorf("a straggler marked:\n%s", out)
	}
	if i, j := strings.Index(out, " b#0 "), strings.Index(out, " a#0 "); i < 0 || j < 0 || i > j {
		t.Errorf("outliers not by a (b first):\n%s", out)
	}
}

// A report decoded from a server (or hand-edited JSON) may have short
// slices, NaN or huge lists: the text still renders, bounded.
func TestTraceReportTextSurvivesBadReports(t *testing.T) {
	many := kairFixture()
	for i := 0; i < 40; i++ {
		many.Causes = append(many.Causes, many.Causes[0])
		many.StragglerOutliers = append(many.StragglerOutliers, many.StragglerOutliers[0])
	}
	long := make([]string, 100)
	for i := range long {
		long[i] = "hop"
	}
	many.Causes[0].Evidence = long
	short := kairFixture()
	short.Rhythm.Totals, short.Rhythm.P, short.Rhythm.RefD = nil, []float64{math.NaN()}, []float64{math.Inf(1)}
	short.Rhythm.Score = short.Rhythm.Score[:1]
	short.Rhythm.Order = []int{7, 2, 2}
	short.Steps[0].StartNS = nil
	for name, r := range map[string]*kair.TraceReport{"nil": nil, "zero": {}, "many": many, "short": short, "nil rhythm": {Ranks: []int{1}}} {
		var b bytes.Buffer
		if err := KAIR(&b, r); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := b.String()
		if strings.Contains(out, "NaN") || strings.Contains(out, "Inf") || strings.Contains(out, "%!") {
			t.Errorf("%s: unprintable number:\n%s", name, out)
		}
		if n := strings.Count(out, "\n"); n > 150 {
			t.Errorf("%s: %d lines, not bounded", name, n)
		}
		if name == "many" && (!strings.Contains(out, "… 32 more (--json for all)") || !strings.Contains(out, "… 88 hops …") || !strings.Contains(out, "top 15 shown")) {
			t.Errorf("many: bounds not said:\n%s", out)
		}
	}
}

// The renderer takes the report as the server sends it (JSON round trip).
func TestTraceReportTextFromJSON(t *testing.T) {
	raw, err := json.Marshal(kairFixture())
	if err != nil {
		t.Fatal(err)
	}
	var back kair.TraceReport
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := KAIR(&a, kairFixture()); err != nil {
		t.Fatal(err)
	}
	if err := KAIR(&b, &back); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("JSON round trip changed the text:\n%s\n---\n%s", a.String(), b.String())
	}
}

func TestTraceReportTextReportsWriteErrors(t *testing.T) {
	if err := KAIR(&failWriter{n: 3}, kairFixture()); err == nil {
		t.Error("write error lost")
	}
}

func TestTraceReportNumbers(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want string
	}{{0, "0 ns"}, {999, "999 ns"}, {1500, "1.5 µs"}, {97_656, "97.7 µs"}, {12_100_000, "12.1 ms"}, {3_500_000_000, "3.50 s"}, {-250_000, "-250 µs"}} {
		if got := nsText(c.ns); got != c.want {
			t.Errorf("nsText(%d) = %q, want %q", c.ns, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float64
		want string
	}{{3, "3"}, {57.23, "57.2"}, {0.012345, "0.0123"}, {12345.6, "12346"}, {math.NaN(), "—"}} {
		if got := num(c.v); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := thousands(-1234567); got != "-1,234,567" {
		t.Errorf("thousands: %q", got)
	}
}

// Many steps: the spread and the analysed ones, not the first 16.
func TestTraceReportTextManySteps(t *testing.T) {
	r := kairFixture()
	r.Steps = nil
	for s := int64(0); s < 40; s++ {
		span := int64(5e6)
		if s == 33 {
			span = 9e6
		}
		r.Steps = append(r.Steps, kair.StepSpan{Step: s, StartNS: []int64{0, 10}, EndNS: []int64{span, 100}})
	}
	r.Analysed = []int64{33, 7}
	var b bytes.Buffer
	if err := KAIR(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "steps: 40, span median 5ms, max 9ms; analysed: 7 5ms · 33 9ms\n"; !strings.Contains(b.String(), want) {
		t.Errorf("missing %q in:\n%s", want, b.String())
	}
}

// FuzzKAIRText: any report JSON that decodes renders without panicking
// (the CLI renders what a server sends).
func FuzzTraceReportText(f *testing.F) {
	// A trimmed fixture: the full one (2.5 KB) slows the fuzzer's
	// mutation a thousandfold for no added coverage.
	small := kairFixture()
	small.Steps, small.Clock, small.StragglerOutliers = small.Steps[:1], small.Clock[:1], small.StragglerOutliers[:1]
	small.Causes = small.Causes[:1]
	small.Causes[0].Explains, small.Causes[0].Evidence = small.Causes[0].Explains[:1], small.Causes[0].Evidence[:2]
	small.Headline, small.Rhythm.Why = "h", "w"
	raw, _ := json.Marshal(small)
	f.Add(raw)
	f.Add([]byte(`{"ranks":[1,2],"rhythm":{"ranks":[5],"order":[5,5,9],"score":[1e308],"p":[-0]},"steps":[{"step":1,"start_ns":[9223372036854775807],"end_ns":[-9223372036854775808]}]}`))
	f.Add([]byte(`{"causes":[{"kind":"edge","evidence":["a","b"],"explains":["x"],"symptoms":-5}],"straggler_outliers":[{"a":1e400}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r kair.TraceReport
		if json.Unmarshal(b, &r) != nil {
			return
		}
		var out bytes.Buffer
		if err := KAIR(&out, &r); err != nil {
			t.Fatal(err)
		}
		if out.Len() == 0 {
			t.Fatal("empty output")
		}
	})
}
