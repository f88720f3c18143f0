package frontier

import "math"

// rankMedianScratch bounds the blocked gather of the per-rank median pass.
const rankMedianScratch = 1 << 19 // float64s (4 MiB)

// gainAcc accumulates the clipped direct-exposure gain G_s (§4 eq.4) for
// both baselines, per schema stage.
type gainAcc struct {
	rankMed []float64 // R*S: per-rank window median of each stage
	cohortB []float64 // S: per-step cohort median (scratch)
	cols    []uint64  // S*R gathered keys for the cohort median
	red1    []float64 // G scratch: reduction vs rank median
	red2    []float64 // G scratch: reduction vs cohort median
	f1, f2  []float64 // G scratch: recomputed frontier totals
	rank    []float64 // G: Σ_t gain vs rank_median
	cohort  []float64 // G: Σ_t gain vs cohort_median
}

func (g *gainAcc) init(a *analyzer) {
	G := a.G
	g.rankMed = make([]float64, a.R*a.S)
	g.cohortB = make([]float64, a.S)
	g.cols = make([]uint64, a.S*a.R)
	g.red1, g.red2 = make([]float64, G), make([]float64, G)
	g.f1, g.f2 = make([]float64, G), make([]float64, G)
	g.rank, g.cohort = make([]float64, G), make([]float64, G)
}

// rankMedians computes the per-rank window median of every stage over the
// rank's present steps. The step-major window is read in blocks of ranks so
// each step contributes one contiguous run of B*S values (cache- and
// prefetch-friendly) scattered into per-column scratch, then each column is
// reduced with an O(n) selection.
func (g *gainAcc) rankMedians(a *analyzer) {
	T, R, S := a.T, a.R, a.S
	B := max(1, min(R, rankMedianScratch/(S*T)))
	buf := make([]uint64, B*S*T)
	cnt := make([]int, B)
	D := a.w.D
	for r0 := 0; r0 < R; r0 += B {
		nb := min(B, R-r0)
		clear(cnt)
		for t := 0; t < T; t++ {
			src := D[(t*R+r0)*S : (t*R+r0+nb)*S]
			for j := 0; j < nb; j++ {
				if !a.present(t, r0+j) {
					continue
				}
				c := cnt[j]
				cnt[j]++
				for s, d := range src[j*S : j*S+S] {
					buf[(j*S+s)*T+c] = key(d)
				}
			}
		}
		for j := 0; j < nb; j++ {
			for s := 0; s < S; s++ {
				col := buf[(j*S+s)*T : (j*S+s)*T+cnt[j]]
				g.rankMed[(r0+j)*S+s] = medianKeys(col)
			}
		}
	}
}

// cohortMedians takes the per-step median of each stage across the present
// ranks from the keys gathered by stepKernel (the cohort_median baseline).
func (a *analyzer) cohortMedians() {
	g := &a.gain
	for s := 0; s < a.S; s++ {
		g.cohortB[s] = medianKeys(g.cols[s*a.R : s*a.R+a.nPresent])
	}
}

// gainGrouped recomputes the frontier totals with a whole accumulation
// group replaced: every microstep of schema stage k is clipped at once.
func (a *analyzer) gainGrouped(t int) {
	g := &a.gain
	R, S, G := a.R, a.S, a.G
	D := a.step(t)
	f1, f2, cb := g.f1, g.f2, g.cohortB
	for r := 0; r < R; r++ {
		tot := a.totals[r]
		if tot == math.Inf(-1) {
			continue
		}
		clear(g.red1)
		clear(g.red2)
		row, rm := D[r*S:r*S+S], g.rankMed[r*S:r*S+S]
		for s, d := range row {
			k := a.group[s]
			g.red1[k] += max(d-rm[s], 0)
			g.red2[k] += max(d-cb[s], 0)
		}
		for k := 0; k < G; k++ {
			f1[k] = max(f1[k], tot-g.red1[k])
			f2[k] = max(f2[k], tot-g.red2[k])
		}
	}
}

// gainFold adds step t's gains: G_s += F[t,S] − F'_s[t,S] (§4 eq.4); only
// the final frontier changes because the clipped stage only lowers totals.
func (a *analyzer) gainFold() {
	g := &a.gain
	fS := a.F[a.S-1]
	for k := 0; k < a.G; k++ {
		g.rank[k] += fS - g.f1[k]
		g.cohort[k] += fS - g.f2[k]
	}
}
