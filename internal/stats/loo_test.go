package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func popMeanSD(xs []float64) (float64, float64) {
	mu := 0.0
	for _, x := range xs {
		mu += x
	}
	mu /= float64(len(xs))
	v := 0.0
	for _, x := range xs {
		v += (x - mu) * (x - mu)
	}
	return mu, math.Sqrt(v / float64(len(xs)))
}

// Leave-one-out moments equal the moments computed directly over the
// others, and the population z over all n members equals PopulationZ of
// the leave-one-out z (the identity docs/design/sysom.md derives).
func TestMomentsLeaveOneOutIdentity(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 3 + trial%30
		xs := make([]float64, n)
		var m Moments
		for i := range xs {
			xs[i] = 0.4 + 1e-3*r.NormFloat64()
			m.Add(xs[i])
		}
		xs[0] += 0.01 * r.Float64() // an outlier
		m = Moments{}
		for _, x := range xs {
			m.Add(x)
		}
		mu, sd := popMeanSD(xs)
		if math.Abs(m.Mean()-mu) > 1e-12 || math.Abs(m.SD()-sd) > 1e-9 {
			t.Fatalf("n=%d: moments %v/%v, direct %v/%v", n, m.Mean(), m.SD(), mu, sd)
		}
		lo := m.Without(xs[0])
		muL, sdL := popMeanSD(xs[1:])
		if math.Abs(lo.Mean()-muL) > 1e-12 || math.Abs(lo.SD()-sdL) > 1e-9 {
			t.Fatalf("n=%d: loo %v/%v, direct %v/%v", n, lo.Mean(), lo.SD(), muL, sdL)
		}
		zLOO := (xs[0] - muL) / sdL
		zAll := (xs[0] - mu) / sd
		if got := PopulationZ(zLOO, n); math.Abs(got-zAll) > 1e-6*math.Max(1, zAll) {
			t.Fatalf("n=%d: PopulationZ(%v)=%v, direct %v", n, zLOO, got, zAll)
		}
		if zAll > math.Sqrt(float64(n-1))+1e-9 {
			t.Fatalf("n=%d: z_all %v above sqrt(n-1)", n, zAll)
		}
	}
}

// The bound: for n ≤ 5 a population z can never exceed 2, whatever the
// outlier; for n = 8 it can.
func TestPopulationZBound(t *testing.T) {
	for n := 2; n <= 5; n++ {
		if z := PopulationZ(math.Inf(1), n); z > 2 {
			t.Fatalf("n=%d: bound %v", n, z)
		}
	}
	if z := PopulationZ(100, 8); z < 2 {
		t.Fatalf("n=8: %v", z)
	}
}
