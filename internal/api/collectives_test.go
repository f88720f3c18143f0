package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

const callEnter0 = int64(1_700_000_000) * 1e9

// callBatch is ranks × n calls on "world" from seq0, plus each rank's
// communicator report when comms is set.
func callBatch(ranks int, seq0, n int64, comms bool) *collective.Batch {
	b := &collective.Batch{}
	for r := range ranks {
		if comms {
			b.Comms = append(b.Comms, collective.Comm{ID: "world", Size: ranks, Rank: r, CommRank: r, Backend: "nccl"})
		}
		for s := seq0; s < seq0+n; s++ {
			e := callEnter0 + s*1e6 + int64(r)*100
			b.Calls = append(b.Calls, collective.Call{Rank: r, Comm: "world", Seq: s, Op: collective.AllReduce, Bytes: 4096,
				Peer: -1, Root: -1, Step: -1, EnterNS: e, ReturnNS: e + 50})
		}
	}
	return b
}

func jsonCalls(t testing.TB, b *collective.Batch) []byte {
	raw, err := laggardv1.MarshalJSONCollectives(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func collectivesAnswer(t *testing.T, a answer) CollectivesAnswer {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	var ans CollectivesAnswer
	if err := json.Unmarshal(a.raw, &ans); err != nil {
		t.Fatal(err)
	}
	return ans
}

func TestCollectivesIngest(t *testing.T) {
	base := ingestServer(t)
	url := base + "/api/v1/jobs/nccl-job/collectives"
	// Unknown job without ?world: 404 naming the parameter.
	a := send(t, "POST", url, "application/json", jsonCalls(t, callBatch(2, 0, 3, true)))
	if a.status != http.StatusNotFound || !strings.Contains(a.body.Error, "?world=") {
		t.Fatalf("unknown job: %d %s", a.status, a.raw)
	}
	if a := send(t, "POST", url+"?world=x", "application/json", jsonCalls(t, callBatch(2, 0, 3, true))); a.status != 400 || a.body.Field != "world" {
		t.Fatalf("bad world: %d %s", a.status, a.raw)
	}
	// An invalid batch registers nothing.
	bad := callBatch(2, 0, 3, false)
	bad.Calls[3].EnterNS = 12
	if a := send(t, "POST", url+"?world=2", "application/json", jsonCalls(t, bad)); a.status != 400 || a.body.Field != "calls[3].enter_ns" {
		t.Fatalf("invalid: %d %s", a.status, a.raw)
	}
	if a := send(t, "GET", base+"/api/v1/jobs/nccl-job", "", nil); a.status != 404 {
		t.Fatalf("an invalid post registered the job: %d", a.status)
	}
	// With ?world the post registers the job (pure-NCCL agent).
	ans := collectivesAnswer(t, send(t, "POST", url+"?world=2", "application/json", jsonCalls(t, callBatch(2, 0, 3, true))))
	if ans != (CollectivesAnswer{AcceptedCalls: 6, AcceptedComms: 2}) {
		t.Fatalf("first post: %+v", ans)
	}
	// A resent batch (protobuf this time) is idempotent.
	pbb, _ := laggardv1.MarshalProtoCollectives(callBatch(2, 0, 3, false))
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/x-protobuf", pbb)); ans != (CollectivesAnswer{Duplicates: 6}) {
		t.Fatalf("resend: %+v", ans)
	}
	// The Python client registers the job afterwards with its own schema: 200, not 409.
	put := []byte(`{"world_size":2,"schema":{"version":"v9","stages":["a","b","step.other_cpu_wall"]},"run_id":"r1"}`)
	if a := send(t, "PUT", base+"/api/v1/jobs/nccl-job", "application/json", put); a.status != 200 {
		t.Fatalf("explicit registration after implicit: %d %s", a.status, a.raw)
	}
	if a := send(t, "PUT", base+"/api/v1/jobs/nccl-job", "application/json", []byte(`{"world_size":4,"schema":{"version":"v9","stages":["a","b","step.other_cpu_wall"]}}`)); a.status != 409 || a.body.Field != "world_size" {
		t.Fatalf("world change: %d %s", a.status, a.raw)
	}
	var job struct {
		Schema struct{ Version string } `json:"schema"`
		Labels map[string]string        `json:"labels"`
	}
	g := send(t, "GET", base+"/api/v1/jobs/nccl-job", "", nil)
	if err := json.Unmarshal(g.raw, &job); err != nil || job.Schema.Version != "v9" || len(job.Labels) != 0 {
		t.Fatalf("job after adoption: %s", g.raw)
	}
	// Comm conflict: 409 naming the field, nothing stored.
	c := callBatch(2, 3, 1, false)
	c.Comms = []collective.Comm{{ID: "world", Size: 1, Rank: 0, CommRank: 0}}
	if a := send(t, "POST", url, "application/json", jsonCalls(t, c)); a.status != 409 || a.body.Field != "comms[0].size" {
		t.Fatalf("comm conflict: %d %s", a.status, a.raw)
	}

	// Reads: JSON lines and the merged communicators.
	lines := readLines(t, base+"/api/v1/jobs/nccl-job/collectives?rank=1")
	if len(lines) != 3 || lines[0].Rank != 1 || lines[2].Seq != 2 {
		t.Fatalf("rank 1 lines: %+v", lines)
	}
	if all := readLines(t, fmt.Sprintf("%s/api/v1/jobs/nccl-job/collectives?from_ns=%d&limit=2", base, callEnter0+1e6)); len(all) != 2 || all[0].Seq != 1 {
		t.Fatalf("window: %+v", all)
	}
	if a := send(t, "GET", base+"/api/v1/jobs/nccl-job/collectives?rank=7", "", nil); a.status != 400 || a.body.Field != "rank" {
		t.Fatalf("rank out of range: %d %s", a.status, a.raw)
	}
	var comms struct{ Comms []collective.Comm }
	g = send(t, "GET", base+"/api/v1/jobs/nccl-job/comms", "", nil)
	if err := json.Unmarshal(g.raw, &comms); err != nil || len(comms.Comms) != 1 || fmt.Sprint(comms.Comms[0].Ranks) != "[0 1]" {
		t.Fatalf("comms: %s", g.raw)
	}
}

func readLines(t *testing.T, url string) []collective.Call {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var out []collective.Call
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var c collective.Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, c)
	}
	return out
}

func TestCollectivesBodyHygiene(t *testing.T) {
	base := ingestServer(t)
	register(t, base, "j")
	url := base + "/api/v1/jobs/j/collectives"
	body := jsonCalls(t, callBatch(2, 0, 1, false))
	for _, c := range []struct {
		name, ctype string
		header      map[string]string
		body        []byte
		status      int
	}{
		{"form", "application/x-www-form-urlencoded", nil, body, 415},
		{"text/plain", "text/plain", nil, body, 415},
		{"no type", "", nil, body, 415},
		{"gzip", "application/json", map[string]string{"Content-Encoding": "gzip"}, body, 415},
		{"json", "application/json", nil, body, 200},
		{"oversize", "application/json", nil, append(append([]byte(`{"calls":[`), bytes.Repeat([]byte(" "), 64<<20)...), "]}"...), 413},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url, bytes.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != c.status {
				t.Fatalf("status %d, want %d", res.StatusCode, c.status)
			}
		})
	}
}

// TestCollectivesIngestRate measures events/s through the HTTP API (JSON
// decode, gate, queue, fsync'd group commit) with 4 concurrent posters of
// 4,096-call batches. A measurement, not a timed assertion: the target
// (≥ 1M events/s into the store) is BenchmarkAppendCollectives'.
func TestCollectivesIngestRate(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	base := ingestServer(t)
	const posters, batches, ranks, per = 4, 8, 64, 64
	bodies := make([][][]byte, posters)
	for p := range posters {
		for k := range batches {
			b := callBatch(ranks, int64(k*per), per, false)
			raw, _ := laggardv1.MarshalProtoCollectives(b)
			bodies[p] = append(bodies[p], raw)
		}
	}
	for p := range posters {
		if a := send(t, "POST", fmt.Sprintf("%s/api/v1/jobs/rate-%d/collectives?world=%d", base, p, ranks), "application/json", []byte(`{}`)); a.status != 200 {
			t.Fatalf("register: %d %s", a.status, a.raw)
		}
	}
	start := time.Now()
	errs := make(chan error, posters)
	for p := range posters {
		go func() {
			for _, body := range bodies[p] {
				res, err := http.Post(fmt.Sprintf("%s/api/v1/jobs/rate-%d/collectives", base, p), "application/x-protobuf", bytes.NewReader(body))
				if err == nil {
					res.Body.Close()
					if res.StatusCode != 200 {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range posters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(start)
	n := posters * batches * ranks * per
	t.Logf("HTTP collective ingest: %d calls in %v = %.0f events/s (protobuf, 4 posters, fsync'd)", n, el, float64(n)/el.Seconds())
}
