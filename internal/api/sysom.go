package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/collapsed"
	"github.com/laggard-dev/laggard/internal/wire/pprof"
)

// Sysom serves SysOM-AI's read routes (contract §6); *analysis.Sysom
// implements it.
type Sysom interface {
	Report(ctx context.Context, req analysis.SysomRequest) (*analysis.SysomReport, error)
	FlameGraph(ctx context.Context, req analysis.FlameRequest) (*analysis.FlameGraph, error)
	DiffGraph(ctx context.Context, req analysis.DiffRequest) (*analysis.DiffGraph, error)
	ExportProfile(ctx context.Context, req analysis.FlameRequest) (*stack.Profile, error)
	OSStats(ctx context.Context, req analysis.OSRequest) (*analysis.OSSeries, error)
}

var _ Sysom = (*analysis.Sysom)(nil)

// registerSysom adds the SysOM-AI read routes; their scopes are in
// internal/server's routeAccess.
func (a *API) registerSysom(mux *http.ServeMux) {
	heavy := make(chan struct{}, MaxHeavyReads)
	mux.HandleFunc("GET /api/v1/jobs/{id}/sysom", a.gate(heavy, a.sysomReport))
	mux.HandleFunc("GET /api/v1/jobs/{id}/flamegraph", a.gate(heavy, a.flameGraph))
	mux.HandleFunc("GET /api/v1/jobs/{id}/flamegraph/diff", a.gate(heavy, a.flameDiff))
	mux.HandleFunc("GET /api/v1/jobs/{id}/profile", a.gate(heavy, a.exportProfile))
	mux.HandleFunc("GET /api/v1/jobs/{id}/osstats", a.osStats)
}

// MaxHeavyReads bounds the SysOM-AI reads that symbolize and aggregate a
// window (each may read millions of sample records) running at once; more
// wait briefly, then get 503 with Retry-After, so read tokens cannot pin
// every CPU the ingest path needs.
const MaxHeavyReads = 2

// heavyWait is how long a heavy read waits for a slot before the 503.
const heavyWait = 2 * time.Second

func (a *API) gate(sem chan struct{}, h http.HandlerFunc) http.HandlerFunc {
	return a.gateNamed(sem, "SysOM-AI", h)
}

// gateNamed is gate naming the analyses in its 503.
func (a *API) gateNamed(sem chan struct{}, what string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(heavyWait)
		select {
		case sem <- struct{}{}:
			t.Stop()
		case <-t.C:
			retry := max(a.d.RetryAfter, time.Second)
			w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
			a.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("%d %s analyses are running; retry later", cap(sem), what))
			return
		case <-r.Context().Done():
			t.Stop()
			return
		}
		defer func() { <-sem }()
		h(w, r)
	}
}

var errNoSysom = errors.New("SysOM-AI analysis is not enabled on this server")

func (a *API) sysom(w http.ResponseWriter, r *http.Request) (*signal.Job, bool) {
	if a.d.Sysom == nil {
		a.fail(w, r, http.StatusNotFound, errNoSysom)
		return nil, false
	}
	return a.job(w, r)
}

// sysomStatus maps the adapter's errors: a request over a cap is 413.
func sysomStatus(err error) int {
	var le *analysis.SysomLimitError
	if errors.As(err, &le) {
		return http.StatusRequestEntityTooLarge
	}
	return statusOf(err)
}

// writeBuffered encodes v before writing the status, so an encoding
// failure is a 500, not a truncated 200.
func (a *API) writeBuffered(w http.ResponseWriter, r *http.Request, job string, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("job %q: cannot encode the answer: %w", signal.Clip(job), err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}

// sysomReport serves the job's SysOM-AI report: slow ranks, CPU
// waterline flags, layered diagnoses, temporal candidates and the window.
func (a *API) sysomReport(w http.ResponseWriter, r *http.Request) {
	job, ok := a.sysom(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseSysomRequest(job.ID, r.URL.Query(), time.Now().UnixNano())
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	rep, err := a.d.Sysom.Report(r.Context(), req)
	if err != nil {
		a.fail(w, r, sysomStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, rep)
}

// flameGraph serves ?rank=R or ?group=G over from_ns/to_ns.
func (a *API) flameGraph(w http.ResponseWriter, r *http.Request) {
	job, ok := a.sysom(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseFlameRequest(job.ID, r.URL.Query(), time.Now().UnixNano(), false)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	fg, err := a.d.Sysom.FlameGraph(r.Context(), req)
	if err != nil {
		a.fail(w, r, sysomStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, fg)
}

// flameDiff serves ?a_rank=&b_rank= or ?rank=R (now against baseline).
func (a *API) flameDiff(w http.ResponseWriter, r *http.Request) {
	job, ok := a.sysom(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseDiffRequest(job.ID, r.URL.Query(), time.Now().UnixNano())
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	d, err := a.d.Sysom.DiffGraph(r.Context(), req)
	if err != nil {
		a.fail(w, r, sysomStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, d)
}

// exportProfile writes a selection's profile as gzipped pprof (the
// default; `go tool pprof` reads it) or collapsed stacks.
func (a *API) exportProfile(w http.ResponseWriter, r *http.Request) {
	job, ok := a.sysom(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseFlameRequest(job.ID, r.URL.Query(), time.Now().UnixNano(), true)
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	p, err := a.d.Sysom.ExportProfile(r.Context(), req)
	if err != nil {
		a.fail(w, r, sysomStatus(err), err)
		return
	}
	var buf bytes.Buffer
	name := fmt.Sprintf("%s-%s-%d", job.ID, selName(req.Sel), p.StartNS)
	switch req.Format {
	case "collapsed":
		err = collapsed.Export(&buf, p)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		name += ".txt"
	default:
		err = pprof.Export(p).Write(&buf) // gzipped protobuf
		w.Header().Set("Content-Type", "application/vnd.google.protobuf+gzip")
		name += ".pb.gz"
	}
	if err != nil {
		w.Header().Del("Content-Type")
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("job %q: cannot export the profile: %w", signal.Clip(job.ID), err))
		return
	}
	w.Header().Set("Content-Disposition", "attachment; filename="+strconv.Quote(safeFileName(name)))
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}

func selName(s analysis.Selection) string {
	if s.Group != "" {
		return "group-" + s.Group
	}
	return "rank" + strconv.Itoa(s.Rank)
}

// safeFileName keeps a download name to [A-Za-z0-9._-] (a job id may hold
// anything a header must not).
func safeFileName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 200 {
		b = b[len(b)-200:]
	}
	return string(b)
}

// osStats serves the job's OS series (?from_ns=&to_ns=&name=&rank=).
func (a *API) osStats(w http.ResponseWriter, r *http.Request) {
	job, ok := a.sysom(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseOSRequest(job.ID, r.URL.Query(), time.Now().UnixNano())
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, err)
		return
	}
	s, err := a.d.Sysom.OSStats(r.Context(), req)
	if err != nil {
		a.fail(w, r, sysomStatus(err), err)
		return
	}
	a.writeBuffered(w, r, job.ID, s)
}
