package sysom

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// stepCalls builds a DDP-like window: steps × buckets all-reduces, each
// rank's host delay per step shared by that step's buckets (GC, a
// preemption), plus extra[r](step) on top; exits at the last ready plus
// 0.2 ms, plus ret[r](step) return delay (a synchronous backend reports
// its host return as the exit).
func stepCalls(rng *rand.Rand, n, steps, buckets int, stepSD float64, extra, ret func(r int) float64) []collective.Call {
	var calls []collective.Call
	seq := int64(0)
	for it := range steps {
		d := make([]float64, n)
		for r := range d {
			d[r] = max(0, stepSD*rng.NormFloat64()+stepSD)
			if extra != nil {
				d[r] += extra(r)
			}
		}
		for b := range buckets {
			base := t0 + int64(it)*100e6 + int64(b)*2e6
			ready := make([]int64, n)
			var last int64
			for r := range ready {
				ready[r] = base + int64((d[r]+0.01*rng.Float64())*1e6)
				last = max(last, ready[r])
			}
			for r := range ready {
				ex := last + 200e3
				if ret != nil {
					ex += int64(ret(r) * 1e6)
				}
				calls = append(calls, collective.Call{Rank: r, Comm: "g", Seq: seq, Op: collective.AllReduce, Bytes: 1 << 20, Peer: -1, Root: -1,
					EnterNS: ready[r], ReturnNS: ex, DevStartNS: ready[r], DevEndNS: ex, Step: int64(it)})
			}
			seq++
		}
	}
	return calls
}

// Identical ranks with per-step jitter shared by a step's buckets must
// not produce stragglers: W counts steps, the statistic is robust and a
// flag needs persistence (review item 3: 112 of 200 windows flagged
// when W counted calls).
func TestSlowRankFalseFlagStepJitter(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	for _, c := range []struct{ n, trials int }{{4, 200}, {16, 100}} {
		fired := 0
		for trial := range c.trials {
			rng := rand.New(rand.NewPCG(uint64(trial), uint64(c.n)))
			rep, err := Analyze(&Input{Calls: stepCalls(rng, c.n, 40, 25, 0.3, nil, nil)}, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.SlowRanks) > 0 {
				fired++
			}
		}
		t.Logf("N=%d: %d of %d identical-rank windows flagged a slow rank", c.n, fired, c.trials)
		if fired > c.trials*2/100 {
			t.Errorf("N=%d: %d of %d identical-rank windows flagged a slow rank", c.n, fired, c.trials)
		}
	}
}

// A rank that is persistently late by more than the step jitter is
// still found, over steps (Steps = steps, not calls).
func TestSlowRankStepsNotCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	calls := stepCalls(rng, 8, 40, 25, 0.3, func(r int) float64 {
		if r == 5 {
			return 1
		}
		return 0
	}, nil)
	rep, err := Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SlowRanks) != 1 || rep.SlowRanks[0].Rank != 5 {
		t.Fatalf("want rank 5 slow, got %+v", rep.SlowRanks)
	}
	if s := rep.SlowRanks[0]; s.Steps != 40 || s.Instances != 1000 || s.Persistence < 0.9 {
		t.Fatalf("want 40 steps of 1000 instances, persistent: %+v", s)
	}
}

// Review item 2 (P5): a hog delays both the entry and the host return
// of rank 2's calls (gloo reports the host bracket as the exit).
// Per-instance exit alignment cancelled the delay; per-window offsets
// (or one host clock) keep it.
func TestSlowRankHostReturnDelay(t *testing.T) {
	mk := func() []collective.Call {
		rng := rand.New(rand.NewPCG(1, 2))
		delay := func(r int) float64 {
			if r == 2 {
				return rng.ExpFloat64()
			}
			return 0
		}
		return stepCalls(rng, 4, 100, 1, 0.02, delay, delay)
	}
	for _, c := range []struct {
		name  string
		hosts map[int]string
		align Align
	}{
		{"hosts unknown", nil, AlignExit},
		{"one host", map[int]string{0: "a", 1: "a", 2: "a", 3: "a"}, AlignHost},
	} {
		rep, err := Analyze(&Input{Calls: mk(), Hosts: c.hosts}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.SlowRanks) != 1 || rep.SlowRanks[0].Rank != 2 || rep.SlowRanks[0].Align != c.align {
			t.Fatalf("%s: want rank 2 slow, aligned %s: %+v", c.name, c.align, rep.SlowRanks)
		}
		if s := rep.SlowRanks[0]; s.MeanLateMs < 0.5 {
			t.Errorf("%s: lateness %.3f ms, want most of the 1 ms mean delay", c.name, s.MeanLateMs)
		}
	}
}

// Review item 4 (P2): one 20 ms late call of rank 3 is transient.
func TestSlowRankTransientSpike(t *testing.T) {
	calls := genCalls("g", []int{0, 1, 2, 3, 4, 5, 6, 7}, 100, nil, nil, nil, 0.02, 100, true, 1)
	for i := range calls {
		c := &calls[i]
		if c.Seq == 50 {
			if c.Rank == 3 {
				c.EnterNS += 20e6
				c.ReturnNS += 20e6
				c.DevStartNS += 20e6
			}
			c.DevEndNS += 20e6
		}
	}
	rep, err := Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SlowRanks) != 0 {
		t.Fatalf("one late call made a straggler: %+v", rep.SlowRanks)
	}
	if !hasNote(rep, "rank 3 was late", "transient") {
		t.Errorf("no transient note: %q", rep.Notes)
	}
}

// Review item 8 (P1): a group rank absent from every call, or present in
// a few instances only, gets a note (it may be the hung one).
func TestSlowRankMissingAndRareRanks(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	calls := genCalls("g", all[:7], 100, nil, nil, nil, 0.02, 100, true, 1)
	rep, err := Analyze(&Input{Groups: []Group{{ID: "g", Ranks: all}}, Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !hasNote(rep, "rank(s) 7 of the group made no call") {
		t.Errorf("absent rank 7 not noted: %q", rep.Notes)
	}
	rare := genCalls("g", all, 100, map[int]float64{7: 50}, nil, nil, 0.02, 100, true, 3)
	calls = slices.DeleteFunc(rare, func(c collective.Call) bool { return c.Rank == 7 && c.Seq < 92 })
	rep, err = Analyze(&Input{Groups: []Group{{ID: "g", Ranks: all}}, Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !hasNote(rep, "rank(s) 7 (8 instances) present in fewer than") {
		t.Errorf("rare rank 7 not noted: %q", rep.Notes)
	}
}

// Review item 9: point-to-point calls and instances whose members
// disagree on op or bytes are not lateness.
func TestSlowRankSkipsP2PAndMismatches(t *testing.T) {
	ranks := []int{0, 1, 2, 3}
	calls := genCalls("g", ranks, 50, map[int]float64{1: 5}, nil, nil, 0.02, 100, true, 1)
	for i := range calls {
		calls[i].Op, calls[i].Peer = collective.Send, (calls[i].Rank+1)%4
	}
	rep, err := Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SlowRanks) != 0 || !hasNote(rep, "200 point-to-point calls skipped") {
		t.Fatalf("P2P: slow %+v notes %q", rep.SlowRanks, rep.Notes)
	}
	calls = genCalls("g", ranks, 50, map[int]float64{1: 5}, nil, nil, 0.02, 100, true, 1)
	for i := range calls {
		if calls[i].Rank == 2 && calls[i].Seq%2 == 0 {
			calls[i].Bytes++
		}
	}
	rep, err = Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !hasNote(rep, "25 instances dropped") {
		t.Fatalf("mismatched instances not noted: %q", rep.Notes)
	}
	if len(rep.SlowRanks) != 1 || rep.SlowRanks[0].Instances != 25 {
		t.Fatalf("rank 1 must be judged on the 25 consistent instances: %+v", rep.SlowRanks)
	}
}

// Steps unknown: each instance counts as a step, and the report says so.
func TestSlowRankUnknownStepNote(t *testing.T) {
	calls := genCalls("g", []int{0, 1, 2}, 30, nil, nil, nil, 0.02, 100, true, 1)
	for i := range calls {
		calls[i].Step = -1
	}
	rep, err := Analyze(&Input{Calls: calls}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if !hasNote(rep, "calls carry no training step") {
		t.Errorf("notes %q", rep.Notes)
	}
}

// The demo regime (review item 13): 4 identical ranks × ~300 samples
// (10% sampling ratio at 99 Hz for 30 s) redrawn multinomially: the
// waterline must stay quiet at about Alpha.
func TestWaterlineFalseFlagDemoScale(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	cfg := DefaultConfig()
	weights := []int64{120, 80, 50, 25, 15, 10}
	fired := 0
	const trials = 300
	for trial := range trials {
		sc := newScenario()
		for r := range 4 {
			b := sc.prof(sc.cur, r)
			for i, w := range weights {
				b.add([]stack.Func{{Name: "main", Kind: stack.Native}, {Name: fmt.Sprintf("f%d", i), Kind: stack.Native}}, w)
			}
		}
		sc.resample(uint64(trial))
		rep, err := Analyze(sc.input(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Waterline) > 0 {
			fired++
		}
	}
	t.Logf("%d of %d noise-only 4-rank × 300-sample groups flagged (alpha %g)", fired, trials, cfg.Alpha)
	if fired > trials*4/100 {
		t.Fatalf("%d of %d noise-only groups flagged", fired, trials)
	}
}

// Review item 1: the temporal comparison never states "all ranks slowed
// alike"; a candidate concentrated on one rank names it (low confidence),
// one spread evenly says so.
func TestTemporalSplitsByRank(t *testing.T) {
	for _, c := range []struct {
		name    string
		hogOn   string
		late    string // calls' late= (rank 2 late under noisy peers: not flagged slow)
		suspect []int
		onTime  bool // the concentrated rank enters on time: not a suspect (issue 16 item 8b)
	}{
		{"one rank", "2", "late=2:0.8 jitter=1.5", []int{2}, false},
		{"every rank", "0-3", "jitter=0.05", nil, false},
		{"one rank, on time", "2", "jitter=0.05", nil, true},
	} {
		sc := newScenario()
		for _, l := range []string{
			"group world 0-3",
			"calls world ranks=0-3 n=100 " + c.late + " iter=110 seed=6",
			"stack 0-3 600 py:main@train.py;py:forward@model.py;at::native::addmm@libtorch_cpu.so",
			"stack 0-3 400 py:main@train.py;py:backward@t.py;torch::autograd::Engine::thread_main@libtorch_cpu.so",
			"stack " + c.hogOn + " 150 py:main@train.py;py:log@train.py;logging.StreamHandler.emit@logging",
			"base 0-3 600 py:main@train.py;py:forward@model.py;at::native::addmm@libtorch_cpu.so",
			"base 0-3 400 py:main@train.py;py:backward@t.py;torch::autograd::Engine::thread_main@libtorch_cpu.so",
			"iter 110 100",
		} {
			if err := sc.setup(l); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := Analyze(sc.input(), sc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		tp := rep.Temporal
		if tp == nil || len(tp.Candidates) == 0 {
			t.Fatalf("%s: no temporal candidates: %s", c.name, render(rep))
		}
		text := strings.Join(tp.Evidence, "\n")
		if strings.Contains(text, "alike") {
			t.Errorf("%s: evidence still claims the ranks slowed alike:\n%s", c.name, text)
		}
		if !slices.Equal(tp.Suspects, c.suspect) {
			t.Errorf("%s: suspects %v, want %v\n%s", c.name, tp.Suspects, c.suspect, text)
		}
		if c.suspect == nil && !c.onTime && !strings.Contains(text, "spread over all 4 ranks") {
			t.Errorf("%s: no spread sentence:\n%s", c.name, text)
		}
		if c.onTime && (!strings.Contains(text, "enters its collectives on time") || strings.Contains(text, "spread over")) {
			t.Errorf("%s: the on-time rank is not said so (or the growth is called spread):\n%s", c.name, text)
		}
		if len(c.suspect) > 0 && len(rep.SlowRanks) > 0 {
			t.Errorf("%s: the fixture's rank is flagged slow; the temporal split is not exercised", c.name)
		}
	}
}

func hasNote(rep *Report, parts ...string) bool {
	for _, n := range rep.Notes {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(n, p)
		}
		if ok {
			return true
		}
	}
	return false
}
