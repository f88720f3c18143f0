package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// fakeIncidents is the incident manager of the API tests: it answers
// from incs (newest first), filtering by job and state like the real one,
// and records the queries it was asked.
type fakeIncidents struct {
	mu      sync.Mutex
	incs    []incident.Incident
	hosts   []incident.HostRow
	err     error
	queries []IncidentQuery
	spans   [][2]int64
}

func (f *fakeIncidents) List(q IncidentQuery) ([]incident.Incident, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	if f.err != nil {
		return nil, f.err
	}
	var out []incident.Incident
	for _, inc := range f.incs {
		if (q.Job == "" || inc.Job == q.Job) && (q.State == "" || inc.State == q.State) && len(out) < q.Limit {
			out = append(out, inc)
		}
	}
	return out, nil
}

func (f *fakeIncidents) Get(id string) (*incident.Incident, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	for i := range f.incs {
		if f.incs[i].ID == id {
			return &f.incs[i], nil
		}
	}
	return nil, fmt.Errorf("control: no incident %q: %w", id, store.ErrNotFound)
}

func (f *fakeIncidents) Hosts(fromNS, toNS int64) ([]incident.HostRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spans = append(f.spans, [2]int64{fromNS, toNS})
	return f.hosts, f.err
}

func (f *fakeIncidents) lastQuery(t *testing.T) IncidentQuery {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 {
		t.Fatal("the manager was not asked")
	}
	return f.queries[len(f.queries)-1]
}

const t0 = int64(1_700_000_000_000_000_000)

// testIncident is an incident of job with two pieces of evidence: one
// whose view is relative to the API root, one without a view.
func testIncident(id, job string, st incident.State) incident.Incident {
	during := incident.Span{FromStep: 100, ToStep: 200, FromNS: t0, ToNS: t0 + 60e9}
	return incident.Incident{
		Schema: incident.Schema, ID: id, Job: job, Incarnation: 1, State: st,
		Opened: incident.Point{WallNS: t0, Step: 100}, Updated: incident.Point{WallNS: t0 + 60e9, Step: 200},
		Cause: []string{"rank:3"}, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
		Headline: "rank 3 slows job " + job + " by 40 %",
		Windows:  incident.Windows{Before: incident.Span{FromStep: 0, ToStep: 99, FromNS: t0 - 60e9, ToNS: t0}, During: during},
		Evidence: []incident.Evidence{
			{ID: "gh-1", Engine: incident.EngineGreyhound, Kind: incident.KindGreyhoundChange, Job: job, Signal: incident.SignalOnset,
				View: "jobs/" + job + "/greyhound?from_ns=1700000000000000000"},
			{ID: "so-1", Engine: incident.EngineSysom, Kind: incident.KindSysomSlowRank, Job: job, Signal: incident.SignalFinding},
		},
	}
}

// incidentServer serves the API over m (nil: the layer off) with jobs a
// and b registered.
func incidentServer(t *testing.T, m Incidents) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := st.PutJob(&signal.Job{ID: id, Name: id, WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	New(Deps{Catalog: catalog.New(st), Reader: st, Log: quiet, Incidents: m}).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { ts.Close(); st.Close() })
	return ts.URL
}

func newFake() *fakeIncidents {
	return &fakeIncidents{incs: []incident.Incident{
		testIncident("inc-3", "a", incident.StateOpen),
		testIncident("inc-2", "b", incident.StateResolved),
		testIncident("inc-1", "a", incident.StateResolved),
	}}
}

func TestIncidentRoutesOffAnswer503(t *testing.T) {
	base := incidentServer(t, nil)
	for _, p := range []string{"/api/v1/incidents", "/api/v1/incidents/inc-1", "/api/v1/hosts"} {
		a := send(t, "GET", base+p, "", nil)
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body.Error, "incident layer is off") {
			t.Errorf("GET %s without the incident layer: %d %s, want 503 saying it is off", p, a.status, a.raw)
		}
	}
}

func TestListIncidents(t *testing.T) {
	f := newFake()
	base := incidentServer(t, f)
	get := func(q string) IncidentList {
		t.Helper()
		a := send(t, "GET", base+"/api/v1/incidents"+q, "", nil)
		if a.status != 200 {
			t.Fatalf("GET incidents%s: %d %s", q, a.status, a.raw)
		}
		var l IncidentList
		if err := json.Unmarshal(a.raw, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := get("")
	if len(l.Incidents) != 3 || l.Truncated || l.Evidence {
		t.Fatalf("all incidents: %d truncated=%v evidence=%v", len(l.Incidents), l.Truncated, l.Evidence)
	}
	for _, inc := range l.Incidents {
		if inc.Evidence != nil {
			t.Errorf("%s: evidence listed without ?evidence=1", inc.ID)
		}
	}
	if q := f.lastQuery(t); q != (IncidentQuery{Limit: defaultIncidentPage + 1}) {
		t.Errorf("default query %+v", q)
	}
	before := time.Now()
	l = get("?job=a&state=resolved&since=2h&limit=5&evidence=1")
	q := f.lastQuery(t)
	if q.Job != "a" || q.State != incident.StateResolved || q.Limit != 6 {
		t.Errorf("query %+v, want job a, resolved, limit 5+1", q)
	}
	if lo, hi := before.Add(-2*time.Hour).UnixNano(), time.Now().Add(-2*time.Hour).UnixNano(); q.SinceNS < lo || q.SinceNS > hi {
		t.Errorf("since=2h gave %d, want in [%d, %d]", q.SinceNS, lo, hi)
	}
	if len(l.Incidents) != 1 || l.Incidents[0].ID != "inc-1" || !l.Evidence {
		t.Fatalf("job a resolved: %+v", l)
	}
	ev := l.Incidents[0].Evidence
	if len(ev) != 2 || ev[0].View != "/api/v1/jobs/a/greyhound?from_ns=1700000000000000000" ||
		ev[1].View != fmt.Sprintf("/api/v1/jobs/a/sysom?base_from_ns=%d&base_to_ns=%d&from_ns=%d&to_ns=%d", t0-60e9, t0, t0, t0+60e9) {
		t.Errorf("evidence views %q, %q", ev[0].View, ev[1].View)
	}
	// The manager's own incidents are not changed by the answer.
	if v := f.incs[2].Evidence[0].View; v != "jobs/a/greyhound?from_ns=1700000000000000000" {
		t.Errorf("the manager's evidence was rewritten: %q", v)
	}
	l = get("?limit=2&since=2023-11-14T00:00:00Z")
	if len(l.Incidents) != 2 || !l.Truncated {
		t.Errorf("limit 2 of 3: %d incidents, truncated=%v", len(l.Incidents), l.Truncated)
	}
	if q := f.lastQuery(t); q.SinceNS != time.Date(2023, 11, 14, 0, 0, 0, 0, time.UTC).UnixNano() {
		t.Errorf("RFC 3339 since gave %d", q.SinceNS)
	}
	if get("?since=1700000000000000000"); f.lastQuery(t).SinceNS != t0 {
		t.Errorf("Unix ns since gave %d", f.lastQuery(t).SinceNS)
	}
	if l := get("?job=b&state=open"); len(l.Incidents) != 0 || l.Incidents == nil {
		t.Errorf("no match: %+v, want an empty list (not null)", l.Incidents)
	}
}

// Every bad parameter is a 400 naming it; an unknown job is a 404.
func TestIncidentParamErrors(t *testing.T) {
	f := newFake()
	base := incidentServer(t, f)
	for _, c := range []struct {
		path   string
		status int
		field  string
	}{
		{"/api/v1/incidents?state=closed", 400, "state"},
		{"/api/v1/incidents?limit=0", 400, "limit"},
		{"/api/v1/incidents?limit=1001", 400, "limit"},
		{"/api/v1/incidents?limit=ten", 400, "limit"},
		{"/api/v1/incidents?since=yesterday", 400, "since"},
		{"/api/v1/incidents?since=1700000000", 400, "since"}, // seconds, not ns
		{"/api/v1/incidents?since=-5", 400, "since"},
		{"/api/v1/incidents?since=-5h", 400, "since"},
		{"/api/v1/incidents?since=0d", 400, "since"},
		{"/api/v1/incidents?evidence=maybe", 400, "evidence"},
		{"/api/v1/incidents?stat=open", 400, "stat"},
		{"/api/v1/incidents?job=" + strings.Repeat("x", 200), 400, "job"},
		{"/api/v1/incidents?job=nope", 404, ""},
		{"/api/v1/incidents/nope", 404, ""},
		{"/api/v1/incidents/" + strings.Repeat("i", 300), 400, "id"},
		{"/api/v1/incidents/a%01b", 400, "id"},
		{"/api/v1/hosts?since=2d&until=3d", 400, "until"},
		{"/api/v1/hosts?until=1700000000000000000&since=1700000000000000000", 400, "until"},
		{"/api/v1/hosts?until=soon", 400, "until"},
		{"/api/v1/hosts?limit=-1", 400, "limit"},
		{"/api/v1/hosts?job=a", 400, "job"},
	} {
		a := send(t, "GET", base+c.path, "", nil)
		if a.status != c.status || a.body.Field != c.field || a.body.Error == "" {
			t.Errorf("GET %s: %d field %q %s, want %d naming %q", c.path, a.status, a.body.Field, a.raw, c.status, c.field)
		}
		if c.status == 400 && c.field != "" && !strings.Contains(a.body.Error, c.field) {
			t.Errorf("GET %s: error %q does not name %q", c.path, a.body.Error, c.field)
		}
	}
	if a := send(t, "GET", base+"/api/v1/incidents/nope", "", nil); !strings.Contains(a.body.Error, `unknown incident "nope"`) {
		t.Errorf("unknown id: %s", a.raw)
	}
	if a := send(t, "GET", base+"/api/v1/incidents?job=nope", "", nil); !strings.Contains(a.body.Error, `unknown job "nope"`) {
		t.Errorf("unknown job: %s", a.raw)
	}
}

func TestGetIncident(t *testing.T) {
	f := newFake()
	f.incs[0].Evidence = append(f.incs[0].Evidence,
		incident.Evidence{ID: "x-1", Engine: incident.EngineStageFrontier, View: "https://elsewhere.example/steal"},
		incident.Evidence{ID: "x-2", Engine: incident.EngineKair, View: "/api/v1/jobs/a/kair?capture=c7"},
		incident.Evidence{ID: "x-3", Engine: "vedrfolnir", View: "../../../etc/passwd"})
	base := incidentServer(t, f)
	a := send(t, "GET", base+"/api/v1/incidents/inc-3", "", nil)
	if a.status != 200 {
		t.Fatalf("%d %s", a.status, a.raw)
	}
	var inc incident.Incident
	if err := json.Unmarshal(a.raw, &inc); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/api/v1/jobs/a/greyhound?from_ns=1700000000000000000",
		fmt.Sprintf("/api/v1/jobs/a/sysom?base_from_ns=%d&base_to_ns=%d&from_ns=%d&to_ns=%d", t0-60e9, t0, t0, t0+60e9),
		"/api/v1/jobs/a/report?from=100&incarnation=1&ref_from=0&ref_to=99&to=200",
		"/api/v1/jobs/a/kair?capture=c7",
		"/api/v1/jobs/a",
	}
	if len(inc.Evidence) != len(want) {
		t.Fatalf("%d evidence, want %d", len(inc.Evidence), len(want))
	}
	for i, w := range want {
		if inc.Evidence[i].View != w {
			t.Errorf("evidence %s view %q, want %q", inc.Evidence[i].ID, inc.Evidence[i].View, w)
		}
	}
	if inc.ID != "inc-3" || inc.Headline == "" || inc.Schema != incident.Schema {
		t.Errorf("incident %+v", inc)
	}
	f.mu.Lock()
	f.err = errors.New("disk on fire")
	f.mu.Unlock()
	if a := send(t, "GET", base+"/api/v1/incidents/inc-3", "", nil); a.status != 500 {
		t.Errorf("a failing manager: %d %s", a.status, a.raw)
	}
}

// A non-finite number is a 500 with an error body, never a cut 200.
func TestIncidentEncodeFailureIs500(t *testing.T) {
	f := newFake()
	f.incs[0].Lost.Seconds = math.NaN()
	base := incidentServer(t, f)
	for _, p := range []string{"/api/v1/incidents", "/api/v1/incidents/inc-3"} {
		if a := send(t, "GET", base+p, "", nil); a.status != 500 || a.body.Error == "" {
			t.Errorf("GET %s with NaN: %d %s", p, a.status, a.raw)
		}
	}
}

func TestFleetHosts(t *testing.T) {
	f := newFake()
	f.hosts = []incident.HostRow{
		{Target: "host:h7", Host: "h7", Incidents: 3, Jobs: []string{"a", "b"}, LostSeconds: 120},
		{Target: "host:h2", Host: "h2", Incidents: 1, Jobs: []string{"a"}, LostSeconds: 10},
	}
	base := incidentServer(t, f)
	before := time.Now()
	a := send(t, "GET", base+"/api/v1/hosts", "", nil)
	after := time.Now()
	var l HostList
	if err := json.Unmarshal(a.raw, &l); a.status != 200 || err != nil {
		t.Fatalf("%d %s %v", a.status, a.raw, err)
	}
	if len(l.Hosts) != 2 || l.Hosts[0].Host != "h7" || l.Truncated {
		t.Errorf("hosts %+v", l)
	}
	if l.ToNS < before.UnixNano() || l.ToNS > after.UnixNano() || l.ToNS-l.FromNS != int64(defaultFleetPeriod) {
		t.Errorf("default period [%d, %d), want the last 7 days", l.FromNS, l.ToNS)
	}
	if s := f.spans[len(f.spans)-1]; s != [2]int64{l.FromNS, l.ToNS} {
		t.Errorf("manager asked %v, answer says [%d, %d)", s, l.FromNS, l.ToNS)
	}
	a = send(t, "GET", base+"/api/v1/hosts?since=2023-11-14T00:00:00Z&until=2023-11-15T00:00:00Z&limit=1", "", nil)
	if err := json.Unmarshal(a.raw, &l); a.status != 200 || err != nil {
		t.Fatalf("%d %s %v", a.status, a.raw, err)
	}
	if len(l.Hosts) != 1 || !l.Truncated || l.FromNS != time.Date(2023, 11, 14, 0, 0, 0, 0, time.UTC).UnixNano() ||
		l.ToNS != time.Date(2023, 11, 15, 0, 0, 0, 0, time.UTC).UnixNano() {
		t.Errorf("explicit period, limit 1: %+v", l)
	}
	f.hosts = nil
	if a := send(t, "GET", base+"/api/v1/hosts", "", nil); !strings.Contains(string(a.raw), `"hosts":[]`) {
		t.Errorf("no rows: %s, want an empty list", a.raw)
	}
}

func TestAPIPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"jobs/j/greyhound?from_ns=5", "/api/v1/jobs/j/greyhound?from_ns=5", true},
		{"/api/v1/jobs/j/kair?capture=c", "/api/v1/jobs/j/kair?capture=c", true},
		{"jobs/a%2Fb/report", "/api/v1/jobs/a%2Fb/report", true},
		{"", "", false},
		{"https://evil.example/x", "", false},
		{"//evil.example/x", "", false},
		{"javascript:alert(1)", "", false},
		{"../../x", "", false},
		{"/ui/steal", "", false},
		{"/api/v1/", "", false},
		{"jobs/j/%zz", "", false},
	} {
		got, ok := apiPath(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("apiPath(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// An open incident has no end yet: the views open from its start.
func TestEngineViewOpenIncident(t *testing.T) {
	inc := testIncident("i", "team/a", incident.StateOpen)
	inc.Windows.During.ToNS, inc.Windows.During.ToStep = 0, -1
	for e, want := range map[incident.Engine]string{
		incident.EngineGreyhound:     "/api/v1/jobs/team%2Fa/greyhound?from_ns=1700000000000000000",
		incident.EngineSysom:         "/api/v1/jobs/team%2Fa/sysom?from_ns=1700000000000000000",
		incident.EngineStageFrontier: "/api/v1/jobs/team%2Fa/report?incarnation=1&ref_from=0&ref_to=99",
		incident.EngineKair:          "/api/v1/jobs/team%2Fa/kair",
	} {
		if got := engineView(&inc, e); got != want {
			t.Errorf("%s: %q, want %q", e, got, want)
		}
		if _, err := url.Parse(want); err != nil {
			t.Fatal(err)
		}
	}
}

// A view link is outside input (an uploaded or stored incident): whatever
// it holds, the answer's link is a path under the API root or the
// engine's view, never another site.
func FuzzAPIPath(f *testing.F) {
	for _, s := range []string{"jobs/j/greyhound?from_ns=5", "/api/v1/jobs/j", "//evil/x", "javascript:alert(1)", "../x", "/api/v1/../../x", "\\\\evil", "jobs/%2e%2e/%2e%2e/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, ok := apiPath(v)
		if !ok {
			if got != "" {
				t.Fatalf("%q: refused but %q", v, got)
			}
			return
		}
		u, err := url.Parse(got)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(u.Path, apiRoot) || strings.HasPrefix(got, "//") {
			t.Fatalf("%q became %q", v, got)
		}
		for _, seg := range strings.Split(u.Path, "/") {
			if seg == ".." || seg == "." {
				t.Fatalf("%q became %q, with a dot segment", v, got)
			}
		}
	})
}

// Time parameters are outside input: an error names the parameter, a
// value is a non-negative Unix-ns time.
func FuzzTimeParam(f *testing.F) {
	for _, s := range []string{"24h", "7d", "0", "2024-05-01T12:00:00Z", "1700000000", "-1h", "1e400d", "9223372036854775807", ".5d"} {
		f.Add(s)
	}
	now := time.Unix(0, t0)
	f.Fuzz(func(t *testing.T, v string) {
		ns, err := timeParam(url.Values{"since": {v}}, "since", now, 0)
		if err != nil {
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != "since" {
				t.Fatalf("%q: %v does not name since", v, err)
			}
			return
		}
		if ns < 0 {
			t.Fatalf("%q: %d", v, ns)
		}
	})
}
