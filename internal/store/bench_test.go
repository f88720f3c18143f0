package store

import (
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

const (
	benchWorld   = 1024 // ranks per step
	benchPerCall = 512  // vectors per Append: half a step of a 1024-rank job
	benchStages  = 6    // stage values per vector (default schema)
)

// benchVectors returns the vectors of call c of one job: step c/2, ranks
// [512·(c%2), 512·(c%2)+512). The second half of every step lands inside
// the stored [FirstStep, LastStep], so half the calls pay the duplicate
// check — the realistic worst case for ingest in step order.
func benchVectors(c int, buf []stagevec.Vector) []stagevec.Vector {
	buf = buf[:0]
	step := int64(c / 2)
	r0 := (c % 2) * benchPerCall
	for r := r0; r < r0+benchPerCall; r++ {
		v := mkVec(step, r, 0)
		if r%64 == 0 { // sampled CUDA probe on a few ranks
			v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 3, Ready: true}}
		}
		buf = append(buf, v)
	}
	return buf
}

func openBench(b *testing.B, jobs int) *Store {
	b.Helper()
	s, err := Open(b.TempDir(), Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for j := range jobs {
		if err := s.PutJob(testJob(fmt.Sprintf("job-%d", j))); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

func reportValues(b *testing.B, vectors int64) {
	b.ReportMetric(float64(vectors*benchStages)/b.Elapsed().Seconds(), "values/s")
}

// BenchmarkAppend measures durable (fsync'd) ingest in stage values/s.
// One op = one call of 512 vectors × 6 stages.
func BenchmarkAppend(b *testing.B) {
	// sequential: one caller, one fsync per call — the floor.
	b.Run("sync/sequential", func(b *testing.B) {
		s := openBench(b, 1)
		vs := make([]stagevec.Vector, 0, benchPerCall)
		b.ResetTimer()
		for c := range b.N {
			if err := s.Append("job-0", benchVectors(c, vs)); err != nil {
				b.Fatal(err)
			}
		}
		reportValues(b, int64(b.N)*benchPerCall)
	})
	// parallel: 8 concurrent callers (e.g. HTTP handlers), one job each;
	// Pebble shares each WAL fsync among whoever committed meanwhile.
	b.Run("sync/parallel8", func(b *testing.B) {
		s := openBench(b, 8)
		var next atomic.Int64
		var calls atomic.Int64
		b.SetParallelism(4) // 4 × GOMAXPROCS(2) = 8 goroutines
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			job := fmt.Sprintf("job-%d", next.Add(1)-1)
			vs := make([]stagevec.Vector, 0, benchPerCall)
			c := 0
			for pb.Next() {
				if err := s.Append(job, benchVectors(c, vs)); err != nil {
					b.Error(err)
					return
				}
				c++
				calls.Add(1)
			}
		})
		reportValues(b, calls.Load()*benchPerCall)
	})
	// groupcommit8: an ingest queue hands AppendMany 8 jobs' batches at a
	// time: one pebble batch, one fsync per 8 × 512 vectors.
	b.Run("sync/groupcommit8", func(b *testing.B) {
		const group = 8
		s := openBench(b, group)
		bufs := make([][]stagevec.Vector, group)
		batches := make([]Batch, group)
		b.ResetTimer()
		for c := range b.N {
			for j := range group {
				bufs[j] = benchVectors(c, bufs[j])
				batches[j] = Batch{JobID: fmt.Sprintf("job-%d", j), Vectors: bufs[j]}
			}
			if err := s.AppendMany(batches); err != nil {
				b.Fatal(err)
			}
		}
		reportValues(b, int64(b.N)*group*benchPerCall)
	})
}

// scanFixture is a 1,000-step × 1,024-rank job, built once per process
// (loading it takes seconds) and flushed to sstables so scans read disk
// format, not the memtable.
var scanFixture struct {
	once sync.Once
	dir  string
	err  error
}

const scanSteps = 1000

func buildScanFixture() (string, error) {
	dir, err := os.MkdirTemp("", "laggard-store-bench-")
	if err != nil {
		return "", err
	}
	s, err := Open(dir, Options{Logger: quiet, NoSync: true})
	if err != nil {
		return dir, err
	}
	defer s.Close()
	if err := s.PutJob(testJob("scan")); err != nil {
		return dir, err
	}
	vs := make([]stagevec.Vector, 0, benchPerCall)
	for c := range scanSteps * benchWorld / benchPerCall {
		if err := s.Append("scan", benchVectors(c, vs)); err != nil {
			return dir, err
		}
	}
	if err := s.db.Flush(); err != nil {
		return dir, err
	}
	return dir, s.db.Compact(vecPrefix("scan"), vecPrefixEnd("scan"), true)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if scanFixture.dir != "" {
		os.RemoveAll(scanFixture.dir)
	}
	os.Exit(code)
}

// BenchmarkScan reads a whole 1,000-step × 1,024-rank window (1,024,000
// vectors, 6.1M stage values) per op, as the report endpoint does.
func BenchmarkScan(b *testing.B) {
	scanFixture.once.Do(func() { scanFixture.dir, scanFixture.err = buildScanFixture() })
	if scanFixture.err != nil {
		b.Fatal(scanFixture.err)
	}
	s, err := Open(scanFixture.dir, Options{Logger: quiet, CacheSize: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	var n int64
	for range b.N {
		var sum float64
		if err := s.Scan("scan", 0, scanSteps-1, func(v *stagevec.Vector) error {
			sum += v.Durations[0]
			n++
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if math.IsNaN(sum) {
			b.Fatal("NaN")
		}
	}
	if n != int64(b.N)*scanSteps*benchWorld {
		b.Fatalf("scanned %d vectors, want %d", n, int64(b.N)*scanSteps*benchWorld)
	}
	reportValues(b, n)
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "vectors/s")
}
