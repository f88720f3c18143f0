package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// ksWorkers draws per-worker completion times: ops evenly spaced with
// jitter over [0, span); worker `slow` (if ≥ 0) completes them stretched
// by factor, i.e. a slower rhythm.
func ksWorkers(rng *rand.Rand, nw, ops int, span int64, slow int, factor float64) [][]int64 {
	out := make([][]int64, nw)
	for w := range out {
		ts := make([]int64, ops)
		for i := range ts {
			t := float64(i)*float64(span)/float64(ops) + rng.Float64()*float64(span)/float64(ops)
			if w == slow {
				t *= factor
			}
			ts[i] = int64(t)
		}
		out[w] = ts
	}
	return out
}

func TestGridValidateAndBin(t *testing.T) {
	for _, tc := range []struct {
		name string
		g    Grid
		ok   bool
	}{
		{"ok", Grid{T0: 0, W: 10, N: 5}, true},
		{"zero W", Grid{W: 0, N: 5}, false},
		{"zero N", Grid{W: 1, N: 0}, false},
		{"overflow", Grid{T0: math.MaxInt64 - 10, W: 10, N: 5}, false},
		{"overflow W·N", Grid{W: math.MaxInt64 / 2, N: 3}, false},
	} {
		if err := tc.g.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	g := Grid{T0: 100, W: 10, N: 3}
	for _, tc := range []struct {
		t  int64
		k  int
		ok bool
	}{{99, 0, false}, {100, 0, true}, {109, 0, true}, {110, 1, true}, {129, 2, true}, {130, 0, false}} {
		k, ok := g.Bin(tc.t)
		if k != tc.k || ok != tc.ok {
			t.Errorf("Bin(%d) = %d,%v want %d,%v", tc.t, k, ok, tc.k, tc.ok)
		}
	}
}

func TestRhythmsECDF(t *testing.T) {
	g := Grid{T0: 0, W: 10, N: 4}
	r, err := NewRhythms(g, [][]int64{{1, 2, 15, 35, 99, -1}, {}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Freq(0); !slices.Equal(got, []uint32{2, 1, 0, 1}) {
		t.Errorf("freq = %v", got)
	}
	if r.Total[0] != 4 || r.Outside[0] != 2 {
		t.Errorf("total %d outside %d", r.Total[0], r.Outside[0])
	}
	if got := r.Row(0); !slices.Equal(got, []float64{0.5, 0.75, 0.75, 1}) {
		t.Errorf("cdf = %v", got)
	}
	if got := r.Row(1); !slices.Equal(got, []float64{0, 0, 0, 0}) {
		t.Errorf("empty worker cdf = %v", got)
	}
	if m := r.MaxWindowMass(0); m != 0.5 {
		t.Errorf("max window mass %v", m)
	}
	if _, err := NewRhythmsFromCounts(g, [][]uint32{{1, 2}}); err == nil {
		t.Error("short counts accepted")
	}
	rc, err := NewRhythmsFromCounts(g, [][]uint32{{2, 1, 0, 1}})
	if err != nil || !slices.Equal(rc.Row(0), r.Row(0)) {
		t.Errorf("from counts: %v %v", rc.Row(0), err)
	}
}

// Table: identical rhythms → D = 0; a worker whose completions all fall
// later than another's → D = 1; a known half-shift → D = 0.5; an empty
// worker → D = 1 and NaN p.
func TestKSPairwiseTable(t *testing.T) {
	g := Grid{T0: 0, W: 1, N: 4}
	for _, tc := range []struct {
		name   string
		counts [][]uint32
		d01    float64
	}{
		{"identical", [][]uint32{{1, 2, 3, 4}, {1, 2, 3, 4}}, 0},
		{"scaled counts same shape", [][]uint32{{1, 2, 3, 4}, {10, 20, 30, 40}}, 0},
		{"disjoint", [][]uint32{{5, 0, 0, 0}, {0, 0, 0, 5}}, 1},
		{"half shifted", [][]uint32{{1, 1, 0, 0}, {0, 1, 1, 0}}, 0.5},
		{"empty worker", [][]uint32{{1, 1, 1, 1}, {0, 0, 0, 0}}, 1},
	} {
		r, err := NewRhythmsFromCounts(g, tc.counts)
		if err != nil {
			t.Fatal(err)
		}
		m := KSPairwise(r, 0)
		if m.D[1] != tc.d01 || m.D[2] != tc.d01 || m.D[0] != 0 || m.D[3] != 0 {
			t.Errorf("%s: D = %v, want off-diagonal %v", tc.name, m.D, tc.d01)
		}
		if m.Score[0] != tc.d01 {
			t.Errorf("%s: score %v", tc.name, m.Score)
		}
	}
	r, _ := NewRhythmsFromCounts(g, [][]uint32{{1, 1, 1, 1}, {0, 0, 0, 0}})
	if p := KSPairwise(r, 1).PairP(0, 1); !math.IsNaN(p) {
		t.Errorf("empty worker p = %v, want NaN", p)
	}
}

// A worker with a stretched rhythm gets the top score, a tiny p, and the
// reference approximation names the same worker.
func TestKSStragglerRanksFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const span = 1_000_000
	times := ksWorkers(rng, 16, 2000, span, 11, 1.3)
	r, err := NewRhythms(Grid{T0: 0, W: span * 13 / 10 / 64, N: 65}, times)
	if err != nil {
		t.Fatal(err)
	}
	m := KSPairwise(r, 0)
	if m.Order[0] != 11 {
		t.Fatalf("top = %d (scores %v)", m.Order[0], m.Score)
	}
	if m.P[11] > 1e-6 {
		t.Errorf("straggler p = %v", m.P[11])
	}
	if p := m.P[m.Order[len(m.Order)-1]]; p < 0.05 {
		t.Errorf("healthy worker p = %v, want not significant", p)
	}
	ref := KSReference(r, 0)
	if ref.Order[0] != 11 {
		t.Errorf("reference top = %d", ref.Order[0])
	}
	ag := CompareRankings(m.Score, ref.D, 1)
	if !ag.Top1 || ag.Overlap != 1 {
		t.Errorf("agreement %+v", ag)
	}
}

// The tiled, parallel matrix equals the plain O(N²·n) loop bit for bit,
// for sizes that exercise partial tiles and the 4-row remainder.
func TestKSPairwiseMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, nw := range []int{1, 2, 3, 5, 31, 32, 33, 70} {
		for _, n := range []int{1, 7, 64} {
			counts := make([][]uint32, nw)
			for w := range counts {
				c := make([]uint32, n)
				for k := range c {
					c[k] = uint32(rng.IntN(5))
				}
				counts[w] = c
			}
			r, err := NewRhythmsFromCounts(Grid{W: 1, N: n}, counts)
			if err != nil {
				t.Fatal(err)
			}
			for _, procs := range []int{1, 3} {
				m := KSPairwise(r, procs)
				for a := range nw {
					s := 0.0
					for b := range nw {
						want := KSDistance(r.Row(a), r.Row(b))
						if got := m.D[a*nw+b]; got != want {
							t.Fatalf("nw=%d n=%d procs=%d D[%d,%d] = %v want %v", nw, n, procs, a, b, got, want)
						}
						s += want
					}
					if nw > 1 && math.Abs(m.Score[a]-s/float64(nw-1)) > 1e-12 {
						t.Fatalf("score[%d] = %v want %v", a, m.Score[a], s/float64(nw-1))
					}
				}
			}
		}
	}
}

// Properties of D: symmetry, range [0,1], zero diagonal, triangle
// inequality (D is the sup-norm distance of the ECDFs), and scores that
// permute with the workers.
func TestKSProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const nw, n = 24, 40
	counts := make([][]uint32, nw)
	for w := range counts {
		c := make([]uint32, n)
		for k := range c {
			c[k] = uint32(rng.IntN(1 + w%4*3))
		}
		counts[w] = c
	}
	g := Grid{W: 5, N: n}
	r, _ := NewRhythmsFromCounts(g, counts)
	m := KSPairwise(r, 0)
	const eps = 1e-12
	for a := range nw {
		for b := range nw {
			d := m.D[a*nw+b]
			if d != m.D[b*nw+a] || d < 0 || d > 1 || (a == b && d != 0) {
				t.Fatalf("D[%d,%d] = %v, D[%d,%d] = %v", a, b, d, b, a, m.D[b*nw+a])
			}
			for c := range nw {
				if d > m.D[a*nw+c]+m.D[c*nw+b]+eps {
					t.Fatalf("triangle: D(%d,%d)=%v > D(%d,%d)+D(%d,%d)", a, b, d, a, c, c, b)
				}
			}
		}
	}
	perm := rng.Perm(nw)
	pc := make([][]uint32, nw)
	for i, p := range perm {
		pc[i] = counts[p]
	}
	rp, _ := NewRhythmsFromCounts(g, pc)
	mp, rfp, rf := KSPairwise(rp, 2), KSReference(rp, 2), KSReference(r, 1)
	for i, p := range perm {
		if math.Abs(mp.Score[i]-m.Score[p]) > eps {
			t.Fatalf("score not permutation invariant: %v vs %v", mp.Score[i], m.Score[p])
		}
		if rfp.D[i] != rf.D[p] {
			t.Fatalf("D_ref not permutation invariant")
		}
	}
}

// The pointwise median reference is monotone, ends at 1, and a single
// outlier cannot move it far.
func TestKSReferenceMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, nw := range []int{1, 2, 5, 6, 101} {
		counts := make([][]uint32, nw)
		for w := range counts {
			c := make([]uint32, 50)
			for k := range c {
				c[k] = uint32(rng.IntN(10))
			}
			c[0]++ // no empty worker
			counts[w] = c
		}
		r, _ := NewRhythmsFromCounts(Grid{W: 1, N: 50}, counts)
		ref := KSReference(r, 0)
		if !slices.IsSorted(ref.Ref) || ref.Ref[49] != 1 || ref.Ref[0] < 0 {
			t.Fatalf("nw=%d ref not a CDF: %v", nw, ref.Ref)
		}
		for w := range nw {
			if ref.D[w] != KSDistance(r.Row(w), ref.Ref) {
				t.Fatal("D_ref mismatch")
			}
		}
	}
	r, _ := NewRhythmsFromCounts(Grid{W: 1, N: 1}, nil)
	if ref := KSReference(r, 0); len(ref.Order) != 0 {
		t.Errorf("empty: %+v", ref)
	}
}

// Binned D versus the exact two-sample statistic over the raw in-grid
// times: binned D evaluates the exact ECDFs at the window ends only, so
// D_binned ≤ D_exact ≤ D_binned + max window mass; on a grid with one
// distinct time per window the two are equal.
func TestKSBinnedVersusExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 300 {
		nw := 2 + trial%4
		times := make([][]int64, nw)
		for w := range times {
			ts := make([]int64, 1+rng.IntN(60))
			shift := rng.Int64N(200)
			for i := range ts {
				ts[i] = shift + rng.Int64N(800)
			}
			times[w] = ts
		}
		W := int64(1 + trial%37)
		g := Grid{T0: 0, W: W, N: int((1000 + W - 1) / W)}
		r, err := NewRhythms(g, times)
		if err != nil {
			t.Fatal(err)
		}
		m := KSPairwise(r, 0)
		for a := range nw {
			for b := a + 1; b < nw; b++ {
				ex := KSExact(times[a], times[b])
				bd := m.D[a*nw+b]
				bound := max(r.MaxWindowMass(a), r.MaxWindowMass(b))
				if bd > ex+1e-12 || ex > bd+bound+1e-12 {
					t.Fatalf("trial %d W=%d: binned %v exact %v bound %v", trial, W, bd, ex, bound)
				}
				if W == 1 && math.Abs(bd-ex) > 1e-12 {
					t.Fatalf("W=1: binned %v != exact %v", bd, ex)
				}
			}
		}
	}
}

func TestKSExactTable(t *testing.T) {
	for _, tc := range []struct {
		a, b []int64
		d    float64
	}{
		{[]int64{1, 2, 3}, []int64{3, 2, 1}, 0},
		{[]int64{1, 2}, []int64{3, 4}, 1},
		{[]int64{1, 2, 3, 4}, []int64{3, 4, 5, 6}, 0.5},
		{[]int64{1, 1, 2}, []int64{1, 2, 2}, 1.0 / 3},
		{nil, []int64{1}, 0},
	} {
		if got := KSExact(tc.a, tc.b); math.Abs(got-tc.d) > 1e-15 {
			t.Errorf("KSExact(%v,%v) = %v want %v", tc.a, tc.b, got, tc.d)
		}
	}
}

// Known values of the Kolmogorov distribution's tail (Smirnov's table).
func TestKolmogorovSF(t *testing.T) {
	for _, tc := range []struct{ x, p, tol float64 }{
		{0, 1, 0},
		{0.5, 0.9639, 1e-4},
		{0.9, 0.3927, 1e-4},
		{1.0, 0.2700, 1e-4},
		{1.2238, 0.1000, 1e-4},
		{1.36, 0.0494, 1e-4},
		{1.6276, 0.0100, 1e-4},
		{1.9495, 0.0010, 1e-5},
		{3, 3.05e-8, 1e-9},
	} {
		if got := KolmogorovSF(tc.x); math.Abs(got-tc.p) > tc.tol {
			t.Errorf("KolmogorovSF(%v) = %v want %v", tc.x, got, tc.p)
		}
	}
	// Both series agree where they meet.
	if lo, hi := KolmogorovSF(math.Nextafter(1, 0)), KolmogorovSF(1); math.Abs(lo-hi) > 1e-12 {
		t.Errorf("series disagree at 1: %v vs %v", lo, hi)
	}
	prev := 1.0
	for x := 0.05; x < 4; x += 0.05 {
		p := KolmogorovSF(x)
		if p > prev+1e-15 || p < 0 {
			t.Fatalf("not a decreasing tail at %v: %v after %v", x, p, prev)
		}
		prev = p
	}
	// Large samples: λ ≈ √nₑ·D.
	if p := KSPValue(1.36/math.Sqrt(5000), 10000, 10000); math.Abs(p-0.05) > 2e-3 {
		t.Errorf("KSPValue at the 5%% critical value = %v", p)
	}
	if p := KSPValue(0.1, 0, 5); !math.IsNaN(p) {
		t.Errorf("empty sample p = %v", p)
	}
}

func TestCompareRankings(t *testing.T) {
	a := []float64{0.1, 0.9, 0.3, 0.5}
	ag := CompareRankings(a, a, 2)
	if ag.Overlap != 2 || !ag.Top1 || ag.Spearman != 1 || ag.Kendall != 1 {
		t.Errorf("self: %+v", ag)
	}
	rev := []float64{0.9, 0.1, 0.7, 0.5}
	ag = CompareRankings(a, rev, 4)
	if ag.Overlap != 4 || ag.Top1 || math.Abs(ag.Spearman+1) > 1e-12 || math.Abs(ag.Kendall+1) > 1e-12 {
		t.Errorf("reversed: %+v", ag)
	}
	// Ties: x has one tie pair; τ-b and Spearman stay in [−1, 1].
	ag = CompareRankings([]float64{1, 1, 2, 3}, []float64{1, 2, 3, 4}, 10)
	if ag.K != 4 || ag.Kendall <= 0.8 || ag.Kendall > 1 || ag.Spearman <= 0.9 || ag.Spearman > 1 {
		t.Errorf("ties: %+v", ag)
	}
	if ag := CompareRankings([]float64{1, 1}, []float64{1, 2}, 1); !math.IsNaN(ag.Spearman) || !math.IsNaN(ag.Kendall) {
		t.Errorf("constant: %+v", ag)
	}
}

func ksBenchRhythms(b *testing.B, nw, n int) *Rhythms {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	counts := make([][]uint32, nw)
	for w := range counts {
		c := make([]uint32, n)
		for k := range c {
			c[k] = uint32(50 + rng.IntN(20))
		}
		counts[w] = c
	}
	r, err := NewRhythmsFromCounts(Grid{W: 1_000_000, N: n}, counts)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// Issue 9 target: pairwise K-S over 2,048 workers × 512 windows < 2 s on
// the 2-core CI machine.
func BenchmarkKSPairwise2048x512(b *testing.B) {
	r := ksBenchRhythms(b, 2048, 512)
	b.ReportAllocs()
	for b.Loop() {
		KSPairwise(r, 0)
	}
}

func BenchmarkKSReference2048x512(b *testing.B) {
	r := ksBenchRhythms(b, 2048, 512)
	b.ReportAllocs()
	for b.Loop() {
		KSReference(r, 0)
	}
}

func TestPeerMedianTotal(t *testing.T) {
	totals := []int{5, 1, 9, 3, 7, 3}
	sorted := slices.Sorted(slices.Values(totals))
	for a, v := range totals {
		others := slices.Delete(slices.Clone(totals), a, a+1)
		slices.Sort(others)
		if got, want := peerMedianTotal(sorted, v), others[len(others)/2]; got != want {
			t.Errorf("worker %d: %d want %d", a, got, want)
		}
	}
}

func TestKSNoWorkers(t *testing.T) {
	r, err := NewRhythms(Grid{W: 1, N: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := KSPairwise(r, 0); m.N != 0 || len(m.D) != 0 || len(m.Order) != 0 {
		t.Errorf("%+v", m)
	}
	if _, err := NewRhythms(Grid{W: 0, N: 3}, nil); err == nil {
		t.Error("bad grid accepted")
	}
}
