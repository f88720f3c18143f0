package greyhound

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// meanErr compares the series with the truth: the mean relative error of
// the iteration times it reports, matched by iteration index offset.
func seriesError(t *testing.T, s IterSeries, durs []float64) float64 {
	t.Helper()
	if !s.OK {
		t.Fatalf("no series: %s", s.Reason)
	}
	ours, truth := 0.0, 0.0
	for _, it := range s.Iters {
		ours += it.MS
	}
	ours /= float64(len(s.Iters))
	for _, d := range durs {
		truth += d
	}
	truth /= float64(len(durs))
	return 100 * math.Abs(ours-truth) / truth
}

func TestIterationTimesScenarios(t *testing.T) {
	cfg := DefaultConfig()
	cases := []struct {
		name   string
		mod    func(j *job)
		filter func([]collective.Call) []collective.Call
		maxErr float64 // percent
	}{
		{"clean", func(j *job) {}, nil, 0.5},
		{"5% jitter", func(j *job) { j.jitter = 0.05 }, nil, 1.2},
		{"warm-up calls", func(j *job) { j.warmupCalls = 13 }, nil, 0.5},
		{"1% dropped calls", func(j *job) { j.drop = 0.01 }, nil, 1.2},
		{"slowdown inside", func(j *job) { j.slowFrom, j.slowTo, j.slowFactor = 100, 200, 1.5 }, nil, 0.5},
		{"first iteration differs", func(j *job) {}, func(c []collective.Call) []collective.Call {
			return append(slices.Clone(c[:2]), c[5:]...) // iteration 0 lost 3 calls
		}, 0.8},
		{"swapped calls of two communicators", func(j *job) {}, func(c []collective.Call) []collective.Call {
			c = slices.Clone(c)
			rng := rand.New(rand.NewPCG(3, 3))
			for i := 7; i+1 < len(c); i += 7 {
				if rng.IntN(10) == 0 && c[i].Comm != c[i+1].Comm {
					c[i].EnterNS, c[i+1].EnterNS = c[i+1].EnterNS, c[i].EnterNS
					c[i], c[i+1] = c[i+1], c[i]
				}
			}
			return c
		}, 1.2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := defaultJob()
			c.mod(&j)
			calls := rankCalls(j.calls(), 3)
			if c.filter != nil {
				calls = c.filter(calls)
			}
			s, err := IterationTimes(calls, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if s.Period != 7 {
				t.Fatalf("period %d (acf %v match %v), want 7: %s", s.Period, s.ACF, s.Match, s.Reason)
			}
			_, durs := j.truth()
			if e := seriesError(t, s, durs); e > c.maxErr {
				t.Errorf("error %.3f%% > %.1f%% (iters %d, warmup %d, unmatched %d, resyncs %d)", e, c.maxErr, len(s.Iters), s.Warmup, s.Unmatched, s.Resyncs)
			}
			if len(s.Iters) < j.iters-20 {
				t.Errorf("only %d of %d iterations", len(s.Iters), j.iters)
			}
		})
	}
}

// Property: with no drops, the series telescopes — the iteration times sum
// to the elapsed time between the first and the last anchor.
func TestIterationTimesSumToElapsed(t *testing.T) {
	for seed := range uint64(20) {
		j := defaultJob()
		j.seed, j.jitter, j.iters = seed, 0.03, 50+int(seed)*7
		s, err := IterationTimes(rankCalls(j.calls(), int(seed%8)), DefaultConfig())
		if err != nil || !s.OK {
			t.Fatal(err, s.Reason)
		}
		sum := 0.0
		for _, it := range s.Iters {
			sum += it.MS
		}
		first := s.Iters[0].EndNS - int64(math.Round(s.Iters[0].MS*1e6))
		elapsed := float64(s.Iters[len(s.Iters)-1].EndNS-first) / 1e6
		if math.Abs(sum-elapsed) > 1e-6*elapsed {
			t.Fatalf("seed %d: Σ %v ms != elapsed %v ms", seed, sum, elapsed)
		}
		for i := 1; i < len(s.Iters); i++ {
			if s.Iters[i].Iter != s.Iters[i-1].Iter+1 {
				t.Fatalf("seed %d: gap at %d", seed, i)
			}
		}
	}
}

// One call per iteration: a constant sequence has period 1.
func TestIterationTimesOneCallPerIteration(t *testing.T) {
	var calls []collective.Call
	for i := range 100 {
		e := t0 + int64(i)*50e6
		calls = append(calls, collective.Call{Rank: 0, Comm: "w", Seq: int64(i), Op: collective.AllReduce, Bytes: 1 << 20, Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1e6, Step: -1})
	}
	s, err := IterationTimes(calls, DefaultConfig())
	if err != nil || s.Period != 1 || len(s.Iters) != 99 || math.Abs(s.Iters[0].MS-50) > 1e-9 {
		t.Fatalf("%v %+v", err, s)
	}
}

// 200 distinct calls per iteration: with dense codes as ACF values the
// ramp gives a false period 1; the symbol-exact ACF finds 200.
func TestIterationTimesLongDistinctPattern(t *testing.T) {
	var calls []collective.Call
	for i := range 60 * 200 {
		e := t0 + int64(i)*1e6
		calls = append(calls, collective.Call{Rank: 0, Comm: "w", Seq: int64(i), Op: collective.AllGather, Bytes: int64(1000 + i%200), Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1, Step: -1})
	}
	s, err := IterationTimes(calls, DefaultConfig())
	if err != nil || s.Period != 200 || math.Abs(s.Iters[0].MS-200) > 1e-9 {
		t.Fatalf("%v period %d reason %q", err, s.Period, s.Reason)
	}
}

func TestIterationTimesErrors(t *testing.T) {
	j := defaultJob()
	all := j.calls()
	if _, err := IterationTimes(all, DefaultConfig()); err == nil {
		t.Error("mixed ranks accepted")
	}
	s, err := IterationTimes(nil, DefaultConfig())
	if err != nil || s.OK {
		t.Error("empty")
	}
	// Random calls: no period, said so.
	rng := rand.New(rand.NewPCG(1, 1))
	var calls []collective.Call
	for i := range 2000 {
		calls = append(calls, collective.Call{Rank: 0, Comm: "w", Op: collective.AllReduce, Bytes: int64(rng.IntN(50)), EnterNS: t0 + int64(i)*1e6, ReturnNS: t0 + int64(i)*1e6})
	}
	if s, _ := IterationTimes(calls, DefaultConfig()); s.OK || s.Reason == "" {
		t.Errorf("random calls gave %+v", s)
	}
}
