package stagefrontier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func TestSamplePicks(t *testing.T) {
	for _, c := range []struct{ n, k int }{{1, 1}, {10, 10}, {11, 10}, {1000, 257}, {16384, 1024}, {16385, 1024}, {3000, 1024}} {
		p := samplePicks(c.n, c.k)
		if c.n <= c.k {
			if p != nil {
				t.Errorf("n=%d k=%d: want nil (exact)", c.n, c.k)
			}
			continue
		}
		got := 0
		for _, ok := range p {
			if ok {
				got++
			}
		}
		if !p[0] || got > c.k || got < c.k/2 {
			t.Errorf("n=%d k=%d: %d picks, first %v", c.n, c.k, got, p[0])
		}
	}
}

// quantileOf is the band [#(x<m), #(x<=m)]/n that m occupies in xs.
func quantileOf(xs []float64, m float64) (lo, hi float64) {
	for _, x := range xs {
		if x < m {
			lo++
		}
		if x <= m {
			hi++
		}
	}
	return lo / float64(len(xs)), hi / float64(len(xs))
}

// The sampled medians past the caps must sit near the exact median. The
// sample median's quantile has standard error 0.5/√n: the cohort median
// (1,024 samples) stays inside [0.45, 0.55] (3σ); for the rank median
// (≤257 samples, σ≈0.031) that band is only 1.6σ, so ≥80% of columns
// must fall inside it (≈89% expected) and every one inside 0.5 ± 5σ.
func TestSampledMedianQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	job := testJob(1, 1)
	stages, group := expandStages(job.Schema.Stages, 1)
	S := len(stages)
	build := func(T, R int, holes bool) *stagevec.Window {
		steps := make([]int64, T)
		for i := range steps {
			steps[i] = int64(i)
		}
		ranks := make([]signal.Rank, R)
		for r := range ranks {
			ranks[r] = signal.Rank{Rank: r}
		}
		w := stagevec.NewWindow(job.ID, job.Schema, ranks, steps, stages, group)
		for i := range w.D {
			w.D[i] = rng.ExpFloat64() * 10
		}
		if holes {
			w.Present = make([]bool, T*R)
			for i := range w.Present {
				w.Present[i] = rng.IntN(4) != 0
			}
		}
		return w
	}
	for _, holes := range []bool{false, true} {
		// Cohort median: many ranks, few steps.
		w := build(4, 6000, holes)
		a := newAnalyzer(w, DefaultConfig(), 1)
		a.cohortMedians()
		for ti := 0; ti < a.T; ti++ {
			for s := 0; s < S; s++ {
				var xs []float64
				for r := 0; r < a.R; r++ {
					if a.present(ti, r) {
						xs = append(xs, w.Row(ti, r)[s])
					}
				}
				if lo, hi := quantileOf(xs, a.gain.cohortB[ti*S+s]); lo > 0.55 || hi < 0.45 {
					t.Errorf("holes=%v cohort t=%d s=%d: quantile [%.3f, %.3f] outside [0.45, 0.55]", holes, ti, s, lo, hi)
				}
			}
		}
		// Rank median: many steps, few ranks.
		w = build(3000, 40, holes)
		a = newAnalyzer(w, DefaultConfig(), 1)
		a.rankMedians()
		band := 2.5 / math.Sqrt(rankMedianCap*0.9) // ≈250 samples at T=3000
		in, cols := 0, 0
		for r := 0; r < a.R; r++ {
			for s := 0; s < S; s++ {
				var xs []float64
				for ti := 0; ti < a.T; ti++ {
					if a.present(ti, r) {
						xs = append(xs, w.Row(ti, r)[s])
					}
				}
				lo, hi := quantileOf(xs, a.gain.rankMed[r*S+s])
				if lo > 0.5+band || hi < 0.5-band {
					t.Errorf("holes=%v rank %d s=%d: quantile [%.3f, %.3f] outside 0.5±%.3f", holes, r, s, lo, hi, band)
				}
				cols++
				if lo <= 0.55 && hi >= 0.45 {
					in++
				}
			}
		}
		if in < cols*8/10 {
			t.Errorf("holes=%v: only %d of %d rank medians inside [0.45, 0.55]", holes, in, cols)
		}
	}
}
