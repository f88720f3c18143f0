package greyhound

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func results(plan Plan, gemm map[int]float64, link map[Link]float64) []RankResult {
	byRank := map[int]*RankResult{}
	get := func(r int) *RankResult {
		if byRank[r] == nil {
			byRank[r] = &RankResult{Rank: r}
		}
		return byRank[r]
	}
	for _, r := range plan.GEMM.Ranks {
		ms := gemm[r]
		if ms == 0 {
			ms = 3
		}
		get(r).GEMMMS = []float64{ms, ms * 1.01, ms * 0.99}
	}
	for pi, pass := range plan.P2P.Passes {
		for _, l := range pass {
			for _, b := range plan.P2P.SizesBytes {
				ms := float64(b) / (1 << 20) * 0.5
				if f := link[l]; f > 0 {
					ms *= f
				}
				get(l.Src).P2P = append(get(l.Src).P2P, P2PResult{Pass: pi, Src: l.Src, Dst: l.Dst, Bytes: b, MS: []float64{ms, ms, ms}})
				// the receiver measures a little less
				get(l.Dst).P2P = append(get(l.Dst).P2P, P2PResult{Pass: pi, Src: l.Src, Dst: l.Dst, Bytes: b, MS: []float64{ms * 0.98}})
			}
		}
	}
	var out []RankResult
	for _, r := range byRank {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RankResult) int { return a.Rank - b.Rank }) // deterministic for the tests that draw per rank
	return out
}

func TestJudge(t *testing.T) {
	cfg := DefaultConfig()
	plan := PlanValidation([]Group{{Comm: "g", Ranks: []int{0, 1, 2, 3, 4, 5}}}, cfg)
	cases := []struct {
		name  string
		gemm  map[int]float64
		link  map[Link]float64
		drop  bool
		kind  VerdictKind
		ranks int
		links int
		conf  Confidence
	}{
		{"healthy", nil, nil, false, VerdictNone, 0, 0, ConfidenceHigh},
		{"slow GPU 20%", map[int]float64{2: 3.6}, nil, false, VerdictSlowRank, 1, 0, ConfidenceHigh},
		{"slow link 3→4 x2", nil, map[Link]float64{{3, 4}: 2}, false, VerdictSlowLink, 0, 1, ConfidenceHigh},
		{"5% is not slow", map[int]float64{2: 3.15}, map[Link]float64{{3, 4}: 1.05}, false, VerdictNone, 0, 0, ConfidenceHigh},
		{"missing results", map[int]float64{2: 3.6}, nil, true, VerdictSlowRank, 1, 0, ConfidenceLow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := results(plan, c.gemm, c.link)
			if c.drop { // drop one rank's results, never the slow rank's
				res = slices.DeleteFunc(res, func(r RankResult) bool { return r.Rank == 5 })
			}
			v := Judge(plan, res, cfg)
			if v.Kind != c.kind || len(v.Ranks) != c.ranks || len(v.Links) != c.links || v.Confidence != c.conf {
				t.Errorf("got %+v", v)
			}
		})
	}
	if v := Judge(plan, nil, cfg); v.Kind != VerdictInconclusive {
		t.Errorf("no results: %+v", v)
	}
	if v := Judge(plan, []RankResult{{Rank: 0, GEMMMS: []float64{3}}}, cfg); v.Kind != VerdictInconclusive {
		t.Errorf("one result: %+v", v)
	}
}

func TestControllerPhases(t *testing.T) {
	cfg := DefaultConfig()
	onset := &ChangePointView{Index: 40, BeforeMS: 75, AfterMS: 150, Rel: 1, Kind: KindOnset, Verified: true}
	relief := &ChangePointView{Index: 90, BeforeMS: 150, AfterMS: 75, Rel: -0.5, Kind: KindRelief, Verified: true}
	degraded := []Cluster{{Comparable: true, Members: []Member{{Comm: "a", Ranks: []int{0, 1}}, {Comm: "b", Ranks: []int{2, 3}, Degraded: true}}}}
	uniform := []Cluster{{Comparable: true, Members: []Member{{Comm: "a"}, {Comm: "b"}}}}

	s := NewController(1)
	s, p := Step(s, Observation{NowNS: 2}, cfg)
	if s.Phase != PhaseTracking || p != nil {
		t.Fatal(s.Phase)
	}
	s, _ = Step(s, Observation{NowNS: 10, Onset: onset}, cfg)
	if s.Phase != PhaseProfiling || s.Since != 10 {
		t.Fatal(s.Phase)
	}
	s, p = Step(s, Observation{NowNS: 20, Step: 100, Clusters: degraded}, cfg)
	if s.Phase != PhaseValidation || p == nil || p.ID != "v-1" || p.AtStep != 103 || len(p.GEMM.Ranks) != 2 {
		t.Fatalf("%s %+v", s.Phase, p)
	}
	// Partial results before the deadline: stay.
	part := results(*p, map[int]float64{3: 6}, nil)[:1]
	s2, _ := Step(s, Observation{NowNS: 30, Results: part}, cfg)
	if s2.Phase != PhaseValidation {
		t.Fatal(s2.Phase)
	}
	// Deadline passed: verdict from what came.
	s3, _ := Step(s, Observation{NowNS: 20 + p.DeadlineMS*1e6, Results: part}, cfg)
	if s3.Phase != PhaseVerdict || s3.Verdict.Confidence != ConfidenceLow {
		t.Fatalf("%s %+v", s3.Phase, s3.Verdict)
	}
	// A relief while validating does not drop the plan the ranks hold:
	// the verdict comes from its results and says the slowdown ended.
	r1, _ := Step(s, Observation{NowNS: 35, Relief: relief}, cfg)
	if r1.Phase != PhaseValidation || r1.Plan == nil || r1.Relief == nil {
		t.Fatalf("relief during validation: %s %+v", r1.Phase, r1.Plan)
	}
	r2, _ := Step(r1, Observation{NowNS: 40, Results: results(*p, map[int]float64{3: 6}, nil)}, cfg)
	if r2.Phase != PhaseVerdict || r2.Verdict.Kind != VerdictSlowRank || r2.Verdict.Confidence != ConfidenceLow ||
		!strings.Contains(r2.Verdict.Text, "may have been transient") {
		t.Fatalf("verdict after a relief: %s %+v", r2.Phase, r2.Verdict)
	}
	// …and tracking resumes at the next step, not after HoldNS.
	if r3, _ := Step(r2, Observation{NowNS: 42}, cfg); r3.Phase != PhaseTracking || r3.Relief != nil {
		t.Fatalf("after a verdict that followed a relief: %s, relief %v", r3.Phase, r3.Relief)
	}
	s, _ = Step(s, Observation{NowNS: 40, Results: results(*p, map[int]float64{3: 6}, nil)}, cfg)
	if s.Phase != PhaseVerdict || s.Verdict.Kind != VerdictSlowRank || s.Verdict.Ranks[0] != 3 {
		t.Fatalf("%s %+v", s.Phase, s.Verdict)
	}
	s, _ = Step(s, Observation{NowNS: 50, Relief: relief}, cfg)
	if s.Phase != PhaseTracking || s.Plan != nil {
		t.Fatal(s.Phase)
	}
	want := []Phase{PhaseProfiling, PhaseValidation, PhaseVerdict, PhaseTracking}
	if len(s.History) != 4 {
		t.Fatalf("history %+v", s.History)
	}
	for i, tr := range s.History {
		if tr.To != want[i] || tr.Reason == "" || (i > 0 && tr.AtNS < s.History[i-1].AtNS) {
			t.Errorf("transition %d: %+v", i, tr)
		}
		if i < 3 && !json.Valid(tr.Evidence) {
			t.Errorf("transition %d evidence %s", i, tr.Evidence)
		}
	}
	// Uniform slowdown: straight to verdict.
	u := NewController(0)
	u, _ = Step(u, Observation{NowNS: 1, Onset: onset}, cfg)
	u, p = Step(u, Observation{NowNS: 2, Clusters: uniform}, cfg)
	if u.Phase != PhaseVerdict || p != nil || u.Verdict.Kind != VerdictUniform {
		t.Fatalf("%s %+v", u.Phase, u.Verdict)
	}
	// Hold time: back to tracking.
	u, _ = Step(u, Observation{NowNS: 2 + cfg.HoldNS}, cfg)
	if u.Phase != PhaseTracking {
		t.Fatal(u.Phase)
	}
	// Relief during profiling (§4.1 footnote 2); profiling timeout.
	r := NewController(0)
	r, _ = Step(r, Observation{NowNS: 1, Onset: onset}, cfg)
	if r2, _ := Step(r, Observation{NowNS: 2, Relief: relief}, cfg); r2.Phase != PhaseTracking {
		t.Fatal(r2.Phase)
	}
	if r3, _ := Step(r, Observation{NowNS: 1 + cfg.ProfileTimeoutNS}, cfg); r3.Phase != PhaseVerdict || r3.Verdict.Kind != VerdictInconclusive {
		t.Fatal(r3.Phase)
	}
	// Nothing comparable.
	if r4, _ := Step(r, Observation{NowNS: 3, Clusters: []Cluster{{Comparable: false}}}, cfg); r4.Verdict == nil || r4.Verdict.Kind != VerdictInconclusive {
		t.Fatal(r4.Phase)
	}
}
