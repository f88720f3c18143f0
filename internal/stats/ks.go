package stats

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// KAIR §III-B Stage 1: D(A,B) = max_t |F_A(t) − F_B(t)| between the
// workers' rhythm ECDFs, S_A = mean over B ≠ A of D(A,B), the most
// divergent worker is the straggler candidate. Exact pairwise is O(N²·n);
// KSReference is the O(N·n + N log N) approximation against a pointwise
// median ECDF.

// KolmogorovSF is P(K > x) for the Kolmogorov distribution, the limit law
// of √n·D. Two series: the alternating tail series converges fast for
// large x, the Jacobi-theta form for small x.
func KolmogorovSF(x float64) float64 {
	switch {
	case math.IsNaN(x):
		return math.NaN()
	case x <= 0:
		return 1
	case x < 1:
		// P(K ≤ x) = √(2π)/x · Σ_{j≥1} exp(−(2j−1)²π²/(8x²))
		c := -math.Pi * math.Pi / (8 * x * x)
		s := 0.0
		for j := 1; j <= 20; j++ {
			t := math.Exp(float64((2*j-1)*(2*j-1)) * c)
			s += t
			if t < 1e-17*s {
				break
			}
		}
		return 1 - math.Sqrt(2*math.Pi)/x*s
	}
	// P(K > x) = 2 Σ_{j≥1} (−1)^{j−1} exp(−2j²x²)
	s, sign := 0.0, 1.0
	for j := 1; j <= 100; j++ {
		t := math.Exp(-2 * float64(j*j) * x * x)
		s += sign * t
		if t < 1e-17 {
			break
		}
		sign = -sign
	}
	return min(max(2*s, 0), 1)
}

// KSPValue is the asymptotic two-sample K-S p-value of statistic d for
// samples of nA and nB operator completions: λ = (√nₑ + 0.12 + 0.11/√nₑ)·d
// with nₑ = nA·nB/(nA+nB) (Stephens' finite-sample correction), p =
// P(K > λ). NaN when a sample is empty. Operator completions of one
// worker are not independent draws, so read p as a scale of evidence,
// not an exact error rate.
func KSPValue(d float64, nA, nB int) float64 {
	if nA <= 0 || nB <= 0 {
		return math.NaN()
	}
	ne := float64(nA) * float64(nB) / float64(nA+nB)
	return ksP(d, ne)
}

func ksP(d, ne float64) float64 {
	if ne <= 0 || math.IsNaN(ne) {
		return math.NaN()
	}
	s := math.Sqrt(ne)
	return KolmogorovSF((s + 0.12 + 0.11/s) * d)
}

// KSDistance is max_k |a[k] − b[k]| over two ECDFs on the same grid: the
// plain O(n) loop the blocked matrix is checked against.
func KSDistance(a, b []float64) float64 {
	b = b[:len(a)]
	m := 0.0
	for k := range a {
		if d := math.Abs(a[k] - b[k]); d > m {
			m = d
		}
	}
	return m
}

// KSExact is the two-sample K-S statistic sup_t |F_a(t) − F_b(t)| of raw
// samples (completion times), by a merge walk over the sorted samples.
// It is the slow path the binned D is checked against. 0 if either is
// empty.
func KSExact(a, b []int64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	na, nb := float64(len(a)), float64(len(b))
	i, j, d := 0, 0, 0.0
	for i < len(a) && j < len(b) {
		t := min(a[i], b[j])
		// Step both ECDFs past every sample equal to t before comparing:
		// the ECDFs are right-continuous.
		for i < len(a) && a[i] == t {
			i++
		}
		for j < len(b) && b[j] == t {
			j++
		}
		d = max(d, math.Abs(float64(i)/na-float64(j)/nb))
	}
	return d
}

// KSMatrix is the exact pairwise result of Stage 1.
type KSMatrix struct {
	N     int
	D     []float64 // N×N row-major, symmetric, zero diagonal
	Score []float64 // S_A = mean_{B≠A} D(A,B) (0 when N = 1)
	// P is a per-worker p-value: KSPValue(Score[A], Total[A], median of the
	// peers' totals). S_A is a mean of K-S statistics, not one, so this is
	// a heuristic scale (conservative next to testing max_B D(A,B)).
	P     []float64
	Order []int // workers by descending Score (ties: lower index first)
	total []int
}

// PairP is the p-value of D(a,b) (KSPValue with the two operator counts).
func (m *KSMatrix) PairP(a, b int) float64 {
	return KSPValue(m.D[a*m.N+b], m.total[a], m.total[b])
}

// ksTile is the rows of one tile edge. With n = 512 windows a tile holds
// 2·32 ECDF rows of 4 KiB: 256 KiB, inside L2, so each row loaded into a
// tile is reused 32 times.
const ksTile = 32

// KSPairwise computes D for every pair, the scores, p-values and ranking.
// Upper triangle only, tiled, tiles handed to `procs` goroutines through
// an atomic counter (uneven triangle tiles balance themselves); procs ≤ 0
// means GOMAXPROCS. No allocation per pair.
func KSPairwise(r *Rhythms, procs int) *KSMatrix {
	nw, n := r.Workers, r.Grid.N
	m := &KSMatrix{N: nw, D: make([]float64, nw*nw), total: r.Total}
	nb := (nw + ksTile - 1) / ksTile
	tiles := nb * (nb + 1) / 2
	if procs <= 0 {
		procs = runtime.GOMAXPROCS(0)
	}
	procs = max(1, min(procs, tiles))
	// ti lists the upper-triangle tiles (bi, bj), bj ≥ bi, row by row.
	ti := make([][2]int32, 0, tiles)
	for bi := range nb {
		for bj := bi; bj < nb; bj++ {
			ti = append(ti, [2]int32{int32(bi), int32(bj)})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	cdf, D := r.CDF, m.D
	for range procs {
		wg.Go(func() {
			for {
				t := int(next.Add(1) - 1)
				if t >= tiles {
					return
				}
				bi, bj := int(ti[t][0]), int(ti[t][1])
				i0, i1 := bi*ksTile, min((bi+1)*ksTile, nw)
				j0, j1 := bj*ksTile, min((bj+1)*ksTile, nw)
				for i := i0; i < i1; i++ {
					a := cdf[i*n : (i+1)*n]
					j := max(j0, i+1)
					for ; j+4 <= j1; j += 4 {
						d0, d1, d2, d3 := ksRow4(a, cdf[j*n:(j+1)*n], cdf[(j+1)*n:(j+2)*n],
							cdf[(j+2)*n:(j+3)*n], cdf[(j+3)*n:(j+4)*n])
						D[i*nw+j], D[i*nw+j+1], D[i*nw+j+2], D[i*nw+j+3] = d0, d1, d2, d3
						D[j*nw+i], D[(j+1)*nw+i], D[(j+2)*nw+i], D[(j+3)*nw+i] = d0, d1, d2, d3
					}
					for ; j < j1; j++ {
						d := KSDistance(a, cdf[j*n:(j+1)*n])
						D[i*nw+j], D[j*nw+i] = d, d
					}
				}
			}
		})
	}
	wg.Wait()

	m.Score = make([]float64, nw)
	if nw > 1 {
		for a := range nw {
			s := 0.0
			for _, d := range D[a*nw : (a+1)*nw] {
				s += d
			}
			m.Score[a] = s / float64(nw-1)
		}
	}
	m.P = make([]float64, nw)
	sorted := slices.Sorted(slices.Values(r.Total))
	for a := range nw {
		m.P[a] = KSPValue(m.Score[a], r.Total[a], peerMedianTotal(sorted, r.Total[a]))
	}
	m.Order = ksOrder(m.Score)
	return m
}

// ksRow4 is max_k |a[k] − b_i[k]| for four rows at once: a[k] is loaded
// once for four comparisons and the four max chains are independent.
// The maxima run on the IEEE-754 bit patterns: for non-negative floats
// they order like the values, and an integer max is one CMP+CMOV where
// the float max builtin spends ~6 instructions on NaN and ±0 rules.
func ksRow4(a, b0, b1, b2, b3 []float64) (d0, d1, d2, d3 float64) {
	const abs = 1<<63 - 1
	n := len(a)
	b0, b1, b2, b3 = b0[:n], b1[:n], b2[:n], b3[:n]
	var m0, m1, m2, m3 uint64
	for k := 0; k < n; k++ {
		x := a[k]
		m0 = max(m0, math.Float64bits(x-b0[k])&abs)
		m1 = max(m1, math.Float64bits(x-b1[k])&abs)
		m2 = max(m2, math.Float64bits(x-b2[k])&abs)
		m3 = max(m3, math.Float64bits(x-b3[k])&abs)
	}
	return math.Float64frombits(m0), math.Float64frombits(m1), math.Float64frombits(m2), math.Float64frombits(m3)
}

// peerMedianTotal is the median operator count of the workers other than
// a (the upper middle one for an even count), from the sorted totals:
// the n of a "typical peer" for a score's p-value.
func peerMedianTotal(sorted []int, a int) int {
	if len(sorted) < 2 {
		return 0
	}
	// Removing one copy of a's total shifts the middle index m of the
	// remaining n−1 values by one when that copy sits at or below m.
	m := (len(sorted) - 1) / 2
	if i, _ := slices.BinarySearch(sorted, a); i <= m {
		return sorted[m+1]
	}
	return sorted[m]
}

// ksOrder sorts worker indices by descending score, NaN last, ties by
// index.
func ksOrder(score []float64) []int {
	o := make([]int, len(score))
	for i := range o {
		o[i] = i
	}
	slices.SortStableFunc(o, func(a, b int) int {
		x, y := score[a], score[b]
		switch xn, yn := math.IsNaN(x), math.IsNaN(y); {
		case xn && yn:
			return 0
		case xn:
			return 1
		case yn:
			return -1
		}
		return cmp.Compare(y, x)
	})
	return o
}

// KSRef is the Stage 1 approximation: each worker against one robust
// reference ECDF.
type KSRef struct {
	// Ref is the pointwise median over workers of the ECDFs. A pointwise
	// order statistic of non-decreasing functions is non-decreasing (and
	// so is the mean of the two middle ones), so Ref is itself a CDF-like
	// step function on the grid, and one straggler cannot move it.
	Ref []float64
	D   []float64 // D_ref(A) = max_k |F_A(t_k) − Ref(t_k)|
	// P treats Ref as the known population CDF: one-sample K-S with
	// nₑ = Total[A]. Ref is itself estimated, so this overstates the
	// evidence a little; a heuristic scale, like KSMatrix.P.
	P     []float64
	Order []int // workers by descending D (ties: lower index first)
}

// KSReference computes Ref (O(N·n) with radix median selection per
// window), D_ref for every worker (O(N·n)) and the ranking (O(N log N)),
// over procs goroutines (≤ 0: GOMAXPROCS).
func KSReference(r *Rhythms, procs int) *KSRef {
	nw, n := r.Workers, r.Grid.N
	if procs <= 0 {
		procs = runtime.GOMAXPROCS(0)
	}
	procs = max(1, min(procs, n))
	res := &KSRef{Ref: make([]float64, n), D: make([]float64, nw), P: make([]float64, nw)}
	if nw == 0 {
		res.Order = []int{}
		return res
	}
	var wg sync.WaitGroup
	// Columns of the ECDF matrix in contiguous chunks, one key buffer per
	// goroutine.
	chunk := (n + procs - 1) / procs
	for p := range procs {
		k0, k1 := p*chunk, min((p+1)*chunk, n)
		if k0 >= k1 {
			break
		}
		wg.Go(func() {
			keys := make([]uint64, nw)
			for k := k0; k < k1; k++ {
				for w := range nw {
					keys[w] = Key(r.CDF[w*n+k])
				}
				res.Ref[k] = MedianKeys(keys)
			}
		})
	}
	wg.Wait()
	chunk = (nw + procs - 1) / procs
	for p := range procs {
		w0, w1 := p*chunk, min((p+1)*chunk, nw)
		if w0 >= w1 {
			break
		}
		wg.Go(func() {
			for w := w0; w < w1; w++ {
				d := KSDistance(r.CDF[w*n:(w+1)*n], res.Ref)
				res.D[w] = d
				if r.Total[w] > 0 {
					res.P[w] = ksP(d, float64(r.Total[w]))
				} else {
					res.P[w] = math.NaN()
				}
			}
		})
	}
	wg.Wait()
	res.Order = ksOrder(res.D)
	return res
}

// RankAgreement says where two rankings of the same workers agree (e.g.
// KSMatrix.Score against KSRef.D).
type RankAgreement struct {
	K        int     // top-k compared
	Overlap  int     // |top-k(a) ∩ top-k(b)|
	Top1     bool    // both name the same most anomalous worker
	Spearman float64 // Pearson correlation of average ranks (ties averaged)
	Kendall  float64 // Kendall τ-b (tie-corrected), O(N²) pair count
}

// CompareRankings compares two score vectors (higher = more anomalous)
// over the same workers; k is clamped to [0, N]. NaN scores rank last.
// Correlations are NaN when N < 2 or a vector is constant.
func CompareRankings(a, b []float64, k int) RankAgreement {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	k = min(max(k, 0), n)
	ra := RankAgreement{K: k}
	oa, ob := ksOrder(a), ksOrder(b)
	if n > 0 {
		ra.Top1 = oa[0] == ob[0]
	}
	in := make([]bool, n)
	for _, w := range oa[:k] {
		in[w] = true
	}
	for _, w := range ob[:k] {
		if in[w] {
			ra.Overlap++
		}
	}
	ra.Spearman = pearson(avgRanks(a), avgRanks(b))
	ra.Kendall = kendallTauB(a, b)
	return ra
}

// avgRanks ranks xs ascending (1-based), ties get their average rank, NaN
// counts as −Inf (least anomalous, as in ksOrder).
func avgRanks(xs []float64) []float64 {
	key := func(i int) float64 {
		if math.IsNaN(xs[i]) {
			return math.Inf(-1)
		}
		return xs[i]
	}
	o := make([]int, len(xs))
	for i := range o {
		o[i] = i
	}
	slices.SortFunc(o, func(x, y int) int { return cmp.Compare(key(x), key(y)) })
	rk := make([]float64, len(xs))
	for i := 0; i < len(o); {
		j := i + 1
		for j < len(o) && key(o[j]) == key(o[i]) {
			j++
		}
		avg := float64(i+j+1) / 2 // mean of ranks i+1..j
		for _, w := range o[i:j] {
			rk[w] = avg
		}
		i = j
	}
	return rk
}

func pearson(x, y []float64) float64 {
	n := float64(len(x))
	if len(x) < 2 {
		return math.NaN()
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

// kendallTauB counts concordant/discordant pairs directly: O(N²), a few
// ms at N = 2,048, which is all Stage 1 needs.
func kendallTauB(x, y []float64) float64 {
	n := len(x)
	if n < 2 {
		return math.NaN()
	}
	nan := func(v float64) float64 {
		if math.IsNaN(v) {
			return math.Inf(-1)
		}
		return v
	}
	var conc, disc, tx, ty float64
	for i := range n {
		xi, yi := nan(x[i]), nan(y[i])
		for j := i + 1; j < n; j++ {
			sx := cmp.Compare(xi, nan(x[j]))
			sy := cmp.Compare(yi, nan(y[j]))
			switch {
			case sx == 0 && sy == 0:
			case sx == 0:
				tx++
			case sy == 0:
				ty++
			case sx == sy:
				conc++
			default:
				disc++
			}
		}
	}
	den := math.Sqrt((conc + disc + tx) * (conc + disc + ty))
	if den == 0 {
		return math.NaN()
	}
	return (conc - disc) / den
}
