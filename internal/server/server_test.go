package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

// metric returns the value of the exposition line that starts with
// series (name{labels...} exactly as rendered), or fails.
func metric(t *testing.T, base, series string) string {
	t.Helper()
	r := do(t, "GET", base+"/metrics", "", nil)
	for line := range strings.SplitSeq(string(r.body), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			return rest
		}
	}
	t.Fatalf("metric %s not exposed", series)
	return ""
}

func sameVectors(t *testing.T, got, want []stagevec.Vector) {
	t.Helper()
	norm := func(vs []stagevec.Vector) string {
		vs = slices.Clone(vs)
		for i := range vs {
			if len(vs[i].Probes) == 0 {
				vs[i].Probes = nil
			}
		}
		return string(mustJSON(t, vs))
	}
	if g, w := norm(got), norm(want); g != w {
		t.Fatalf("vectors differ:\n got %.400s\nwant %.400s", g, w)
	}
}

func export(t *testing.T, base, id, query string) (*signal.Job, []stagevec.Vector) {
	t.Helper()
	r := do(t, "GET", base+"/api/v1/jobs/"+id+"/export"+query, "", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var vs []stagevec.Vector
	job, err := stagefile.ReadJSONL(bytes.NewReader(r.body), stagefile.Sink{Vector: func(v *stagevec.Vector) error {
		vs = append(vs, *v)
		return nil
	}})
	if err != nil {
		t.Fatalf("export is not a valid stage matrix: %v", err)
	}
	return job, vs
}

// The whole contract against the real store: register, join, ingest in
// both encodings, list, export round trip, report, metrics.
func TestEndToEnd(t *testing.T) {
	_, ts := start(t, openStore(t, t.TempDir()), Config{})
	base := ts.URL
	job := testJob("train-1", 4)
	register(t, base, job, http.StatusCreated)
	register(t, base, job, http.StatusOK) // idempotent

	for _, r := range []int{2, 0} {
		body := fmt.Sprintf(`{"rank":%d,"host":"node%d","local_rank":%d,"role":{"dp":%d,"tp":0,"pp":0,"ep":0}}`, r, r, r, r)
		if res := do(t, "POST", base+"/api/v1/jobs/train-1/ranks", jsonType, []byte(body)); res.status != http.StatusOK {
			t.Fatalf("rank join: %d %s", res.status, res.body)
		}
	}

	first, second := vectors(4, 0, 50), vectors(4, 50, 100)
	for _, c := range []struct {
		ctype string
		body  []byte
		n     int
	}{{jsonType, jsonBatch(t, first), len(first)}, {protoType, protoBatch(t, second), len(second)}} {
		res := do(t, "POST", base+"/api/v1/jobs/train-1/vectors", c.ctype, c.body)
		var ack struct{ Accepted int }
		if res.status != http.StatusOK || json.Unmarshal(res.body, &ack) != nil || ack.Accepted != c.n {
			t.Fatalf("ingest %s: %d %s", c.ctype, res.status, res.body)
		}
	}

	var list struct {
		Jobs []struct {
			signal.Job
			FirstStep int64 `json:"first_step"`
			LastStep  int64 `json:"last_step"`
			Vectors   int64 `json:"vectors"`
		} `json:"jobs"`
	}
	res := do(t, "GET", base+"/api/v1/jobs", "", nil)
	if err := json.Unmarshal(res.body, &list); err != nil || len(list.Jobs) != 1 {
		t.Fatalf("jobs: %v %s", err, res.body)
	}
	got := list.Jobs[0]
	if got.ID != "train-1" || got.FirstStep != 0 || got.LastStep != 99 || got.Vectors != 400 || got.Created.IsZero() {
		t.Fatalf("job view: %+v", got)
	}
	if len(got.Ranks) != 2 || got.Ranks[0].Rank != 0 || got.Ranks[1].Host != "node2" || got.Ranks[1].Role.DP != 2 {
		t.Fatalf("ranks not merged in rank order: %+v", got.Ranks)
	}
	if r := do(t, "GET", base+"/api/v1/jobs/train-1", "", nil); r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"vectors":400`)) {
		t.Fatalf("GET job: %d %s", r.status, r.body)
	}

	xjob, xvs := export(t, base, "train-1", "")
	if xjob.ID != "train-1" || xjob.Schema.OrderHash() != job.Schema.OrderHash() || len(xjob.Ranks) != 2 {
		t.Fatalf("export header job: %+v", xjob)
	}
	sameVectors(t, xvs, append(first, second...))
	_, part := export(t, base, "train-1", "?from=10&to=19")
	sameVectors(t, part, first[40:80])

	res = do(t, "GET", base+"/api/v1/jobs/train-1/report?last=20&tau=0.9", "", nil)
	var jr analysis.Report
	if res.status != http.StatusOK || json.Unmarshal(res.body, &jr) != nil || len(jr.Groups) != 1 {
		t.Fatalf("report: %d %.300s", res.status, res.body)
	}
	rep := jr.Groups[0].Report
	if jr.SchemaVersion != analysis.ReportSchema || jr.Window.From != 80 || jr.Window.To != 99 {
		t.Fatalf("report window %+v schema %q", jr.Window, jr.SchemaVersion)
	}
	if rep.JobID != "train-1" || rep.FirstStep != 80 || rep.LastStep != 99 || rep.NumSteps != 20 || rep.NumRanks != 4 ||
		rep.Config.CandidateThreshold != 0.9 || rep.Top1 != stagevec.StageData || jr.Headline.Rank != 1 {
		t.Fatalf("report: job=%s steps=%d..%d n=%d ranks=%d tau=%v top1=%s headline=%+v", rep.JobID, rep.FirstStep, rep.LastStep,
			rep.NumSteps, rep.NumRanks, rep.Config.CandidateThreshold, rep.Top1, jr.Headline)
	}
	if v := metric(t, base, `laggard_ingest_vectors_total{encoding="protobuf",job="train-1"}`); v != "200" {
		t.Fatalf("protobuf vectors counter = %s, want 200", v)
	}
	if v := metric(t, base, `laggard_ingest_values_total{encoding="json",job="train-1"}`); v == "0" {
		t.Fatalf("values counter not counted")
	}
	if v := metric(t, base, `laggard_ingest_queue_capacity`); v != "1024" {
		t.Fatalf("queue capacity = %s", v)
	}
	if !strings.Contains(string(do(t, "GET", base+"/metrics", "", nil).body), "laggard_build_info{") {
		t.Fatal("laggard_build_info not exposed")
	}
	if r := do(t, "GET", base+"/healthz", "", nil); r.status != http.StatusOK || string(r.body) != "ok\n" {
		t.Fatalf("healthz: %d %q", r.status, r.body)
	}
}

// Every bad batch is refused whole with a status and a field, and nothing
// of it is stored.
func TestIngestRejects(t *testing.T) {
	st := newMemStore()
	_, ts := start(t, st, Config{MaxBodyBytes: 64 << 10})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	good := vectors(2, 0, 2)
	bad := vectors(2, 0, 2)
	bad[3].Durations = bad[3].Durations[:2]
	badProto := vectors(2, 0, 2)
	badProto[1].Rank = 7
	big := jsonBatch(t, vectors(2, 0, 1000))

	cases := []struct {
		name, path, ctype string
		body              []byte
		status            int
		field             string
		reason            string
	}{
		{"short durations", "j", jsonType, jsonBatch(t, bad), 400, "vectors[3].durations_ms", "invalid"},
		{"rank outside world (proto)", "j", protoType, protoBatch(t, badProto), 400, "vectors[1].rank", "invalid"},
		{"unknown field", "j", jsonType, []byte(`{"vectors":[{"step":1,"rnk":0}]}`), 400, "vectors[0].rnk", "invalid"},
		{"garbage proto", "j", protoType, []byte{0x0a, 0x09}, 400, "body", "invalid"},
		{"unknown job", "nope", jsonType, jsonBatch(t, good), 404, "", "unknown_job"},
		// An unsupported media type is refused before the API (TestD4_*).
		{"too large", "j", jsonType, big, 413, "", "too_large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := metric(t, ts.URL, `laggard_ingest_rejected_total{reason="`+c.reason+`"}`)
			r := do(t, "POST", ts.URL+"/api/v1/jobs/"+c.path+"/vectors", c.ctype, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			e := r.errBody(t)
			if e.Field != c.field || e.Error == "" {
				t.Fatalf("error body %+v, want field %q", e, c.field)
			}
			if n := st.count("j"); n != 0 {
				t.Fatalf("%d vectors stored from a rejected batch", n)
			}
			if after := metric(t, ts.URL, `laggard_ingest_rejected_total{reason="`+c.reason+`"}`); after == before {
				t.Fatalf("rejected{reason=%s} not counted", c.reason)
			}
		})
	}
	// A chunked body has no Content-Length; the streaming limit catches it.
	req, _ := http.NewRequest("POST", ts.URL+"/api/v1/jobs/j/vectors", struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.Header.Set("Content-Type", jsonType)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if req.ContentLength != 0 || res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversized body: %d (content length %d)", res.StatusCode, req.ContentLength)
	}
	if r := do(t, "POST", ts.URL+"/api/v1/jobs/j/vectors", jsonType, []byte(`{"vectors":[]}`)); r.status != 200 || !bytes.Contains(r.body, []byte(`"accepted":0`)) {
		t.Fatalf("empty batch: %d %s", r.status, r.body)
	}
}

func TestRegistration(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	base := ts.URL + "/api/v1/jobs/"
	register(t, ts.URL, testJob("a", 4), http.StatusCreated)

	other := stagevec.DefaultSchema()
	other.Stages = []string{"x", stagevec.StageOther}
	cases := []struct {
		name, id string
		body     []byte
		status   int
		field    string
	}{
		{"world size conflict", "a", mustJSON(t, testJob("a", 8)), 409, "world_size"},
		{"schema conflict", "a", mustJSON(t, &signal.Job{ID: "a", WorldSize: 4, Schema: other}), 409, "schema.stages"},
		{"accumulation conflict", "a", mustJSON(t, &signal.Job{ID: "a", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 4}), 409, "accumulation"},
		{"bad schema", "b", []byte(`{"world_size":2,"schema":{"version":"v","stages":["a","b"]}}`), 400, "schema.stages"},
		{"id mismatch", "b", mustJSON(t, testJob("a", 4)), 400, "id"},
		{"invalid id", "-b", []byte(`{"world_size":2}`), 400, "id"},
		{"rank of unknown job", "zz/ranks", []byte(`{"rank":0}`), 404, ""},
		{"rank outside world", "a/ranks", []byte(`{"rank":4}`), 400, "rank"},
	}
	for _, c := range cases {
		method := "PUT"
		if strings.HasSuffix(c.id, "/ranks") {
			method = "POST"
		}
		r := do(t, method, base+c.id, jsonType, c.body)
		if r.status != c.status || r.errBody(t).Field != c.field {
			t.Errorf("%s: %d %s, want %d field %q", c.name, r.status, r.body, c.status, c.field)
		}
	}

	// A compatible re-registration updates name/labels and adds probes.
	re := testJob("a", 4)
	re.Name, re.Schema.Probes = "renamed", append(re.Schema.Probes, "extra.probe")
	r := do(t, "PUT", base+"a", jsonType, mustJSON(t, re))
	var got signal.Job
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.Name != "renamed" || !slices.Contains(got.Schema.Probes, "extra.probe") {
		t.Fatalf("re-registration: %d %s", r.status, r.body)
	}

	// Ranks joining concurrently are all kept, in rank order.
	var wg sync.WaitGroup
	for rk := 3; rk >= 0; rk-- {
		wg.Go(func() {
			post(base+"a/ranks", []byte(fmt.Sprintf(`{"rank":%d,"host":"h%d"}`, rk, rk)))
		})
	}
	wg.Wait()
	r = do(t, "GET", base+"a", "", nil)
	if err := json.Unmarshal(r.body, &got); err != nil || len(got.Ranks) != 4 {
		t.Fatalf("ranks after concurrent joins: %s", r.body)
	}
	for i, rk := range got.Ranks {
		if rk.Rank != i || rk.Host != fmt.Sprintf("h%d", i) || rk.Role.DP != -1 {
			t.Fatalf("ranks[%d] = %+v", i, rk)
		}
	}
}

// With the writer held mid-commit and the queue full, the next request is
// shed with 429 + Retry-After; once released, the held ones succeed.
func TestQueueFull(t *testing.T) {
	st := newMemStore()
	st.gate, st.entered = make(chan struct{}), make(chan struct{}, 16)
	_, ts := start(t, st, Config{QueueDepth: 1, RetryAfter: 2 * time.Second})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	url := ts.URL + "/api/v1/jobs/j/vectors"
	body := jsonBatch(t, vectors(2, 0, 1))

	results := make(chan int, 2)
	go func() { results <- post(url, body) }()
	<-st.entered // first batch is in AppendMany, blocked
	go func() { results <- post(url, body) }()
	waitFor(t, func() bool { return metric(t, ts.URL, "laggard_ingest_queue_depth") == "1" })

	r := do(t, "POST", url, jsonType, body)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" {
		t.Fatalf("full queue: %d Retry-After=%q", r.status, r.header.Get("Retry-After"))
	}
	if v := metric(t, ts.URL, `laggard_ingest_shed_total{reason="queue_full"}`); v != "1" {
		t.Fatalf("shed counter %s", v)
	}
	if st.count("j") != 0 {
		t.Fatal("acknowledged before commit")
	}
	close(st.gate)
	for range 2 {
		if s := <-results; s != http.StatusOK {
			t.Fatalf("held request got %d", s)
		}
	}
	if st.count("j") != 4 {
		t.Fatalf("stored %d vectors, want 4", st.count("j"))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A failing store is a 500, and the batch is not counted as ingested.
func TestStoreError(t *testing.T) {
	st := newMemStore()
	_, ts := start(t, st, Config{})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	st.failErr = errors.New("disk on fire")
	r := do(t, "POST", ts.URL+"/api/v1/jobs/j/vectors", jsonType, jsonBatch(t, vectors(2, 0, 1)))
	if r.status != http.StatusInternalServerError || !strings.Contains(r.errBody(t).Error, "disk on fire") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if v := metric(t, ts.URL, `laggard_ingest_rejected_total{reason="store_error"}`); v != "1" {
		t.Fatalf("store_error count %s", v)
	}
}

// Data acknowledged before a restart is there after it.
func TestRestartDurability(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	s, err := New(Config{Logger: quiet}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	job := testJob("dur", 2)
	register(t, base, job, http.StatusCreated)
	do(t, "POST", base+"/api/v1/jobs/dur/ranks", jsonType, []byte(`{"rank":1,"host":"h1"}`))
	sent := vectors(2, 0, 30)
	if r := do(t, "POST", base+"/api/v1/jobs/dur/vectors", protoType, protoBatch(t, sent)); r.status != 200 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	_, ts := start(t, openStore(t, dir), Config{})
	xjob, xvs := export(t, ts.URL, "dur", "")
	if len(xjob.Ranks) != 1 || xjob.Ranks[0].Host != "h1" {
		t.Fatalf("rank join lost: %+v", xjob.Ranks)
	}
	sameVectors(t, xvs, sent)
	register(t, ts.URL, job, http.StatusOK) // still known: re-registration is idempotent
}

// Cancelling Serve's context lets queued ingest requests commit and be
// acknowledged before it returns.
func TestGracefulShutdownDrains(t *testing.T) {
	st := newMemStore()
	st.gate, st.entered = make(chan struct{}), make(chan struct{}, 16)
	s, err := New(Config{Logger: quiet, QueueDepth: 8}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutJob(testJob("j", 2)); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String() + "/api/v1/jobs/j/vectors"

	const n = 5
	results := make(chan int, n)
	for i := range n {
		body := jsonBatch(t, vectors(2, int64(i), int64(i+1)))
		go func() { results <- post(url, body) }()
		if i == 0 {
			<-st.entered // the writer holds batch 0 mid-commit; the rest queue
		}
	}
	waitFor(t, func() bool { return s.vectors.Depth() == n-1 })
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Serve returned before draining: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(st.gate)
	for range n {
		if code := <-results; code != http.StatusOK {
			t.Fatalf("in-flight request got %d during shutdown", code)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if st.count("j") != 2*n {
		t.Fatalf("stored %d vectors, want %d", st.count("j"), 2*n)
	}
	if _, err := s.vectors.Submit("j", nil, 0, 0); !errors.Is(err, ingest.ErrClosed) {
		t.Fatalf("queue still open after shutdown: %v", err)
	}
}

func TestReportErrors(t *testing.T) {
	st := newMemStore()
	_, ts := start(t, st, Config{Analysis: analysis.Limits{MaxCells: 1000}})
	register(t, ts.URL, testJob("j", 4), http.StatusCreated)
	base := ts.URL + "/api/v1/jobs/j/report"
	if r := do(t, "GET", base, "", nil); r.status != 404 || !strings.Contains(r.errBody(t).Error, "no stage vectors") {
		t.Fatalf("empty job: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", ts.URL+"/api/v1/jobs/j/vectors", jsonType, jsonBatch(t, vectors(4, 0, 100))); r.status != 200 {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	cases := []struct {
		query  string
		status int
		field  string
	}{
		{"?tau=0", 400, "tau"},
		{"?tau=x", 400, "tau"},
		{"?model_fit=maybe", 400, "model_fit"},
		{"?last=-1", 400, "last"},
		{"?from=5&to=2", 400, "to"},
		{"?from=-5", 400, "from"},
		{"?last=5&from=1", 400, "last"},
		{"?from=1000&to=2000", 404, ""},
		{"?from=90&to=5000", 200, ""}, // clamped to the stored steps
		{"?last=100", 413, ""},        // 100 steps × 4 ranks × 6 stages > 1000 cells
		{"?from=0&to=9&model_fit=true", 200, ""},
	}
	for _, c := range cases {
		r := do(t, "GET", base+c.query, "", nil)
		if r.status != c.status {
			t.Errorf("%s: %d %.200s, want %d", c.query, r.status, r.body, c.status)
			continue
		}
		if c.status != 200 && r.errBody(t).Field != c.field {
			t.Errorf("%s: field %q, want %q", c.query, r.errBody(t).Field, c.field)
		}
	}
	if r := do(t, "GET", ts.URL+"/api/v1/jobs/nope/report", "", nil); r.status != 404 {
		t.Fatalf("unknown job report: %d", r.status)
	}

	// Stored data never fails a report: a stored vector the job's schema
	// no longer accepts is left out and the report says so.
	st.mu.Lock()
	st.vecs["j"][0].Durations = []float64{1}
	st.mu.Unlock()
	r := do(t, "GET", base+"?from=0&to=3", "", nil)
	var jr analysis.Report
	if r.status != 200 || json.Unmarshal(r.body, &jr) != nil || len(jr.Notes) == 0 || !strings.Contains(strings.Join(jr.Notes, " "), "1 stored vectors do not fit") {
		t.Fatalf("bad stored vector: %d %.400s", r.status, r.body)
	}
}

func TestRoutes(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	if r := do(t, "GET", ts.URL+"/", "", nil); r.status != 200 || !strings.Contains(string(r.body), "/api/v1/jobs") {
		t.Fatalf("plain index: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", ts.URL+"/api/v2/x", "", nil); r.status != 404 || r.errBody(t).Error == "" {
		t.Fatalf("unknown API path: %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", ts.URL+"/api/v1/jobs/x", "", nil); r.status != 404 || !strings.Contains(r.errBody(t).Error, "unknown job") {
		t.Fatalf("DELETE job: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", ts.URL+"/api/v1/jobs", "", nil); r.status != 200 || string(r.body) != "{\"jobs\":[]}\n" {
		t.Fatalf("empty job list: %d %q", r.status, r.body)
	}

	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ui:"+r.URL.Path) })
	_, ts2 := start(t, newMemStore(), Config{UI: ui})
	if r := do(t, "GET", ts2.URL+"/ui/app.js", "", nil); string(r.body) != "ui:/ui/app.js" {
		t.Fatalf("UI not mounted: %s", r.body)
	}
	if v := metric(t, ts2.URL, `laggard_http_requests_total{code="200",route="/"}`); v != "1" {
		t.Fatalf("request counter by route: %s", v)
	}
}

// Ranks of another role declare their own stage list at join; vectors
// carry the order hash; the report diagnoses each role group on its own.
func TestRoleGroupsEndToEnd(t *testing.T) {
	_, ts := start(t, openStore(t, t.TempDir()), Config{})
	base := ts.URL + "/api/v1/jobs/pp"
	job := testJob("pp", 4)
	job.RunID = "run-1"
	register(t, ts.URL, job, http.StatusCreated)
	pp1 := signal.Schema{Version: "pp/v1", Stages: []string{"recv.wait", stagevec.StageForward, "send.wait", stagevec.StageOther}}
	join := func(rank, pp int, s *signal.Schema) resp {
		rk := signal.Rank{Rank: rank, Host: fmt.Sprint("h", rank), Role: signal.Role{DP: rank % 2, TP: -1, PP: pp, EP: -1}, Schema: s}
		return do(t, "POST", base+"/ranks", jsonType, mustJSON(t, rk))
	}
	def := stagevec.DefaultSchema()
	for _, j := range []struct {
		rank, pp int
		s        *signal.Schema
	}{{0, 0, &def}, {1, 0, &def}, {2, 1, &pp1}, {3, 1, &pp1}} {
		if r := join(j.rank, j.pp, j.s); r.status != http.StatusOK {
			t.Fatalf("join %d: %d %s", j.rank, r.status, r.body)
		}
	}
	other := signal.Schema{Version: "pp/v2", Stages: []string{"send.wait", stagevec.StageOther}}
	if r := join(3, 1, &other); r.status != http.StatusConflict || r.errBody(t).Field != "schema" || !strings.Contains(r.errBody(t).Error, "rank 3") {
		t.Fatalf("conflicting schema: %d %s", r.status, r.body)
	}
	var vs []stagevec.Vector
	for step := int64(0); step < 40; step++ {
		for r := 0; r < 2; r++ {
			data := 2.0
			if r == 1 {
				data = 60 // rank 1 is pp0's straggler in data
			}
			vs = append(vs, stagevec.Vector{Step: step, Rank: r, Durations: []float64{data, 20, 40, 1, 3}, WallMS: data + 64, OrderHash: def.OrderHash()})
		}
		for r := 2; r < 4; r++ {
			send := 5.0
			if r == 3 {
				send = 50 // rank 3 is pp1's straggler in send
			}
			vs = append(vs, stagevec.Vector{Step: step, Rank: r, Durations: []float64{3, 30, send}, WallMS: 33 + send, OrderHash: pp1.OrderHash()})
		}
	}
	if r := do(t, "POST", base+"/vectors", jsonType, jsonBatch(t, vs)); r.status != http.StatusOK {
		t.Fatalf("ingest: %d %s", r.status, r.body)
	}
	bad := []stagevec.Vector{{Step: 50, Rank: 2, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 15, OrderHash: def.OrderHash()}}
	if r := do(t, "POST", base+"/vectors", jsonType, jsonBatch(t, bad)); r.status != http.StatusConflict || !strings.Contains(r.errBody(t).Error, pp1.OrderHash()) {
		t.Fatalf("vector with another group's order hash: %d %s", r.status, r.body)
	}
	r := do(t, "GET", base+"/report", "", nil)
	var rep analysis.Report
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rep) != nil {
		t.Fatalf("report: %d %.300s", r.status, r.body)
	}
	if !rep.RoleAwareNeeded || len(rep.Groups) != 2 || rep.Headline.Rank != -1 {
		t.Fatalf("role-aware report: groups %d headline %+v", len(rep.Groups), rep.Headline)
	}
	for _, g := range rep.Groups {
		h := g.Report.Headline
		switch g.Group {
		case "pp0":
			if g.Report.Top1 != stagevec.StageData || h.Rank != 1 {
				t.Errorf("pp0: top1 %s rank %d", g.Report.Top1, h.Rank)
			}
		case "pp1":
			if g.Report.Top1 != "send.wait" || h.Rank != 3 {
				t.Errorf("pp1: top1 %s rank %d", g.Report.Top1, h.Rank)
			}
		default:
			t.Errorf("unexpected group %q", g.Group)
		}
	}
}
