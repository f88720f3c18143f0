package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/engine/greyhound"
)

// The Greyhound routes (docs/format/greyhound.md): each needs its scope,
// the validation protocol answers 204 with no plan, names the field of a
// bad result, takes a retried result as a duplicate and refuses a result
// for a closed plan.
func TestGreyhoundRoutes(t *testing.T) {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	_, ts := start(t, st, Config{Access: Access{Tokens: testTokens(t)}, Greyhound: greyhoundOff})
	if r := (call{method: "PUT", path: "/api/v1/jobs/j", ctype: jsonType, body: mustJSON(t, testJob("j", 4)), token: tokAdmin}).do(t, ts.URL); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("PUT job: %d %s", r.status, r.body)
	}
	const (
		report   = "/api/v1/jobs/j/greyhound"
		poll     = "/api/v1/jobs/j/validation?rank=2"
		results  = "/api/v1/jobs/j/validation/v-1/results"
		validate = "/api/v1/jobs/j/greyhound/validate"
	)
	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", report, "", 401}, {"GET", report, tokIngestJ, 403},
		{"GET", poll, "", 401}, {"GET", poll, tokRead, 403}, {"GET", poll, tokIngestK, 403},
		{"POST", results, "", 401}, {"POST", results, tokRead, 403},
		{"POST", validate, "", 401}, {"POST", validate, tokRead, 403}, {"POST", validate, tokIngestK, 403},
		// allowed: the handler answers (no calls yet → 404, no plan → 204)
		{"GET", report, tokRead, 404}, {"GET", poll, tokIngestJ, 204}, {"GET", poll, tokAdmin, 204},
		{"POST", validate, tokIngestJ, 404},
	} {
		if r := (call{method: tc.method, path: tc.path, ctype: jsonType, body: []byte(`{}`), token: tc.token}).do(t, ts.URL); r.status != tc.want {
			t.Errorf("%s %s with %q: %d %s, want %d", tc.method, tc.path, tc.token, r.status, r.body, tc.want)
		}
	}
	if r := (call{method: "GET", path: "/api/v1/jobs/j/validation", token: tokIngestJ}).do(t, ts.URL); r.status != 400 || r.errBody(t).Field != "rank" {
		t.Errorf("poll without rank: %d %s", r.status, r.body)
	}

	// Publish a plan the way the controller does.
	gh, err := control.NewGreyhoundLifecycle(st, greyhound.DefaultConfig(), analysis.GreyhoundLimits{})
	if err != nil {
		t.Fatal(err)
	}
	plan := greyhound.PlanValidation([]greyhound.Group{{Comm: "dp1", Ranks: []int{2, 3}}}, greyhound.DefaultConfig())
	plan.ID, plan.AtStep = "v-1", 120
	gs := &analysis.GreyhoundState{Controller: greyhound.NewController(1), PlanCreatedNS: 0}
	gs.Controller.Phase, gs.Controller.Plan = greyhound.PhaseValidation, &plan
	if err := gh.Save("j", gs, &plan); err != nil {
		t.Fatal(err)
	}
	r := (call{method: "GET", path: poll, token: tokIngestJ}).do(t, ts.URL)
	var got analysis.ValidationPlan
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.ID != "v-1" || got.AtStep != 120 || got.P2P == nil || len(got.P2P.Passes) == 0 {
		t.Fatalf("poll with a plan: %d %s", r.status, r.body)
	}
	// Issue 16 item 1: a poll may name its incarnation; one the job never
	// had is a 400 naming it, as is a report's bad choice of launch.
	if r := (call{method: "GET", path: poll + "&incarnation=0", token: tokIngestJ}).do(t, ts.URL); r.status != 200 {
		t.Errorf("poll of incarnation 0: %d %s", r.status, r.body)
	}
	for _, p := range []string{poll + "&incarnation=5", results + "?incarnation=5", report + "?incarnation=x"} {
		method, tok := "GET", tokIngestJ
		if strings.HasSuffix(p, "=x") {
			tok = tokRead
		} else if strings.Contains(p, "results") {
			method = "POST"
		}
		if r := (call{method: method, path: p, ctype: jsonType, body: []byte(`{"rank":2}`), token: tok}).do(t, ts.URL); r.status != 400 || r.errBody(t).Field != "incarnation" {
			t.Errorf("%s %s: %d %s, want 400 naming incarnation", method, p, r.status, r.body)
		}
	}
	bad := []struct{ body, field string }{
		{`{"rank":2,"p2p":[{"pass":7,"src":2,"dst":3,"bytes":16777216,"ms":[1]}]}`, "p2p[0].pass"},
		{`{"rank":9}`, "rank"},
		{`{"rank":2,"gemm_ms":[-1]}`, "gemm_ms[0]"},
		{`{"rank":"two"}`, "rank"},
	}
	for _, b := range bad {
		r := (call{method: "POST", path: results, ctype: jsonType, body: []byte(b.body), token: tokIngestJ}).do(t, ts.URL)
		if r.status != 400 || r.errBody(t).Field != b.field {
			t.Errorf("result %s: %d %s, want 400 naming %s", b.body, r.status, r.body, b.field)
		}
	}
	ok := []byte(`{"rank":2,"gemm_ms":[6.1,6.0,6.2],"p2p":[{"pass":0,"src":2,"dst":3,"bytes":16777216,"ms":[10,10,10]}]}`)
	for i, want := range []string{`"accepted":true`, `"duplicate":true`} {
		r := (call{method: "POST", path: results, ctype: jsonType, body: ok, token: tokIngestJ}).do(t, ts.URL)
		if r.status != 200 || !json.Valid(r.body) || !contains(r.body, want) {
			t.Errorf("post %d: %d %s, want 200 with %s", i, r.status, r.body, want)
		}
	}
	if r := (call{method: "GET", path: poll, token: tokIngestJ}).do(t, ts.URL); r.status != 204 {
		t.Errorf("poll after answering: %d, want 204", r.status)
	}
	if r := (call{method: "POST", path: "/api/v1/jobs/j/validation/v-9/results", ctype: jsonType, body: ok, token: tokIngestJ}).do(t, ts.URL); r.status != 404 {
		t.Errorf("result for an unknown plan: %d %s", r.status, r.body)
	}
	if r := (call{method: "POST", path: "/api/v1/jobs/j/validation/v1/results", ctype: jsonType, body: ok, token: tokIngestJ}).do(t, ts.URL); r.status != 400 || r.errBody(t).Field != "vid" {
		t.Errorf("result for a malformed plan id: %d %s", r.status, r.body)
	}
	// The controller moved on: a late result is refused, a retry of a
	// stored one is still a duplicate.
	gs.Controller.Phase, gs.Controller.Plan = greyhound.PhaseTracking, nil
	if err := gh.Save("j", gs, nil); err != nil {
		t.Fatal(err)
	}
	late := []byte(`{"rank":3,"gemm_ms":[3]}`)
	if r := (call{method: "POST", path: results, ctype: jsonType, body: late, token: tokIngestJ}).do(t, ts.URL); r.status != 409 {
		t.Errorf("late result: %d %s, want 409", r.status, r.body)
	}
	if r := (call{method: "POST", path: results, ctype: jsonType, body: ok, token: tokIngestJ}).do(t, ts.URL); r.status != 200 || !contains(r.body, `"duplicate":true`) {
		t.Errorf("retry after close: %d %s", r.status, r.body)
	}
}

// greyhoundOff: the test drives the protocol; no background rounds.
var greyhoundOff = control.GreyhoundConfig{Interval: -1}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
