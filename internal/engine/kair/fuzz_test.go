package kair

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// FuzzAnalyze builds traces from arbitrary bytes (8 bytes an event:
// rank, category, name, lane, start, duration, collective seq, correlation)
// and checks Analyze never panics, never loops and always yields a
// marshalable report whose causes point at real ranks.
func FuzzAnalyze(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 0, 10, 0, 0, 1, 1, 0, 0, 0, 10, 0, 0, 2, 1, 0, 0, 0, 40, 0, 0})
	f.Add([]byte{0, 5, 1, 0, 10, 5, 1, 0, 1, 5, 1, 0, 30, 5, 1, 0, 2, 5, 1, 0, 12, 5, 1, 0, 3, 7, 2, 0, 0, 3, 0, 1, 3, 2, 3, 1, 4, 3, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 8*4096 {
			return
		}
		fuzzOne(t, b)
	})
}

func fuzzOne(t *testing.T, b []byte) {
	names := []string{"a", "b", "c", "d"}
	tr := make([]optrace.Trace, 4)
	for r := range tr {
		tr[r].Rank = r
		tr[r].ClockOffsetNS = int64(r) * 7
	}
	for len(b) >= 8 {
		r := int(b[0] % 4)
		cat := optrace.Category(1 + b[1]%9)
		e := optrace.Event{Name: names[b[2]%4], Cat: cat, TID: int64(b[3] % 2), Device: -1,
			StartNS: int64(binary.LittleEndian.Uint16(b[4:6])) * 10, DurNS: int64(b[4+2]) * 100, Seq: -1}
		if cat.OnDevice() {
			e.Device, e.Stream = 0, int64(b[3]%2)
		}
		if cat == optrace.Collective && b[7]%2 == 0 {
			e.Comm, e.Seq = "w", int64(b[7]%4)
		}
		if cat == optrace.Runtime || cat.OnDevice() {
			e.Correlation = int64(b[7] % 3)
		}
		tr[r].Events = append(tr[r].Events, e)
		b = b[8:]
	}
	rep, err := Analyze(tr, 0, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.RootCauses {
		if c.Rank < 0 || c.Rank > 3 || c.Symptoms < 1 || len(c.Evidence) == 0 {
			t.Fatalf("bad cause %+v", c)
		}
	}
}
