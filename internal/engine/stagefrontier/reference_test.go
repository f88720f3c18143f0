package stagefrontier

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// reference is StageFrontier computed the obvious way, straight from the
// definitions of §3–§4: for every step, every rank's prefixes, the
// max-prefix frontier, the advances, the latest-rank tie sets, and from
// them the window sums. No rank blocks, no unrolled sweep, no tie
// candidates, no bound-pruned gains, no sampled medians. It is slow on
// purpose; Analyze must agree with it.
type reference struct {
	exposed     float64
	adv, share  []float64 // per stage
	routing     []string
	top1        string
	series      []StepPoint
	lag, dlag   [][]float64 // rank × stage, Σ_t over the rank's present steps
	mean        [][]float64
	lead        [][]int
	total       []float64
	gain        map[string][]float64
	baseline    map[string][]float64 // §6.2 scores
	switches    int
	typicalLag  []float64
	tail        []float64
	typicalDur  []float64
	material    []int // per stage: steps whose advance clears the leader gap
	confident   []int // ... of them with a confident unique leader
	candidate   []int // rank id with the most confident leads, -1 if none
	leads       []int
	tieSteps    []int
	switchStage int
}

// naiveMedian is the textbook median: the middle element, or the mean of
// the two middle ones written as l + (h−l)/2.
func naiveMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	l, h := s[n/2-1], s[n/2]
	return l + (h-l)/2
}

func upperMid(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// naiveAnalyze computes the reference for a window without accumulation.
func naiveAnalyze(t *testing.T, w *stagevec.Window, cfg Config) *reference {
	t.Helper()
	T, R, S := w.Dims()
	if S != len(w.Schema.Stages) {
		t.Fatalf("the reference handles windows without accumulation only")
	}
	present := func(ti, r int) bool { return w.Present == nil || w.Present[ti*R+r] }
	d := func(ti, r, s int) float64 { return w.At(ti, r, s) }
	ref := &reference{adv: make([]float64, S), gain: map[string][]float64{}, baseline: map[string][]float64{}}
	grid := func() [][]float64 {
		g := make([][]float64, R)
		for r := range g {
			g[r] = make([]float64, S)
		}
		return g
	}
	ref.lag, ref.dlag, ref.mean = grid(), grid(), grid()
	ref.lead = make([][]int, R)
	for r := range ref.lead {
		ref.lead[r] = make([]int, S)
	}
	ref.total = make([]float64, R)
	sumF := grid() // Σ_t F[t,s] over rank r's present steps
	sumP := grid()
	nSteps := make([]int, R)
	for _, m := range baselineMethods {
		ref.baseline[m] = make([]float64, S)
	}
	// Rank medians over present steps (the rank_median baseline of eq.4).
	rankMed := grid()
	for r := 0; r < R; r++ {
		for s := 0; s < S; s++ {
			var xs []float64
			for ti := 0; ti < T; ti++ {
				if present(ti, r) {
					xs = append(xs, d(ti, r, s))
				}
			}
			rankMed[r][s] = naiveMedian(xs)
		}
	}
	gainR, gainC := make([]float64, S), make([]float64, S)
	leadAdv := grid()       // per rank × stage: steps in the tie set where the boundary advances
	confLeader := [][]int{} // [t][s] window position of the confident leader, -1
	F := make([][]float64, T)
	for ti := 0; ti < T; ti++ {
		// Prefixes of every present rank, in stage order.
		P := make([][]float64, R)
		var ranks []int
		for r := 0; r < R; r++ {
			if !present(ti, r) {
				continue
			}
			ranks = append(ranks, r)
			P[r] = make([]float64, S)
			p := 0.0
			for s := 0; s < S; s++ {
				p += d(ti, r, s)
				P[r][s] = p
			}
		}
		F[ti] = make([]float64, S)
		sec := make([]float64, S)
		for s := 0; s < S; s++ {
			var col []float64
			for _, r := range ranks {
				col = append(col, P[r][s])
			}
			slices.Sort(col)
			slices.Reverse(col)
			switch len(col) {
			case 0:
			case 1:
				F[ti][s] = col[0]
			default:
				F[ti][s], sec[s] = col[0], col[1]
			}
		}
		fS := F[ti][S-1]
		pt := StepPoint{Step: w.Steps[ti], ExposedMS: fS, AdvanceMS: make([]float64, S), LeaderRank: -1}
		prev := 0.0
		cl := make([]int, S)
		for s := 0; s < S; s++ {
			a := F[ti][s] - prev // a[t,s] = F[t,s] − F[t,s−1]
			prev = F[ti][s]
			pt.AdvanceMS[s] = a
			ref.adv[s] += a
			// The latest-rank tie set at boundary s, in rank order.
			thr := F[ti][s] - tieRel*math.Abs(F[ti][s])
			var tie []int
			for _, r := range ranks {
				if P[r][s] >= thr {
					tie = append(tie, r)
					ref.lead[r][s]++
					if a > tieRel*fS {
						leadAdv[r][s]++
					}
				}
			}
			cl[s] = -1
			if g := F[ti][s] - sec[s]; len(ranks) > 1 && len(tie) == 1 && g >= cfg.LeaderGapMS && g >= cfg.LeaderGapRel*fS {
				cl[s] = tie[0]
			}
			if s == S-1 && len(tie) > 0 {
				pt.LeaderRank, pt.TieSize = w.Ranks[tie[0]].Rank, len(tie)
			}
		}
		confLeader = append(confLeader, cl)
		if len(ranks) > 1 {
			pt.GapMS = fS - sec[S-1]
		}
		ref.exposed += fS
		ref.series = append(ref.series, pt)
		if len(ranks) == 0 {
			continue
		}
		slow := ranks[0]
		for _, r := range ranks {
			nSteps[r]++
			ref.total[r] += P[r][S-1]
			for s := 0; s < S; s++ {
				sumF[r][s] += F[ti][s]
				sumP[r][s] += P[r][s]
				ref.mean[r][s] += d(ti, r, s)
			}
			if P[r][S-1] > P[slow][S-1] {
				slow = r
			}
		}
		// §6.2 summaries from each stage's column of raw durations.
		for s := 0; s < S; s++ {
			mx, mn, sum := math.Inf(-1), math.Inf(1), 0.0
			var col []float64
			for _, r := range ranks {
				x := d(ti, r, s)
				mx, mn, sum = max(mx, x), min(mn, x), sum+x
				col = append(col, x)
			}
			ref.baseline[MethodPerStageMax][s] += mx
			ref.baseline[MethodPerStageAvg][s] += sum / float64(len(ranks))
			ref.baseline[MethodRankSpread][s] += mx - mn
			ref.baseline[MethodSlowestRank][s] += d(ti, slow, s)
			if present(ti, 0) {
				ref.baseline[MethodRank0Local][s] += d(ti, 0, s)
			}
			// §4 eq.4: clip stage s at the baseline, recompute the frontier.
			cohort := naiveMedian(col)
			fr, fc := math.Inf(-1), math.Inf(-1)
			for _, r := range ranks {
				x := d(ti, r, s)
				fr = max(fr, P[r][S-1]-x+min(x, rankMed[r][s]))
				fc = max(fc, P[r][S-1]-x+min(x, cohort))
			}
			gainR[s] += fS - fr
			gainC[s] += fS - fc
		}
	}
	ref.gain[BaselineRankMedian], ref.gain[BaselineCohortMedian] = gainR, gainC
	for r := 0; r < R; r++ {
		if nSteps[r] == 0 {
			continue
		}
		prevLag := 0.0
		for s := 0; s < S; s++ {
			l := max(sumF[r][s]-sumP[r][s], 0) // Σ_t σ[t,r,s], §3 eq.3
			ref.lag[r][s], ref.dlag[r][s] = l, l-prevLag
			ref.mean[r][s] /= float64(nSteps[r])
			prevLag = l
		}
	}
	// Shares and the routing set (§3 eq.2, §4).
	pos := 0.0
	for _, a := range ref.adv {
		if a > 0 {
			pos += a
		}
	}
	order := []int{}
	for s, a := range ref.adv {
		if a > 0 {
			order = append(order, s)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case ref.adv[a] > ref.adv[b]:
			return -1
		case ref.adv[a] < ref.adv[b]:
			return 1
		}
		return 0
	})
	if pos > 0 && ref.exposed >= cfg.DenominatorFloorMS {
		ref.share = make([]float64, S)
		for s, a := range ref.adv {
			ref.share[s] = max(a, 0) / pos
		}
	}
	cum := 0.0
	for _, s := range order {
		ref.routing = append(ref.routing, w.Schema.Stages[s])
		cum += max(ref.adv[s], 0) / pos
		if cum >= cfg.CandidateThreshold-1e-12 {
			break
		}
	}
	if len(order) > 0 {
		ref.top1 = w.Schema.Stages[order[0]]
	}
	// Stage evidence: typical slack, the tail it grows by, the typical
	// rank's own stage time, and the leader counts behind the gate.
	ref.typicalLag, ref.tail, ref.typicalDur = make([]float64, S), make([]float64, S), make([]float64, S)
	ref.material, ref.confident, ref.candidate = make([]int, S), make([]int, S), make([]int, S)
	ref.leads, ref.tieSteps = make([]int, S), make([]int, S)
	for s := 0; s < S; s++ {
		var lags, durs []float64
		for r := 0; r < R; r++ {
			if nSteps[r] > 0 {
				lags = append(lags, ref.lag[r][s]/float64(nSteps[r]))
				durs = append(durs, ref.mean[r][s])
			}
		}
		ref.typicalLag[s], ref.typicalDur[s] = upperMid(lags), upperMid(durs)
		ref.tail[s] = ref.typicalLag[s]
		if s > 0 {
			ref.tail[s] -= ref.typicalLag[s-1]
		}
		counts := make([]int, R)
		for ti := 0; ti < T; ti++ {
			a := ref.series[ti].AdvanceMS[s]
			if a < max(cfg.LeaderGapMS, cfg.LeaderGapRel*ref.series[ti].ExposedMS) || a <= 0 {
				continue
			}
			ref.material[s]++
			// Tie-set size at this boundary, recounted from the prefixes.
			thr := F[ti][s] - tieRel*math.Abs(F[ti][s])
			n := 0
			for r := 0; r < R; r++ {
				if present(ti, r) && prefix(w, ti, r, s) >= thr {
					n++
				}
			}
			if n > 1 {
				ref.tieSteps[s]++
			}
			if l := confLeader[ti][s]; l >= 0 {
				counts[l]++
				ref.confident[s]++
			}
		}
		ref.candidate[s] = -1
		best := 0
		for r, c := range counts {
			if c > best {
				best, ref.candidate[s] = c, w.Ranks[r].Rank
			}
		}
		ref.leads[s] = best
	}
	// Switches between confident leaders at the top-1 boundary (App. C).
	ref.switchStage = slices.Index(w.Schema.Stages, ref.top1)
	if ref.switchStage >= 0 {
		last := -1
		for ti := 0; ti < T; ti++ {
			if l := confLeader[ti][ref.switchStage]; l >= 0 {
				if last >= 0 && l != last {
					ref.switches++
				}
				last = l
			}
		}
	}
	return ref
}

func prefix(w *stagevec.Window, ti, r, s int) float64 {
	p := 0.0
	for k := 0; k <= s; k++ {
		p += w.At(ti, r, k)
	}
	return p
}

// relClose: equal up to 1e-9 relative (absolute below 1 ms), for sums the
// engine accumulates in another order (Σ_t F − Σ_t P for Σ_t (F − P)).
func relClose(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// checkAgainstReference compares Analyze with the naive computation.
func checkAgainstReference(t *testing.T, name string, w *stagevec.Window) {
	t.Helper()
	cfg := DefaultConfig()
	if err := diffReference(w, analyzeOK(t, w, cfg), naiveAnalyze(t, w, cfg)); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// diffReference returns the first difference between rep and ref: what
// both sum in step order must match exactly, the rest to 1e-9.
func diffReference(w *stagevec.Window, rep *Report, ref *reference) (err error) {
	type found struct{ error }
	// fail unwinds to here, so a length mismatch cannot index past the end.
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(found)
			if !ok {
				panic(r)
			}
			err = f.error
		}
	}()
	fail := func(format string, args ...any) { panic(found{fmt.Errorf(format, args...)}) }
	if rep.ExposedMS != ref.exposed {
		fail("exposed %v, reference %v", rep.ExposedMS, ref.exposed)
	}
	if !slices.Equal(rep.AdvanceMS, ref.adv) {
		fail("advances %v, reference %v", rep.AdvanceMS, ref.adv)
	}
	if len(rep.Share) != len(ref.share) {
		fail("shares %v, reference %v", rep.Share, ref.share)
	}
	for s := range ref.share {
		if !relClose(rep.Share[s], ref.share[s]) {
			fail("share[%d] %v, reference %v", s, rep.Share[s], ref.share[s])
		}
	}
	if !slices.Equal(rep.Routing, ref.routing) || rep.Top1 != ref.top1 {
		fail("routing %v top1 %q, reference %v %q", rep.Routing, rep.Top1, ref.routing, ref.top1)
	}
	if len(rep.StepSeries) != len(ref.series) {
		fail("%d series points, reference %d", len(rep.StepSeries), len(ref.series))
	}
	for i, p := range ref.series {
		q := rep.StepSeries[i]
		if q.Step != p.Step || q.ExposedMS != p.ExposedMS || !slices.Equal(q.AdvanceMS, p.AdvanceMS) ||
			q.LeaderRank != p.LeaderRank || q.TieSize != p.TieSize || q.GapMS != p.GapMS {
			fail("step %d: %+v, reference %+v", p.Step, q, p)
		}
	}
	for r, rs := range rep.Ranks {
		if rs.Rank != w.Ranks[r].Rank || !relClose(rs.TotalMS, ref.total[r]) {
			fail("rank %d: id %d total %v, reference %v", r, rs.Rank, rs.TotalMS, ref.total[r])
		}
		if !slices.Equal(rs.LeadCount, ref.lead[r]) {
			fail("rank %d lead counts %v, reference %v", rs.Rank, rs.LeadCount, ref.lead[r])
		}
		for s := range rs.LagMS {
			if !relClose(rs.LagMS[s], ref.lag[r][s]) || !relClose(rs.DeltaLagMS[s], ref.dlag[r][s]) || !relClose(rs.MeanStageMS[s], ref.mean[r][s]) {
				fail("rank %d stage %d: lag %v Δlag %v mean %v, reference %v %v %v", rs.Rank, s,
					rs.LagMS[s], rs.DeltaLagMS[s], rs.MeanStageMS[s], ref.lag[r][s], ref.dlag[r][s], ref.mean[r][s])
			}
		}
	}
	T, R, _ := w.Dims()
	for k, want := range ref.gain {
		// Past the sampling caps the engine's medians are subsampled by
		// design (gain.go); the reference takes exact ones.
		if k == BaselineCohortMedian && R > cohortMedianCap || k == BaselineRankMedian && T > rankMedianCap {
			continue
		}
		got := rep.GainMS[k]
		for s := range want {
			if !relClose(got[s], want[s]) {
				fail("gain %s[%d] %v, reference %v", k, s, got[s], want[s])
			}
		}
	}
	for _, b := range rep.Baselines {
		want := ref.baseline[b.Method]
		for s := range want {
			if !relClose(b.Score[s], want[s]) {
				fail("baseline %s[%d] %v, reference %v", b.Method, s, b.Score[s], want[s])
			}
		}
	}
	if rep.LeaderSwitches != ref.switches {
		fail("leader switches %d, reference %d", rep.LeaderSwitches, ref.switches)
	}
	for s, ev := range rep.Evidence {
		if !relClose(ev.TypicalLagMS, ref.typicalLag[s]) || !relClose(ev.TailMS, ref.tail[s]) || !relClose(ev.TypicalStageMS, ref.typicalDur[s]) {
			fail("stage %d evidence typical lag %v tail %v typical stage %v, reference %v %v %v", s,
				ev.TypicalLagMS, ev.TailMS, ev.TypicalStageMS, ref.typicalLag[s], ref.tail[s], ref.typicalDur[s])
		}
		l := ev.Leader
		if ev.Leader.Withheld == WithheldSingleRank {
			continue
		}
		if l.MaterialSteps != ref.material[s] || l.ConfidentSteps != ref.confident[s] || l.TieSteps != ref.tieSteps[s] {
			fail("stage %d: material %d confident %d tie steps %d, reference %d %d %d", s,
				l.MaterialSteps, l.ConfidentSteps, l.TieSteps, ref.material[s], ref.confident[s], ref.tieSteps[s])
		}
		if l.MaterialSteps > 0 && (l.Candidate != ref.candidate[s] || l.Leads != ref.leads[s]) {
			fail("stage %d: candidate %d with %d leads, reference %d with %d", s, l.Candidate, l.Leads, ref.candidate[s], ref.leads[s])
		}
	}
	return nil
}

// Analyze equals the naive reference on simulated DDP windows — clear
// stragglers, an absorbed backward fault, a tie, a callback barrier,
// missing cells, several rank blocks — and on random windows with exact
// ties (integer durations) and rare spikes.
func TestAnalyzeMatchesNaiveReference(t *testing.T) {
	tie := func(t, r int) [5]float64 {
		var ex [5]float64
		if t >= 10 && (r == 1 || r == 3) {
			ex[simData] = 60
		}
		return ex
	}
	sims := []struct {
		name     string
		s        ddpSim
		from, to int64
		drop     func(step int64, rank int) bool
	}{
		{"data straggler 8", ddpSim{R: 8, T: 60, seed: 1, extra: after(20, 2, simData, 90)}, 10, 59, nil},
		{"data straggler 64, onset inside", ddpSim{R: 64, T: 40, seed: 2, extra: after(20, 41, simData, 30)}, 0, 39, nil},
		{"backward absorbed", ddpSim{R: 8, T: 50, seed: 7, extra: after(10, 4, simBwd, 120)}, 0, 49, nil},
		{"tie", ddpSim{R: 8, T: 40, seed: 11, extra: tie}, 10, 39, nil},
		{"callback barrier", ddpSim{R: 16, T: 30, seed: 3, extra: after(0, 5, simCb, 50), cbBarrier: true}, 0, 29, nil},
		{"missing cells", ddpSim{R: 12, T: 40, seed: 5, extra: after(0, 7, simFwd, 40)}, 0, 39,
			func(step int64, rank int) bool { return rank == 3 && step%4 == 1 || rank == 9 && step > 30 }},
		{"1024 ranks", ddpSim{R: 1024, T: 12, seed: 8, extra: after(0, 641, simData, 30)}, 0, 11, nil},
		{"3000 ranks, two sweep blocks", ddpSim{R: 3000, T: 4, seed: 9, extra: after(0, 2999, simOpt, 20)}, 0, 3, nil},
	}
	for _, c := range sims {
		var vs []*stagevec.Vector
		for _, v := range c.s.vectors() {
			if c.drop == nil || !c.drop(v.Step, v.Rank) {
				vs = append(vs, v)
			}
		}
		w := assemble(t, testJob(c.s.R, 1), AssembleOptions{FromStep: c.from, ToStep: c.to}, vs...)
		if c.drop != nil && w.Present == nil {
			t.Fatalf("%s: fixture has no missing cells", c.name)
		}
		checkAgainstReference(t, c.name, w)
	}
	rng := rand.New(rand.NewPCG(77, 78))
	for i, sh := range [][2]int{{5, 3}, {20, 17}, {9, 130}} {
		w := randWindow(rng, sh[0], sh[1])
		checkAgainstReference(t, fmt.Sprintf("random %d", i), w)
		for j := range w.D { // integer durations: many exact ties
			w.D[j] = float64(rng.IntN(3))
		}
		checkAgainstReference(t, fmt.Sprintf("random ties %d", i), w)
	}
}

// The comparison is only worth something if it can disagree: one lead
// miscounted, one lag off by a part in 1e6, or one cell changed after the
// report was computed must each be caught.
func TestNaiveReferenceDetectsDifferences(t *testing.T) {
	w := ddpSim{R: 8, T: 30, seed: 1, extra: after(0, 2, simData, 90)}.window(t, 0, 29)
	cfg := DefaultConfig()
	ref := naiveAnalyze(t, w, cfg)
	if ref.candidate[0] != 2 {
		t.Fatalf("reference data candidate %d, want the straggler rank 2", ref.candidate[0])
	}
	for name, spoil := range map[string]func(*Report){
		"lead count": func(r *Report) { r.Ranks[5].LeadCount[2]++ },
		"lag":        func(r *Report) { r.Ranks[0].LagMS[0] *= 1 + 1e-6 },
		"leader":     func(r *Report) { r.StepSeries[7].LeaderRank = (r.StepSeries[7].LeaderRank + 1) % 8 },
		"gain":       func(r *Report) { r.GainMS[BaselineCohortMedian][0] += 0.01 },
	} {
		rep := analyzeOK(t, w, cfg)
		if err := diffReference(w, rep, ref); err != nil {
			t.Fatalf("unspoiled report differs: %v", err)
		}
		spoil(rep)
		if diffReference(w, rep, ref) == nil {
			t.Errorf("a spoiled %s went unnoticed", name)
		}
	}
	rep := analyzeOK(t, w, cfg)
	w.D[(5*8+2)*6+0] += 1000 // rank 2's data wait at step 5, after the report
	if diffReference(w, rep, naiveAnalyze(t, w, cfg)) == nil {
		t.Error("a changed cell went unnoticed")
	}
}
