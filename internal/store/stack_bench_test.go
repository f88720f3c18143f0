package store

import (
	"fmt"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// benchStacks is one node's 5 s window (SysOM-AI §4): 8 ranks, 512
// distinct stacks each of 32 frames — native frames in two Build-ID'd
// mappings under a Python tail and a kernel head, what the agent's
// in-kernel aggregation drains at 99 Hz from busy ranks.
func benchStacks(node string, start int64) *stack.Batch {
	b := &stack.Batch{Node: node, StartNS: start, EndNS: start + 5e9, Hz: 99, Ratio: 1,
		Mappings: []stack.Mapping{{Start: 0x400000, Limit: 0x900000, BuildID: "0123456789abcdef0123456789abcdef01234567", Path: "/usr/bin/python3.11"},
			{Start: 0x7f0000000000, Limit: 0x7f0001000000, BuildID: "fedcba9876543210fedcba9876543210fedcba98", Path: "/usr/lib/libtorch_cpu.so"}}}
	for r := range 8 {
		for k := range 512 {
			s := stack.Sample{Rank: r, PID: 1000 + r, TID: 1000 + r + k%4, Comm: "python3", Thread: "pt_main_thread", Count: int64(1 + k%7)}
			s.Frames = append(s.Frames, stack.Frame{Kind: stack.Kernel, Addr: 0xffffffff81000000 + uint64(k%64)*64, Mapping: -1, Func: fmt.Sprintf("kfunc_%d", k%64)})
			for j := range 24 {
				m := int32(j % 2)
				s.Frames = append(s.Frames, stack.Frame{Kind: stack.Native, Addr: b.Mappings[m].Start + uint64(k*97+j*4099)%0x400000, Mapping: m})
			}
			for j := range 7 {
				s.Frames = append(s.Frames, stack.Frame{Kind: stack.Python, Mapping: -1, Func: fmt.Sprintf("module.fn_%d", (k+j)%200), File: "/src/train.py", Line: int32(10 + j)})
			}
			b.Samples = append(b.Samples, s)
		}
	}
	return b
}

// BenchmarkAppendStacks measures stack ingest into the store in samples
// (distinct stacks) per second; one op is one node window of 4,096
// samples. bytes/sample is the stored key+value size.
func BenchmarkAppendStacks(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		b.Run(fmt.Sprintf("nosync=%v", noSync), func(b *testing.B) {
			s, err := Open(b.TempDir(), Options{Logger: quiet, NoSync: noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if err := s.PutJob(testJob("a")); err != nil {
				b.Fatal(err)
			}
			batches := make([]*stack.Batch, 16)
			for i := range batches {
				batches[i] = benchStacks(fmt.Sprintf("node-%d", i), t0)
			}
			samples := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				bt := batches[i%len(batches)]
				bt.StartNS, bt.EndNS = t0+int64(i)*5e9, t0+int64(i+1)*5e9
				res, err := s.AppendStacks("a", bt)
				if err != nil {
					b.Fatal(err)
				}
				samples += res.Samples
			}
			b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
			st, _ := s.ProfileStats("a")
			b.ReportMetric(float64(st.StackBytes)/float64(max(st.Samples, 1)), "bytes/sample")
		})
	}
}

// BenchmarkScanStacks measures reading one rank's windows back.
func BenchmarkScanStacks(b *testing.B) {
	s, err := Open(b.TempDir(), Options{Logger: quiet, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.PutJob(testJob("a")); err != nil {
		b.Fatal(err)
	}
	for w := range 64 {
		if _, err := s.AppendStacks("a", benchStacks("n", t0+int64(w)*5e9)); err != nil {
			b.Fatal(err)
		}
	}
	samples := 0
	for b.Loop() {
		if err := s.ScanStacks("a", StackQuery{Rank: -1}, func(bt *stack.Batch) error { samples += len(bt.Samples); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
}
