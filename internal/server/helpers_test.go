package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openStore opens a real store in dir.
func openStore(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start returns a server over st behind an httptest server; both are
// closed at cleanup (the server first, draining its queue).
func start(t testing.TB, st Store, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	if cfg.Detect.Interval == 0 {
		cfg.Detect.Interval = -1 // tests drive the evaluation with EvaluateOnce
	}
	s, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })
	return s, ts
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errBody(t testing.TB) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("status %d: error body is not JSON: %q", r.status, r.body)
	}
	return e
}

func do(t testing.TB, method, url, ctype string, body []byte) resp {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp{res.StatusCode, res.Header, b}
}

// post is a JSON POST for goroutines other than the test's (which must
// not call t.Fatal); it returns the status, or -1 on a transport error.
func post(url string, body []byte) int {
	res, err := http.Post(url, jsonType, bytes.NewReader(body))
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const jsonType, protoType = "application/json", "application/x-protobuf"

func testJob(id string, world int) *signal.Job {
	return &signal.Job{ID: id, Name: "test", WorldSize: world, Schema: stagevec.DefaultSchema(), Labels: map[string]string{"team": "ml"}}
}

// register PUTs job and fails unless the status is want.
func register(t testing.TB, base string, j *signal.Job, want int) {
	t.Helper()
	if r := do(t, "PUT", base+"/api/v1/jobs/"+j.ID, jsonType, mustJSON(t, j)); r.status != want {
		t.Fatalf("PUT job: %d %s, want %d", r.status, r.body, want)
	}
}

// vectors builds steps [from, to) for every rank. Rank 1 is late in the
// data stage, so the frontier routes data.next_wait.
func vectors(world int, from, to int64) []stagevec.Vector {
	var out []stagevec.Vector
	for step := from; step < to; step++ {
		for r := range world {
			d := []float64{1, 10, 20, 2, 3, 0.5}
			if r == 1 {
				d[0] = 30
			}
			wall := 0.0
			for _, x := range d {
				wall += x
			}
			v := stagevec.Vector{Step: step, Rank: r, Durations: d, WallMS: wall}
			if step%4 == 0 {
				v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 9, Ready: true}}
			}
			out = append(out, v)
		}
	}
	return out
}

func jsonBatch(t testing.TB, vs []stagevec.Vector) []byte {
	return mustJSON(t, map[string]any{"vectors": vs})
}

func protoBatch(t testing.TB, vs []stagevec.Vector) []byte {
	t.Helper()
	b, err := laggardv1.EncodeProtoBatch(vs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// memStore is an in-memory Store. If gate is set, AppendMany signals
// entered and then waits for gate, so tests can hold the writer mid-commit.
type memStore struct {
	mu      sync.Mutex
	jobs    map[string]*signal.Job
	vecs    map[string][]stagevec.Vector
	commits int
	gate    chan struct{}
	entered chan struct{}
	failErr error
}

func newMemStore() *memStore {
	return &memStore{jobs: map[string]*signal.Job{}, vecs: map[string][]stagevec.Vector{}}
}

func (m *memStore) notFound(id string) error { return fmt.Errorf("job %q: %w", id, store.ErrNotFound) }

func (m *memStore) PutJob(j *signal.Job) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *j
	m.jobs[j.ID] = &c
	return nil
}

func (m *memStore) Job(id string) (*signal.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	if !ok {
		return nil, m.notFound(id)
	}
	c := *j
	return &c, nil
}

func (m *memStore) Jobs() ([]*signal.Job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*signal.Job
	for _, j := range m.jobs {
		c := *j
		out = append(out, &c)
	}
	slices.SortFunc(out, func(a, b *signal.Job) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (m *memStore) AppendMany(bs []store.Batch) error {
	if m.entered != nil {
		m.entered <- struct{}{}
	}
	if m.gate != nil {
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failErr != nil {
		return m.failErr
	}
	for _, b := range bs {
		if _, ok := m.jobs[b.JobID]; !ok {
			return m.notFound(b.JobID)
		}
	}
	for _, b := range bs {
		m.vecs[b.JobID] = append(m.vecs[b.JobID], b.Vectors...)
	}
	m.commits++
	return nil
}

func (m *memStore) sorted(id string) []stagevec.Vector {
	vs := slices.Clone(m.vecs[id])
	slices.SortStableFunc(vs, func(a, b stagevec.Vector) int {
		if a.Step != b.Step {
			return int(a.Step - b.Step)
		}
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return a.Micro - b.Micro
	})
	return vs
}

func (m *memStore) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	m.mu.Lock()
	if _, ok := m.jobs[id]; !ok {
		m.mu.Unlock()
		return m.notFound(id)
	}
	vs := m.sorted(id)
	m.mu.Unlock()
	for i := range vs {
		if vs[i].Step >= from && vs[i].Step <= to {
			if err := fn(&vs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *memStore) Stats(id string) (store.JobStats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.jobs[id]; !ok {
		return store.JobStats{}, m.notFound(id)
	}
	vs := m.sorted(id)
	if len(vs) == 0 {
		return store.JobStats{FirstStep: -1, LastStep: -1}, nil
	}
	return store.JobStats{FirstStep: vs[0].Step, LastStep: vs[len(vs)-1].Step, Vectors: int64(len(vs))}, nil
}

func (m *memStore) LastSteps(id string, n int) (int64, int64, bool, error) {
	st, err := m.Stats(id)
	if err != nil || st.Vectors == 0 {
		return 0, 0, false, err
	}
	return max(st.FirstStep, st.LastStep-int64(n)+1), st.LastStep, true, nil
}

func (m *memStore) count(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.vecs[id])
}

func (m *memStore) StepSpan(id string, lo, hi int64) (first, last int64, ok bool, err error) {
	return analysis.ScanStepSpan(m, id, lo, hi)
}

func (m *memStore) LastStepsIn(id string, lo, hi int64, n int) (from, to int64, got int, err error) {
	return analysis.ScanLastStepsIn(m, id, lo, hi, n)
}
