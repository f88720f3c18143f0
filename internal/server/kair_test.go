package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/store"
)

// kairOff: tests drive captures by hand; no sweep.
var kairOff = control.KairConfig{Interval: -1}

// rankTrace rewrites the Kineto testdata trace (one rank of a 2-rank job)
// as rank's: distributedInfo says rank, and every timestamp moves by
// shiftUS (a rank whose clock runs ahead, or which is late).
func rankTrace(t testing.TB, rank int, shiftUS float64) []byte {
	t.Helper()
	return rankTraceN(t, rank, shiftUS, -1)
}

// rankTraceN is rankTrace keeping the first n traceEvents elements (all
// when n < 0).
func rankTraceN(t testing.TB, rank int, shiftUS float64, n int) []byte {
	t.Helper()
	raw, err := os.ReadFile("../wire/kineto/testdata/rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	doc["distributedInfo"].(map[string]any)["rank"] = rank
	doc["distributedInfo"].(map[string]any)["world_size"] = 4
	if evs := doc["traceEvents"].([]any); n >= 0 && n < len(evs) {
		doc["traceEvents"] = evs[:n]
	}
	for _, e := range doc["traceEvents"].([]any) {
		ev := e.(map[string]any)
		if ts, ok := ev["ts"].(json.Number); ok {
			f, _ := ts.Float64()
			ev["ts"] = json.Number(fmt.Sprintf("%.3f", f+shiftUS))
		}
	}
	return mustJSON(t, doc)
}

type kairEnv struct {
	t   *testing.T
	st  *store.Store
	srv *Server
	url string
}

func newKairEnv(t *testing.T, cfg Config) *kairEnv {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	cfg.Access = Access{Tokens: testTokens(t)}
	cfg.Greyhound = greyhoundOff
	if cfg.Kair == (control.KairConfig{}) {
		cfg.Kair = kairOff
	}
	srv, ts := start(t, st, cfg)
	e := &kairEnv{t: t, st: st, srv: srv, url: ts.URL}
	if r := e.call("PUT", "/api/v1/jobs/j", tokIngestJ, jsonType, mustJSON(t, testJob("j", 4)), nil); r.status != 201 {
		t.Fatalf("PUT job: %d %s", r.status, r.body)
	}
	return e
}

func (e *kairEnv) call(method, path, token, ctype string, body []byte, hdr map[string]string) resp {
	e.t.Helper()
	return call{method: method, path: path, ctype: ctype, body: body, token: token, header: hdr}.do(e.t, e.url)
}

func (e *kairEnv) capture(r resp, want int) *store.Capture {
	e.t.Helper()
	if r.status != want {
		e.t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	var c store.Capture
	if err := json.Unmarshal(r.body, &c); err != nil {
		e.t.Fatalf("%v: %s", err, r.body)
	}
	return &c
}

// stored returns the ranks whose trace the store holds for capture id.
func (e *kairEnv) stored(id string) []int {
	e.t.Helper()
	traces, _, err := e.st.OpTraces("j", id)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []int
	for _, tr := range traces {
		out = append(out, tr.Rank)
	}
	return out
}

func clockHeader(skewNS int64) string {
	t0 := time.Now().UnixNano()
	var s []string
	for i := range 3 {
		base := t0 + int64(i)*1e9
		s = append(s, fmt.Sprintf("[%d,%d,%d,%d]", base+skewNS, base+100_000, base+150_000, base+250_000+skewNS))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// The whole capture path: a manual capture, each rank's poll (the
// heartbeat), four ranks' Kineto uploads (one gzipped, one with its
// clock 3 ms ahead), the KAIR report and a step's timeline.
func TestKairCaptureEndToEnd(t *testing.T) {
	e := newKairEnv(t, Config{})
	c := e.capture(e.call("POST", "/api/v1/jobs/j/captures", tokIngestJ, jsonType, []byte(`{"steps":1,"reason":"looks slow"}`), nil), 201)
	if !slices.Equal(c.Ranks, []int{0, 1, 2, 3}) || c.State != store.CapturePending || c.Trigger != "manual" || c.Reason != "looks slow" || c.Steps != 1 || c.Every != 1 {
		t.Fatalf("capture %+v", c)
	}
	if r := e.call("POST", "/api/v1/jobs/j/captures", tokAdmin, jsonType, []byte(`{}`), nil); r.status != 409 {
		t.Fatalf("second open capture: %d %s", r.status, r.body)
	}
	for rank := range 4 {
		r := e.call("GET", "/api/v1/jobs/j/captures/pending?rank="+fmt.Sprint(rank), tokIngestJ, "", nil, nil)
		var p api.PendingAnswer
		if r.status != 200 || json.Unmarshal(r.body, &p) != nil || p.Capture == nil || p.Capture.ID != c.ID {
			t.Fatalf("poll rank %d: %d %s", rank, r.status, r.body)
		}
		if p.ServerRecvNS <= 0 || p.ServerSendNS < p.ServerRecvNS {
			t.Errorf("poll times %d %d", p.ServerRecvNS, p.ServerSendNS)
		}
	}
	got := e.capture(e.call("GET", "/api/v1/jobs/j/captures/"+c.ID, tokRead, "", nil, nil), 200)
	if got.State != store.CaptureRecording || !slices.Equal(got.Fetched, []int{0, 1, 2, 3}) {
		t.Fatalf("after polls: %+v", got)
	}
	up := "/api/v1/jobs/j/captures/" + c.ID + "/traces?rank="
	for rank := range 4 {
		body := rankTrace(t, rank, float64(rank)*7) // rank 3 starts 21 µs late
		ctype := jsonType
		if rank == 1 {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			zw.Write(body)
			zw.Close()
			body, ctype = buf.Bytes(), "application/gzip"
		}
		skew := int64(0)
		if rank == 2 {
			skew = 3e6
		}
		r := e.call("POST", up+fmt.Sprint(rank), tokIngestJ, ctype, body, map[string]string{api.HeaderClock: clockHeader(skew)})
		var ans api.UploadAnswer
		if r.status != 201 || json.Unmarshal(r.body, &ans) != nil || ans.Rank != rank || ans.Events != 12 || ans.Steps != 1 {
			t.Fatalf("upload rank %d: %d %s", rank, r.status, r.body)
		}
	}
	if s := e.stored(c.ID); !slices.Equal(s, []int{0, 1, 2, 3}) {
		t.Fatalf("stored ranks %v", s)
	}
	// A rank that uploaded no longer gets the plan.
	if r := e.call("GET", "/api/v1/jobs/j/captures/pending?rank=0", tokIngestJ, "", nil, nil); r.status != 200 || !strings.Contains(string(r.body), `"capture":null`) {
		t.Fatalf("poll after upload: %d %s", r.status, r.body)
	}
	r := e.call("GET", "/api/v1/jobs/j/kair", tokRead, "", nil, nil)
	if r.status != 200 {
		t.Fatalf("kair: %d %s", r.status, r.body)
	}
	if os.Getenv("KAIR_DUMP") != "" {
		os.WriteFile(os.Getenv("KAIR_DUMP"), r.body, 0o644)
	}
	var ans struct {
		Capture store.Capture   `json:"capture"`
		Report  json.RawMessage `json:"report"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		t.Fatal(err)
	}
	var rep analysis.KairReport
	if err := json.Unmarshal(ans.Report, &rep); err != nil {
		t.Fatalf("report: %v: %s", err, ans.Report)
	}
	if ans.Capture.ID != c.ID || ans.Capture.State != store.CaptureComplete || !slices.Equal(ans.Capture.Uploaded, []int{0, 1, 2, 3}) {
		t.Errorf("answer capture %+v", ans.Capture)
	}
	if !slices.Equal(rep.Ranks, []int{0, 1, 2, 3}) || rep.Headline == "" || len(rep.Clock) != 4 {
		t.Errorf("report ranks %v clock %v headline %q", rep.Ranks, rep.Clock, rep.Headline)
	}
	// The same capture by id is the cached answer.
	if r2 := e.call("GET", "/api/v1/jobs/j/kair?capture="+c.ID, tokRead, "", nil, nil); r2.status != 200 || !bytes.Equal(r2.body, r.body) {
		t.Errorf("kair by id: %d, differs from the default: %v", r2.status, !bytes.Equal(r2.body, r.body))
	}
	r = e.call("GET", "/api/v1/jobs/j/kair/timeline?step=4&capture="+c.ID, tokRead, "", nil, nil)
	if os.Getenv("KAIR_DUMP") != "" {
		os.WriteFile(os.Getenv("KAIR_DUMP")+".timeline", r.body, 0o644)
	}
	var tl analysis.KairTimeline
	if r.status != 200 || json.Unmarshal(r.body, &tl) != nil {
		t.Fatalf("timeline: %d %s", r.status, r.body)
	}
	if tl.Step != 4 || len(tl.Ranks) != 4 || tl.Truncated {
		t.Fatalf("timeline %+v", tl)
	}
	for _, tr := range tl.Ranks {
		if len(tr.Events) != 11 { // the step's events: Optimizer.step lies outside ProfilerStep#4
			t.Errorf("rank %d: %d events", tr.Rank, len(tr.Events))
		}
		lanes := map[string]bool{}
		for _, ev := range tr.Events {
			lanes[ev.Lane] = true
			if ev.StartNS < 0 {
				t.Errorf("rank %d %s starts at %d, before the step's earliest start", tr.Rank, ev.Name, ev.StartNS)
			}
		}
		if !lanes["t4121"] || !lanes["s7"] || !lanes["s21"] {
			t.Errorf("rank %d lanes %v", tr.Rank, lanes)
		}
	}
	if r := e.call("GET", "/api/v1/jobs/j/kair/timeline?step=99&capture="+c.ID, tokRead, "", nil, nil); r.status != 400 || r.errBody(t).Field != "step" {
		t.Errorf("timeline of a step not recorded: %d %s", r.status, r.body)
	}
	// Listing, then the metrics.
	r = e.call("GET", "/api/v1/jobs/j/captures", tokRead, "", nil, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"captures":[{"id":"`+c.ID) {
		t.Errorf("list: %d %s", r.status, r.body)
	}
	m := e.call("GET", "/metrics", tokRead, "", nil, nil)
	for _, want := range []string{
		`laggard_kair_captures_total{state="pending",trigger="manual"} 1`,
		`laggard_kair_captures_total{state="recording",trigger="manual"} 1`,
		`laggard_kair_captures_total{state="complete",trigger="manual"} 1`,
		`laggard_kair_uploads_total 4`,
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Uploads that fail leave nothing stored and name what is wrong.
func TestKairBadUploads(t *testing.T) {
	e := newKairEnv(t, Config{MaxTraceBytes: 64 << 10, MaxTraceEvents: 10})
	c := e.capture(e.call("POST", "/api/v1/jobs/j/captures", tokIngestJ, jsonType, []byte(`{"ranks":[1,2],"steps":2}`), nil), 201)
	up := "/api/v1/jobs/j/captures/" + c.ID + "/traces?rank="
	good := rankTrace(t, 1, 0)
	big := bytes.Repeat([]byte(" "), 70<<10)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte(" "), 1<<20)) // inflates past the byte limit
	zw.Close()
	for _, tc := range []struct {
		name, path, ctype string
		body              []byte
		hdr               map[string]string
		status            int
		field, reason     string
	}{
		{"truncated", up + "1", jsonType, good[:len(good)/2], nil, 400, "body", "invalid"},
		{"wrong rank", up + "2", jsonType, rankTraceN(t, 1, 0, 8), nil, 400, "rank", "wrong_rank"},
		{"rank not asked", up + "3", jsonType, rankTraceN(t, 3, 0, 8), nil, 400, "rank", "wrong_rank"},
		{"rank outside the job", up + "9", jsonType, good, nil, 400, "rank", "wrong_rank"},
		{"over the byte limit", up + "1", jsonType, append(big, good...), nil, 413, "", "too_large"},
		{"inflates over the limit", up + "1", "application/gzip", gz.Bytes(), nil, 413, "", "too_large"},
		{"over the event limit", up + "1", jsonType, good, nil, 413, "", "too_large"}, // 12 events > 10
		{"unknown capture", "/api/v1/jobs/j/captures/c000000000000/traces?rank=1", jsonType, good, nil, 404, "", "unknown_capture"},
		{"bad clock header", up + "1", jsonType, good, map[string]string{api.HeaderClock: `[[1,2,3]]`}, 400, api.HeaderClock + "[0]", "invalid"},
		{"empty body", up + "1", jsonType, nil, nil, 400, "body", "invalid"},
		{"media type", up + "1", "application/xml", good, nil, 415, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.call("POST", tc.path, tokIngestJ, tc.ctype, tc.body, tc.hdr)
			if r.status != tc.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, tc.status)
			}
			if eb := r.errBody(t); tc.field != "" && eb.Field != tc.field {
				t.Errorf("field %q (%s), want %q", eb.Field, eb.Error, tc.field)
			}
			if s := e.stored(c.ID); len(s) != 0 {
				t.Errorf("stored %v after a failed upload", s)
			}
		})
	}
	got := e.capture(e.call("GET", "/api/v1/jobs/j/captures/"+c.ID, tokRead, "", nil, nil), 200)
	if len(got.Uploaded) != 0 || got.State != store.CapturePending {
		t.Errorf("capture after failed uploads: %+v", got)
	}
	m := string(e.call("GET", "/metrics", tokRead, "", nil, nil).body)
	for _, want := range []string{`laggard_kair_rejected_total{reason="too_large"} 3`, `laggard_kair_rejected_total{reason="wrong_rank"} 3`,
		`laggard_kair_rejected_total{reason="unknown_capture"} 1`, `laggard_kair_uploads_total 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s in\n%s", want, grepLines(m, "laggard_kair_"))
		}
	}
	// The client's error report, then a report with too few ranks.
	if r := e.call("POST", up+"2", tokIngestJ, "", nil, map[string]string{api.HeaderCaptureError: "torch.profiler is not importable"}); r.status != 201 {
		t.Fatalf("capture error: %d %s", r.status, r.body)
	}
	got = e.capture(e.call("GET", "/api/v1/jobs/j/captures/"+c.ID, tokRead, "", nil, nil), 200)
	if got.Failed["2"] != "torch.profiler is not importable" {
		t.Errorf("failed %v", got.Failed)
	}
	if r := e.call("GET", "/api/v1/jobs/j/kair?capture="+c.ID, tokRead, "", nil, nil); r.status != 409 {
		t.Errorf("kair without uploads: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/api/v1/jobs/j/kair", tokRead, "", nil, nil); r.status != 404 {
		t.Errorf("kair, no capture with uploads: %d %s", r.status, r.body)
	}
	// Cancelled: uploads are refused (409), cancelling again is harmless.
	if got := e.capture(e.call("DELETE", "/api/v1/jobs/j/captures/"+c.ID, tokIngestJ, "", nil, nil), 200); got.State != store.CaptureCancelled {
		t.Fatalf("cancel: %+v", got)
	}
	if r := e.call("POST", up+"1", tokIngestJ, jsonType, rankTrace(t, 1, 0), nil); r.status != 409 {
		t.Errorf("upload to a cancelled capture: %d %s", r.status, r.body)
	}
	if r := e.call("DELETE", "/api/v1/jobs/j/captures/"+c.ID, tokIngestJ, "", nil, nil); r.status != 200 {
		t.Errorf("second cancel: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/api/v1/jobs/j/captures/c00000000000z", tokRead, "", nil, nil); r.status != 404 {
		t.Errorf("unknown capture id: %d %s", r.status, r.body)
	}
}

// Each KAIR route needs its scope: reads need read; creating and
// cancelling a capture, the poll and the upload need ingest for the job.
func TestKairRouteScopes(t *testing.T) {
	e := newKairEnv(t, Config{})
	const cid = "c0123456789ab"
	for _, tc := range []struct {
		method, path string
		allow, deny  []string
	}{
		{"GET", "/api/v1/jobs/j/captures", []string{tokRead, tokAdmin}, []string{tokIngestJ, tokIngestK}},
		{"GET", "/api/v1/jobs/j/captures/" + cid, []string{tokRead}, []string{tokIngestJ}},
		{"GET", "/api/v1/jobs/j/kair", []string{tokRead}, []string{tokIngestJ}},
		{"GET", "/api/v1/jobs/j/kair/timeline", []string{tokRead}, []string{tokIngestJ}},
		{"GET", "/api/v1/jobs/j/captures/pending?rank=0", []string{tokIngestJ, tokAdmin}, []string{tokRead, tokIngestK}},
		{"POST", "/api/v1/jobs/j/captures/" + cid + "/traces?rank=0", []string{tokIngestJ}, []string{tokRead, tokIngestK}},
		{"DELETE", "/api/v1/jobs/j/captures/" + cid, []string{tokIngestJ}, []string{tokRead, tokIngestK}},
		{"POST", "/api/v1/jobs/j/captures", []string{tokIngestJ}, []string{tokRead, tokIngestK}},
	} {
		for _, tok := range append(slices.Clone(tc.deny), "") {
			want := 403
			if tok == "" {
				want = 401
			}
			if r := e.call(tc.method, tc.path, tok, jsonType, []byte(`{}`), nil); r.status != want {
				t.Errorf("%s %s with %q: %d, want %d", tc.method, tc.path, tok, r.status, want)
			}
		}
		for _, tok := range tc.allow {
			if r := e.call(tc.method, tc.path, tok, jsonType, []byte(`{}`), nil); r.status == 401 || r.status == 403 {
				t.Errorf("%s %s with %q: %d %s", tc.method, tc.path, tok, r.status, r.body)
			}
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
