package kair

import (
	"encoding/binary"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// FuzzOffsetFromHeartbeats: arbitrary samples (the X-Laggard-Clock header
// reaches here) never panic; a result always comes from a valid sample
// and its residual is ≥ 0.
func FuzzOffsetFromHeartbeats(f *testing.F) {
	f.Add(int64(100), int64(1300), int64(1400), int64(700), int64(0), int64(0), int64(0), int64(0))
	f.Add(int64(-1<<63), int64(1<<63-1), int64(1<<63-1), int64(0), int64(5), int64(4), int64(3), int64(2))
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g, h, i int64) {
		hb := []Heartbeat{{a, b, c, d}, {e, g, h, i}}
		est, err := OffsetFromHeartbeats(1, hb)
		if err != nil {
			return
		}
		if est.ResidualNS < 0 || est.Samples < 1 || est.Samples > 2 || est.Method != ClockHeartbeat {
			t.Fatalf("%+v", est)
		}
	})
}

// FuzzAlignByCollectives: arbitrary collective times, including extreme
// ones, never panic; the reference is at 0 and residuals are ≥ 0.
func FuzzAlignByCollectives(f *testing.F) {
	f.Add([]byte{0, 1, 10, 0, 0, 0, 0, 0, 0, 0, 5, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 5, 2, 1, 11, 0, 0, 0, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 11*512 {
			return
		}
		tr := make([]optrace.Trace, 3)
		for r := range tr {
			tr[r].Rank = r * 2
		}
		for len(b) >= 11 {
			e := optrace.Event{Name: "c", Cat: optrace.Collective, Device: int(b[1]%2) - 1, Comm: "w",
				Seq: int64(b[1] >> 1 % 4), StartNS: int64(binary.LittleEndian.Uint64(b[2:10])), DurNS: int64(b[10]) * 1000}
			tr[int(b[0])%3].Events = append(tr[int(b[0])%3].Events, e)
			b = b[11:]
		}
		est, err := AlignByCollectives(tr)
		if err != nil {
			t.Fatal(err)
		}
		if len(est) != 3 || est[0].OffsetNS != 0 || est[0].Rank != 0 {
			t.Fatalf("%+v", est)
		}
		for _, e := range est {
			if e.ResidualNS < 0 || e.Violations > e.Samples {
				t.Fatalf("%+v", e)
			}
		}
	})
}
