package stagefrontier

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// The sweep's unrolled six-stage path (run6) must agree bit for bit with
// the generic loop, and the step series of both with Series, the plain
// per-step loop of §3 — on full and partial windows, at sizes that span
// several rank blocks, and with tie candidates overflowing.
func TestFastPathMatchesGenericLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 43))
	type shape struct{ T, R int }
	shapes := []shape{{1, 1}, {3, 2}, {17, 33}, {5, 3000}, {40, 64}}
	for i, sh := range shapes {
		for _, variant := range []string{"dense", "missing", "ties", "spiky"} {
			w := randWindow(rng, sh.T, sh.R)
			switch variant {
			case "missing":
				w.Present = make([]bool, sh.T*sh.R)
				for j := range w.Present {
					w.Present[j] = rng.IntN(7) != 0
				}
			case "ties": // integer durations: many exact ties, candidate overflow
				for j := range w.D {
					w.D[j] = float64(rng.IntN(3))
				}
			case "spiky":
				for j := range w.D {
					if rng.IntN(50) == 0 {
						w.D[j] += 500
					}
				}
			}
			fast, err := analyzeWith(w, DefaultConfig(), false)
			if err != nil {
				t.Fatal(err)
			}
			slow, err := analyzeWith(w, DefaultConfig(), true)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("shape %d %v %s: unrolled and generic sweeps disagree", i, sh, variant)
			}
			series, err := Series(w)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(series, fast.StepSeries) {
				for k := range series {
					if !reflect.DeepEqual(series[k], fast.StepSeries[k]) {
						t.Fatalf("shape %d %v %s: step %d: Series %+v, Analyze %+v", i, sh, variant, k, series[k], fast.StepSeries[k])
					}
				}
				t.Fatalf("shape %d %v %s: Series differs", i, sh, variant)
			}
		}
	}
}

// Series over an accumulation window groups microstep advances onto
// schema stages like Analyze.
func TestSeriesAccumulation(t *testing.T) {
	job := testJob(3, 2)
	var vs []*stagevec.Vector
	for s := int64(0); s < 4; s++ {
		for r := 0; r < 3; r++ {
			for m := 0; m < 2; m++ {
				v := vec(s, r, float64(r+1), 2, float64(3*m+1), 0, 1)
				v.Micro = m
				vs = append(vs, v)
			}
		}
	}
	w := assemble(t, job, AssembleOptions{}, vs...)
	series, err := Series(w)
	if err != nil {
		t.Fatal(err)
	}
	rep := analyzeOK(t, w, DefaultConfig())
	if !reflect.DeepEqual(series, rep.StepSeries) {
		t.Fatalf("Series %+v\nAnalyze %+v", series, rep.StepSeries)
	}
}
