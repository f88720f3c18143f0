package ui

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

var serveAddr = flag.String("serve", "", "TestServeFixture: serve the UI and a fake API on this address (e.g. :8099) until killed")

// fakeAPI serves the /api/v1 read endpoints the UI uses from the simulated
// jobs. With live=false the 8-rank job's report is the checked-in
// testdata/report.json whatever the window, so browser tests see exactly the
// fixture; with live=true every window is computed.
func fakeAPI(t testing.TB, live bool) http.Handler {
	fixture, err := os.ReadFile(filepath.Join("testdata", "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	jobs := fixtureJobs()
	// edge-case exercises the degraded report paths: raw advances only, a
	// co-critical pair, no confident leader, no labels.
	edge := jobs[0]
	edge.ID, edge.Name = "edge-case", "degraded report"
	jobs = append(jobs, edge)
	var edgeRep stagefrontier.Report
	if err := json.Unmarshal(fixture, &edgeRep); err != nil {
		t.Fatal(err)
	}
	edgeRep.JobID, edgeRep.RawOnly, edgeRep.Share, edgeRep.LeaderRank = "edge-case", true, nil, -1
	edgeRep.CoCriticalStages = []string{stagevec.StageData, stagevec.StageBackward}
	edgeRep.Labels, edgeRep.Contract = nil, nil
	edgeRep.Quality.MissingRanks, edgeRep.Quality.MaxClosureShare = []int{5}, 0.31
	sims := map[string]sim{}
	for _, w := range []int{8, 1024} {
		s := demoSim(w)
		sims[s.job.ID] = s
	}
	find := func(id string) *jobEntry {
		for i := range jobs {
			if jobs[i].ID == id {
				return &jobs[i]
			}
		}
		return nil
	}
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(w http.ResponseWriter, code int, field, format string, a ...any) {
		body := map[string]string{"error": fmt.Sprintf(format, a...)}
		if field != "" {
			body["field"] = field
		}
		writeJSON(w, code, body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"jobs": jobs})
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		j := find(r.PathValue("id"))
		if j == nil {
			fail(w, http.StatusNotFound, "", "unknown job %q", r.PathValue("id"))
			return
		}
		writeJSON(w, http.StatusOK, j)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/report", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		j := find(id)
		if j == nil {
			fail(w, http.StatusNotFound, "", "unknown job %q", id)
			return
		}
		if j.Vectors == 0 {
			fail(w, http.StatusNotFound, "", "job %q has no stage vectors yet", id)
			return
		}
		from, to := j.LastStep-199, j.LastStep
		q := r.URL.Query()
		for _, f := range []string{"last", "from", "to"} {
			v := q.Get(f)
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || (f == "last" && n < 1) {
				fail(w, http.StatusBadRequest, f, "%s must be a positive integer step count/index, got %q", f, v)
				return
			}
			switch f {
			case "last":
				from = j.LastStep - n + 1
			case "from":
				from, to = n, j.LastStep
			case "to":
				to = n
			}
		}
		from, to = max(from, j.FirstStep), min(to, j.LastStep)
		if from > to {
			fail(w, http.StatusBadRequest, "from", "empty window: from %d > to %d (job has steps %d–%d)", from, to, j.FirstStep, j.LastStep)
			return
		}
		if id == edge.ID {
			writeJSON(w, http.StatusOK, &edgeRep)
			return
		}
		s, ok := sims[id]
		if !live && ok && s.job.WorldSize == 8 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(fixture)
			return
		}
		writeJSON(w, http.StatusOK, s.simReport(from, to))
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "", "no such endpoint %s %s", r.Method, r.URL.Path)
	})
	return mux
}

// testServerMux mounts the UI at / and the fake API, as the server does.
func testServerMux(t testing.TB, live bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/api/", fakeAPI(t, live))
	mux.Handle("/", Handler())
	return mux
}

// TestServeFixture is a dev helper, not a test: it serves the UI against
// live-computed fixtures for manual work.
//
//	go test ./internal/ui -run TestServeFixture -serve=:8099
func TestServeFixture(t *testing.T) {
	if *serveAddr == "" {
		t.Skip("dev helper; pass -serve=:8099 to run")
	}
	slog.Info("serving laggard UI with fake API", "url", "http://localhost"+*serveAddr+"/")
	t.Fatal(http.ListenAndServe(*serveAddr, testServerMux(t, true)))
}
