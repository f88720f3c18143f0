package control

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Issue 16 item 1, Greyhound: a restarted job is analysed on its newest
// launch's calls (incarnation=N or all on request) and the report says
// which launch it reads; the plan's at_step is a training step, never a
// stored ordinal; the controller starts over on a restart (no episode
// carried across it) and a plan belongs to the launch it was made for.
// Before: LastStep was the ordinal 2^48+s, the window mixed both
// launches' calls (the same process-group names, seq from 0 again), the
// old launch's plan was served to the new processes, and nothing said
// which launch a report read.
func TestGreyhoundIncarnations(t *testing.T) {
	st, g := newGreyhoundStore(t)
	vectors := func(inc int, from, to int64) {
		var vs []stagevec.Vector
		for s := from; s < to; s++ {
			for r := range 4 {
				vs = append(vs, stagevec.Vector{Step: stagevec.Ordinal(inc, s), Rank: r, Durations: []float64{10, 20, 30, 10, 10, 0}, WallMS: 80})
			}
		}
		if err := st.Append("run42", vs); err != nil {
			t.Fatal(err)
		}
	}
	// Launch 0: rank 2 slows at iteration 200; run until a plan is out.
	d := &ddp4{seq: map[string]int64{}, next: ghT0, computeMS: func(it, r int) float64 {
		if it >= 200 && r == 2 {
			return 130
		}
		return 70
	}}
	now := ghT0
	var plan *analysis.GreyhoundPlan
	for i := 0; i < 60 && plan == nil; i++ {
		now += 2e9
		if calls := d.until(now); len(calls) > 0 {
			if _, err := st.AppendCollectives("run42", &collective.Batch{Comms: ddp4Views(), Calls: calls}); err != nil {
				t.Fatal(err)
			}
		}
		plan = advance(t, g, now).Plan
	}
	if plan == nil {
		t.Fatal("launch 0 never validated")
	}
	vectors(0, 0, int64(len(d.iterEnd)))

	// The job restarts from step 0 with the same process groups.
	restart := now + 5e9
	j, _ := st.Job("run42")
	j.Incarnations = []signal.Incarnation{{N: 0, Reason: signal.IncFirst, StartNS: ghT0}, {N: 1, Reason: signal.IncRestart, StartNS: restart, Opened: time.Unix(0, restart)}}
	if err := st.PutJob(j); err != nil {
		t.Fatal(err)
	}
	if p, err := g.OpenPlan("run42", 2, -1, now+6e9); err != nil || p != nil {
		t.Fatalf("launch 0's plan served to the new launch: %+v %v", p, err)
	}
	if p, err := g.OpenPlan("run42", 2, 0, now+6e9); err != nil || p == nil || p.ID != plan.ID {
		t.Fatalf("launch 0's own (late) poll: %+v %v", p, err)
	}
	var ce *signal.ConflictError
	if _, _, err := g.PostResult("run42", plan.ID, now+6e9, 2, 1, strings.NewReader(`{"rank":2}`)); !errors.As(err, &ce) || ce.Field != "incarnation" {
		t.Fatalf("a result from another launch: %v", err)
	}

	d1 := &ddp4{seq: map[string]int64{}, next: restart, computeMS: func(int, int) float64 { return 70 }}
	now = restart
	var res *AdvanceResult
	for range 20 {
		now += 2e9
		if calls := d1.until(now); len(calls) > 0 {
			b := &collective.Batch{Comms: ddp4Views(), Calls: calls}
			b.Namespace(1) // as the ingest stores the restart's calls
			if _, err := st.AppendCollectives("run42", b); err != nil {
				t.Fatal(err)
			}
		}
		res = advance(t, g, now)
	}
	vectors(1, 0, int64(len(d1.iterEnd)))
	s, err := g.State("run42")
	if err != nil {
		t.Fatal(err)
	}
	if s.Incarnation != 1 || s.Controller.Phase != analysis.PhaseTracking || s.Published != nil || s.OnsetNS != 0 {
		t.Fatalf("the controller did not start over on the restart: incarnation %d phase %s published %+v onset %d", s.Incarnation, s.Controller.Phase, s.Published, s.OnsetNS)
	}
	if rep := res.Report; rep.Incarnation != 1 || !strings.Contains(rep.IncarnationNote, "incarnation 1") {
		t.Fatalf("the controller's report does not say its launch: %d %q", rep.Incarnation, rep.IncarnationNote)
	}
	for _, it := range res.Report.Iteration.Series {
		if it.EndNS-int64(it.MS*1e6) < restart {
			t.Fatalf("iteration %+v before the restart at %d in the newest launch's report", it, restart)
		}
	}
	gi, err := g.Load(context.Background(), analysis.GreyhoundRequest{Job: "run42", NowNS: now})
	if err != nil {
		t.Fatal(err)
	}
	if last := int64(len(d1.iterEnd) - 1); gi.LastStep != last {
		t.Fatalf("last step %d, want launch 1's training step %d (not an ordinal)", gi.LastStep, last)
	}

	// On request: the first launch, and all of them.
	zero, all := 0, analysis.IncAll
	rep, err := g.Report(context.Background(), analysis.GreyhoundRequest{Job: "run42", NowNS: now, Incarnation: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Incarnation != 0 || !strings.Contains(rep.IncarnationNote, "incarnation 0") || len(rep.Validation) != 1 {
		t.Fatalf("launch 0 on request: incarnation %d note %q validations %d", rep.Incarnation, rep.IncarnationNote, len(rep.Validation))
	}
	for _, it := range rep.Iteration.Series {
		if it.EndNS >= restart {
			t.Fatalf("launch 0's report holds iteration %+v after the restart", it)
		}
	}
	if rep, err = g.Report(context.Background(), analysis.GreyhoundRequest{Job: "run42", NowNS: now, Incarnation: &all}); err != nil || rep.Incarnation != analysis.IncAll {
		t.Fatalf("all: %v %+v", err, rep)
	}
	nine := 9
	var fe *signal.FieldError
	if _, err := g.Report(context.Background(), analysis.GreyhoundRequest{Job: "run42", NowNS: now, Incarnation: &nine}); !errors.As(err, &fe) || fe.Field != analysis.ParamIncarnation {
		t.Fatalf("an incarnation the job never had: %v", err)
	}
}
