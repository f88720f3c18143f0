package stagefrontier

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
	tieSize             []int32 // T*S: latest-rank tie-set size per step and boundary
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
	c.tieSize = make([]int32, len(a.w.Steps)*S)
	c.tieN, c.tieFirst = make([]int32, S), make([]int32, S)
}

// tieCand is a rank whose prefix reached the running tie threshold of a
// boundary (it may still fall out of the final tie set).
type tieCand struct {
	r int32
	p float64
}

// sweepBlock is the rank-block size of the sweep in cells: each step's run
// is this long and the block's prefix sums stay in L2.
const sweepBlock = 1 << 14

// Tie candidates kept per boundary and step: a few inline, and past
// candMax that boundary's tie set is settled by rescanning its step
// (massive exact ties only).
const (
	candInline = 4
	candMax    = 64
)

// colState is the running state of boundary s of step t while the sweep
// visits the ranks in order: frontier, runner-up, tie threshold and the
// §6.2 column statistics. gate = min(thr, sec): below it a prefix changes
// none of the first four.
type colState struct {
	gate, F, sec, thr float64
	mx, mn, sm        float64
}

// stepState is the per-step part of the sweep.
type stepState struct {
	n        int32 // present ranks
	slow     int32 // the first rank with the largest total
	slowTot  float64
	overflow bool // some boundary's candidates passed candMax
}

// sweep is the one full pass over the window's durations (the medians
// before it read only samples at scale). It runs over blocks of ranks,
// each block reading every step as one contiguous run and keeping its
// per-rank accumulators in cache, and computes:
//
//   - per cell: prefixes P[t,r,s] = Σ_{j≤s} d, their window sums for the
//     slack identity (§3 eq.3), the frontier F[t,s] = max_r P and runner-up
//     (§3 eq.1), and the §6.2 column statistics;
//   - per row: rank totals, the slowest rank, and the clipped totals of
//     both gains (§4 eq.4), whose medians are taken beforehand.
//
// Per-step state is visited in rank order, exactly as a step-major scan
// would, so every sum and max is bit-identical to it. The latest-rank tie
// set needs the final F, but F only grows, so every final member passes
// the running threshold when visited; those candidates are kept (and
// pruned as F grows) and the tie set is settled in finishStep.
func (a *analyzer) sweep() {
	T, R, S := a.T, a.R, a.S
	c := &a.acct
	B := max(1, min(R, sweepBlock/S))
	D := a.w.D
	lbs := a.gain.lb
	for r0 := 0; r0 < R; r0 += B {
		nb := min(B, R-r0)
		sp := c.sumP[r0*S : (r0+nb)*S]
		nSteps, rankTotal := c.nSteps[r0:r0+nb], c.rankTotal[r0:r0+nb]
		for t := 0; t < T; t++ {
			src := D[(t*R+r0)*S : (t*R+r0+nb)*S]
			var pr []bool
			if a.pres != nil {
				pr = a.pres[t*R+r0 : t*R+r0+nb]
			}
			st := a.bnd[t*S : t*S+S]
			if S == 6 && !a.generic { // the default schema
				a.run6(t, r0, src, sp, pr, (*[6]colState)(st), nSteps, rankTotal)
				continue
			}
			ss := &a.steps[t]
			n := ss.n
			for j := range nb {
				if pr != nil && !pr[j] {
					continue
				}
				row, spj := src[j*S:j*S+S], sp[j*S:j*S+S]
				row, spj = row[:len(st)], spj[:len(st)]
				p := 0.0
				for s, d := range row {
					p += d
					spj[s] += p
					cs := &st[s]
					if cs.see(d, p) {
						a.colUpdate(cs, t*S+s, int32(r0+j), p)
					}
					cs.sm += d
				}
				n++
				if !(p >= 0) || math.IsInf(p, 1) {
					a.badTotal++
				}
				if p > ss.slowTot {
					ss.slow, ss.slowTot = int32(r0+j), p
				}
				nSteps[j]++
				rankTotal[j] += p
				if p > lbs[t] {
					a.gainRank(t, r0+j, row, p)
				}
			}
			ss.n = n
		}
	}
}

// run6 is the sweep's inner loop over one step's run of a rank block for
// six-stage rows, unrolled, with the column sums in registers: summed
// through memory, each row would wait on the previous row's store.
func (a *analyzer) run6(t, r0 int, src, sp []float64, pr []bool, st *[6]colState, nSteps []int32, rankTotal []float64) {
	ss := &a.steps[t]
	n, ts := ss.n, t*6
	sm0, sm1, sm2, sm3, sm4, sm5 := st[0].sm, st[1].sm, st[2].sm, st[3].sm, st[4].sm, st[5].sm
	for j := range nSteps {
		if pr != nil && !pr[j] {
			continue
		}
		row, spj := (*[6]float64)(src[j*6:j*6+6]), (*[6]float64)(sp[j*6:j*6+6])
		r := int32(r0 + j)
		p := 0.0
		p += row[0] // from 0.0, as the generic loop: −0 becomes +0
		spj[0] += p
		if st[0].see(row[0], p) {
			a.colUpdate(&st[0], ts, r, p)
		}
		sm0 += row[0]
		p += row[1]
		spj[1] += p
		if st[1].see(row[1], p) {
			a.colUpdate(&st[1], ts+1, r, p)
		}
		sm1 += row[1]
		p += row[2]
		spj[2] += p
		if st[2].see(row[2], p) {
			a.colUpdate(&st[2], ts+2, r, p)
		}
		sm2 += row[2]
		p += row[3]
		spj[3] += p
		if st[3].see(row[3], p) {
			a.colUpdate(&st[3], ts+3, r, p)
		}
		sm3 += row[3]
		p += row[4]
		spj[4] += p
		if st[4].see(row[4], p) {
			a.colUpdate(&st[4], ts+4, r, p)
		}
		sm4 += row[4]
		p += row[5]
		spj[5] += p
		if st[5].see(row[5], p) {
			a.colUpdate(&st[5], ts+5, r, p)
		}
		sm5 += row[5]
		n++
		if !(p >= 0) || math.IsInf(p, 1) {
			a.badTotal++
		}
		if p > ss.slowTot {
			ss.slow, ss.slowTot = r, p
		}
		nSteps[j]++
		rankTotal[j] += p
		if p > a.gain.lb[t] {
			a.gainRank(t, int(r), row[:], p)
		}
	}
	st[0].sm, st[1].sm, st[2].sm, st[3].sm, st[4].sm, st[5].sm = sm0, sm1, sm2, sm3, sm4, sm5
	ss.n = n
}

// see folds duration d into the column max and min and reports whether
// prefix p needs the rare path (colUpdate).
func (cs *colState) see(d, p float64) bool {
	if d > cs.mx {
		cs.mx = d
	}
	if d < cs.mn {
		cs.mn = d
	}
	return p >= cs.gate
}

// colUpdate is the rare path of the sweep for prefix p of rank r at
// boundary cs (index ts = t*S+s).
func (a *analyzer) colUpdate(cs *colState, ts int, r int32, p float64) {
	if p >= cs.thr {
		if p > cs.F {
			cs.sec, cs.F = cs.F, p
			// Looser than the final threshold, so candidates stay a
			// superset despite round-off.
			cs.thr = p - 2*tieRel*math.Abs(p)
			keep := a.cand[ts][:0]
			for _, x := range a.cand[ts] {
				if x.p >= cs.thr {
					keep = append(keep, x)
				}
			}
			a.cand[ts] = keep
		} else if p > cs.sec {
			cs.sec = p
		}
		switch {
		case a.candOver[ts]:
		case len(a.cand[ts]) < candMax:
			a.cand[ts] = append(a.cand[ts], tieCand{r, p})
		default: // settled by a rescan
			a.cand[ts], a.candOver[ts] = nil, true
			a.steps[ts/a.S].overflow = true
		}
	} else if p > cs.sec {
		cs.sec = p
	}
	cs.gate = cs.sec
	if cs.thr < cs.sec {
		cs.gate = cs.thr
	}
}

// finishStep turns step t's swept state into the window accumulators:
// advances, the settled tie sets, both gains, missing-step frontier sums,
// confident leaders and the step series.
func (a *analyzer) finishStep(t int) {
	R, S := a.R, a.S
	F, sec := a.F[:S:S], a.second[:S:S]
	b := &a.base
	st := a.bnd[t*S : t*S+S]
	for s := range F {
		cs := &st[s]
		F[s], sec[s] = cs.F, cs.sec
		b.colMax[s], b.colMin[s], b.colSum[s] = cs.mx, cs.mn, cs.sm
	}
	ss := &a.steps[t]
	n := int(ss.n)
	a.nPresent = n
	if n == 0 { // hand-built window with an empty step: nothing is exposed
		for s := range F {
			F[s], sec[s] = 0, 0
		}
	} else {
		a.baselineFold(t, int(ss.slow))
	}
	c := &a.acct
	fS := F[S-1]
	prev := 0.0
	thr, advances := a.thr[:S:S], a.advances[:S:S]
	for s := range F {
		adv := F[s] - prev // a[t,s] = F[t,s] − F[t,s−1]
		prev = F[s]
		c.adv[s] += adv
		c.fsum[s] += F[s]
		thr[s] = F[s] - tieRel*math.Abs(F[s])
		advances[s] = adv > tieRel*fS
	}
	c.exposed += fS

	a.settleTies(t)
	tieN, tieFirst := c.tieN[:S:S], c.tieFirst[:S:S]
	tie, leader := int(tieN[S-1]), int(tieFirst[S-1])
	if n > 0 {
		a.gainFold(t)
	}
	if a.pres != nil && n < R {
		if c.missF == nil {
			c.missF = make([]float64, R*S)
		}
		for r, ok := range a.pres[t*R : (t+1)*R] {
			if ok {
				continue
			}
			mf := c.missF[r*S : r*S+S]
			for s := range mf {
				mf[s] += F[s]
			}
		}
	}

	// A boundary's leader is confident when it is unique and clears the
	// runner-up by the gap tolerances (App. C).
	copy(c.tieSize[t*S:t*S+S], tieN)
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
	pt.Step, pt.ExposedMS, pt.LeaderRank, pt.TieSize, pt.GapMS = a.w.Steps[t], fS, a.rankID(leader), tie, gap
	pt.AdvanceMS = a.seriesAdv[t*a.G : (t+1)*a.G : (t+1)*a.G]
	prev = 0
	for s := range F {
		pt.AdvanceMS[a.group[s]] += F[s] - prev
		prev = F[s]
	}
}

// settleTies finds the final latest-rank tie set of each boundary of step
// t, in rank order, from the sweep's candidates; boundaries whose
// candidates overflowed rescan the step.
func (a *analyzer) settleTies(t int) {
	R, S := a.R, a.S
	c := &a.acct
	thr, advances := a.thr[:S:S], a.advances[:S:S]
	tieN, tieFirst := c.tieN[:S:S], c.tieFirst[:S:S]
	hit := func(s int, r int32) {
		i := int(r)*S + s
		c.leadCount[i]++
		if advances[s] {
			c.leadAdv[i]++
		}
		if tieN[s] == 0 {
			tieFirst[s] = r
		}
		tieN[s]++
	}
	over := a.candOver[t*S : t*S+S]
	for s := range tieN {
		tieN[s], tieFirst[s] = 0, -1
		if over[s] {
			continue
		}
		for _, x := range a.cand[t*S+s] {
			if x.p >= thr[s] {
				hit(s, x.r)
			}
		}
	}
	if !a.steps[t].overflow {
		return
	}
	D := a.step(t)
	for r := 0; r < R; r++ {
		if !a.present(t, r) {
			continue
		}
		p := 0.0
		for s, d := range D[r*S : r*S+S] {
			p += d
			if over[s] && p >= thr[s] {
				hit(s, int32(r))
			}
		}
	}
}
