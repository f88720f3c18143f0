package kair

import (
	"encoding/binary"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// FuzzRun builds a small capture from arbitrary bytes — byte 0 picks the
// rank count, the clock method and whether offsets/heartbeats are set;
// then 8 bytes an event: rank, category, name, lane, start (2 bytes),
// duration, step/collective seq — and checks Run never panics, never
// fails on valid input, and always yields a marshalable report whose
// verdict and causes are consistent.
func FuzzRun(f *testing.F) {
	f.Add([]byte{0x03, 0, 1, 0, 0, 0, 10, 5, 0, 1, 1, 0, 0, 0, 10, 5, 0, 2, 1, 0, 0, 0, 40, 5, 0})
	f.Add([]byte{0x14, 0, 5, 1, 0, 10, 0, 5, 2, 1, 5, 1, 0, 30, 0, 5, 2, 2, 5, 1, 0, 12, 0, 5, 2, 3, 7, 2, 0, 0, 0, 3, 1})
	f.Add([]byte{0xff, 0, 2, 0, 1, 0, 1, 9, 4, 1, 2, 0, 1, 0, 2, 9, 4, 2, 2, 0, 1, 0, 1, 99, 4, 3, 2, 0, 1, 0, 1, 9, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || len(b) > 1+8*256 {
			return
		}
		fuzzRunOne(t, b)
	})
}

func fuzzRunOne(t *testing.T, b []byte) {
	hdr := b[0]
	b = b[1:]
	n := 1 + int(hdr%5)
	names := []string{"a", "b", "c", "d"}
	tr := make([]optrace.Trace, n)
	for r := range tr {
		tr[r].Rank = n - 1 - r // reversed: Run must sort
		if hdr&0x20 != 0 {
			tr[r].ClockOffsetNS = int64(r) * 1_000
		}
	}
	for len(b) >= 8 {
		r := int(b[0]) % n
		cat := optrace.Category(1 + b[1]%9)
		e := optrace.Event{Name: names[b[2]%4], Cat: cat, TID: int64(b[3] % 2), Device: -1,
			StartNS: int64(binary.LittleEndian.Uint16(b[4:6])) * 100, DurNS: int64(b[6]) * 1_000,
			Step: int64(b[7]%4) - 1, Seq: -1}
		if cat.OnDevice() || (cat == optrace.Collective && b[3]%3 == 0) {
			e.Device, e.Stream = 0, int64(b[3]%2)
		}
		if cat == optrace.Collective && b[7]%2 == 0 {
			e.Comm, e.Seq = "w", int64(b[7]>>2)
		}
		if cat == optrace.Runtime || cat.OnDevice() {
			e.Correlation = int64(b[7] % 3)
		}
		tr[r].Events = append(tr[r].Events, e)
		b = b[8:]
	}
	var hb map[int][]Heartbeat
	if hdr&0x40 != 0 {
		hb = map[int][]Heartbeat{}
		for r := range n {
			c := int64(r) * 77
			hb[r] = []Heartbeat{{c, c + 500, c + 600, c + int64(hdr)}, {c, c - 1, c - 2, c}}
		}
	}
	cfg := DefaultRunConfig()
	cfg.Align = []ClockMethod{"", ClockNone, ClockGiven, ClockHeartbeat, ClockCollectives}[int(hdr>>5)%5]
	cfg.Rhythm.Windows = 1 + int(hdr)%64
	cfg.MaxSteps = 1 + int(hdr)%3
	before := deepCopy(tr)
	rep, err := Run(tr, hb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	for i := range tr {
		if tr[i].ClockOffsetNS != before[i].ClockOffsetNS || !reflect.DeepEqual(tr[i].Events, before[i].Events) {
			t.Fatal("Run modified its input")
		}
	}
	switch rep.Verdict {
	case VerdictCulprit:
		if len(rep.Causes) == 0 || rep.Causes[0].Kind == KindInconclusive {
			t.Fatalf("culprit without an actionable cause: %+v", rep.Causes)
		}
	case VerdictNone, VerdictInconclusive:
	default:
		t.Fatalf("verdict %q", rep.Verdict)
	}
	if rep.Headline == "" || len(rep.Clock) != n || len(rep.Ranks) != n || !slices.IsSorted(rep.Ranks) {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range rep.Causes {
		if c.Rank < 0 || c.Rank >= n || c.Steps < 1 || c.Steps > len(rep.Analysed) {
			t.Fatalf("bad cause %+v", c)
		}
	}
	if rep.Rhythm.Straggler != -1 && rep.Rhythm.Verdict != RhythmStraggler {
		t.Fatalf("straggler %d with verdict %s", rep.Rhythm.Straggler, rep.Rhythm.Verdict)
	}
}
