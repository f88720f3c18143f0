package cpuprof

import (
	"os"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

func foreignProfiler(rankOf map[int]int, reveal func(rank, pid int) bool) *Profiler {
	p := &Profiler{cfg: Config{Hz: 99, Ratio: 0.1, Reveal: reveal}, ksyms: &kallsyms{hidden: true}, self: os.Getpid()}
	p.cfg.fill()
	p.cfg.RankOf = func(pid int) (int, bool) { r, ok := rankOf[pid]; return r, ok }
	p.state = newTracker(p)
	return p
}

func entry(pid, cpu uint32, n uint64) rawEntry {
	return rawEntry{k: cpuprofCountKey{Pid: pid, Tid: pid, Cpu: cpu, Kstack: -14}, n: n}
}

// TestForeignSplitByShare (issue 16 item 8b): three ranks share CPU 0
// (ranks 1, 2, 3: 100, 100, 200 samples of their own) and another
// process takes 400 samples there. It used to land on the busiest rank
// alone, so rank 3 looked hit and ranks 1 and 2 looked clean; now each
// gets its share and sees the same fraction of interference.
func TestForeignSplitByShare(t *testing.T) {
	p := foreignProfiler(map[int]int{11: 1, 12: 2, 13: 3, 10: 0}, func(int, int) bool { return true })
	es := []rawEntry{entry(11, 0, 100), entry(12, 0, 100), entry(13, 0, 200), entry(10, 1, 300), entry(1<<30, 0, 400), entry(1<<30+1, 1, 7)}
	b := p.build(es, nil, nil)
	own, foreign := map[int]int64{}, map[int]int64{}
	for _, s := range b.Samples {
		if s.Foreign {
			foreign[s.Rank] += s.Count
		} else {
			own[s.Rank] += s.Count
		}
	}
	if foreign[1] != 100 || foreign[2] != 100 || foreign[3] != 200 || foreign[0] != 7 {
		t.Fatalf("foreign samples per rank %v, want 1:100 2:100 3:200 0:7", foreign)
	}
	for r := 1; r <= 3; r++ {
		if f := float64(foreign[r]) / float64(own[r]+foreign[r]); f != 0.5 {
			t.Errorf("rank %d: interference %.3f of its samples, want 0.5 like the others on its core", r, f)
		}
	}
}

// TestShareExactOverWindow: many small entries split in proportion, to
// within one sample per rank.
func TestShareExactOverWindow(t *testing.T) {
	sh := newShare(map[int]uint64{0: 1, 1: 2, 2: 7})
	got := map[int]int64{}
	for range 1000 {
		for _, c := range sh.take(1) {
			got[c.rank] += c.n
		}
	}
	for r, want := range map[int]int64{0: 100, 1: 200, 2: 700} {
		if d := got[r] - want; d < -1 || d > 1 {
			t.Errorf("rank %d got %d of 1000, want %d±1", r, got[r], want)
		}
	}
}

// TestForeignHiddenUnlessRevealed (issue 16 item 10): another user's
// process on a rank's CPU is shipped as one opaque sample per rank — its
// share of the core kept, its pid, name and stack not.
func TestForeignHiddenUnlessRevealed(t *testing.T) {
	secret := uint32(1 << 30)
	p := foreignProfiler(map[int]int{11: 1, 12: 2}, func(rank, pid int) bool { return rank == 2 })
	b := p.build([]rawEntry{entry(11, 0, 10), entry(12, 1, 10), entry(secret, 0, 5), entry(secret+1, 0, 3), entry(secret, 1, 4)}, nil, nil)
	var hidden, shown []stack.Sample
	for _, s := range b.Samples {
		if !s.Foreign {
			continue
		}
		if s.Opaque() {
			hidden = append(hidden, s)
		} else {
			shown = append(shown, s)
		}
	}
	if len(hidden) != 1 || hidden[0].Rank != 1 || hidden[0].Count != 8 || hidden[0].PID != 0 || hidden[0].Comm != "" ||
		hidden[0].Frames[0].Func != stack.HiddenFrame {
		t.Fatalf("rank 1's hidden interference: %+v, want one opaque sample of 8", hidden)
	}
	if len(shown) != 1 || shown[0].Rank != 2 || shown[0].PID != int(secret) {
		t.Fatalf("rank 2 may see the process: %+v", shown)
	}
}

// TestSelfShownAsLaggard: the agent's own samples on a rank's core are
// its cost, shown once as laggard's, never hidden and never unwound.
func TestSelfShownAsLaggard(t *testing.T) {
	me := uint32(os.Getpid())
	p := foreignProfiler(map[int]int{11: 1}, nil)
	b := p.build([]rawEntry{entry(11, 0, 10), entry(me, 0, 6)}, nil, nil)
	i := slices.IndexFunc(b.Samples, func(s stack.Sample) bool { return s.Foreign })
	if i < 0 || !b.Samples[i].Opaque() || b.Samples[i].Frames[0].Func != stack.SelfFrame || b.Samples[i].Count != 6 {
		t.Fatalf("samples %+v", b.Samples)
	}
}
