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
	for _, r := range results {
		if r.Missed || r.Error != "" {
			if r.Error != "" {
				failed = append(failed, fmt.Sprintf("rank %d: %s", r.Rank, r.Error))
			}
			continue
		}
		got[r.Rank] = true
		if m, ok := mean(r.GEMMMS); ok {
			gemm[r.Rank] = m
		}
		for _, p := range r.P2P {
			if m, ok := mean(p.MS); ok {
				k := lk{Link{p.Src, p.Dst}, p.Bytes}
				linkMS[k] = max(linkMS[k], m) // src and dst both report: the max
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
		for r, m := range gemm {
			v := GEMMView{Rank: r, MS: m}
			if med > 0 {
				v.Ratio = m / med
			}
			v.Slow = len(gv) >= 2 && m > med*(1+cfg.SlowRel)
			if v.Slow {
				slowRanks = append(slowRanks, r)
			}
			j.GEMM = append(j.GEMM, v)
		}
	}
	slices.SortFunc(j.GEMM, func(a, b GEMMView) int { return cmp.Compare(a.Rank, b.Rank) })
	slices.Sort(slowRanks)
	// Links: per size median, per link median of ratios.
	bySize := map[int64][]float64{}
	for k, m := range linkMS {
		bySize[k.bytes] = append(bySize[k.bytes], m)
	}
	sizeMed := map[int64]float64{}
	for b, xs := range bySize {
		sizeMed[b] = medianSigned(slices.Clone(xs))
	}
	type agg struct {
		ratios, ms []float64
		peers      int
	}
	links := map[Link]*agg{}
	for k, m := range linkMS {
		a := links[k.l]
		if a == nil {
			a = &agg{}
			links[k.l] = a
		}
		if med := sizeMed[k.bytes]; med > 0 {
			a.ratios = append(a.ratios, m/med)
		}
		a.ms = append(a.ms, m)
		a.peers = len(bySize[k.bytes])
	}
	var slowLinks []Link
	for l, a := range links {
		v := LinkView{Src: l.Src, Dst: l.Dst, MS: medianSigned(a.ms)}
		if len(a.ratios) > 0 {
			v.Ratio = medianSigned(a.ratios)
		}
		v.Slow = a.peers >= 2 && v.Ratio > 1+cfg.SlowRel
		if v.Slow {
			slowLinks = append(slowLinks, l)
		}
		j.Links = append(j.Links, v)
	}
	cmpLink := func(a, b Link) int { return cmp.Or(cmp.Compare(a.Src, b.Src), cmp.Compare(a.Dst, b.Dst)) }
	slices.SortFunc(j.Links, func(a, b LinkView) int { return cmpLink(Link{a.Src, a.Dst}, Link{b.Src, b.Dst}) })
	slices.SortFunc(slowLinks, cmpLink)

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
		v.Text = fmt.Sprintf("GEMM validation: rank(s) %s slower than the median of %d ranks by more than %.0f%%", joinInts(slowRanks), len(gv), 100*cfg.SlowRel)
		if len(slowLinks) > 0 {
			v.Text += fmt.Sprintf("; slow link(s) %s too", joinLinks(slowLinks))
		}
	case len(slowLinks) > 0:
		v.Kind = VerdictSlowLink
		v.Text = fmt.Sprintf("P2P validation: link(s) %s slower than the median of same-size transfers by more than %.0f%%", joinLinks(slowLinks), 100*cfg.SlowRel)
		if j.Complete && len(links) >= 3 {
			v.Confidence = ConfidenceHigh
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

func mean(xs []float64) (float64, bool) {
	s, k := 0.0, 0
	for _, x := range xs {
		if x >= 0 && x < 1e12 {
			s += x
			k++
		}
	}
	if k == 0 {
		return 0, false
	}
	return s / float64(k), true
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
