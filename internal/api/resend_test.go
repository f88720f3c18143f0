package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// vectorsAt is a batch of rank 0's vectors at steps, with wall_ms wall
// for the step changed (-1: none).
func vectorsAt(steps []int64, changed int64) []byte {
	var b strings.Builder
	b.WriteString(`{"vectors":[`)
	for i, s := range steps {
		if i > 0 {
			b.WriteByte(',')
		}
		wall := 21
		if s == changed {
			wall = 22
		}
		fmt.Fprintf(&b, `{"step":%d,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":%d}`, s, wall)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func stepRange(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// Issue 16 item 1 over HTTP: an identical re-send stays 200; a re-send of
// a stored record with other values is 409 naming the record in the
// posted batch and the cell, is counted in
// laggard_ingest_conflicts_total, and stores nothing of its part or of
// the parts after it — for every signal a record can be re-sent in.
func TestResentRecordsConflict(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	register(t, e.base, "j")
	post := func(path, ctype string, body []byte) answer {
		t.Helper()
		return send(t, "POST", e.base+"/api/v1/jobs/j/"+path, ctype, body)
	}
	conflicts := func(kind string) float64 {
		return counter(t, e.reg, "laggard_ingest_conflicts_total", map[string]string{"records": kind})
	}
	stored := func() int64 {
		t.Helper()
		st, err := e.st.Stats("j")
		if err != nil {
			t.Fatal(err)
		}
		return st.Vectors
	}

	// Vectors, in three queue parts (2,048 vectors each).
	first := stepRange(0, 5000)
	if a := post("vectors", "application/json", vectorsAt(first, -1)); a.status != 200 {
		t.Fatalf("first post: %d %s", a.status, a.raw)
	}
	if a := post("vectors", "application/json", vectorsAt(first, -1)); a.status != 200 {
		t.Fatalf("identical re-send: %d %s", a.status, a.raw)
	}
	a := post("vectors", "application/json", vectorsAt(first, 4100))
	if a.status != http.StatusConflict || a.body.Field != "vectors[4100]" || !strings.Contains(a.body.Error, "step 4100, rank 0") ||
		!strings.Contains(a.body.Error, "wall_ms is 21 stored, 22 sent") {
		t.Fatalf("a changed re-send: %d %s, want 409 naming vectors[4100], the cell and the difference", a.status, a.raw)
	}
	if v := conflicts("vectors"); v != 1 {
		t.Fatalf("conflicts_total{records=vectors} = %v, want 1", v)
	}
	if len(a.body.Conflicts) != 1 || a.body.Conflicts[0] != 4100 {
		t.Fatalf("conflicts %v, want [4100]", a.body.Conflicts)
	}
	// Several differing cells across parts: the 409 lists every one as an
	// index of the batch as sent (a client drops them in one answer).
	several := strings.Replace(strings.Replace(string(vectorsAt(first, 7)), `{"step":9,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}`,
		`{"step":9,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":23}`, 1),
		`{"step":2500,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":21}`, `{"step":2500,"rank":0,"durations_ms":[1,2,3,4,5],"wall_ms":24}`, 1)
	a = post("vectors", "application/json", []byte(several))
	if a.status != http.StatusConflict || a.body.Field != "vectors[7]" || !slices.Equal(a.body.Conflicts, []int{7, 9}) {
		t.Fatalf("three changed cells in two parts: %d %s, want 409 naming vectors[7] listing [7 9] (the refused part's)", a.status, a.raw)
	}
	// New steps with one stale cell in the second part: the first part
	// may be stored, the second and third are not.
	mixed := stepRange(10_000, 5000)
	mixed[3000] = 100
	a = post("vectors", "application/json", vectorsAt(mixed, 100))
	if a.status != http.StatusConflict || a.body.Field != "vectors[3000]" || !strings.Contains(a.body.Error, "resend the batch without") {
		t.Fatalf("a batch with one stale cell: %d %s", a.status, a.raw)
	}
	if n := stored(); n != 5000+2048 {
		t.Fatalf("%d vectors stored after a refused 3-part batch, want 5000 + the first part's 2048", n)
	}
	if a := post("vectors", "application/json", vectorsAt(mixed[:3000], -1)); a.status != 200 {
		t.Fatalf("the batch re-sent without the stale cell: %d %s", a.status, a.raw)
	}

	// Collective calls.
	calls := callBatch(2, 0, 5, false)
	if a := post("collectives", "application/json", jsonCalls(t, calls)); a.status != 200 {
		t.Fatalf("calls: %d %s", a.status, a.raw)
	}
	if ans := collectivesAnswer(t, post("collectives", "application/json", jsonCalls(t, calls))); ans.Duplicates != 10 {
		t.Fatalf("identical re-send of calls: %+v", ans)
	}
	calls.Calls[7].Bytes++
	if a := post("collectives", "application/json", jsonCalls(t, calls)); a.status != http.StatusConflict || a.body.Field != "calls[7]" {
		t.Fatalf("a changed call: %d %s, want 409 naming calls[7]", a.status, a.raw)
	}

	// Stacks and OS points.
	js, _ := laggardv1.MarshalJSONStacks(nodeStacks("n1", 0, 1))
	if a := post("stacks", "application/json", js); a.status != 200 {
		t.Fatalf("stacks: %d %s", a.status, a.raw)
	}
	changed := nodeStacks("n1", 0, 1)
	changed.Samples[1].Count++
	js, _ = laggardv1.MarshalJSONStacks(changed)
	if a := post("stacks", "application/json", js); a.status != http.StatusConflict || a.body.Field != "samples[1]" {
		t.Fatalf("a changed stack: %d %s, want 409 naming samples[1]", a.status, a.raw)
	}
	osb := &osstat.Batch{Node: "n1", StartNS: stackT0, EndNS: stackT0 + 5e9, Points: []osstat.Point{{Name: osstat.RunQueueWait, Rank: 1, CPU: -1, Value: 0.1}}}
	pbb, _ := laggardv1.MarshalProtoOSStats(osb)
	if a := post("osstats", "application/x-protobuf", pbb); a.status != 200 {
		t.Fatalf("os: %d %s", a.status, a.raw)
	}
	osb.Points[0].Value = 0.2
	pbb, _ = laggardv1.MarshalProtoOSStats(osb)
	if a := post("osstats", "application/x-protobuf", pbb); a.status != http.StatusConflict || a.body.Field != "points[0]" {
		t.Fatalf("a changed point: %d %s, want 409 naming points[0]", a.status, a.raw)
	}
	for kind, want := range map[string]float64{"vectors": 3, "calls": 1, "samples": 1, "points": 1} {
		if v := conflicts(kind); v != want {
			t.Errorf("conflicts_total{records=%s} = %v, want %v", kind, v, want)
		}
	}
}
