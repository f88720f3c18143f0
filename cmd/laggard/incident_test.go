package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// incidentFixtures are the render package's fixture incidents (their JSON
// as the API serves them), by name.
func incidentFixtures(t *testing.T) map[string][]byte {
	t.Helper()
	dir := "../../internal/render/testdata/incidents"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(e.Name(), ".json")] = b
	}
	if len(out) < 6 {
		t.Fatalf("%d incident fixtures in %s", len(out), dir)
	}
	return out
}

// incidentServer serves the incident routes of the API (i17 plan: GET
// /api/v1/incidents?job&state&since&limit → {"incidents":[…]} without
// evidence, GET /api/v1/incidents/{id} → the incident) over the fixtures.
// mode "off" answers 503 as a server with the incident layer off does.
type incidentServer struct {
	*httptest.Server
	token string
	mode  string
	query url.Values // the last list query
}

func newIncidentServer(t *testing.T, token string) *incidentServer {
	t.Helper()
	byID := map[string]incident.Incident{}
	var all []incident.Incident
	for _, b := range incidentFixtures(t) {
		var inc incident.Incident
		if err := json.Unmarshal(b, &inc); err != nil {
			t.Fatal(err)
		}
		byID[inc.ID] = inc
		all = append(all, inc)
	}
	s := &incidentServer{token: token}
	fail := func(w http.ResponseWriter, code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	gate := func(w http.ResponseWriter, r *http.Request) bool {
		if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
			fail(w, http.StatusUnauthorized, "authentication required")
			return false
		}
		if s.mode == "off" {
			fail(w, http.StatusServiceUnavailable, "the incident layer is off on this server")
			return false
		}
		return true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/incidents", func(w http.ResponseWriter, r *http.Request) {
		if !gate(w, r) {
			return
		}
		q := r.URL.Query()
		s.query = q
		if j := q.Get("job"); j != "" && !slices.ContainsFunc(all, func(inc incident.Incident) bool { return inc.Job == j }) {
			fail(w, http.StatusNotFound, "unknown job "+strconv.Quote(j))
			return
		}
		var since int64
		if v := q.Get("since"); v != "" {
			var err error
			if since, err = strconv.ParseInt(v, 10, 64); err != nil {
				fail(w, http.StatusBadRequest, "since: want Unix nanoseconds")
				return
			}
		}
		out := []incident.Incident{}
		for _, inc := range all {
			if (q.Get("job") == "" || q.Get("job") == inc.Job) && (q.Get("state") == "" || q.Get("state") == string(inc.State)) && inc.Updated.WallNS >= since {
				inc.Evidence = nil
				out = append(out, inc)
			}
		}
		trunc := false
		if l, _ := strconv.Atoi(q.Get("limit")); l > 0 && len(out) > l {
			out, trunc = out[:l], true
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"incidents": out, "truncated": trunc, "evidence": false})
	})
	mux.HandleFunc("GET /api/v1/incidents/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !gate(w, r) {
			return
		}
		inc, ok := byID[r.PathValue("id")]
		if !ok {
			fail(w, http.StatusNotFound, "no incident "+r.PathValue("id"))
			return
		}
		_ = json.NewEncoder(w).Encode(inc)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestIncidentsCLITable(t *testing.T) {
	srv := newIncidentServer(t, "")
	code, out, errs := runCLI(t, "incidents", "-server", srv.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"ID", "JOB", "STATE", "SINCE (UTC)", "LOST", "CONFIDENCE",
		"inc-7d1c0a", "gpt-ft-7b", "4 min 12 s, 33.6 rank-min", "cause: rank 5 on gpu-node-02: data loading",
		"inc-5e6d22", "not stated (2 competing: rank 3, rank 6)", "resolved", "recovering"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// The filters reach the server as the API's parameters.
	before := time.Now()
	code, out, errs = runCLI(t, "incidents", "-server", srv.URL, "-state", "open", "-since", "87600h", "-limit", "5", "gpt-ft-7b")
	if code != 0 || !strings.Contains(out, "inc-7d1c0a") || strings.Contains(out, "inc-5e6d22") {
		t.Fatalf("filtered: exit %d\n%s%s", code, out, errs)
	}
	after := time.Now()
	q := srv.query
	since, _ := strconv.ParseInt(q.Get("since"), 10, 64)
	if q.Get("job") != "gpt-ft-7b" || q.Get("state") != "open" || q.Get("limit") != "5" ||
		since < before.Add(-87600*time.Hour).UnixNano() || since > after.Add(-87600*time.Hour).UnixNano() {
		t.Errorf("query %v", q)
	}
	code, out, _ = runCLI(t, "incidents", "-server", srv.URL, "-state", "resolved", "gpt-ft-7b")
	if code != 0 || strings.TrimSpace(out) != "no resolved incidents of job gpt-ft-7b" {
		t.Errorf("empty: exit %d %q", code, out)
	}
	code, _, errs = runCLI(t, "incidents", "-server", srv.URL, "-limit", "2")
	if code != 0 || !strings.Contains(errs, "more incidents match than the 2 shown") {
		t.Errorf("truncated: exit %d %q", code, errs)
	}
	before = time.Now()
	if code, _, errs = runCLI(t, "incidents", "-server", srv.URL, "-since", "7d"); code != 0 {
		t.Fatalf("-since 7d: %s", errs)
	}
	if since, _ := strconv.ParseInt(srv.query.Get("since"), 10, 64); since < before.Add(-7*24*time.Hour).UnixNano() || since > time.Now().Add(-7*24*time.Hour).UnixNano() {
		t.Errorf("-since 7d: %v", srv.query)
	}
	code, _, _ = runCLI(t, "incidents", "-server", srv.URL, "-since", "2026-03-10T14:15:00Z")
	if code != 0 || srv.query.Get("since") != strconv.FormatInt(time.Date(2026, 3, 10, 14, 15, 0, 0, time.UTC).UnixNano(), 10) {
		t.Errorf("-since as a time: exit %d, query %v", code, srv.query)
	}
}

func TestIncidentsCLIJSONIsTheAPIs(t *testing.T) {
	srv := newIncidentServer(t, "")
	code, out, errs := runCLI(t, "incidents", "--json", "-server", srv.URL, "vit-h-14")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var list struct {
		Incidents []incident.Incident `json:"incidents"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Incidents) != 1 || list.Incidents[0].ID != "inc-2b94e1" {
		t.Fatalf("--json: %v %s", err, out)
	}
	code, out, errs = runCLI(t, "incident", "-server", srv.URL, "inc-5e6d22", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var inc incident.Incident
	if err := json.Unmarshal([]byte(out), &inc); err != nil || inc.ID != "inc-5e6d22" || len(inc.Hypotheses) != 2 || len(inc.Evidence) == 0 {
		t.Fatalf("--json: %v %+v", err, inc)
	}
}

func TestIncidentCLIDiagnosis(t *testing.T) {
	srv := newIncidentServer(t, "")
	code, out, errs := runCLI(t, "incident", "-server", srv.URL, "inc-7d1c0a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"incident inc-7d1c0a · job gpt-ft-7b · 8 ranks · OPEN",
		"▶ Rank 5 on gpu-node-02 has been slow to load its data",
		"what it cost 4 min 12 s of the job, 33.6 rank-min",
		"why (high confidence:", "what to do:", "still waiting for:",
		// Engine views are links on the server the CLI asked.
		srv.URL + "/api/v1/jobs/gpt-ft-7b/report?from=1210", "web UI " + srv.URL + "/#/jobs/gpt-ft-7b",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("diagnosis lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "glossary") {
		t.Errorf("the glossary is for -v only")
	}
	code, out, _ = runCLI(t, "incident", "-v", "-server", srv.URL, "inc-7d1c0a")
	if code != 0 || !strings.Contains(out, "glossary:") || !strings.Contains(out, "evidence (7, in time order)") {
		t.Errorf("-v: exit %d\n%s", code, out)
	}
}

// Errors say what happened in words: no such incident, the layer is off,
// no server there, no token, a bad flag.
func TestIncidentCLIErrors(t *testing.T) {
	srv := newIncidentServer(t, "")
	locked := newIncidentServer(t, "s3cret")
	off := newIncidentServer(t, "")
	off.mode = "off"
	bare := httptest.NewServer(http.NotFoundHandler()) // a laggard from before incidents
	tf := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tf, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"incident", "-server", srv.URL, "inc-nope"}, 1, "laggard incident: no incident inc-nope (laggard incidents lists them)"},
		{[]string{"incident", "-server", off.URL, "inc-7d1c0a"}, 1, "laggard incident: the incident layer is off on this server (GET /api/v1/incidents/inc-7d1c0a: 503 Service Unavailable)"},
		{[]string{"incidents", "-server", off.URL}, 1, "the incident layer is off on this server"},
		{[]string{"incidents", "-server", "http://127.0.0.1:1"}, 1, "cannot reach the laggard server at http://127.0.0.1:1"},
		{[]string{"incident", "-server", "http://127.0.0.1:1", "x"}, 1, "is laggard serve running there?"},
		{[]string{"incidents", "-server", locked.URL}, 1, "give a token: -token-file or $LAGGARD_TOKEN"},
		{[]string{"incidents", "-server", "ftp://x"}, 1, "http(s) URL"},
		{[]string{"incidents", "-state", "closed"}, 1, `-state "closed": want open, recovering or resolved`},
		{[]string{"incidents", "-since", "-3h"}, 1, "-since"},
		{[]string{"incidents", "-since", "yesterday"}, 1, "want a span back from now"},
		{[]string{"incidents", "-limit", "-1"}, 1, "-limit must be in"},
		{[]string{"incidents", "-limit", "1001"}, 1, "-limit must be in [1, 1000]"},
		{[]string{"incidents", "-server", srv.URL, "no-such-job"}, 1, "no job no-such-job on this server"},
		{[]string{"incidents", "-server", bare.URL}, 1, "this server has no incidents API"},
		{[]string{"incidents", "a", "b"}, 2, "Usage: laggard incidents"},
		{[]string{"incident"}, 2, "Usage: laggard incident"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
	// The token comes as it does for every client command.
	if code, out, errs := runCLI(t, "incident", "-server", locked.URL, "-token-file", tf, "inc-c0f3a7"); code != 0 || !strings.Contains(out, "RESOLVED") {
		t.Errorf("-token-file: exit %d %s", code, errs)
	}
	t.Setenv("LAGGARD_TOKEN", "s3cret")
	t.Setenv("LAGGARD_SERVER", locked.URL)
	if code, out, errs := runCLI(t, "incidents"); code != 0 || !strings.Contains(out, "inc-c0f3a7") {
		t.Errorf("$LAGGARD_TOKEN and $LAGGARD_SERVER: exit %d %s", code, errs)
	}
}

// An incident of another schema is refused rather than misread.
func TestIncidentCLISchema(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/incidents/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"schema":"laggard.incident/v9","id":"inc-1"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"incident", "-server", srv.URL, "inc-1"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "schema laggard.incident/v9; this laggard reads laggard.incident/v1") {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	// --json passes it through as is.
	out.Reset()
	if code := run(context.Background(), []string{"incident", "--json", "-server", srv.URL, "inc-1"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "v9") {
		t.Errorf("--json: exit %d: %s", code, out.String())
	}
}
