package greyhound

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// lateMatrix builds a lateness matrix over ranks 0..n−1: before the onset
// (EndNS < onsetNS) nobody stands out; after it, rank late is last on a
// share of instances by marginMS (the others jitter within 0.5 ms).
func lateMatrix(seed uint64, n, before, after int, onsetNS int64, late int, share, marginMS float64) *Lateness {
	rng := rand.New(rand.NewPCG(seed, 5))
	l := &Lateness{}
	for r := range n {
		l.Ranks = append(l.Ranks, r)
	}
	for i := range before + after {
		in := LateInstance{Comm: "world", Seq: int64(i), Op: collective.AllReduce, LateMS: make([]*float64, n)}
		in.EndNS = onsetNS + int64(i-before)*100e6
		for r := range n {
			v := rng.Float64() * 0.5
			if i >= before && r == late && rng.Float64() < share {
				v += marginMS
			}
			in.LateMS[r] = &v
		}
		l.Instances = append(l.Instances, in)
	}
	return l
}

func onsetAt(ns int64, beforeMS, afterMS float64) *ChangePointView {
	return &ChangePointView{Index: 100, EndNS: ns + int64(afterMS*1e6), BeforeMS: beforeMS, AfterMS: afterMS, Rel: afterMS/beforeMS - 1, Kind: KindOnset, Verified: true}
}

// A plain DDP job has one communicator: nothing to compare, so every
// group is a suspect and validation runs over the whole job (§4.3 adapted).
func TestControllerSingleGroupReachesValidation(t *testing.T) {
	cfg := DefaultConfig()
	s := NewController(0)
	s, _ = Step(s, Observation{NowNS: 1, Onset: onsetAt(0, 100, 150)}, cfg)
	world := []Cluster{{Op: collective.AllReduce, Bytes: 1 << 20, Size: 4, Comparable: false, Note: "only one",
		Members: []Member{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}}}
	s2, plan := Step(s, Observation{NowNS: 2, Step: 10, Clusters: world}, cfg)
	if s2.Phase != PhaseValidation || plan == nil {
		t.Fatalf("phase %s, plan %v", s2.Phase, plan)
	}
	if got := joinInts(plan.GEMM.Ranks); got != "0,1,2,3" {
		t.Errorf("GEMM ranks %s, want all four", got)
	}
	links := 0
	for _, p := range plan.P2P.Passes {
		links += len(p)
	}
	if links < 4 {
		t.Errorf("%d links tested, want the ring at least", links)
	}
	if r := s2.History[len(s2.History)-1].Reason; !strings.Contains(r, "cross-group comparison impossible") {
		t.Errorf("reason %q lacks the note", r)
	}
	// Profiling with no groups at all is still inconclusive.
	if s3, _ := Step(s, Observation{NowNS: 2, Clusters: []Cluster{}}, cfg); s3.Phase != PhaseVerdict || s3.Verdict.Kind != VerdictInconclusive {
		t.Errorf("no clusters: %s %+v", s3.Phase, s3.Verdict)
	}
}

// The verdict branches: validation findings first, then lateness, then
// none; each with its confidence. A "none" after a verified onset is low:
// the slowdown it answers is not explained.
func TestVerdictCombinesValidationAndLateness(t *testing.T) {
	cfg := DefaultConfig()
	const on = int64(1_000e9)
	plan := PlanValidation([]Group{{Comm: "world", Ranks: []int{0, 1, 2, 3}}}, cfg)
	plan.ID = "v-1"
	cases := []struct {
		name  string
		gemm  map[int]float64
		link  map[Link]float64
		late  *Lateness
		onset *ChangePointView
		kind  VerdictKind
		ranks string
		conf  Confidence
		text  string
	}{
		{"late rank, healthy validation", nil, nil, lateMatrix(1, 4, 30, 40, on, 2, 0.95, 40), onsetAt(on, 100, 150), VerdictLateRank, "2", ConfidenceHigh, "host side"},
		{"late rank, few instances: low confidence", nil, nil, lateMatrix(2, 4, 30, 8, on, 2, 1, 40), onsetAt(on, 100, 150), VerdictLateRank, "2", ConfidenceLow, "host side"},
		{"late rank, margin a third of the increase: low", nil, nil, lateMatrix(3, 4, 30, 40, on, 1, 0.95, 17), onsetAt(on, 100, 150), VerdictLateRank, "1", ConfidenceLow, "host side"},
		{"slow GPU on the late rank", map[int]float64{2: 4}, nil, lateMatrix(4, 4, 30, 40, on, 2, 0.95, 40), onsetAt(on, 100, 150), VerdictSlowRank, "2", ConfidenceHigh, "GEMM"},
		{"a slow GPU the others do not wait for does not set the pace", map[int]float64{1: 4}, nil, lateMatrix(4, 4, 30, 40, on, 2, 0.95, 40), onsetAt(on, 100, 150), VerdictLateRank, "2", ConfidenceHigh, "does not set the pace"},
		{"slow link wins over lateness", nil, map[Link]float64{{1, 2}: 3}, lateMatrix(5, 4, 30, 40, on, 2, 0.95, 40), onsetAt(on, 100, 150), VerdictSlowLink, "", ConfidenceHigh, "P2P"},
		{"margin too small for the increase", nil, nil, lateMatrix(6, 4, 30, 40, on, 2, 0.95, 5), onsetAt(on, 100, 150), VerdictNone, "", ConfidenceLow, "no rank enters collectives consistently late"},
		{"nobody consistently last", nil, nil, lateMatrix(7, 4, 30, 40, on, 2, 0.3, 40), onsetAt(on, 100, 150), VerdictNone, "", ConfidenceLow, "no rank enters collectives consistently late"},
		{"late only before the onset", nil, nil, lateMatrix(8, 4, 40, 0, on, 2, 1, 40), onsetAt(on, 100, 150), VerdictNone, "", ConfidenceLow, "no rank enters collectives consistently late"},
		{"no lateness given", nil, nil, nil, onsetAt(on, 100, 150), VerdictNone, "", ConfidenceLow, "no rank enters collectives consistently late"},
		{"manual episode: no onset, ≥ 1 ms", nil, nil, lateMatrix(9, 4, 0, 40, on, 3, 0.95, 30), nil, VerdictLateRank, "3", ConfidenceHigh, "host side"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ControllerState{Phase: PhaseValidation, Since: 0, Plan: &plan, Onset: c.onset, History: []Transition{}}
			s2, _ := Step(s, Observation{NowNS: 1, Results: results(plan, c.gemm, c.link), Lateness: c.late}, cfg)
			if s2.Phase != PhaseVerdict || s2.Verdict == nil {
				t.Fatalf("phase %s", s2.Phase)
			}
			v := s2.Verdict
			if v.Kind != c.kind || joinInts(v.Ranks) != c.ranks || v.Confidence != c.conf || !strings.Contains(v.Text, c.text) {
				t.Fatalf("got %s ranks %v %s %q; want %s ranks %s %s ~%q", v.Kind, v.Ranks, v.Confidence, v.Text, c.kind, c.ranks, c.conf, c.text)
			}
		})
	}
}

// Properties of LateRank over random matrices: a singled-out rank is the
// one last most often, its share and margin pass the gates, and Combine
// never overrides a validation finding.
func TestLateRankProperties(t *testing.T) {
	cfg := DefaultConfig()
	rng := rand.New(rand.NewPCG(42, 1))
	for it := range 300 {
		n := 2 + rng.IntN(7)
		late := rng.IntN(n)
		l := lateMatrix(uint64(it), n, rng.IntN(20), rng.IntN(60), 5e9, late, rng.Float64(), rng.Float64()*60)
		on := onsetAt(5e9, 100, 100+rng.Float64()*100)
		e, ok := LateRank(l, on, 0, cfg)
		if !ok {
			continue
		}
		if e.Share < cfg.LateShare || e.Instances < cfg.LateMinInstances || e.Frac < cfg.ExplainFrac || e.MarginMS < 1 {
			t.Fatalf("it %d: gates not met: %+v", it, e)
		}
		if e.Rank != late {
			t.Fatalf("it %d: singled out %d, injected %d (%+v)", it, e.Rank, late, e)
		}
		// A slow GEMM that explains the increase on the late rank is the
		// cause; on another rank it does not set the pace (the others
		// wait for the late one) and lateness names the late rank.
		plan := PlanValidation([]Group{{Comm: "w", Ranks: l.Ranks}}, cfg)
		f := 3 * (1.3 + 2*(on.AfterMS-on.BeforeMS)/on.BeforeMS)
		if v := Conclude(JudgeAll(plan, results(plan, map[int]float64{late: f}, nil), cfg), e, ok, Episode{Onset: on}, cfg); v.Kind != VerdictSlowRank || v.Ranks[0] != late {
			t.Fatalf("it %d: a slow GEMM on the late rank: %+v", it, v)
		}
		if n > 2 {
			v := Conclude(JudgeAll(plan, results(plan, map[int]float64{(late + 1) % n: f}, nil), cfg), e, ok, Episode{Onset: on}, cfg)
			if v.Kind != VerdictLateRank || v.Ranks[0] != late || !strings.Contains(v.Text, "does not set the pace") {
				t.Fatalf("it %d: a slow GEMM off the pace: %+v", it, v)
			}
		}
	}
}

// A manual request opens an episode from tracking or a held verdict, and
// is ignored while one is in progress (the pure controller owns it).
func TestControllerManualRequest(t *testing.T) {
	cfg := DefaultConfig()
	s := NewController(0)
	s1, _ := Step(s, Observation{NowNS: 5, Manual: true}, cfg)
	if s1.Phase != PhaseProfiling || !strings.HasPrefix(s1.History[len(s1.History)-1].Reason, "manual request") || s1.Onset != nil {
		t.Fatalf("tracking + manual: %+v", s1)
	}
	held := ControllerState{Phase: PhaseVerdict, Since: 1, History: []Transition{}, Verdict: &Verdict{Kind: VerdictUniform}}
	s2, _ := Step(held, Observation{NowNS: 6, Manual: true}, cfg)
	if s2.Phase != PhaseProfiling || s2.Verdict != nil {
		t.Fatalf("verdict + manual: %+v", s2)
	}
	plan := PlanValidation([]Group{{Comm: "g", Ranks: []int{0, 1}}}, cfg)
	busy := ControllerState{Phase: PhaseValidation, Since: 1, History: []Transition{}, Plan: &plan}
	if s3, _ := Step(busy, Observation{NowNS: 7, Manual: true}, cfg); s3.Phase != PhaseValidation || len(s3.History) != 0 {
		t.Fatalf("validation + manual moved: %+v", s3)
	}
}
