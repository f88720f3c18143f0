package frontier

import "math"

// tieRel is the relative tolerance of the latest-rank tie set.
const tieRel = 1e-9

// accounting holds the window sums of frontier accounting and slack.
type accounting struct {
	adv     []float64 // S: Σ_t a[t,s]
	fsum    []float64 // S: Σ_t F[t,s]
	exposed float64   // Σ_t F[t,S]

	// Per rank×stage window sums (row-major r*S+s).
	sumP      []float64 // Σ_t P[t,r,s] over present steps
	missF     []float64 // Σ_t F[t,s] over the rank's missing steps; nil if none
	leadCount []int32   // steps where r is in the tie set at boundary s
	leadAdv   []int32   // ... and that boundary advances
	nSteps    []int32   // R: present steps
	rankTotal []float64 // R: Σ_t P[t,r,S]

	// confLeader[t*S+s] is the confident unique leader at boundary s of
	// step t, or -1 (App. C leader-switch tolerance). Switches are counted
	// once the routed stage is known (leaderStats).
	confLeader          []int32
	tieN                []int32 // S: scratch tie-set sizes for the current step
	tieFirst            []int32 // S: scratch first rank in each tie set
	confident, switches int
}

func (c *accounting) init(a *analyzer) {
	R, S := a.R, a.S
	c.adv, c.fsum = make([]float64, S), make([]float64, S)
	c.sumP = make([]float64, R*S)
	c.leadCount, c.leadAdv = make([]int32, R*S), make([]int32, R*S)
	c.nSteps, c.rankTotal = make([]int32, R), make([]float64, R)
	c.confLeader = make([]int32, len(a.w.Steps)*S)
	c.tieN, c.tieFirst = make([]int32, S), make([]int32, S)
}

// stepKernel processes step t in two fused sweeps over its cache-resident
// R×S block (16k ranks × 1k steps must fit a one-second budget):
//
//   - sweep 1: prefixes P[t,r,s] = Σ_{j≤s} d, the frontier F[t,s] = max_r P
//     and runner-up (StageFrontier §3 eq.1), the §6.2 per-stage column
//     statistics, and the column gather for the cohort median (§4);
//   - sweep 2: the latest-rank tie set, prefix sums for the slack identity
//     (§3 eq.3) and the clipped direct-exposure gains (§4 eq.4).
func (a *analyzer) stepKernel(t int) {
	R, S := a.R, a.S
	D := a.step(t)
	F, sec := a.F, a.second
	b := &a.base
	mx, mn, sm := b.colMax, b.colMin, b.colSum
	for s := range F {
		F[s], sec[s] = math.Inf(-1), math.Inf(-1)
		mx[s], mn[s], sm[s] = math.Inf(-1), math.Inf(1), 0
	}
	cols := a.gain.cols
	a.absent = a.absent[:0]
	n, slow, slowTot := 0, -1, math.Inf(-1)
	for r := 0; r < R; r++ {
		if !a.present(t, r) {
			a.absent = append(a.absent, r)
			a.totals[r] = math.Inf(-1)
			continue
		}
		row := D[r*S : r*S+S]
		p := 0.0
		for s, d := range row {
			p += d
			if p > F[s] {
				sec[s], F[s] = F[s], p
			} else if p > sec[s] {
				sec[s] = p
			}
			if d > mx[s] {
				mx[s] = d
			}
			if d < mn[s] {
				mn[s] = d
			}
			sm[s] += d
			cols[s*R+n] = key(d)
		}
		if !(p >= 0) || math.IsInf(p, 1) {
			a.badTotal++
		}
		if p > slowTot {
			slow, slowTot = r, p
		}
		a.totals[r] = p
		n++
	}
	a.nPresent = n
	if n == 0 { // hand-built window with an empty step: nothing is exposed
		for s := range F {
			F[s], sec[s] = 0, 0
		}
	} else {
		a.baselineFold(t, slow)
		a.cohortMedians()
	}
	c := &a.acct
	fS := F[S-1]
	prev := 0.0
	for s := range F {
		adv := F[s] - prev // a[t,s] = F[t,s] − F[t,s−1]
		prev = F[s]
		c.adv[s] += adv
		c.fsum[s] += F[s]
		a.thr[s] = F[s] - tieRel*math.Abs(F[s])
		a.advances[s] = adv > tieRel*fS
	}
	c.exposed += fS

	g := &a.gain
	f1, f2 := g.f1, g.f2
	for i := range f1 {
		f1[i], f2[i] = math.Inf(-1), math.Inf(-1)
	}
	fused := S == a.G // without accumulation groups gains fuse into sweep 2
	cb := g.cohortB
	tie, leader := 0, -1
	thr, advances := a.thr, a.advances
	tieN, tieFirst := c.tieN, c.tieFirst
	for s := range tieN {
		tieN[s], tieFirst[s] = 0, -1
	}
	for r := 0; r < R && n > 0; r++ {
		tot := a.totals[r]
		if tot == math.Inf(-1) {
			continue
		}
		row := D[r*S : r*S+S]
		sp := c.sumP[r*S : r*S+S]
		lc, la := c.leadCount[r*S:r*S+S], c.leadAdv[r*S:r*S+S]
		rm := g.rankMed[r*S : r*S+S]
		p := 0.0
		for s, d := range row {
			p += d
			sp[s] += p
			if p >= thr[s] {
				lc[s]++
				if advances[s] {
					la[s]++
				}
				if tieN[s] == 0 {
					tieFirst[s] = int32(r)
				}
				tieN[s]++
			}
			if fused {
				// Replacing stage s by min(b, d) lowers only the total.
				if v := tot - max(d-rm[s], 0); v > f1[s] {
					f1[s] = v
				}
				if v := tot - max(d-cb[s], 0); v > f2[s] {
					f2[s] = v
				}
			}
		}
		if p >= thr[S-1] {
			tie++
			if leader < 0 {
				leader = r
			}
		}
		c.nSteps[r]++
		c.rankTotal[r] += p
	}
	if n > 0 {
		if !fused {
			a.gainGrouped(t)
		}
		a.gainFold()
	}
	if len(a.absent) > 0 {
		if c.missF == nil {
			c.missF = make([]float64, R*S)
		}
		for _, r := range a.absent {
			mf := c.missF[r*S : r*S+S]
			for s := range mf {
				mf[s] += F[s]
			}
		}
	}

	// A boundary's leader is confident when it is unique and clears the
	// runner-up by the gap tolerances (App. C).
	cl := c.confLeader[t*S : t*S+S]
	for s := range cl {
		cl[s] = -1
		if g := F[s] - sec[s]; n > 1 && tieN[s] == 1 && g >= a.cfg.LeaderGapMS && g >= a.cfg.LeaderGapRel*fS {
			cl[s] = tieFirst[s]
		}
	}

	// Step series on the final boundary.
	gap := 0.0
	if n > 1 {
		gap = fS - sec[S-1]
	}
	pt := &a.series[t]
	pt.Step, pt.ExposedMS, pt.LeaderRank, pt.TieSize, pt.GapMS = a.w.Steps[t], fS, leader, tie, gap
	pt.AdvanceMS = a.seriesAdv[t*a.G : (t+1)*a.G : (t+1)*a.G]
	prev = 0
	for s := range F {
		pt.AdvanceMS[a.group[s]] += F[s] - prev
		prev = F[s]
	}
}
