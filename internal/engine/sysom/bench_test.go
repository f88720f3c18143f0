package sysom

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Paper scale (issue 8 acceptance): the CPU waterline over 1,024 ranks ×
// 10,000 functions < 200 ms; a differential flame graph of two
// 1,000,000-sample profiles < 1 s; slow-rank detection over 1,024 ranks
// × W = 100 instances.

// cpuClock is the process's CPU time (user + system, all threads, GC
// included). The development machine is shared, so wall time there
// overstates the cost; the benchmarks report both (cpu-ms/op).
func cpuClock() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timed runs body b.N times and reports wall and CPU ms per op.
func timed(b *testing.B, body func()) {
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuClock()
	for range b.N {
		body()
	}
	cpu := cpuClock() - c0
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/op")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
}

// waterlineProfiles builds ranks profiles over nf functions: each rank's
// 500 stacks of depth 22 cover every function once below a shared
// 2-frame prefix, with random counts (~5,500 samples a rank). tables
// distinct function-table orders are spread over the ranks (1: every
// rank shares one table, the symbolizer's common case).
func waterlineProfiles(ranks, nf, tables int) map[int]*stack.Profile {
	rng := rand.New(rand.NewPCG(1, 1))
	vocab := make([]stack.Func, nf)
	for i := range vocab {
		vocab[i] = stack.Func{Name: fmt.Sprintf("ns::Class%d::method%d", i/16, i), Kind: stack.Native, Module: fmt.Sprintf("lib%d.so", i%40)}
	}
	type table struct {
		funcs []stack.Func
		pos   []int32 // vocabulary index → table index
	}
	ts := make([]table, tables)
	for t := range ts {
		perm := rng.Perm(nf)
		if t == 0 {
			for i := range perm {
				perm[i] = i
			}
		}
		ts[t].funcs = make([]stack.Func, nf)
		ts[t].pos = make([]int32, nf)
		for i, v := range perm {
			ts[t].funcs[i] = vocab[v]
			ts[t].pos[v] = int32(i)
		}
	}
	const per = 20
	out := make(map[int]*stack.Profile, ranks)
	for r := range ranks {
		t := &ts[r%tables]
		p := &stack.Profile{Rank: r, StartNS: t0, EndNS: t0 + 60e9, Hz: 99, Ratio: 0.1, Funcs: t.funcs}
		frames := make([]int32, 0, (nf/per)*(per+2))
		for s := 0; s < nf; s += per {
			start := len(frames)
			frames = append(frames, t.pos[0], t.pos[1])
			for v := s; v < min(s+per, nf); v++ {
				frames = append(frames, t.pos[v])
			}
			c := 1 + rng.Int64N(20)
			p.Stacks = append(p.Stacks, stack.Stack{Frames: frames[start:len(frames):len(frames)], Count: c})
			p.Total += c
		}
		out[r] = p
	}
	return out
}

func benchWaterline(b *testing.B, tables int) {
	ps := waterlineProfiles(1024, 10_000, tables)
	cfg := DefaultConfig()
	ranks := sortedKeys(ps)
	timed(b, func() {
		it := newInterner()
		profs := prepare(ps, it, &incScratch{})
		ms, _ := groupMembers(Group{ID: "g", Ranks: ranks}, profs, cfg)
		_ = waterline("g", ms, it.funcs, it.foreignRoots(), cfg)
	})
}

// The symbolizer hands every rank the same table: one comparison per
// entry instead of a hash lookup.
func BenchmarkWaterline1024Ranks10kFuncsSharedTable(b *testing.B) { benchWaterline(b, 1) }

// Worst case: 64 distinct table orders round-robin (the interner's cache
// of 4 always misses): one hash lookup per (rank, function).
func BenchmarkWaterline1024Ranks10kFuncsDistinctTables(b *testing.B) { benchWaterline(b, 64) }

// diffProfile: 50,000 distinct stacks of depth 30 over 20,000 functions,
// 1,000,000 samples; frames follow a branching walk (4 choices a level)
// so stacks share prefixes as real ones do.
func diffProfile(seed uint64, rank int) *stack.Profile {
	rng := rand.New(rand.NewPCG(seed, 2))
	const nf, ns, depth, total = 20_000, 50_000, 30, 1_000_000
	p := &stack.Profile{Rank: rank, StartNS: t0, EndNS: t0 + 60e9}
	for i := range nf {
		p.Funcs = append(p.Funcs, stack.Func{Name: fmt.Sprintf("fn%d", i), Kind: stack.Native, Module: "libx.so"})
	}
	frames := make([]int32, ns*depth)
	left := int64(total)
	for s := range ns {
		f := frames[s*depth : (s+1)*depth : (s+1)*depth]
		f[0] = int32(rng.IntN(8))
		for j := 1; j < depth; j++ {
			f[j] = int32((int(f[j-1])*31 + rng.IntN(4) + j*7919) % nf)
		}
		c := int64(total / ns)
		if s == ns-1 {
			c = left
		}
		left -= c
		p.Stacks = append(p.Stacks, stack.Stack{Frames: f, Count: c})
		p.Total += c
	}
	return p
}

func BenchmarkDiffTree1MSamples(b *testing.B) {
	a, c := diffProfile(1, 0), diffProfile(2, 1)
	nodes := 0
	DiffTree(a, c).Walk(func(*Node, []*Node) bool { nodes++; return true })
	timed(b, func() {
		if t := DiffTree(a, c); t.A != a.Total || t.B != c.Total {
			b.Fatal("totals")
		}
	})
	b.ReportMetric(float64(nodes), "nodes")
}

// The CPU diff of a diagnosis: tree plus hot-path extraction.
func BenchmarkHotPaths1MSamples(b *testing.B) {
	t := DiffTree(diffProfile(1, 0), diffProfile(2, 1))
	cfg := DefaultConfig()
	b.ResetTimer()
	for range b.N {
		_ = hotPaths(t, cfg)
	}
}

func BenchmarkSlowRanks1024Ranks100Instances(b *testing.B) {
	ranks := make([]int, 1024)
	for i := range ranks {
		ranks[i] = i
	}
	calls := genCalls("dp", ranks, 100, map[int]float64{77: 0.5}, nil, nil, 0.02, 100, true, 1)
	cfg := DefaultConfig()
	timed(b, func() {
		rep, err := Analyze(&Input{Calls: calls}, cfg)
		if err != nil || len(rep.SlowRanks) != 1 || rep.SlowRanks[0].Rank != 77 {
			b.Fatal(err, rep.SlowRanks)
		}
	})
}
