package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// acfSlow is the §4.2 formula term by term (the slow twin of ACF).
func acfSlow(x []float64, maxLag int) []float64 {
	n := len(x)
	mu := 0.0
	for _, v := range x {
		mu += v
	}
	mu /= float64(n)
	den := 0.0
	for _, v := range x {
		den += (v - mu) * (v - mu)
	}
	out := make([]float64, maxLag+1)
	for k := range out {
		s := 0.0
		for t := 0; t+k < n; t++ {
			s += (x[t] - mu) * (x[t+k] - mu)
		}
		out[k] = s / den
	}
	return out
}

func TestACFMatchesFormulaDirectAndFFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 17, 1000, 5000} {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64(i%7) + rng.NormFloat64()
		}
		lag := n - 1
		want := acfSlow(x, lag)
		got := ACF(x, lag)
		fftOut := make([]float64, lag+1)
		mu := 0.0
		for _, v := range x {
			mu += v
		}
		acfFFT(x, mu/float64(n), fftOut)
		den := 0.0
		for _, v := range x {
			den += (v - mu/float64(n)) * (v - mu/float64(n))
		}
		for k := range want {
			if math.Abs(got[k]-want[k]) > 1e-9 || math.Abs(fftOut[k]/den-want[k]) > 1e-9 {
				t.Fatalf("n=%d k=%d: ACF %v fft %v formula %v", n, k, got[k], fftOut[k]/den, want[k])
			}
		}
	}
}

// Property: a sequence with exact period p (and ≥ 20 periods, see ACF's
// note on (L−p)/L) has Period p.
func TestACFPeriodOfExactlyPeriodicSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		p := 1 + rng.IntN(40)
		motif := make([]float64, p)
		for i := range motif {
			motif[i] = rng.Float64()
		}
		// Make the motif primitive (no smaller period) by a unique marker.
		motif[0] = 7
		reps := 25 + rng.IntN(50)
		x := make([]float64, 0, p*reps)
		for range reps {
			x = append(x, motif...)
		}
		k, a, ok := Period(x, len(x)/10, 0.95)
		if p == 1 {
			if !ok || k != 1 || a != 1 {
				t.Fatalf("constant: period %d acf %v ok %v", k, a, ok)
			}
			continue
		}
		if !ok || k != p {
			t.Fatalf("trial %d: period %d (acf %v ok %v), want %d", trial, k, a, ok, p)
		}
	}
}

func TestACFDegenerate(t *testing.T) {
	if ACF(nil, 3) != nil {
		t.Error("empty")
	}
	if a := ACF([]float64{5}, 3); len(a) != 1 || a[0] != 1 {
		t.Errorf("single: %v", a)
	}
	if _, _, ok := Period([]float64{1, 2, 3, 4, 5, 6, 7, 8}, 4, 0.95); ok {
		t.Error("ramp has no period")
	}
	if a := ACF([]float64{1, math.Inf(1), 2}, 2); a[1] != 0 {
		t.Errorf("non-finite: %v", a)
	}
}

func BenchmarkPeriod100k(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	motif := make([]float64, 37)
	for i := range motif {
		motif[i] = rng.Float64()
	}
	x := make([]float64, 100_000)
	for i := range x {
		x[i] = motif[i%len(motif)]
	}
	b.ResetTimer()
	for range b.N {
		if k, _, ok := Period(x, 4000, 0.95); !ok || k != 37 {
			b.Fatal(k, ok)
		}
	}
}

func BenchmarkACF100k(b *testing.B) {
	x := make([]float64, 100_000)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range x {
		x[i] = rng.Float64()
	}
	b.ResetTimer()
	for range b.N {
		ACF(x, len(x)-1)
	}
}
