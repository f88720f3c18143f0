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

// BenchmarkJudge1024 judges a validation of a 1,024-rank group (ring and
// tree passes, 3 sizes × 3 repetitions from both ends of each link).
func BenchmarkJudge1024(b *testing.B) {
	cfg := DefaultConfig()
	ranks := make([]int, 1024)
	for i := range ranks {
		ranks[i] = i
	}
	plan := PlanValidation([]Group{{Comm: "world", Ranks: ranks}}, cfg)
	res := results(plan, map[int]float64{7: 4.5}, map[Link]float64{{100, 101}: 3})
	b.ResetTimer()
	for b.Loop() {
		if v := Judge(plan, res, cfg); v.Kind != VerdictSlowRank {
			b.Fatal(v)
		}
	}
}
