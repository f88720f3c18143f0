package greyhound

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Link is one P2P transfer of a validation pass (global ranks).
type Link struct {
	Src int `json:"src"`
	Dst int `json:"dst"`
}

// GEMMTest is the computation validation (§4.3 1): every listed rank runs
// Reps N×N matrix products of Dtype.
type GEMMTest struct {
	Ranks []int  `json:"ranks"`
	N     int    `json:"n"`
	Dtype string `json:"dtype"`
	Reps  int    `json:"reps"`
}

// P2PTest is the communication validation (§4.3 2): pass after pass, the
// links of a pass transfer simultaneously, each size Reps times, smallest
// size first. Two limits bound the pause (issue 16): a pass stops — its
// remaining repetitions and sizes skipped by every rank together — once it
// has run PassBudgetMS, or after a size on which its slowest transfer's
// best repetition took StopRatio times the fastest transfer's worst (that
// link is proven slow; larger sizes would only take longer). A transfer
// in flight always completes: gloo cannot cancel one.
type P2PTest struct {
	SizesBytes   []int64  `json:"sizes_bytes"`
	Reps         int      `json:"reps"`
	Passes       [][]Link `json:"passes"`
	PassBudgetMS int64    `json:"pass_budget_ms,omitempty"`
	StopRatio    float64  `json:"stop_ratio,omitempty"`
}

// Plan is a validation plan (contract §3). ID and AtStep are set by the
// controller that publishes it. BudgetMS caps the benchmarks (GEMM and
// every pass) once every rank has agreed to run them: training pauses
// for at most the agreement plus this.
type Plan struct {
	ID         string   `json:"id"`
	AtStep     int64    `json:"at_step"`
	DeadlineMS int64    `json:"deadline_ms"`
	BudgetMS   int64    `json:"budget_ms,omitempty"`
	GEMM       GEMMTest `json:"gemm"`
	P2P        P2PTest  `json:"p2p"`
}

// RingPasses splits the ring over ranks (in ring order, i → i+1 mod n)
// into passes in which no rank takes part in two transfers (Fig. 10 left
// and centre): even n in two passes (even → next, then odd → next), odd n
// in three (the wrap-around link n−1 → 0 alone last). NCCL's ring moves
// data one way per channel, so each ring link is tested in the ring's
// direction.
func RingPasses(ranks []int) [][]Link {
	n := len(ranks)
	if n < 2 {
		return nil
	}
	var p0, p1, p2 []Link
	for i := 0; i < n; i++ {
		l := Link{ranks[i], ranks[(i+1)%n]}
		switch {
		case n%2 == 1 && i == n-1:
			p2 = append(p2, l)
		case i%2 == 0:
			p0 = append(p0, l)
		default:
			p1 = append(p1, l)
		}
	}
	out := [][]Link{p0, p1}
	if len(p2) > 0 {
		out = append(out, p2)
	}
	return out
}

// TreeParent returns the parent of position r in the binary tree NCCL
// builds over n positions (rank 0 is the root with one child, the largest
// power of two below n; every other r with lowest set bit b has children
// r ± b/2): the neighbour r ± b whose lowest set bit is 2b, or r − b when
// that one is past the end. −1 for the root.
func TreeParent(r, n int) int {
	if r <= 0 || r >= n {
		return -1
	}
	b := r & -r
	top := 1 << (bits.Len(uint(n-1)) - 1)
	if r == top {
		return 0
	}
	up, down := r+b, r-b
	if up < n && up&-up == 2*b {
		return up
	}
	if down > 0 && down&-down == 2*b {
		return down
	}
	if down > 0 {
		return down
	}
	return 0
}

// TreePasses splits the tree's child → parent edges into the four passes
// of Fig. 10 (right): children at even depth that are left children (below
// their parent in position order), then even-depth right children, then
// the same at odd depth. In each pass a sender sends once and a parent
// receives from one child only, so no rank is in two transfers.
func TreePasses(ranks []int) [][]Link {
	n := len(ranks)
	if n < 2 {
		return nil
	}
	depth := make([]int, n)
	for r := 1; r < n; r++ {
		d := 0
		for q := r; q > 0; q = TreeParent(q, n) {
			d++
		}
		depth[r] = d
	}
	passes := make([][]Link, 4)
	for r := 1; r < n; r++ {
		p := TreeParent(r, n)
		i := 0
		if r > p {
			i = 1
		}
		if depth[r]%2 == 1 {
			i += 2
		}
		passes[i] = append(passes[i], Link{ranks[r], ranks[p]})
	}
	return passes
}

// PlanValidation builds the validation plan for the suspect groups
// (§4.3): the GEMM test on every suspect rank, and the ring and tree P2P
// passes of each group in its member order (NCCL picks ring or tree at
// run time, so both are tested). Passes of different groups are merged
// when their ranks are disjoint, and links already tested are dropped, so
// the pass count stays O(1) in the group size.
func PlanValidation(suspects []Group, cfg Config) Plan {
	p := Plan{DeadlineMS: cfg.DeadlineMS, BudgetMS: cfg.BudgetMS,
		GEMM: GEMMTest{N: cfg.GEMMN, Dtype: cfg.GEMMDtype, Reps: cfg.Reps},
		P2P:  P2PTest{SizesBytes: slices.Clone(cfg.P2PSizes), Reps: cfg.Reps, Passes: [][]Link{}, StopRatio: cfg.StopRatio}}
	rankSet := map[int]bool{}
	done := map[Link]bool{}
	var busy []map[int]bool
	add := func(pass []Link) {
		var fresh []Link
		for _, l := range pass {
			if !done[l] && l.Src != l.Dst {
				fresh = append(fresh, l)
			}
		}
		if len(fresh) == 0 {
			return
		}
		for i := range p.P2P.Passes {
			ok := true
			for _, l := range fresh {
				if busy[i][l.Src] || busy[i][l.Dst] {
					ok = false
					break
				}
			}
			if ok {
				for _, l := range fresh {
					p.P2P.Passes[i] = append(p.P2P.Passes[i], l)
					busy[i][l.Src], busy[i][l.Dst], done[l] = true, true, true
				}
				return
			}
		}
		b := map[int]bool{}
		for _, l := range fresh {
			b[l.Src], b[l.Dst], done[l] = true, true, true
		}
		p.P2P.Passes = append(p.P2P.Passes, fresh)
		busy = append(busy, b)
	}
	for _, g := range suspects {
		for _, r := range g.Ranks {
			rankSet[r] = true
		}
		for _, pass := range RingPasses(g.Ranks) {
			add(pass)
		}
		for _, pass := range TreePasses(g.Ranks) {
			add(pass)
		}
	}
	for r := range rankSet {
		p.GEMM.Ranks = append(p.GEMM.Ranks, r)
	}
	slices.Sort(p.GEMM.Ranks)
	if p.GEMM.Ranks == nil {
		p.GEMM.Ranks = []int{}
	}
	// The budget is shared by the GEMM (one share) and the passes.
	if n := len(p.P2P.Passes); n > 0 && p.BudgetMS > 0 {
		p.P2P.PassBudgetMS = max(p.BudgetMS/int64(n+1), 1)
	}
	return p
}

// P2PResult is one reporter's measurement of one transfer.
type P2PResult struct {
	Pass  int       `json:"pass"`
	Src   int       `json:"src"`
	Dst   int       `json:"dst"`
	Bytes int64     `json:"bytes"`
	MS    []float64 `json:"ms"`
}

// RankResult is one rank's validation report (contract §3).
// PausedFromNS/PausedToNS (0: not reported) is when the rank stopped
// training for the plan and resumed (its clock, the calls' clock): the
// iterations around the pause are no fail-slow (Analyze masks them).
type RankResult struct {
	Rank         int         `json:"rank"`
	Missed       bool        `json:"missed"`
	GEMMMS       []float64   `json:"gemm_ms"`
	P2P          []P2PResult `json:"p2p"`
	Error        string      `json:"error"`
	PausedFromNS int64       `json:"paused_from_ns,omitempty"`
	PausedToNS   int64       `json:"paused_to_ns,omitempty"`
}

// ValidationRun is a published plan and the results received so far.
type ValidationRun struct {
	Plan      Plan         `json:"plan"`
	Results   []RankResult `json:"results"`
	CreatedNS int64        `json:"created_ns"`
	// Expired: the deadline passed (the server decides from its clock).
	Expired bool `json:"expired"`
}

// VerdictKind classifies a verdict.
type VerdictKind string

const (
	VerdictSlowRank     VerdictKind = "slow_rank"
	VerdictSlowLink     VerdictKind = "slow_link"
	VerdictUniform      VerdictKind = "uniform"
	VerdictNone         VerdictKind = "none"
	VerdictInconclusive VerdictKind = "inconclusive"
	// VerdictLateRank: validation found every GEMM and link healthy, but
	// one rank enters collectives late (entry lateness): a host-side cause.
	VerdictLateRank VerdictKind = "late_rank"
)

// Confidence of a verdict.
type Confidence string

const (
	ConfidenceHigh Confidence = "high"
	ConfidenceLow  Confidence = "low"
)

// Verdict is the controller's conclusion. Its confidence follows from its
// Caveats by one rule (settle): high only when nothing limits the evidence
// shown with it. Text ends with the caveats in plain words.
type Verdict struct {
	Kind       VerdictKind `json:"kind"`
	Ranks      []int       `json:"ranks"`
	Links      []Link      `json:"links"`
	Text       string      `json:"text"`
	Confidence Confidence  `json:"confidence"`
	// Explanation: how much of the observed slowdown the named finding
	// can account for (nil when the verdict names nothing).
	Explanation *Explanation `json:"explanation,omitempty"`
	// Caveats are what keeps the confidence low, in plain words.
	Caveats []string `json:"caveats,omitempty"`
}

// GEMMView and LinkView are the judged measurements shown in reports.
// Ratio is the measurement over the healthy reference (the median of the
// faster half); Separated says that even its fastest repetition was
// slower than every repetition of every reference rank or transfer (it
// stands out of the benchmark's own noise).
// Clear: separated by more than the healthy ones' own repetition spread
// (else a verdict naming it is low confidence: it may be the unluckiest
// healthy one).
type GEMMView struct {
	Rank      int     `json:"rank"`
	MS        float64 `json:"ms"`
	Ratio     float64 `json:"ratio"`
	Slow      bool    `json:"slow"`
	Separated bool    `json:"separated,omitempty"`
	Clear     bool    `json:"clear,omitempty"`
}

type LinkView struct {
	Src       int     `json:"src"`
	Dst       int     `json:"dst"`
	MS        float64 `json:"ms"`
	Ratio     float64 `json:"ratio"`
	Slow      bool    `json:"slow"`
	Separated bool    `json:"separated,omitempty"`
	Clear     bool    `json:"clear,omitempty"`
	// Sizes measured (a pass cut short by its budget, or after proving a
	// link slow, measures fewer than planned).
	Sizes int `json:"sizes,omitempty"`
}

// Judgement is Judge's full output: the verdict and the measurements.
type Judgement struct {
	Verdict Verdict    `json:"verdict"`
	GEMM    []GEMMView `json:"gemm"`
	Links   []LinkView `json:"links"`
	// Complete: every rank of the plan reported without missing it.
	Complete bool `json:"complete"`
	// Reported and Planned count the ranks (for the caveat's words);
	// Thin: a slow link was compared within fewer than 3 links; Explained
	// are slow links a slow rank accounts for; Errors are the ranks'
	// error strings.
	Reported int      `json:"-"`
	Planned  int      `json:"-"`
	Thin     bool     `json:"-"`
	Limit    float64  `json:"-"`
	Explain  []Link   `json:"-"`
	Errors   []string `json:"-"`
}

// Judge identifies slow ranks and links from validation results (§4.3);
// see JudgeAll.
func Judge(plan Plan, results []RankResult, cfg Config) Verdict {
	return JudgeAll(plan, results, cfg).Verdict
}

// rep is one measurement's fastest, median and slowest valid repetition.
type rep struct{ best, mid, worst float64 }

func repOf(xs []float64) (rep, bool) {
	var ok []float64
	for _, x := range xs {
		if x >= 0 && x < 1e12 {
			ok = append(ok, x)
		}
	}
	if len(ok) == 0 {
		return rep{}, false
	}
	slices.Sort(ok)
	return rep{best: ok[0], mid: medianSigned(ok), worst: ok[len(ok)-1]}, true
}

// JudgeAll identifies slow ranks and links from validation results (§4.3:
// slow when beyond the median by more than SlowRel). On shared hardware
// healthy measurements differ threefold between passes and ±25 % between
// repetitions, and the plain rule names healthy links; a reference made
// of the very transfers of a faulty rank calls that rank's links normal
// (issue 16: a throttled rank's two tree links scored ×1.00 because their
// size class held only them). So, keeping SlowRel as the floor:
//
//   - every measurement is its best repetition (the least disturbed run; a
//     degraded device is slow on all of them), the slower of what the two
//     ends of a transfer report;
//   - GEMM is referenced to the median of the faster half of the ranks;
//     a transfer to an expected rate — the median bytes/s of the faster
//     half of the transfers of all sizes that ran with as many others at
//     once (a transfer alone in its pass runs uncontended) — unless those
//     transfers all share one rank or come from fewer than two links, in
//     which case the rate of every transfer of the plan is the reference:
//     a class cannot be its own reference when one rank may slow all of
//     it;
//   - the limit is 1 + SlowRel or the healthy spread (slowLimit);
//   - noise: a rank or transfer counts only when its fastest repetition is
//     slower than the slowest repetition of every reference rank or
//     transfer (separated; chance does that to 3 repetitions against 3
//     one time in 20, on all three sizes one in 8,000);
//   - a rank slow at GEMM explains the slow transfers that touch it.
//
// Fewer than two comparable measurements, or none, make it inconclusive.
func JudgeAll(plan Plan, results []RankResult, cfg Config) Judgement {
	var j Judgement
	want := map[int]bool{}
	for _, r := range plan.GEMM.Ranks {
		want[r] = true
	}
	conc := map[Link]int{}
	for _, pass := range plan.P2P.Passes {
		for _, l := range pass {
			want[l.Src], want[l.Dst] = true, true
			conc[l] = len(pass)
		}
	}
	got := map[int]bool{}
	gemm := map[int]*rep{}
	type lk struct {
		l     Link
		bytes int64
	}
	xfer := map[lk]*rep{}
	for _, r := range results {
		if r.Missed || r.Error != "" {
			if r.Error != "" {
				j.Errors = append(j.Errors, fmt.Sprintf("rank %d: %s", r.Rank, r.Error))
			}
			continue
		}
		got[r.Rank] = true
		if g, ok := repOf(r.GEMMMS); ok {
			gemm[r.Rank] = &g
		}
		for _, p := range r.P2P {
			m, ok := repOf(p.MS)
			if !ok {
				continue
			}
			k := lk{Link{p.Src, p.Dst}, p.Bytes}
			if o := xfer[k]; o != nil { // src and dst both report: the slower view
				m.best, m.mid, m.worst = max(m.best, o.best), max(m.mid, o.mid), max(m.worst, o.worst)
			}
			xfer[k] = &m
		}
	}
	j.Planned, j.Reported = len(want), len(got)
	j.Complete = len(want) > 0
	for r := range want {
		if !got[r] {
			j.Complete = false
		}
	}

	// GEMM against the healthy ranks (gemmRef).
	var slowRanks []int
	{
		bests := make([]float64, 0, len(gemm))
		for _, g := range gemm {
			bests = append(bests, g.best)
		}
		ref := gemmRef(bests, cfg.SlowRel)
		var us []unit[int]
		for r, g := range gemm {
			us = append(us, unit[int]{r, *g})
		}
		sep, spread := standOut(us, ref, cfg.SlowRel)
		// The limit from the spread of the ranks whose repetitions overlap
		// the reference's (as for links: slow ranks cannot widen it).
		var ratios []float64
		for i, u := range us {
			v := GEMMView{Rank: u.owner, MS: u.best}
			if ref > 0 {
				v.Ratio = u.best / ref
			}
			v.Separated, v.Clear = sep[i].out, sep[i].clear
			if !v.Separated && ref > 0 {
				ratios = append(ratios, v.Ratio)
			}
			j.GEMM = append(j.GEMM, v)
		}
		// Noise-aware: a rank is slow when it is beyond 1 + SlowRel and the
		// ranks' own repetition spread (a best-of-3 differs from rank to
		// rank by about that much), and stands out of the healthy ranks'
		// repetitions — clearly (by more than that spread), or else it
		// must also pass the cross-rank spread, read on the ranks that do
		// not stand out when there are enough of them, else on all as
		// §4.3's median would: one GEMM size is weak evidence on its own
		// (three repetitions clear six by chance once in 84), unlike a
		// link, which must stand out on every size.
		floor := max(1+cfg.SlowRel, spread)
		if len(ratios) < 3 {
			ratios = ratios[:0]
			for _, v := range j.GEMM {
				ratios = append(ratios, v.Ratio)
			}
		}
		limit := max(slowLimit(ratios, cfg.SlowRel), floor)
		for i := range j.GEMM {
			v := &j.GEMM[i]
			v.Slow = len(gemm) >= 2 && ref > 0 && v.Separated && v.Ratio > floor && (v.Clear || v.Ratio > limit)
			if v.Slow {
				slowRanks = append(slowRanks, v.Rank)
			}
		}
		slices.SortFunc(j.GEMM, func(a, b GEMMView) int { return cmp.Compare(a.Rank, b.Rank) })
		slices.Sort(slowRanks)
		j.Limit = floor
	}

	// Transfers against an expected rate. A transfer's cost is its time
	// per byte (ms/B; the 16–64 MB messages make latency negligible).
	type pool struct {
		ref    float64
		links  int
		sep    map[lk]standing // how each transfer stands out of the pool's noise
		spread float64         // its healthy transfers' repetition spread
	}
	perByte := func(k lk, x float64) float64 { return x / float64(k.bytes) }
	byConc := map[int][]lk{}
	for k := range xfer {
		byConc[conc[k.l]] = append(byConc[conc[k.l]], k)
	}
	all := make([]lk, 0, len(xfer))
	for k := range xfer {
		all = append(all, k)
	}
	mkPool := func(ks []lk) *pool {
		costs := make([]float64, len(ks))
		distinct := map[Link]bool{}
		us := make([]unit[Link], len(ks))
		for i, k := range ks {
			costs[i] = perByte(k, xfer[k].best)
			distinct[k.l] = true
			m := xfer[k]
			us[i] = unit[Link]{k.l, rep{perByte(k, m.best), perByte(k, m.mid), perByte(k, m.worst)}}
		}
		pl := &pool{ref: fasterHalfMedian(costs), links: len(distinct), sep: map[lk]standing{}}
		st, spread := standOut(us, pl.ref, cfg.SlowRel)
		for i, out := range st {
			pl.sep[ks[i]] = out
		}
		pl.spread = spread
		return pl
	}
	var everyPool *pool
	if len(all) > 0 {
		everyPool = mkPool(all)
	}
	pools := map[int]*pool{}
	for c, ks := range byConc {
		ls := map[Link]bool{}
		var lsl []Link
		for _, k := range ks {
			if !ls[k.l] {
				ls[k.l] = true
				lsl = append(lsl, k.l)
			}
		}
		_, shared := commonEnd(lsl)
		if len(lsl) >= 2 && !shared {
			pools[c] = mkPool(ks)
		} else {
			pools[c] = everyPool
		}
	}
	type agg struct {
		ratios, ms []float64
		sep, clear int
		pool       *pool
	}
	links := map[Link]*agg{}
	for _, k := range all {
		pl := pools[conc[k.l]]
		a := links[k.l]
		if a == nil {
			a = &agg{pool: pl}
			links[k.l] = a
		}
		m := xfer[k]
		if pl.ref > 0 {
			a.ratios = append(a.ratios, perByte(k, m.best)/pl.ref)
		}
		a.ms = append(a.ms, m.best)
		if pl.sep[k].out {
			a.sep++
		}
		if pl.sep[k].clear {
			a.clear++
		}
	}
	// One limit from the spread of the links that look healthy — their
	// repetitions overlap the reference's — each against its own
	// reference: slow links cannot widen it, however many share a pass
	// (half of a ring's links touch a faulty rank). Links referenced to
	// every transfer of the plan are not like-for-like (uncontended ones
	// run up to 3× faster) and count only when too few others do.
	var linkRatios, fallback []float64
	for _, a := range links {
		if len(a.ratios) == 0 || a.sep == len(a.ms) {
			continue
		}
		r := medianSigned(slices.Clone(a.ratios))
		if a.pool == everyPool {
			fallback = append(fallback, r)
		} else {
			linkRatios = append(linkRatios, r)
		}
	}
	if len(linkRatios) < 3 {
		linkRatios = append(linkRatios, fallback...)
	}
	linkLimit := slowLimit(linkRatios, cfg.SlowRel)
	slowRank := map[int]bool{}
	for _, r := range slowRanks {
		slowRank[r] = true
	}
	var slowLinks []Link
	for l, a := range links {
		v := LinkView{Src: l.Src, Dst: l.Dst, MS: medianSigned(slices.Clone(a.ms)), Sizes: len(a.ms)}
		if len(a.ratios) > 0 {
			v.Ratio = medianSigned(slices.Clone(a.ratios))
		}
		v.Separated, v.Clear = a.sep == len(a.ms), a.clear == len(a.ms)
		v.Slow = len(links) >= 2 && v.Ratio > max(linkLimit, a.pool.spread) && v.Separated
		switch {
		case v.Slow && (slowRank[l.Src] || slowRank[l.Dst]):
			// A rank slow at GEMM is slow at everything its CPU or GPU
			// drives, its transfers included: the rank explains the link.
			j.Explain = append(j.Explain, l)
		case v.Slow:
			slowLinks = append(slowLinks, l)
			j.Thin = j.Thin || a.pool.links < 3
		}
		j.Links = append(j.Links, v)
	}
	slices.SortFunc(j.Links, func(a, b LinkView) int { return cmpLink(Link{a.Src, a.Dst}, Link{b.Src, b.Dst}) })
	slices.SortFunc(slowLinks, cmpLink)
	slices.SortFunc(j.Explain, cmpLink)

	// The validation's own verdict (what the benchmarks say, without the
	// episode: Conclude weighs it against the slowdown).
	var caveats []string
	if !j.Complete && len(want) > 0 {
		caveats = append(caveats, fmt.Sprintf("results from %d of %d ranks", len(got), len(want)))
	}
	comparable := len(gemm) >= 2 || len(links) >= 2
	var v Verdict
	switch {
	case len(slowRanks) > 0:
		text := fmt.Sprintf("GEMM validation: rank(s) %s slower than the healthy ranks (of %d) by more than %.0f%%, outside the spread of their repetitions (best of %d)", joinInts(slowRanks), len(gemm), 100*(j.Limit-1), max(plan.GEMM.Reps, 1))
		if len(j.Explain) > 0 {
			text += fmt.Sprintf("; its links %s are slow too, as a slow rank's transfers are", joinLinks(j.Explain))
		}
		if len(slowLinks) > 0 {
			text += fmt.Sprintf("; slow link(s) %s too", joinLinks(slowLinks))
		}
		v = newVerdict(VerdictSlowRank, slowRanks, slowLinks, text, caveats)
	case len(slowLinks) > 0:
		text := fmt.Sprintf("P2P validation: link(s) %s slower than the expected rate of healthy transfers by more than %.0f%%, outside the spread of their repetitions (best of %d)", joinLinks(slowLinks), 100*(linkLimit-1), max(plan.P2P.Reps, 1))
		if r, ok := commonEnd(slowLinks); ok && len(slowLinks) >= 2 {
			text += fmt.Sprintf("; every slow link touches rank %d: suspect its network path (NIC, cable, switch port)", r)
		}
		// Against one or two other links a fixed difference between
		// paths (a cross-socket or cross-node pair) passes the tests as
		// readily as a fault does.
		if j.Thin || len(links) < 3 {
			caveats = append(caveats, "compared within fewer than 3 links of its kind")
		}
		v = newVerdict(VerdictSlowLink, nil, slowLinks, text, caveats)
	case !comparable:
		v = newVerdict(VerdictInconclusive, nil, nil, fmt.Sprintf("validation results from %d of %d ranks: too few to compare", len(got), len(want)), nil)
	default:
		v = newVerdict(VerdictNone, nil, nil, fmt.Sprintf("validation found every tested rank's GEMM (%d) and link (%d) within the healthy range", len(gemm), len(links)), caveats)
	}
	if len(j.Errors) > 0 {
		v.Text += "; errors: " + strings.Join(j.Errors, "; ")
	}
	j.Verdict = v
	return j
}

func cmpLink(a, b Link) int { return cmp.Or(cmp.Compare(a.Src, b.Src), cmp.Compare(a.Dst, b.Dst)) }

// unit is one measured rank or transfer and its owner (the rank, or the
// link: a link's transfers of several sizes are one owner).
type unit[O comparable] struct {
	owner O
	rep
}

// standing is how one unit stands against the healthy ones.
type standing struct {
	out bool // its fastest repetition is slower than every healthy one
	// clear: by more than the units' own repetition spread: a rank that
	// is merely the unluckiest of the healthy ones clears its neighbours
	// by a hair.
	clear bool
}

// standOut reports, per unit, whether even its fastest repetition was
// slower than the slowest repetition of every healthy unit of another
// owner — it stands out of the benchmark's own noise. Healthy is first
// every unit within the paper's 10 % (rel) of the reference (the median of
// the faster half, so up to half of the units may be slow), then also
// every unit that does not stand out of the healthy ones, until that
// settles: a healthy rank that ran slow once is noise the others must
// beat. Each round is linear in the units (the two worst owners are
// kept), so a 1,024-rank plan with ~4,000 links per size stays cheap;
// rounds only add healthy units. It also returns the units' own
// repetition spread: the median over units of their slowest repetition
// over their fastest (noise is multiplicative, so a slow unit's spread
// measures it too).
func standOut[O comparable](us []unit[O], ref, rel float64) ([]standing, float64) {
	healthy := make([]bool, len(us))
	for i, u := range us {
		healthy[i] = u.best <= ref*(1+rel)
	}
	out := make([]standing, len(us))
	limit := make([]float64, len(us)) // the healthy worst a unit must beat
	for changed := true; changed; {
		worst := map[O]float64{}
		for i, u := range us {
			if healthy[i] {
				worst[u.owner] = max(worst[u.owner], u.worst)
			}
		}
		var w1, w2 float64
		var o1 O
		for o, w := range worst {
			switch {
			case w > w1:
				w2, w1, o1 = w1, w, o
			case w > w2:
				w2 = w
			}
		}
		changed = false
		for i, u := range us {
			limit[i] = w1
			if o1 == u.owner {
				limit[i] = w2
			}
			out[i].out = limit[i] > 0 && u.best > limit[i]
			if !out[i].out && !healthy[i] {
				healthy[i], changed = true, true
			}
		}
	}
	var spreads []float64
	for _, u := range us {
		if u.best > 0 {
			spreads = append(spreads, u.worst/u.best)
		}
	}
	spread := 1.0
	if len(spreads) > 0 {
		spread = medianSigned(spreads)
	}
	for i, u := range us {
		out[i].clear = out[i].out && u.best > limit[i]*spread
	}
	return out, spread
}

// gemmRef is the healthy GEMM time: the median of the ranks within
// SlowRel of the median when they are a majority — one GPU or CPU is one
// rank, so a fault slows few of them, and a rank that runs faster (alone
// on its core, a cooler GPU) is no reason to call the others slow — else
// (no majority around the median: two of four ranks hogged put it between
// the groups) the median of the faster half, so the slow ranks cannot set
// it. Transfers use the faster half always: one faulty rank touches most
// of the links of a small ring.
func gemmRef(bests []float64, rel float64) float64 {
	if len(bests) == 0 {
		return 0
	}
	med := medianSigned(slices.Clone(bests))
	var near []float64
	for _, b := range bests {
		if med > 0 && b <= med*(1+rel) && b >= med/(1+rel) {
			near = append(near, b)
		}
	}
	if 2*len(near) > len(bests) {
		return medianSigned(near)
	}
	return fasterHalfMedian(bests)
}

// fasterHalfMedian is the median of the faster half of xs (the healthy
// reference while at most half are degraded).
func fasterHalfMedian(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return medianSigned(ys[:(len(ys)+1)/2])
}

// slowLimit is the ratio to the median beyond which a rank or link is
// slow: the paper's 1 + rel (§4.3), widened to the spread the healthy
// majority shows on this job, so a noisy host (a CPU job's loopback
// transfers differ threefold between links) does not name a healthy link
// while a quiet one (NVLink, a dedicated NIC) keeps the 10% sensitivity.
// The spread is read on the fast side of the median and mirrored: slow
// outliers cannot widen it (unlike a MAD, which 2 slow links of 6 inflate
// past a 7× link), and while fewer than half of the measurements are
// degraded the fast side is all healthy. The fastest (for n > 10 the
// 10th percentile) sets it, and its log distance is doubled: with a
// handful of links the slowest healthy one is as likely an extreme as
// the fastest, and naming a healthy link is the worse error.
func slowLimit(ratios []float64, rel float64) float64 {
	base := 1 + rel
	var rs []float64
	for _, r := range ratios {
		if r > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) < 3 {
		return base
	}
	slices.Sort(rs)
	med := medianSigned(slices.Clone(rs))
	lo := rs[(len(rs)-1)/10]
	w := med / lo
	return max(base, w*w)
}

// commonEnd is the rank every link touches, if there is one.
func commonEnd(ls []Link) (int, bool) {
	if len(ls) == 0 {
		return 0, false
	}
	for _, r := range []int{ls[0].Src, ls[0].Dst} {
		all := true
		for _, l := range ls {
			if l.Src != r && l.Dst != r {
				all = false
				break
			}
		}
		if all {
			return r, true
		}
	}
	return 0, false
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func joinLinks(ls []Link) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = fmt.Sprintf("%d→%d", l.Src, l.Dst)
	}
	return strings.Join(s, ",")
}
