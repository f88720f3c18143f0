package api

import (
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/symbolize"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

type stackEnv struct {
	base    string
	st      *store.Store
	reg     *prometheus.Registry
	q       *Queue
	release chan struct{} // when set, every commit waits until it is closed
	entered chan struct{}
	once    sync.Once
}

// releaseAll lets every held and later commit through.
func (e *stackEnv) releaseAll() {
	if e.release != nil {
		e.once.Do(func() { close(e.release) })
	}
}

// stackServer is ingestServer with the SysOM-AI routes' collaborators: a
// symbol store (nil: none), a queue of depth qDepth (0: default) whose
// commits can be held (block) to fill it.
func stackServer(t *testing.T, syms SymbolStore, qDepth int, block bool) *stackEnv {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	e := &stackEnv{st: st, reg: prometheus.NewRegistry()}
	qm, err := ingest.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	am, err := NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	commit := Commit(st)
	if block {
		e.release, e.entered = make(chan struct{}), make(chan struct{}, 64)
		inner, release, entered := commit, e.release, e.entered
		commit = func(reqs []*ingest.Request[*ingest.Item]) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
			return inner(reqs)
		}
	}
	e.q = ingest.New(ingest.Config{MaxRequests: qDepth}, commit, quiet, qm)
	mux := http.NewServeMux()
	gate := ingest.NewGate(ingest.GateConfig{MaxBytes: 128 << 20, JobBytes: 64<<20 + ingest.SmallBody})
	New(Deps{Catalog: catalog.New(st), Reader: st, Vectors: e.q, Collectives: st, Gate: gate, Metrics: am, Log: quiet, MaxBodyBytes: 1 << 20,
		RetryAfter: time.Second, Symbols: syms}).Register(mux)
	ts := httptest.NewServer(mux)
	e.base = ts.URL
	t.Cleanup(func() {
		e.releaseAll()
		ts.Close()
		e.q.Close()
		st.Close()
	})
	return e
}

const stackT0 = int64(1_700_000_000) * 1e9

func nodeStacks(node string, ranks ...int) *stack.Batch {
	b := &stack.Batch{Node: node, StartNS: stackT0, EndNS: stackT0 + 5e9, Hz: 99, Ratio: 0.1, Dropped: 1,
		Mappings: []stack.Mapping{{Start: 0x400000, Limit: 0x500000, BuildID: "abcd", Path: "/bin/app"}}}
	for _, r := range ranks {
		b.Samples = append(b.Samples, stack.Sample{Rank: r, PID: 100 + r, TID: 100 + r, Comm: "python3", Count: 3, Frames: []stack.Frame{
			{Kind: stack.Native, Addr: 0x401000, Mapping: 0}, {Kind: stack.Python, Mapping: -1, Func: "train_step", File: "train.py", Line: 3}}})
	}
	return b
}

func stacksAnswer(t *testing.T, a answer) StacksAnswer {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	var ans StacksAnswer
	if err := json.Unmarshal(a.raw, &ans); err != nil {
		t.Fatal(err)
	}
	return ans
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func sendHdr(t *testing.T, method, url string, hdr map[string]string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func TestStacksIngest(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	url := e.base + "/api/v1/jobs/j/stacks"
	js, _ := laggardv1.MarshalJSONStacks(nodeStacks("n1", 0, 1))
	// Unknown job: 404 unless ?world= registers it.
	if a := send(t, "POST", url, "application/json", js); a.status != http.StatusNotFound {
		t.Fatalf("unknown job: %d %s", a.status, a.raw)
	}
	ans := stacksAnswer(t, send(t, "POST", url+"?world=4", "application/json", js))
	if !reflect.DeepEqual(ans, StacksAnswer{AcceptedSamples: 2, AcceptedRecords: 2}) {
		t.Fatalf("json: %+v", ans)
	}
	// The same window resent as gzipped protobuf: duplicates only.
	pbb, _ := laggardv1.MarshalProtoStacks(nodeStacks("n1", 0, 1))
	hdr := map[string]string{"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
	if ans := stacksAnswer(t, sendHdr(t, "POST", url, hdr, gz(pbb))); !reflect.DeepEqual(ans, StacksAnswer{Duplicates: 2}) {
		t.Fatalf("resend: %+v", ans)
	}
	// Another node's window of ranks 2, 3.
	pbb, _ = laggardv1.MarshalProtoStacks(nodeStacks("n2", 2, 3))
	if ans := stacksAnswer(t, send(t, "POST", url, "application/x-protobuf", pbb)); ans.AcceptedRecords != 2 {
		t.Fatalf("n2: %+v", ans)
	}
	n := 0
	if err := e.st.ScanStacks("j", store.StackQuery{Rank: -1}, func(b *stack.Batch) error { n += len(b.Samples); return nil }); err != nil || n != 4 {
		t.Fatalf("stored %d samples: %v", n, err)
	}
	if got := counter(t, e.reg, "laggard_ingest_stack_samples_total", map[string]string{"job": "j"}); got != 4 {
		t.Fatalf("samples metric %v", got)
	}

	// Errors name the field; nothing is stored.
	bad := nodeStacks("n3", 0)
	bad.Samples[0].Frames[1].Func = ""
	js, _ = laggardv1.MarshalJSONStacks(bad)
	if a := send(t, "POST", url, "application/json", js); a.status != 400 || a.body.Field != "samples[0].frames[1].func" {
		t.Fatalf("invalid: %d %s", a.status, a.raw)
	}
	js, _ = laggardv1.MarshalJSONStacks(nodeStacks("n3", 7))
	if a := send(t, "POST", url, "application/json", js); a.status != 400 || a.body.Field != "samples[0].rank" {
		t.Fatalf("rank outside the world: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", url, "text/csv", js); a.status != http.StatusUnsupportedMediaType {
		t.Fatalf("media type: %d", a.status)
	}
	if a := sendHdr(t, "POST", url, map[string]string{"Content-Type": "application/json", "Content-Encoding": "br"}, js); a.status != http.StatusUnsupportedMediaType {
		t.Fatalf("encoding: %d", a.status)
	}
	if a := sendHdr(t, "POST", url, map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, []byte("nope")); a.status != 400 || a.body.Field != "body" {
		t.Fatalf("bad gzip: %d %s", a.status, a.raw)
	}
	// 413: a body over the limit, and a gzip bomb past it once inflated.
	if a := send(t, "POST", url, "application/json", make([]byte, 2<<20)); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("large: %d", a.status)
	}
	bomb := gz(append([]byte(`{"samples":[`), bytes.Repeat([]byte(" "), 4<<20)...))
	if a := sendHdr(t, "POST", url, map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("bomb: %d %s", a.status, a.raw)
	}
}

// A batch larger than one queue part is split by whole ranks and stored
// as one record per rank.
func TestStacksLargeBatchInParts(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	b := &stack.Batch{Node: "n", StartNS: stackT0, EndNS: stackT0 + 5e9, Dropped: 9}
	for i := range 3 * stackPart {
		b.Samples = append(b.Samples, stack.Sample{Rank: i % 3, PID: i, Count: 1, Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: fmt.Sprint("f", i)}}})
	}
	if parts := stackParts(b); len(parts) != 3 {
		t.Fatalf("%d parts", len(parts))
	}
	pbb, _ := laggardv1.MarshalProtoStacks(b)
	ans := stacksAnswer(t, send(t, "POST", e.base+"/api/v1/jobs/big/stacks?world=3", "application/x-protobuf", pbb))
	if !reflect.DeepEqual(ans, StacksAnswer{AcceptedSamples: 3 * stackPart, AcceptedRecords: 3}) {
		t.Fatalf("%+v", ans)
	}
	dropped := int64(0)
	_ = e.st.ScanStacks("big", store.StackQuery{Rank: -1}, func(b *stack.Batch) error { dropped += b.Dropped; return nil })
	if dropped != 9 {
		t.Fatalf("dropped counted %d times over", dropped)
	}
}

func TestOSStatsIngest(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	register(t, e.base, "j")
	b := &osstat.Batch{Node: "n1", StartNS: stackT0, EndNS: stackT0 + 5e9,
		Points: []osstat.Point{{Name: osstat.SoftIRQs, Rank: -1, CPU: 2, Device: "NET_RX", Value: 5000}, {Name: osstat.RunQueueWait, Rank: 1, CPU: -1, Value: 0.1}},
		Absent: []osstat.Absence{{Source: osstat.SrcNVML, Reason: "built without NVML"}}}
	pbb, _ := laggardv1.MarshalProtoOSStats(b)
	url := e.base + "/api/v1/jobs/j/osstats"
	if ans := stacksAnswer(t, send(t, "POST", url, "application/x-protobuf", pbb)); !reflect.DeepEqual(ans, StacksAnswer{AcceptedSamples: 2, AcceptedRecords: 1}) {
		t.Fatalf("%+v", ans)
	}
	js, _ := laggardv1.MarshalJSONOSStats(b)
	if ans := stacksAnswer(t, send(t, "POST", url, "application/json", js)); !reflect.DeepEqual(ans, StacksAnswer{Duplicates: 1}) {
		t.Fatalf("resend %+v", ans)
	}
	// A point outside the world is refused alone (issue 16 item 8a); a
	// batch whose every record is refused is a 400 naming the first.
	b.StartNS, b.EndNS = b.StartNS+5e9, b.EndNS+5e9
	b.Points[1].Rank = 2 // world is 2
	js, _ = laggardv1.MarshalJSONOSStats(b)
	ans := stacksAnswer(t, send(t, "POST", url, "application/json", js))
	if ans.AcceptedSamples != 1 || ans.Refused != 1 || len(ans.RefusedRecords) != 1 || ans.RefusedRecords[0].Field != "points[1].rank" {
		t.Fatalf("rank: %+v", ans)
	}
	only := &osstat.Batch{Node: "n1", StartNS: b.StartNS + 5e9, EndNS: b.EndNS + 5e9, Points: b.Points[1:]}
	js, _ = laggardv1.MarshalJSONOSStats(only)
	if a := send(t, "POST", url, "application/json", js); a.status != 400 || a.body.Field != "points[0].rank" {
		t.Fatalf("all refused: %d %s", a.status, a.raw)
	}
	var got []*osstat.Batch
	_ = e.st.ScanOSStats("j", 0, 0, func(b *osstat.Batch) error { got = append(got, b); return nil })
	if len(got) != 2 || len(got[0].Absent) != 1 || len(got[1].Points) != 1 {
		t.Fatalf("%+v", got)
	}
	if v := counter(t, e.reg, "laggard_ingest_os_points_total", map[string]string{"job": "j"}); v != 3 {
		t.Fatalf("points metric %v", v)
	}
}

func TestProfileImport(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	register(t, e.base, "j")
	fn := &profile.Function{ID: 1, Name: "main.hot", Filename: "hot.go"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn, Line: 7}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}}, TimeNanos: stackT0, DurationNanos: 1e9,
		Function: []*profile.Function{fn}, Location: []*profile.Location{loc}, Sample: []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{11}}}}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	url := e.base + "/api/v1/jobs/j/profiles"
	// Sniffed as pprof (gzip), rank from the query.
	if ans := stacksAnswer(t, send(t, "POST", url+"?rank=1", "", buf.Bytes())); ans.AcceptedSamples != 1 {
		t.Fatalf("pprof: %+v", ans)
	}
	// Collapsed, by Content-Type; it needs a window.
	col := []byte("main;train;matmul 40\nmain;io 2\n")
	if a := send(t, "POST", url+"?rank=0", "text/plain", col); a.status != 400 || a.body.Field != "start_ns" {
		t.Fatalf("collapsed without a window: %d %s", a.status, a.raw)
	}
	q := fmt.Sprintf("?rank=0&format=collapsed&start_ns=%d&end_ns=%d", stackT0, stackT0+1e9)
	if ans := stacksAnswer(t, send(t, "POST", url+q, "text/plain", col)); ans.AcceptedSamples != 2 {
		t.Fatalf("collapsed: %+v", ans)
	}
	if a := send(t, "POST", url+q, "text/plain", []byte("main;x 1\nbroken\n")); a.status != 400 || a.body.Field != "line 2" {
		t.Fatalf("line error: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", url+"?rank=5&format=collapsed&start_ns=1&end_ns=2", "text/plain", col); a.status != 400 || a.body.Field != "rank" {
		t.Fatalf("rank: %d %s", a.status, a.raw)
	}
	// An import spans at most 1 h and never starts in the future: either
	// would skew every later scan or default window (review finding 6).
	long := fmt.Sprintf("?rank=0&format=collapsed&start_ns=%d&end_ns=%d", stackT0, stackT0+2*3600e9)
	if a := send(t, "POST", url+long, "text/plain", col); a.status != 400 || a.body.Field != "end_ns" || !strings.Contains(string(a.raw), "start_ns") {
		t.Fatalf("2 h import: %d %s", a.status, a.raw)
	}
	fut := time.Now().Add(24 * time.Hour).UnixNano()
	if a := send(t, "POST", url+fmt.Sprintf("?rank=0&format=collapsed&start_ns=%d&end_ns=%d", fut, fut+1e9), "text/plain", col); a.status != 400 || a.body.Field != "start_ns" {
		t.Fatalf("future import: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", url+"?format=svg", "", col); a.status != 400 || a.body.Field != "format" {
		t.Fatalf("format: %d %s", a.status, a.raw)
	}
	var r0, r1 int64
	_ = e.st.ScanStacks("j", store.StackQuery{Rank: -1}, func(b *stack.Batch) error {
		for _, s := range b.Samples {
			if s.Rank == 0 {
				r0 += s.Count
			} else {
				r1 += s.Count
			}
			if s.Frames[0].Kind != stack.Symbol {
				t.Errorf("imported frame kind %v", s.Frames[0].Kind)
			}
		}
		return nil
	})
	if r0 != 42 || r1 != 11 {
		t.Fatalf("counts %d %d", r0, r1)
	}
}

// A job flooding a full queue is shed with 429 + Retry-After and counted;
// once the writer drains, posts succeed again.
func TestStacksShed(t *testing.T) {
	e := stackServer(t, nil, 1, true)
	register(t, e.base, "j")
	post := func(node string) answer {
		pbb, _ := laggardv1.MarshalProtoStacks(nodeStacks(node, 0))
		return send(t, "POST", e.base+"/api/v1/jobs/j/stacks", "application/x-protobuf", pbb)
	}
	first := make(chan answer, 1)
	go func() { first <- post("n0") }()
	<-e.entered // the writer holds the first post
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := post(fmt.Sprint("n", i+1))
			mu.Lock()
			statuses[a.status]++
			mu.Unlock()
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		shed := statuses[http.StatusTooManyRequests]
		mu.Unlock()
		if shed > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.releaseAll()
	wg.Wait()
	if a := <-first; a.status != 200 {
		t.Fatalf("first: %d %s", a.status, a.raw)
	}
	if statuses[http.StatusTooManyRequests] == 0 {
		t.Fatalf("no 429 among %v", statuses)
	}
	if got := counter(t, e.reg, "laggard_ingest_stack_shed_requests_total", map[string]string{"kind": "stacks"}); got != float64(statuses[http.StatusTooManyRequests]) {
		t.Fatalf("shed metric %v, 429s %d", got, statuses[http.StatusTooManyRequests])
	}
}

// fakeSymbols records PutChunk calls.
type fakeSymbols struct {
	mu    sync.Mutex
	parts map[string]map[int][]byte
	err   error
}

func (f *fakeSymbols) Has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parts[id] != nil && len(f.parts[id]) == -1
}

func (f *fakeSymbols) PutChunk(id string, part, parts int, r io.Reader) (bool, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return false, err
	}
	if f.err != nil {
		return false, f.err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts == nil {
		f.parts = map[string]map[int][]byte{}
	}
	if f.parts[id] == nil {
		f.parts[id] = map[int][]byte{}
	}
	f.parts[id][part] = b
	return len(f.parts[id]) == parts, nil
}

func (f *fakeSymbols) Remove(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts[id] == nil {
		return fmt.Errorf("%w %s", symbolize.ErrNotFound, id)
	}
	delete(f.parts, id)
	return nil
}

func TestSymbolsRoutes(t *testing.T) {
	if a := send(t, "HEAD", stackServer(t, nil, 0, false).base+"/api/v1/symbols/abcd", "", nil); a.status != http.StatusNotImplemented {
		t.Fatalf("no store: %d", a.status)
	}
	fs := &fakeSymbols{}
	e := stackServer(t, fs, 0, false)
	url := e.base + "/api/v1/symbols/"
	for _, c := range []struct {
		method, path string
		body         []byte
		status       int
		field        string
	}{
		{"HEAD", "abcd", nil, 404, ""},
		{"HEAD", "ABCD", nil, 400, ""},
		{"POST", "xyz?part=0&parts=1", []byte("x"), 400, "buildid"},
		{"POST", strings.Repeat("a", 130) + "?parts=1", []byte("x"), 400, "buildid"},
		{"POST", "abcd?part=2&parts=2", []byte("x"), 400, "part"},
		{"POST", "abcd?part=0&parts=0", []byte("x"), 400, "parts"},
		{"POST", "abcd?part=0&parts=2", []byte("first"), 200, ""},
		{"POST", "abcd?part=1&parts=2", []byte("second"), 200, ""},
		{"POST", "abcd?part=0&parts=1", make([]byte, MaxSymbolPart+1), 413, ""},
		// Odd-length ids are refused by every route, as the store does.
		{"HEAD", "abc", nil, 400, ""},
		{"POST", "a?part=0&parts=1", []byte("x"), 400, "buildid"},
		{"DELETE", "abc", nil, 400, "buildid"},
		{"DELETE", "ef99", nil, 404, ""},
	} {
		a := send(t, c.method, url+c.path, "application/octet-stream", c.body)
		if a.status != c.status || (c.field != "" && a.body.Field != c.field) {
			t.Fatalf("%s %s: %d %s", c.method, c.path, a.status, a.raw)
		}
	}
	if got := string(fs.parts["abcd"][0]) + string(fs.parts["abcd"][1]); got != "firstsecond" {
		t.Fatalf("parts %q", got)
	}
	if a := send(t, "DELETE", url+"abcd", "", nil); a.status != http.StatusNoContent || fs.parts["abcd"] != nil {
		t.Fatalf("delete: %d %s", a.status, a.raw)
	}
	fs.err = fmt.Errorf("wrapped: %w", symbolize.ErrQuota)
	if a := send(t, "POST", url+"ef01?part=0&parts=1", "application/octet-stream", []byte("x")); a.status != http.StatusInsufficientStorage {
		t.Fatalf("quota: %d %s", a.status, a.raw)
	}
	fs.err = fmt.Errorf("wrapped: %w", symbolize.ErrBadUpload)
	if a := send(t, "POST", url+"ef01?part=0&parts=1", "application/octet-stream", []byte("x")); a.status != 400 || a.body.Field != "body" {
		t.Fatalf("bad upload: %d %s", a.status, a.raw)
	}
}

// End to end with the real symbol store: a binary uploaded in two parts
// under its Build-ID is then known (HEAD 200); the wrong Build-ID is
// refused.
func TestSymbolsUploadRealStore(t *testing.T) {
	path := "/bin/true"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no %s to upload: %v", path, err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s is not ELF: %v", path, err)
	}
	id, err := symbolize.ELFBuildID(f)
	f.Close()
	if err != nil || id == "" {
		t.Skipf("%s has no GNU build-id note (%v)", path, err)
	}
	ss, err := symbolize.OpenStore(t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	e := stackServer(t, ss, 0, false)
	url := e.base + "/api/v1/symbols/" + id
	if a := send(t, "HEAD", url, "", nil); a.status != 404 {
		t.Fatalf("before: %d", a.status)
	}
	half := len(raw) / 2
	if a := send(t, "POST", url+"?part=1&parts=2", "application/octet-stream", raw[half:]); a.status != 200 || !strings.Contains(string(a.raw), `"done":false`) {
		t.Fatalf("part 1: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", url+"?part=0&parts=2", "application/octet-stream", raw[:half]); a.status != 200 || !strings.Contains(string(a.raw), `"done":true`) {
		t.Fatalf("part 0: %d %s", a.status, a.raw)
	}
	if a := send(t, "HEAD", url, "", nil); a.status != 200 {
		t.Fatalf("after: %d", a.status)
	}
	wrong := strings.Repeat("ab", 20)
	if a := send(t, "POST", e.base+"/api/v1/symbols/"+wrong+"?part=0&parts=1", "application/octet-stream", raw); a.status != 400 {
		t.Fatalf("mismatched build-id: %d %s", a.status, a.raw)
	}
}
