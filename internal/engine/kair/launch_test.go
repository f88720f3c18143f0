package kair

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// launchTraces: per rank two host launches (correlation 1, 2) and their
// kernels on device 0 stream 7. kA is slowed by slowA on rank 2; launch B
// is delayed by hostGap on rank 2.
func launchTraces(n int, slowA, hostGap int64) []optrace.Trace {
	tr := make([]optrace.Trace, n)
	for r := range tr {
		a := int64(100_000)
		lb := int64(6_000)
		if r == 2 {
			a *= slowA
			lb += hostGap
		}
		j := int64(r * 100)
		kaEnd := 10_000 + j + a
		kbStart := max(kaEnd, lb+5_000)
		tr[r] = optrace.Trace{Rank: r, Events: []optrace.Event{
			{Name: "cudaLaunchKernel", Cat: optrace.Runtime, TID: 1, Device: -1, StartNS: 0, DurNS: 5_000, Correlation: 1, Seq: -1},
			{Name: "cudaLaunchKernel", Cat: optrace.Runtime, TID: 1, Device: -1, StartNS: lb, DurNS: 5_000, Correlation: 2, Seq: -1},
			{Name: "kA", Cat: optrace.GPUKernel, Stream: 7, Device: 0, StartNS: 10_000 + j, DurNS: a, Correlation: 1, Seq: -1},
			{Name: "kB", Cat: optrace.GPUKernel, Stream: 7, Device: 0, StartNS: kbStart, DurNS: 50_000, Correlation: 2, Seq: -1},
		}}
	}
	return tr
}

func TestSlowKernelBlamedThroughStream(t *testing.T) {
	rep := mustAnalyze(t, launchTraces(4, 4, 0), DefaultConfig())
	if len(rep.RootCauses) != 1 {
		t.Fatalf("want one cause\n%s", dump(rep))
	}
	c := rep.RootCauses[0]
	if c.Kind != KindOp || c.Rank != 2 || c.Name != "kA" || c.Symptoms != 2 {
		t.Fatalf("cause %+v, want op kA on rank 2 explaining kA and kB\n%s", c, dump(rep))
	}
}

// A host delay before the second launch: kB starts late behind its launch
// (gating predecessor: the launch ends after kA), the launch itself
// started late after an on-time first launch → the host edge is blamed.
func TestLateLaunchBlamesHostEdge(t *testing.T) {
	rep := mustAnalyze(t, launchTraces(4, 1, 300_000), DefaultConfig())
	if len(rep.RootCauses) != 1 {
		t.Fatalf("want one cause\n%s", dump(rep))
	}
	c := rep.RootCauses[0]
	if c.Kind != KindEdge || c.Rank != 2 || c.Name != "cudaLaunchKernel" || c.From != "cudaLaunchKernel" || c.Symptoms != 2 {
		t.Fatalf("cause %+v, want host edge launch → launch on rank 2\n%s", c, dump(rep))
	}
}

// A rank whose AllReduce starts somewhat late but still before the slow
// rank arrives waited anyway: its lateness is explained by the last
// arrival, so the walk crosses ranks and no edge on rank 0 is blamed.
func TestWalkCrossesToLastArrival(t *testing.T) {
	for _, ids := range []bool{true, false} {
		progs := uniform(6)
		progs[2][2].dur *= 3
		progs[0][3].gap = 60_000
		tr := simulate(progs, true)
		if !ids {
			// No (comm, seq) in the trace (gloo, torch < 2.0): the k-th
			// AllReduce of the step is the instance.
			for i := range tr {
				for j := range tr[i].Events {
					tr[i].Events[j].Comm, tr[i].Events[j].Seq = "", -1
				}
			}
		}
		rep := mustAnalyze(t, tr, DefaultConfig())
		if len(rep.RootCauses) != 1 {
			t.Fatalf("ids=%v: want one cause\n%s", ids, dump(rep))
		}
		c := rep.RootCauses[0]
		if c.Kind != KindOp || c.Rank != 2 || c.Name != "aten::bwd_b" || c.Symptoms != 3 {
			t.Fatalf("ids=%v: cause %+v, want rank 2 aten::bwd_b explaining 3 symptoms\n%s", ids, c, dump(rep))
		}
	}
}
