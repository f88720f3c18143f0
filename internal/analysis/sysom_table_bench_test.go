package analysis

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// tableProfiles builds 1,024 ranks' profiles the way profiles() does:
// each rank's symbolized chunks merged by a profileBuilder, ranks seeing
// functions in their own first-seen order. shared selects one table for
// all ranks (the fix) or a table per rank (before it).
func tableProfiles(shared bool) map[int]*stack.Profile {
	const ranks, nf, per = 1024, 10_000, 20
	rng := rand.New(rand.NewPCG(5, 5))
	vocab := make([]stack.Func, nf)
	for i := range vocab {
		vocab[i] = stack.Func{Name: fmt.Sprintf("ns::Class%d::method%d", i/16, i), Kind: stack.Native, Module: fmt.Sprintf("lib%d.so", i%40)}
	}
	tab := newFuncTable()
	bs := make([]*profileBuilder, ranks)
	for r := range ranks {
		if shared {
			bs[r] = newSharedProfileBuilder(r, 0, 60e9, tab)
		} else {
			bs[r] = newProfileBuilder(r, 0, 60e9)
		}
		// One input profile listing the vocabulary in a rank-specific
		// order (chunks arrive in a different order on every rank).
		perm := rng.Perm(nf)
		in := &stack.Profile{Hz: 99, Ratio: 0.1, Funcs: make([]stack.Func, nf)}
		pos := make([]int32, nf)
		for i, v := range perm {
			in.Funcs[i] = vocab[v]
			pos[v] = int32(i)
		}
		for s := 0; s < nf; s += per {
			fr := []int32{pos[0], pos[1]}
			for v := s; v < min(s+per, nf); v++ {
				fr = append(fr, pos[v])
			}
			in.Stacks = append(in.Stacks, stack.Stack{Frames: fr, Count: 1 + rng.Int64N(20)})
		}
		bs[r].add(in)
	}
	out := make(map[int]*stack.Profile, ranks)
	for r, b := range bs {
		out[r] = b.profile()
	}
	return out
}

func benchAnalyzeTables(b *testing.B, shared bool) {
	ps := tableProfiles(shared)
	cfg := DefaultSysomConfig()
	b.ResetTimer()
	for range b.N {
		if _, err := sysom.Analyze(&sysom.Input{Profiles: ps}, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// The engine maps one shared table once for every rank (review finding 5).
func BenchmarkSysomAnalyze1024RanksSharedTable(b *testing.B) { benchAnalyzeTables(b, true) }

// Before: one first-seen-order table per rank, one hash lookup per
// (rank, function).
func BenchmarkSysomAnalyze1024RanksPerRankTables(b *testing.B) { benchAnalyzeTables(b, false) }
