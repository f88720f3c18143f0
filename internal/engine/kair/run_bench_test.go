package kair

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// localizeTraces: ranks × 2 steps × perStep kernels of 10 µs; rank 3
// runs 1.5× slower (it falls behind within each step).
func localizeTraces(ranks, perStep int) []optrace.Trace {
	tr := make([]optrace.Trace, ranks)
	for r := range tr {
		tr[r].Rank = r
		tr[r].Events = make([]optrace.Event, 0, 2*perStep)
		for s := range int64(2) {
			t0 := s * int64(perStep) * 16_000
			for i := range perStep {
				d := int64(10_000)
				if r == 3 {
					d = 15_000
				}
				tr[r].Events = append(tr[r].Events, optrace.Event{Name: "k", Cat: optrace.GPUKernel, Device: 0,
					StartNS: t0 + int64(i)*d + int64(r%7)*50, DurNS: d - 1_000, Step: s, Seq: -1})
			}
		}
	}
	return tr
}

// BenchmarkLocalize2048x512: Stage 1 end to end (binning, exact pairwise
// K-S, reference approximation, ranking agreement) over 2,048 ranks ×
// 512 windows (issue 9 target for the pairwise part: < 2 s on 2 cores).
func BenchmarkLocalize2048x512(b *testing.B) {
	tr := localizeTraces(2048, 256)
	cfg := DefaultRhythmConfig()
	cfg.Windows = 512
	r, err := Localize(tr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	if r.Verdict != RhythmStraggler || r.Straggler != 3 {
		b.Fatalf("%s %d: %s", r.Verdict, r.Straggler, r.Why)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Localize(tr, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRun: the whole pipeline on a realistic capture: 16 ranks × 4
// steps × 4,002 ops (≈ 256k events), one slow op on rank 5.
func BenchmarkRun(b *testing.B) {
	tr := simulateSteps(stepsUpTo(4), everyStep(16, func() []op { return richProgram(2000, 2000) }, func(_ int64, p [][]op) {
		p[5][1500].dur *= 200
	}))
	rep, err := Run(tr, nil, DefaultRunConfig())
	if err != nil {
		b.Fatal(err)
	}
	if rep.Verdict != VerdictCulprit || rep.Causes[0].Rank != 5 || rep.Causes[0].Name != "aten::fwd1500" {
		b.Fatalf("%s", dumpRun(rep))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := Run(tr, nil, DefaultRunConfig()); err != nil {
			b.Fatal(err)
		}
	}
}
