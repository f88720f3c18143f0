package ingest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gatedCommit records committed payloads; while gate is non-nil each
// commit waits for a token.
type gatedCommit struct {
	mu      sync.Mutex
	got     [][]string
	gate    chan struct{}
	entered chan struct{}
	fail    string // a payload whose commit fails
	once    sync.Once
}

// open lets every further commit through.
func (g *gatedCommit) open() {
	if g.gate != nil {
		g.once.Do(func() { close(g.gate) })
	}
}

func (g *gatedCommit) commit(reqs []*Request[string]) error {
	if g.entered != nil {
		g.entered <- struct{}{}
	}
	if g.gate != nil {
		<-g.gate
	}
	var ps []string
	for _, r := range reqs {
		if r.Payload == g.fail {
			return errors.New("bad payload " + r.Payload)
		}
		ps = append(ps, r.Payload)
	}
	g.mu.Lock()
	g.got = append(g.got, ps)
	g.mu.Unlock()
	return nil
}

func newTestQueue(t *testing.T, cfg Config, g *gatedCommit) (*Queue[string], *Metrics) {
	t.Helper()
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	q := New(cfg, g.commit, nil, m)
	t.Cleanup(func() {
		g.open()
		if g.entered != nil {
			go func() {
				for range g.entered {
				}
			}()
		}
		q.Close()
	})
	return q, m
}

func TestSubmitCommits(t *testing.T) {
	g := &gatedCommit{}
	q, _ := newTestQueue(t, Config{}, g)
	done, err := q.Submit("j", "a", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.got) != 1 || g.got[0][0] != "a" {
		t.Fatalf("committed %v", g.got)
	}
}

// With the writer held mid-commit, the queue sheds at its request bound
// and at its byte bound; released, every admitted request commits and a
// group folds what waited. Each request is its own job here, so the job
// share does not apply.
func TestBoundsShed(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	q, m := newTestQueue(t, Config{MaxRequests: 3, MaxBytes: 100, Writers: 1}, g)
	first, err := q.Submit("j0", "held", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	<-g.entered // the writer holds "held"
	var dones []<-chan error
	for _, p := range []string{"a", "b"} {
		d, err := q.Submit("j"+p, p, 1, 40)
		if err != nil {
			t.Fatalf("submit %s: %v", p, err)
		}
		dones = append(dones, d)
	}
	if _, err := q.Submit("jx", "too-many-bytes", 1, 40); !errors.Is(err, ErrFull) {
		t.Errorf("over the byte bound: %v", err)
	}
	if d, err := q.Submit("jc", "c", 1, 1); err != nil {
		t.Errorf("under both bounds: %v", err)
	} else {
		dones = append(dones, d)
	}
	if _, err := q.Submit("jd", "d", 1, 1); !errors.Is(err, ErrFull) {
		t.Errorf("over the request bound: %v", err)
	}
	if got := testutil.ToFloat64(m.shed.WithLabelValues(ReasonQueueFull)); got != 2 {
		t.Errorf("shed_total{reason=queue_full} %v, want 2", got)
	}
	g.gate <- struct{}{}
	<-g.entered
	g.gate <- struct{}{}
	for _, d := range append(dones, first) {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	got := g.got
	g.mu.Unlock()
	if len(got) != 2 || !slices.Equal(got[1], []string{"a", "b", "c"}) {
		t.Errorf("commits %v, want [held] then one group [a b c]", got)
	}
	if b := q.QueuedBytes(); b != 0 {
		t.Errorf("%d bytes still accounted after commit", b)
	}
}

// A job that already has requests waiting may hold at most its share of
// the queue: beyond it, ErrJobShare (which is an ErrFull); other jobs are
// still admitted.
func TestJobShare(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	q, m := newTestQueue(t, Config{MaxRequests: 100, MaxBytes: 1000, JobShare: 0.5, Writers: 1}, g)
	held, _ := q.Submit("other", "held", 1, 1)
	<-g.entered
	var dones []<-chan error
	for i := range 4 { // 4 x 120 = 480 <= 500
		d, err := q.Submit("flood", "f", 1, 120)
		if err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
		dones = append(dones, d)
	}
	_, err := q.Submit("flood", "f", 1, 120)
	if !errors.Is(err, ErrJobShare) || !errors.Is(err, ErrFull) {
		t.Fatalf("over the job share: %v, want ErrJobShare", err)
	}
	if got := testutil.ToFloat64(m.shed.WithLabelValues(ReasonJobShare)); got != 1 {
		t.Errorf("shed_total{reason=job_share} %v, want 1", got)
	}
	if got := q.JobBytes("flood"); got != 480 {
		t.Errorf("JobBytes(flood) = %d, want 480", got)
	}
	d, err := q.Submit("small", "s", 1, 10)
	if err != nil {
		t.Fatalf("another job refused: %v", err)
	}
	g.open()
	go func() {
		for range g.entered {
		}
	}()
	for _, d := range append(dones, held, d) {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
}

// The writer serves jobs round-robin, a fair share of one commit each:
// with one job's backlog waiting, another job's request goes into the very
// next commit, and a commit never exceeds its byte bound.
func TestRoundRobinCommit(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	q, _ := newTestQueue(t, Config{MaxRequests: 100, MaxBytes: 10000, MaxCommitBytes: 100, Writers: 1}, g)
	held, _ := q.Submit("x", "held", 1, 1)
	<-g.entered
	var dones []<-chan error
	for range 10 {
		d, err := q.Submit("flood", "f", 1, 40)
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, d)
	}
	d, err := q.Submit("small", "s", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	g.open()
	go func() {
		for range g.entered {
		}
	}()
	for _, d := range append(dones, held, d) {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.got) < 2 || !slices.Contains(g.got[1], "s") {
		t.Fatalf("commits %v: the small job's request is not in the commit after the held one", g.got)
	}
	for i, c := range g.got[1:] {
		if n := len(c); n > 3 { // 2 x 40 flood + 1 small <= 100
			t.Errorf("commit %d holds %d requests %v, more than its byte bound allows", i+1, n, c)
		}
	}
}

// A request larger than the byte bound is admitted into an empty queue.
func TestOversizedRequestAdmittedAlone(t *testing.T) {
	q, _ := newTestQueue(t, Config{MaxBytes: 10}, &gatedCommit{})
	d, err := q.Submit("j", "big", 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-d; err != nil {
		t.Fatal(err)
	}
}

// A failing request in a group commit fails alone.
func TestGroupFailureIsolated(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 16), fail: "bad"}
	q, _ := newTestQueue(t, Config{}, g)
	held, _ := q.Submit("j", "held", 1, 1)
	<-g.entered
	good, _ := q.Submit("j", "good", 1, 1)
	bad, _ := q.Submit("j", "bad", 1, 1)
	g.open()
	go func() {
		for range g.entered {
		}
	}()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-good; err != nil {
		t.Errorf("good request failed with its group: %v", err)
	}
	if err := <-bad; err == nil {
		t.Error("bad request committed")
	}
}

// A shared error (Config.Shared: the store refuses every write) fails the
// whole group at once: no retry request by request, which would try every
// write again only to fail it again.
func TestGroupFailureShared(t *testing.T) {
	errFull := errors.New("disk full")
	var mu sync.Mutex
	commits := 0
	gate := make(chan struct{})
	entered := make(chan struct{}, 16)
	q := New(Config{Shared: func(err error) bool { return errors.Is(err, errFull) }}, func(reqs []*Request[string]) error {
		entered <- struct{}{}
		<-gate
		mu.Lock()
		commits++
		mu.Unlock()
		return errFull
	}, nil, nil)
	t.Cleanup(q.Close)
	held, _ := q.Submit("j", "held", 1, 1)
	<-entered
	a, _ := q.Submit("j", "a", 1, 1)
	b, _ := q.Submit("j", "b", 1, 1)
	close(gate)
	go func() {
		for range entered {
		}
	}()
	for _, d := range []<-chan error{held, a, b} {
		if err := <-d; !errors.Is(err, errFull) {
			t.Errorf("request: %v, want the shared error", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if commits != 2 {
		t.Errorf("%d commits for one request and a group of two failing alike, want 2 (no retry one by one)", commits)
	}
}

// Issue 16 item 13: Precheck charged a body its bytes, while a compact
// protobuf body costs about three times that decoded, so a flooding job's
// bodies passed the precheck only to be shed at Submit after their
// decode — the flood's wasted decodes took most of the server's CPU. A
// job with requests waiting is now charged its last request's cost per
// body byte.
func TestPrecheckChargesDecodedCost(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	q, _ := newTestQueue(t, Config{MaxBytes: 1000, JobShare: 0.5, Writers: 1}, g)
	held, _ := q.Submit("j", "held", 1, 1) // taken by the writer, which waits
	<-g.entered
	// A waiting request of 300 decoded bytes from a 100-byte body.
	if _, err := q.Submit("j", strings.Repeat("x", 300), 1, 100); err != nil {
		t.Fatal(err)
	}
	if err := q.Precheck("j", 100); !errors.Is(err, ErrJobShare) {
		t.Errorf("precheck of another 100-byte body: %v, want ErrJobShare (300 held + 300 once decoded > the share of 500)", err)
	}
	if err := q.Precheck("other", 100); err != nil {
		t.Errorf("another job's precheck: %v", err)
	}
	g.open()
	go func() {
		for range g.entered {
		}
	}()
	<-held
}

// Issue 16 item 13: a flood's concurrent posts each passed Precheck on
// the same room, so 64 connections' bodies were read only to be shed
// afterwards. Hold keeps what it admitted until release: the job's next
// admission sees it, another job's small post does not wait for it.
func TestHoldCountsAdmittedBodies(t *testing.T) {
	q, _ := newTestQueue(t, Config{MaxBytes: 1000, JobShare: 0.5}, &gatedCommit{})
	release, err := q.Hold("flood", 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Hold("flood", 300); !errors.Is(err, ErrJobShare) {
		t.Fatalf("a second 300-byte body while the first is held: %v, want ErrJobShare (600 > the share of 500)", err)
	}
	if _, err := q.Hold("small", 10); err != nil {
		t.Fatalf("another job's small post: %v", err)
	}
	release()
	release() // idempotent
	r2, err := q.Hold("flood", 300)
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	r2()
	if q.Jobs() != 0 || q.QueuedBytes() != 0 {
		t.Fatalf("released holds left %d jobs, %d bytes", q.Jobs(), q.QueuedBytes())
	}
}

func TestCloseDrains(t *testing.T) {
	g := &gatedCommit{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	q, _ := newTestQueue(t, Config{}, g)
	var dones []<-chan error
	for _, p := range []string{"a", "b", "c"} {
		d, _ := q.Submit("j", p, 1, 1)
		dones = append(dones, d)
	}
	<-g.entered
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	time.Sleep(10 * time.Millisecond)
	if _, err := q.Submit("j", "late", 1, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("submit after close: %v", err)
	}
	g.open()
	go func() {
		for range g.entered {
		}
	}()
	<-closed
	for _, d := range dones {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
}
