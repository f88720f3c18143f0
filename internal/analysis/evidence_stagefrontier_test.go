package analysis

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
)

// The recorded real runs (cmd/laggard/testdata): a data-loading delay on
// rank 0 that StageFrontier names, and a delay inside backward on 8 ranks
// that it rightly withholds as absorbed in the stage — the class fusion
// exists for: the withholding must reach the incident as a finding on
// that stage (subject, stage layer, no target) for collective-level
// lateness to name the rank.
func TestStageFrontierEvidenceRecorded(t *testing.T) {
	cases := []struct {
		file       string
		stage      string
		rank       int // -1: withheld
		withheld   stagefrontier.Withheld
		category   incident.Category
		ranks      int
		confidence incident.Confidence
	}{
		{recordedData, stagevec.StageData, 0, "", incident.CategoryData, 4, incident.ConfidenceHigh},
		{recordedBackward, stagevec.StageBackward, -1, stagefrontier.WithheldAbsorbed, incident.CategoryUnknown, 8, incident.ConfidenceWithheld},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			rep := recordedReport(t, c.file)
			hosts := map[int]string{0: "gpu-node-7"}
			evs := StageFrontierEvidence(rep, hosts, EvidenceEnv{Clock: TimelineClock(rep.Timeline, t0), AtNS: 5})

			on := ofKind(evs, incident.KindStageChange)
			if len(on) != 1 {
				t.Fatalf("%d change points, want the onset at step 10", len(on))
			}
			o := on[0]
			if o.Signal != incident.SignalOnset || !o.Verified || o.Window.FromStep < 10 || o.Window.FromStep > 11 || !(o.AfterMS > 1.5*o.BeforeMS) ||
				o.Window.FromNS == 0 || o.Ranks != c.ranks || o.ID != "stagefrontier.change_point/i0/"+stepPart(o.Window.FromStep)+"/onset" {
				t.Errorf("onset %+v", o)
			}

			ls := ofKind(evs, incident.KindStageLeader)
			if len(ls) != 1 {
				t.Fatalf("%d leader findings, want one for the default group", len(ls))
			}
			l := ls[0]
			subject := "stage:" + rep.Groups[0].Group + "/" + c.stage
			if l.Subject != subject || l.Layer != incident.LayerStage || l.Category != c.category || l.Confidence != c.confidence ||
				l.Signal != incident.SignalFinding || l.Withheld != string(c.withheld) {
				t.Errorf("leader: subject %q layer %q category %q confidence %q withheld %q", l.Subject, l.Layer, l.Category, l.Confidence, l.Withheld)
			}
			if c.rank >= 0 {
				if len(l.Targets) != 1 || l.Targets[0] != incident.RankTarget(c.rank, hosts[c.rank]) || !l.Exclusive || l.Reason == "" {
					t.Errorf("named leader: targets %+v exclusive %v reason %q", l.Targets, l.Exclusive, l.Reason)
				}
			} else if len(l.Targets) != 0 || l.Exclusive || !strings.Contains(l.Reason, "collective-level evidence is needed") {
				t.Errorf("withheld leader: targets %+v exclusive %v reason %q", l.Targets, l.Exclusive, l.Reason)
			}
			// The finding covers the report's window (since the onset) on
			// both axes, anchored on the change point.
			if l.Window.FromStep != rep.Window.From || l.Window.ToStep != rep.Window.To || l.Window.FromNS == 0 ||
				!strings.Contains(l.ID, "/"+stepPart(rep.Window.From)+"/") {
				t.Errorf("leader window %+v id %s, report window %+v", l.Window, l.ID, rep.Window)
			}
			var d leaderDetail
			if err := json.Unmarshal(l.Detail, &d); err != nil || d.Headline.Stage != c.stage || d.Stage == nil {
				t.Errorf("detail %s: %v", l.Detail, err)
			}

			ps := ofKind(evs, incident.KindProgress)
			if len(ps) != 1 || len(ps[0].Samples) != len(rep.Timeline.Series) || ps[0].Ranks != c.ranks {
				t.Fatalf("progress %+v", ps)
			}
			for i, s := range ps[0].Samples {
				p := rep.Timeline.Series[i]
				if s.Step != p.Step || s.MS != p.ExposedMS || s.WallNS == 0 || (i > 0 && s.WallNS <= ps[0].Samples[i-1].WallNS) {
					t.Fatalf("sample %d %+v, series %+v", i, s, p)
				}
			}
		})
	}
}

// A slowdown that ends: its relief is a change point too, and the report
// (since the relief) still places the stage it looks at.
func TestStageFrontierEvidenceRelief(t *testing.T) {
	d := sim.DDP{Ranks: 8, Steps: 180, Seed: 2, Extra: sim.WithWarmup(func(t, r int) sim.Delays {
		var ex sim.Delays
		if t >= 60 && t < 120 && r == 3 {
			ex[sim.Data] = 100
		}
		return ex
	})}
	rep := run(t, memJob(t, "j", d), Request{Job: "j"})
	evs := StageFrontierEvidence(rep, nil, EvidenceEnv{})
	var kinds []incident.Signal
	cps := ofKind(evs, incident.KindStageChange)
	slices.SortFunc(cps, func(a, b incident.Evidence) int { return int(a.Window.FromStep - b.Window.FromStep) })
	for _, e := range cps {
		kinds = append(kinds, e.Signal)
		if e.Window.FromNS != 0 {
			t.Errorf("%s: a wall window without a clock", e.ID)
		}
	}
	if !slices.Equal(kinds, []incident.Signal{incident.SignalOnset, incident.SignalRelief}) {
		t.Fatalf("change signals %v, want onset then relief", kinds)
	}
	r := byID(evs, "stagefrontier.change_point/i0/s12")
	if r == nil || r.Signal != incident.SignalRelief || !(r.AfterMS < r.BeforeMS) || !strings.Contains(r.Text, "fell") {
		t.Errorf("relief %+v", r)
	}
	if !strings.Contains(r.View, "from=12") {
		t.Errorf("relief view %q: want the regime it starts", r.View)
	}
}

// Progress comes in aligned blocks: a block's identity and samples do not
// change as the job runs on (only the newest grows), and a block the time
// axis cut off is left out rather than replacing the full one.
func TestStageFrontierProgressBlocks(t *testing.T) {
	d := sim.DDP{Ranks: 4, Steps: 600, Seed: 4}
	all := d.Vectors()
	src := func(last int64) *MemSource {
		var vs []stagevec.Vector
		for _, v := range all {
			if v.Step <= last {
				vs = append(vs, v)
			}
		}
		return MemSourceOf(d.Job("j"), vs)
	}
	blocks := func(lim Limits, last int64) map[string]incident.Evidence {
		rep, err := New(src(last), lim).Run(t.Context(), Request{Job: "j"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]incident.Evidence{}
		for _, e := range ofKind(StageFrontierEvidence(rep, nil, EvidenceEnv{}), incident.KindProgress) {
			out[e.ID] = e
		}
		return out
	}
	early, late := blocks(Limits{}, 399), blocks(Limits{}, 599)
	ids := slices.Sorted(func(yield func(string) bool) {
		for id := range late {
			if !yield(id) {
				return
			}
		}
	})
	if !slices.Equal(ids, []string{"stagefrontier.progress/i0/s0", "stagefrontier.progress/i0/s256", "stagefrontier.progress/i0/s512"}) {
		t.Fatalf("blocks %v", ids)
	}
	a, _ := json.Marshal(early["stagefrontier.progress/i0/s0"])
	b, _ := json.Marshal(late["stagefrontier.progress/i0/s0"])
	if string(a) != string(b) || len(late["stagefrontier.progress/i0/s0"].Samples) != progressBlock {
		t.Errorf("the first block changed as the job ran on")
	}
	if n := len(early["stagefrontier.progress/i0/s256"].Samples); n != 400-256 {
		t.Errorf("the growing block holds %d samples at step 399", n)
	}
	// A time axis of the last 300 steps starts inside block 256.
	cut := blocks(Limits{HistorySteps: 300}, 599)
	if _, ok := cut["stagefrontier.progress/i0/s256"]; ok || len(cut["stagefrontier.progress/i0/s512"].Samples) != 600-512 {
		t.Errorf("truncated axis: blocks %v", cut)
	}
}

// The confidence the leader finding carries follows the headline: named
// at the stage that rose against the job's healthy reference with no
// downgrade label is high; named without a reference (the stage's tail,
// or its share of exposed time), or with a caveat, is a candidate; a
// withholding keeps the engine's reason, and what the stage's category
// means for it.
func TestStageFrontierLeaderConfidence(t *testing.T) {
	cases := []struct {
		name     string
		h        stagefrontier.Headline
		conf     incident.Confidence
		category incident.Category
	}{
		{"excess", stagefrontier.Headline{Stage: stagevec.StageForward, Basis: stagefrontier.BasisExcess, Rank: 2}, incident.ConfidenceHigh, incident.CategoryCompute},
		{"straggler", stagefrontier.Headline{Stage: stagevec.StageData, Basis: stagefrontier.BasisStraggler, Rank: 2}, incident.ConfidenceLow, incident.CategoryData},
		{"share", stagefrontier.Headline{Stage: stagevec.StageData, Basis: stagefrontier.BasisShare, Rank: 2}, incident.ConfidenceLow, incident.CategoryData},
		{"caveat", stagefrontier.Headline{Stage: stagevec.StageOptim, Basis: stagefrontier.BasisExcess, Rank: 2, Caveats: []string{"vectors were dropped"}}, incident.ConfidenceLow, incident.CategoryCompute},
		{"custom stage", stagefrontier.Headline{Stage: "my.stage", Basis: stagefrontier.BasisExcess, Rank: 2}, incident.ConfidenceHigh, incident.CategoryUnknown},
		{"tie", stagefrontier.Headline{Stage: stagevec.StageData, Basis: stagefrontier.BasisExcess, Rank: -1, Withheld: stagefrontier.WithheldTie, TieSet: []int{1, 2}}, incident.ConfidenceWithheld, incident.CategoryData},
		{"uniform", stagefrontier.Headline{Stage: stagevec.StageForward, Basis: stagefrontier.BasisExcess, Rank: -1, Withheld: stagefrontier.WithheldUniform}, incident.ConfidenceWithheld, incident.CategoryUniform},
		{"absorbed", stagefrontier.Headline{Stage: stagevec.StageData, Basis: stagefrontier.BasisExcess, Rank: -1, Withheld: stagefrontier.WithheldAbsorbed}, incident.ConfidenceWithheld, incident.CategoryUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := &Report{JobID: "j", Window: Window{From: 10, To: 19, Basis: BasisSteady},
				Groups: []GroupReport{{Group: "dp", NumRanks: 4}, {Group: "pp", NumRanks: 2, Report: &stagefrontier.Report{
					FirstStep: 10, LastStep: 19, Stages: []string{c.h.Stage}, Headline: c.h,
					Evidence: []stagefrontier.StageEvidence{{Stage: c.h.Stage, Leader: stagefrontier.LeaderEvidence{Rank: c.h.Rank, Why: "it leads"}}}}}}}
			evs := StageFrontierEvidence(rep, nil, EvidenceEnv{})
			if len(evs) != 1 {
				t.Fatalf("%d evidence", len(evs))
			}
			e := evs[0]
			if e.Confidence != c.conf || e.Category != c.category || e.Ranks != 6 {
				t.Errorf("confidence %q category %q ranks %d", e.Confidence, e.Category, e.Ranks)
			}
			// A steady window slides: the finding is the group's standing
			// one; its subject and view name the role group.
			if e.ID != "stagefrontier.leader/i0/latest/stage:pp/"+c.h.Stage || !strings.Contains(e.View, "group=pp") || !strings.Contains(e.Text, "role group pp") {
				t.Errorf("id %s view %s text %q", e.ID, e.View, e.Text)
			}
			if c.h.Rank < 0 && (e.Withheld != string(c.h.Withheld) || len(e.Targets) != 0) {
				t.Errorf("withheld %q targets %v", e.Withheld, e.Targets)
			}
		})
	}
}
