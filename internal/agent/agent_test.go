package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/nccl"
	"github.com/laggard-dev/laggard/internal/agent/nccl/ringtest"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

const t0 = int64(1_700_000_000_000_000_000)

func rec(seq int64) nccl.Record {
	return nccl.Record{Op: 1, Dtype: 7, CommID: 0xc0, CommRank: 1, NRanks: 2, Seq: seq, Count: 4, Bytes: 16, Peer: -1, Root: -1,
		EnterNS: t0 + seq*1000, ReturnNS: t0 + seq*1000 + 10}
}

// fakeServer records the batches POSTed per job and answers with the
// statuses queued in fail (then 200).
type fakeServer struct {
	mu      sync.Mutex
	batches []collective.Batch
	queries []string
	auth    []string
	fail    []int
	retry   string
	plan    string // JSON served for the validation poll, "" → 204
	results []Result
	// maxCalls > 0: a batch with more calls is answered 413
	maxCalls int
	// rejectMixed > 0: that many batches carrying comms and calls
	// together are answered with this status
	rejectMixed, mixedStatus int
	// hang, when set, holds every collectives POST until closed
	hang chan struct{}
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/collectives"):
		if f.hang != nil {
			f.mu.Unlock()
			select {
			case <-f.hang:
			case <-r.Context().Done():
			}
			f.mu.Lock()
			http.Error(w, "hung", 503)
			return
		}
		if len(f.fail) > 0 {
			code := f.fail[0]
			f.fail = f.fail[1:]
			if f.retry != "" {
				w.Header().Set("Retry-After", f.retry)
			}
			http.Error(w, "no", code)
			return
		}
		body, _ := io.ReadAll(r.Body)
		pb, err := laggardv1.UnmarshalProtoCollectives(body, 0)
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad body", 400)
			return
		}
		b := *pb
		if f.maxCalls > 0 && len(b.Calls) > f.maxCalls {
			http.Error(w, "too large", 413)
			return
		}
		if f.rejectMixed > 0 && len(b.Comms) > 0 && len(b.Calls) > 0 {
			f.rejectMixed--
			http.Error(w, "refused", f.mixedStatus)
			return
		}
		if err := b.Validate(0); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.batches = append(f.batches, b)
		f.queries = append(f.queries, r.URL.Path+"?"+r.URL.RawQuery)
		io.WriteString(w, `{"accepted_calls":1}`)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/validation"):
		if f.plan == "" || r.URL.Query().Get("rank") != "3" {
			w.WriteHeader(204)
			return
		}
		io.WriteString(w, f.plan)
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/validation/"):
		var res Result
		json.NewDecoder(r.Body).Decode(&res)
		f.results = append(f.results, res)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeServer) calls() (n int, dropped int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.batches {
		n += len(b.Calls)
		dropped += b.Dropped
	}
	return n, dropped
}

func newRing(t *testing.T, dir string) *ringtest.Writer {
	t.Helper()
	w, err := ringtest.Create(dir, nccl.Header{Capacity: 1024, PID: uint32(os.Getpid()), Rank: 3, World: 4, Job: "run42", Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestAgentShipsBatches(t *testing.T) {
	dir := t.TempDir()
	w := newRing(t, dir)
	w.Append(nccl.Record{Op: nccl.OpCommInit, CommID: 0xc0, CommRank: 1, NRanks: 2, Seq: -1})
	for i := range int64(12) {
		w.Append(rec(i))
	}
	fs := &fakeServer{}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	a, err := New(Config{Server: srv.URL + "/", Token: "tok", ShmDir: dir, MaxBatch: 5, ValidationInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	a.Step(context.Background())
	if len(fs.batches) != 3 || len(fs.batches[0].Calls) != 5 || len(fs.batches[2].Calls) != 2 || len(fs.batches[0].Comms) != 1 || len(fs.batches[1].Comms) != 0 {
		t.Fatalf("batches %+v", fs.batches)
	}
	if fs.queries[0] != "/api/v1/jobs/run42/collectives?world=4" || fs.auth[0] != "Bearer tok" {
		t.Fatalf("request %q auth %q", fs.queries[0], fs.auth[0])
	}
	if c := fs.batches[0].Calls[0]; c.Rank != 3 || c.Comm != "00000000000000c0" || c.Op != collective.AllReduce {
		t.Fatalf("call %+v", c)
	}
}

func TestShipperBackoffRetryAfterAndBound(t *testing.T) {
	fs := &fakeServer{fail: []int{503, 429}, retry: "1"}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	now := time.Unix(1000, 0)
	s := &Shipper{Server: srv.URL, MaxQueue: 10, now: func() time.Time { return now }}
	calls := make([]collective.Call, 8)
	for i := range calls {
		calls[i] = collective.Call{Rank: 0, Comm: "c", Seq: int64(i), Op: collective.AllReduce, Peer: -1, Root: -1, EnterNS: t0, ReturnNS: t0, Step: -1}
	}
	s.Add("j", 2, nil, calls, 3)
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("503 not reported")
	}
	if !s.notBefore.Equal(now.Add(time.Second)) {
		t.Fatalf("Retry-After not honoured: %v", s.notBefore.Sub(now))
	}
	s.Flush(context.Background()) // within the backoff: no request
	if len(fs.auth) != 1 {
		t.Fatalf("requests during backoff: %d", len(fs.auth))
	}
	// the server stays away while more arrives: the oldest go, counted
	more := make([]collective.Call, 6)
	for i := range more {
		more[i] = calls[0]
		more[i].Seq = int64(100 + i)
	}
	s.Add("j", 2, nil, more, 0)
	if s.Queued() != 10 {
		t.Fatalf("queued %d, want the bound 10", s.Queued())
	}
	now = now.Add(2 * time.Second)
	s.Flush(context.Background()) // 429
	now = now.Add(2 * time.Second)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, dropped := fs.calls()
	if n != 10 || dropped != 3+4 || fs.batches[0].Calls[0].Seq != 4 {
		t.Fatalf("shipped %d dropped %d first seq %d", n, dropped, fs.batches[0].Calls[0].Seq)
	}
	if s.Queued() != 0 {
		t.Fatal("queue not empty")
	}
	for f := 1; f < 12; f++ {
		if d := backoff(f); d < 250*time.Millisecond || d > 90*time.Second {
			t.Fatalf("backoff(%d) = %v", f, d)
		}
	}
	if retryAfter("7") != 7*time.Second || retryAfter("x") != 0 || retryAfter("99999") != 5*time.Minute {
		t.Fatal("retryAfter")
	}
}

func TestShipperRejectedBatchIsCounted(t *testing.T) {
	fs := &fakeServer{fail: []int{400}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	s := &Shipper{Server: srv.URL}
	c := collective.Call{Comm: "c", Op: collective.AllReduce, Peer: -1, Root: -1, EnterNS: t0, ReturnNS: t0, Step: -1}
	s.Add("j", 1, nil, []collective.Call{c, c}, 0)
	s.Flush(context.Background()) // 400: dropped, not retried
	s.Add("j", 1, nil, []collective.Call{c}, 0)
	s.Flush(context.Background())
	if n, d := fs.calls(); n != 1 || d != 2 {
		t.Fatalf("shipped %d dropped %d", n, d)
	}
}

type pauseChecker struct {
	w   *ringtest.Writer
	saw atomic.Bool
	ms  atomic.Uint32
}

func (p *pauseChecker) Run(ctx context.Context, job string, rank int, pl Plan) Result {
	on, ms := p.w.Pause()
	p.saw.Store(on)
	p.ms.Store(ms)
	return Result{Rank: rank, GEMMMS: []float64{3.1}}
}

func TestValidationPausesAndReports(t *testing.T) {
	dir := t.TempDir()
	w := newRing(t, dir)
	w.Append(rec(0))
	fs := &fakeServer{plan: `{"id":"v-1","at_step":10,"deadline_ms":3000,"gemm":{"ranks":[3],"n":64,"dtype":"float32","reps":3}}`}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	pc := &pauseChecker{w: w}
	a, _ := New(Config{Server: srv.URL, ShmDir: dir, Executor: pc})
	a.Step(context.Background())
	a.pollValidation(context.Background())
	a.wg.Wait()
	a.pollValidation(context.Background()) // the same plan is not run twice
	a.wg.Wait()
	if !pc.saw.Load() || pc.ms.Load() != 3000 {
		t.Fatalf("executor ran without the trap armed: %v %d", pc.saw.Load(), pc.ms.Load())
	}
	if on, _ := w.Pause(); on {
		t.Fatal("trap left armed")
	}
	if len(fs.results) != 1 || fs.results[0].Rank != 3 || fs.results[0].GEMMMS[0] != 3.1 {
		t.Fatalf("results %+v", fs.results)
	}
	// without an executor the plan is reported as not run, and training
	// is never trapped for it (R9)
	gen := w.PauseGen()
	fs.plan = strings.Replace(fs.plan, "v-1", "v-2", 1)
	a.cfg.Executor = NoExecutor{}
	a.pollValidation(context.Background())
	a.wg.Wait()
	if len(fs.results) != 2 || fs.results[1].Error != ErrNoExecutor.Error() || fs.results[1].Rank != 3 {
		t.Fatalf("results %+v", fs.results)
	}
	if w.PauseGen() != gen {
		t.Fatalf("the trap was armed with no executor: generation %d → %d", gen, w.PauseGen())
	}
}

func TestRunFinalDrainOnCancel(t *testing.T) {
	dir := t.TempDir()
	w := newRing(t, dir)
	fs := &fakeServer{}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	a, _ := New(Config{Server: srv.URL, ShmDir: dir, Interval: time.Hour, ValidationInterval: -1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(50 * time.Millisecond)
	for i := range int64(3) {
		w.Append(rec(i)) // written after the first drain, before the stop
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _ := fs.calls(); n != 3 {
		t.Fatalf("final drain shipped %d calls, want 3", n)
	}
}

func TestNewNeedsServer(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("no server accepted")
	}
}

func testCalls(n int) []collective.Call {
	out := make([]collective.Call, n)
	for i := range out {
		out[i] = collective.Call{Rank: 0, Comm: "c", Seq: int64(i), Op: collective.AllReduce, Peer: -1, Root: -1, EnterNS: t0, ReturnNS: t0, Step: -1}
	}
	return out
}

func (f *fakeServer) comms() (n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.batches {
		n += len(b.Comms)
	}
	return n
}

var testComm = collective.Comm{ID: "c", Size: 2, Rank: 0, CommRank: 0, Backend: "nccl"}

// B6: a 4xx of the batch the comm records rode in does not lose them.
func TestShipperKeepsCommsOnRejectedBatch(t *testing.T) {
	for _, code := range []int{400, 404} {
		fs := &fakeServer{rejectMixed: 1, mixedStatus: code}
		srv := httptest.NewServer(fs)
		s := &Shipper{Server: srv.URL}
		s.Add("j", 2, []collective.Comm{testComm}, testCalls(3), 0)
		s.Flush(context.Background())
		if n, d := fs.calls(); fs.comms() != 1 || n != 3 || d != 0 {
			t.Fatalf("%d: comms %d calls %d dropped %d", code, fs.comms(), n, d)
		}
		srv.Close()
	}
	// refused even alone: kept and sent with later batches, while the
	// calls go on without them; dropped after maxCommFails refusals
	fs := &fakeServer{fail: []int{404, 404}}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	s := &Shipper{Server: srv.URL}
	s.Add("j", 2, []collective.Comm{testComm}, testCalls(2), 0)
	s.Flush(context.Background()) // mixed 404 → comms alone 404 (fail) → calls alone ok
	if n, _ := fs.calls(); n != 2 || fs.comms() != 0 {
		t.Fatalf("calls %d comms %d", n, fs.comms())
	}
	s.Add("j", 2, nil, testCalls(1), 0)
	s.Flush(context.Background())
	if fs.comms() != 1 {
		t.Fatal("comm records lost after a refusal")
	}
}

// B6: a 413 halves the batch until it fits; nothing is dropped.
func TestShipperSplitsOn413(t *testing.T) {
	fs := &fakeServer{maxCalls: 3}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	s := &Shipper{Server: srv.URL, MaxBatch: 10}
	s.Add("j", 1, []collective.Comm{testComm}, testCalls(10), 0)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, d := fs.calls()
	if n != 10 || d != 0 || fs.comms() != 1 || s.Queued() != 0 {
		t.Fatalf("shipped %d dropped %d comms %d queued %d", n, d, fs.comms(), s.Queued())
	}
	for _, b := range fs.batches {
		if len(b.Calls) > 3 {
			t.Fatalf("batch of %d calls got through", len(b.Calls))
		}
	}
}

// B5: a server that never answers does not stop draining: the ring keeps
// being read while POSTs hang (each bounded by RequestTimeout).
func TestAgentDrainsWhileServerHangs(t *testing.T) {
	dir := t.TempDir()
	w, err := ringtest.Create(dir, nccl.Header{Capacity: 64, PID: uint32(os.Getpid()), Rank: 3, World: 4, Job: "run42"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fs := &fakeServer{hang: make(chan struct{})}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	defer close(fs.hang)
	a, _ := New(Config{Server: srv.URL, ShmDir: dir, Interval: 10 * time.Millisecond, ValidationInterval: -1, RequestTimeout: 2 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	seq := int64(0)
	for range 8 {
		for range 40 {
			if !w.Append(rec(seq)) {
				t.Fatalf("ring full after %d records: draining stopped while the server hangs", seq)
			}
			seq++
		}
		time.Sleep(150 * time.Millisecond)
	}
	cancel()
	<-done
	if q := a.ship.Queued(); q+int(a.last.RingDropped) < int(seq)-40 {
		t.Fatalf("queued %d of %d", q, seq)
	}
}
