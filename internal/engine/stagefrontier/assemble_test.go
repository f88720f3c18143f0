package stagefrontier

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func TestResidualDerivation(t *testing.T) {
	tests := []struct {
		name                string
		durations           []float64
		wall                float64
		wantResidual, wantE float64
	}{
		{"residual from closure", []float64{1, 2, 3, 1, 1}, 10, 2, 2},
		{"overlap clamps residual", []float64{1, 2, 3, 1, 1}, 6, 0, -2},
		{"explicit residual kept", []float64{1, 2, 3, 1, 1, 0.5}, 8.5, 0.5, 0.5},
		{"explicit residual without wall", []float64{1, 2, 3, 1, 1, 0.5}, 0, 0.5, 0.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := assemble(t, testJob(1, 1), AssembleOptions{}, &stagevec.Vector{Step: 3, Durations: tc.durations, WallMS: tc.wall})
			if got := w.At(0, 0, 5); got != tc.wantResidual {
				t.Errorf("residual = %v, want %v", got, tc.wantResidual)
			}
			if w.Closure[0] != tc.wantE {
				t.Errorf("closure = %v, want %v", w.Closure[0], tc.wantE)
			}
		})
	}
}

func TestAddRejectsBadVector(t *testing.T) {
	a := NewAssembler(testJob(2, 1), AssembleOptions{})
	err := a.Add(&stagevec.Vector{Step: 0, Rank: 0, Durations: []float64{1, 2}, WallMS: 3})
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "durations_ms" {
		t.Fatalf("err = %v, want a durations_ms field error", err)
	}
	if err := a.Add(&stagevec.Vector{Step: 0, Rank: 5, Durations: []float64{1, 2, 3, 4, 5}}); !errors.As(err, &fe) || fe.Field != "rank" {
		t.Fatalf("err = %v, want a rank field error", err)
	}
	if _, err := a.Finish(); err == nil {
		t.Fatal("Finish on an empty window must fail")
	}
}

func TestWindowBoundsAndMissing(t *testing.T) {
	var vs []*stagevec.Vector
	for s := int64(0); s < 10; s++ {
		for r := 0; r < 3; r++ {
			if r == 2 && s == 5 {
				continue // one missing cell
			}
			vs = append(vs, vec(s, r, 1, 2, 3))
		}
	}
	vs = append(vs, vec(4, 1, 9, 9, 9)) // duplicate: must be ignored
	w := assemble(t, testJob(4, 1), AssembleOptions{FromStep: 3, ToStep: 6}, vs...)
	if !slices.Equal(w.Steps, []int64{3, 4, 5, 6}) {
		t.Fatalf("steps = %v", w.Steps)
	}
	if w.At(1, 1, 0) != 1 {
		t.Errorf("duplicate overwrote the first vector: %v", w.Row(1, 1))
	}
	for _, want := range []stagevec.Finding{{Check: FindingMissingRanks, Detail: "1 of 4 ranks sent nothing in the window: 3"},
		{Check: FindingMissingCells, Detail: "1 "}, {Check: FindingDuplicate, Detail: "1 "}} {
		if !slices.ContainsFunc(w.Findings, func(f stagevec.Finding) bool {
			return f.Check == want.Check && strings.HasPrefix(f.Detail, want.Detail)
		}) {
			t.Errorf("findings %q lack %q", w.Findings, want)
		}
	}
	if w.Present == nil || w.Present[2*4+2] || !w.Present[0] {
		t.Errorf("present mask wrong")
	}
	rep := analyzeOK(t, w, DefaultConfig())
	if !slices.Equal(rep.Quality.MissingRanks, []int{3}) || rep.Quality.MissingCells != 5 || !hasLabel(rep, LabelTelemetryLimited) {
		t.Errorf("quality %+v labels %v", rep.Quality, labelNames(rep))
	}
}

// App. A: a data wait with DataLead=k is charged to step Step+k.
func TestPrefetchReassignment(t *testing.T) {
	var vs []*stagevec.Vector
	for s := int64(0); s < 5; s++ {
		for r := 0; r < 2; r++ {
			v := vec(s, r, float64(10*(s+1)), 2, 3)
			v.DataLead = 1
			vs = append(vs, v)
		}
	}
	w := assemble(t, testJob(2, 1), AssembleOptions{FromStep: 1, ToStep: 3}, vs...)
	for ti, want := range []float64{10, 20, 30} { // step t consumes the batch fetched at t−1
		if got := w.At(ti, 0, 0); got != want {
			t.Errorf("step %d data = %v, want %v", w.Steps[ti], got, want)
		}
	}
	if got, want := w.Wall[0], 10.0+2+3; got != want {
		t.Errorf("wall of step 1 = %v, want %v (own spans + consumed data wait)", got, want)
	}
	if len(w.Findings) != 0 {
		t.Errorf("unexpected findings %q", w.Findings)
	}
	// Without the vector of step 0 the first step's batch was fetched before the window.
	w = assemble(t, testJob(2, 1), AssembleOptions{FromStep: 1, ToStep: 3}, vs[2:]...)
	if w.At(0, 0, 0) != 0 || !w.Has(FindingPrefetch) {
		t.Errorf("data=%v findings=%q, want 0 and a prefetch finding", w.At(0, 0, 0), w.Findings)
	}
	if rep := analyzeOK(t, w, DefaultConfig()); !hasLabel(rep, LabelTelemetryLimited) {
		t.Errorf("unsafe reassignment must downgrade: %v", labelNames(rep))
	}
}

// §3: with accumulation factor k the ordered list is expanded micro-major
// before the frontier and grouped back only afterwards.
func TestAccumulationExpansion(t *testing.T) {
	job := testJob(2, 2)
	mk := func(step int64, rank, micro int, d ...float64) *stagevec.Vector {
		v := vec(step, rank, d...)
		v.Micro = micro
		return v
	}
	// Rank 0 is late for micro 0's data; rank 1 runs a long micro-0
	// backward and is then late for micro 1's data.
	w := assemble(t, job, AssembleOptions{},
		mk(0, 0, 0, 5, 1, 1), mk(0, 0, 1, 1, 1, 1), mk(0, 1, 0, 1, 1, 5), mk(0, 1, 1, 5, 1, 1))
	if len(w.Stages) != 12 || w.Stages[6] != "data.next_wait#1" || w.Group[6] != 0 || w.Group[11] != 5 {
		t.Fatalf("stages %v group %v", w.Stages, w.Group)
	}
	if w.At(0, 1, 6) != 5 || w.At(0, 1, 0) != 1 {
		t.Errorf("micro placement wrong: %v", w.Row(0, 1))
	}
	rep := analyzeOK(t, w, DefaultConfig())
	// Expanded: F = 5,6,7 | 12,13,14 → data 5+5, forward 2, backward 2.
	// Collapsing first would give data 6, forward 2, backward 6.
	if !slices.Equal(rep.AdvanceMS, []float64{10, 2, 2, 0, 0, 0}) || rep.ExposedMS != 14 || len(rep.Stages) != 6 {
		t.Errorf("advances %v exposed %v stages %d", rep.AdvanceMS, rep.ExposedMS, len(rep.Stages))
	}
	if hasLabel(rep, LabelGradAccumAmbiguous) {
		t.Errorf("complete microsteps flagged ambiguous")
	}
}

// Streaming order and the bounded/open storage modes must not matter.
func TestAssembleOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	job := testJob(5, 2)
	job.Schema.Probes = []string{stagevec.ProbeForwardCUDA}
	var vs []*stagevec.Vector
	for s := int64(0); s < 12; s++ {
		for r := 0; r < 5; r++ {
			for m := 0; m < 2; m++ {
				if rng.IntN(10) == 0 {
					continue
				}
				v := vec(s, r, rng.Float64()*5, rng.Float64()*5, rng.Float64()*5)
				v.Micro, v.DataLead = m, r%2 // a rank's loader keeps one lead
				if rng.IntN(3) == 0 {
					v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 1, Ready: rng.IntN(2) == 0}}
				}
				vs = append(vs, v)
			}
		}
	}
	ref := assemble(t, job, AssembleOptions{FromStep: 2, ToStep: 9}, vs...)
	rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
	open := assemble(t, job, AssembleOptions{FromStep: 2}, vs...)
	n := len(ref.Steps)
	if !slices.Equal(ref.Steps, open.Steps[:n]) {
		t.Fatalf("steps %v vs %v", ref.Steps, open.Steps)
	}
	cells := n * 5
	if !slices.Equal(ref.D, open.D[:cells*12]) || !slices.Equal(presentMask(ref, cells), presentMask(open, cells)[:cells]) {
		t.Fatal("bounded and open windows differ")
	}
	for i := 0; i < cells; i++ { // sums may round differently in another order
		if !approx(ref.Wall[i], open.Wall[i], 1e-12) || !approx(ref.Closure[i], open.Closure[i], 1e-12) {
			t.Fatalf("cell %d: wall %v/%v closure %v/%v", i, ref.Wall[i], open.Wall[i], ref.Closure[i], open.Closure[i])
		}
	}
	a, b := ref.Probes[stagevec.ProbeForwardCUDA], open.Probes[stagevec.ProbeForwardCUDA]
	for i := 0; i < cells; i++ {
		if a.Sampled[i] != b.Sampled[i] || (a.Value[i] != b.Value[i] && !(math.IsNaN(a.Value[i]) && math.IsNaN(b.Value[i]))) {
			t.Fatalf("probe cell %d differs", i)
		}
	}
}

func TestAnalyzeRejectsBadInput(t *testing.T) {
	w := assemble(t, testJob(2, 1), AssembleOptions{}, vec(0, 0, 1), vec(0, 1, 2))
	cfg := DefaultConfig()
	cfg.CandidateThreshold = 1.5
	var fe *signal.FieldError
	if _, err := Analyze(w, cfg); !errors.As(err, &fe) || fe.Field != "candidate_threshold" {
		t.Errorf("err = %v, want candidate_threshold", err)
	}
	bad := *w
	bad.Stages = slices.Clone(w.Stages)
	bad.Stages[1], bad.Stages[2] = bad.Stages[2], bad.Stages[1]
	if _, err := Analyze(&bad, DefaultConfig()); !errors.As(err, &fe) || fe.Field != "stages" {
		t.Errorf("err = %v, want a stages order error", err)
	}
	bad = *w
	bad.D = w.D[:3]
	if _, err := Analyze(&bad, DefaultConfig()); !errors.As(err, &fe) || fe.Field != "d" {
		t.Errorf("err = %v, want a d shape error", err)
	}
	if _, err := Analyze(nil, DefaultConfig()); err == nil {
		t.Error("nil window accepted")
	}
}

func TestRoute(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	tests := []struct {
		score   []float64
		tau     float64
		routing []string
		top2    []string
	}{
		{[]float64{1, 6, 3, 0}, 0.8, []string{"b", "c"}, []string{"b", "c"}},
		{[]float64{5, 5, 0, 0}, 0.8, []string{"a", "b"}, []string{"a", "b"}}, // tie → stage order
		{[]float64{0, 2, 2, 1}, 0.5, []string{"b", "c"}, []string{"b", "c"}}, // reaching τ exactly stops
		{[]float64{9, 1, 0, 0}, 0.8, []string{"a"}, []string{"a", "b"}},
		{[]float64{0, 0, 0, 0}, 0.8, []string{}, []string{}},
	}
	for _, tc := range tests {
		r := route(names, tc.score, tc.tau)
		if !slices.Equal(r.Routing, tc.routing) || !slices.Equal(r.Top2, tc.top2) {
			t.Errorf("route(%v, %v) = %v top2 %v, want %v top2 %v", tc.score, tc.tau, r.Routing, r.Top2, tc.routing, tc.top2)
		}
	}
}

func presentMask(w *stagevec.Window, cells int) []bool {
	if w.Present != nil {
		return w.Present
	}
	all := make([]bool, cells)
	for i := range all {
		all[i] = true
	}
	return all
}
