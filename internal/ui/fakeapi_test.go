package ui

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

var serveAddr = flag.String("serve", "", "TestServeFixture: serve the UI and the fake API on this address (e.g. :8099) until killed")

// fakeAPI answers the /api/v1 reads the UI makes. Default reports and the
// job list are the checked-in fixtures, byte for byte; any other report
// query (a brushed window, a reference, a role group, one step of the
// rank drill-down) runs the real analysis on the scenario's simulated
// vectors, so those interactions are exercised against the engine.
type fakeAPI struct {
	w        *world
	fixtures map[string][]byte
	// computed counts reports answered by running the analysis.
	computed atomic.Int64
	// gate, when set, is waited on before each report is answered (to
	// hold the page in its loading state).
	gate chan struct{}
	// jobs, when set, replaces the job list (the empty state).
	jobs []byte
	// page, when set, pages the job list by this many jobs even without
	// ?limit (the API's default page is 500).
	page int
}

func newFakeAPI(t testing.TB) *fakeAPI {
	t.Helper()
	f := &fakeAPI{w: loadWorld(t), fixtures: map[string][]byte{}}
	paths, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f.fixtures[filepath.Base(p)] = b
	}
	if f.fixtures["jobs.json"] == nil {
		t.Fatal("testdata/jobs.json missing; run go test ./internal/ui -run TestFixtures -update")
	}
	return f
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// fail answers an error the way internal/api does: {"error","field"} with
// the status its statusOf would choose.
func fail(w http.ResponseWriter, err error) {
	body := api.ErrorBody{Error: err.Error()}
	code := http.StatusInternalServerError
	var fe *signal.FieldError
	var tl *analysis.TooLargeError
	switch {
	case errors.As(err, &tl):
		code = http.StatusRequestEntityTooLarge
	case errors.As(err, &fe):
		code, body.Field = http.StatusBadRequest, fe.Field
	case errors.Is(err, analysis.ErrNotFound), errors.Is(err, analysis.ErrNoData):
		code = http.StatusNotFound
	}
	writeJSON(w, code, body)
}

// unknownJob is the API's error for a job id it does not know.
func unknownJob(id string) error {
	return fmt.Errorf("unknown job %q: %w", signal.Clip(id), analysis.ErrNotFound)
}

func (f *fakeAPI) job(id string) (api.JobView, bool) {
	for _, v := range f.w.list {
		if v.ID == id {
			return v, true
		}
	}
	return api.JobView{}, false
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		if f.jobs != nil {
			writeRaw(w, f.jobs)
			return
		}
		q := r.URL.Query()
		if len(q) == 0 && f.page == 0 {
			writeRaw(w, f.fixtures["jobs.json"])
			return
		}
		// Paged as the API pages: by id, ?limit=N&after=ID, "next" when
		// more follow.
		limit := 500
		if f.page > 0 {
			limit = f.page
		}
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 5000 {
				fail(w, signal.FieldErrorf("limit", "must be an integer in [1, 5000], got %q", signal.Clip(v)))
				return
			}
			limit = n
		}
		out := []api.JobView{}
		next := ""
		for _, v := range f.w.list {
			if v.ID <= q.Get("after") {
				continue
			}
			if len(out) == limit {
				next = out[len(out)-1].ID
				break
			}
			out = append(out, v)
		}
		body := map[string]any{"jobs": out}
		if next != "" {
			body["next"] = next
		}
		writeJSON(w, http.StatusOK, body)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		v, ok := f.job(r.PathValue("id"))
		if !ok {
			fail(w, unknownJob(r.PathValue("id")))
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/report", func(w http.ResponseWriter, r *http.Request) {
		if f.gate != nil {
			select {
			case <-f.gate:
			case <-r.Context().Done():
				return
			}
		}
		id := r.PathValue("id")
		if _, ok := f.job(id); !ok {
			fail(w, unknownJob(id))
			return
		}
		if b, ok := f.fixtures[reportFile(id)]; ok && r.URL.RawQuery == "" {
			writeRaw(w, b)
			return
		}
		req, err := analysis.ParseRequest(id, r.URL.Query())
		if err != nil {
			fail(w, err)
			return
		}
		rep, err := f.w.analyzer.Run(r.Context(), req)
		if err != nil {
			fail(w, err)
			return
		}
		f.computed.Add(1)
		writeJSON(w, http.StatusOK, rep)
	})
	// Greyhound reports are fixtures only (greyhound_fixtures_test.go); a
	// job without one has no collective telemetry (404), and a fixture may
	// belong to a job with no stage vectors at all (a pure-NCCL job).
	mux.HandleFunc("GET /api/v1/jobs/{id}/greyhound", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if b, ok := f.fixtures[ghFile(id)]; ok {
			writeRaw(w, b)
			return
		}
		if _, ok := f.job(id); !ok {
			fail(w, unknownJob(id))
			return
		}
		fail(w, fmt.Errorf("job %q has no collective calls: %w", signal.Clip(id), analysis.ErrNoData))
	})
	mux.HandleFunc("GET /api/v1/vocabulary", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, stagevec.Vocabulary())
	})
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: "no API route " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// mux mounts the UI at / and the fake API, as the server does.
func (f *fakeAPI) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/api/", f.handler())
	mux.Handle("/", Handler())
	return mux
}

// The fake API answers default reports from the fixtures and computes
// the rest, with the API's error shape.
func TestFakeAPI(t *testing.T) {
	f := newFakeAPI(t)
	h := f.handler()
	get := func(path string) (int, map[string]any) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v: %s", path, err, rec.Body.String())
		}
		return rec.Code, body
	}
	code, body := get("/api/v1/jobs/data-straggler-8/report")
	if code != 200 || f.computed.Load() != 0 || body["schema_version"] != analysis.ReportSchema {
		t.Fatalf("default report: %d computed=%d %v", code, f.computed.Load(), body["schema_version"])
	}
	code, body = get("/api/v1/jobs/data-straggler-8/report?from=150&to=199&no_reference")
	win, _ := body["window"].(map[string]any)
	if code != 200 || f.computed.Load() != 1 || win["from"] != 150.0 || win["to"] != 199.0 {
		t.Fatalf("explicit window: %d computed=%d window %v", code, f.computed.Load(), win)
	}
	for path, want := range map[string][2]any{
		"/api/v1/jobs/data-straggler-8/report?last=abc":   {400.0, "last"},
		"/api/v1/jobs/role-groups/report?group=pp9":       {400.0, "group"},
		"/api/v1/jobs/data-straggler-8/report?from=99999": {404.0, nil},
		"/api/v1/jobs/nope/report":                        {404.0, nil},
		"/api/v1/nothing":                                 {404.0, nil},
	} {
		code, body := get(path)
		if float64(code) != want[0] || body["field"] != want[1] || body["error"] == "" {
			t.Errorf("%s: %d %v, want %v", path, code, body, want)
		}
	}
}

// TestServeFixture is a dev helper, not a test: it serves the UI and the
// fake API for manual work.
//
//	go test ./internal/ui -run TestServeFixture -serve=:8099
func TestServeFixture(t *testing.T) {
	if *serveAddr == "" {
		t.Skip("dev helper; pass -serve=:8099 to run")
	}
	f := newFakeAPI(t)
	slog.Info("serving the laggard UI with the fake API", "url", "http://localhost"+*serveAddr+"/")
	t.Fatal(http.ListenAndServe(*serveAddr, f.mux()))
}
