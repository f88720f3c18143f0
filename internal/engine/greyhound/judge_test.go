package greyhound

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// noisyResults builds a 4-rank validation whose healthy transfers vary by
// ±25% between repetitions and up to threefold between passes (a CPU
// job's loopback/veth transfers do), GEMM by ±2%, with the given per-rank GEMM factor and
// per-link transfer factor applied to every repetition.
func noisyResults(plan Plan, seed uint64, gemm map[int]float64, link map[Link]float64, spike bool) []RankResult {
	rng := rand.New(rand.NewPCG(seed, 7))
	treeBase := 0.3 + 0.5*rng.Float64()
	byRank := map[int]*RankResult{}
	get := func(r int) *RankResult {
		if byRank[r] == nil {
			byRank[r] = &RankResult{Rank: r, P2P: []P2PResult{}}
		}
		return byRank[r]
	}
	for _, r := range plan.GEMM.Ranks {
		f := 1.0
		if g := gemm[r]; g > 0 {
			f = g
		}
		for range plan.GEMM.Reps {
			get(r).GEMMMS = append(get(r).GEMMMS, 1200*f*(0.98+0.04*rng.Float64()))
		}
	}
	for pi, pass := range plan.P2P.Passes {
		for _, l := range pass {
			// A transfer alone in its pass runs uncontended, faster than
			// one sharing the host with others (the recorded 4-rank CPU
			// runs: tree passes at 0.3–0.8 of the ring passes, the two
			// within 1.3× of each other in a run).
			base := 1.0
			if len(pass) == 1 {
				base = treeBase * (0.9 + 0.2*rng.Float64())
			}
			for _, b := range plan.P2P.SizesBytes {
				var ms []float64
				for rep := range plan.P2P.Reps {
					x := float64(b) / (1 << 20) * 2 * base * (0.75 + 0.5*rng.Float64())
					if f := link[l]; f > 0 {
						x *= f
					}
					if spike && rep == 1 {
						x *= 3 // one preempted repetition
					}
					ms = append(ms, x)
				}
				get(l.Src).P2P = append(get(l.Src).P2P, P2PResult{Pass: pi, Src: l.Src, Dst: l.Dst, Bytes: b, MS: ms})
				get(l.Dst).P2P = append(get(l.Dst).P2P, P2PResult{Pass: pi, Src: l.Src, Dst: l.Dst, Bytes: b, MS: ms})
			}
		}
	}
	var out []RankResult
	for _, r := range byRank {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RankResult) int { return a.Rank - b.Rank })
	return out
}

// On a noisy host the judge must not name a healthy link (a confident
// wrong answer is the worst outcome), yet still find a link several
// times slower, attribute a slow rank's transfers to the rank, and say
// when every slow link shares one rank.
func TestJudgeNoisyHost(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	for seed := uint64(1); seed <= 40; seed++ {
		v := Judge(plan, noisyResults(plan, seed, nil, nil, seed%2 == 0), cfg)
		if v.Kind != VerdictNone {
			t.Fatalf("seed %d: healthy noisy host judged %s: %s", seed, v.Kind, v.Text)
		}
		v = Judge(plan, noisyResults(plan, seed, map[int]float64{1: 1.55}, map[Link]float64{{0, 1}: 4, {1, 2}: 4}, false), cfg)
		if v.Kind != VerdictSlowRank || !slices.Equal(v.Ranks, []int{1}) || len(v.Links) != 0 {
			t.Fatalf("seed %d: hogged rank 1: %+v", seed, v)
		}
		// Compared within its pass's concurrency class, a throttled link
		// stands out even though uncontended tree transfers run 3× faster.
		v = Judge(plan, noisyResults(plan, seed, nil, map[Link]float64{{0, 1}: 6, {1, 2}: 6}, seed%3 == 0), cfg)
		if v.Kind != VerdictSlowLink || !slices.Equal(v.Links, []Link{{0, 1}, {1, 2}}) || !strings.Contains(v.Text, "every slow link touches rank 1") {
			t.Fatalf("seed %d: throttled rank-1 link: %+v", seed, v)
		}
		v = Judge(plan, noisyResults(plan, seed, nil, map[Link]float64{{0, 1}: 2}, false), cfg)
		if v.Kind != VerdictSlowLink || !slices.Equal(v.Links, []Link{{0, 1}}) {
			t.Fatalf("seed %d: a link twice as slow as its pass-mates: %+v", seed, v)
		}
	}
}

// A rank slow at GEMM explains its own slow transfers: they are not
// reported as slow links (quiet host, so the links do pass the limit).
func TestJudgeSlowRankExplainsItsLinks(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "g", Ranks: []int{0, 1, 2, 3, 4, 5}}}, cfg)
	v := Judge(plan, results(plan, map[int]float64{2: 4.5}, map[Link]float64{{1, 2}: 2, {2, 3}: 2}), cfg)
	if v.Kind != VerdictSlowRank || !slices.Equal(v.Ranks, []int{2}) || len(v.Links) != 0 || !strings.Contains(v.Text, "its links 1→2,2→3 are slow too") {
		t.Fatalf("%+v", v)
	}
	v = Judge(plan, results(plan, map[int]float64{2: 4.5}, map[Link]float64{{1, 2}: 2, {4, 5}: 2}), cfg)
	if v.Kind != VerdictSlowRank || !slices.Equal(v.Links, []Link{{4, 5}}) {
		t.Fatalf("a slow link away from the slow rank must still be named: %+v", v)
	}
}

// A link compared within one or two transfers of its kind may differ by a
// fixed path difference, not a fault: it is named with low confidence.
func TestJudgeThinComparisonIsLowConfidence(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "g", Ranks: []int{0, 1}}}, cfg)
	v := Judge(plan, results(plan, nil, map[Link]float64{{0, 1}: 5}), cfg)
	if v.Kind != VerdictSlowLink || v.Confidence != ConfidenceLow || !strings.Contains(v.Text, "fewer than 3 links") {
		t.Fatalf("%+v", v)
	}
}

// On a quiet host (NVLink, a dedicated NIC) the paper's 10% still applies.
func TestSlowLimit(t *testing.T) {
	for _, c := range []struct {
		name   string
		ratios []float64
		lo, hi float64
	}{
		{"quiet", []float64{1, 1.01, 0.99, 1, 1.3}, 1.1, 1.1},
		{"too few to estimate", []float64{1, 2}, 1.1, 1.1},
		{"noisy", []float64{0.66, 1.24, 0.98, 1.02, 1.2, 0.72}, 2.1, 2.5},
		{"two slow links of six: the limit comes from the fast side", []float64{0.42, 0.54, 0.69, 1.31, 7.52, 7.59}, 5, 6},
	} {
		got := slowLimit(c.ratios, 0.10)
		if got < c.lo-1e-9 || got > c.hi+1e-9 {
			t.Errorf("%s: limit %.3f, want [%.2f, %.2f]", c.name, got, c.lo, c.hi)
		}
	}
}

// Issue 16, item 5: on a 4-rank ring with rank 2's link throttled, every
// transfer touching rank 2 is slow — the ring links 1→2 and 2→3 and the
// tree links 3→2 and 2→0, which run alone in their passes and so formed a
// reference of their own (×1.00). Judged against the expected rate of the
// healthy transfers, all four are named, on a quiet and on a noisy host.
func TestJudgeThrottledRankLinks(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	slow := map[Link]float64{{1, 2}: 27, {2, 3}: 27, {3, 2}: 27, {2, 0}: 27}
	want := []Link{{1, 2}, {2, 0}, {2, 3}, {3, 2}}
	check := func(name string, v Verdict) {
		t.Helper()
		if v.Kind != VerdictSlowLink || !slices.Equal(v.Links, want) || !strings.Contains(v.Text, "every slow link touches rank 2") {
			t.Fatalf("%s: %+v", name, v)
		}
	}
	check("quiet", Judge(plan, results(plan, nil, slow), cfg))
	for seed := uint64(1); seed <= 40; seed++ {
		check(fmt.Sprintf("noisy seed %d", seed), Judge(plan, noisyResults(plan, seed, nil, slow, seed%2 == 0), cfg))
	}
}
