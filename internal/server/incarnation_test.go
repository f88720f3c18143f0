package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// incClient is one client process of a job: it registers, joins and
// ships vectors naming the incarnation the server gave it.
type incClient struct {
	t      *testing.T
	base   string
	launch string
	proc   string
	run    string
	inc    int
}

func (c *incClient) register(world, rank int) {
	c.t.Helper()
	body := map[string]any{"world_size": world, "process": c.proc, "launch": c.launch, "started_ns": 1_700_000_000_000_000_000}
	if c.run != "" {
		body["run_id"] = c.run
	}
	if c.proc == "" {
		delete(body, "process")
		delete(body, "started_ns")
	}
	r := do(c.t, "PUT", c.base, jsonType, mustJSON(c.t, body))
	if r.status != http.StatusOK && r.status != http.StatusCreated {
		c.t.Fatalf("PUT job: %d %s", r.status, r.body)
	}
	var reg api.Registered
	if err := json.Unmarshal(r.body, &reg); err != nil {
		c.t.Fatal(err)
	}
	c.inc = reg.Incarnation
	if rank < 0 {
		return
	}
	jb := map[string]any{"rank": rank, "host": "h", "process": c.proc, "launch": c.launch}
	if c.proc == "" {
		delete(jb, "process")
	}
	r = do(c.t, "POST", c.base+"/ranks", jsonType, mustJSON(c.t, jb))
	var j struct{ Incarnation int }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &j) != nil {
		c.t.Fatalf("join: %d %s", r.status, r.body)
	}
	c.inc = j.Incarnation
}

func (c *incClient) ship(vs []stagevec.Vector) resp {
	c.t.Helper()
	return do(c.t, "POST", c.base+"/vectors", jsonType, mustJSON(c.t, map[string]any{"incarnation": c.inc, "vectors": vs}))
}

// dataVectors is steps [from, to) of ranks with data stage value data.
func dataVectors(ranks []int, from, to int64, data float64) []stagevec.Vector {
	var out []stagevec.Vector
	for s := from; s < to; s++ {
		for _, r := range ranks {
			d := []float64{data, 10, 20, 2, 3, 0.5}
			out = append(out, stagevec.Vector{Step: s, Rank: r, Durations: d, WallMS: data + 35.5})
		}
	}
	return out
}

// exported reads an export into step → rank 0's data stage value.
func exported(t *testing.T, url string) (map[int64]float64, string) {
	t.Helper()
	r := do(t, "GET", url, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("export %s: %d %s", url, r.status, r.body)
	}
	out := map[int64]float64{}
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	sc.Buffer(nil, 1<<20)
	header := ""
	for sc.Scan() {
		var v stagevec.Vector
		if header == "" {
			header = sc.Text()
			continue
		}
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		if v.Rank == 0 {
			out[v.Step] = v.Durations[0]
		}
	}
	return out, header
}

func report(t *testing.T, url string) analysis.Report {
	t.Helper()
	r := do(t, "GET", url, "", nil)
	var rep analysis.Report
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rep) != nil {
		t.Fatalf("report %s: %d %s", url, r.status, r.body)
	}
	return rep
}

// Issue 16 item 1: a restarted job re-sending steps 0–29 never overwrites
// the first launch's vectors; the report reads the newest launch, says so,
// and reads the others on request; a resubmission is a new incarnation,
// not a 409; a resume at step 40 is marked; all of it survives a server
// restart.
func TestIncarnationsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	srv, ts := start(t, st, Config{})
	base := ts.URL + "/api/v1/jobs/inc"

	// First launch: two processes; rank 1 is killed 4 steps before rank 0.
	a0 := &incClient{t: t, base: base, proc: "h/10/1"}
	a1 := &incClient{t: t, base: base, proc: "h/11/1"}
	a0.register(2, 0)
	a1.register(2, 1)
	if a0.inc != 0 || a1.inc != 0 {
		t.Fatalf("first launch in incarnations %d, %d", a0.inc, a1.inc)
	}
	first := append(dataVectors([]int{0}, 0, 30, 1), dataVectors([]int{1}, 0, 26, 1)...)
	if r := a0.ship(first); r.status != http.StatusOK {
		t.Fatalf("ship: %d %s", r.status, r.body)
	}
	if r := a0.ship(first); r.status != http.StatusOK {
		t.Fatalf("an identical retry must be idempotent: %d %s", r.status, r.body)
	}

	// Restart without a launcher id: new processes re-send steps 0–29.
	b0 := &incClient{t: t, base: base, proc: "h/20/2"}
	b1 := &incClient{t: t, base: base, proc: "h/21/2"}
	b1.register(2, 1)
	b0.register(2, 0)
	if b0.inc != 1 || b1.inc != 1 {
		t.Fatalf("restart in incarnations %d, %d, want 1", b0.inc, b1.inc)
	}
	if r := b0.ship(dataVectors([]int{0, 1}, 0, 30, 50)); r.status != http.StatusOK {
		t.Fatalf("restart ship: %d %s", r.status, r.body)
	}
	// A late batch of the first launch still goes to its own incarnation.
	if r := a1.ship(dataVectors([]int{1}, 26, 27, 1)); r.status != http.StatusOK {
		t.Fatalf("late first-launch batch: %d %s", r.status, r.body)
	}

	old, header := exported(t, base+"/export?incarnation=0")
	cur, _ := exported(t, base+"/export")
	if len(old) != 30 || len(cur) != 30 || old[5] != 1 || cur[5] != 50 {
		t.Fatalf("incarnation 0 must keep its own vectors: old %v new %v", old, cur)
	}
	if strings.Contains(header, "incarnations") {
		t.Errorf("an export holds one incarnation; its header should not list them: %s", header)
	}

	rep := report(t, base+"/report")
	if rep.Incarnations == nil || rep.Incarnations.Analysed != 1 || len(rep.Incarnations.List) != 2 {
		t.Fatalf("report incarnations: %+v", rep.Incarnations)
	}
	if !strings.Contains(rep.Notes[0], "restarted once") || !strings.Contains(rep.Notes[0], "incarnation 1") {
		t.Errorf("the report must say which launch it covers: %q", rep.Notes)
	}
	un := rep.Incarnations.List[0].Unshipped
	if len(un) != 1 || un[0].Rank != 1 || un[0].LastStep != 26 || un[0].Missing != 3 {
		t.Errorf("incarnation 0 ended with rank 1 three steps short: %+v", un)
	}
	if old := report(t, base+"/report?incarnation=0"); old.Window.To != 29 || old.Incarnations.Analysed != 0 {
		t.Errorf("incarnation 0's report: window %+v, %+v", old.Window, old.Incarnations)
	}
	all := report(t, base+"/report?incarnation=all")
	if all.Incarnations.Analysed != analysis.IncAll || all.Incarnations.List[1].At == nil || *all.Incarnations.List[1].At != 30 {
		t.Fatalf("all: %+v", all.Incarnations)
	}
	if all.Timeline == nil || all.Timeline.To != 59 || len(all.Timeline.Restarts) != 1 || all.Timeline.Restarts[0].At != 30 || all.Timeline.Restarts[0].Incarnation != 1 {
		t.Errorf("all: the time axis runs over both launches (positions 0–59) with the restart marked at 30: %+v", all.Timeline)
	}

	// Bad incarnations are refused naming the field.
	bad := &incClient{t: t, base: base, inc: 7}
	if r := bad.ship(dataVectors([]int{0}, 0, 1, 1)); r.status != http.StatusBadRequest || r.errBody(t).Field != "incarnation" {
		t.Errorf("unknown incarnation: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", base+"/report?incarnation=9", "", nil); r.status != http.StatusBadRequest {
		t.Errorf("report of an unknown incarnation: %d %s", r.status, r.body)
	}

	// An older client resubmitting under a new run id: a new incarnation.
	c := &incClient{t: t, base: base, run: "resubmit-2"}
	c.register(2, -1)
	if c.inc != 2 {
		t.Fatalf("resubmission: incarnation %d, want 2", c.inc)
	}
	// It resumes from a checkpoint at step 40.
	if r := c.ship(dataVectors([]int{0, 1}, 40, 60, 5)); r.status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	rep = report(t, base+"/report")
	if rep.Window.From < 40 || rep.Incarnations.Analysed != 2 || rep.Incarnations.List[2].Reason != "run_id" || rep.Incarnations.List[2].FirstStep != 40 {
		t.Fatalf("resumed launch: window %+v incarnations %+v", rep.Window, rep.Incarnations)
	}

	// The job list shows the newest launch's steps.
	var jv api.JobView
	if r := do(t, "GET", base, "", nil); r.status != http.StatusOK || json.Unmarshal(r.body, &jv) != nil {
		t.Fatalf("job: %d %s", r.status, r.body)
	}
	if jv.Incarnation != 2 || jv.FirstStep != 40 || jv.LastStep != 59 || len(jv.Incarnations) != 3 || jv.Incarnations[0].Procs != nil {
		t.Errorf("job view: inc %d steps %d–%d, %d incarnations", jv.Incarnation, jv.FirstStep, jv.LastStep, len(jv.Incarnations))
	}
	if v := metric(t, ts.URL, `laggard_jobs_incarnations_opened_total{reason="restart"}`); v != "1" {
		t.Errorf("restart counter: %s", v)
	}

	// A server restart keeps all of it.
	ts.Close()
	srv.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, ts = start(t, openStore(t, dir), Config{})
	base = ts.URL + "/api/v1/jobs/inc"
	if old, _ := exported(t, base+"/export?incarnation=0"); len(old) != 30 || old[5] != 1 {
		t.Fatalf("after a server restart: %v", old)
	}
	// A process of the previous launch re-registering still lands in it.
	late := &incClient{t: t, base: base, proc: "h/20/2"}
	late.register(2, 0)
	if late.inc != 1 {
		t.Errorf("a second-launch process after the server restart: incarnation %d", late.inc)
	}
}
