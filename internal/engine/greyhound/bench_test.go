package greyhound

import (
	"testing"
)

// Paper scale (§7, Fig. 18 "256 GPUs"): 256 ranks × 2,000 iterations of 7
// calls = 3.6 M calls.
func paperJob() job {
	j := defaultJob()
	j.world, j.tp, j.iters, j.jitter = 256, 8, 2000, 0.02
	j.slowFrom, j.slowTo, j.slowFactor, j.slowRank = 1500, 2000, 1.3, 77
	return j
}

func BenchmarkIterationTimesRank2000Iters(b *testing.B) {
	calls := rankCalls(paperJob().calls(), 5)
	cfg := DefaultConfig()
	b.ResetTimer()
	for range b.N {
		if s, _ := IterationTimes(calls, cfg); s.Period != 7 {
			b.Fatal(s.Period)
		}
	}
	b.ReportMetric(float64(len(calls))*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkAnalyze256Ranks2000Iters(b *testing.B) {
	j := paperJob()
	in := Input{Calls: j.calls(), Comms: j.comms(), World: j.world}
	cfg := DefaultConfig()
	b.ResetTimer()
	for range b.N {
		rep, err := Analyze(in, cfg)
		if err != nil || rep.Iteration.Period != 7 {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(in.Calls))*float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkCompareGroups256Ranks(b *testing.B) {
	j := paperJob()
	j.iters = 20
	calls, comms := j.calls(), j.comms()
	b.ResetTimer()
	for range b.N {
		CompareGroups(calls, comms, DefaultConfig())
	}
}
