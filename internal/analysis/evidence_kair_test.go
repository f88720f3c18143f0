package analysis

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// The five real 4-rank captures of cmd/laggard (fault on rank 3): Stage
// 1's rank and the culprit each become one finding anchored on the
// capture; victims — ranks that waited for the culprit with no material
// deviation of their own — are cleared at the operator layer.
func TestKairEvidenceReal(t *testing.T) {
	cases := []struct {
		name        string
		culprit     []string
		category    incident.Category
		conf        incident.Confidence
		victims     []string
		stage1      []string
		stage1Conf  incident.Confidence
		stage1Reply string // withheld code when Stage 1 names nobody
	}{
		// aten::mm runs long on rank 3; rank 2 has a material deviation
		// of its own and is not cleared.
		{"slow_op", []string{"rank:3", "op:aten::mm@3"}, incident.CategoryCompute, incident.ConfidenceHigh, []string{"rank:0", "rank:1"}, nil, incident.ConfidenceWithheld, "inconclusive"},
		// A gap on rank 3 between two operators (the data wait): the rank,
		// not an operator; Stage 1 agrees and the others wait for it.
		{"data", []string{"rank:3"}, incident.CategoryUnknown, incident.ConfidenceHigh, []string{"rank:1"}, []string{"rank:3"}, incident.ConfidenceHigh, ""},
		// Stage 1's straggler is rank 0, whom nobody waits for: withheld
		// by the engine's own check, and never cleared as a victim.
		{"late_collective", []string{"rank:3"}, incident.CategoryUnknown, incident.ConfidenceHigh, []string{"rank:1"}, nil, incident.ConfidenceWithheld, kairNotWaitedFor},
		{"slow_link", nil, incident.CategoryUnknown, incident.ConfidenceWithheld, nil, nil, incident.ConfidenceWithheld, "inconclusive"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp, rep := kairFixture(t, c.name)
			evs := KairEvidence(cp, rep, map[int]string{3: "h3"}, EvidenceEnv{AtNS: 9})
			cu := byID(evs, "kair.culprit/i0/"+cp.ID)
			if cu == nil {
				t.Fatal("no culprit evidence")
			}
			if !slices.Equal(targetKeys(cu.Targets), c.culprit) || cu.Category != c.category || cu.Confidence != c.conf || !slices.Equal(targetKeys(cu.Against), c.victims) {
				t.Errorf("culprit: targets %v category %q confidence %q against %v (%s)", targetKeys(cu.Targets), cu.Category, cu.Confidence, targetKeys(cu.Against), cu.Text)
			}
			if len(cu.Targets) > 0 && (cu.Layer != incident.LayerOperator || cu.Targets[0].Host != "h3") {
				t.Errorf("culprit layer %q target %+v", cu.Layer, cu.Targets[0])
			}
			if cu.Confidence == incident.ConfidenceWithheld && cu.Withheld != string(rep.Verdict) {
				t.Errorf("withheld %q for verdict %q", cu.Withheld, rep.Verdict)
			}
			s1 := byID(evs, "kair.rank/i0/"+cp.ID)
			if s1 == nil || !slices.Equal(targetKeys(s1.Targets), c.stage1) || s1.Confidence != c.stage1Conf || s1.Withheld != c.stage1Reply {
				t.Errorf("stage 1: %+v", s1)
			}
			// The traces' times are relative: the capture's life places it.
			if cu.Window.FromNS != cp.CreatedNS || cu.Window.ToNS != cp.DeadlineNS || cu.Window.FromStep != rep.Steps[0].Step || cu.View != "/api/v1/jobs/"+cp.Job+"/kair?capture="+cp.ID {
				t.Errorf("window %+v view %s", cu.Window, cu.View)
			}
			var d culpritDetail
			if err := json.Unmarshal(cu.Detail, &d); err != nil || d.Verdict != rep.Verdict {
				t.Errorf("detail %s: %v", cu.Detail, err)
			}
		})
	}
}

// The engine's golden run (synthetic, an op slowed on rank 2) and a
// clock that places the capture's steps.
func TestKairEvidenceGolden(t *testing.T) {
	var rep kair.TraceReport
	readJSON(t, "../engine/kair/testdata/run_slow_op_4ranks.golden.json", &rep)
	cp := &store.Capture{ID: "c000000000001", Job: "j", Incarnation: 2, StartStep: 10, Steps: 3, Every: 1}
	clock := NewStepClock(map[int64]int64{0: t0, 100: t0 + 10e9})
	evs := KairEvidence(cp, &rep, nil, EvidenceEnv{Clock: clock})
	cu := byID(evs, "kair.culprit/i2/c000000000001")
	if cu == nil || cu.Incarnation != 2 || cu.Confidence != incident.ConfidenceHigh || !slices.Contains(targetKeys(cu.Targets), "rank:2") {
		t.Fatalf("culprit %+v", cu)
	}
	first, last := rep.Steps[0].Step, rep.Steps[len(rep.Steps)-1].Step
	if cu.Window != clock.stepSpan(first, last) || cu.Window.FromNS == 0 {
		t.Errorf("window %+v, want the common steps %d–%d on the clock", cu.Window, first, last)
	}
}

// A cause between two ranks' operators (an edge from another rank) names
// the link between them, at the network layer.
func TestKairEvidenceLink(t *testing.T) {
	rep := &kair.TraceReport{Ranks: []int{0, 1, 2, 3}, Verdict: kair.VerdictCulprit,
		Causes: []kair.Cause{{RootCause: kair.RootCause{Kind: kair.KindEdge, Rank: 2, Name: "recv", FromRank: 1, From: "send", ExcessNS: 50e6}, Steps: 2}},
		Impact: &kair.Impact{Rank: 2, Causes: []int{0}, HeldNS: 40e6, Checked: true, Material: true, OtherRank: -1}}
	cp := &store.Capture{ID: "c000000000002", Job: "j", CreatedNS: t0, DeadlineNS: t0 + 1e9}
	cu := byID(KairEvidence(cp, rep, nil, EvidenceEnv{}), "kair.culprit/")
	if cu == nil || !slices.Equal(targetKeys(cu.Targets), []string{"link:1-2"}) || cu.Layer != incident.LayerNetwork ||
		cu.Category != incident.CategoryCommunication || !slices.Equal(targetKeys(cu.Against), []string{"rank:0", "rank:3"}) {
		t.Errorf("edge culprit: %+v", cu)
	}
	// Without the wait measured, nobody is cleared.
	rep.Impact.Checked = false
	if cu := byID(KairEvidence(cp, rep, nil, EvidenceEnv{}), "kair.culprit/"); len(cu.Against) != 0 {
		t.Errorf("victims cleared without the wait measured: %v", targetKeys(cu.Against))
	}
}
