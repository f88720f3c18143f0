package api

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

func TestParseClock(t *testing.T) {
	for _, tc := range []struct {
		in         string
		n, dropped int
		field      string
	}{
		{"", 0, 0, ""},
		{"[]", 0, 0, ""},
		{"[[10,20,30,40]]", 1, 0, ""},
		{"[[10,20,30,40], [50,60,60,70]]", 2, 0, ""},
		{"[[10,20,30]]", 0, 0, HeaderClock + "[0]"},
		// Out of order or not epoch times: the sample goes, the upload stays.
		{"[[10,20,30,40],[40,30,20,10]]", 1, 1, ""},
		{"[[0,20,30,40]]", 0, 1, ""},
		{"[[10,20,30,40],[50,70,60,80],[-5,1,2,3]]", 1, 2, ""},
		{"[[10,20,30,1e30]]", 0, 0, HeaderClock},
		{"{}", 0, 0, HeaderClock},
		{"[" + strings.Repeat("[1,2,3,4],", MaxClockSamples) + "[1,2,3,4]]", 0, 0, HeaderClock},
	} {
		var vals []string
		if tc.in != "" {
			vals = []string{tc.in}
		}
		hb, dropped, err := parseClock(vals)
		var fe *signal.FieldError
		switch {
		case tc.field == "" && (err != nil || len(hb) != tc.n || dropped != tc.dropped):
			t.Errorf("%q: %d samples, %d dropped, %v", tc.in, len(hb), dropped, err)
		case tc.field != "" && (!errorsAs(err, &fe) || fe.Field != tc.field):
			t.Errorf("%q: %v, want a %s error", tc.in, err, tc.field)
		}
	}
	hb, _, _ := parseClock([]string{"[[10,20,30,40]]"})
	if hb[0] != (store.OpHeartbeat{ClientSendNS: 10, ServerRecvNS: 20, ServerSendNS: 30, ClientRecvNS: 40}) {
		t.Errorf("sample %+v", hb[0])
	}
}

func errorsAs(err error, fe **signal.FieldError) bool {
	if err == nil {
		return false
	}
	f, ok := err.(*signal.FieldError)
	*fe = f
	return ok
}

// X-Laggard-Clock is outside input: whatever it holds, parseClock either
// names the header in a FieldError or returns ordered, bounded samples.
func FuzzParseClock(f *testing.F) {
	for _, s := range []string{"[[10,20,30,40]]", "[[1,2,3]]", "[]", "[[-1,2,3,4]]", `[["a"]]`, "[[9223372036854775807,1,1,1]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hb, dropped, err := parseClock([]string{s})
		if err != nil {
			var fe *signal.FieldError
			if !errorsAs(err, &fe) || !strings.HasPrefix(fe.Field, HeaderClock) {
				t.Fatalf("error %v does not name the header", err)
			}
			return
		}
		if len(hb)+dropped > MaxClockSamples {
			t.Fatalf("%d samples, %d dropped", len(hb), dropped)
		}
		for _, h := range hb {
			if h.ClientRecvNS < h.ClientSendNS || h.ServerSendNS < h.ServerRecvNS || h.ClientSendNS <= 0 {
				t.Fatalf("accepted %+v", h)
			}
		}
	})
}

type kairAPI struct {
	base string
	st   *store.Store
	k    *control.Kair
}

func kairServer(t testing.TB, d Deps) *kairAPI {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutJob(&signal.Job{ID: "kj", Name: "kj", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		t.Fatal(err)
	}
	k, err := control.NewKair(control.KairConfig{Interval: -1}, catalog.New(st), control.NewKairLifecycle(st, control.KairLifecycleConfig{}), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	d.Catalog, d.Reader, d.Log, d.Kair = catalog.New(st), st, quiet, k
	mux := http.NewServeMux()
	New(d).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { ts.Close(); st.Close() })
	return &kairAPI{base: ts.URL + "/api/v1/jobs/kj/", st: st, k: k}
}

func TestCreateCaptureBody(t *testing.T) {
	s := kairServer(t, Deps{})
	for _, tc := range []struct {
		body   string
		status int
		field  string
	}{
		{`{"rankz":[1]}`, 400, "rankz"},
		{`{"steps":"five"}`, 400, "steps"},
		{`{"steps":`, 400, "body"},
		{`{"steps":99}`, 400, "steps"},
		{`{"ranks":[7]}`, 400, "ranks"},
		{`{"ranks":[1,3],"steps":2,"every":4,"start_step":1000,"reason":"by hand"}`, 201, ""},
		{`{}`, 409, ""},
	} {
		a := send(t, "POST", s.base+"captures", "application/json", []byte(tc.body))
		if a.status != tc.status || obj(a)["field"] != nilIfEmpty(tc.field) {
			t.Errorf("%s: %d %s, want %d field %q", tc.body, a.status, a.raw, tc.status, tc.field)
		}
		if a.status == 201 && (obj(a)["start_step"] != 1000.0 || obj(a)["every"] != 4.0 || obj(a)["reason"] != "by hand") {
			t.Errorf("created %s", a.raw)
		}
	}
	// Without the controller the routes are 404.
	mux := http.NewServeMux()
	New(Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/jobs/kj/captures", nil))
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "not enabled") {
		t.Errorf("no controller: %d %s", rec.Code, rec.Body)
	}
}

// obj decodes an answer's JSON object.
func obj(a answer) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(a.raw, &m)
	return m
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// A chunked body (no length to refuse up front) over the byte limit is
// 413 and stores nothing; a compact OpTrace upload stores; a legacy
// trace with relative ts is put on the epoch clock by
// X-Laggard-Trace-Base-NS.
func TestUploadTraceLimitsAndFormats(t *testing.T) {
	s := kairServer(t, Deps{MaxTraceBytes: 4 << 10})
	a := send(t, "POST", s.base+"captures", "application/json", []byte(`{"ranks":[0,1,2]}`))
	if a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	id := obj(a)["id"].(string)
	up := s.base + "captures/" + id + "/traces?rank="
	big := io.MultiReader(strings.NewReader(`{"traceEvents":[`), strings.NewReader(strings.Repeat(`{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1},`, 200)), strings.NewReader(`{"ph":"X","name":"a","ts":1,"dur":1}]}`))
	if a := sendReader(t, "POST", up+"0", "application/json", big); a.status != 413 {
		t.Fatalf("chunked over the limit: %d %s", a.status, a.raw)
	}
	tr := &optrace.Trace{Rank: 1, Events: []optrace.Event{{Name: "aten::mm", Cat: optrace.CPUOp, TID: 1, Device: -1, StartNS: 5, DurNS: 3, Step: 2, Seq: -1}}}
	b, err := laggardv1.EncodeOpTrace(tr)
	if err != nil {
		t.Fatal(err)
	}
	if a := send(t, "POST", up+"2", "application/x-protobuf", b); a.status != 400 || obj(a)["field"] != "rank" {
		t.Fatalf("protobuf of another rank: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", up+"1", "application/x-protobuf", b); a.status != 201 || obj(a)["events"] != 1.0 || obj(a)["steps"] != 1.0 {
		t.Fatalf("protobuf: %d %s", a.status, a.raw)
	}
	// The legacy autograd profiler's bare array: ts relative, no base.
	legacy := `[{"name":"ProfilerStep#7","ph":"X","ts":10,"dur":100,"pid":1,"tid":1},{"name":"aten::add","ph":"X","ts":20.5,"dur":3,"pid":1,"tid":1}]`
	req, _ := http.NewRequest("POST", up+"2", strings.NewReader(legacy))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderTraceBase, "1700000000000000000")
	req.Header.Set(HeaderClock, "[[1700000000000000100,1700000000000000200,1700000000000000300,1700000000000000400]]")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("legacy: %d %s", res.StatusCode, raw)
	}
	traces, hb, err := s.st.OpTraces("kj", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 2 || traces[0].Rank != 1 || traces[1].Rank != 2 {
		t.Fatalf("stored %d traces", len(traces))
	}
	var starts []int64
	for _, e := range traces[1].Events {
		starts = append(starts, e.StartNS)
	}
	if fmt.Sprint(starts) != "[1700000000000010000 1700000000000020500]" || len(hb[2]) != 1 || hb[2][0].ServerRecvNS != 1700000000000000200 {
		t.Errorf("legacy starts %v, clock %v", starts, hb[2])
	}
	var c store.Capture
	g := send(t, "GET", s.base+"captures/"+id, "", nil)
	if err := json.Unmarshal(g.raw, &c); err != nil || fmt.Sprint(c.Uploaded) != "[1 2]" || c.State != store.CaptureRecording {
		t.Errorf("capture %s", g.raw)
	}
}

// kinetoJSON is a Kineto-shaped trace of n CPU ops over steps of 1,000
// ops each, rank 0.
func kinetoJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":4},"traceEvents":[`)
	ts := 1000.0
	for i := range n {
		if i%1000 == 0 {
			fmt.Fprintf(&b, `{"ph":"X","cat":"user_annotation","name":"ProfilerStep#%d","pid":1,"tid":1,"ts":%.3f,"dur":%.3f,"args":{"External id":%d}},`, i/1000, ts, 1000*2.5, i)
		}
		fmt.Fprintf(&b, `{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":%.3f,"dur":2.000,"args":{"External id":%d,"Sequence number":%d}},`, ts+0.1, i+1, i)
		ts += 2.5
	}
	b.WriteString(`{"ph":"i","name":"end","pid":1,"tid":1,"ts":1}],"baseTimeNanoseconds":1700000000000000000}`)
	return []byte(b.String())
}

// BenchmarkUploadTrace posts one rank's Kineto trace through the
// handler: decode, copy, encode and store (MB/s of JSON).
func BenchmarkUploadTrace(b *testing.B) {
	s := kairServer(b, Deps{})
	body := kinetoJSON(200_000)
	a := sendB(b, "POST", s.base+"captures", []byte(`{"ranks":[0,1]}`))
	var c store.Capture
	if err := json.Unmarshal(a, &c); err != nil {
		b.Fatal(err, string(a))
	}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("POST", s.base+"captures/"+c.ID+"/traces?rank=0", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 201 {
			b.Fatalf("%d %s", res.StatusCode, raw)
		}
	}
}

func sendB(b *testing.B, method, url string, body []byte) []byte {
	req, _ := http.NewRequest(method, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return raw
}

// An upload body is outside input: whatever it holds, decoding either
// fails with a 4xx error (a FieldError or ErrTooLarge) or yields rank's
// trace of valid events on the epoch clock.
func FuzzDecodeKinetoUpload(f *testing.F) {
	f.Add([]byte(`{"distributedInfo":{"rank":1},"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","ts":1.5,"dur":2,"pid":1,"tid":1}],"baseTimeNanoseconds":1700000000000000000}`), int64(0))
	f.Add([]byte(`[{"name":"ProfilerStep#3","ph":"X","ts":10,"dur":100,"pid":1,"tid":1}]`), int64(1_700_000_000_000_000_000))
	f.Add([]byte(`{"traceEvents":[{"ph":"X","name":"a","ts":9e15,"dur":1}]}`), int64(9_000_000_000_000_000_000))
	f.Add([]byte{0x1f, 0x8b, 0, 0}, int64(0))
	f.Add(kinetoJSON(30), int64(0))
	a := New(Deps{MaxTraceBytes: 1 << 20, MaxTraceEvents: 50})
	a.d.MaxTraceBytes, a.d.MaxTraceEvents = 1<<20, 50
	f.Fuzz(func(t *testing.T, body []byte, base int64) {
		if base < 0 || base > optrace.MaxAbsNS {
			return // the handler refuses such a header before decoding
		}
		tr, _, err := a.decodeKineto(context.Background(), bytes.NewReader(body), 1, base)
		if err != nil {
			if statusOf(err) >= 500 {
				t.Fatalf("%v answers %d", err, statusOf(err))
			}
			return
		}
		if tr.Rank != 1 || len(tr.Events) == 0 || len(tr.Events) > 50 {
			t.Fatalf("rank %d, %d events", tr.Rank, len(tr.Events))
		}
		for i := range tr.Events {
			if err := tr.Events[i].Validate(); err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		}
	})
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Regression (review finding 2): gzip inside gzip is refused before the
// inner layer is inflated — kineto.Decode would inflate it without a
// bound (this 8 MiB of JSON is a few hundred bytes twice compressed, 64 MiB
// not much more);
// one layer is still inflated under the byte limit.
func TestDecodeKinetoNestedGzip(t *testing.T) {
	huge := []byte(`{"traceEvents":[` + strings.Repeat(" ", 8<<20) + `]}`)
	twice := gzipped(t, gzipped(t, huge))
	a := &API{d: Deps{MaxTraceBytes: 1 << 20, MaxTraceEvents: 100}}
	_, _, err := a.decodeKineto(context.Background(), &capReader{r: bytes.NewReader(twice), n: a.d.MaxTraceBytes}, 0, 0)
	var fe *signal.FieldError
	if !errorsAs(err, &fe) || fe.Field != "body" || !strings.Contains(fe.Msg, "gzip inside gzip") {
		t.Fatalf("double gzip (%d bytes): %v", len(twice), err)
	}
	// One layer over the limit once inflated: 413.
	_, _, err = a.decodeKineto(context.Background(), bytes.NewReader(gzipped(t, huge)), 0, 0)
	if statusOf(err) != http.StatusRequestEntityTooLarge {
		t.Fatalf("inflated over the limit: %v", err)
	}
	// One layer within it decodes.
	tr, _, err := a.decodeKineto(context.Background(), bytes.NewReader(gzipped(t, kinetoJSON(30))), 0, 0)
	if err != nil || len(tr.Events) != 31 { // 30 ops and the step
		t.Fatalf("gzip once: %v", err)
	}
	// A cancelled request stops the decode with its context error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := a.decodeKineto(ctx, bytes.NewReader(gzipped(t, kinetoJSON(30))), 0, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// An upload whose X-Laggard-Clock holds an out-of-order sample stores the
// trace with the good samples, and says how many it dropped; samples
// sent with a trace whose times are not epoch ns are all dropped.
func TestUploadDropsBadClockSamples(t *testing.T) {
	s := kairServer(t, Deps{})
	a := send(t, "POST", s.base+"captures", "application/json", []byte(`{"ranks":[0,1]}`))
	if a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	id := obj(a)["id"].(string)
	req, _ := http.NewRequest("POST", s.base+"captures/"+id+"/traces?rank=0", bytes.NewReader(gzipped(t, kinetoJSON(30))))
	req.Header.Set(HeaderClock, "[[1700000000000000100,1700000000000000200,1700000000000000300,1700000000000000400],[1700000000000000500,1700000000000000700,1700000000000000600,1700000000000000800]]")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var ans UploadAnswer
	if err := json.Unmarshal(raw, &ans); err != nil || res.StatusCode != 201 || ans.ClockDropped != 1 || ans.Events != 31 {
		t.Fatalf("upload: %d %s", res.StatusCode, raw)
	}
	_, hb, err := s.st.OpTraces("kj", id)
	if err != nil || len(hb[0]) != 1 || hb[0][0].ServerRecvNS != 1700000000000000200 {
		t.Fatalf("stored clock %v %v", hb, err)
	}
	// Relative ts without a base: epoch-ns samples cannot apply to it;
	// the trace is stored without them.
	legacy := `[{"name":"ProfilerStep#7","ph":"X","ts":10,"dur":100,"pid":1,"tid":1},{"name":"aten::add","ph":"X","ts":20.5,"dur":3,"pid":1,"tid":1}]`
	req, _ = http.NewRequest("POST", s.base+"captures/"+id+"/traces?rank=1", strings.NewReader(legacy))
	req.Header.Set(HeaderClock, "[[1700000000000000100,1700000000000000200,1700000000000000300,1700000000000000400]]")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if err := json.Unmarshal(raw, &ans); err != nil || res.StatusCode != 201 || ans.ClockDropped != 1 {
		t.Fatalf("relative upload: %d %s", res.StatusCode, raw)
	}
	traces, hb, err := s.st.OpTraces("kj", id)
	if err != nil || len(traces) != 2 || len(hb[1]) != 0 {
		t.Fatalf("relative trace stored with clock %v (%d traces, %v)", hb[1], len(traces), err)
	}
}

// Issue 16 item 11: whitespace inside traceEvents, any amount, gzip or
// not, is refused by the token bound (413 naming the whitespace run)
// once the run passes 4 MiB — long before the 1 GiB byte limit, and
// without the decoder holding the run. The memory this saves is measured
// by internal/chaos (TestChaos_UploadMemory) and BenchmarkDecodeWhitespace.
func TestDecodeKinetoWhitespaceRun(t *testing.T) {
	run := strings.Repeat(" ", 64<<20)
	a := &API{d: Deps{MaxTraceBytes: 1 << 30, MaxTraceEvents: 100}}
	for name, body := range map[string][]byte{
		"gzip":  gzipped(t, []byte(`{"traceEvents":[`+run+`]}`)),
		"plain": []byte(`{"traceEvents":[{"ph":"X","name":"a","ts":1,"dur":1},` + run + `{"ph":"X","name":"b","ts":2,"dur":1}]}`),
	} {
		_, _, err := a.decodeKineto(context.Background(), bytes.NewReader(body), 0, 0)
		if statusOf(err) != http.StatusRequestEntityTooLarge || !strings.Contains(err.Error(), "whitespace run longer than 4194304 bytes") {
			t.Errorf("%s (%d bytes): %v, want 413 naming the whitespace run", name, len(body), err)
		}
	}
}
