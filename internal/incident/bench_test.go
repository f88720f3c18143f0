package incident

import (
	"fmt"
	"testing"
)

// BenchmarkFuse10kEvidence1kJobs: the target — fusing 10,000
// pieces of evidence over 1,000 jobs in under 50 ms (one core).
func BenchmarkFuse10kEvidence1kJobs(b *testing.B) {
	const jobs = 1000
	inputs := make([]Input, jobs)
	total := 0
	for j := range inputs {
		job := fmt.Sprintf("job-%d", j)
		evs := []Evidence{series(job, 0, 200, slowBetween(100, 300, 150)), onset(job, EngineStageFrontier, 100, 100, 150),
			onset(job, EngineGreyhound, 102, 90, 140)}
		for k := 0; len(evs) < 10; k++ {
			e := finding(job, fmt.Sprintf("f%d", k), []Engine{EngineGreyhound, EngineSysom, EngineKair}[k%3], KindGreyhoundLate,
				[]Layer{LayerCollective, LayerCPU, LayerOperator}[k%3], CategoryCompute, []Confidence{ConfidenceHigh, ConfidenceLow}[k%2], 100, 190, RankTarget(k%4, "h"))
			e.Exclusive, e.Subject = k%2 == 0, "comm:world"
			evs = append(evs, e)
		}
		total += len(evs)
		inputs[j] = Input{Job: job, Evidence: evs, NowNS: at(200), Caps: Capabilities{Validation: true, Capture: true, Profile: true, Ranks: 8}}
	}
	if total != 10_000 {
		b.Fatalf("%d pieces of evidence, want 10000", total)
	}
	cfg := DefaultConfig()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		for _, in := range inputs {
			n += len(Fuse(in, cfg))
		}
		if n != jobs {
			b.Fatalf("%d incidents, want %d", n, jobs)
		}
	}
}
