package symbolize

import (
	"debug/elf"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// benchLib is a realistic symbol table: PyTorch's CPU library when
// installed (≈35k exported functions, stripped, the §3.4 case), else libc.
func benchLib(b *testing.B) string {
	for _, p := range []string{
		"/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so",
		"/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib/x86_64-linux-gnu/libc.so.6",
	} {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
	}
	b.Skip("neither libtorch_cpu.so nor libc.so.6 found")
	return ""
}

type benchSetup struct {
	store   *Store
	id      string
	path    string
	funcs   [][2]uint64 // [start, end) of sized functions
	buildNS int64
	symSize int64
}

var (
	benchOnce sync.Once
	benchSet  *benchSetup
	benchErr  error
)

func setupBench(b *testing.B) *benchSetup {
	lib := benchLib(b)
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "symbench")
		if err != nil {
			benchErr = err
			return
		}
		s, err := OpenStoreWith(dir, StoreOptions{DebugDirs: []string{}})
		if err != nil {
			benchErr = err
			return
		}
		start := time.Now()
		id, err := s.AddFile(lib)
		if err != nil {
			benchErr = err
			return
		}
		bs := &benchSetup{store: s, id: id, path: lib, buildNS: time.Since(start).Nanoseconds()}
		fi, _ := os.Stat(s.symPath(id))
		bs.symSize = fi.Size()
		f, err := elf.Open(lib)
		if err != nil {
			benchErr = err
			return
		}
		defer f.Close()
		syms, _ := f.DynamicSymbols()
		if more, err := f.Symbols(); err == nil {
			syms = append(syms, more...)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && s.Value != 0 {
				bs.funcs = append(bs.funcs, [2]uint64{s.Value, s.Value + s.Size})
			}
		}
		benchSet = bs
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchSet
}

// benchBatch is one 5 s window of a busy node: samples × depth frames,
// addresses drawn Zipf-like from `distinct` return addresses (hot loops
// repeat, the tail is long), a tenth of them in the gaps between
// exported functions (unknown, named <module>+0x…).
func benchBatch(bs *benchSetup, samples, depth, distinct int) (*stack.Batch, int) {
	rng := rand.New(rand.NewPCG(7, 7))
	pool := make([]uint64, distinct)
	for i := range pool {
		f := bs.funcs[rng.IntN(len(bs.funcs))]
		if i%10 == 9 {
			pool[i] = f[1] + 1 // just past a function: often a gap
		} else {
			pool[i] = f[0] + rng.Uint64N(f[1]-f[0])
		}
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 2, uint64(distinct-1))
	batch := &stack.Batch{StartNS: 1, EndNS: 5e9, Hz: 99, Ratio: 0.1,
		Mappings: []stack.Mapping{{Start: 0x7f0000000000, Limit: 0x7f0010000000, BuildID: bs.id, Path: bs.path}}}
	n := 0
	for s := range samples {
		fr := make([]stack.Frame, depth)
		for j := range fr {
			fr[j] = stack.Frame{Kind: stack.Native, Mapping: 0, Addr: pool[zipf.Uint64()]}
		}
		n += depth
		batch.Samples = append(batch.Samples, stack.Sample{Rank: s % 8, PID: 100 + s%8, TID: 100 + s, Count: 1, Frames: fr})
	}
	return batch, n
}

// BenchmarkLookup is the acceptance benchmark (≥ 1,000,000 addresses/s
// symbolized end to end through Resolver.Profile). cold: a fresh
// Resolver per window (opens the file, every distinct address an index
// lookup); warm: the server's long-lived Resolver with its caches.
func BenchmarkLookup(b *testing.B) {
	bs := setupBench(b)
	b.Logf("%s: %d functions, BuildIndex %.2f s, symbol file %d bytes", filepath.Base(bs.path), len(bs.funcs), float64(bs.buildNS)/1e9, bs.symSize)
	batch, addrs := benchBatch(bs, 20000, 24, 50000)
	batches := []*stack.Batch{batch}
	for _, mode := range []string{"cold", "warm"} {
		b.Run(mode, func(b *testing.B) {
			r := NewResolver(bs.store, ResolverOptions{})
			defer r.Close()
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if mode == "cold" {
					r.Close()
					r = NewResolver(bs.store, ResolverOptions{})
				}
				p := r.Profile(batches, -1)
				if p.Total != 20000 {
					b.Fatal(p.Total)
				}
			}
			b.ReportMetric(float64(addrs)*float64(b.N)/b.Elapsed().Seconds(), "addrs/s")
			// This machine is shared: the rate per CPU-second of the
			// process (all threads, GC included) is the stable figure.
			b.ReportMetric(float64(addrs)*float64(b.N)/(cpuTime()-cpu0).Seconds(), "addrs/cpu-s")
		})
	}
}

// BenchmarkIndexFind: uncached lookups of distinct random addresses, via
// the memory mapping the store uses and via plain pread.
func BenchmarkIndexFind(b *testing.B) {
	bs := setupBench(b)
	rng := rand.New(rand.NewPCG(1, 1))
	addrs := make([]uint64, 1<<16)
	for i := range addrs {
		f := bs.funcs[rng.IntN(len(bs.funcs))]
		addrs[i] = f[0] + rng.Uint64N(f[1]-f[0])
	}
	b.Run("mmap", func(b *testing.B) {
		ix, c, err := bs.store.Open(bs.id)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		benchFind(b, ix, addrs)
	})
	b.Run("pread", func(b *testing.B) {
		f, err := os.Open(bs.store.symPath(bs.id))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		ix, err := OpenIndex(f, fi.Size())
		if err != nil {
			b.Fatal(err)
		}
		benchFind(b, ix, addrs)
	})
}

func benchFind(b *testing.B, ix *Index, addrs []uint64) {
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		if _, ok, err := ix.Find(addrs[i&(len(addrs)-1)]); !ok || err != nil {
			b.Fatalf("%#x: %v %v", addrs[i&(len(addrs)-1)], ok, err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "addrs/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "addrs/cpu-s")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkBuildIndex: building the symbol file of the benchmark library.
func BenchmarkBuildIndex(b *testing.B) {
	lib := benchLib(b)
	var size int64
	var st BuildStats
	for range b.N {
		f, err := elf.Open(lib)
		if err != nil {
			b.Fatal(err)
		}
		cw := &countWriter{}
		st, err = Build(cw, f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		size = cw.n
	}
	b.Logf("%s: %+v", filepath.Base(lib), st)
	fi, _ := os.Stat(lib)
	b.ReportMetric(float64(size), "sym-bytes")
	b.ReportMetric(float64(fi.Size()), "elf-bytes")
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)
