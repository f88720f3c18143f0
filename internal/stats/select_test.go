package stats

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMedianMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	gens := map[string]func() float64{
		"uniform": func() float64 { return rng.Float64() * 100 },
		"narrow":  func() float64 { return 40 * (0.9 + 0.2*rng.Float64()) },
		"dups":    func() float64 { return float64(rng.IntN(4)) },
		"zeros":   func() float64 { return 0 },
		"spiky":   func() float64 { return rng.ExpFloat64() * float64(1+rng.IntN(3)*1000) },
		"negzero": func() float64 { return []float64{0, -0.0 * 1, 1}[rng.IntN(3)] },
	}
	for name, gen := range gens {
		for _, n := range []int{1, 2, 3, 7, 32, 33, 100, 1000, 1001, 16384} {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = gen()
			}
			s := slices.Clone(xs)
			slices.Sort(s)
			want := s[n/2]
			if n%2 == 0 {
				want = s[n/2-1] + (s[n/2]-s[n/2-1])/2
			}
			if got := Median(xs); got != want {
				t.Errorf("%s n=%d: median = %v, want %v", name, n, got, want)
			}
		}
	}
}
func benchMed(b *testing.B, n int, base float64) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]uint64, n)
	for i := range src {
		src[i] = Key(base * (0.9 + 0.2*rng.Float64()))
	}
	buf := make([]uint64, n)
	for b.Loop() {
		copy(buf, src)
		MedianKeys(buf)
	}
}
func BenchmarkMed1000(b *testing.B)  { benchMed(b, 1000, 90) }
func BenchmarkMed16384(b *testing.B) { benchMed(b, 16384, 90) }
