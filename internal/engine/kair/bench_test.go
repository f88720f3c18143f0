package kair

import (
	"fmt"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// bigStep is a step DAG of ranks × perRank events: blocks of 49 compute
// ops then an AllReduce, with one slow op on rank 3 in the middle.
func bigStep(ranks, perRank int) []optrace.Trace {
	prog := make([]op, perRank)
	for i := range prog {
		prog[i] = op{fmt.Sprintf("aten::op%d", i%97), optrace.CPUOp, 1_000, 10_000 + int64(i%13)*1_000}
		if i%50 == 49 {
			prog[i] = op{arName, optrace.Collective, 1_000, 20_000}
		}
	}
	progs := make([][]op, ranks)
	for r := range progs {
		progs[r] = prog
	}
	slow := append([]op(nil), prog...)
	slow[perRank/2-10].dur *= 5
	progs[3] = slow
	return simulate(progs, true)
}

// BenchmarkBlame1M: Stages 2–3 over a 1,000,000-event step DAG (issue 9
// acceptance: < 1 s).
func BenchmarkBlame1M(b *testing.B) {
	tr := bigStep(8, 125_000)
	rep, err := Analyze(tr, 0, DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	if len(rep.RootCauses) == 0 || rep.RootCauses[0].Rank != 3 || rep.RootCauses[0].Kind != KindOp {
		b.Fatalf("wrong top cause: %+v", rep.RootCauses)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Analyze(tr, 0, DefaultConfig()); err != nil {
			b.Fatal(err)
		}
	}
}

// The big DAG names the injected op too (and is the benchmark's check in
// a unit test, at a size that keeps go test fast).
func TestBigStepNamesCulprit(t *testing.T) {
	tr := bigStep(8, 5_000)
	rep := mustAnalyze(t, tr, DefaultConfig())
	if len(rep.RootCauses) == 0 {
		t.Fatal("no cause")
	}
	c := rep.RootCauses[0]
	if c.Kind != KindOp || c.Rank != 3 || c.Name != fmt.Sprintf("aten::op%d", (5_000/2-10)%97) {
		t.Fatalf("top cause %+v\n%s", c, dump(rep))
	}
	for _, c := range rep.RootCauses {
		if c.Name == arName || c.From == arName {
			t.Errorf("AllReduce blamed: %+v", c)
		}
	}
}
