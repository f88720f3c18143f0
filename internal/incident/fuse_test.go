package incident

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFusionRules(t *testing.T) {
	const j = "j"
	late := func(rank int, conf Confidence) Evidence {
		e := finding(j, "gh/late/"+string(conf), EngineGreyhound, KindGreyhoundLate, LayerCollective, CategoryCommunication, conf, 1000, 1900, RankTarget(rank, "h"+string(rune('0'+rank))))
		e.Exclusive, e.Subject = true, "comm:world"
		return e
	}
	leader := func(id string, rank int, conf Confidence) Evidence {
		e := finding(j, id, EngineStageFrontier, KindStageLeader, LayerStage, CategoryCompute, conf, 1000, 1900, RankTarget(rank, ""))
		e.Exclusive, e.Subject = true, "stage:g/forward"
		return e
	}
	absorbed := finding(j, "sf/withheld", EngineStageFrontier, KindStageLeader, LayerStage, CategoryUnknown, ConfidenceWithheld, 1000, 1900)
	absorbed.Withheld = "absorbed_in_stage"
	healthy := Evidence{ID: "gh/val/1", Kind: KindGreyhoundValidation, Engine: EngineGreyhound, Job: j, AtNS: at(1500),
		Window: Span{FromStep: 1400, ToStep: 1450, FromNS: at(1400), ToNS: at(1450)}, Signal: SignalHealthy,
		Against: []Target{RankTarget(2, "")}, Confidence: ConfidenceHigh, Layer: LayerGPU, Text: "rank 2's GPU benchmarks normal"}
	uniformSF := finding(j, "sf/uniform", EngineStageFrontier, KindStageLeader, LayerStage, CategoryUniform, ConfidenceHigh, 1000, 1900, JobTarget())
	uniformOS := finding(j, "sysom/temporal", EngineSysom, KindSysomTemporal, LayerCPU, CategoryUniform, ConfidenceLow, 1000, 1900, JobTarget())
	slow := series(j, 0, 2000, slowBetween(1000, 3000, 150))
	unverified := onset(j, EngineGreyhound, 1000, 100, 150)
	unverified.Verified = false
	now := at(2000)

	type want struct {
		n          int
		state      State
		cause      []string
		conf       Confidence
		contra     bool
		relapses   int
		headline   string
		chainLayer []Layer // of the first hypothesis
	}
	for _, tc := range []struct {
		name string
		evs  []Evidence
		now  int64
		want want
	}{
		{"control: no onset, no incident", []Evidence{series(j, 0, 2000, func(int64) float64 { return 100 }), leader("sf/l", 3, ConfidenceLow)}, now, want{n: 0}},
		{"an unverified onset opens nothing", []Evidence{slow, unverified}, now, want{n: 0}},
		{"opens on the first verified onset, nothing localized", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150)}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceWithheld, headline: "no rank, link or operator is localized yet"}},
		{"join: two engines' onsets and a high-confidence finding make one incident", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150),
			onset(j, EngineGreyhound, 1003, 90, 140), late(3, ConfidenceHigh)}, now,
			want{n: 1, state: StateOpen, cause: []string{"rank:3"}, conf: ConfidenceHigh, headline: "Rank 3 on h3 is slowing the job", chainLayer: []Layer{LayerCollective}}},
		{"one engine, low confidence: suspected, not stated", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), leader("sf/l", 3, ConfidenceLow)}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceLow, headline: "suspected: rank 3, not confirmed"}},
		{"two independent engines agree at low confidence: stated", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), leader("sf/l", 3, ConfidenceLow), late(3, ConfidenceLow)}, now,
			want{n: 1, state: StateOpen, cause: []string{"rank:3"}, conf: ConfidenceHigh}},
		{"contradiction: a measurement at the finding's own layer clears it", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150),
			finding(j, "kair/gpu", EngineKair, KindKairCulprit, LayerGPU, CategoryCompute, ConfidenceHigh, 1000, 1900, RankTarget(2, "")), healthy}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceLow, contra: true}},
		{"a clearance at another layer leaves the rank stated and is shown", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), leader("sf/l", 2, ConfidenceHigh), healthy}, now,
			want{n: 1, state: StateOpen, cause: []string{"rank:2"}, conf: ConfidenceHigh, contra: true}},
		{"one engine sure, another disagreeing with low confidence: not stated", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), late(3, ConfidenceHigh),
			func() Evidence {
				e := finding(j, "kair/gap", EngineKair, KindKairCulprit, LayerOperator, CategoryUnknown, ConfidenceLow, 1000, 1900, RankTarget(6, ""))
				e.Exclusive, e.Subject = true, "comm:world"
				return e
			}()}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceLow, contra: true}},
		{"two findings from one signal are not independent", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), late(3, ConfidenceLow),
			finding(j, "sysom/slow", EngineSysom, KindSysomSlowRank, LayerCollective, CategoryUnknown, ConfidenceLow, 1000, 1900, RankTarget(3, ""))}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceLow}},
		{"contradiction: two exclusive high findings on one subject name different ranks", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150),
			leader("sf/l2", 2, ConfidenceHigh), func() Evidence { e := leader("x/l5", 5, ConfidenceHigh); e.Engine = EngineKair; return e }()}, now,
			want{n: 1, state: StateOpen, conf: ConfidenceLow, contra: true}},
		{"absorbed in a stage: the stage withholds, collective lateness names the rank", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), absorbed, late(5, ConfidenceHigh)}, now,
			want{n: 1, state: StateOpen, cause: []string{"rank:5"}, conf: ConfidenceHigh, chainLayer: []Layer{LayerStage, LayerCollective}}},
		{"uniform slowdown is an incident with a temporal explanation", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150), uniformSF, uniformOS}, now,
			want{n: 1, state: StateOpen, cause: []string{"job"}, conf: ConfidenceHigh, headline: "Every rank slowed alike", chainLayer: []Layer{LayerStage, LayerCPU}}},
		{"two faults at once: two stated causes, never one merged", []Evidence{slow, onset(j, EngineStageFrontier, 1000, 100, 150),
			finding(j, "gh/verdict", EngineGreyhound, KindGreyhoundVerdict, LayerCollective, CategoryCompute, ConfidenceHigh, 1000, 1800, RankTarget(1, "")),
			finding(j, "sysom/diag", EngineSysom, KindSysomDiagnosis, LayerOS, CategoryOS, ConfidenceHigh, 1100, 1800, RankTarget(6, ""))}, now,
			want{n: 1, state: StateOpen, cause: []string{"rank:1", "rank:6"}, conf: ConfidenceHigh, headline: "Two or more causes"}},
		{"resolve: back within 10% for the hold-down", []Evidence{series(j, 0, 4000, slowBetween(1000, 1400, 150)), onset(j, EngineStageFrontier, 1000, 100, 150), relief(j, EngineStageFrontier, 1400, 150, 104)}, at(4000),
			want{n: 1, state: StateResolved}},
		{"recovering until the hold-down passes", []Evidence{series(j, 0, 1500, slowBetween(1000, 1400, 150)), onset(j, EngineStageFrontier, 1000, 100, 150), relief(j, EngineStageFrontier, 1400, 150, 104)}, at(1500),
			want{n: 1, state: StateRecovering}},
		{"a partial relief (still 30% slow) does not recover", []Evidence{series(j, 0, 4000, slowBetween(1000, 4000, 150)), onset(j, EngineStageFrontier, 1000, 100, 150), relief(j, EngineStageFrontier, 1400, 150, 130)}, at(4000),
			want{n: 1, state: StateOpen}},
		{"the step series alone shows the recovery", []Evidence{series(j, 0, 4000, slowBetween(1000, 1400, 150)), onset(j, EngineGreyhound, 1000, 100, 150)}, at(4000),
			want{n: 1, state: StateResolved}},
		{"re-open: a relapse inside the hold-down is the same incident", []Evidence{series(j, 0, 2000, func(s int64) float64 {
			if s >= 1000 && s < 1200 || s >= 1300 {
				return 150
			}
			return 100
		}), onset(j, EngineStageFrontier, 1000, 100, 150),
			relief(j, EngineStageFrontier, 1200, 150, 100), onset(j, EngineStageFrontier, 1300, 100, 150)}, at(2000),
			want{n: 1, state: StateOpen, relapses: 1}},
		{"split: an onset after the hold-down is a new incident", []Evidence{series(j, 0, 6000, func(s int64) float64 {
			if (s >= 1000 && s < 1400) || (s >= 4000 && s < 4400) {
				return 150
			}
			return 100
		}), onset(j, EngineStageFrontier, 1000, 100, 150), relief(j, EngineStageFrontier, 1400, 150, 100), onset(j, EngineStageFrontier, 4000, 100, 150)}, at(6000),
			want{n: 2, state: StateResolved}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fuse(tc.evs, tc.now)
			if len(got) != tc.want.n {
				t.Fatalf("%d incidents, want %d: %s", len(got), tc.want.n, dump(got))
			}
			if tc.want.n == 0 {
				return
			}
			inc := got[0]
			if inc.State != tc.want.state {
				t.Errorf("state %s, want %s: %s", inc.State, tc.want.state, dump(got))
			}
			if !slices.Equal(inc.Cause, tc.want.cause) {
				t.Errorf("cause %v, want %v: %s", inc.Cause, tc.want.cause, dump(got))
			}
			if tc.want.conf != "" && inc.Confidence != tc.want.conf {
				t.Errorf("confidence %s, want %s", inc.Confidence, tc.want.conf)
			}
			if got := len(inc.Contradictions) > 0; got != tc.want.contra {
				t.Errorf("contradictions %v, want %v", inc.Contradictions, tc.want.contra)
			}
			if inc.Relapses != tc.want.relapses {
				t.Errorf("relapses %d, want %d", inc.Relapses, tc.want.relapses)
			}
			if !strings.Contains(inc.Headline, tc.want.headline) {
				t.Errorf("headline %q, want it to contain %q", inc.Headline, tc.want.headline)
			}
			if tc.want.chainLayer != nil {
				var ls []Layer
				for _, l := range inc.Hypotheses[0].Chain {
					ls = append(ls, l.Layer)
				}
				if !slices.Equal(ls, tc.want.chainLayer) {
					t.Errorf("chain layers %v, want %v", ls, tc.want.chainLayer)
				}
			}
			if err := inc.Check(); err != nil {
				t.Errorf("published incident fails its own check: %v", err)
			}
		})
	}
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", " ")
	if len(b) > 4000 {
		b = b[:4000]
	}
	return string(b)
}

func TestLostTime(t *testing.T) {
	// 400 steps 50 ms slower on 8 ranks: 20 s of the job, 160 rank-seconds.
	evs := []Evidence{series("j", 0, 4000, slowBetween(1000, 1400, 150)), onset("j", EngineStageFrontier, 1000, 100, 150)}
	inc := fuse(evs, at(4000))[0]
	if math.Abs(inc.Lost.Seconds-20) > 1e-9 || math.Abs(inc.Lost.RankSeconds-160) > 1e-9 || inc.Lost.Steps != 400 || inc.Lost.Partial {
		t.Fatalf("lost %+v, want 20 s, 160 rank-s, 400 steps", inc.Lost)
	}
	if inc.HealthyMS != 100 || inc.SlowMS != 150 {
		t.Fatalf("healthy %v slow %v, want 100 → 150", inc.HealthyMS, inc.SlowMS)
	}
	if w := inc.Windows; w.During.FromStep != 1000 || w.During.ToStep != 1400 || w.Before.ToStep != 999 || w.After.FromStep != 1400 {
		t.Fatalf("windows %+v", w)
	}
	// Without a step series: estimated from the onset over the span, and
	// marked partial.
	e := onset("j", EngineGreyhound, 1000, 100, 150)
	late := finding("j", "x", EngineGreyhound, KindGreyhoundVerdict, LayerCollective, CategoryCompute, ConfidenceHigh, 1000, 1600, RankTarget(1, ""))
	inc = fuse([]Evidence{e, late}, at(1600))[0]
	if !inc.Lost.Partial || inc.Lost.Seconds <= 0 {
		t.Fatalf("estimated lost %+v: want partial and positive", inc.Lost)
	}
}

// Re-fusing with the published incidents as prior keeps IDs; a closed
// incident absorbs an engine re-reporting its onset.
func TestPriorAndClosed(t *testing.T) {
	evs := []Evidence{series("j", 0, 4000, slowBetween(1000, 1400, 150)), onset("j", EngineStageFrontier, 1000, 100, 150)}
	first := fuse(evs, at(4000))
	if len(first) != 1 || first[0].State != StateResolved {
		t.Fatalf("want one resolved: %s", dump(first))
	}
	// Later: the engine re-reports the same onset with a shifted step (a
	// new ID), plus the old one.
	re := onset("j", EngineStageFrontier, 1002, 100, 150)
	again := fuse(append(slices.Clone(evs), re), at(5000)+int64(time.Hour), first...)
	if len(again) != 1 || again[0].ID != first[0].ID {
		t.Fatalf("a re-reported old onset opened another incident: %s", dump(again))
	}
	// An open incident keeps its ID when an earlier onset arrives later.
	evs2 := []Evidence{series("j", 0, 2000, slowBetween(1000, 3000, 150)), onset("j", EngineGreyhound, 1005, 100, 150)}
	p := fuse(evs2, at(2000))
	q := fuse(append(evs2, onset("j", EngineStageFrontier, 1000, 100, 150)), at(2001), p...)
	if len(q) != 1 || q[0].ID != p[0].ID || q[0].DetectedNS != p[0].DetectedNS || q[0].Opened.Step != 1000 {
		t.Fatalf("prior identity lost: %s", dump(q))
	}
}

// Property: re-sending evidence changes nothing; evidence order changes
// nothing (the result is a function of the set).
func TestPropertySetSemantics(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		evs := randomEvidence(r)
		want, _ := json.Marshal(fuse(evs, at(5000)))
		dup := slices.Concat(evs, evs[:r.IntN(len(evs)+1)])
		r.Shuffle(len(dup), func(i, j int) { dup[i], dup[j] = dup[j], dup[i] })
		got, _ := json.Marshal(fuse(dup, at(5000)))
		if string(got) != string(want) {
			t.Fatalf("trial %d: order or re-sends changed the result\nwant %s\ngot  %s", trial, want, got)
		}
	}
}

func randomEvidence(r *rand.Rand) []Evidence {
	var evs []Evidence
	a := int64(500 + r.IntN(1000))
	b := a + int64(100+r.IntN(2000))
	evs = append(evs, series("j", 0, 3000, slowBetween(a, b, 100+float64(r.IntN(100)))))
	engines := []Engine{EngineStageFrontier, EngineGreyhound, EngineSysom, EngineKair}
	for i := 0; i < 1+r.IntN(4); i++ {
		evs = append(evs, onset("j", engines[r.IntN(2)], a+int64(r.IntN(50)), 100, 160))
	}
	if r.IntN(2) == 0 {
		evs = append(evs, relief("j", engines[r.IntN(2)], b+int64(r.IntN(20)), 160, 100+float64(r.IntN(20))))
	}
	for i := 0; i < r.IntN(8); i++ {
		conf := []Confidence{ConfidenceHigh, ConfidenceLow, ConfidenceWithheld}[r.IntN(3)]
		from := a + int64(r.IntN(500))
		e := finding("j", "f"+string(rune('a'+i)), engines[r.IntN(4)], KindGreyhoundLate, []Layer{LayerStage, LayerCollective, LayerCPU}[r.IntN(3)],
			[]Category{CategoryCompute, CategoryOS, CategoryUnknown}[r.IntN(3)], conf, from, from+int64(r.IntN(500)), RankTarget(r.IntN(4), ""))
		e.Exclusive, e.Subject = r.IntN(2) == 0, "stage:x"
		if r.IntN(4) == 0 {
			e.Signal, e.Against = SignalHealthy, e.Targets
		}
		// A re-report of the same finding with a later time replaces it.
		evs = append(evs, e)
		if r.IntN(3) == 0 {
			e2 := e
			e2.AtNS += 10
			e2.Confidence = ConfidenceHigh
			evs = append(evs, e2)
		}
	}
	return evs
}

func TestEscalation(t *testing.T) {
	evs := []Evidence{series("j", 0, 2000, slowBetween(1000, 3000, 150)), onset("j", EngineStageFrontier, 1000, 100, 150),
		finding("j", "sf/l", EngineStageFrontier, KindStageLeader, LayerStage, CategoryCompute, ConfidenceLow, 1000, 1900, RankTarget(3, ""))}
	caps := Capabilities{Validation: true, Capture: true, Profile: true, Ranks: 8}
	in := Input{Job: "j", Evidence: evs, NowNS: at(2000), Caps: caps}
	inc := Fuse(in, DefaultConfig())[0]
	kinds := map[RequestKind]Request{}
	for _, w := range inc.Waiting {
		kinds[w.Kind] = w
	}
	if len(kinds) != 3 || !slices.Equal(kinds[RequestCapture].Ranks, []int{3}) || !slices.Equal(kinds[RequestProfile].Ranks, []int{3, 0}) {
		t.Fatalf("waiting %+v: want validation, a capture of rank 3, a profile of 3 beside healthy 0", inc.Waiting)
	}
	for _, w := range inc.Waiting {
		if w.Asked {
			t.Fatalf("%s asked before any action", w.Kind)
		}
	}
	// Once asked (an audit line), it stays listed as asked; once KAIR's
	// evidence arrives, the capture request is gone.
	in.Actions = []Action{{Incident: inc.ID, AtNS: at(1500), Kind: RequestCapture, Ranks: []int{3}, Result: "requested", Ref: "cap-1"}}
	in.Prior = []Incident{inc}
	inc2 := Fuse(in, DefaultConfig())[0]
	if len(inc2.Audit) != 1 || !slices.ContainsFunc(inc2.Waiting, func(r Request) bool { return r.Kind == RequestCapture && r.Asked }) {
		t.Fatalf("asked capture not shown: audit %+v waiting %+v", inc2.Audit, inc2.Waiting)
	}
	in.Evidence = append(in.Evidence, finding("j", "kair/c", EngineKair, KindKairCulprit, LayerOperator, CategoryCompute, ConfidenceHigh, 1500, 1510,
		Target{Kind: TargetOperator, Name: "aten::mm", Rank: 3}))
	inc3 := Fuse(in, DefaultConfig())[0]
	if slices.ContainsFunc(inc3.Waiting, func(r Request) bool { return r.Kind == RequestCapture }) {
		t.Fatalf("capture still wanted after KAIR answered: %+v", inc3.Waiting)
	}
	// Without capabilities nothing is asked.
	in.Caps = Capabilities{}
	if w := Fuse(in, DefaultConfig())[0].Waiting; len(w) != 0 {
		t.Fatalf("asked without capabilities: %+v", w)
	}
}

func TestFleetAndRelated(t *testing.T) {
	mk := func(job string, step int64, host string) Incident {
		evs := []Evidence{series(job, 0, 2000, slowBetween(1000, 3000, 150)), onset(job, EngineStageFrontier, step, 100, 150),
			finding(job, "v", EngineGreyhound, KindGreyhoundVerdict, LayerCollective, CategoryCompute, ConfidenceHigh, step, 1900, RankTarget(2, host))}
		return Fuse(Input{Job: job, Evidence: evs, NowNS: at(2000)}, DefaultConfig())[0]
	}
	a, b, c := mk("j1", 1000, "h7"), mk("j2", 1500, "h7"), mk("j3", 1200, "h9")
	rows := Fleet([]Incident{a, b, c}, 0, 0)
	if len(rows) != 2 || rows[0].Host != "h7" || rows[0].Incidents != 2 || !slices.Equal(rows[0].Jobs, []string{"j1", "j2"}) {
		t.Fatalf("fleet %+v", rows)
	}
	rel := RelatedTo(&b, []Incident{a, c}, 5)
	if len(rel) != 1 || rel[0].Job != "j1" || !strings.Contains(rel[0].Text, "host h7 was also the cause in job j1") {
		t.Fatalf("related %+v", rel)
	}
}

// A job that stops reporting while slow resolves its incident as "job
// stopped"; a resolved incident's window ends where the next one opens.
func TestStoppedAndWindowsEndAtNext(t *testing.T) {
	evs := []Evidence{series("j", 0, 1500, slowBetween(1000, 3000, 150)), onset("j", EngineStageFrontier, 1000, 100, 150)}
	stop := Point{WallNS: at(1499), Step: 1499}
	got := Fuse(Input{Job: "j", Evidence: evs, NowNS: at(1500) + int64(time.Hour), Stopped: &stop}, DefaultConfig())
	if len(got) != 1 || got[0].State != StateResolved || got[0].ResolvedBy != ResolvedStopped || got[0].Resolved.Step != 1499 {
		t.Fatalf("want resolved by job_stopped at 1499: %s", dump(got))
	}
	if open := fuse(evs, at(1500)); open[0].State != StateOpen || open[0].ResolvedBy != "" {
		t.Fatalf("without Stopped the incident must stay open: %s", dump(open))
	}
	two := fuse([]Evidence{series("j", 0, 6000, func(s int64) float64 {
		if (s >= 1000 && s < 1400) || (s >= 4000 && s < 4400) {
			return 150
		}
		return 100
	}), onset("j", EngineStageFrontier, 1000, 100, 150), onset("j", EngineStageFrontier, 4000, 100, 150)}, at(6000))
	if len(two) != 2 || two[0].ResolvedBy != ResolvedSeries || two[0].Updated.Step >= 4000 || two[0].Windows.After.ToStep >= 4000 {
		t.Fatalf("first incident leaks into the second: %s", dump(two))
	}
}

// A stall that recovered before lasting max(10 steps, 30 s) and that
// laggard never published is a transient, not an incident; published
// while it was still slow, it resolves like any other. An engine's newer
// exclusive finding supersedes its own older one.
func TestTransientsAndSupersession(t *testing.T) {
	stall := []Evidence{series("j", 0, 3000, slowBetween(1000, 1050, 150)), onset("j", EngineStageFrontier, 1000, 100, 150)}
	if got := fuse(stall, at(3000)); len(got) != 0 {
		t.Fatalf("a 5 s stall seen after it ended opened an incident: %s", dump(got))
	}
	during := fuse([]Evidence{series("j", 0, 1040, slowBetween(1000, 1050, 150)), onset("j", EngineStageFrontier, 1000, 100, 150)}, at(1040))
	if len(during) != 1 || during[0].State != StateOpen {
		t.Fatalf("want one open incident while the stall lasts: %s", dump(during))
	}
	after := fuse(stall, at(3000), during...)
	if len(after) != 1 || after[0].ID != during[0].ID || after[0].State != StateResolved {
		t.Fatalf("a published stall must resolve, not vanish: %s", dump(after))
	}
	old := finding("j", "gh/late/old", EngineGreyhound, KindGreyhoundLate, LayerCollective, CategoryUnknown, ConfidenceLow, 990, 1010, RankTarget(2, ""))
	old.Exclusive, old.Subject = true, "comm:world"
	cur := finding("j", "gh/late/new", EngineGreyhound, KindGreyhoundLate, LayerCollective, CategoryUnknown, ConfidenceHigh, 1000, 1900, RankTarget(1, ""))
	cur.Exclusive, cur.Subject = true, "comm:world"
	got := fuse([]Evidence{series("j", 0, 2000, slowBetween(1000, 3000, 150)), onset("j", EngineStageFrontier, 1000, 100, 150), old, cur}, at(2000))
	if len(got) != 1 || !slices.Equal(got[0].Cause, []string{"rank:1"}) || len(got[0].Contradictions) != 0 {
		t.Fatalf("the engine's older view contradicted its newer one: %s", dump(got))
	}
}
