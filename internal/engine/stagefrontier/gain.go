package stagefrontier

import (
	"math"

	"github.com/laggard-dev/laggard/internal/stats"
)

// Sampling caps for the §4 eq.4 medians. The baselines are only
// references for a conservative sensitivity score, so beyond these caps
// the median is taken over a deterministic jittered-stride subsample: the
// sample median's quantile then has standard error 0.5/√n (≈1.6% at
// 1,024 ranks, ≈3.1% at 257 steps). At or below the caps every value is
// used and the medians are exact.
const (
	cohortMedianCap = 1024 // ranks per step for the cohort median
	rankMedianCap   = 257  // present steps per rank for the rank median
)

// rankMedianScratch bounds the key scratch of the rank-median pass.
const rankMedianScratch = 1 << 18 // uint64s (2 MiB)

// samplePicks marks which of n ordinals a capped median uses: nil (all)
// when n <= k, else one per block of ceil(n/k), at a hashed offset within
// the block so periodic structure (every 8th rank, every 4th step) cannot
// alias with the stride. Block 0 always picks ordinal 0, so any non-empty
// set yields a sample.
func samplePicks(n, k int) []bool {
	if n <= k {
		return nil
	}
	stride := (n + k - 1) / k
	pick := make([]bool, n)
	for b := 0; b*stride < n; b++ {
		off := int((uint64(b) * 0x9E3779B97F4A7C15 >> 32) % uint64(stride))
		if i := b*stride + off; i < n {
			pick[i] = true
		}
	}
	return pick
}

// gainAcc accumulates the clipped direct-exposure gain G_s (§4 eq.4) for
// both baselines, per schema stage.
type gainAcc struct {
	rankMed []float64 // R*S: per-rank window median of each stage
	cohortB []float64 // T*S: per-step cohort median of each stage
	// f1, f2 [t*G+k] are the step's frontier totals recomputed with group
	// k clipped at the rank / cohort median; lb[t] is their minimum.
	f1, f2     []float64
	lb         []float64
	red1, red2 []float64 // G scratch for accumulation groups
	rank       []float64 // G: Σ_t gain vs rank_median
	cohort     []float64 // G: Σ_t gain vs cohort_median
}

func (g *gainAcc) init(a *analyzer) {
	T, G := a.T, a.G
	g.rankMed = make([]float64, a.R*a.S)
	g.cohortB = make([]float64, T*a.S)
	g.f1, g.f2, g.lb = make([]float64, T*G), make([]float64, T*G), make([]float64, T)
	for i := range g.f1 {
		g.f1[i], g.f2[i] = math.Inf(-1), math.Inf(-1)
	}
	for i := range g.lb {
		g.lb[i] = math.Inf(-1)
	}
	g.red1, g.red2 = make([]float64, G), make([]float64, G)
	g.rank, g.cohort = make([]float64, G), make([]float64, G)
}

// cohortMedians takes the per-step median of each stage across the
// present ranks (sampled past cohortMedianCap): the cohort_median
// baseline. Only the sampled rows are read, from a list built first so
// the gather has no branches and its cache misses overlap. It runs after
// rankMedians.
func (a *analyzer) cohortMedians() {
	T, R, S := a.T, a.R, a.S
	pick := samplePicks(R, cohortMedianCap)
	capC := min(R, cohortMedianCap)
	keys := make([]uint64, S*capC)
	rows := make([]int32, 0, capC)
	for t := 0; t < T; t++ {
		if t == 0 || a.pres != nil {
			rows = rows[:0]
			n := 0
			for r := 0; r < R; r++ {
				if a.pres != nil && !a.pres[t*R+r] {
					continue
				}
				if pick == nil || pick[n] {
					rows = append(rows, int32(r))
				}
				n++
			}
		}
		if len(rows) == 0 {
			continue
		}
		D := a.step(t)
		for m, r := range rows {
			for s, d := range D[int(r)*S : int(r)*S+S] {
				keys[s*capC+m] = stats.Key(d)
			}
		}
		for s := 0; s < S; s++ {
			a.gain.cohortB[t*S+s] = stats.MedianKeys(keys[s*capC : s*capC+len(rows)])
		}
		// Seed the step's recomputed totals with the sampled rows, still in
		// cache, so the sweep's bound starts high and it revisits few rows.
		for _, r := range rows {
			row := D[int(r)*S : int(r)*S+S]
			p := 0.0
			for _, d := range row {
				p += d
			}
			if p > a.gain.lb[t] {
				a.gainRank(t, int(r), row, p)
			}
		}
	}
}

// rankMedians computes the per-rank window median of every stage over the
// rank's present steps (sampled past rankMedianCap): the rank_median
// baseline. Blocks of ranks read each step as one contiguous run into
// per-column scratch; only sampled steps are read when all are present.
func (a *analyzer) rankMedians() {
	T, R, S := a.T, a.R, a.S
	pick := samplePicks(T, rankMedianCap)
	capT := min(T, rankMedianCap)
	B := max(1, min(R, rankMedianScratch/(S*capT)))
	buf := make([]uint64, B*S*capT)
	cnt, taken := make([]int, B), make([]int, B)
	D := a.w.D
	for r0 := 0; r0 < R; r0 += B {
		nb := min(B, R-r0)
		clear(cnt)
		clear(taken)
		for t := 0; t < T; t++ {
			if a.pres == nil && pick != nil && !pick[t] {
				continue
			}
			src := D[(t*R+r0)*S : (t*R+r0+nb)*S]
			for j := 0; j < nb; j++ {
				if a.pres != nil {
					if !a.pres[t*R+r0+j] {
						continue
					}
					k := cnt[j]
					cnt[j]++
					if pick != nil && !pick[k] {
						continue
					}
				}
				col := buf[j*S*capT+taken[j]:]
				taken[j]++
				for s, d := range src[j*S : j*S+S] {
					col[s*capT] = stats.Key(d)
				}
			}
		}
		for j := 0; j < nb; j++ {
			for s := 0; s < S; s++ {
				col := buf[(j*S+s)*capT : (j*S+s)*capT+taken[j]]
				a.gain.rankMed[(r0+j)*S+s] = stats.MedianKeys(col)
			}
		}
	}
}

// gainRank folds rank r's row of step t, whose total is tot, into the
// step's recomputed totals (folding a row twice is harmless). Callers skip
// it unless tot exceeds lb[t]: clipping only lowers a total, so a rank at or below every
// recomputed total found so far cannot raise any of them, and skipping it
// leaves the maxima exact.
func (a *analyzer) gainRank(t, r int, row []float64, tot float64) {
	g := &a.gain
	S, G := a.S, a.G
	f1, f2 := g.f1[t*G:t*G+G], g.f2[t*G:t*G+G]
	rm, cb := g.rankMed[r*S:r*S+S], g.cohortB[t*S:t*S+S]
	if S == G { // without accumulation groups each stage is its own group
		rm, cb, f1, f2 = rm[:len(row)], cb[:len(row)], f1[:len(row)], f2[:len(row)]
		up := false
		for s, d := range row {
			// Replacing stage s by min(b, d) lowers only the total.
			if v := tot - max(d-rm[s], 0); v > f1[s] {
				f1[s], up = v, true
			}
			if v := tot - max(d-cb[s], 0); v > f2[s] {
				f2[s], up = v, true
			}
		}
		if !up {
			return
		}
	} else { // a whole group is clipped at once
		clear(g.red1)
		clear(g.red2)
		for s, d := range row {
			k := a.group[s]
			g.red1[k] += max(d-rm[s], 0)
			g.red2[k] += max(d-cb[s], 0)
		}
		for k := range f1 {
			f1[k] = max(f1[k], tot-g.red1[k])
			f2[k] = max(f2[k], tot-g.red2[k])
		}
	}
	lb := math.Inf(1)
	for k, v := range f1 {
		lb = min(lb, v, f2[k])
	}
	g.lb[t] = lb
}

// gainFold adds step t's gains: G_s += F[t,S] − F'_s[t,S] (§4 eq.4); only
// the final frontier changes because the clipped stage only lowers totals.
func (a *analyzer) gainFold(t int) {
	g := &a.gain
	fS := a.F[a.S-1]
	for k := 0; k < a.G; k++ {
		g.rank[k] += fS - g.f1[t*a.G+k]
		g.cohort[k] += fS - g.f2[t*a.G+k]
	}
}
