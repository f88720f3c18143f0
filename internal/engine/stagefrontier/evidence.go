package stagefrontier

import "slices"

// rankStats turns the slack sums into per-rank lag evidence. By the slack
// identity (StageFrontier §3 eq.3) Σ_t σ[t,r,s] = Σ_t F[t,s] − Σ_t P[t,r,s]
// over the rank's present steps, so no per-step slack is ever stored.
func (a *analyzer) rankStats() []RankStat {
	R, S, G := a.R, a.S, a.G
	c := &a.acct
	// One backing array per field keeps 16k ranks to a handful of allocations.
	lag, dlag, mean := make([]float64, R*G), make([]float64, R*G), make([]float64, R*G)
	lead := make([]int, R*G)
	out := make([]RankStat, R)
	for r := range out {
		rs := &out[r]
		rs.Rank, rs.Host, rs.TotalMS, rs.Steps = a.rankID(r), a.w.Ranks[r].Host, c.rankTotal[r], int(c.nSteps[r])
		rs.LagMS, rs.DeltaLagMS = lag[r*G:(r+1)*G:(r+1)*G], dlag[r*G:(r+1)*G:(r+1)*G]
		rs.MeanStageMS, rs.LeadCount = mean[r*G:(r+1)*G:(r+1)*G], lead[r*G:(r+1)*G:(r+1)*G]
		if c.nSteps[r] == 0 {
			continue
		}
		prevLag, prevP := 0.0, 0.0
		for s := 0; s < S; s++ {
			g := a.group[s]
			f := c.fsum[s]
			if c.missF != nil {
				f -= c.missF[r*S+s]
			}
			l := max(f-c.sumP[r*S+s], 0) // clamp round-off below zero
			// With accumulation the group sums every microstep's boundary.
			rs.LagMS[g] += l
			rs.DeltaLagMS[g] += l - prevLag
			rs.MeanStageMS[g] += (c.sumP[r*S+s] - prevP) / float64(c.nSteps[r])
			rs.LeadCount[g] += int(c.leadCount[r*S+s])
			prevLag, prevP = l, c.sumP[r*S+s]
		}
	}
	return out
}

// leaderSwitches counts switches between confident unique leaders at the
// top-1 stage's boundary (§4, App. C): the final boundary is useless for
// this because a step-closing collective makes every rank finish together.
func (a *analyzer) leaderSwitches(rep *Report) {
	c := &a.acct
	g := slices.Index(rep.Stages, rep.Top1)
	if g < 0 {
		return
	}
	sb := a.boundaryOf(g)
	last := int32(-1)
	for t := range a.w.Steps {
		l := c.confLeader[t*a.S+sb]
		if l < 0 {
			continue
		}
		if c.confident > 0 && l != last {
			c.switches++
		}
		c.confident++
		last = l
	}
	rep.LeaderSwitches = c.switches
	if c.confident > 1 {
		rep.LeaderSwitchRate = float64(c.switches) / float64(c.confident-1)
	}
}

// absorption finds the downstream stage where the ranks that were behind
// at the top stage catch up most: Σ_r ΔLag most negative after the top
// stage. That is where the waiting ranks recorded their wait (§2, §4), the
// co-critical alternative to the upstream cause.
func absorption(rep *Report, top int) (stage int, ms, lagAtTop float64) {
	stage = -1
	neg := make([]float64, len(rep.Stages))
	for _, rs := range rep.Ranks {
		lagAtTop += rs.LagMS[top]
		for g := top + 1; g < len(neg); g++ {
			neg[g] += rs.DeltaLagMS[g]
		}
	}
	for g := top + 1; g < len(neg); g++ {
		if -neg[g] > ms {
			stage, ms = g, -neg[g]
		}
	}
	return stage, ms, lagAtTop
}
