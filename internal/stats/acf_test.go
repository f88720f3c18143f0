package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// acfOneHot is §4.2's formula term by term on the one-hot encoding of the
// symbols (the slow twin of SymbolACF): μ the mean vector of the observed
// calls, products and squares summed over coordinates; a missing call
// (negative id) is imputed with μ (its centred vector is 0).
func acfOneHot(x []int32, maxLag int) []float64 {
	ids := map[int32]int{}
	obs := 0
	for _, s := range x {
		if _, ok := ids[s]; !ok && s >= 0 {
			ids[s] = len(ids)
		}
		if s >= 0 {
			obs++
		}
	}
	n, d := len(x), len(ids)
	vec := func(t int) []float64 {
		v := make([]float64, d)
		if x[t] >= 0 {
			v[ids[x[t]]] = 1
		}
		return v
	}
	mu := make([]float64, d)
	for t := range x {
		if x[t] >= 0 {
			for c, v := range vec(t) {
				mu[c] += v / float64(obs)
			}
		}
	}
	centred := func(t int) []float64 {
		v := vec(t)
		for c := range v {
			if x[t] >= 0 {
				v[c] -= mu[c]
			}
		}
		return v
	}
	den := 0.0
	for t := range x {
		for _, v := range centred(t) {
			den += v * v
		}
	}
	out := make([]float64, maxLag+1)
	for k := range out {
		s := 0.0
		for t := 0; t+k < n; t++ {
			a, b := centred(t), centred(t+k)
			for c := range a {
				s += a[c] * b[c]
			}
		}
		out[k] = s / den
	}
	out[0] = 1
	return out
}

func TestSymbolACFMatchesOneHotFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 17, 300} {
		for _, alphabet := range []int{2, 3, 9} {
			x := make([]int32, n)
			for i := range x {
				x[i] = int32(i % alphabet)
				switch rng.IntN(10) {
				case 0, 1:
					x[i] = int32(rng.IntN(alphabet)) * 1000 // any ids, not only dense ones
				case 2:
					x[i] = -1 - int32(i) // a missing call
				}
			}
			want := acfOneHot(x, n-1)
			got := SymbolACF(x, n-1)
			for k := range want {
				if math.Abs(got[k]-want[k]) > 1e-9 {
					t.Fatalf("n=%d alphabet=%d k=%d: SymbolACF %v, formula %v", n, alphabet, k, got[k], want[k])
				}
			}
		}
	}
}

// Property: renaming symbols changes nothing (the measure is exact, not an
// encoding's accident).
func TestSymbolACFIndependentOfNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		n := 50 + rng.IntN(500)
		x := make([]int32, n)
		for i := range x {
			x[i] = int32(rng.IntN(6))
		}
		perm := rng.Perm(6)
		y := make([]int32, n)
		for i, s := range x {
			y[i] = int32(perm[s]*7919 + 3)
		}
		a, b := SymbolACF(x, n/3), SymbolACF(y, n/3)
		for k := range a {
			if a[k] != b[k] {
				t.Fatalf("lag %d: %v vs %v after renaming", k, a[k], b[k])
			}
		}
	}
}

// Property: a sequence with exact period p (and ≥ 20 periods, see
// SymbolACF's note on (L−p)/L) has Period p, and SymbolPeriod is the first
// lag at which SymbolACF reaches M.
func TestSymbolPeriodOfExactlyPeriodicSequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 300 {
		p := 1 + rng.IntN(40)
		motif := make([]int32, p)
		for i := range motif {
			motif[i] = int32(rng.IntN(1 + rng.IntN(p+1)))
		}
		motif[0] = 99 // a unique marker: the motif is primitive
		reps := 25 + rng.IntN(50)
		x := make([]int32, 0, p*reps)
		for range reps {
			x = append(x, motif...)
		}
		maxLag := len(x) / 20
		k, a, m, ok := SymbolPeriod(x, maxLag, 0.95)
		if !ok || k != p || m != 1 {
			t.Fatalf("trial %d: period %d (acf %v match %v ok %v), want %d", trial, k, a, m, ok, p)
		}
		all := SymbolACF(x, maxLag)
		first := 0
		for j := 1; j < len(all); j++ {
			if all[j] >= 0.95 {
				first = j
				break
			}
		}
		if first != k || math.Abs(all[k]-a) > 1e-9 {
			t.Fatalf("trial %d: SymbolPeriod %d (%v), SymbolACF's first lag ≥ M %d (%v)", trial, k, a, first, all[first])
		}
	}
}

// A dominant symbol repeats itself at lag 1 without any period there: 62
// full DDP buckets between a small first bucket and a remainder match 95%
// of calls one call later, but the chance correction rejects lag 1 and
// finds the 64 calls of the iteration.
func TestSymbolPeriodDominantSymbol(t *testing.T) {
	var x []int32
	for range 300 {
		x = append(x, 1)
		for range 62 {
			x = append(x, 2)
		}
		x = append(x, 3)
	}
	k, a, m, ok := SymbolPeriod(x, 400, 0.95)
	if !ok || k != 64 {
		t.Fatalf("period %d acf %v match %v ok %v, want 64", k, a, m, ok)
	}
	if acf := SymbolACF(x, 1)[1]; acf > 0.5 {
		t.Fatalf("lag 1: ACF %v for a dominant symbol", acf)
	}
}

// Property: a period survives lost calls marked as missing — each costs
// about 1/L, where shifting every later call would cost up to a period of
// mismatches — and SymbolPeriod's early exit never drops a lag that
// SymbolACF puts at or above M.
func TestSymbolPeriodWithMissingCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for trial := range 200 {
		p := 2 + rng.IntN(30)
		motif := make([]int32, p)
		for i := range motif {
			motif[i] = int32(rng.IntN(4))
		}
		motif[0] = 99
		var x []int32
		next := int32(-1)
		for i := range 80 * p {
			s := motif[i%p]
			if rng.Float64() < 0.01 { // 1% lost: ACF ≈ 1 − 1/80 − 0.01 ≈ 0.975
				s, next = next, next-1
			}
			x = append(x, s)
		}
		maxLag := len(x) / 20
		k, a, _, ok := SymbolPeriod(x, maxLag, 0.95)
		if !ok || k != p {
			t.Fatalf("trial %d: period %d (acf %v ok %v), want %d", trial, k, a, ok, p)
		}
		all := SymbolACF(x, maxLag)
		for j := 1; j < k; j++ {
			if all[j] >= 0.95 {
				t.Fatalf("trial %d: lag %d has ACF %v ≥ M but SymbolPeriod said %d", trial, j, all[j], k)
			}
		}
	}
}

func TestSymbolACFDegenerate(t *testing.T) {
	if SymbolACF(nil, 3) != nil {
		t.Error("empty")
	}
	if a := SymbolACF([]int32{5}, 3); len(a) != 1 || a[0] != 1 {
		t.Errorf("single: %v", a)
	}
	if k, a, m, ok := SymbolPeriod([]int32{4, 4, 4, 4}, 2, 0.95); !ok || k != 1 || a != 1 || m != 1 {
		t.Errorf("constant: %d %v %v %v", k, a, m, ok)
	}
	if _, _, _, ok := SymbolPeriod([]int32{1, 2, 3, 4, 5, 6, 7, 8}, 4, 0.95); ok {
		t.Error("distinct calls have no period")
	}
	if _, _, _, ok := SymbolPeriod([]int32{1}, 4, 0.95); ok {
		t.Error("one call")
	}
}

func BenchmarkSymbolPeriod16k(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	motif := make([]int32, 137)
	for i := range motif {
		motif[i] = int32(rng.IntN(40))
	}
	x := make([]int32, 16384)
	for i := range x {
		x[i] = motif[i%len(motif)]
	}
	b.ResetTimer()
	for range b.N {
		if k, _, _, ok := SymbolPeriod(x, 400, 0.95); !ok || k != 137 {
			b.Fatal(k, ok)
		}
	}
}

// The worst case: no period at all, every lag up to the maximum tried.
func BenchmarkSymbolPeriodNone16k(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]int32, 16384)
	for i := range x {
		x[i] = int32(rng.IntN(40))
	}
	b.ResetTimer()
	for range b.N {
		if _, _, _, ok := SymbolPeriod(x, 400, 0.95); ok {
			b.Fatal("period in noise")
		}
	}
}
