package store

import (
	"fmt"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Ingest target (issue 7 acceptance): ≥ 1,000,000 collective events/s
// into the store. One op = one batch of collBatch calls from collRanks
// ranks (64 calls per rank: a few steps of an 8-communicator job), what
// one agent ships per request.
const (
	collBatch = 4096
	collRanks = 64
)

// benchCalls fills buf with batch c: every rank's next 64 calls, spread
// over 4 communicators (data-parallel and three tensor-parallel ones).
func benchCalls(c int, buf []collective.Call) []collective.Call {
	buf = buf[:0]
	per := collBatch / collRanks
	comms := [...]string{"dp-0123456789abcdef", "tp-0", "tp-1", "tp-2"}
	for r := range collRanks {
		for k := range per {
			seq := int64(c*per + k)
			enter := t0 + seq*2_000_000 + int64(r)*1000
			buf = append(buf, collective.Call{Rank: r, PID: 4000 + r, Comm: comms[k%4], Seq: seq, Op: collective.AllReduce,
				Bytes: 26214400, Count: 6553600, Dtype: "float32", Peer: -1, Root: -1, Stream: 0x7f00,
				EnterNS: enter, ReturnNS: enter + 12_000, DevStartNS: enter + 30_000, DevEndNS: enter + 1_500_000, Step: -1})
		}
	}
	return buf
}

func reportEvents(b *testing.B, n int64) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkAppendCollectives measures collective ingest into the store in
// events (calls) per second: fsync'd sequential and group-committed, and
// without fsync as the store's other benchmarks compare.
func BenchmarkAppendCollectives(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
		group  int
	}{{"sync/sequential", false, 1}, {"sync/groupcommit4", false, 4}, {"nosync/sequential", true, 1}} {
		b.Run(mode.name, func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{Logger: quiet, NoSync: mode.noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			bufs := make([][]collective.Call, mode.group)
			batches := make([]CollectiveBatch, mode.group)
			for j := range mode.group {
				id := fmt.Sprintf("job-%d", j)
				if err := s.PutJob(testJob(id)); err != nil {
					b.Fatal(err)
				}
				batches[j] = CollectiveBatch{JobID: id, Batch: &collective.Batch{}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for c := range b.N {
				for j := range mode.group {
					bufs[j] = benchCalls(c, bufs[j])
					batches[j].Batch.Calls = bufs[j]
				}
				if _, err := s.AppendCollectivesMany(batches); err != nil {
					b.Fatal(err)
				}
			}
			reportEvents(b, int64(b.N)*int64(mode.group)*collBatch)
		})
	}
	// resend: every batch is already stored (an agent retrying after a
	// lost answer): the duplicate probe path.
	b.Run("sync/resend", func(b *testing.B) {
		s, err := Open(b.TempDir(), Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.PutJob(testJob("j")); err != nil {
			b.Fatal(err)
		}
		const stored = 64
		for c := range stored {
			if _, err := s.AppendCollectives("j", &collective.Batch{Calls: benchCalls(c, nil)}); err != nil {
				b.Fatal(err)
			}
		}
		batch := &collective.Batch{}
		b.ResetTimer()
		for c := range b.N {
			batch.Calls = benchCalls(c%stored, batch.Calls)
			res, err := s.AppendCollectives("j", batch)
			if err != nil || res.Duplicates != collBatch {
				b.Fatal(res, err)
			}
		}
		reportEvents(b, int64(b.N)*collBatch)
	})
}

// BenchmarkScanCalls reads every call of a 64-rank job (262,144 calls).
func BenchmarkScanCalls(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Logger: quiet, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.PutJob(testJob("j")); err != nil {
		b.Fatal(err)
	}
	var buf []collective.Call
	for c := range 64 {
		buf = benchCalls(c, buf)
		if _, err := s.AppendCollectives("j", &collective.Batch{Calls: buf}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var n int64
	for range b.N {
		if err := s.ScanCalls("j", CallQuery{Rank: -1}, func(c *collective.Call) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	reportEvents(b, n)
}
