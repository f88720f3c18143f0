// Package api is laggard's HTTP API, one file per resource: jobs (list,
// get, register), ranks (join), vectors (stage-vector ingest), reports
// (the job report of internal/analysis) and export (the stage matrix).
// Handlers validate, then hand work to narrow dependencies — the catalog,
// the ingest queue, the analysis layer — so a sharded deployment swaps
// those for clients without touching the handlers.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// Reader is what the handlers read from storage besides the catalog:
// job stats for listings and vector scans for export. *store.Store
// implements it.
type Reader interface {
	Stats(job string) (store.JobStats, error)
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
	// StepSpan is the first and last stored step (ordinal) in [lo, hi].
	StepSpan(job string, lo, hi int64) (first, last int64, ok bool, err error)
}

// Reporter computes job reports; *analysis.Analyzer implements it.
type Reporter interface {
	Run(ctx context.Context, req analysis.Request) (*analysis.Report, error)
}

// Diagnoses returns a job's latest background diagnosis (internal/detect),
// shown in job listings so a dashboard needs no report per job.
type Diagnoses interface {
	Latest(job string) (any, bool)
}

// VectorQueue is the ingest queue (Queue); the name predates the other
// signal kinds.
type VectorQueue = Queue

// Deps are the API's collaborators.
type Deps struct {
	Catalog *catalog.Catalog
	Reader  Reader
	Vectors *VectorQueue // every signal kind's ingest queue (Queue)
	// Collectives, if set, reads the collective keyspace (GET
	// /collectives, /comms); *store.Store implements it.
	Collectives CollectiveReader
	// Gate, if set, bounds body bytes in flight and concurrent decodes
	// fairly between jobs (ingest.Gate).
	Gate      *ingest.Gate
	Reporter  Reporter
	Diagnoses Diagnoses // optional
	// Greyhound, if set, serves the Greyhound report and the validation
	// protocol (greyhound.go).
	Greyhound Greyhound
	Metrics   *Metrics
	Log       *slog.Logger
	// MaxBodyBytes bounds a request body; larger is 413.
	MaxBodyBytes int64
	// RetryAfter is the back-off advertised with 429.
	RetryAfter time.Duration
	// OnReport, if set, sees every report computed for a request.
	OnReport func(*analysis.Report)
	// OnDelete, if set, is told of every job deleted through the API.
	OnDelete func(job string)
	// Sysom, if set, serves SysOM-AI's report, flame graphs, profile
	// export and OS series (sysom.go).
	Sysom Sysom
	// Symbols, if set, is the central symbol store agents upload
	// binaries to by Build-ID (symbols.go); nil answers 501.
	Symbols SymbolStore
	// Kair, if set, serves KAIR's captures, trace uploads and report
	// (kair.go); nil answers 404.
	Kair Kair
	// MaxTraceBytes, MaxTraceEvents and TraceUploads bound KAIR trace
	// uploads (DefaultMaxTraceBytes, DefaultMaxTraceEvents,
	// DefaultTraceUploads when ≤ 0).
	MaxTraceBytes  int64
	MaxTraceEvents int
	TraceUploads   int
	// Incidents, if set, serves the incidents and the fleet view
	// (incidents.go); nil answers those routes 503 (the incident layer
	// is off).
	Incidents Incidents
}

// API serves the /api/v1 routes.
type API struct {
	d       Deps
	uploads chan struct{} // KAIR trace decode slots (kair.go)
	errLog  errorLog      // throttles the WARN lines of server-side failures
}

// New returns the API over d.
func New(d Deps) *API {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &API{d: d}
}

// Register adds the API's routes to mux (Go 1.22 method+wildcard
// patterns).
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/jobs", a.listJobs)
	mux.HandleFunc("GET /api/v1/jobs/{id}", a.getJob)
	mux.HandleFunc("PUT /api/v1/jobs/{id}", a.putJob)
	mux.HandleFunc("POST /api/v1/jobs/{id}/ranks", a.joinRank)
	mux.HandleFunc("POST /api/v1/jobs/{id}/vectors", a.ingestVectors)
	mux.HandleFunc("POST /api/v1/jobs/{id}/collectives", a.ingestCollectives)
	mux.HandleFunc("GET /api/v1/jobs/{id}/collectives", a.listCollectives)
	mux.HandleFunc("GET /api/v1/jobs/{id}/comms", a.listComms)
	mux.HandleFunc("GET /api/v1/jobs/{id}/report", a.report)
	mux.HandleFunc("GET /api/v1/jobs/{id}/export", a.export)
	mux.HandleFunc("DELETE /api/v1/jobs/{id}", a.deleteJob) // admin scope (server/auth.go)
	mux.HandleFunc("GET /api/v1/vocabulary", a.vocabulary)
	a.registerGreyhound(mux)
	a.registerSysom(mux)
	a.registerStacks(mux) // stack, OS-stat and profile ingest, symbol upload (stacks.go)
	a.registerKair(mux)   // KAIR captures, trace uploads and report (kair.go)
	// Incidents and the fleet view (incidents.go).
	a.registerIncidents(mux)
	// Unknown API paths get a JSON 404 rather than falling through to the UI.
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, http.StatusNotFound, errors.New("no API route "+r.Method+" "+r.URL.Path))
	})
}

// ErrorBody is every API error: {"error": "...", "field": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	// Conflicts lists every refused item's index in the batch as sent
	// (a 409 for re-sent records with other values; Field names the first).
	Conflicts []int `json:"conflicts,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client left
}

// fail writes an API error naming the field when the error does. Server
// faults are logged at warn; client errors only at debug.
func (a *API) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	body := ErrorBody{Error: err.Error()}
	var fe *signal.FieldError
	var ce *signal.ConflictError
	switch {
	case errors.As(err, &fe):
		body.Field = fe.Field
	case errors.As(err, &ce):
		body.Field, body.Conflicts = ce.Field, ce.Indexes
	}
	if errors.Is(err, store.ErrDiskFull) && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", retryAfterDiskFull) // D7: 507, retry once space is freed
	}
	if status >= 500 {
		// Throttled: a condition that fails every request (a full disk:
		// 507 to every post) must not write a line per request.
		// laggard_http_requests_total{code} counts every one.
		a.errLog.note(status, func(missed int) {
			a.d.Log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err,
				"same_status_since_last_log", missed)
		})
	} else {
		a.d.Log.Debug("request rejected", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var fe *signal.FieldError
	var ce *signal.ConflictError
	var tl *analysis.TooLargeError
	switch {
	case errors.As(err, &ce):
		return http.StatusConflict
	case errors.Is(err, laggardv1.ErrTooLarge), errors.As(err, &tl):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &fe):
		return http.StatusBadRequest
	case errors.Is(err, store.ErrNotFound), errors.Is(err, analysis.ErrNoData):
		return http.StatusNotFound
	case errors.Is(err, store.ErrDiskFull), errors.Is(err, store.ErrTooManyJobs), errors.Is(err, store.ErrQuota):
		return http.StatusInsufficientStorage
	case errors.Is(err, ingest.ErrFull):
		return http.StatusTooManyRequests
	case errors.Is(err, ingest.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// job returns the catalog's job or writes the error.
func (a *API) job(w http.ResponseWriter, r *http.Request) (*signal.Job, bool) {
	id := r.PathValue("id")
	j, err := a.d.Catalog.Get(id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("unknown job %q: %w", signal.Clip(id), store.ErrNotFound)
		}
		a.fail(w, r, statusOf(err), err)
		return nil, false
	}
	return j, true
}

func (a *API) vocabulary(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, stagevec.Vocabulary())
}
