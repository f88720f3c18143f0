package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// slowdownVectors: world ranks, steps [from, to); from step onset on,
// rank slow's data stage takes 30 ms instead of 1 ms.
func slowdownVectors(world int, from, to, onset int64, slow int) []stagevec.Vector {
	var out []stagevec.Vector
	for step := from; step < to; step++ {
		for r := range world {
			d := []float64{1, 10, 20, 2, 3, 0.5}
			if r == slow && step >= onset {
				d[0] = 30
			}
			wall := 0.0
			for _, x := range d {
				wall += x
			}
			out = append(out, stagevec.Vector{Step: step, Rank: r, Durations: d, WallMS: wall})
		}
	}
	return out
}

// injectSlowdown ships job j's steps in three batches — from step 100 on
// rank 2 is slow — evaluating and fusing after each, as the background
// loops would.
func injectSlowdown(t *testing.T, e *kairEnv) {
	t.Helper()
	ctx := context.Background()
	for _, span := range [][2]int64{{0, 100}, {100, 160}, {160, 200}} {
		if r := e.call("POST", "/api/v1/jobs/j/vectors", tokIngestJ, jsonType, jsonBatch(t, slowdownVectors(4, span[0], span[1], 100, 2)), nil); r.status != 200 {
			t.Fatalf("ingest: %d %s", r.status, r.body)
		}
		e.srv.Detector().EvaluateOnce(ctx)
		e.srv.Incidents().Drain(ctx)
	}
}

// reportAdapter is a minimal StageFrontier adapter: the timeline's
// change points as verified onsets and reliefs, its series as progress,
// a named straggler as a high-confidence finding. It stands in for
// analysis.StageFrontierEvidence, which this test does not test.
func reportAdapter(now func() int64) control.Adapters {
	return control.Adapters{StageFrontier: func(rep *analysis.Report, hosts map[int]string) []incident.Evidence {
		job, at := rep.JobID, now()
		var evs []incident.Evidence
		if tl := rep.Timeline; tl != nil {
			p := incident.Evidence{ID: "sf/progress", Kind: incident.KindProgress, Engine: incident.EngineStageFrontier, Job: job, AtNS: at,
				Signal: incident.SignalProgress, Ranks: 4}
			for _, s := range tl.Series {
				p.Samples = append(p.Samples, incident.Sample{Step: s.Step, MS: s.ExposedMS})
			}
			if len(p.Samples) > 0 {
				p.Window = incident.Span{FromStep: p.Samples[0].Step, ToStep: p.Samples[len(p.Samples)-1].Step}
				evs = append(evs, p)
			}
			for _, c := range tl.ChangePoints {
				sig := incident.SignalOnset
				if c.Kind == analysis.Relief {
					sig = incident.SignalRelief
				}
				evs = append(evs, incident.Evidence{ID: fmt.Sprintf("sf/%s/%d", c.Kind, c.Step), Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier,
					Job: job, AtNS: at, Window: incident.Span{FromStep: c.Step, ToStep: c.Step}, Signal: sig, BeforeMS: c.BeforeMS, AfterMS: c.AfterMS, Verified: true,
					Text: "step time changed"})
			}
		}
		for _, g := range rep.Groups {
			h := g.Report.Headline
			if h.Rank < 0 || h.Withheld != "" {
				continue
			}
			evs = append(evs, incident.Evidence{ID: "sf/leader/" + g.Group, Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at,
				Window: incident.Span{FromStep: rep.Window.From, ToStep: rep.Window.To}, Signal: incident.SignalFinding,
				Targets: []incident.Target{incident.RankTarget(h.Rank, hosts[h.Rank])}, Layer: incident.LayerStage, Category: incident.CategoryData,
				Confidence: incident.ConfidenceHigh, Exclusive: true, Subject: "stage:" + g.Group + "/" + h.Stage, Text: fmt.Sprintf("rank %d leads %s", h.Rank, h.Stage)})
		}
		return evs
	}}
}

// A job slowed by one rank produces exactly one incident through the
// server's wiring (background evaluation → evidence → fusion → store),
// reachable by Get and by the job's list, with the slow rank as its cause
// and the open gauge set; the escalation asks KAIR for a capture of that
// rank (trigger incident) once, and a second evaluation opens no second
// incident.
func TestIncidentFromInjectedSlowdown(t *testing.T) {
	clock := time.Now().UnixNano
	e := newKairEnv(t, Config{IncidentAdapters: reportAdapter(clock)})
	x := e.srv.Incidents()
	if x == nil {
		t.Fatal("incident layer off by default")
	}
	injectSlowdown(t, e)
	incs, err := x.List(control.IncidentQuery{Job: "j"})
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) != 1 {
		t.Fatalf("%d incidents, want 1: %+v", len(incs), incs)
	}
	got, err := x.Get(incs[0].ID)
	if err != nil || got.Job != "j" || got.State != incident.StateOpen {
		t.Fatalf("Get(%s) = %+v, %v", incs[0].ID, got, err)
	}
	if !slices.Equal(got.Cause, []string{"rank:2"}) {
		t.Fatalf("cause %v, want rank:2 (headline %q)", got.Cause, got.Headline)
	}
	if n := testutil.CollectAndCount(e.srv.Registry(), "laggard_incidents_open"); n != 1 {
		t.Fatalf("laggard_incidents_open series: %d", n)
	}
	cs, err := e.srv.Kair().Captures("j")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Trigger != control.TriggerIncident || !slices.Contains(cs[0].Ranks, 2) || cs[0].Signal != "incident:"+got.ID {
		t.Fatalf("captures %+v, want one incident capture of rank 2", cs)
	}
	if !slices.ContainsFunc(got.Audit, func(a incident.Action) bool {
		return a.Kind == incident.RequestCapture && a.Result == control.ResultRequested && a.Ref == cs[0].ID
	}) {
		t.Fatalf("audit %+v lacks the capture", got.Audit)
	}
	// Deleting the job takes its incidents.
	if r := e.call("DELETE", "/api/v1/jobs/j", tokAdmin, "", nil, nil); r.status != 204 && r.status != 200 {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	if _, err := x.Get(got.ID); err == nil {
		t.Fatal("incident of a deleted job still found")
	}
	if n := testutil.CollectAndCount(e.srv.Registry(), "laggard_incidents_open"); n != 0 {
		t.Fatalf("laggard_incidents_open series after delete: %d", n)
	}
}

// -incidents=false: no manager, the evaluation runs unwatched, nothing
// is captured.
func TestIncidentsOff(t *testing.T) {
	e := newKairEnv(t, Config{IncidentsOff: true, IncidentAdapters: reportAdapter(time.Now().UnixNano)})
	if e.srv.Incidents() != nil {
		t.Fatal("manager built with the layer off")
	}
	if r := e.call("POST", "/api/v1/jobs/j/vectors", tokIngestJ, jsonType, jsonBatch(t, slowdownVectors(4, 0, 200, 100, 2)), nil); r.status != 200 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	e.srv.Detector().EvaluateOnce(context.Background())
	if cs, _ := e.srv.Kair().Captures("j"); len(cs) != 0 {
		t.Fatalf("captures with the layer off: %+v", cs)
	}
}

// The same slowdown through the server's own evidence adapters
// (internal/analysis) and the HTTP API: one incident, its cause the slow
// rank, listed by GET /api/v1/incidents?job= and served by
// GET /api/v1/incidents/{id}.
func TestIncidentThroughAdaptersAndAPI(t *testing.T) {
	e := newKairEnv(t, Config{})
	injectSlowdown(t, e)
	r := e.call("GET", "/api/v1/incidents?job=j", tokRead, "", nil, nil)
	var list struct{ Incidents []incident.Incident }
	if err := json.Unmarshal(r.body, &list); r.status != 200 || err != nil || len(list.Incidents) != 1 {
		t.Fatalf("GET incidents: %d %s", r.status, r.body)
	}
	id := list.Incidents[0].ID
	r = e.call("GET", "/api/v1/incidents/"+id, tokRead, "", nil, nil)
	var inc incident.Incident
	if err := json.Unmarshal(r.body, &inc); r.status != 200 || err != nil {
		t.Fatalf("GET incident: %d %s", r.status, r.body)
	}
	if inc.ID != id || len(inc.Evidence) == 0 || !slices.ContainsFunc(inc.Hypotheses, func(h incident.Hypothesis) bool { return h.Target.Kind == incident.TargetRank && h.Target.Rank == 2 }) {
		t.Fatalf("incident %s: %s; hypotheses %+v", inc.ID, inc.Headline, inc.Hypotheses)
	}
	t.Logf("%s (cause %v, %s)", inc.Headline, inc.Cause, inc.Confidence)
	for _, h := range inc.Hypotheses {
		if h.Stated && !(h.Target.Kind == incident.TargetRank && h.Target.Rank == 2) {
			t.Fatalf("a wrong cause stated: %+v", h)
		}
	}
}
