package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/render"
)

// incidentsPath is the incidents resource of the API (docs/format/incident.md).
const incidentsPath = "/api/v1/incidents"

// runIncidents prints a server's incidents as a table, newest first.
func runIncidents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("incidents", "[flags] [JOB]", stderr)
	cf := addClientFlags(fs, "read")
	asJSON := fs.Bool("json", false, "print the API's answer (GET "+incidentsPath+") as JSON")
	state := fs.String("state", "", "only incidents in this state: open, recovering or resolved")
	since := fs.String("since", "", "only incidents active in this last span (90m, 24h, 7d) or since a time (RFC 3339 or Unix ns)")
	limit := fs.Int("limit", 0, "at most this many incidents, newest first, 1..1000 (default: the server's, 100)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return errUsage
	}
	q := url.Values{}
	if fs.NArg() == 1 {
		q.Set("job", fs.Arg(0))
	}
	if *state != "" {
		switch incident.State(*state) {
		case incident.StateOpen, incident.StateRecovering, incident.StateResolved:
			q.Set("state", *state)
		default:
			return fmt.Errorf("-state %q: want open, recovering or resolved", *state)
		}
	}
	if *since != "" {
		ns, err := sinceNS(*since, time.Now())
		if err != nil {
			return err
		}
		q.Set("since", strconv.FormatInt(ns, 10))
	}
	if *limit != 0 {
		if err := checkRange("limit", *limit, 1, 1000); err != nil {
			return err
		}
		q.Set("limit", strconv.Itoa(*limit))
	}
	c, err := cf.client(time.Minute)
	if err != nil {
		return err
	}
	path := incidentsPath
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	raw, _, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return incidentError(err, "", q.Get("job"))
	}
	if *asJSON {
		return writeIndented(stdout, raw)
	}
	var list struct {
		Incidents []incident.Incident `json:"incidents"`
		Truncated bool                `json:"truncated"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return fmt.Errorf("decoding the incidents: %w", err)
	}
	for i := range list.Incidents {
		if err := checkSchema(&list.Incidents[i]); err != nil {
			return err
		}
	}
	if len(list.Incidents) == 0 {
		_, err := fmt.Fprintln(stdout, noIncidents(q))
		return err
	}
	if err := render.Incidents(stdout, list.Incidents, render.IncidentOptions{Now: time.Now()}); err != nil {
		return err
	}
	if list.Truncated {
		fmt.Fprintf(stderr, "laggard incidents: more incidents match than the %d shown; narrow with JOB, -state or -since, or raise -limit\n", len(list.Incidents))
	}
	return nil
}

// runIncident prints one incident as a diagnosis.
func runIncident(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("incident", "[flags] ID", stderr)
	cf := addClientFlags(fs, "read")
	asJSON := fs.Bool("json", false, "print the API's answer (GET "+incidentsPath+"/ID) as JSON: every field and piece of evidence")
	verbose := fs.Bool("v", false, "also print every piece of evidence, the whole audit log and a glossary of the engines' terms")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		fs.Usage()
		return errUsage
	}
	id := fs.Arg(0)
	c, err := cf.client(time.Minute)
	if err != nil {
		return err
	}
	raw, _, err := c.do(ctx, http.MethodGet, incidentsPath+"/"+url.PathEscape(id), "", nil)
	if err != nil {
		return incidentError(err, id, "")
	}
	if *asJSON {
		return writeIndented(stdout, raw)
	}
	var inc incident.Incident
	if err := json.Unmarshal(raw, &inc); err != nil {
		return fmt.Errorf("decoding incident %s: %w", id, err)
	}
	if err := checkSchema(&inc); err != nil {
		return err
	}
	return render.Incident(stdout, &inc, render.IncidentOptions{Now: time.Now(), Verbose: *verbose, Server: c.base})
}

// incidentError says what the incident routes' refusals mean: for one
// incident (id) or a job's list (job).
func incidentError(err error, id, job string) error {
	var he *httpError
	if !errors.As(err, &he) {
		return err
	}
	switch he.status {
	case http.StatusNotFound:
		switch {
		case strings.Contains(he.msg, "404 page not found"): // no such route
			return fmt.Errorf("this server has no incidents API (it runs a laggard older than incidents): %w", err)
		case id != "":
			return fmt.Errorf("no incident %s (laggard incidents lists them)", id)
		case job != "":
			return fmt.Errorf("no job %s on this server: %w", job, err)
		}
	case http.StatusServiceUnavailable:
		// The plain words first, the request after them.
		const off = "the incident layer is off on this server"
		if m, ok := strings.CutSuffix(he.msg, ": "+off); ok {
			return fmt.Errorf("%s (%s)", off, m)
		}
		return fmt.Errorf("%s: %w", off, err)
	}
	return err
}

// checkSchema refuses an incident of another schema: this laggard would
// misread it. A missing schema is taken as the current one.
func checkSchema(inc *incident.Incident) error {
	if inc.Schema != "" && inc.Schema != incident.Schema {
		return fmt.Errorf("incident %s has schema %s; this laggard reads %s (use --json, or a matching laggard)", inc.ID, inc.Schema, incident.Schema)
	}
	return nil
}

// sinceNS reads -since: a span back from now (24h), or a time (RFC 3339
// or Unix ns).
func sinceNS(v string, now time.Time) (int64, error) {
	d, err := time.ParseDuration(v)
	if n, nerr := strconv.Atoi(strings.TrimSuffix(v, "d")); err != nil && nerr == nil && strings.HasSuffix(v, "d") {
		d, err = time.Duration(n)*24*time.Hour, nil
	}
	if err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("-since %q: want a positive span", v)
		}
		return now.Add(-d).UnixNano(), nil
	}
	ns, err := parseTimeFlag("since", v)
	if err != nil {
		return 0, fmt.Errorf("-since %q: want a span back from now (90m, 24h, 7d), an RFC 3339 time or Unix nanoseconds", v)
	}
	return ns, nil
}

// noIncidents says that a list query found nothing, naming its filters.
func noIncidents(q url.Values) string {
	s := "no incidents"
	if st := q.Get("state"); st != "" {
		s = "no " + st + " incidents"
	}
	if j := q.Get("job"); j != "" {
		s += " of job " + j
	}
	if v := q.Get("since"); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			s += " since " + time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05 UTC")
		}
	}
	return s
}
