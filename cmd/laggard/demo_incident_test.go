package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/demo"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/sim"
)

// demoFixture is a first act whose server stated the open fixture's
// incident (a data stall on rank 5 of job gpt-ft-7b) for a data fault
// injected on rank, with a real StageFrontier report behind it.
func demoFixture(t *testing.T, rank int) *demo.Result {
	t.Helper()
	var inc incident.Incident
	if err := json.Unmarshal(incidentFixtures(t)["open"], &inc); err != nil {
		t.Fatal(err)
	}
	d := sim.DDP{Ranks: 8, Steps: 60, Seed: 1, Extra: sim.After(30, 5, sim.Data, 120)}
	rep, err := analysis.New(analysis.MemSourceOf(d.Job("gpt-ft-7b"), d.Vectors()), analysis.Limits{}).Run(context.Background(), analysis.Request{Job: "gpt-ft-7b"})
	if err != nil {
		t.Fatal(err)
	}
	return &demo.Result{Report: rep, TrainSeconds: 42, GreyhoundErr: "no collective calls", KairErr: "no capture was triggered",
		Faults:    []demo.Injected{{Job: "gpt-ft-7b", Fault: "data", Rank: rank, DelayMS: 120, What: demo.FaultWhat("data", rank, 120)}},
		Incidents: []incident.Incident{inc}}
}

// Issue 17 item 7: `laggard demo` prints the incident as its diagnosis,
// each engine's own report only with -v (or when the server has no
// incident layer), then grades the incident against the injected fault.
func TestDemoPrintsTheIncidentFirst(t *testing.T) {
	res := demoFixture(t, 5)
	engineMarks := []string{"── StageFrontier (from stage vectors)", "routing set", "ground truth: 120 ms data fault on rank 5", "── Greyhound (from collective calls only)", "── KAIR"}
	var out bytes.Buffer
	if err := printDiagnosis(&out, res, "http://127.0.0.1:7070", false, "data", 5, 120); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"── incident (42 s of training)", "incident inc-7d1c0a · job gpt-ft-7b · 8 ranks · OPEN", "▶ Rank 5 on gpu-node-02", "what to do:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	for _, m := range engineMarks {
		if strings.Contains(out.String(), m) {
			t.Errorf("without -v the engines' own reports stay out, but it has %q", m)
		}
	}
	out.Reset()
	if err := printDiagnosis(&out, res, "", true, "data", 5, 120); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(engineMarks, "incident inc-7d1c0a") {
		if !strings.Contains(out.String(), m) {
			t.Errorf("-v lacks %q:\n%s", m, out.String())
		}
	}
	// The grade: one line per injected fault.
	out.Reset()
	printIncidentGrades(&out, res)
	if !strings.Contains(out.String(), "✔ right: states rank 5 as data, high confidence — injected: 120 ms data fault on rank 5") {
		t.Errorf("grade:\n%s", out.String())
	}
	res.Faults = append(res.Faults, demo.Injected{Job: "demo-sysom", Fault: demo.FaultCPUHog, Rank: 3, What: "CPU hog on rank 3's core"})
	out.Reset()
	printIncidentGrades(&out, res)
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(lines[2], "✘ missed: no incident opened — injected: CPU hog on rank 3's core") {
		t.Errorf("two faults, one line each:\n%s", out.String())
	}
}

// A wrong rank is graded wrong; no incident for the job says so.
func TestDemoGradesAWrongIncident(t *testing.T) {
	res := demoFixture(t, 2)
	var out bytes.Buffer
	printIncidentGrades(&out, res)
	if !strings.Contains(out.String(), "✘ wrong: states rank 5, high confidence — injected: 120 ms data fault on rank 2") {
		t.Errorf("grade:\n%s", out.String())
	}
	res.Incidents = nil
	out.Reset()
	if err := printIncidents(&out, res, "gpt-ft-7b", ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no incident opened for job gpt-ft-7b; -v shows each engine's own report") {
		t.Errorf("no incident:\n%s", out.String())
	}
}

// A server without the incident layer: the demo says so, shows each
// engine's report instead and grades nothing.
func TestDemoWithoutIncidentLayer(t *testing.T) {
	res := demoFixture(t, 5)
	res.Incidents, res.IncidentsOff = nil, true
	res.IncidentsErr = demo.ErrIncidentsOff.Error() + ": GET …/api/v1/incidents?job=gpt-ft-7b: 404 Not Found"
	var out bytes.Buffer
	if err := printDiagnosis(&out, res, "", true, "data", 5, 120); err != nil {
		t.Fatal(err)
	}
	printIncidentGrades(&out, res)
	for _, want := range []string{"the incident layer is off on this server", "each engine's own report follows", "routing set", "no grade: the server has no incident layer"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	var buf bytes.Buffer
	if err := writeDemoJSON(&buf, res, 5); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Incidents      []incident.Incident  `json:"incidents"`
		IncidentGrades []demo.IncidentGrade `json:"incident_grades"`
		IncidentsError string               `json:"incidents_error"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil || got.Incidents == nil || got.IncidentGrades == nil || len(got.IncidentGrades) != 0 || !strings.Contains(got.IncidentsError, "incident layer is off") {
		t.Errorf("--json without the layer: %v %s", err, buf.String()[:min(buf.Len(), 400)])
	}
}

// `laggard demo --json` carries the incidents and a machine-readable grade
// per injected fault (eval/incidents reads "incident_grades").
func TestDemoJSONGradesTheIncident(t *testing.T) {
	res := demoFixture(t, 5)
	var buf bytes.Buffer
	if err := writeDemoJSON(&buf, res, 5); err != nil {
		t.Fatal(err)
	}
	var got struct {
		JobID          string               `json:"job_id"`
		Incidents      []incident.Incident  `json:"incidents"`
		IncidentGrades []demo.IncidentGrade `json:"incident_grades"`
		Grades         []demo.Grade         `json:"grades"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.JobID != "gpt-ft-7b" || len(got.Incidents) != 1 || len(got.Grades) != 3 || len(got.IncidentGrades) != 1 {
		t.Fatalf("%+v", got)
	}
	g := got.IncidentGrades[0]
	if g.Kind != demo.IncidentRight || g.Rank != 5 || g.Fault != "data" || g.Category != incident.CategoryData || g.Confidence != incident.ConfidenceHigh || len(g.Incidents) != 1 {
		t.Errorf("grade %+v", g)
	}
}
