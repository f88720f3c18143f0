package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// ingestServer serves the API over a real store in a temporary
// directory, with no middleware in front: these tests check the
// handlers' own rules.
func ingestServer(t *testing.T) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	qm, err := ingest.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	am, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	q := ingest.New(ingest.Config{}, Commit(st), quiet, qm)
	mux := http.NewServeMux()
	gate := ingest.NewGate(ingest.GateConfig{MaxBytes: 128 << 20, JobBytes: 64<<20 + ingest.SmallBody}) // as the server sizes it
	New(Deps{Catalog: catalog.New(st), Reader: st, Vectors: q, Collectives: st, Gate: gate, Metrics: am, Log: quiet, MaxBodyBytes: 64 << 20}).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { ts.Close(); q.Close(); st.Close() })
	return ts.URL
}

type answer struct {
	status int
	body   ErrorBody
	raw    []byte
}

func send(t *testing.T, method, url, ctype string, body []byte) answer {
	t.Helper()
	return sendReader(t, method, url, ctype, bytes.NewReader(body))
}

// sendReader is send with a body of any reader; one that is not a
// bytes/strings reader has no known length and goes out chunked.
func sendReader(t *testing.T, method, url, ctype string, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
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
	raw, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, raw: raw}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func register(t *testing.T, base, id string) {
	t.Helper()
	if a := send(t, "PUT", base+"/api/v1/jobs/"+id, "application/json", []byte(`{"world_size":2}`)); a.status != http.StatusCreated {
		t.Fatalf("register %s: %d %s", id, a.status, a.raw)
	}
}

func batch(steps ...int64) []byte {
	var b strings.Builder
	b.WriteString(`{"vectors":[`)
	for i, s := range steps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"step":%d,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}`, s)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// TestD4_FormContentTypeRejected: vector posts were accepted with the
// form content type an HTML page can send cross-site, and rank posts
// ignored the content type. Every body-carrying API call now wants JSON
// (or protobuf for vectors) and says so with 415.
func TestD4_FormContentTypeRejected(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	rank := []byte(`{"rank":1}`)
	job := []byte(`{"world_size":2}`)
	cases := []struct {
		name, method, path, ctype string
		body                      []byte
		status                    int
	}{
		{"vectors form", "POST", "/api/v1/jobs/j/vectors", "application/x-www-form-urlencoded", batch(1), 415},
		{"vectors multipart", "POST", "/api/v1/jobs/j/vectors", "multipart/form-data; boundary=x", batch(1), 415},
		{"vectors text/plain", "POST", "/api/v1/jobs/j/vectors", "text/plain", batch(1), 415},
		{"vectors no type", "POST", "/api/v1/jobs/j/vectors", "", batch(1), 415},
		{"vectors json", "POST", "/api/v1/jobs/j/vectors", "application/json; charset=utf-8", batch(1), 200},
		{"rank form", "POST", "/api/v1/jobs/j/ranks", "application/x-www-form-urlencoded", rank, 415},
		{"rank text/plain", "POST", "/api/v1/jobs/j/ranks", "text/plain", rank, 415},
		{"rank no type", "POST", "/api/v1/jobs/j/ranks", "", rank, 415},
		{"rank protobuf", "POST", "/api/v1/jobs/j/ranks", "application/x-protobuf", rank, 415},
		{"rank json", "POST", "/api/v1/jobs/j/ranks", "application/json", rank, 200},
		{"job form", "PUT", "/api/v1/jobs/k", "application/x-www-form-urlencoded", job, 415},
		{"job no type", "PUT", "/api/v1/jobs/k", "", job, 415},
		{"job json", "PUT", "/api/v1/jobs/k", "application/json", job, 201},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := send(t, c.method, base+c.path, c.ctype, c.body)
			if a.status != c.status {
				t.Fatalf("status %d, want %d: %s", a.status, c.status, a.raw)
			}
			if c.status == 415 && !strings.Contains(a.body.Error, "application/json") {
				t.Fatalf("415 does not say what to send: %s", a.raw)
			}
		})
	}
}

// TestD1_StepFarOutsideRangeRejected: one vector with step 2^62 broke a
// job's reports for good. Ingest now refuses a step far outside the
// job's stored range, naming the vector and the range, and stores
// nothing of that batch; ordinary progress, a resume from a later
// checkpoint and a replay of old steps are still accepted.
func TestD1_StepFarOutsideRangeRejected(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	post := func(steps ...int64) answer {
		return send(t, "POST", base+"/api/v1/jobs/j/vectors", "application/json", batch(steps...))
	}
	if a := post(0, 1, 2, 3); a.status != 200 {
		t.Fatalf("first batch: %d %s", a.status, a.raw)
	}
	a := post(4, 5, 1<<40)
	if a.status != http.StatusBadRequest || a.body.Field != "vectors[2].step" || !strings.Contains(a.body.Error, "[0, 3]") {
		t.Fatalf("far step: %d %s; want 400 on vectors[2].step naming the stored range [0, 3]", a.status, a.raw)
	}
	var view struct {
		LastStep int64 `json:"last_step"`
		Vectors  int64 `json:"vectors"`
	}
	res := send(t, "GET", base+"/api/v1/jobs/j", "", nil)
	if err := json.Unmarshal(res.raw, &view); err != nil || view.LastStep != 3 || view.Vectors != 4 {
		t.Fatalf("after the refused batch: %s; want last_step 3 and 4 vectors (nothing of it stored)", res.raw)
	}
	for _, ok := range []struct {
		name  string
		steps []int64
	}{
		{"progress", []int64{4, 5, 6}},
		{"resume from a later checkpoint", []int64{stagevec.MinStepSlack}},
		{"replay of old steps", []int64{0, 1}},
	} {
		if a := post(ok.steps...); a.status != 200 {
			t.Fatalf("%s: %d %s", ok.name, a.status, a.raw)
		}
	}
	// A fresh job is anchored at its first batch's smallest step.
	register(t, base, "fresh")
	a = send(t, "POST", base+"/api/v1/jobs/fresh/vectors", "application/json", batch(10, 11, 1<<62))
	if a.status != http.StatusBadRequest || a.body.Field != "vectors[2].step" {
		t.Fatalf("fresh job, step 2^62: %d %s", a.status, a.raw)
	}
	a = send(t, "POST", base+"/api/v1/jobs/fresh/vectors", "application/json", batch(10, 11, 1<<47))
	if a.status != http.StatusBadRequest || a.body.Field != "vectors[2].step" || !strings.Contains(a.body.Error, "no stored steps") {
		t.Fatalf("fresh job, far step: %d %s", a.status, a.raw)
	}
	// The protobuf path is checked the same way.
	pb, err := laggardv1.EncodeProtoBatch([]stagevec.Vector{{Step: 1 << 45, Rank: 0, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 21}})
	if err != nil {
		t.Fatal(err)
	}
	if a := send(t, "POST", base+"/api/v1/jobs/j/vectors", "application/x-protobuf", pb); a.status != http.StatusBadRequest || a.body.Field != "vectors[0].step" {
		t.Fatalf("protobuf far step: %d %s", a.status, a.raw)
	}
}

// TestD13_APIErrorsShortAndDuplicatesRejected: through the handlers, a
// 10 MB bad value gives an error body under 1 KB, and duplicate keys are
// 400 naming the path.
func TestD13_APIErrorsShortAndDuplicatesRejected(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	big := strings.Repeat("x", 10<<20)
	cases := []struct {
		name, method, path string
		body               string
		field              string
	}{
		{"vector unknown field", "POST", "/api/v1/jobs/j/vectors", `{"vectors":[{"` + big + `":1}]}`, ""},
		{"vector string step", "POST", "/api/v1/jobs/j/vectors", `{"vectors":[{"step":"` + big + `"}]}`, "vectors[0].step"},
		{"vector duplicate stage", "POST", "/api/v1/jobs/j/vectors",
			`{"vectors":[{"step":1,"rank":0,"stages_ms":{"forward":1,"forward":2},"wall_ms":3}]}`, "vectors[0].stages_ms.forward"},
		{"job id", "PUT", "/api/v1/jobs/k", `{"id":"` + big + `","world_size":2}`, "id"},
		{"job duplicate label", "PUT", "/api/v1/jobs/k", `{"world_size":2,"labels":{"a":"1","a":"2"}}`, "labels.a"},
		{"rank host", "POST", "/api/v1/jobs/j/ranks", `{"rank":0,"host":"` + big + `"}`, "host"},
		{"rank duplicate", "POST", "/api/v1/jobs/j/ranks", `{"rank":0,"rank":1}`, "rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := send(t, c.method, base+c.path, "application/json", []byte(c.body))
			if a.status != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %.300s", a.status, a.raw)
			}
			if len(a.raw) >= 1024 {
				t.Fatalf("error body of %d bytes, want < 1 KiB: %.200s…", len(a.raw), a.raw)
			}
			if c.field != "" && a.body.Field != c.field {
				t.Fatalf("field %q, want %q: %s", a.body.Field, c.field, a.raw)
			}
		})
	}
}

// TestD2_LargeBatchInParts: a batch larger than one queue part is stored
// whole and acknowledged once, with or without a Content-Length, and a
// second, chunked post (the gate reserving as it reads) is not refused
// for bytes the first left reserved.
func TestD2_LargeBatchInParts(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	const n = 3*submitPart + 17
	steps := make([]int64, n)
	for i := range steps {
		steps[i] = int64(i)
	}
	body := batch(steps...)
	if a := send(t, "POST", base+"/api/v1/jobs/j/vectors", "application/json", body); a.status != http.StatusOK ||
		!strings.Contains(string(a.raw), fmt.Sprintf(`"accepted":%d`, n)) {
		t.Fatalf("large batch: %d %s", a.status, a.raw)
	}
	// The same batch again without a length (chunked): the gate reserves
	// as it reads; the keys are rewritten, not added.
	if a := sendReader(t, "POST", base+"/api/v1/jobs/j/vectors", "application/json", io.MultiReader(bytes.NewReader(body))); a.status != http.StatusOK {
		t.Fatalf("chunked large batch: %d %s", a.status, a.raw)
	}
	var view struct {
		LastStep int64 `json:"last_step"`
		Vectors  int64 `json:"vectors"`
	}
	a := send(t, "GET", base+"/api/v1/jobs/j", "", nil)
	if err := json.Unmarshal(a.raw, &view); err != nil || view.Vectors != n || view.LastStep != n-1 {
		t.Fatalf("after two large batches: %s; want %d vectors up to step %d", a.raw, n, n-1)
	}
}

// A chunked body past the body limit is 413 (send smaller batches), not a
// 429 from the gate's share that a client would retry for ever.
func TestChunkedBodyPastLimitIs413(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	body := io.MultiReader(strings.NewReader(`{"vectors":[`), strings.NewReader(strings.Repeat(" ", 64<<20)), strings.NewReader(`]}`))
	if a := sendReader(t, "POST", base+"/api/v1/jobs/j/vectors", "application/json", body); a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body past the limit: %d %s, want 413", a.status, a.raw)
	}
}
