package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// TestStacksIngestRefusesOnlyTheBadRecord: one sample whose process name
// is not UTF-8 (a process may name itself anything) used to fail the
// whole protobuf batch, so the agent dropped every rank's window (issue
// 16 item 8a). Now that sample alone is refused, counted and named.
func TestStacksIngestRefusesOnlyTheBadRecord(t *testing.T) {
	e := stackServer(t, nil, 0, false)
	url := e.base + "/api/v1/jobs/j/stacks?world=4"
	b := nodeStacks("n1", 0, 1, 2, 3)
	b.Samples[2].Comm = "pyXXX"
	enc, err := laggardv1.MarshalProtoStacks(b)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(enc), "pyXXX")
	copy(enc[i:], "py\xff\xfe\xfd")
	a := send(t, "POST", url, "application/x-protobuf", enc)
	if a.status != http.StatusOK {
		t.Fatalf("status %d: %s", a.status, a.raw)
	}
	ans := stacksAnswer(t, a)
	if ans.AcceptedSamples != 3 || ans.Refused != 1 || len(ans.RefusedRecords) != 1 ||
		ans.RefusedRecords[0].Record != "samples[2]" || ans.RefusedRecords[0].Field != "samples[2].comm" {
		t.Fatalf("answer %+v: want 3 samples stored and samples[2] refused naming its comm", ans)
	}
	var ranks []int
	if err := e.st.ScanStacks("j", store.StackQuery{Rank: -1}, func(b *stack.Batch) error {
		for _, s := range b.Samples {
			ranks = append(ranks, s.Rank)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ranks) != 3 {
		t.Fatalf("stored ranks %v, want 0, 1, 3", ranks)
	}
	if v := counter(t, e.reg, "laggard_ingest_records_refused_total", map[string]string{"kind": kindStacks}); v != 1 {
		t.Fatalf("refused metric %v", v)
	}
}
