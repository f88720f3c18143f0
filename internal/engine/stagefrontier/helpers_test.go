package stagefrontier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func testJob(world, acc int) *signal.Job {
	return &signal.Job{ID: "fixture", WorldSize: world, Schema: stagevec.DefaultSchema(), Accumulation: acc}
}

// vec builds a closed vector: the residual is given and wall is the sum.
func vec(step int64, rank int, d ...float64) *stagevec.Vector {
	full := append([]float64(nil), d...)
	for len(full) < len(stagevec.DefaultStages) {
		full = append(full, 0)
	}
	return &stagevec.Vector{Step: step, Rank: rank, Durations: full, WallMS: sumOf(full)}
}

func assemble(t testing.TB, job *signal.Job, opt AssembleOptions, vs ...*stagevec.Vector) *stagevec.Window {
	t.Helper()
	a := NewAssembler(job, opt)
	for i, v := range vs {
		if err := a.Add(v); err != nil {
			t.Fatalf("Add(vectors[%d]): %v", i, err)
		}
	}
	w, err := a.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	return w
}

func analyzeOK(t testing.TB, w *stagevec.Window, cfg Config) *Report {
	t.Helper()
	rep, err := Analyze(w, cfg)
	if err != nil {
		t.Fatalf("Analyze: %v", err)
	}
	return rep
}

// denseWindow is a zeroed T×R default-schema window with steps 0..T-1,
// built directly (no Assembler).
func denseWindow(T, R int) *stagevec.Window {
	job := testJob(R, 1)
	steps := make([]int64, T)
	for i := range steps {
		steps[i] = int64(i)
	}
	stages, group := expandStages(job.Schema.Stages, 1)
	ranks := make([]signal.Rank, R)
	for r := range ranks {
		ranks[r] = signal.Rank{Rank: r}
	}
	return stagevec.NewWindow(job.ID, job.Schema, ranks, steps, stages, group)
}

// randWindow is a dense default-schema window of random durations; a
// fraction of cells get a spike so frontiers move between ranks.
func randWindow(rng *rand.Rand, T, R int) *stagevec.Window {
	w := denseWindow(T, R)
	for i := range w.D {
		w.D[i] = rng.Float64() * 10
		if rng.IntN(20) == 0 {
			w.D[i] += rng.Float64() * 100
		}
	}
	for t := 0; t < T; t++ {
		for r := 0; r < R; r++ {
			w.Wall[t*R+r] = sumOf(w.Row(t, r))
		}
	}
	return w
}

func hasLabel(rep *Report, name LabelName) bool {
	for _, l := range rep.Labels {
		if l.Name == name {
			return true
		}
	}
	return false
}

func labelNames(rep *Report) []LabelName {
	var out []LabelName
	for _, l := range rep.Labels {
		out = append(out, l.Name)
	}
	return out
}

func approx(a, b, rel float64) bool {
	return math.Abs(a-b) <= rel*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}
