package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/store"
)

// fakeCaptureServer serves the capture routes of contract C for one job
// ("run42"). Each GET of the capture advances it along states; the KAIR
// report is the real one of the committed 4-rank fixture.
type fakeCaptureServer struct {
	mu       sync.Mutex
	t        *testing.T
	states   []store.CaptureState // the capture's state at each GET (the last repeats)
	uploaded [][]int              // uploaded ranks at each GET
	gets     int
	posted   []byte // the last POST body
	open     bool   // a capture is open: POST answers 409
	token    string // required bearer token, if set
	kairQ    []string
	report   json.RawMessage
	failed   map[string]string
}

func newFakeCaptureServer(t *testing.T) (*fakeCaptureServer, *httptest.Server) {
	t.Helper()
	f := &fakeCaptureServer{t: t, states: []store.CaptureState{"pending", "recording", "recording", "complete"},
		uploaded: [][]int{nil, {0}, {0, 1, 3}, {0, 1, 2, 3}}}
	traces, err := loadTraces(context.Background(), traceFixture(t), traceLoad{maxEvents: 1 << 20}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := kair.Run(traces, nil, kair.DefaultRunConfig())
	if err != nil {
		t.Fatal(err)
	}
	if f.report, err = json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	fail := func(w http.ResponseWriter, code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
				fail(w, http.StatusUnauthorized, "authentication required")
				return
			}
			if r.PathValue("id") != "run42" {
				fail(w, http.StatusNotFound, "job not found")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("POST /api/v1/jobs/{id}/captures", auth(func(w http.ResponseWriter, r *http.Request) {
		if f.open {
			fail(w, http.StatusConflict, "capture c000000000001 is already open for job run42")
			return
		}
		f.posted, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(f.capture("pending", nil))
	}))
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures", auth(func(w http.ResponseWriter, r *http.Request) {
		list := []store.Capture{f.capture("complete", []int{0, 1, 2, 3}), {ID: "c00000000000a", Job: "run42", Trigger: "auto", Reason: "StageFrontier straggler rank 2\n(z 7.1)",
			State: "expired", Steps: 5, Every: 1, StartStep: 100, Ranks: []int{0, 1, 2, 3}, Uploaded: []int{1}}}
		_ = json.NewEncoder(w).Encode(map[string]any{"captures": list})
	}))
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures/{cid}", auth(func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("cid") != "c0123456789ab" {
			fail(w, http.StatusNotFound, "no such capture")
			return
		}
		i := min(f.gets, len(f.states)-1)
		f.gets++
		_ = json.NewEncoder(w).Encode(f.capture(f.states[i], f.uploaded[min(i, len(f.uploaded)-1)]))
	}))
	mux.HandleFunc("DELETE /api/v1/jobs/{id}/captures/{cid}", auth(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(f.capture("cancelled", nil))
	}))
	mux.HandleFunc("GET /api/v1/jobs/{id}/kair", auth(func(w http.ResponseWriter, r *http.Request) {
		f.kairQ = append(f.kairQ, r.URL.RawQuery)
		c := f.capture("complete", []int{0, 1, 2, 3})
		_ = json.NewEncoder(w).Encode(map[string]any{"capture": c, "report": f.report})
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	old := capturePoll
	capturePoll = time.Millisecond
	t.Cleanup(func() { capturePoll = old })
	return f, srv
}

func (f *fakeCaptureServer) capture(state store.CaptureState, uploaded []int) store.Capture {
	return store.Capture{ID: "c0123456789ab", Job: "run42", Trigger: "manual", Reason: "slow since noon", CreatedNS: 1_751_371_200e9,
		DeadlineNS: 1_751_371_500e9, StartStep: 1210, Steps: 3, Every: 2, Ranks: []int{0, 1, 2, 3}, Fetched: []int{0, 1, 2, 3},
		Uploaded: uploaded, State: state, Failed: f.failed}
}

func TestCaptureWaitPrintsReport(t *testing.T) {
	f, srv := newFakeCaptureServer(t)
	code, out, errs := runCLI(t, "capture", "-server", srv.URL, "-wait", "10s", "-steps", "3", "-every", "2", "-ranks", "3,0", "-reason", "slow since noon", "run42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var body map[string]any
	if err := json.Unmarshal(f.posted, &body); err != nil {
		t.Fatalf("POST body %s: %v", f.posted, err)
	}
	if got, _ := json.Marshal(body); string(got) != `{"every":2,"ranks":[0,3],"reason":"slow since noon","steps":3}` {
		t.Errorf("POST body %s: want only the given fields, ranks sorted", got)
	}
	// Each state change is told once on stderr.
	for _, want := range []string{"capture c0123456789ab pending (manual: slow since noon)", "recording", "1 uploaded", "3 uploaded", "complete"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	// The first poll repeats "pending": not told again.
	if n := strings.Count(errs, "\n"); n != 4 {
		t.Errorf("%d progress lines, want 4 (pending, recording with 1 and 3 uploads, complete):\n%s", n, errs)
	}
	for _, want := range []string{"job run42 · capture c0123456789ab complete (manual: slow since noon) · 3 steps every 2 from step 1210 · ranks [0 1 2 3]",
		"KAIR · 4 ranks (0–3)", "Stage 1 · rhythm localization", "1. op: rank 2 sgemm_bwd"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if len(f.kairQ) != 1 || f.kairQ[0] != "capture=c0123456789ab" {
		t.Errorf("kair queries %q", f.kairQ)
	}
}

func TestCaptureJSON(t *testing.T) {
	_, srv := newFakeCaptureServer(t)
	code, out, errs := runCLI(t, "capture", "-server", srv.URL, "-wait", "10s", "--json", "run42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var ans analysis.KairAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil || ans.Capture == nil || ans.Capture.State != "complete" || ans.Report == nil || len(ans.Report.Ranks) != 4 {
		t.Fatalf("--json: %v %.300s", err, out)
	}
	// Without -wait: the new capture, as JSON or as a line with the next step.
	code, out, _ = runCLI(t, "capture", "-server", srv.URL, "--json", "run42")
	var cv store.Capture
	if code != 0 || json.Unmarshal([]byte(out), &cv) != nil || cv.ID != "c0123456789ab" || cv.State != "pending" {
		t.Errorf("no-wait --json: %d %s", code, out)
	}
	code, out, _ = runCLI(t, "capture", "-server", srv.URL, "run42")
	if code != 0 || !strings.Contains(out, "capture c0123456789ab pending") || !strings.Contains(out, "laggard capture -show c0123456789ab run42") {
		t.Errorf("no-wait text: %d %s", code, out)
	}
}

func TestCaptureListShowCancel(t *testing.T) {
	f, srv := newFakeCaptureServer(t)
	code, out, errs := runCLI(t, "capture", "-server", srv.URL, "-list", "run42")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"id", "c0123456789ab  complete", "manual", "2025-07-01 12:00:00", "3 steps every 2 from step 1210", "4/4", "expired", "1/4", "StageFrontier straggler rank 2 (z 7.1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "capture", "-server", srv.URL, "-show", "latest", "run42")
	if code != 0 || !strings.Contains(out, "KAIR · 4 ranks") {
		t.Errorf("-show latest: %d %s", code, out)
	}
	code, _, _ = runCLI(t, "capture", "-server", srv.URL, "-show", "c0123456789ab", "run42")
	if code != 0 || len(f.kairQ) != 2 || f.kairQ[0] != "" || f.kairQ[1] != "capture=c0123456789ab" {
		t.Errorf("-show queries %q (code %d)", f.kairQ, code)
	}
	// -show ID -wait: the capture is polled until done, then reported.
	f.gets = 0
	code, out, errs = runCLI(t, "capture", "-server", srv.URL, "-show", "c0123456789ab", "-wait", "10s", "run42")
	if code != 0 || f.gets != 4 || !strings.Contains(errs, "complete") || !strings.Contains(out, "KAIR · 4 ranks") {
		t.Errorf("-show -wait: %d after %d polls\n%s\n%s", code, f.gets, errs, out)
	}
	code, out, _ = runCLI(t, "capture", "-server", srv.URL, "-cancel", "c0123456789ab", "run42")
	if code != 0 || !strings.Contains(out, "capture c0123456789ab cancelled") {
		t.Errorf("-cancel: %d %s", code, out)
	}
}

func TestCaptureErrors(t *testing.T) {
	f, srv := newFakeCaptureServer(t)
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte("sekrit\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		setup func()
		args  []string
		code  int
		want  string
	}{
		{"no job", nil, []string{}, 2, "Usage: laggard capture"},
		{"two jobs", nil, []string{"a", "b"}, 2, "Usage: laggard capture"},
		{"steps 0", nil, []string{"-steps", "0", "run42"}, 2, "-steps must be in [1, 64]"},
		{"steps 65", nil, []string{"-steps", "65", "run42"}, 2, "-steps must be in [1, 64]"},
		{"every 0", nil, []string{"-every", "0", "run42"}, 2, "-every must be in"},
		{"bad rank", nil, []string{"-ranks", "0,x", "run42"}, 2, `-ranks: "x" is not a rank`},
		{"dup rank", nil, []string{"-ranks", "1,1", "run42"}, 2, "rank 1 given twice"},
		{"two modes", nil, []string{"-list", "-show", "latest", "run42"}, 2, "at most one of -list, -show and -cancel"},
		{"negative wait", nil, []string{"-wait", "-1s", "run42"}, 2, "-wait must be ≥ 0"},
		{"unknown job", nil, []string{"nope"}, 1, "job not found"},
		{"already open", func() { f.open = true }, []string{"run42"}, 1, "409 Conflict: capture c000000000001 is already open for job run42 (laggard capture -list run42 shows it"},
		{"no token", func() { f.token = "sekrit" }, []string{"run42"}, 1, "give a token"},
		{"token ok", func() { f.token = "sekrit" }, []string{"-token-file", tok, "run42"}, 0, ""},
		{"timeout", func() { f.states = []store.CaptureState{"recording"} }, []string{"-wait", "30ms", "run42"}, 1, "is still recording after 30ms (0/4 ranks uploaded); it goes on on the server: laggard capture -show c0123456789ab run42"},
		{"expired", func() {
			f.states, f.uploaded = []store.CaptureState{"expired"}, [][]int{{1}}
			f.failed = map[string]string{"2": "torch.profiler unavailable", "10": "disk full"}
		}, []string{"-wait", "1m", "run42"}, 1, "capture c0123456789ab ended expired with 1 rank(s) uploaded; KAIR compares ≥ 2 ranks; failed: rank 2: torch.profiler unavailable; rank 10: disk full"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.mu.Lock()
			f.open, f.token, f.gets, f.failed = false, "", 0, nil
			f.states, f.uploaded = []store.CaptureState{"pending", "complete"}, [][]int{nil, {0, 1, 2, 3}}
			if c.setup != nil {
				c.setup()
			}
			f.mu.Unlock()
			code, out, errs := runCLI(t, append([]string{"capture", "-server", srv.URL}, c.args...)...)
			if code != c.code || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s%s", code, c.code, c.want, errs, out)
			}
		})
	}
}

// Ctrl-C while waiting stops the wait, not the capture, and says how to
// come back to it.
func TestCaptureWaitCancelled(t *testing.T) {
	f, srv := newFakeCaptureServer(t)
	f.states = []store.CaptureState{"recording"}
	// Interrupt once the wait has begun (the first status poll arrived),
	// not after a fixed delay: on a busy machine the POST alone can take
	// longer than any fixed delay.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			f.mu.Lock()
			polled := f.gets > 0
			f.mu.Unlock()
			if polled {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	var out, errb strings.Builder
	code := run(ctx, []string{"capture", "-server", srv.URL, "-wait", "1h", "run42"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "goes on on the server: laggard capture -show c0123456789ab run42") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
}
