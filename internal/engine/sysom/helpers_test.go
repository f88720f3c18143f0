package sysom

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// t0 is 2026-01-01T00:00:00Z: inside collective's timestamp bounds.
const t0 = int64(1_767_225_600) * 1e9

// ranksSpec reads "0-7", "0,2,5" or "1-3,6".
func ranksSpec(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("ranks %q: %v", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("ranks %q: %v", s, err)
			}
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out, nil
}

// frame reads "k:name", "py:name", "sym:name" or "name", each with an
// optional "@module".
func frame(s string) stack.Func {
	f := stack.Func{Kind: stack.Native}
	for _, p := range []struct {
		pre  string
		kind stack.Kind
	}{{"k:", stack.Kernel}, {"py:", stack.Python}, {"sym:", stack.Symbol}} {
		if rest, ok := strings.CutPrefix(s, p.pre); ok {
			f.Kind, s = p.kind, rest
			break
		}
	}
	if name, mod, ok := strings.Cut(s, "@"); ok {
		s, f.Module = name, mod
	}
	if f.Kind == stack.Kernel && f.Module == "" {
		f.Module = "kernel"
	}
	f.Name = s
	return f
}

// profBuilder accumulates stacks per rank in first-appearance order.
type profBuilder struct {
	funcs map[stack.Func]int32
	p     *stack.Profile
}

func (b *profBuilder) add(frames []stack.Func, count int64) {
	var st stack.Stack
	for _, f := range frames {
		id, ok := b.funcs[f]
		if !ok {
			id = int32(len(b.p.Funcs))
			b.funcs[f] = id
			b.p.Funcs = append(b.p.Funcs, f)
		}
		st.Frames = append(st.Frames, id)
	}
	st.Count = count
	b.p.Stacks = append(b.p.Stacks, st)
	b.p.Total += count
}

// scenario is the input a scenario file builds.
type scenario struct {
	in       Input
	cfg      Config
	cur      map[int]*profBuilder
	base     map[int]*profBuilder
	os, osb  map[string][]osstat.Point
	nodeList []string
}

func newScenario() *scenario {
	return &scenario{cfg: DefaultConfig(), cur: map[int]*profBuilder{}, base: map[int]*profBuilder{},
		os: map[string][]osstat.Point{}, osb: map[string][]osstat.Point{}}
}

func (sc *scenario) prof(m map[int]*profBuilder, r int) *profBuilder {
	b := m[r]
	if b == nil {
		b = &profBuilder{funcs: map[stack.Func]int32{}, p: &stack.Profile{Rank: r, StartNS: t0, EndNS: t0 + 60e9, Hz: 99, Ratio: 0.1}}
		m[r] = b
	}
	return b
}

// input assembles the Input.
func (sc *scenario) input() *Input {
	in := sc.in
	in.Profiles, in.Baseline = nil, nil
	if len(sc.cur) > 0 {
		in.Profiles = map[int]*stack.Profile{}
		for r, b := range sc.cur {
			in.Profiles[r] = b.p
		}
	}
	if len(sc.base) > 0 {
		in.Baseline = map[int]*stack.Profile{}
		for r, b := range sc.base {
			in.Baseline[r] = b.p
		}
	}
	batches := func(m map[string][]osstat.Point) []osstat.Batch {
		var out []osstat.Batch
		for _, n := range sortedKeys(m) {
			out = append(out, osstat.Batch{Node: n, StartNS: t0, EndNS: t0 + 5e9, Points: m[n]})
		}
		return out
	}
	in.OS, in.OSBase = batches(sc.os), batches(sc.osb)
	return &in
}

// kv parses key=value arguments.
func kv(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

// rankMS reads "4:0.6,5:0.2".
func rankMS(s string) (map[int]float64, error) {
	out := map[int]float64{}
	if s == "" {
		return out, nil
	}
	for _, p := range strings.Split(s, ",") {
		a, b, _ := strings.Cut(p, ":")
		r, err := strconv.Atoi(a)
		if err != nil {
			return nil, err
		}
		v, err := strconv.ParseFloat(b, 64)
		if err != nil {
			return nil, err
		}
		out[r] = v
	}
	return out, nil
}

// genCalls synthesizes n instances of a collective on comm (see the
// "calls" command in scenario_test.go).
func genCalls(comm string, ranks []int, n int, late, gpuLate, offset map[int]float64, jitter, iterMs float64, exit bool, seed uint64) []collective.Call {
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []collective.Call
	ms := func(x float64) int64 { return int64(math.Round(x * 1e6)) }
	for i := range n {
		base := t0 + int64(i)*ms(iterMs)
		ready := map[int]int64{}
		dev := map[int]int64{}
		var lastDev int64
		for _, r := range ranks {
			j := 0.0
			if jitter > 0 {
				j = jitter * (2*rng.Float64() - 1)
			}
			ready[r] = base + ms(late[r]+j)
			dev[r] = max(ready[r]+ms(0.01), base+ms(gpuLate[r]))
			lastDev = max(lastDev, dev[r])
		}
		exitT := lastDev + ms(0.2)
		for _, r := range ranks {
			o := ms(offset[r])
			c := collective.Call{Rank: r, Comm: comm, Seq: int64(i), Op: collective.AllReduce, Bytes: 64 << 20, Peer: -1, Root: -1,
				EnterNS: ready[r] + o, Step: int64(i)}
			c.ReturnNS = c.EnterNS + ms(0.02)
			if exit {
				c.DevStartNS = dev[r] + o
				c.DevEndNS = exitT + o + int64(rng.IntN(5000))
			}
			out = append(out, c)
		}
	}
	return out
}

// jitterProfiles scales every stack count of the current profiles by
// (1 + frac·u), u uniform in [−1, 1], deterministically.
func (sc *scenario) jitterProfiles(seed uint64, frac float64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	for _, r := range sortedKeys(sc.cur) {
		p := sc.cur[r].p
		p.Total = 0
		for i := range p.Stacks {
			c := float64(p.Stacks[i].Count) * (1 + frac*(2*rng.Float64()-1))
			p.Stacks[i].Count = max(1, int64(math.Round(c)))
			p.Total += p.Stacks[i].Count
		}
	}
}

// resample replaces every current profile's stack counts by a
// multinomial draw of the same total from its own distribution: pure
// sampling noise, what a profiler at 10 samples/s adds.
func (sc *scenario) resample(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	for _, r := range sortedKeys(sc.cur) {
		p := sc.cur[r].p
		cum := make([]int64, len(p.Stacks))
		var c int64
		for i, s := range p.Stacks {
			c += s.Count
			cum[i] = c
		}
		counts := make([]int64, len(p.Stacks))
		for range p.Total {
			x := rng.Int64N(p.Total)
			i, _ := slices.BinarySearch(cum, x+1)
			counts[i]++
		}
		kept := p.Stacks[:0]
		for i, s := range p.Stacks {
			if counts[i] > 0 {
				s.Count = counts[i]
				kept = append(kept, s)
			}
		}
		p.Stacks = kept
	}
}

// render prints a report compactly for scenario expectations.
func render(rep *Report) string {
	var b strings.Builder
	for _, s := range rep.SlowRanks {
		fmt.Fprintf(&b, "slow rank %d on %s: late %.3f ms (peers %.3f ± %.3f ms, z %.1f), %d instances, %d steps, late in %.0f%%, last %.0f%%, align %s\n",
			s.Rank, s.Group, s.MeanLateMs, s.PeerMeanMs, s.PeerSigmaMs, s.Z, s.Instances, s.Steps, 100*s.Persistence, 100*s.LastShare, s.Align)
	}
	for _, w := range rep.Waterline {
		nw := ""
		if w.New {
			nw = " new"
		}
		fmt.Fprintf(&b, "waterline %s rank %d: %s %s (mean %s, σ %.4f, z %.1f, %d samples)%s\n",
			w.Group, w.Rank, w.Func, pct(w.Fraction), pct(w.Mean), w.Sigma, min(w.Z, 999), w.Samples, nw)
	}
	for _, d := range rep.Diagnoses {
		fmt.Fprintf(&b, "diagnosis rank %d (%s) vs peer %d %v: layer %s", d.Rank, d.Group, d.Peer, d.Flagged, d.Layer)
		if d.Cause != "" {
			fmt.Fprintf(&b, " (%s)", d.Cause)
		}
		fmt.Fprintf(&b, ", confidence %s\n", d.Confidence)
		for _, l := range d.Layers {
			fmt.Fprintf(&b, "  %s %s", l.Layer, l.Finding)
			if l.Cause != "" {
				fmt.Fprintf(&b, " (%s)", l.Cause)
			}
			b.WriteString("\n")
			for _, e := range l.Evidence {
				fmt.Fprintf(&b, "    - %s\n", e)
			}
			for _, p := range l.Paths {
				pre := ""
				if p.PreExisting {
					pre = " (pre-existing)"
				}
				fmt.Fprintf(&b, "    path %s: %s%s\n", p.Cause, strings.Join(p.Stack, ";"), pre)
			}
			if l.Next != "" {
				fmt.Fprintf(&b, "    next: %s\n", l.Next)
			}
		}
		fmt.Fprintf(&b, "  summary: %s\n", d.Summary)
	}
	if t := rep.Temporal; t != nil {
		fmt.Fprintf(&b, "temporal: %.1f ms vs %.1f ms (%+.1f%%), %d vs %d ranks\n", t.IterMs, t.IterBaseMs, 100*t.Rise, t.Ranks, t.BaseRanks)
		for _, e := range t.Evidence {
			fmt.Fprintf(&b, "  - %s\n", e)
		}
		for _, p := range t.Candidates {
			fmt.Fprintf(&b, "  candidate %s: %s\n", p.Cause, strings.Join(p.Stack, ";"))
		}
		if len(t.Suspects) > 0 {
			fmt.Fprintf(&b, "  suspects (low confidence): %v\n", t.Suspects)
		}
		if t.Next != "" {
			fmt.Fprintf(&b, "  next: %s\n", t.Next)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	if b.Len() == 0 {
		b.WriteString("nothing flagged\n")
	}
	return b.String()
}

// renderTree prints a tree indented, one node a line.
func renderTree(n *Node, diff bool) string {
	var b strings.Builder
	var rec func(n *Node, depth int)
	rec = func(n *Node, depth int) {
		b.WriteString(strings.Repeat("  ", depth))
		if diff {
			fmt.Fprintf(&b, "%s a=%d b=%d\n", n.Name, n.A, n.B)
		} else {
			fmt.Fprintf(&b, "%s %d self=%d\n", n.Name, n.A, n.Self)
		}
		for _, c := range n.Children {
			rec(c, depth+1)
		}
	}
	rec(n, 0)
	return b.String()
}
