package sysom

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/stats"
)

// randProfile draws a profile over a shared vocabulary of nf functions
// (names f0…), with its own table order, recursion allowed.
func randProfile(rng *rand.Rand, rank, nf, nstacks, maxDepth int) *stack.Profile {
	p := &stack.Profile{Rank: rank, StartNS: t0, EndNS: t0 + 1e9}
	perm := rng.Perm(nf)
	for _, i := range perm {
		kind := stack.Native
		if i%5 == 0 {
			kind = stack.Kernel
		}
		p.Funcs = append(p.Funcs, stack.Func{Name: fmt.Sprintf("f%d", i), Kind: kind, Module: fmt.Sprintf("m%d", i%3)})
	}
	for range nstacks {
		d := 1 + rng.IntN(maxDepth)
		st := stack.Stack{Count: 1 + rng.Int64N(50)}
		for range d {
			st.Frames = append(st.Frames, int32(rng.IntN(nf)))
		}
		p.Stacks = append(p.Stacks, st)
		p.Total += st.Count
	}
	return p
}

// naiveTree is the slow-path twin of treeBuilder: nested maps keyed by
// the function, walked stack by stack from the root.
type naiveNode struct {
	f        stack.Func
	a, b     int64
	sa, sb   int64
	children map[stack.Func]*naiveNode
}

func naiveAdd(root *naiveNode, p *stack.Profile, side int) {
	for _, s := range p.Stacks {
		n := root
		if side == 0 {
			n.a += s.Count
		} else {
			n.b += s.Count
		}
		for _, fi := range s.Frames {
			f := p.Funcs[fi]
			c := n.children[f]
			if c == nil {
				c = &naiveNode{f: f, children: map[stack.Func]*naiveNode{}}
				n.children[f] = c
			}
			if side == 0 {
				c.a += s.Count
			} else {
				c.b += s.Count
			}
			n = c
		}
		if side == 0 {
			n.sa += s.Count
		} else {
			n.sb += s.Count
		}
	}
}

func toNode(n *naiveNode, root bool) *Node {
	out := &Node{Name: n.f.Name, Kind: n.f.Kind, Module: n.f.Module, A: n.a, B: n.b, Self: n.sa, SelfB: n.sb}
	if root {
		out.Name, out.Kind = RootName, stack.Symbol
	}
	for _, c := range n.children {
		out.Children = append(out.Children, toNode(c, false))
	}
	slices.SortFunc(out.Children, compareNodes)
	return out
}

// The fast tree builder (interning, flat prefix map, prefix reuse)
// equals the naive nested-map twin.
func TestDiffTreeMatchesNaiveTwin(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 50 {
		a := randProfile(rng, 0, 3+trial%20, 1+rng.IntN(60), 1+rng.IntN(12))
		b := randProfile(rng, 1, 3+trial%17, 1+rng.IntN(60), 1+rng.IntN(12))
		root := &naiveNode{children: map[stack.Func]*naiveNode{}}
		naiveAdd(root, a, 0)
		naiveAdd(root, b, 1)
		if got, want := DiffTree(a, b), toNode(root, true); !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: fast tree differs from the naive twin:\n%s\nvs\n%s", trial, renderTree(got, true), renderTree(want, true))
		}
	}
}

// Diff-tree totals equal the profiles' totals, and every node's count is
// its self count plus its children's (both sides); a FlameTree's self
// counts sum to Total.
func TestTreeTotals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 100 {
		a := randProfile(rng, 0, 2+rng.IntN(30), rng.IntN(80), 1+rng.IntN(20))
		b := randProfile(rng, 1, 2+rng.IntN(30), rng.IntN(80), 1+rng.IntN(20))
		d := DiffTree(a, b)
		if d.A != a.Total || d.B != b.Total {
			t.Fatalf("trial %d: root %d/%d, totals %d/%d", trial, d.A, d.B, a.Total, b.Total)
		}
		check := func(n *Node) {
			sa, sb := n.Self, n.SelfB
			for _, c := range n.Children {
				sa += c.A
				sb += c.B
			}
			if sa != n.A || sb != n.B {
				t.Fatalf("trial %d: node %s: %d/%d ≠ self+children %d/%d", trial, n.Name, n.A, n.B, sa, sb)
			}
		}
		check(d)
		d.Walk(func(n *Node, _ []*Node) bool { check(n); return true })
		f := FlameTree(a)
		var self int64
		f.Walk(func(n *Node, _ []*Node) bool { self += n.Self; return true })
		if f.A != a.Total || self+f.Self != a.Total {
			t.Fatalf("trial %d: flame root %d, self sum %d, total %d", trial, f.A, self+f.Self, a.Total)
		}
		// Swapping the sides swaps A and B.
		s := DiffTree(b, a)
		var swap func(n *Node)
		swap = func(n *Node) {
			n.A, n.B, n.Self, n.SelfB = n.B, n.A, n.SelfB, n.Self
			for _, c := range n.Children {
				swap(c)
			}
		}
		swap(s)
		if !reflect.DeepEqual(s, d) {
			t.Fatalf("trial %d: DiffTree(b, a) is not DiffTree(a, b) with sides swapped", trial)
		}
		if hp := hotPaths(DiffTree(a, a), DefaultConfig()); len(hp) != 0 {
			t.Fatalf("trial %d: a profile differs from itself: %v", trial, hp)
		}
	}
}

// inclusive (global-id stamps) equals counting stacks that contain the
// function.
func TestInclusiveMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	it := newInterner()
	sc := &incScratch{}
	for trial := range 50 {
		p := randProfile(rng, 0, 2+rng.IntN(40), rng.IntN(100), 1+rng.IntN(30))
		gid := it.table(p.Funcs)
		sc.grow(len(it.funcs))
		got := map[string]int64{}
		incs, own := inclusive(p, gid, it.foreignRoots(), sc)
		if own != p.Total {
			t.Fatalf("trial %d: own %d of %d samples with no foreign stack", trial, own, p.Total)
		}
		for _, c := range incs {
			got[it.funcs[c.fn].Name] += c.n
		}
		want := map[string]int64{}
		for _, s := range p.Stacks {
			seen := map[string]bool{}
			for _, f := range s.Frames {
				n := p.Funcs[f].Name
				if !seen[n] {
					seen[n] = true
					want[n] += s.Count
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: inclusive %v, naive %v", trial, got, want)
		}
	}
}

// groupProfiles builds n ranks whose function "hot" has fraction
// fr[r] of a large total (binomial floor negligible), plus filler.
func groupProfiles(fr []float64) map[int]*stack.Profile {
	const total = int64(1e9)
	out := map[int]*stack.Profile{}
	for r, x := range fr {
		hot := int64(math.Round(x * float64(total)))
		p := &stack.Profile{Rank: r, StartNS: t0, EndNS: t0 + 1, Funcs: []stack.Func{{Name: "main", Kind: stack.Native}, {Name: "hot", Kind: stack.Native}, {Name: "rest", Kind: stack.Native}},
			Stacks: []stack.Stack{{Frames: []int32{0, 1}, Count: hot}, {Frames: []int32{0, 2}, Count: total - hot}}, Total: total}
		out[r] = p
	}
	return out
}

// Leave-one-out identity (§3.1, doc.go): the waterline's Mean and Sigma
// are the other ranks' mean and population σ, and its Z relates to the
// paper's all-rank z by stats.PopulationZ — which never exceeds
// sqrt(N−1), so the paper's rule cannot fire for N ≤ 5 while the
// leave-one-out rule does.
func TestWaterlineLeaveOneOutIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cfg := DefaultConfig()
	for trial := range 100 {
		n := 3 + trial%14
		fr := make([]float64, n)
		for i := range fr {
			fr[i] = 0.2 + 0.01*rng.NormFloat64()
		}
		fr[0] = 0.3 + 0.1*rng.Float64()
		rep, err := Analyze(&Input{Profiles: groupProfiles(fr)}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var flag *WaterlineFlag
		for i := range rep.Waterline {
			if w := &rep.Waterline[i]; w.Rank == 0 && w.Func == "hot" {
				flag = w
			}
		}
		var others stats.Moments
		var all stats.Moments
		for i, x := range fr {
			all.Add(x)
			if i > 0 {
				others.Add(x)
			}
		}
		zLOO := (fr[0] - others.Mean()) / others.SD()
		zAll := (fr[0] - all.Mean()) / all.SD()
		if zLOO <= cfg.K {
			continue
		}
		if flag == nil {
			t.Fatalf("trial %d (N=%d): leave-one-out z %.2f > k but rank 0 not flagged", trial, n, zLOO)
		}
		if math.Abs(flag.Mean-others.Mean()) > 1e-5 || math.Abs(flag.Sigma-others.SD()) > 1e-5 {
			t.Fatalf("trial %d: flag mean/σ %v/%v, leave-one-out %v/%v", trial, flag.Mean, flag.Sigma, others.Mean(), others.SD())
		}
		if got := stats.PopulationZ(zLOO, n); math.Abs(got-zAll) > 1e-6*max(1, zAll) {
			t.Fatalf("trial %d: PopulationZ %v, all-rank z %v", trial, got, zAll)
		}
		if n <= 5 && zAll > cfg.K {
			t.Fatalf("trial %d: N=%d all-rank z %v exceeds k", trial, n, zAll)
		}
	}
}

// The waterline does not depend on rank labels: relabelling the ranks
// relabels the flags and nothing else.
func TestWaterlinePermutationInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 30 {
		n := 4 + rng.IntN(10)
		ps := map[int]*stack.Profile{}
		for r := range n {
			ps[r] = randProfile(rng, r, 12, 40, 6)
		}
		// One rank with a hot path of its own.
		hot := ps[0]
		hot.Funcs = append(hot.Funcs, stack.Func{Name: "hog", Kind: stack.Native})
		hot.Stacks = append(hot.Stacks, stack.Stack{Frames: []int32{int32(len(hot.Funcs) - 1)}, Count: hot.Total / 2})
		hot.Total += hot.Total / 2
		cfg := DefaultConfig()
		cfg.MinTotal = 1
		base, err := Analyze(&Input{Profiles: ps}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		perm := rng.Perm(n)
		pp := map[int]*stack.Profile{}
		for r, p := range ps {
			pp[perm[r]+100] = p
		}
		got, err := Analyze(&Input{Profiles: pp}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		inv := map[int]int{}
		for r := range n {
			inv[perm[r]+100] = r
		}
		key := func(ws []WaterlineFlag, relabel map[int]int) []string {
			var out []string
			for _, w := range ws {
				r := w.Rank
				if relabel != nil {
					r = relabel[r]
				}
				out = append(out, fmt.Sprintf("%d %s %.6f %.6f %.6f", r, w.Func, w.Fraction, w.Mean, w.Sigma))
			}
			slices.Sort(out)
			return out
		}
		if a, b := key(base.Waterline, nil), key(got.Waterline, inv); !slices.Equal(a, b) {
			t.Fatalf("trial %d: flags change under relabelling:\n%v\n%v", trial, a, b)
		}
		if !slices.ContainsFunc(base.Waterline, func(w WaterlineFlag) bool { return w.Rank == 0 && w.Func == "hog" }) {
			t.Fatalf("trial %d: the hog is not flagged: %v", trial, base.Waterline)
		}
	}
}

// Sampling noise alone (multinomial draws from one distribution) flags
// (rank, function) pairs at most at the family-wise rate Alpha per
// group: over 200 groups of 16 ranks, a handful at most.
func TestWaterlineFalseFlagRate(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	cfg := DefaultConfig()
	weights := []int64{900, 500, 300, 200, 100, 50, 30, 20}
	fired := 0
	const trials = 200
	for trial := range trials {
		sc := newScenario()
		for r := range 16 {
			b := sc.prof(sc.cur, r)
			for i, w := range weights {
				b.add([]stack.Func{{Name: "main", Kind: stack.Native}, {Name: fmt.Sprintf("f%d", i), Kind: stack.Native}}, w)
			}
		}
		sc.resample(uint64(trial))
		rep, err := Analyze(sc.input(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Waterline) > 0 {
			fired++
		}
	}
	// Alpha = 1% per group; allow 4% (binomial tail of 200 trials).
	if fired > trials*4/100 {
		t.Fatalf("%d of %d noise-only groups flagged", fired, trials)
	}
	t.Logf("%d of %d noise-only groups flagged (alpha %g)", fired, trials, cfg.Alpha)
}

// Exit alignment removes host clock offsets: the same instances with any
// per-rank offsets give the same slow ranks, and lateness within the
// reported offset error (offsets are estimated once per window from the
// exits, barrier.go).
func TestSlowRankClockOffsetInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	ranks := []int{0, 1, 2, 3, 4, 5, 6, 7}
	cfg := DefaultConfig()
	for trial := range 20 {
		late := map[int]float64{rng.IntN(8): 0.2 + rng.Float64()}
		ref := genCalls("c", ranks, 100, late, nil, nil, 0.02, 100, true, uint64(trial))
		off := map[int]float64{}
		for _, r := range ranks {
			off[r] = 50 * (2*rng.Float64() - 1) // ±50 ms
		}
		got := genCalls("c", ranks, 100, late, nil, off, 0.02, 100, true, uint64(trial))
		a, err := Analyze(&Input{Calls: ref}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Analyze(&Input{Calls: got}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.SlowRanks) != 1 {
			t.Fatalf("trial %d: %d slow ranks without offsets: %+v", trial, len(a.SlowRanks), a.SlowRanks)
		}
		if len(b.SlowRanks) != 1 || a.SlowRanks[0].Rank != b.SlowRanks[0].Rank || a.SlowRanks[0].Align != AlignExit {
			t.Fatalf("trial %d: offsets change the result:\n%+v\n%+v", trial, a.SlowRanks, b.SlowRanks)
		}
		x, y := a.SlowRanks[0], b.SlowRanks[0]
		if tol := max(x.OffsetErrMs, y.OffsetErrMs) + 1e-3; math.Abs(x.MeanLateMs-y.MeanLateMs) > tol || math.Abs(x.PeerMeanMs-y.PeerMeanMs) > tol {
			t.Fatalf("trial %d: offsets move lateness beyond the offset error:\n%+v\n%+v", trial, x, y)
		}
	}
}

// The slow-rank statistic equals a direct leave-one-out computation over
// the ranks' mean lateness.
func TestSlowRankLeaveOneOut(t *testing.T) {
	ranks := []int{0, 1, 2, 3}
	calls := genCalls("c", ranks, 50, map[int]float64{1: 0.5, 2: 0.05}, nil, nil, 0, 100, false, 1)
	rep, err := Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SlowRanks) != 1 || rep.SlowRanks[0].Rank != 1 {
		t.Fatalf("slow ranks %+v", rep.SlowRanks)
	}
	s := rep.SlowRanks[0]
	// Others' means: 0, 0.05, 0 → μ₋ = 0.01667, σ₋ = 0.02357 (> noise floor 0.02).
	if math.Abs(s.MeanLateMs-0.5) > 1e-3 || math.Abs(s.PeerMeanMs-0.05/3) > 1e-3 || math.Abs(s.PeerSigmaMs-0.02357) > 1e-3 {
		t.Fatalf("%+v", s)
	}
	var _ collective.Call
}
