package stagefrontier

import (
	"fmt"
	"slices"
	"strings"
)

// boundaryOf returns the effective boundary that reports schema stage g:
// the stage itself, or with accumulation the microstep boundary of g that
// advances most over the window.
func (a *analyzer) boundaryOf(g int) int {
	sb := -1
	for s := 0; s < a.S; s++ {
		if a.group[s] == g && (sb < 0 || a.acct.adv[s] > a.acct.adv[sb]) {
			sb = s
		}
	}
	return sb
}

// rankID maps a window position to the rank's global id.
func (a *analyzer) rankID(r int) int {
	if r < 0 {
		return r
	}
	return a.w.Ranks[r].Rank
}

func (a *analyzer) host(r int) string {
	if r < 0 {
		return ""
	}
	return a.w.Ranks[r].Host
}

// meanLag is rank r's mean slack at effective boundary s over its present
// steps: Σ_t σ[t,r,s] = Σ_t F[t,s] − Σ_t P[t,r,s] (§3 eq.3).
func (a *analyzer) meanLag(r, s int) (float64, bool) {
	c := &a.acct
	if c.nSteps[r] == 0 {
		return 0, false
	}
	f := c.fsum[s]
	if c.missF != nil {
		f -= c.missF[r*a.S+s]
	}
	return max(f-c.sumP[r*a.S+s], 0) / float64(c.nSteps[r]), true
}

// typicalLag is the upper median over present ranks of the mean slack at
// boundary s: at least half of the ranks trail the frontier by at least
// this much. s < 0 (before the first stage) is 0.
func (a *analyzer) typicalLag(s int, buf []float64) float64 {
	if s < 0 {
		return 0
	}
	buf = buf[:0]
	for r := 0; r < a.R; r++ {
		if l, ok := a.meanLag(r, s); ok {
			buf = append(buf, l)
		}
	}
	return upperMedian(buf)
}

// upperMedian sorts xs and returns its element ⌊n/2⌋ (0 when empty).
func upperMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// stageEvidence computes, for every schema stage, the exposed tail and the
// leader gate at its boundary.
func (a *analyzer) stageEvidence(rep *Report) []StageEvidence {
	out := make([]StageEvidence, a.G)
	buf := make([]float64, 0, a.R)
	typ := make([]float64, 0, a.R)
	// Each effective boundary's typical lag is computed once: a stage's
	// tail reads its own boundary and the one before it.
	lags := make([]float64, a.S)
	done := make([]bool, a.S)
	lagAt := func(s int) float64 {
		if s < 0 {
			return 0
		}
		if !done[s] {
			lags[s], done[s] = a.typicalLag(s, buf), true
		}
		return lags[s]
	}
	for g := range out {
		sb := a.boundaryOf(g)
		ev := &out[g]
		ev.Stage = rep.Stages[g]
		ev.TypicalLagMS = lagAt(sb)
		ev.TailMS = ev.TypicalLagMS - lagAt(sb-1)
		typ = typ[:0]
		for r, rs := range rep.Ranks { // window order
			if a.acct.nSteps[r] > 0 {
				typ = append(typ, rs.MeanStageMS[g])
			}
		}
		ev.TypicalStageMS = upperMedian(typ)
		ev.AdvanceMS = rep.AdvanceMS[g] / float64(a.T)
		ev.Leader = a.leaderEvidence(g, sb, ev.TypicalLagMS)
	}
	return out
}

// leaderEvidence applies the leader gate at boundary sb of schema stage g.
//
// A rank is named only when the evidence singles it out, on three counts
// (the App. C leader-switch tolerance made into a gate): it is the
// confident unique leader on most of the steps where the stage exposes
// time, it clears the runner-up by a margin, and it does so in most
// consecutive sub-windows. Otherwise the decision says why not.
func (a *analyzer) leaderEvidence(g, sb int, typicalLag float64) LeaderEvidence {
	cfg := a.cfg
	ev := LeaderEvidence{Rank: -1, Candidate: -1, RunnerUp: -1}
	if a.R < 2 {
		ev.Withheld, ev.Why = WithheldSingleRank, "one rank: the frontier is its own vector and carries no cross-rank evidence"
		return ev
	}
	counts := make([]int32, a.R)
	var seq []int32 // confident leader (or −1) of each material step, in step order
	advSum := 0.0
	for t := 0; t < a.T; t++ {
		pt := &a.series[t]
		adv := pt.AdvanceMS[g]
		// A boundary that advances less than the leader gap tolerances
		// exposes nothing worth attributing to a rank.
		if adv < max(cfg.LeaderGapMS, cfg.LeaderGapRel*pt.ExposedMS) || adv <= 0 {
			continue
		}
		advSum += adv
		l := a.acct.confLeader[t*a.S+sb]
		if a.acct.tieSize[t*a.S+sb] > 1 {
			ev.TieSteps++
		}
		seq = append(seq, l)
		if l >= 0 {
			counts[l]++
			ev.ConfidentSteps++
		}
	}
	n := len(seq)
	ev.MaterialSteps = n
	if n == 0 {
		ev.Withheld, ev.Why = WithheldNoExposure, fmt.Sprintf("the stage never advances the frontier by more than the leader gap (%.1f ms or %.0f%% of the step)", cfg.LeaderGapMS, 100*cfg.LeaderGapRel)
		return ev
	}
	r1, r2 := top2(counts)
	ev.Candidate, ev.RunnerUp = a.rankID(r1), a.rankID(r2)
	ev.Host = a.host(r1)
	if r1 >= 0 {
		ev.Leads = int(counts[r1])
	}
	if r2 >= 0 {
		ev.RunnerUpLeads = int(counts[r2])
	}
	ev.Fraction = float64(ev.Leads) / float64(n)
	ev.Margin = float64(ev.Leads-ev.RunnerUpLeads) / float64(n)
	var clear int
	ev.SubWindowLeaders, ev.Agreement, clear = a.subWindows(seq, int32(r1))
	// Locally clear leaders that differ between sub-windows: the straggler
	// moved during the window.
	moved := len(ev.SubWindowLeaders) > 1 && float64(clear) >= cfg.LeaderMinAgreement*float64(len(ev.SubWindowLeaders)) &&
		distinctInts(ev.SubWindowLeaders) > 1

	meanAdv := advSum / float64(n)
	leaveTogether := typicalLag <= cfg.AbsorbedLagShare*meanAdv
	named := n >= cfg.LeaderMinSteps && r1 >= 0 && ev.Fraction >= cfg.LeaderMinFraction &&
		ev.Margin >= cfg.LeaderMinMargin && ev.Agreement >= cfg.LeaderMinAgreement
	subs := intsText(ev.SubWindowLeaders)
	// A tie: a few ranks (at most tieMaxRanks) jointly hold the top on
	// most steps, while no single one clears the gates. The same with
	// many ranks taking turns is no tie but a spread-out lead.
	tieSet, tieCover := a.tieSet(sb)
	tie := !named && len(tieSet) >= 2 && len(tieSet) <= tieMaxRanks(a.R) &&
		(2*(n-ev.ConfidentSteps) >= n || ev.Fraction+float64(ev.RunnerUpLeads)/float64(n) >= cfg.LeaderMinFraction)
	switch {
	case named:
		ev.Rank = ev.Candidate
		runner := "no other rank leads"
		if ev.RunnerUp >= 0 {
			runner = fmt.Sprintf("runner-up rank %d leads %d", ev.RunnerUp, ev.RunnerUpLeads)
		}
		ev.Why = fmt.Sprintf("it leads the frontier on %d of %d steps where the stage exposes time (%.0f%%; %s) and in %d of %d sub-windows",
			ev.Leads, n, 100*ev.Fraction, runner, countOf(ev.SubWindowLeaders, ev.Candidate), len(ev.SubWindowLeaders))
	case n < cfg.LeaderMinSteps:
		ev.Withheld, ev.Why = WithheldFewSteps, fmt.Sprintf("only %d steps expose time at this stage (need %d)", n, cfg.LeaderMinSteps)
	case leaveTogether && ev.Fraction < cfg.LeaderMinFraction:
		ev.Withheld, ev.Why = WithheldAbsorbed, fmt.Sprintf("every rank leaves the stage together (at least half trail the frontier by only %.1f ms of its %.1f ms advance), so no rank stands out there; if the stage is slow, a collective or barrier inside it waits on some rank, or every rank is slow alike, and stage vectors cannot tell which — collective-level evidence is needed",
			typicalLag, meanAdv)
	case moved || (ev.Fraction >= cfg.LeaderMinFraction && ev.Margin >= cfg.LeaderMinMargin):
		ev.Withheld, ev.Why = WithheldUnstable, fmt.Sprintf("the leading rank changes over the window: sub-window leaders %s (rank %d leads %d of %d steps overall)", subs, ev.Candidate, ev.Leads, n)
	case tie:
		ev.Withheld, ev.TieSet = WithheldTie, tieSet
		ev.Why = fmt.Sprintf("ranks %s tie for the lead: together they top %.0f%% of the steps, within the leader gap (%.1f ms or %.0f%% of the step) of each other on %d of %d (%d exact ties)",
			intsText(tieSet), 100*tieCover, cfg.LeaderGapMS, 100*cfg.LeaderGapRel, n-ev.ConfidentSteps, n, ev.TieSteps)
	default:
		ev.Withheld = WithheldSpread
		ev.Why = fmt.Sprintf("no rank leads most of the %d steps: %d distinct ranks lead at different steps (the most, rank %s, leads %d)",
			n, distinct(counts), rankText(ev.Candidate), ev.Leads)
	}
	return ev
}

// subWindows splits the material steps into consecutive sub-windows and
// returns each one's top confident leader (−1 if none), the share of
// sub-windows led by cand, and how many sub-windows have a locally clear
// leader (one leading at least LeaderMinFraction of its steps).
func (a *analyzer) subWindows(seq []int32, cand int32) ([]int, float64, int) {
	k := min(a.cfg.LeaderSubWindows, len(seq)/max(a.cfg.LeaderMinSteps, 1))
	k = max(k, 1)
	counts := map[int32]int{}
	leaders := make([]int, k)
	agree, clearN := 0, 0
	for i := range k {
		clear(counts)
		best, bestN := int32(-1), 0
		sub := seq[i*len(seq)/k : (i+1)*len(seq)/k]
		for _, l := range sub {
			if l < 0 {
				continue
			}
			counts[l]++
			if c := counts[l]; c > bestN || (c == bestN && l < best) {
				best, bestN = l, c
			}
		}
		leaders[i] = a.rankID(int(best))
		if best == cand && cand >= 0 {
			agree++
		}
		if best >= 0 && float64(bestN) >= a.cfg.LeaderMinFraction*float64(len(sub)) {
			clearN++
		}
	}
	return leaders, float64(agree) / float64(k), clearN
}

func distinctInts(xs []int) int {
	seen := map[int]bool{}
	for _, x := range xs {
		seen[x] = true
	}
	return len(seen)
}

// tieSet returns the fewest ranks that together hold at least 80% of
// the top positions (latest-rank tie-set memberships) at the advancing
// boundary sb, and the share they hold; nil if that takes more than 8.
func (a *analyzer) tieSet(sb int) ([]int, float64) {
	type rc struct{ r, n int }
	var rows []rc
	total := 0
	for r := 0; r < a.R; r++ {
		if n := int(a.acct.leadAdv[r*a.S+sb]); n > 0 {
			rows = append(rows, rc{r, n})
			total += n
		}
	}
	if total == 0 {
		return nil, 0
	}
	slices.SortStableFunc(rows, func(x, y rc) int { return y.n - x.n })
	var out []int
	cum := 0
	for _, x := range rows {
		if len(out) == 8 {
			return nil, 0
		}
		out = append(out, a.rankID(x.r))
		cum += x.n
		if 5*cum >= 4*total {
			break
		}
	}
	slices.Sort(out)
	return out, float64(cum) / float64(total)
}

// tieMaxRanks is the largest group of jointly leading ranks still called
// a tie: two, up to a quarter of the ranks, at most eight.
func tieMaxRanks(R int) int { return max(2, min(8, R/4)) }

// top2 returns the positions with the most and second-most counts (the
// lower position on equal counts), −1 where there is none.
func top2(counts []int32) (int, int) {
	r1, r2 := -1, -1
	for r, c := range counts {
		if c == 0 {
			continue
		}
		switch {
		case r1 < 0 || c > counts[r1]:
			r1, r2 = r, r1
		case r2 < 0 || c > counts[r2]:
			r2 = r
		}
	}
	return r1, r2
}

func distinct(counts []int32) int {
	n := 0
	for _, c := range counts {
		if c > 0 {
			n++
		}
	}
	return n
}

func countOf(xs []int, v int) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

func rankText(r int) string {
	if r < 0 {
		return "—"
	}
	return fmt.Sprint(r)
}

func intsText(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = rankText(x)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
