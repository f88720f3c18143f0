package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// hotPaths reads a differential tree (A: the flagged rank or now, B: the
// peer or the baseline) and returns the paths whose share grew (§3.1 CPU
// diff, temporal baseline): the deepest nodes whose inclusive fraction
// in A exceeds B's by at least Delta, holding at least MinSamples
// samples in A, and beating the two-proportion sampling noise at the
// family-wise rate Alpha over the nodes tested. Deepest, because an
// interrupt chain grows all its ancestors by the same amount; the stack
// shows them. Fractions are of each side's own total, so growth
// somewhere is shrinkage elsewhere and the root never differs.
func hotPaths(root *Node, cfg Config) []HotPath {
	ta, tb := float64(root.A), float64(root.B)
	if ta == 0 {
		return nil
	}
	frac := func(n int64, t float64) float64 {
		if t == 0 {
			return 0
		}
		return float64(n) / t
	}
	// The nodes tested are those the walk below visits.
	eligible := func(n *Node) bool { return n.A >= cfg.MinSamples && float64(n.A)/ta >= cfg.Delta }
	m := 0
	root.Walk(func(n *Node, _ []*Node) bool {
		if !eligible(n) {
			return false
		}
		m++
		return true
	})
	zb := noiseZ(cfg.Alpha, m, cfg.K)
	qualifies := func(n *Node) bool {
		fa, fb := frac(n.A, ta), frac(n.B, tb)
		d := fa - fb
		if d < cfg.Delta {
			return false
		}
		if tb == 0 {
			return true
		}
		p := float64(n.A+n.B) / (ta + tb)
		se := math.Sqrt(p * (1 - p) * (1/ta + 1/tb))
		return d >= zb*se
	}
	var out []HotPath
	var rec func(n *Node, path []string, fr []float64) bool
	rec = func(n *Node, path []string, fr []float64) bool {
		path = append(path, n.Name)
		fr = append(fr, round(frac(n.A, ta), 5))
		emitted := false
		for _, c := range n.Children {
			if eligible(c) && rec(c, path, fr) {
				emitted = true
			}
		}
		if emitted || !qualifies(n) {
			return emitted
		}
		st := slices.Clone(path)
		out = append(out, HotPath{Func: n.Name, Stack: st, Fraction: round(frac(n.A, ta), 5), PeerFraction: round(frac(n.B, tb), 5),
			Samples: n.A, Cause: classify(st), fracs: slices.Clone(fr)})
		return true
	}
	for _, c := range root.Children {
		if eligible(c) {
			rec(c, nil, nil)
		}
	}
	slices.SortStableFunc(out, func(a, b HotPath) int {
		return cmp.Or(cmp.Compare(b.Fraction-b.PeerFraction, a.Fraction-a.PeerFraction), cmp.Compare(a.Func, b.Func))
	})
	if len(out) > cfg.MaxPaths {
		out = out[:cfg.MaxPaths]
	}
	return out
}

// describe is one evidence sentence for a hot path: its last frames and
// both shares.
func describe(p HotPath, peer string) string {
	st := p.Stack
	lead := ""
	if len(st) > 6 {
		lead = strings.Join(st[:2], " → ") + " → … → "
		st = st[len(st)-4:]
	}
	what := "grew"
	if p.PeerFraction == 0 {
		what = "is new"
	}
	return fmt.Sprintf("%s%s %s: %s of CPU samples (%d) vs %s on %s", lead, strings.Join(st, " → "), what,
		pct(p.Fraction), p.Samples, pct(p.PeerFraction), peer)
}

func pct(x float64) string {
	switch {
	case x == 0:
		return "0%"
	case x < 0.001:
		return "<0.1%"
	}
	return fmt.Sprintf("%.2f%%", 100*x)
}

// irqChain renders an interrupt path from its first interrupt frame,
// each frame with its share (§5.4 case 2: "asm_common_interrupt → … →
// net_rx_action (1.74%) → napi_poll (1.74%) → …").
func irqChain(p HotPath) string {
	start := -1
	for i, f := range p.Stack {
		if irqFrames[f] || netRXFrames[f] {
			start = i
			break
		}
	}
	if start < 0 || len(p.fracs) != len(p.Stack) {
		return ""
	}
	var b strings.Builder
	b.WriteString("interrupt chain: ")
	for i := start; i < len(p.Stack); i++ {
		if i > start {
			b.WriteString(" → ")
		}
		b.WriteString(p.Stack[i])
		if i == len(p.Stack)-1 || p.fracs[i] != p.fracs[i+1] || i == start {
			fmt.Fprintf(&b, " (%s)", pct(p.fracs[i]))
		}
	}
	return b.String()
}
