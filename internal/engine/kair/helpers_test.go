package kair

import (
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// op is one step of a hand-built rank program: gap idle ns, then dur ns.
// A collective op waits for every rank's arrival and then runs dur.
type op struct {
	name string
	cat  optrace.Category
	gap  int64
	dur  int64
}

const arName = "nccl:all_reduce"

// program is forward → backward ops → AllReduce → optimizer (µs scale).
func program() []op {
	return []op{
		{"aten::forward", optrace.CPUOp, 0, 100_000},
		{"aten::bwd_a", optrace.CPUOp, 2_000, 80_000},
		{"aten::bwd_b", optrace.CPUOp, 2_000, 80_000},
		{arName, optrace.Collective, 2_000, 30_000},
		{"optimizer.step", optrace.CPUOp, 2_000, 20_000},
	}
}

// simulate runs the per-rank programs in lockstep (the programs must share
// their collectives' positions) and returns one trace per rank for step 0.
// jitter adds a small deterministic per-rank spread so σ/MAD are not 0.
func simulate(progs [][]op, jitter bool) []optrace.Trace {
	n := len(progs)
	t := make([]int64, n)
	traces := make([]optrace.Trace, n)
	for r := range traces {
		traces[r].Rank = r
		t[r] = 1_000_000_000
		traces[r].Events = append(traces[r].Events, optrace.Event{Name: "ProfilerStep#0", Cat: optrace.UserRange,
			TID: 1, Device: -1, StartNS: t[r] - 500, Step: 0, Seq: -1})
	}
	seq := int64(0)
	for i := range progs[0] {
		starts := make([]int64, n)
		for r := range progs {
			o := progs[r][i]
			starts[r] = t[r] + o.gap
			if jitter {
				starts[r] += int64((r*7919)%5) * 100
			}
		}
		if progs[0][i].cat == optrace.Collective {
			last := int64(0)
			for _, s := range starts {
				last = max(last, s)
			}
			for r := range progs {
				o := progs[r][i]
				end := last + o.dur
				traces[r].Events = append(traces[r].Events, optrace.Event{Name: o.name, Cat: o.cat, TID: 1, Device: -1,
					StartNS: starts[r], DurNS: end - starts[r], Step: 0, Comm: "world", Seq: seq})
				t[r] = end
			}
			seq++
			continue
		}
		for r := range progs {
			o := progs[r][i]
			d := o.dur
			if jitter {
				d += int64((r*104729)%7) * 100
			}
			traces[r].Events = append(traces[r].Events, optrace.Event{Name: o.name, Cat: o.cat, TID: 1, Device: -1,
				StartNS: starts[r], DurNS: d, Step: 0, Seq: -1})
			t[r] = starts[r] + d
		}
	}
	return traces
}

func uniform(n int) [][]op {
	p := make([][]op, n)
	for r := range p {
		p[r] = program()
	}
	return p
}
