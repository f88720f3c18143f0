package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// Incidents is what the incident routes read (issue 17 items 2 and 3):
// the incident manager (internal/control's *Incidents).
type Incidents interface {
	// List returns the incidents q selects, newest first.
	List(q IncidentQuery) ([]incident.Incident, error)
	// Get returns one incident; the error wraps store.ErrNotFound when
	// there is none with that id.
	Get(id string) (*incident.Incident, error)
	// Hosts ranks hosts and links by the incidents whose stated cause
	// names them in [fromNS, toNS) (incident.Fleet).
	Hosts(fromNS, toNS int64) ([]incident.HostRow, error)
}

// IncidentQuery selects incidents. Its fields are control.IncidentQuery's
// so one converts to the other.
// IncidentQuery selects incidents (one type with the manager's).
type IncidentQuery = incident.Query

// Incident route parameters and bounds.
const (
	defaultIncidentPage = 100
	maxIncidentPage     = 1000
	defaultHostRows     = 100
	maxHostRows         = 1000
	// defaultFleetPeriod is the fleet view's period when since is absent.
	defaultFleetPeriod = 7 * 24 * time.Hour
	// maxIncidentIDBytes bounds an id in the path (ids are far shorter).
	maxIncidentIDBytes = 256
)

// errIncidentsOff answers the incident routes of a server without the
// incident layer.
var errIncidentsOff = errors.New("the incident layer is off on this server")

// registerIncidents adds the incident and fleet routes; their scopes are
// in internal/server's routeAccess (read, like the other GETs).
func (a *API) registerIncidents(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/incidents", a.listIncidents)
	mux.HandleFunc("GET /api/v1/incidents/{id}", a.getIncident)
	mux.HandleFunc("GET /api/v1/hosts", a.fleetHosts)
}

// IncidentList is the answer of GET /api/v1/incidents.
type IncidentList struct {
	Incidents []incident.Incident `json:"incidents"`
	// Truncated: more incidents match than Limit; narrow the query or
	// page back with since.
	Truncated bool `json:"truncated,omitempty"`
	// Evidence: each incident carries its evidence (?evidence=1); else
	// every incident's evidence is null (the single view has it).
	Evidence bool `json:"evidence"`
}

// HostList is the answer of GET /api/v1/hosts: the fleet view over
// [FromNS, ToNS).
type HostList struct {
	Hosts     []incident.HostRow `json:"hosts"`
	FromNS    int64              `json:"from_ns"`
	ToNS      int64              `json:"to_ns"`
	Truncated bool               `json:"truncated,omitempty"`
}

// incidents returns the manager or answers 503.
func (a *API) incidents(w http.ResponseWriter, r *http.Request) (Incidents, bool) {
	if a.d.Incidents == nil {
		a.fail(w, r, http.StatusServiceUnavailable, errIncidentsOff)
		return nil, false
	}
	return a.d.Incidents, true
}

func (a *API) listIncidents(w http.ResponseWriter, r *http.Request) {
	m, ok := a.incidents(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	now := time.Now()
	if err := onlyParams(q, "job", "state", "since", "limit", "evidence"); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	iq := IncidentQuery{Job: q.Get("job"), Limit: defaultIncidentPage}
	if iq.Job != "" {
		if err := a.knownJob(iq.Job); err != nil {
			a.fail(w, r, statusOf(err), err)
			return
		}
	}
	switch st := incident.State(q.Get("state")); st {
	case "", incident.StateOpen, incident.StateRecovering, incident.StateResolved:
		iq.State = st
	default:
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("state", "must be open, recovering or resolved, got %q", signal.Clip(string(st))))
		return
	}
	var err error
	if iq.SinceNS, err = timeParam(q, "since", now, 0); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if iq.Limit, err = intParam(q, "limit", defaultIncidentPage, 1, maxIncidentPage); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	evidence := false
	if v := q.Get("evidence"); v != "" {
		if evidence, err = strconv.ParseBool(v); err != nil {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("evidence", "must be 1 or 0 (true or false), got %q", signal.Clip(v)))
			return
		}
	}
	limit := iq.Limit
	iq.Limit++ // one more tells whether the page is the whole answer
	incs, err := m.List(iq)
	if err != nil {
		a.fail(w, r, statusOf(err), fmt.Errorf("listing incidents: %w", err))
		return
	}
	out := IncidentList{Incidents: make([]incident.Incident, 0, min(len(incs), limit)), Evidence: evidence}
	for i := range incs {
		if i == limit {
			out.Truncated = true
			break
		}
		// A copy: the manager's incidents are shared and never changed
		// here.
		inc := incs[i]
		if evidence {
			inc.Evidence = withViews(&inc)
		} else {
			inc.Evidence = nil
		}
		out.Incidents = append(out.Incidents, inc)
	}
	a.writeEncoded(w, r, out)
}

func (a *API) getIncident(w http.ResponseWriter, r *http.Request) {
	m, ok := a.incidents(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	if id == "" || len(id) > maxIncidentIDBytes || !utf8.ValidString(id) || strings.ContainsFunc(id, isControl) {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("id", "must be 1 to %d bytes of printable UTF-8, got %q", maxIncidentIDBytes, signal.Clip(id)))
		return
	}
	inc, err := m.Get(id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("unknown incident %q: %w", signal.Clip(id), store.ErrNotFound)
		}
		a.fail(w, r, statusOf(err), err)
		return
	}
	out := *inc
	out.Evidence = withViews(&out)
	a.writeEncoded(w, r, out)
}

// fleetHosts serves the fleet view: hosts and links ranked by the
// incidents whose stated cause names them over [since, until) (issue 17
// item 3; the ranking is incident.Fleet's).
func (a *API) fleetHosts(w http.ResponseWriter, r *http.Request) {
	m, ok := a.incidents(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	if err := onlyParams(q, "since", "until", "limit"); err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	now := time.Now()
	to, err := timeParam(q, "until", now, now.UnixNano())
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	from, err := timeParam(q, "since", now, to-int64(defaultFleetPeriod))
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if to <= from {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("until", "%s is not after since=%s", fmtNS(to), fmtNS(from)))
		return
	}
	limit, err := intParam(q, "limit", defaultHostRows, 1, maxHostRows)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	rows, err := m.Hosts(from, to)
	if err != nil {
		a.fail(w, r, statusOf(err), fmt.Errorf("the fleet view: %w", err))
		return
	}
	out := HostList{Hosts: rows, FromNS: from, ToNS: to}
	if len(rows) > limit {
		out.Hosts, out.Truncated = rows[:limit], true
	}
	if out.Hosts == nil {
		out.Hosts = []incident.HostRow{}
	}
	a.writeEncoded(w, r, out)
}

// knownJob checks a job id the way the job routes do: an unknown job is
// a 404 (a typo must not read as "no incidents").
func (a *API) knownJob(id string) error {
	if len(id) > signal.MaxJobIDBytes {
		return signal.FieldErrorf("job", "is %d bytes; a job id is at most %d", len(id), signal.MaxJobIDBytes)
	}
	if a.d.Catalog == nil {
		return nil
	}
	if _, err := a.d.Catalog.Get(id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("unknown job %q: %w", signal.Clip(id), store.ErrNotFound)
		}
		return err
	}
	return nil
}

// writeEncoded encodes v before the status line: a value that cannot be
// encoded (a non-finite number is a bug) is a logged 500 with an error
// body, never a 200 with a cut body (D5).
func (a *API) writeEncoded(w http.ResponseWriter, r *http.Request, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("cannot encode the answer: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w) // a failed write means the client left
}

// onlyParams refuses parameters a route does not take: a misspelt filter
// (stat=open) must not silently answer everything.
func onlyParams(q url.Values, known ...string) error {
	for k := range q {
		found := false
		for _, n := range known {
			found = found || k == n
		}
		if !found {
			return signal.FieldErrorf(signal.Clip(k), "unknown parameter; this route takes %s", strings.Join(known, ", "))
		}
	}
	return nil
}

// intParam reads an integer parameter in [lo, hi] (def when absent).
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, signal.FieldErrorf(name, "must be an integer in [%d, %d], got %q", lo, hi, signal.Clip(v))
	}
	return n, nil
}

// minEpochNS is the smallest Unix-ns time taken as one (2001-09-09): a
// smaller positive integer is almost surely seconds or milliseconds.
const minEpochNS = 1e18

// timeParam reads a time parameter (def when absent) as Unix ns. It
// takes an RFC 3339 time (2024-05-01T12:00:00Z), a duration back from
// now (90m, 24h, 7d), or Unix nanoseconds (0: the beginning).
func timeParam(q url.Values, name string, now time.Time, def int64) (int64, error) {
	v := strings.TrimSpace(q.Get(name))
	if v == "" {
		return def, nil
	}
	bad := func(why string) error {
		return signal.FieldErrorf(name, "%s; want an RFC 3339 time (2024-05-01T12:00:00Z), a duration back from now (90m, 24h, 7d) or Unix nanoseconds, got %q", why, signal.Clip(v))
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, bad("negative")
		}
		if n != 0 && n < minEpochNS {
			return 0, bad("a Unix time in seconds or milliseconds, not nanoseconds")
		}
		return n, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		if t.Before(time.Unix(0, 0)) {
			return 0, bad("before 1970")
		}
		return t.UnixNano(), nil
	}
	d, err := parseAgo(v)
	if err != nil {
		return 0, bad("not a time")
	}
	return now.Add(-d).UnixNano(), nil
}

// maxAgo bounds a relative time (ten years).
const maxAgo = 10 * 365 * 24 * time.Hour

// parseAgo parses a positive Go duration or N days ("7d").
func parseAgo(v string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || !(n > 0 && n*24 <= maxAgo.Hours()) {
			return 0, errors.New("bad days")
		}
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			return 0, err
		}
	}
	if d <= 0 || d > maxAgo {
		return 0, errors.New("out of range")
	}
	return d, nil
}

func fmtNS(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// apiRoot is where every engine view lives.
const apiRoot = "/api/v1/"

// withViews returns a copy of inc's evidence with each View an absolute
// API path ("/api/v1/…"): an adapter's relative link is resolved against
// the API root; a missing one, or one that leaves the API (another host,
// a scheme, "../"), becomes the engine's view over the incident's windows.
func withViews(inc *incident.Incident) []incident.Evidence {
	if inc.Evidence == nil {
		return nil
	}
	out := make([]incident.Evidence, len(inc.Evidence))
	for i, e := range inc.Evidence {
		if v, ok := apiPath(e.View); ok {
			e.View = v
		} else {
			e.View = engineView(inc, e.Engine)
		}
		out[i] = e
	}
	return out
}

// apiPath resolves a view link against the API root; ok is false unless
// the result is a path under it.
func apiPath(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "", false
	}
	root := &url.URL{Path: apiRoot}
	abs := root.ResolveReference(&url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery})
	if !strings.HasPrefix(abs.Path, apiRoot) || abs.Path == apiRoot {
		return "", false
	}
	// An escaped dot segment (%2e%2e) survives resolution but a browser
	// still climbs it (the URL standard reads it as "..").
	for _, seg := range strings.Split(abs.Path, "/") {
		if seg == "." || seg == ".." {
			return "", false
		}
	}
	return abs.String(), true
}

// engineView is the engine's view of the incident's job over its windows
// (the during window; the before window as the reference where the view
// takes one).
func engineView(inc *incident.Incident, e incident.Engine) string {
	job := apiRoot + "jobs/" + url.PathEscape(inc.Job)
	q := url.Values{}
	during, before := inc.Windows.During, inc.Windows.Before
	ns := func(from, to string, s incident.Span) {
		if s.FromNS > 0 {
			q.Set(from, strconv.FormatInt(s.FromNS, 10))
		}
		if s.FromNS > 0 && s.ToNS > s.FromNS {
			q.Set(to, strconv.FormatInt(s.ToNS, 10))
		}
	}
	steps := func(from, to string, s incident.Span) {
		if s.FromStep >= 0 && s.ToStep >= s.FromStep && s.ToStep > 0 {
			q.Set(from, strconv.FormatInt(s.FromStep, 10))
			q.Set(to, strconv.FormatInt(s.ToStep, 10))
		}
	}
	var path string
	switch e {
	case incident.EngineStageFrontier:
		path = job + "/report"
		q.Set("incarnation", strconv.Itoa(inc.Incarnation))
		steps("from", "to", during)
		steps("ref_from", "ref_to", before)
	case incident.EngineGreyhound:
		path = job + "/greyhound"
		ns("from_ns", "to_ns", during)
	case incident.EngineSysom:
		path = job + "/sysom"
		ns("from_ns", "to_ns", during)
		if q.Has("to_ns") {
			ns("base_from_ns", "base_to_ns", before)
		}
	case incident.EngineKair:
		path = job + "/kair"
	default:
		path = job
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
