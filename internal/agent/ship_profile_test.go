package agent

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/gpu"
	aosstat "github.com/laggard-dev/laggard/internal/agent/osstat"
	"github.com/laggard-dev/laggard/internal/agent/register"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// profServer is a fake laggard server for the SysOM-AI routes.
type profServer struct {
	mu      sync.Mutex
	stacks  map[string][]*stack.Batch
	os      map[string][]*osstat.Batch
	heads   map[string]int
	parts   map[string]map[int][]byte
	nparts  map[string]int
	have    map[string]bool // Build-IDs the server already has
	fail    []int           // statuses for the next stack POSTs
	maxSmpl int             // > 0: a stack batch with more samples is 413
}

func newProfServer() *profServer {
	return &profServer{stacks: map[string][]*stack.Batch{}, os: map[string][]*osstat.Batch{}, heads: map[string]int{},
		parts: map[string]map[int][]byte{}, nparts: map[string]int{}, have: map[string]bool{}}
}

func (f *profServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seg := strings.Split(strings.TrimPrefix(r.URL.Path, "/api/v1/"), "/")
	body, _ := io.ReadAll(r.Body)
	switch {
	case len(seg) == 3 && seg[0] == "jobs" && seg[2] == "stacks" && r.Method == http.MethodPost:
		if len(f.fail) > 0 {
			code := f.fail[0]
			f.fail = f.fail[1:]
			http.Error(w, "no", code)
			return
		}
		b, err := laggardv1.UnmarshalProtoStacks(body)
		if err == nil {
			err = b.Validate()
		}
		if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, fmt.Sprint("bad body: ", err), 400)
			return
		}
		if f.maxSmpl > 0 && len(b.Samples) > f.maxSmpl {
			http.Error(w, "too large", 413)
			return
		}
		f.stacks[seg[1]] = append(f.stacks[seg[1]], b)
	case len(seg) == 3 && seg[0] == "jobs" && seg[2] == "osstats" && r.Method == http.MethodPost:
		b, err := laggardv1.UnmarshalProtoOSStats(body)
		if err == nil {
			err = b.Validate()
		}
		if err != nil {
			http.Error(w, fmt.Sprint("bad body: ", err), 400)
			return
		}
		f.os[seg[1]] = append(f.os[seg[1]], b)
	case len(seg) == 2 && seg[0] == "symbols" && r.Method == http.MethodHead:
		f.heads[seg[1]]++
		if !f.have[seg[1]] {
			w.WriteHeader(404)
		}
	case len(seg) == 2 && seg[0] == "symbols" && r.Method == http.MethodPost:
		part, _ := strconv.Atoi(r.URL.Query().Get("part"))
		parts, _ := strconv.Atoi(r.URL.Query().Get("parts"))
		if f.parts[seg[1]] == nil {
			f.parts[seg[1]] = map[int][]byte{}
		}
		f.parts[seg[1]][part] = body
		f.nparts[seg[1]] = parts
		fmt.Fprintf(w, `{"done":%v}`, len(f.parts[seg[1]]) == parts)
	default:
		http.Error(w, "no route "+r.Method+" "+r.URL.Path, 404)
	}
}

// fakeRegistry holds fixed registrations.
type fakeRegistry []register.Registration

func (f fakeRegistry) Lookup(pid int) (register.Registration, bool) {
	for _, r := range f {
		if r.PID == pid {
			return r, true
		}
	}
	return register.Registration{}, false
}
func (f fakeRegistry) All() []register.Registration { return f }

// fakeProfiler emits the batches made by mk (given the agent's RankOf)
// once, then waits for ctx.
type fakeProfiler struct {
	cfg cpuprof.Config
	mk  func(rankOf func(int) (int, bool)) []*stack.Batch
}

func (p *fakeProfiler) Run(ctx context.Context) error {
	for _, b := range p.mk(p.cfg.RankOf) {
		p.cfg.Emit(b)
	}
	<-ctx.Done()
	return nil
}
func (p *fakeProfiler) Close() error { return nil }

// fakeOS returns one batch per Collect.
type fakeOS struct {
	pts func() []osstat.Point
	n   int64
}

func (o *fakeOS) Collect(now time.Time) *osstat.Batch {
	o.n++
	return &osstat.Batch{Node: "n1", StartNS: t0 + o.n*1e9, EndNS: t0 + (o.n+1)*1e9, Points: o.pts()}
}
func (o *fakeOS) Close() error { return nil }

type fakeGPU struct{}

func (fakeGPU) Points(time.Time) ([]osstat.Point, []osstat.Absence) {
	return []osstat.Point{{Name: osstat.GPUSMClockMHz, Rank: -1, CPU: -1, Device: "1", Value: 1200}}, nil
}
func (fakeGPU) Close() {}

// libWithBuildID finds a shared library with a GNU Build-ID to stand in
// for a profiled process's mapping.
func libWithBuildID(t *testing.T) (path, id string) {
	t.Helper()
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6", "/usr/lib/aarch64-linux-gnu/libc.so.6"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		id, err := elfinfo.BuildID(f)
		f.Close()
		if err == nil && id != "" {
			return p, id
		}
	}
	t.Skip("no libc with a GNU Build-ID found to stand in for a profiled binary")
	return "", ""
}

func startAgent(t *testing.T, srv http.Handler, cfg Config, prof *fakeProfiler, os_ *fakeOS, reg registry) (*Agent, context.CancelFunc, chan error) {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg.Server = hs.URL
	cfg.ShmDir = t.TempDir()
	cfg.Interval = 20 * time.Millisecond
	cfg.ValidationInterval = -1
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.side.reg = reg
	a.side.syms.debugDir = "/nonexistent-debug-dir" // upload the mapped file itself
	a.side.syms.chunk = 256 << 10                   // several parts
	a.newProf = func(c cpuprof.Config) (stackSource, error) {
		if prof == nil {
			return nil, fmt.Errorf("%w: no perf events in this test", cpuprof.ErrUnsupported)
		}
		prof.cfg = c
		return prof, nil
	}
	a.newOS = func(aosstat.Config) (osSource, error) { return os_, nil }
	a.newGPU = func() (gpu.Source, error) { return fakeGPU{}, nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a, cancel, done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStacksShippedPerJobAndSymbolsUploadedOnce(t *testing.T) {
	libPath, libID := libWithBuildID(t)
	me := os.Getpid()
	reg := fakeRegistry{
		{PID: me, Job: "job-a", Rank: 3, World: 4, LocalRank: 0},
		{PID: 1 << 22, Job: "job-b", Rank: 3, World: 8, LocalRank: 1},
	}
	// job-b's slot as the agent numbers it: which slot a process gets is
	// the agent's business (registration order), so the OS point below
	// names the slot rankOf reported, not a fixed one.
	var slotB atomic.Int64
	slotB.Store(-1)
	mk := func(rankOf func(int) (int, bool)) []*stack.Batch {
		sa, ok1 := rankOf(me)
		sb, ok2 := rankOf(1 << 22)
		if !ok1 || !ok2 || sa == sb {
			t.Errorf("rankOf: slots %d,%v %d,%v: want two distinct slots", sa, ok1, sb, ok2)
		}
		slotB.Store(int64(sb))
		maps := []stack.Mapping{
			{Start: 0x1000, Limit: 0x2000, BuildID: "00aa", Path: "/opt/other.so"},
			{Start: 0x7f00_0000, Limit: 0x7f20_0000, BuildID: libID, Path: libPath},
		}
		fr := func(m int32, addr uint64) stack.Frame { return stack.Frame{Kind: stack.Native, Addr: addr, Mapping: m} }
		b := func(start int64) *stack.Batch {
			return &stack.Batch{Node: "n1", StartNS: start, EndNS: start + 5e9, Hz: 99, Ratio: 0.1, Mappings: maps, Samples: []stack.Sample{
				{Rank: sa, PID: me, TID: me, Comm: "python", Frames: []stack.Frame{fr(1, 0x100), fr(1, 0x200)}, Count: 7},
				{Rank: sb, PID: 1 << 22, TID: 1 << 22, Comm: "python", Frames: []stack.Frame{fr(0, 0x1100)}, Count: 2},
				{Rank: sa, PID: 999, TID: 999, Comm: "hog", Foreign: true, Frames: []stack.Frame{{Kind: stack.Kernel, Func: "do_idle", Mapping: -1}}, Count: 5},
				{Rank: -1, PID: 998, TID: 998, Comm: "cron", Frames: []stack.Frame{{Kind: stack.Kernel, Func: "schedule", Mapping: -1}}, Count: 1},
			}}
		}
		return []*stack.Batch{b(t0), b(t0 + 5e9)}
	}
	srv := newProfServer()
	osrc := &fakeOS{pts: func() []osstat.Point {
		pts := []osstat.Point{{Name: osstat.SoftIRQs, Rank: -1, CPU: 2, Device: "NET_RX", Value: 100}}
		if sb := slotB.Load(); sb >= 0 {
			pts = append(pts, osstat.Point{Name: osstat.RunQueueWait, Rank: int(sb), CPU: -1, Value: 0.2}) // job-b rank 3
		}
		return pts
	}}
	has := func(bs []*osstat.Batch, name string, rank int) bool {
		for _, b := range bs {
			for _, p := range b.Points {
				if p.Name == name && p.Rank == rank {
					return true
				}
			}
		}
		return false
	}
	startAgent(t, srv, Config{ProfileOn: true, OSOn: true}, &fakeProfiler{mk: mk}, osrc, reg)
	waitFor(t, "stacks of both jobs, OS batches (with job-b's rank point) and the upload", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.stacks["job-a"]) == 2 && len(srv.stacks["job-b"]) == 2 && len(srv.os["job-a"]) > 0 &&
			has(srv.os["job-b"], osstat.RunQueueWait, 3) && len(srv.parts[libID]) == srv.nparts[libID] && srv.nparts[libID] > 0
	})
	time.Sleep(100 * time.Millisecond) // room for a wrong second upload
	srv.mu.Lock()
	defer srv.mu.Unlock()

	a := srv.stacks["job-a"][0]
	if len(a.Samples) != 2 || len(a.Mappings) != 1 || a.Mappings[0].BuildID != libID {
		t.Fatalf("job-a batch: %d samples, mappings %+v; want its own and the foreign sample, only the libc mapping", len(a.Samples), a.Mappings)
	}
	for _, s := range a.Samples {
		if s.Rank != 3 {
			t.Errorf("job-a sample %q has rank %d, want the registered rank 3 (not the slot)", s.Comm, s.Rank)
		}
		for _, f := range s.Frames {
			if f.Kind == stack.Native && f.Mapping != 0 {
				t.Errorf("job-a frame mapping %d, want re-indexed 0", f.Mapping)
			}
		}
	}
	if !a.Samples[1].Foreign || a.Samples[1].Comm != "hog" {
		t.Errorf("the foreign sample did not follow its rank's job: %+v", a.Samples[1])
	}
	b := srv.stacks["job-b"][0]
	if len(b.Samples) != 1 || b.Samples[0].Rank != 3 || b.Mappings[0].Path != "/opt/other.so" {
		t.Errorf("job-b batch: %+v", b)
	}
	// libc: asked once, uploaded once, reassembled byte for byte.
	if srv.heads[libID] != 1 {
		t.Errorf("HEAD for %s sent %d times, want once", libID, srv.heads[libID])
	}
	var got []byte
	for i := range srv.nparts[libID] {
		got = append(got, srv.parts[libID][i]...)
	}
	want, _ := os.ReadFile(libPath)
	if !bytes.Equal(got, want) || srv.nparts[libID] < 2 {
		t.Errorf("upload of %s: %d parts, %d bytes; want the file's %d bytes in ≥ 2 parts", libPath, srv.nparts[libID], len(got), len(want))
	}
	// /opt/other.so is not on this machine: asked (404), nothing uploaded.
	if srv.heads["00aa"] != 1 || len(srv.parts["00aa"]) != 0 {
		t.Errorf("missing file: %d HEADs, %d parts; want 1 and 0", srv.heads["00aa"], len(srv.parts["00aa"]))
	}
	// OS: node points to both jobs, the rank's point to its job with its
	// rank, GPU 1 to local rank 1 (job-b rank 3).
	if !has(srv.os["job-a"], osstat.SoftIRQs, -1) || !has(srv.os["job-b"], osstat.SoftIRQs, -1) {
		t.Error("node-level softirqs not sent to both jobs")
	}
	if !has(srv.os["job-b"], osstat.RunQueueWait, 3) || has(srv.os["job-a"], osstat.RunQueueWait, 3) {
		t.Error("rank point not attributed to job-b rank 3 only")
	}
	if !has(srv.os["job-b"], osstat.GPUSMClockMHz, 3) || has(srv.os["job-a"], osstat.GPUSMClockMHz, -1) {
		t.Error("GPU 1 not attributed to local rank 1 (job-b rank 3)")
	}
}

func TestProfilerUnsupportedAgentKeepsRunning(t *testing.T) {
	srv := newProfServer()
	osrc := &fakeOS{pts: func() []osstat.Point { return []osstat.Point{{Name: osstat.CPUBusy, Rank: -1, CPU: 0, Value: 0.5}} }}
	startAgent(t, srv, Config{ProfileOn: true, OSOn: true, DefaultJob: "solo"}, nil, osrc, nil)
	waitFor(t, "OS batches without a profiler", func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.os["solo"]) >= 2
	})
}

func TestProfQueueRetryHalveAndDrop(t *testing.T) {
	srv := newProfServer()
	srv.fail = []int{503}
	srv.maxSmpl = 2
	hs := httptest.NewServer(srv)
	defer hs.Close()
	m := NewMetrics()
	pm := newProfMetrics(m.Registry)
	now := time.Unix(0, t0)
	q := &profQueue{kind: "stacks", server: hs.URL, client: hs.Client(), timeout: time.Second, maxBytes: 1 << 20, log: slog.New(slog.DiscardHandler), m: pm,
		now: func() time.Time { return now }, lost: map[string]int64{}}
	mk := func(n int) *stack.Batch {
		b := &stack.Batch{StartNS: t0, EndNS: t0 + 5e9, Hz: 99, Ratio: 0.1}
		for i := range n {
			b.Samples = append(b.Samples, stack.Sample{Rank: 0, PID: 1, TID: 1 + i, Frames: []stack.Frame{{Kind: stack.Symbol, Func: "f", Mapping: -1}}, Count: 1})
		}
		return b
	}
	q.push(pqItem{job: "j", stacks: mk(5), weight: 1})
	q.flush(context.Background()) // 503: back off
	if q.Len() != 1 {
		t.Fatalf("after a 503 the batch should wait, queue %d", q.Len())
	}
	q.flush(context.Background()) // still in backoff: nothing sent
	now = now.Add(2 * time.Minute)
	q.flush(context.Background()) // 413 → halves (2+3 → 2+1+2)
	srv.mu.Lock()
	var n int
	for _, b := range srv.stacks["j"] {
		n += len(b.Samples)
		if len(b.Samples) > 2 {
			t.Errorf("a batch of %d samples passed the server's cap", len(b.Samples))
		}
	}
	srv.mu.Unlock()
	if n != 5 || q.Len() != 0 {
		t.Errorf("shipped %d of 5 samples, %d batches left", n, q.Len())
	}
	// Over the byte budget the oldest goes; its samples ride in the next
	// batch's Dropped.
	q.maxBytes = 10
	q.push(pqItem{job: "j", stacks: mk(1), weight: 8})
	q.push(pqItem{job: "j", stacks: mk(1), weight: 8})
	q.flush(context.Background())
	srv.mu.Lock()
	last := srv.stacks["j"][len(srv.stacks["j"])-1]
	srv.mu.Unlock()
	if last.Dropped != 1 {
		t.Errorf("dropped batch not reported: Dropped = %d, want 1", last.Dropped)
	}
}

func TestSplitStacksUnattributed(t *testing.T) {
	b := &stack.Batch{StartNS: t0, EndNS: t0 + 1, Samples: []stack.Sample{
		{Rank: -1, PID: 5, Frames: []stack.Frame{{Kind: stack.Symbol, Func: "x", Mapping: -1}}, Count: 4},
		{Rank: 9, PID: 6, Frames: []stack.Frame{{Kind: stack.Symbol, Func: "y", Mapping: -1}}, Count: 2},
	}}
	var un int64
	out := splitStacks(b, func(slot int) (string, int, bool) { return "", 0, false }, &un)
	if len(out) != 0 || un != 6 {
		t.Errorf("unattributable samples: %d batches, %d counted; want 0 and 6", len(out), un)
	}
	out = splitStacks(b, func(slot int) (string, int, bool) {
		if slot < 0 {
			return "dflt", -1, true
		}
		return "", 0, false
	}, &un)
	if got := out["dflt"]; got == nil || len(got.Samples) != 1 || got.Samples[0].Rank != -1 {
		t.Errorf("profile-all sample not sent to the default job: %+v", out)
	}
}

func TestSlotsDistinctPerJobRank(t *testing.T) {
	var s slots
	a, _ := s.of("a", 0)
	b, _ := s.of("b", 0)
	a2, _ := s.of("a", 0)
	if a == b || a != a2 {
		t.Errorf("slots: a=%d b=%d a again=%d", a, b, a2)
	}
	if jr, ok := s.get(b); !ok || jr != (jobRank{"b", 0}) {
		t.Errorf("get(%d) = %+v", b, jr)
	}
	if _, ok := s.get(99); ok {
		t.Error("unknown slot resolved")
	}
}
