package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/stats"
)

// Temporal baseline (§3.1): when no rank stands out but the iteration
// time rose, compare now with before: the merged flame graph of the
// ranks profiled in both windows against the baseline's, flagging paths
// whose CPU share grew by more than δ (§5.4 cases 4 and 5).
//
// "No rank was flagged" is not evidence that every rank slowed alike: a
// hog on one rank's cores can stay below slow-rank detection (noisy
// peers, host-side delays, N ≤ 4). So every candidate is split by rank —
// each rank's share of its own samples now and at baseline (normalized
// per rank, so a rank with more samples does not weigh more) — and its
// growth on each rank is tested against the other ranks' pooled growth
// (two-proportion z, Bonferroni over ranks × candidates). Ranks whose
// growth stands out are named as suspects, with low confidence and the
// z slow-rank detection gave them; otherwise the report says the growth
// is spread over all N ranks, with the largest rank's share.
func temporal(in *Input, ranks map[int]bool, cfg Config, lat map[string]*lateStats, rep *Report) *Temporal {
	t := &Temporal{IterMs: round(in.IterMs, 3), IterBaseMs: round(in.IterBaseMs, 3), Rise: round(in.IterMs/in.IterBaseMs-1, 4),
		Candidates: []HotPath{}, Evidence: []string{}}
	t.Evidence = append(t.Evidence, fmt.Sprintf("iteration time %.1f ms vs %.1f ms at baseline (%+.1f%%) and no rank flagged slow by collective lateness",
		in.IterMs, in.IterBaseMs, 100*t.Rise))
	// Only ranks profiled in both windows: a rank missing from the
	// baseline would make all its paths look new.
	var common, onlyNow, onlyBase []int
	for _, r := range sortedKeys(in.Profiles) {
		if !ranks[r] {
			continue
		}
		if in.Baseline[r] != nil {
			common = append(common, r)
		} else {
			onlyNow = append(onlyNow, r)
		}
	}
	for _, r := range sortedKeys(in.Baseline) {
		if ranks[r] && in.Profiles[r] == nil {
			onlyBase = append(onlyBase, r)
		}
	}
	if len(onlyNow) > 0 {
		t.Evidence = append(t.Evidence, fmt.Sprintf("rank(s) %s have no baseline profile: left out of the comparison", intList(onlyNow)))
	}
	if len(onlyBase) > 0 {
		t.Evidence = append(t.Evidence, fmt.Sprintf("rank(s) %s were profiled at baseline but not now: left out (a rank that stopped sampling may be hung)", intList(onlyBase)))
	}
	tb := newTreeBuilder(newInterner())
	var now, base int64
	for _, r := range common {
		tb.add(in.Profiles[r], 0)
		tb.add(in.Baseline[r], 1)
		now += in.Profiles[r].Total
		base += in.Baseline[r].Total
	}
	t.Ranks, t.BaseRanks = len(common), len(common)
	if len(common) == 0 {
		switch {
		case len(in.Profiles) == 0 || len(onlyNow) == 0:
			t.Evidence = append(t.Evidence, "no CPU stacks in the current window: no flame-graph comparison")
		default:
			t.Evidence = append(t.Evidence, "no CPU stacks in the baseline window: no flame-graph comparison")
		}
		t.Next = "no profiles to compare: collect CPU stacks in both windows"
		return t
	}
	t.Evidence = append(t.Evidence, fmt.Sprintf("merged flame graph: %d samples over %d ranks now vs %d samples at baseline (ranks profiled in both windows)", now, len(common), base))
	t.Candidates = hotPaths(tb.build(), cfg)
	for _, c := range t.Candidates {
		t.Evidence = append(t.Evidence, describe(c, "the baseline"))
	}
	if g := gpuTemporal(in, cfg); g != "" {
		t.Evidence = append(t.Evidence, g)
	}
	if len(t.Candidates) == 0 {
		t.Evidence = append(t.Evidence, fmt.Sprintf("no path's CPU share grew by ≥ %s (δ)", pct(cfg.Delta)))
		t.Next = "no on-CPU path grew: the time went off-CPU or to the GPU/network — compare GPU kernel times and collective durations with the baseline (off-CPU waits are not sampled, §7)"
		return t
	}
	// Per-rank split of every candidate.
	zc := stats.UpperZ(cfg.Alpha, len(common)*len(t.Candidates))
	sus := map[int]bool{}
	dl := delays(lat, cfg)
	onTime := map[int]bool{}
	for _, c := range t.Candidates {
		sp := splitPath(c, common, in, zc, cfg)
		t.Split = append(t.Split, sp)
		t.Evidence = append(t.Evidence, splitText(c, sp, len(common)))
		for _, r := range sp.Suspects {
			// A rank whose share grew but which enters its collectives
			// on time does not delay the group: not a suspect of the
			// rise (issue 16 item 8b).
			if dl[r].onTime() {
				onTime[r] = true
				continue
			}
			sus[r] = true
		}
	}
	t.Suspects = sortedKeys(sus)
	for _, r := range sortedKeys(onTime) {
		if !sus[r] {
			t.Evidence = append(t.Evidence, fmt.Sprintf("rank %d's share grew, but it enters its collectives on time (%+.2f ms per step against its typical peer): the group does not wait for it, so it is not a suspect — the path may still slow every rank through what they share (locks, file system, memory bandwidth)", r, dl[r].ms))
		}
	}
	waterRanks := map[int]bool{}
	for _, d := range rep.Diagnoses {
		waterRanks[d.Rank] = true
	}
	for _, r := range t.Suspects {
		s := fmt.Sprintf("rank %d is a suspect (low confidence): ", r)
		if z, sigma, ok := zFor(lat, r, cfg); ok {
			s += fmt.Sprintf("slow-rank detection did not flag it (z %.1f, peers' σ %.3f ms)", z, sigma)
		} else {
			s += "no collective timings judged it"
		}
		if waterRanks[r] {
			s += "; consistent with its diagnosis above"
		}
		t.Evidence = append(t.Evidence, s)
	}
	if len(t.Suspects) == 0 && len(onTime) == 0 {
		maxZ := math.Inf(-1)
		for _, r := range common {
			if z, _, ok := zFor(lat, r, cfg); ok {
				maxZ = max(maxZ, z)
			}
		}
		s := fmt.Sprintf("no rank stood out: every candidate's growth is spread over the %d ranks", len(common))
		if !math.IsInf(maxZ, -1) {
			s += fmt.Sprintf(" (collective lateness: max z %.1f)", maxZ)
		}
		if len(waterRanks) > 0 {
			s += fmt.Sprintf("; the rank-level findings above (rank %s) are separate from the rise", intList(sortedKeys(waterRanks)))
		}
		t.Evidence = append(t.Evidence, s)
	}
	t.Next = nextCheck(t.Candidates[0].Cause, &t.Candidates[0])
	return t
}

// zFor is rank r's slow-rank z on the communicator that judged it with
// the highest z.
func zFor(lat map[string]*lateStats, r int, cfg Config) (z, sigma float64, ok bool) {
	for _, k := range sortedKeys(lat) {
		if zz, s, okk := lat[k].zOf(r, cfg); okk && (!ok || zz > z) {
			z, sigma, ok = zz, s, true
		}
	}
	return
}

// pathCount is the number of samples of p whose stack starts with path
// (root first, by function name): the path node's inclusive count.
func pathCount(p *stack.Profile, path []string) int64 {
	var n int64
	for i := range p.Stacks {
		s := &p.Stacks[i]
		if len(s.Frames) < len(path) {
			continue
		}
		ok := true
		for j, name := range path {
			if p.Funcs[s.Frames[j]].Name != name {
				ok = false
				break
			}
		}
		if ok {
			n += s.Count
		}
	}
	return n
}

// splitPath splits a candidate over the common ranks and tests each
// rank's growth against the others' pooled growth.
func splitPath(c HotPath, common []int, in *Input, zc float64, cfg Config) PathSplit {
	sp := PathSplit{Func: c.Func}
	k := make([]float64, len(common))
	kb := make([]float64, len(common))
	n := make([]float64, len(common))
	nb := make([]float64, len(common))
	var K, KB, N, NB float64
	for i, r := range common {
		p, b := in.Profiles[r], in.Baseline[r]
		k[i], n[i] = float64(pathCount(p, c.Stack)), float64(p.Total)
		kb[i], nb[i] = float64(pathCount(b, c.Stack)), float64(b.Total)
		K, N, KB, NB = K+k[i], N+n[i], KB+kb[i], NB+nb[i]
		sp.Ranks = append(sp.Ranks, r)
		sp.Fractions = append(sp.Fractions, round(ratio(k[i], n[i]), 5))
		sp.BaseFractions = append(sp.BaseFractions, round(ratio(kb[i], nb[i]), 5))
	}
	// Growth per rank; the null hypothesis: the same growth on every
	// rank (pooled shares for the variance).
	p, pb := ratio(K, N), ratio(KB, NB)
	var pos float64
	g := make([]float64, len(common))
	for i := range common {
		g[i] = ratio(k[i], n[i]) - ratio(kb[i], nb[i])
		pos += max(g[i], 0)
	}
	for i, r := range common {
		if pos > 0 {
			sp.MaxShare = max(sp.MaxShare, round(max(g[i], 0)/pos, 3))
		}
		if len(common) < 2 {
			continue
		}
		on, onb := N-n[i], NB-nb[i]
		go_ := ratio(K-k[i], on) - ratio(KB-kb[i], onb)
		v := p*(1-p)*(1/max(n[i], 1)+1/max(on, 1)) + pb*(1-pb)*(1/max(nb[i], 1)+1/max(onb, 1))
		d := g[i] - go_
		if v <= 0 || d < cfg.Delta {
			continue
		}
		if d/math.Sqrt(v) >= zc {
			sp.Suspects = append(sp.Suspects, r)
		}
	}
	// Every rank "standing out" is no concentration at all.
	if len(sp.Suspects) == len(common) {
		sp.Suspects = nil
	}
	sp.Concentrated = len(sp.Suspects) > 0
	return sp
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// splitText is the evidence sentence for one candidate's split.
func splitText(c HotPath, sp PathSplit, n int) string {
	if !sp.Concentrated {
		return fmt.Sprintf("%s: spread over all %d ranks (per rank %s; max share of the growth %.0f%%)", c.Func, n, fracList(sp, nil), 100*sp.MaxShare)
	}
	in := map[int]bool{}
	for _, r := range sp.Suspects {
		in[r] = true
	}
	var hi float64
	for i, r := range sp.Ranks {
		if !in[r] {
			hi = max(hi, sp.Fractions[i])
		}
	}
	who, whose := "rank", "its"
	if len(sp.Suspects) > 1 {
		who, whose = "ranks", "their"
	}
	return fmt.Sprintf("%s: concentrated on %s %s: %s of %s samples vs ≤ %s on the other %d (per rank %s)",
		c.Func, who, intList(sp.Suspects), fracList(sp, in), whose, pct(hi), n-len(sp.Suspects), fracList(sp, nil))
}

// fracList renders "r: now (base)" for the ranks in only (nil: all; at
// most 8).
func fracList(sp PathSplit, only map[int]bool) string {
	var parts []string
	for i, r := range sp.Ranks {
		if only != nil && !only[r] {
			continue
		}
		if len(parts) == 8 {
			parts = append(parts, "…")
			break
		}
		if only != nil {
			parts = append(parts, pct(sp.Fractions[i]))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d: %s (was %s)", r, pct(sp.Fractions[i]), pct(sp.BaseFractions[i])))
	}
	return strings.Join(parts, ", ")
}

func intList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	return strings.Join(s, ", ")
}

// gpuTemporal compares the job's GPU time per kernel call now and at
// baseline, when both were observed.
func gpuTemporal(in *Input, cfg Config) string {
	if len(in.GPU) == 0 || len(in.GPUBase) == 0 {
		return ""
	}
	agg := func(ks []GPUKernel) map[string]kernelTime {
		m := map[string]kernelTime{}
		for _, k := range ks {
			t := m[k.Name]
			t.count += k.Count
			t.ms += k.TotalMs
			m[k.Name] = t
		}
		return m
	}
	now, base := agg(in.GPU), agg(in.GPUBase)
	var w, sum float64
	for _, name := range sortedKeys(base) {
		b := base[name]
		a, ok := now[name]
		if !ok || a.count == 0 || b.count == 0 || b.ms == 0 {
			continue
		}
		w += (a.ms / float64(a.count)) / (b.ms / float64(b.count)) * b.ms
		sum += b.ms
	}
	if sum == 0 {
		return ""
	}
	r := w/sum - 1
	verdict := "the GPU is not where the time went"
	if r >= cfg.GPURel {
		verdict = "the GPU slowed too: look at DCGM clocks across the job"
	}
	return fmt.Sprintf("GPU time per kernel call %+.1f%% vs baseline: %s", 100*r, verdict)
}

func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
