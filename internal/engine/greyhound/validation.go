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
// links of a pass transfer simultaneously, each size Reps times.
type P2PTest struct {
	SizesBytes []int64  `json:"sizes_bytes"`
	Reps       int      `json:"reps"`
	Passes     [][]Link `json:"passes"`
}

// Plan is a validation plan (contract §3). ID and AtStep are set by the
// controller that publishes it.
type Plan struct {
	ID         string   `json:"id"`
	AtStep     int64    `json:"at_step"`
	DeadlineMS int64    `json:"deadline_ms"`
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
	p := Plan{DeadlineMS: cfg.DeadlineMS,
		GEMM: GEMMTest{N: cfg.GEMMN, Dtype: cfg.GEMMDtype, Reps: cfg.Reps},
		P2P:  P2PTest{SizesBytes: slices.Clone(cfg.P2PSizes), Reps: cfg.Reps, Passes: [][]Link{}}}
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
type RankResult struct {
	Rank   int         `json:"rank"`
	Missed bool        `json:"missed"`
	GEMMMS []float64   `json:"gemm_ms"`
	P2P    []P2PResult `json:"p2p"`
	Error  string      `json:"error"`
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

// Verdict is the controller's conclusion.
type Verdict struct {
	Kind       VerdictKind `json:"kind"`
	Ranks      []int       `json:"ranks"`
	Links      []Link      `json:"links"`
	Text       string      `json:"text"`
	Confidence Confidence  `json:"confidence"`
}

// GEMMView and LinkView are the judged measurements shown in reports.
type GEMMView struct {
	Rank  int     `json:"rank"`
	MS    float64 `json:"ms"`
	Ratio float64 `json:"ratio"`
	Slow  bool    `json:"slow"`
}

type LinkView struct {
	Src   int     `json:"src"`
	Dst   int     `json:"dst"`
	MS    float64 `json:"ms"`
	Ratio float64 `json:"ratio"`
	Slow  bool    `json:"slow"`
}

// Judgement is Judge's full output: the verdict and the measurements.
type Judgement struct {
	Verdict Verdict    `json:"verdict"`
	GEMM    []GEMMView `json:"gemm"`
	Links   []LinkView `json:"links"`
	// Complete: every rank of the plan reported without missing it.
	Complete bool `json:"complete"`
}

// Judge identifies slow ranks and links from validation results (§4.3):
// a rank is slow when its mean GEMM time exceeds the median over ranks by
// more than SlowRel; a link is slow when its time (the max of what src
// and dst report, each the mean of its repetitions) exceeds the median of
// the links of the same size by more than SlowRel, judged on the median
// of its per-size ratios. Fewer than two comparable measurements, or
// none at all, make it inconclusive.
func Judge(plan Plan, results []RankResult, cfg Config) Verdict {
	return JudgeAll(plan, results, cfg).Verdict
}

// JudgeAll is Judge with the measurements.
func JudgeAll(plan Plan, results []RankResult, cfg Config) Judgement {
	var j Judgement
	want := map[int]bool{}
	for _, r := range plan.GEMM.Ranks {
		want[r] = true
	}
	for _, pass := range plan.P2P.Passes {
		for _, l := range pass {
			want[l.Src], want[l.Dst] = true, true
		}
	}
	got := map[int]bool{}
	var failed []string
	gemm := map[int]float64{}
	type lk struct {
		l     Link
		bytes int64
	}
	linkMS := map[lk]float64{}
	linkWorst := map[lk]float64{} // the slowest repetition
	for _, r := range results {
		if r.Missed || r.Error != "" {
			if r.Error != "" {
				failed = append(failed, fmt.Sprintf("rank %d: %s", r.Rank, r.Error))
			}
			continue
		}
		got[r.Rank] = true
		// Best of the repetitions, not the mean: a benchmark's fastest
		// run is its least disturbed one, so one preempted repetition on
		// a shared host cannot make a healthy rank or link look slow,
		// while a degraded one is slow on every repetition (§6: 3 reps).
		if m, ok := best(r.GEMMMS); ok {
			gemm[r.Rank] = m
		}
		for _, p := range r.P2P {
			if m, ok := best(p.MS); ok {
				k := lk{Link{p.Src, p.Dst}, p.Bytes}
				linkMS[k] = max(linkMS[k], m) // src and dst both report: the slower view
				for _, x := range p.MS {
					if x >= 0 && x < 1e12 {
						linkWorst[k] = max(linkWorst[k], x)
					}
				}
			}
		}
	}
	j.Complete = len(want) > 0
	for r := range want {
		if !got[r] {
			j.Complete = false
		}
	}
	// GEMM.
	var gv []float64
	for _, m := range gemm {
		gv = append(gv, m)
	}
	var slowRanks []int
	if len(gv) > 0 {
		med := medianSigned(slices.Clone(gv))
		var ratios []float64
		for _, m := range gv {
			if med > 0 {
				ratios = append(ratios, m/med)
			}
		}
		limit := slowLimit(ratios, cfg.SlowRel)
		for r, m := range gemm {
			v := GEMMView{Rank: r, MS: m}
			if med > 0 {
				v.Ratio = m / med
			}
			v.Slow = len(gv) >= 2 && med > 0 && m/med > limit
			if v.Slow {
				slowRanks = append(slowRanks, r)
			}
			j.GEMM = append(j.GEMM, v)
		}
	}
	slices.SortFunc(j.GEMM, func(a, b GEMMView) int { return cmp.Compare(a.Rank, b.Rank) })
	slices.Sort(slowRanks)
	// Links: each transfer against the transfers of the same size that
	// ran with as many others at once (a pass's concurrency: a transfer
	// alone in its pass runs uncontended and is faster on a shared host),
	// referenced to the median of the faster half of that class (about its
	// fastest quarter), so slow links — up to half of a small class, as a
	// ring's two links at one rank are — do not move the reference. Per link, the median of its ratios.
	conc := map[Link]int{}
	for _, pass := range plan.P2P.Passes {
		for _, l := range pass {
			conc[l] = len(pass)
		}
	}
	type class struct {
		bytes int64
		conc  int
	}
	bySize := map[int64][]float64{}
	byClass := map[class][]float64{}
	for k, m := range linkMS {
		bySize[k.bytes] = append(bySize[k.bytes], m)
		c := class{k.bytes, conc[k.l]}
		byClass[c] = append(byClass[c], m)
	}
	sizeMed := map[lk]float64{}
	// separated: the transfer's best repetition is slower than the worst
	// repetition of every transfer in the faster half of its class — no
	// overlap, which chance alone almost never produces (§6's 3 reps from
	// both ends), so the noise of a shared host cannot name a link.
	separated := map[lk]bool{}
	// The reference of a class and the two slowest repetitions among its
	// faster half (the second for the link that holds the first), so the
	// test is linear in the links, not quadratic (a 1,024-rank plan has
	// ~4,000 links per size).
	type top2 struct {
		ref      float64
		w1, w2   float64
		w1Holder Link
	}
	refs := map[class]*top2{}
	classOf := func(k lk) (class, []float64) {
		c := class{k.bytes, conc[k.l]}
		if xs := byClass[c]; len(xs) >= 2 {
			return c, xs
		}
		return class{k.bytes, -1}, bySize[k.bytes]
	}
	for k := range linkMS {
		c, xs := classOf(k)
		if refs[c] == nil {
			refs[c] = &top2{ref: fasterHalfMedian(xs)}
		}
	}
	for k2, m2 := range linkMS {
		for _, c := range []class{{k2.bytes, conc[k2.l]}, {k2.bytes, -1}} {
			t := refs[c]
			if t == nil || m2 > t.ref {
				continue
			}
			switch w := linkWorst[k2]; {
			case w > t.w1:
				t.w2, t.w1, t.w1Holder = t.w1, w, k2.l
			case w > t.w2:
				t.w2 = w
			}
		}
	}
	classN := map[lk]int{}
	for k, m := range linkMS {
		c, xs := classOf(k)
		classN[k] = len(xs)
		t := refs[c]
		sizeMed[k] = t.ref
		worst := t.w1
		if t.w1Holder == k.l {
			worst = t.w2
		}
		separated[k] = worst > 0 && m > worst
	}
	type agg struct {
		ratios, ms []float64
		peers      int
		sep        int // sizes on which it is separated
		minClass   int // the fewest transfers it was compared within
	}
	links := map[Link]*agg{}
	for k, m := range linkMS {
		a := links[k.l]
		if a == nil {
			a = &agg{}
			links[k.l] = a
		}
		if med := sizeMed[k]; med > 0 {
			a.ratios = append(a.ratios, m/med)
		}
		a.ms = append(a.ms, m)
		a.peers = len(bySize[k.bytes])
		if separated[k] {
			a.sep++
		}
		if a.minClass == 0 || classN[k] < a.minClass {
			a.minClass = classN[k]
		}
	}
	var linkRatios []float64
	for _, a := range links {
		if len(a.ratios) > 0 {
			linkRatios = append(linkRatios, medianSigned(slices.Clone(a.ratios)))
		}
	}
	linkLimit := slowLimit(linkRatios, cfg.SlowRel)
	slowRank := map[int]bool{}
	for _, r := range slowRanks {
		slowRank[r] = true
	}
	var slowLinks, explained []Link
	thin := false // a slow link compared within fewer than 3 transfers
	for l, a := range links {
		v := LinkView{Src: l.Src, Dst: l.Dst, MS: medianSigned(a.ms)}
		if len(a.ratios) > 0 {
			v.Ratio = medianSigned(a.ratios)
		}
		// Slow: beyond the limit and separated from the healthy transfers
		// on every size (chance separates 3 reps from 3 one time in 20;
		// on all of §6's three sizes, one in 8,000).
		v.Slow = a.peers >= 2 && v.Ratio > linkLimit && a.sep == len(a.ms)
		switch {
		case v.Slow && (slowRank[l.Src] || slowRank[l.Dst]):
			// A rank slow at GEMM is slow at everything its CPU or GPU
			// drives, its transfers included: the rank explains the link.
			explained = append(explained, l)
		case v.Slow:
			slowLinks = append(slowLinks, l)
			thin = thin || a.minClass < 3
		}
		j.Links = append(j.Links, v)
	}
	cmpLink := func(a, b Link) int { return cmp.Or(cmp.Compare(a.Src, b.Src), cmp.Compare(a.Dst, b.Dst)) }
	slices.SortFunc(j.Links, func(a, b LinkView) int { return cmpLink(Link{a.Src, a.Dst}, Link{b.Src, b.Dst}) })
	slices.SortFunc(slowLinks, cmpLink)
	slices.SortFunc(explained, cmpLink)

	v := Verdict{Ranks: slowRanks, Links: slowLinks}
	if v.Ranks == nil {
		v.Ranks = []int{}
	}
	if v.Links == nil {
		v.Links = []Link{}
	}
	comparable := len(gv) >= 2 || len(links) >= 2
	v.Confidence = ConfidenceLow
	if j.Complete && len(gv) >= 3 {
		v.Confidence = ConfidenceHigh
	}
	switch {
	case len(slowRanks) > 0:
		v.Kind = VerdictSlowRank
		v.Text = fmt.Sprintf("GEMM validation: rank(s) %s slower than the median of %d ranks by more than %.0f%% (best of %d repetitions)", joinInts(slowRanks), len(gv), 100*(limitOr(len(gv), slowLimit(gemmRatios(j.GEMM), cfg.SlowRel))-1), max(plan.GEMM.Reps, 1))
		if len(explained) > 0 {
			v.Text += fmt.Sprintf("; its links %s are slow too, as a slow rank's transfers are", joinLinks(explained))
		}
		if len(slowLinks) > 0 {
			v.Text += fmt.Sprintf("; slow link(s) %s too", joinLinks(slowLinks))
		}
	case len(slowLinks) > 0:
		v.Kind = VerdictSlowLink
		v.Text = fmt.Sprintf("P2P validation: link(s) %s slower than the median of same-size transfers by more than %.0f%% (best of %d repetitions)", joinLinks(slowLinks), 100*(linkLimit-1), max(plan.P2P.Reps, 1))
		if r, ok := commonEnd(slowLinks); ok && len(slowLinks) >= 2 {
			v.Text += fmt.Sprintf("; every slow link touches rank %d: suspect its network path (NIC, cable, switch port)", r)
		}
		// High only when every named link was compared within at least
		// 3 transfers: against one or two, a fixed difference between
		// paths (a cross-socket or cross-node pair) passes the separation
		// test as readily as a fault does.
		if j.Complete && len(links) >= 3 && !thin {
			v.Confidence = ConfidenceHigh
		}
		if thin {
			v.Text += " (compared within fewer than 3 transfers of its kind: low confidence)"
		}
	case !comparable:
		v.Kind = VerdictInconclusive
		v.Confidence = ConfidenceLow
		v.Text = fmt.Sprintf("validation results from %d of %d ranks: too few to compare", len(got), len(want))
	default:
		v.Kind = VerdictNone
		v.Text = "validation found every tested rank and link within the median range; the slowdown may have been transient or lie outside GEMM/P2P"
	}
	if len(failed) > 0 {
		v.Text += "; errors: " + strings.Join(failed, "; ")
	}
	if !j.Complete && v.Kind != VerdictInconclusive {
		v.Confidence = ConfidenceLow
		v.Text += fmt.Sprintf(" (results from %d of %d ranks)", len(got), len(want))
	}
	j.Verdict = v
	return j
}

// fasterHalfMedian is the median of the faster half of xs (the healthy
// reference while at most half are degraded).
func fasterHalfMedian(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return medianSigned(ys[:(len(ys)+1)/2])
}

// best is the smallest valid repetition. It hides a fault that shows on
// only some repetitions (a flapping NIC, a GPU throttling intermittently)
// by design: one slow repetition is as likely a co-tenant's burst, and
// the episode stays open for the next validation.
func best(xs []float64) (float64, bool) {
	b, ok := 0.0, false
	for _, x := range xs {
		if x >= 0 && x < 1e12 && (!ok || x < b) {
			b, ok = x, true
		}
	}
	return b, ok
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

func gemmRatios(vs []GEMMView) []float64 {
	out := make([]float64, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Ratio)
	}
	return out
}

// limitOr is the limit that applied to n measurements.
func limitOr(n int, limit float64) float64 {
	if n < 2 {
		return 1
	}
	return limit
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
