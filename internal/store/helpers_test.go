package store

import (
	"io"
	"log/slog"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testJob(id string) *signal.Job {
	return &signal.Job{ID: id, Name: "test " + id, WorldSize: 1024, Schema: stagevec.DefaultSchema(), Accumulation: 2,
		Labels: map[string]string{"team": "infra"}}
}

// mkVec builds a deterministic vector whose payload encodes its coordinates,
// so a vector returned under the wrong key is caught.
func mkVec(step int64, rank, micro int) stagevec.Vector {
	base := float64(step)*1000 + float64(rank) + float64(micro)/10
	d := []float64{base, base + 1, base + 2, base + 3, base + 4, base + 5}
	return stagevec.Vector{Step: step, Rank: rank, Micro: micro, Durations: d, WallMS: base * 6}
}

// openTest opens a durable store in dir, closing it at test end unless the
// test closed it itself.
func openTest(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{Logger: quiet, CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// collect scans [from, to] into deep copies.
func collect(t testing.TB, s *Store, job string, from, to int64) []stagevec.Vector {
	t.Helper()
	var out []stagevec.Vector
	if err := s.Scan(job, from, to, func(v *stagevec.Vector) error {
		out = append(out, CloneVector(v))
		return nil
	}); err != nil {
		t.Fatalf("Scan(%s, %d, %d): %v", job, from, to, err)
	}
	return out
}
