package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
)

func ghFixture() *greyhound.Report {
	pct := 0.4
	return &greyhound.Report{Job: "run42", Detector: greyhound.DetectorBOCDV,
		Telemetry: greyhound.Telemetry{Calls: 1200, Ranks: 4},
		Iteration: greyhound.Iteration{Period: 5, ACF: 0.99, Method: greyhound.MethodACF, Rank: 0, MedianMS: 96,
			Series: []greyhound.Iter{{Iter: 0, EndNS: 1e18, MS: 96}, {Iter: 1, EndNS: 1e18 + 96e6, MS: 156}}, TruthErrorPct: &pct},
		ChangePoints: []greyhound.ChangePointView{{Index: 200, EndNS: 1e18, BeforeMS: 96, AfterMS: 156, Rel: 0.625, Kind: greyhound.KindOnset, Prob: 0.97, Verified: true},
			{Index: 90, EndNS: 1e18, BeforeMS: 96, AfterMS: 99, Kind: greyhound.KindOnset, Prob: 0.91}},
		Groups: []greyhound.Cluster{{Op: 1, Bytes: 1 << 20, Size: 2, MedianMS: 20, Comparable: true, Members: []greyhound.Member{
			{Comm: "dp0", Ranks: []int{0, 1}, ExecMS: 5, Ratio: 0.25}, {Comm: "dp1", Ranks: []int{2, 3}, ExecMS: 35, Ratio: 1.75, Degraded: true}}}},
		Controller: greyhound.ControllerView{Phase: greyhound.PhaseVerdict, SinceNS: 1e18, History: []greyhound.Transition{
			{From: greyhound.PhaseTracking, To: greyhound.PhaseProfiling, AtNS: 1e18, Reason: "verified onset at iteration 200"},
			{From: greyhound.PhaseProfiling, To: greyhound.PhaseValidation, AtNS: 1e18, Reason: "1 degraded group"},
			{From: greyhound.PhaseValidation, To: greyhound.PhaseVerdict, AtNS: 1e18, Reason: "all validation results in"}}},
		Validation: []greyhound.ValidationView{{ID: "v-1", State: greyhound.ValidationDone,
			GEMM:  []greyhound.GEMMView{{Rank: 2, MS: 6.5, Ratio: 1.35, Slow: true}, {Rank: 3, MS: 3.1, Ratio: 0.65}},
			Links: []greyhound.LinkView{{Src: 2, Dst: 3, MS: 20, Ratio: 1}}}},
		Verdict: greyhound.Verdict{Kind: greyhound.VerdictSlowRank, Ranks: []int{2}, Confidence: greyhound.ConfidenceHigh, Text: "GEMM validation: rank 2 is slow"},
	}
}

func ghServer(t *testing.T, wantToken string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs/{id}/greyhound", func(w http.ResponseWriter, r *http.Request) {
		if wantToken != "" && r.Header.Get("Authorization") != "Bearer "+wantToken {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"authentication required"}`))
			return
		}
		if r.PathValue("id") != "run42" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no collective calls in the requested window"}`))
			return
		}
		if r.URL.Query().Get("last_s") != "" && r.URL.Query().Get("last_s") != "60" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rep := ghFixture()
		if v := r.URL.Query().Get("incarnation"); v != "" {
			rep.Incarnation, rep.IncarnationNote = 0, "The job restarted 1 time(s); this report's default window covers incarnation "+v+", an earlier launch"
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/greyhound/validate", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"phase":"tracking"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestGreyhoundCLIText(t *testing.T) {
	srv := ghServer(t, "")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"greyhound", "-server", srv.URL, "-last", "1m", "run42"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"verdict:    slow_rank (high confidence): rank(s) [2]",
		"iteration:  96.0 ms median", "0.40% from the client's step times",
		"onset  iteration 200", "1 BOCD candidate(s) dropped by verification",
		"! group dp1", "controller: verdict", "tracking → profiling: verified onset",
		"validation v-1 (done)", "GEMM rank 2: 6.50 ms (×1.35)  ← slow",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestGreyhoundCLIJSONTokenAndErrors(t *testing.T) {
	srv := ghServer(t, "s3cret")
	tf := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tf, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"greyhound", "--json", "-token-file", tf, "-server", srv.URL, "-validate", "run42"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep greyhound.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Verdict.Kind != greyhound.VerdictSlowRank {
		t.Fatalf("--json: %v %+v", err, rep.Verdict)
	}
	if !strings.Contains(errb.String(), "validation requested") {
		t.Errorf("stderr %q", errb.String())
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"greyhound", "-server", srv.URL, "run42"}, 1, "-token-file"},
		{[]string{"greyhound", "-token-file", tf, "-server", srv.URL, "other"}, 1, "collective calls"},
		{[]string{"greyhound", "-server", "ftp://x", "run42"}, 1, "http(s) URL"},
		{[]string{"greyhound", "-server", srv.URL}, 2, "Usage"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// Issue 16 item 1: -incarnation chooses the launch of a restarted job and
// the text says which launch the report reads; a bad choice is refused
// before any request.
func TestGreyhoundCLIIncarnation(t *testing.T) {
	srv := ghServer(t, "")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"greyhound", "-server", srv.URL, "-incarnation", "0", "run42"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "launch:     The job restarted 1 time(s); this report's default window covers incarnation 0") {
		t.Errorf("output does not say the launch:\n%s", out.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"greyhound", "-server", srv.URL, "-incarnation", "newest-but-one", "run42"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "incarnation") {
		t.Errorf("bad -incarnation: exit %d, %q", code, errb.String())
	}
}
