package incident

import (
	"fmt"
	"time"
)

// Test time axis: step s happens at t0 + s × 100 ms, step time 100 ms
// healthy.
const (
	t0     = int64(1_700_000_000_000_000_000)
	stepNS = int64(100 * time.Millisecond)
)

func at(step int64) int64 { return t0 + step*stepNS }

// series is a progress evidence: steps [from, to) at ms(step).
func series(job string, from, to int64, ms func(int64) float64) Evidence {
	e := Evidence{ID: fmt.Sprintf("sf/progress/%d", from), Kind: KindProgress, Engine: EngineStageFrontier, Job: job, AtNS: at(to),
		Window: Span{FromStep: from, ToStep: to - 1, FromNS: at(from), ToNS: at(to - 1)}, Signal: SignalProgress, Ranks: 8}
	for s := from; s < to; s++ {
		e.Samples = append(e.Samples, Sample{Step: s, WallNS: at(s), MS: ms(s)})
	}
	return e
}

// slowBetween: 100 ms healthy, slowMS in [a, b).
func slowBetween(a, b int64, slowMS float64) func(int64) float64 {
	return func(s int64) float64 {
		if s >= a && s < b {
			return slowMS
		}
		return 100
	}
}

func onset(job string, eng Engine, step int64, before, after float64) Evidence {
	k := KindStageChange
	if eng == EngineGreyhound {
		k = KindGreyhoundChange
	}
	return Evidence{ID: fmt.Sprintf("%s/onset/%d", eng, step), Kind: k, Engine: eng, Job: job, AtNS: at(step + 30),
		Window: Span{FromStep: step, ToStep: step, FromNS: at(step), ToNS: at(step)}, Signal: SignalOnset,
		BeforeMS: before, AfterMS: after, Verified: true, Text: "step time rose"}
}

func relief(job string, eng Engine, step int64, before, after float64) Evidence {
	e := onset(job, eng, step, before, after)
	e.ID = fmt.Sprintf("%s/relief/%d", eng, step)
	e.Signal = SignalRelief
	return e
}

// finding names targets in [from, to] steps.
func finding(job string, id string, eng Engine, kind Kind, layer Layer, cat Category, conf Confidence, from, to int64, ts ...Target) Evidence {
	return Evidence{ID: id, Kind: kind, Engine: eng, Job: job, AtNS: at(to + 5), Window: Span{FromStep: from, ToStep: to, FromNS: at(from), ToNS: at(to)},
		Signal: SignalFinding, Targets: ts, Layer: layer, Category: cat, Confidence: conf, Text: id}
}

func fuse(evs []Evidence, now int64, prior ...Incident) []Incident {
	return Fuse(Input{Job: "j", Evidence: evs, NowNS: now, Prior: prior}, DefaultConfig())
}
