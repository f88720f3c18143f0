package stagefrontier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Theorem 1: Σ_s a[t,s] = F[t,S] = max_r Σ_s d[t,r,s] for every step.
func TestTelescopingProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := 0; trial < 50; trial++ {
		T, R := 1+rng.IntN(20), 1+rng.IntN(40)
		w := randWindow(rng, T, R)
		rep := analyzeOK(t, w, DefaultConfig())
		total := 0.0
		for ti, pt := range rep.StepSeries {
			maxTot := 0.0
			for r := 0; r < R; r++ {
				maxTot = math.Max(maxTot, sumOf(w.Row(ti, r)))
			}
			if !approx(sumOf(pt.AdvanceMS), pt.ExposedMS, 1e-9) || !approx(pt.ExposedMS, maxTot, 1e-9) {
				t.Fatalf("trial %d step %d: Σa=%v F=%v max total=%v", trial, ti, sumOf(pt.AdvanceMS), pt.ExposedMS, maxTot)
			}
			total += maxTot
		}
		if !approx(rep.ExposedMS, total, 1e-9) || !approx(sumOf(rep.AdvanceMS), rep.ExposedMS, 1e-9) {
			t.Fatalf("trial %d: exposed %v, Σ max totals %v, Σ advances %v", trial, rep.ExposedMS, total, sumOf(rep.AdvanceMS))
		}
		if rep.TelescopeErrMS > 1e-9*rep.ExposedMS {
			t.Fatalf("trial %d: telescope error %v", trial, rep.TelescopeErrMS)
		}
	}
}

func baseline(rep *Report, method string) BaselineSummary {
	for _, b := range rep.Baselines {
		if b.Method == method {
			return b
		}
	}
	return BaselineSummary{}
}

// Propositions 1 and 2 on random windows.
func TestMaxAvgBoundsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for trial := 0; trial < 50; trial++ {
		T, R := 1+rng.IntN(10), 1+rng.IntN(30)
		rep := analyzeOK(t, randWindow(rng, T, R), DefaultConfig())
		E, S := rep.ExposedMS, float64(len(rep.Stages))
		mx := baseline(rep, MethodPerStageMax).TotalMS
		avg := baseline(rep, MethodPerStageAvg).TotalMS
		tol := 1e-9 * E
		if mx < E-tol || mx > math.Min(float64(R), S)*E+tol {
			t.Fatalf("Prop 1 violated: E=%v Σmax=%v R=%d S=%v", E, mx, R, S)
		}
		if avg < E/float64(R)-tol || avg > E+tol {
			t.Fatalf("Prop 2 violated: E=%v avg=%v R=%d", E, avg, R)
		}
	}
}

// tightWindow assigns duration 1 to distinct (rank, stage) pairs, one per
// rank (App. D proof of Prop. 1).
func tightWindow(R int, cells map[int]int) *stagevec.Window {
	job := testJob(R, 1)
	stages, group := expandStages(job.Schema.Stages, 1)
	ranks := make([]signal.Rank, R)
	for r := range ranks {
		ranks[r] = signal.Rank{Rank: r}
	}
	w := stagevec.NewWindow(job.ID, job.Schema, ranks, []int64{0}, stages, group)
	S := len(stages)
	for r, s := range cells {
		w.D[r*S+s] = 1
		w.Wall[r] = 1
	}
	return w
}

func TestProp1Tight(t *testing.T) {
	// min(R,S) = 6 with 8 ranks: ranks 0..5 each own one stage.
	w := tightWindow(8, map[int]int{0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5})
	rep := analyzeOK(t, w, DefaultConfig())
	if mx := baseline(rep, MethodPerStageMax).TotalMS; rep.ExposedMS != 1 || mx != 6 {
		t.Fatalf("exposed=%v Σmax=%v, want 1 and min(R,S)·1 = 6", rep.ExposedMS, mx)
	}
}

func TestProp2Tight(t *testing.T) {
	w := tightWindow(5, map[int]int{3: 2}) // one rank carries everything
	rep := analyzeOK(t, w, DefaultConfig())
	if avg := baseline(rep, MethodPerStageAvg).TotalMS; !approx(avg, rep.ExposedMS/5, 1e-12) {
		t.Fatalf("avg=%v, want exposed/R = %v", avg, rep.ExposedMS/5)
	}
}

// Proposition 3: perturbing every duration by at most ε moves the
// boundary-s frontier by at most sε and its advance by at most 2sε.
func TestMeasurementErrorStability(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const eps = 0.25
	for trial := 0; trial < 30; trial++ {
		T, R := 1+rng.IntN(8), 1+rng.IntN(20)
		w := randWindow(rng, T, R)
		base := analyzeOK(t, w, DefaultConfig())
		p := *w
		p.D = make([]float64, len(w.D))
		for i, d := range w.D {
			p.D[i] = math.Max(0, d+(rng.Float64()*2-1)*eps)
		}
		pert := analyzeOK(t, &p, DefaultConfig())
		for ti := range base.StepSeries {
			f0, f1 := 0.0, 0.0
			for s := range base.Stages {
				a0, a1 := base.StepSeries[ti].AdvanceMS[s], pert.StepSeries[ti].AdvanceMS[s]
				f0 += a0
				f1 += a1
				bound := float64(s+1) * eps
				if math.Abs(f1-f0) > bound+1e-9 {
					t.Fatalf("trial %d step %d stage %d: |ΔF|=%v > %v", trial, ti, s, math.Abs(f1-f0), bound)
				}
				if math.Abs(a1-a0) > 2*bound+1e-9 {
					t.Fatalf("trial %d step %d stage %d: |Δa|=%v > %v", trial, ti, s, math.Abs(a1-a0), 2*bound)
				}
			}
		}
	}
}

// Slack identity (§3 eq.3) summed over the window: ΔLag = F advance − d.
func TestSlackIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	w := randWindow(rng, 6, 9)
	rep := analyzeOK(t, w, DefaultConfig())
	for r, rs := range rep.Ranks {
		for s := range rep.Stages {
			sumD := 0.0
			for ti := 0; ti < 6; ti++ {
				sumD += w.At(ti, r, s)
			}
			// σ[s] − σ[s−1] = a[s] − d[s], summed over steps.
			if want := rep.AdvanceMS[s] - sumD; !approx(rs.DeltaLagMS[s], want, 1e-9) {
				t.Fatalf("rank %d stage %d: ΔLag=%v, want a−d=%v", r, s, rs.DeltaLagMS[s], want)
			}
		}
	}
}
