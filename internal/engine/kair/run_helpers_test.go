package kair

import (
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// richProgram is nf forward ops, nb backward ops, an AllReduce and the
// optimizer: enough completions per step for Stage 1's K-S test.
func richProgram(nf, nb int) []op {
	p := make([]op, 0, nf+nb+2)
	for i := range nf {
		p = append(p, op{fmt.Sprintf("aten::fwd%d", i), optrace.CPUOp, 1_000, 20_000 + int64(i%5)*2_000})
	}
	for i := range nb {
		p = append(p, op{fmt.Sprintf("aten::bwd%d", i), optrace.CPUOp, 1_000, 30_000 + int64(i%3)*5_000})
	}
	return append(p, op{arName, optrace.Collective, 2_000, 50_000}, op{"optimizer.step", optrace.CPUOp, 2_000, 40_000})
}

// stepGap is the idle time between the slowest rank's end of one step
// and the next step's start (the optimizer ends every step in lockstep).
const stepGap = 10_000

// simulateSteps runs simulate once per step (progsOf(step) gives that
// step's per-rank programs) and lays the steps out back to back (the next
// starts stepGap after the last rank finished), with step numbers,
// ProfilerStep# names and collective sequence numbers that continue
// across steps.
func simulateSteps(steps []int64, progsOf func(step int64) [][]op) []optrace.Trace {
	var out []optrace.Trace
	shift := int64(0)
	for _, s := range steps {
		tr := simulate(progsOf(s), true)
		last := int64(0)
		for r := range tr {
			for _, e := range tr[r].Events {
				last = max(last, e.EndNS())
			}
		}
		if out == nil {
			out = make([]optrace.Trace, len(tr))
			for r := range tr {
				out[r].Rank = tr[r].Rank
			}
		}
		for r := range tr {
			for _, e := range tr[r].Events {
				e.StartNS += shift
				e.Step = s
				if e.Cat == optrace.UserRange {
					e.Name = fmt.Sprintf("ProfilerStep#%d", s)
				}
				if e.Seq >= 0 {
					e.Seq += s * 1_000
				}
				out[r].Events = append(out[r].Events, e)
			}
		}
		// simulate starts every step at 1e9 − 500 (the ProfilerStep mark).
		shift += last - (1_000_000_000 - 500) + stepGap
	}
	return out
}

// everyStep returns progsOf that applies mod to fresh programs of n ranks.
func everyStep(n int, prog func() []op, mod func(step int64, p [][]op)) func(int64) [][]op {
	return func(s int64) [][]op {
		p := make([][]op, n)
		for r := range p {
			p[r] = prog()
		}
		if mod != nil {
			mod(s, p)
		}
		return p
	}
}

func stepsUpTo(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i)
	}
	return s
}

// skewed returns traces with rank r's event times shifted by by[r] (a
// clock running ahead by that much); the input is not modified.
func skewed(traces []optrace.Trace, by map[int]int64) []optrace.Trace {
	out := slices.Clone(traces)
	for i := range out {
		x := by[out[i].Rank]
		out[i].Events = slices.Clone(out[i].Events)
		for j := range out[i].Events {
			out[i].Events[j].StartNS += x
		}
	}
	return out
}

func deepCopy(traces []optrace.Trace) []optrace.Trace {
	out := slices.Clone(traces)
	for i := range out {
		out[i].Events = slices.Clone(out[i].Events)
	}
	return out
}

// copyBurst gives rank r of tr 300 short host-to-device copies at the
// start of every step: a rhythm no other rank has, which Stage 2 cannot
// score (no peer has the instances).
func copyBurst(tr []optrace.Trace, r int, steps int64) {
	for s := range steps {
		var t0 int64 = 1 << 62
		for _, e := range tr[r].Events {
			if e.Step == s {
				t0 = min(t0, e.StartNS)
			}
		}
		for i := range int64(300) {
			tr[r].Events = append(tr[r].Events, optrace.Event{Name: "Memcpy HtoD", Cat: optrace.Memcpy, Device: 0, Stream: 9,
				StartNS: t0 + i*100, DurNS: 50, Step: s, Seq: -1})
		}
	}
}
