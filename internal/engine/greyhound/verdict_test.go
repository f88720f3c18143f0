package greyhound

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// gemmResults is a 4-rank validation whose GEMM repetitions spread by
// ±spread around ms[r] (a shared CPU), with healthy links.
func gemmResults(plan Plan, seed uint64, ms map[int]float64, spread float64) []RankResult {
	res := results(plan, nil, nil)
	rng := rand.New(rand.NewPCG(seed, 3))
	for i := range res {
		if m, ok := ms[res[i].Rank]; ok {
			res[i].GEMMMS = nil
			for range plan.GEMM.Reps {
				res[i].GEMMMS = append(res[i].GEMMMS, m*(1-spread+2*spread*rng.Float64()))
			}
		}
	}
	return res
}

// Issue 16, item 6a (`laggard demo -fault backward_comm -seed 12`): the
// fault delays rank 0's gradient all-reduce, step time 14.6 → 134.4 ms;
// validation saw rank 3's GEMM at 51.3 ms against ~46.5 ms (×1.10 on a
// shared CPU). A 4.8 ms compute deficit cannot explain +120 ms per
// iteration: the verdict must not name rank 3 — whether or not its
// repetitions stand out of the noise — and names rank 0, the rank the
// others wait for, because that wait explains the slowdown.
func TestConcludeNamesOnlyWhatExplainsTheSlowdown(t *testing.T) {
	cfg := DefaultConfig()
	const on = int64(1_000e9)
	onset := onsetAt(on, 14.6, 134.4)
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	gemm := map[int]float64{0: 46.5, 1: 46.2, 2: 46.9, 3: 51.3}
	late := lateMatrix(12, 4, 10, 40, on, 0, 1, 118)
	for _, spread := range []float64{0.005, 0.08} { // quiet repetitions (separated) and a shared CPU's
		for seed := uint64(0); seed < 20; seed++ {
			j := JudgeAll(plan, gemmResults(plan, seed, gemm, spread), cfg)
			e, ok := LateRank(late, onset, 0, cfg)
			v := Conclude(j, e, ok, Episode{Onset: onset}, cfg)
			if v.Kind != VerdictLateRank || !slices.Equal(v.Ranks, []int{0}) || v.Explanation == nil || !v.Explanation.Explains {
				t.Fatalf("spread %v seed %d: %+v", spread, seed, v)
			}
			// Without lateness, what validation saw is reported as seen.
			v = Conclude(j, LateEvidence{}, false, Episode{Onset: onset}, cfg)
			if slices.Contains(v.Ranks, 3) || v.Kind == VerdictSlowRank {
				t.Fatalf("spread %v seed %d: a ×1.10 GEMM named for +120 ms: %+v", spread, seed, v)
			}
			if j.GEMM[3].Slow && (v.Kind != VerdictInconclusive || !strings.Contains(v.Text, "does not explain the slowdown")) {
				t.Fatalf("spread %v seed %d: %+v", spread, seed, v)
			}
		}
	}
	// A GEMM deficit on a job it does explain (the slowdown is about its
	// size) is named.
	small := onsetAt(on, 46.5, 52.5)
	gemm[3] = 52.5
	j := JudgeAll(plan, gemmResults(plan, 1, gemm, 0.005), cfg)
	if v := Conclude(j, LateEvidence{}, false, Episode{Onset: small}, cfg); v.Kind != VerdictSlowRank || !slices.Equal(v.Ranks, []int{3}) {
		t.Fatalf("a GEMM deficit that explains the slowdown: %+v", v)
	}
}

// Noise-aware: on a shared CPU whose GEMM repetitions spread by up to
// 25 %, a rank ×1.19 slower and the unluckiest healthy rank overlap the
// others' repetitions. Whenever the judge names a rank whose fastest run
// does not clear the healthy ranks' slowest by more than their own
// repetition spread, the verdict is low confidence; a healthy rank is never
// named with high confidence. (The first judge compared the best of three
// with a fixed 10 % line and said "high" — `laggard demo -fault
// backward_comm -seed 12`.)
func TestJudgeGEMMInsideRepetitionSpread(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	onset := onsetAt(1_000e9, 1500, 1800) // a slowdown a GEMM deficit could explain
	healthyNamed, healthyHigh, rank3 := 0, 0, 0
	for seed := uint64(0); seed < 200; seed++ {
		res := results(plan, nil, nil)
		rng := rand.New(rand.NewPCG(seed, 9))
		for i := range res {
			base := 1419.0
			if res[i].Rank == 3 {
				base *= 1.19
			}
			res[i].GEMMMS = []float64{base * (1 + 0.25*rng.Float64()), base * (1 + 0.25*rng.Float64()), base * (1 + 0.25*rng.Float64())}
		}
		j := JudgeAll(plan, res, cfg)
		v := Conclude(j, LateEvidence{}, false, Episode{Onset: onset}, cfg)
		for _, g := range j.GEMM {
			if g.Slow && !g.Separated {
				t.Fatalf("seed %d: rank %d slow without standing out of the repetitions: %+v", seed, g.Rank, j.GEMM)
			}
			if g.Rank != 3 && g.Slow {
				healthyNamed++
				if v.Confidence == ConfidenceHigh {
					healthyHigh++
				}
			}
		}
		if slices.Contains(v.Ranks, 3) {
			rank3++
		}
		if v.Kind == VerdictSlowRank && v.Confidence == ConfidenceHigh {
			for _, g := range j.GEMM {
				if slices.Contains(v.Ranks, g.Rank) && !g.Clear {
					t.Fatalf("seed %d: high confidence for a rank inside the noise: %+v", seed, v)
				}
			}
		}
	}
	// Chance alone sets three repetitions above six others once in 84
	// (1.2 %) per rank, clear of them by their spread far more rarely.
	// (Measured: rank 3 named in 139 of 200, a healthy rank in 1.)
	t.Logf("of 200 runs: rank 3 named in %d, a healthy rank in %d (high confidence in %d)", rank3, healthyNamed, healthyHigh)
	if healthyNamed > 2 || rank3 < 100 {
		t.Errorf("healthy ranks named in %d of 200 runs (%d with high confidence), rank 3 in %d", healthyNamed, healthyHigh, rank3)
	}
}

// The reference must not be the slow ranks themselves: two of four ranks
// hogged (×1.5) put the plain median between them, where neither is 10 %
// above it; against the faster half both are named.
func TestJudgeHalfTheRanksSlow(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	v := Judge(plan, results(plan, map[int]float64{1: 4.5, 2: 4.5}, nil), cfg)
	if v.Kind != VerdictSlowRank || !slices.Equal(v.Ranks, []int{1, 2}) {
		t.Fatalf("%+v", v)
	}
}

// Issue 16, item 6: a straggler present from the start never shows an
// onset, and the report said "none (high confidence)" beside a lateness
// table with one rank last on every instance. It names the rank, with low
// confidence and why.
func TestAnalyzeNamesAConsistentlyLateRankWithoutAnOnset(t *testing.T) {
	cfg := DefaultConfig()
	j := defaultJob()
	j.iters, j.slowFrom, j.slowTo, j.slowFactor, j.slowRank = 120, 0, 120, 2, 5
	rep, err := Analyze(Input{Job: "run", NowNS: t0 + 30e9, Calls: j.calls(), Comms: j.comms(), World: 8}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.ChangePoints {
		if c.Verified {
			t.Fatalf("the slowdown was there from the start, yet %+v", c)
		}
	}
	v := rep.Verdict
	if v.Kind != VerdictLateRank || !slices.Equal(v.Ranks, []int{5}) || v.Confidence != ConfidenceLow ||
		!strings.Contains(v.Text, "no slowdown was detected") || !strings.Contains(v.Text, "not validated") {
		t.Fatalf("verdict %+v", v)
	}
	// A healthy job keeps "none".
	h := defaultJob()
	rep, err = Analyze(Input{Job: "run", NowNS: t0 + 30e9, Calls: h.calls(), Comms: h.comms(), World: 8}, cfg)
	if err != nil || rep.Verdict.Kind != VerdictNone || rep.Verdict.Confidence != ConfidenceHigh {
		t.Fatalf("healthy: %v %+v", err, rep.Verdict)
	}
}

// Property (issue 16, item 6: one rule): whatever the validation, the
// lateness and the episode, a verdict is high-confidence exactly when it
// carries no caveat, its text carries every caveat, and no high verdict
// says the slowdown may have been transient or that results are missing.
func TestVerdictConfidenceFollowsEvidence(t *testing.T) {
	cfg := DefaultConfig()
	const on = int64(1_000e9)
	rng := rand.New(rand.NewPCG(6, 6))
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	plan.ID = "v-1"
	for it := range 400 {
		gemm := map[int]float64{}
		if rng.IntN(3) == 0 {
			gemm[rng.IntN(4)] = 3 * (1 + rng.Float64())
		}
		link := map[Link]float64{}
		if rng.IntN(3) == 0 {
			link[plan.P2P.Passes[0][0]] = 1 + 5*rng.Float64()
		}
		res := results(plan, gemm, link)
		if rng.IntN(4) == 0 {
			res = res[:len(res)-1]
		}
		onset := onsetAt(on, 50+100*rng.Float64(), 0)
		onset.AfterMS = onset.BeforeMS * (1.1 + 2*rng.Float64())
		var relief *ChangePointView
		if rng.IntN(3) == 0 {
			relief = &ChangePointView{BeforeMS: onset.AfterMS, AfterMS: onset.BeforeMS, Kind: KindRelief}
		}
		late := lateMatrix(uint64(it), 4, 10, rng.IntN(60), on, rng.IntN(4), rng.Float64(), 100*rng.Float64())
		s := ControllerState{Phase: PhaseValidation, Plan: &plan, Onset: onset, Relief: relief, History: []Transition{}}
		s2, _ := Step(s, Observation{NowNS: plan.DeadlineMS * 1e6, Results: res, Lateness: late}, cfg)
		v := s2.Verdict
		if v == nil {
			t.Fatalf("it %d: no verdict", it)
		}
		if (v.Confidence == ConfidenceHigh) != (len(v.Caveats) == 0 && v.Kind != VerdictInconclusive) {
			t.Fatalf("it %d: confidence %s with caveats %q", it, v.Confidence, v.Caveats)
		}
		for _, c := range v.Caveats {
			if !strings.Contains(v.Text, c) {
				t.Fatalf("it %d: caveat %q not in the text %q", it, c, v.Text)
			}
		}
		if v.Confidence == ConfidenceHigh && (strings.Contains(v.Text, "transient") || strings.Contains(v.Text, "results from")) {
			t.Fatalf("it %d: high confidence beside %q", it, v.Text)
		}
		if relief != nil && v.Confidence == ConfidenceHigh {
			t.Fatalf("it %d: a relief during validation, yet high: %+v", it, v)
		}
		if (v.Kind == VerdictSlowRank || v.Kind == VerdictSlowLink || v.Kind == VerdictLateRank) && (v.Explanation == nil || !v.Explanation.Explains) {
			t.Fatalf("it %d: %s names a component that does not explain the slowdown: %+v", it, v.Kind, v.Explanation)
		}
	}
}

// Issue 16, item 5: a validation pause is one huge iteration (the ranks
// benchmarking between two steps); reported by the ranks, it is masked
// out of the detector's input, so it proposes no change point there and
// the series keeps its length (Σ iteration times = elapsed time).
func TestAnalyzeMasksValidationPause(t *testing.T) {
	cfg := DefaultConfig()
	j := defaultJob()
	j.iters = 200
	calls := j.calls()
	starts, _ := j.truth()
	// The ranks pause 8 s after iteration 150's first calls.
	pauseFrom := starts[150] + int64(0.5*j.baseMS*1e6)
	const pause = int64(8e9)
	for i := range calls {
		if calls[i].EnterNS >= pauseFrom {
			calls[i].EnterNS += pause
			calls[i].ReturnNS += pause
			if calls[i].DevEndNS > 0 {
				calls[i].DevStartNS += pause
				calls[i].DevEndNS += pause
			}
		}
	}
	in := Input{Job: "run", NowNS: t0 + 60e9, Calls: calls, Comms: j.comms(), World: 8}
	plain, err := Analyze(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	near := func(rep *Report) []ChangePointView {
		var out []ChangePointView
		for _, c := range rep.ChangePoints {
			if c.Index >= 145 && c.Index <= 155 {
				out = append(out, c)
			}
		}
		return out
	}
	if len(near(plain)) == 0 {
		t.Fatalf("the unmasked pause should draw a BOCD candidate: %+v", plain.ChangePoints)
	}
	plan := Plan{ID: "v-1", GEMM: GEMMTest{Ranks: []int{0}}}
	in.Validations = []ValidationRun{{Plan: plan, Results: []RankResult{{Rank: 0, GEMMMS: []float64{1}, PausedFromNS: pauseFrom, PausedToNS: pauseFrom + pause}}}}
	rep, err := Analyze(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := near(rep); len(got) != 0 {
		t.Fatalf("change points at the masked pause: %+v", got)
	}
	paused := 0
	for _, it := range rep.Iteration.Series {
		if it.Paused {
			paused++
		}
	}
	if paused == 0 || paused > 2 || len(rep.Iteration.Series) != len(plain.Iteration.Series) || !strings.Contains(rep.Iteration.Note, "validation pause") {
		t.Fatalf("%d paused of %d (unmasked %d), note %q", paused, len(rep.Iteration.Series), len(plain.Iteration.Series), rep.Iteration.Note)
	}
}

// Found by eval/greyhound/localize.py (issue 16): ranks 0, 2 and 3 share
// one core and rank 1 runs alone on the other, so their GEMMs take twice
// rank 1's — before and after any fault. Against the faster half the
// three were "slow" and named for a sleep on rank 1 and for rank 1's
// throttled link. The majority around the median is the healthy
// reference (rank 1 is merely fast), and ranks the others do not wait for
// do not set the pace.
func TestConcludeRanksSharingACore(t *testing.T) {
	cfg := DefaultConfig()
	const on = int64(1_000e9)
	onset := onsetAt(on, 68, 131)
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	shared := map[int]float64{0: 6, 1: 3, 2: 6, 3: 6}
	late := lateMatrix(3, 4, 10, 40, on, 1, 0.95, 60)
	e, ok := LateRank(late, onset, 0, cfg)
	// sleep on rank 1
	v := Conclude(JudgeAll(plan, results(plan, shared, nil), cfg), e, ok, Episode{Onset: onset}, cfg)
	if v.Kind != VerdictLateRank || !slices.Equal(v.Ranks, []int{1}) {
		t.Fatalf("sleep on rank 1: %+v", v)
	}
	// rank 1's link throttled
	slow := map[Link]float64{{0, 1}: 6, {1, 2}: 6}
	v = Conclude(JudgeAll(plan, results(plan, shared, slow), cfg), e, ok, Episode{Onset: onset}, cfg)
	if v.Kind != VerdictSlowLink || !slices.Equal(v.Links, []Link{{0, 1}, {1, 2}}) {
		t.Fatalf("rank 1's link: %+v", v)
	}
	// a false onset in a control: nothing to name
	v = Conclude(JudgeAll(plan, results(plan, shared, nil), cfg), LateEvidence{}, false, Episode{Onset: onset}, cfg)
	if len(v.Ranks) != 0 || len(v.Links) != 0 {
		t.Fatalf("control: %+v", v)
	}
	// even when the three slower ranks are what lateness sees: they
	// share the core the whole time (GEMM does not name them)
	j := JudgeAll(plan, results(plan, shared, nil), cfg)
	for _, g := range j.GEMM {
		if g.Slow {
			t.Fatalf("ranks sharing a core judged slow: %+v", j.GEMM)
		}
	}
}

// The demo end to end through the controller, with the GEMM times
// of the run that named rank 3 (1419 / 1550 / 1417 / 1763 ms, ×1.19 of the
// median) and its onset (71.9 → 172.0 ms): the first controller said
// slow_rank (high confidence) [3]; rank 0, the one the others wait for,
// is the cause.
func TestControllerDemoBackwardComm(t *testing.T) {
	cfg := DefaultConfig()
	const on = int64(1_000e9)
	onset := onsetAt(on, 71.9, 172.0)
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	res := results(plan, map[int]float64{0: 1419.35, 1: 1550.47, 2: 1417.23, 3: 1762.95}, nil)
	late := lateMatrix(12, 4, 10, 40, on, 0, 1, 118)
	s := ControllerState{Phase: PhaseValidation, Plan: &plan, Onset: onset, History: []Transition{}}
	s2, _ := Step(s, Observation{NowNS: 1, Results: res, Lateness: late}, cfg)
	if v := s2.Verdict; v.Kind != VerdictLateRank || !slices.Equal(v.Ranks, []int{0}) || !strings.Contains(v.Text, "rank(s) 3 slow at GEMM") {
		t.Fatalf("%+v", v)
	}
}
