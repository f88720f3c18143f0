package kair

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// rhythmTraces: n ranks, each completing k ops of 10 µs back to back in
// step 0, op i of rank r delayed by delay(r, i) ns.
func rhythmTraces(n, k int, delay func(r, i int) int64) []optrace.Trace {
	tr := make([]optrace.Trace, n)
	for r := range tr {
		tr[r].Rank = r
		for i := range k {
			d := int64(0)
			if delay != nil {
				d = delay(r, i)
			}
			tr[r].Events = append(tr[r].Events, optrace.Event{Name: "k", Cat: optrace.GPUKernel, Device: 0,
				StartNS: int64(i)*10_000 + d, DurNS: 9_000, Step: 0, Seq: -1})
		}
	}
	return tr
}

func TestLocalizeVerdicts(t *testing.T) {
	// A rank that falls progressively behind (its ops take 1.5× as long).
	slow := func(rank int) func(r, i int) int64 {
		return func(r, i int) int64 {
			if r == rank {
				return int64(i) * 5_000
			}
			return int64((r * 37 % 7) * 100)
		}
	}
	tests := []struct {
		name      string
		tr        []optrace.Trace
		verdict   RhythmVerdict
		straggler int
		why       string
	}{
		{"one slow rank", rhythmTraces(8, 200, slow(3)), RhythmStraggler, 3, "rank 3's rhythm diverges most"},
		{"uniform", rhythmTraces(8, 200, nil), RhythmNone, -1, "no rank's rhythm diverges significantly"},
		{"two ranks", rhythmTraces(2, 200, slow(1)), RhythmInconclusive, -1, "2 ranks"},
		{"too few completions", rhythmTraces(8, 19, slow(3)), RhythmInconclusive, -1, "only 19 operators"},
		{"two equal stragglers", rhythmTraces(8, 200, func(r, i int) int64 {
			if r == 2 || r == 6 {
				return int64(i) * 5_000
			}
			return 0
		}), RhythmInconclusive, -1, "no single rank stands out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Localize(tc.tr, RhythmConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tc.verdict || r.Straggler != tc.straggler || !strings.Contains(r.Why, tc.why) {
				t.Fatalf("%s %d %q, want %s %d %q (scores %v p %v)", r.Verdict, r.Straggler, r.Why,
					tc.verdict, tc.straggler, tc.why, r.Score, r.P)
			}
			checkRhythmShape(t, r, len(tc.tr))
		})
	}
}

func checkRhythmShape(t *testing.T, r *Rhythm, n int) {
	t.Helper()
	if len(r.Ranks) != n || len(r.Totals) != n || len(r.Freq) != n || len(r.D) != n*n || len(r.Score) != n ||
		len(r.P) != n || len(r.RefD) != n || len(r.RefP) != n || len(r.Order) != n {
		t.Fatalf("shape: %+v", r)
	}
	for j := range r.Freq {
		if len(r.Freq[j]) != r.Windows {
			t.Fatalf("freq row %d has %d windows", j, len(r.Freq[j]))
		}
		s := 0
		for _, c := range r.Freq[j] {
			s += int(c)
		}
		if s != r.Totals[j] {
			t.Errorf("rank %d: freq sums to %d, total %d", r.Ranks[j], s, r.Totals[j])
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(r.Ranks) {
		t.Errorf("ranks %v", r.Ranks)
	}
}

// Ranks come out ascending whatever the input order, and the result does
// not depend on it.
func TestLocalizeOrderIndependent(t *testing.T) {
	tr := rhythmTraces(6, 100, func(r, i int) int64 { return int64(r*i) * 300 })
	a, err := Localize(tr, RhythmConfig{Windows: 64})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(tr)
	b, _ := Localize(tr, RhythmConfig{Windows: 64})
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("order changed the result:\n%+v\n%+v", a, b)
	}
	// Delays grow with the rank: the two extremes diverge most.
	if top := slices.Sorted(slices.Values(a.Order[:2])); !reflect.DeepEqual(top, []int{0, 5}) || a.Windows != 64 {
		t.Errorf("order %v", a.Order)
	}
}

// A rank with no completion at all: p-values are -1 (not NaN), the
// report marshals, the verdict is inconclusive.
func TestLocalizeEmptyRankJSONSafe(t *testing.T) {
	tr := rhythmTraces(4, 50, nil)
	tr[2].Events = []optrace.Event{{Name: "r", Cat: optrace.UserRange, Device: -1, Step: 0, Seq: -1}}
	r, err := Localize(tr, RhythmConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != RhythmInconclusive || r.P[2] != -1 || r.RefP[2] != -1 {
		t.Fatalf("%+v", r)
	}
	for _, x := range slices.Concat(r.D, r.Score, r.P, r.RefD, r.RefP, []float64{r.Agreement.Spearman, r.Agreement.Kendall}) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("non-finite value in %+v", r)
		}
	}
	// No events at all anywhere.
	r, err = Localize([]optrace.Trace{{Rank: 0}, {Rank: 1}, {Rank: 2}}, RhythmConfig{})
	if err != nil || r.Verdict != RhythmInconclusive || r.Agreement.Defined {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
}

// Only the categories asked for count, and only in steps every rank has.
func TestLocalizeCountsCategoriesAndCommonSteps(t *testing.T) {
	tr := rhythmTraces(3, 30, nil)
	tr[0].Events = append(tr[0].Events, optrace.Event{Name: "extra", Cat: optrace.GPUKernel, Device: 0, StartNS: 5, DurNS: 1, Step: 1, Seq: -1},
		optrace.Event{Name: "py", Cat: optrace.Python, Device: -1, StartNS: 5, DurNS: 1, Step: 0, Seq: -1})
	r, err := Localize(tr, RhythmConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Totals, []int{30, 30, 30}) {
		t.Fatalf("totals %v", r.Totals)
	}
	r, _ = Localize(tr, RhythmConfig{Categories: []optrace.Category{optrace.CPUOp}})
	if !reflect.DeepEqual(r.Totals, []int{0, 0, 0}) {
		t.Fatalf("totals %v", r.Totals)
	}
}

func TestRhythmConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		cfg   RhythmConfig
	}{
		{"windows", RhythmConfig{Windows: maxWindows + 1}},
		{"alpha", RhythmConfig{Alpha: -0.1}},
		{"alpha", RhythmConfig{Alpha: math.NaN()}},
		{"separation", RhythmConfig{Separation: math.Inf(1)}},
		{"categories[0]", RhythmConfig{Categories: []optrace.Category{200}}},
	} {
		_, err := Localize(rhythmTraces(3, 30, nil), tc.cfg)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want field %q, got %v", tc.field, err)
		}
	}
	if err := DefaultRhythmConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// A rank that diverges in one step only (a stall, a GC pause) can top the
// pooled score; a straggler must lead most steps, so it is withheld. The
// same rank slow in every step is named.
func TestLocalizeStepConsistency(t *testing.T) {
	mk := func(slowSteps map[int64]bool) []optrace.Trace {
		tr := make([]optrace.Trace, 6)
		for r := range tr {
			tr[r].Rank = r
			for s := int64(0); s < 4; s++ {
				t0 := s * 10_000_000
				tr[r].Events = append(tr[r].Events, optrace.Event{Name: "ProfilerStep#", Cat: optrace.UserRange, Device: -1,
					StartNS: t0, DurNS: 9_000_000, Step: s, Seq: -1})
				for i := range int64(60) {
					at := t0 + 10_000 + i*100_000 + int64((r*7+int(i)*3)%5)*1_000
					if r == 2 && slowSteps[s] {
						at += 300_000 + i*150_000 // falls far behind in this step
					}
					tr[r].Events = append(tr[r].Events, optrace.Event{Name: "aten::op", Cat: optrace.CPUOp, TID: 1, Device: -1,
						StartNS: at, DurNS: 50_000, Step: s, Seq: -1})
				}
			}
		}
		return tr
	}
	every, err := Localize(mk(map[int64]bool{0: true, 1: true, 2: true, 3: true}), RhythmConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if every.Verdict != RhythmStraggler || every.Straggler != 2 || !slices.Equal(every.StepLeaders, []int{2, 2, 2, 2}) {
		t.Fatalf("slow in every step: %s %d leaders %v: %s", every.Verdict, every.Straggler, every.StepLeaders, every.Why)
	}
	once, err := Localize(mk(map[int64]bool{1: true}), RhythmConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if once.Order[0] != 2 || once.StepLeaders[1] != 2 {
		t.Fatalf("scenario: rank 2 should top the pooled score and lead step 1: order %v leaders %v", once.Order, once.StepLeaders)
	}
	if once.Verdict != RhythmInconclusive || !strings.Contains(once.Why, "leads the per-step divergence in only 1 of 4") {
		t.Errorf("one bad step: %s %q", once.Verdict, once.Why)
	}
}
