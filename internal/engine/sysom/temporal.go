package sysom

import (
	"cmp"
	"fmt"
	"slices"
)

// Temporal baseline (§3.1): when no rank stands out but the iteration
// time rose, every rank slowed alike (§5.4 cases 4 and 5), so the
// comparison is now vs before: the job's merged flame graph against the
// baseline window's, flagging paths whose CPU share grew by more than δ.
func temporal(in *Input, ranks map[int]bool, cfg Config) *Temporal {
	t := &Temporal{IterMs: round(in.IterMs, 3), IterBaseMs: round(in.IterBaseMs, 3), Rise: round(in.IterMs/in.IterBaseMs-1, 4),
		Candidates: []HotPath{}, Evidence: []string{}}
	t.Evidence = append(t.Evidence, fmt.Sprintf("iteration time %.1f ms vs %.1f ms at baseline (%+.1f%%) with no straggler: all ranks slowed alike",
		in.IterMs, in.IterBaseMs, 100*t.Rise))
	tb := newTreeBuilder(newInterner())
	var now, base int64
	for _, r := range sortedKeys(in.Profiles) {
		if p := in.Profiles[r]; ranks[r] {
			tb.add(p, 0)
			t.Ranks++
			now += p.Total
		}
	}
	for _, r := range sortedKeys(in.Baseline) {
		if !ranks[r] {
			continue
		}
		p := in.Baseline[r]
		tb.add(p, 1)
		t.BaseRanks++
		base += p.Total
	}
	switch {
	case t.Ranks == 0:
		t.Evidence = append(t.Evidence, "no CPU stacks in the current window: no flame-graph comparison")
		return t
	case t.BaseRanks == 0:
		t.Evidence = append(t.Evidence, "no CPU stacks in the baseline window: no flame-graph comparison")
		return t
	}
	t.Evidence = append(t.Evidence, fmt.Sprintf("merged flame graph: %d samples over %d ranks now vs %d samples over %d ranks at baseline", now, t.Ranks, base, t.BaseRanks))
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
	t.Next = nextCheck(t.Candidates[0].Cause, &t.Candidates[0])
	return t
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
