package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// memJobs is a catalog store in memory.
type memJobs struct {
	mu sync.Mutex
	m  map[string]*signal.Job
}

func (s *memJobs) PutJob(j *signal.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*signal.Job{}
	}
	s.m[j.ID] = j
	return nil
}

func (s *memJobs) Job(id string) (*signal.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j, ok := s.m[id]; ok {
		return j, nil
	}
	return nil, store.ErrNotFound
}

func (s *memJobs) Jobs() ([]*signal.Job, error) { return nil, nil }

// fixedReporter answers every report with rep (or err).
type fixedReporter struct {
	rep *analysis.Report
	err error
}

func (f fixedReporter) Run(context.Context, analysis.Request) (*analysis.Report, error) {
	return f.rep, f.err
}

// lockedBuf is a log sink safe for the handler's goroutine.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func reportServer(t *testing.T, rep Reporter) (*httptest.Server, *lockedBuf) {
	return apiServer(t, rep, nil)
}

func apiServer(t *testing.T, rep Reporter, rd Reader) (*httptest.Server, *lockedBuf) {
	t.Helper()
	cat := catalog.New(&memJobs{})
	job := &signal.Job{ID: "j", WorldSize: 2, Schema: stagevec.DefaultSchema()}
	if _, _, _, err := cat.Register(job, signal.Process{}, func(err error) bool { return errors.Is(err, store.ErrNotFound) }); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	a := New(Deps{Catalog: cat, Reporter: rep, Reader: rd, Metrics: newReportTestMetrics(t), Log: slog.New(slog.NewTextHandler(logs, nil))})
	mux := http.NewServeMux()
	a.Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts, logs
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// D5: a report that cannot be encoded (a non-finite number) is a logged
// 500 with a JSON error body. It was a 200 with an empty body and nothing
// logged.
func TestD5_UnencodableReportIs500(t *testing.T) {
	bad := &analysis.Report{SchemaVersion: analysis.ReportSchema, JobID: "j",
		Groups: []analysis.GroupReport{{Group: "all", Report: &stagefrontier.Report{ExposedMS: math.Inf(1)}}}}
	ts, logs := reportServer(t, fixedReporter{rep: bad})
	status, body := get(t, ts.URL+"/api/v1/jobs/j/report")
	if status != http.StatusInternalServerError {
		t.Fatalf("status %d body %q, want 500", status, body)
	}
	var e ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || !strings.Contains(e.Error, "encode") {
		t.Fatalf("body %q (%v), want a JSON error naming the encoding failure", body, err)
	}
	if !strings.Contains(logs.String(), "report") || !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("nothing logged: %q", logs.String())
	}

	// A good report is still a 200 with the whole body.
	good := &analysis.Report{SchemaVersion: analysis.ReportSchema, JobID: "j"}
	ts, _ = reportServer(t, fixedReporter{rep: good})
	status, body = get(t, ts.URL+"/api/v1/jobs/j/report")
	var back analysis.Report
	if status != http.StatusOK || json.Unmarshal(body, &back) != nil || back.JobID != "j" {
		t.Fatalf("good report: %d %q", status, body)
	}
}

func newReportTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// failingReader stores one vector but cannot read it back.
type failingReader struct{}

func (failingReader) Stats(string) (store.JobStats, error) {
	return store.JobStats{FirstStep: 1, LastStep: 1, Vectors: 1}, nil
}

func (failingReader) StepSpan(string, int64, int64) (int64, int64, bool, error) {
	return 1, 1, true, nil
}

func (failingReader) Scan(string, int64, int64, func(*stagevec.Vector) error) error {
	return fmt.Errorf("store: key x: %w", store.ErrCorrupt)
}

// D5: an export that fails before its first byte is a logged JSON 500,
// not an aborted connection after a 200.
func TestD5_ExportFailureBeforeFirstByteIs500(t *testing.T) {
	ts, logs := apiServer(t, nil, failingReader{})
	status, body := get(t, ts.URL+"/api/v1/jobs/j/export")
	var e ErrorBody
	if status != http.StatusInternalServerError || json.Unmarshal(body, &e) != nil || !strings.Contains(e.Error, "corrupt") {
		t.Fatalf("export: %d %q", status, body)
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("nothing logged: %q", logs.String())
	}
}
