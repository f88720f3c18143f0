package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// Issue 16 item 1 (collectives): a restarted job's process group keeps
// its name and numbers its calls from seq 0 again. Those calls were
// stored on the first launch's (rank, comm, seq) cells — here counted as
// duplicates and dropped, with another engineer's conflict check a 409 —
// so the restart's calls were lost. Each incarnation's calls are stored
// apart; an identical retry within one incarnation stays idempotent; the
// batch may name its incarnation (JSON and protobuf), one the job never
// had is a 400 naming "incarnation".
func TestCollectivesIncarnationsKeptApart(t *testing.T) {
	base := ingestServer(t)
	put := func(launch string) {
		t.Helper()
		a := send(t, "PUT", base+"/api/v1/jobs/gj", "application/json", []byte(`{"world_size":2,"launch":"`+launch+`"}`))
		if a.status != http.StatusOK && a.status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", launch, a.status, a.raw)
		}
	}
	url := base + "/api/v1/jobs/gj/collectives"
	put("L0")
	first := callBatch(2, 0, 3, true)
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/json", jsonCalls(t, first))); ans != (CollectivesAnswer{AcceptedCalls: 6, AcceptedComms: 2}) {
		t.Fatalf("first launch: %+v", ans)
	}
	put("L1") // a restart: incarnation 1
	restart := callBatch(2, 0, 3, true)
	for i := range restart.Calls {
		restart.Calls[i].EnterNS += 3600e9 // an hour later, same group, seq from 0
		restart.Calls[i].ReturnNS += 3600e9
	}
	one := 1
	restart.Incarnation = &one
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/json", jsonCalls(t, restart))); ans != (CollectivesAnswer{AcceptedCalls: 6, AcceptedComms: 2}) {
		t.Fatalf("restart re-sending seq 0..2 on the same group: %+v (want stored apart)", ans)
	}
	// Identical retries: within incarnation 1 (named, in protobuf, or not
	// named: the newest) and within incarnation 0.
	pbb, err := laggardv1.MarshalProtoCollectives(restart)
	if err != nil {
		t.Fatal(err)
	}
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/x-protobuf", pbb)); ans != (CollectivesAnswer{Duplicates: 6}) {
		t.Fatalf("protobuf retry of incarnation 1: %+v", ans)
	}
	restart.Incarnation = nil
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/json", jsonCalls(t, restart))); ans != (CollectivesAnswer{Duplicates: 6}) {
		t.Fatalf("retry without incarnation (the newest): %+v", ans)
	}
	zero := 0
	first.Incarnation = &zero
	if ans := collectivesAnswer(t, send(t, "POST", url, "application/json", jsonCalls(t, first))); ans != (CollectivesAnswer{Duplicates: 6}) {
		t.Fatalf("retry of incarnation 0: %+v", ans)
	}
	seven := 7
	first.Incarnation = &seven
	if a := send(t, "POST", url, "application/json", jsonCalls(t, first)); a.status != http.StatusBadRequest || a.body.Field != "incarnation" {
		t.Fatalf("unknown incarnation: %d %s", a.status, a.raw)
	}
	if pbb, _ = laggardv1.MarshalProtoCollectives(first); true {
		if a := send(t, "POST", url, "application/x-protobuf", pbb); a.status != http.StatusBadRequest || a.body.Field != "incarnation" {
			t.Fatalf("unknown incarnation (protobuf): %d %s", a.status, a.raw)
		}
	}
	// Both launches' calls are stored, each under its own communicator.
	g := send(t, "GET", url, "", nil)
	byInc := map[int]int{}
	sc := bufio.NewScanner(bytes.NewReader(g.raw))
	for sc.Scan() {
		var c collective.Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		inc, id := collective.CommIncarnation(c.Comm)
		if id != "world" {
			t.Fatalf("stored communicator %q", c.Comm)
		}
		byInc[inc]++
	}
	if byInc[0] != 6 || byInc[1] != 6 {
		t.Fatalf("stored calls per incarnation: %v", byInc)
	}
}
