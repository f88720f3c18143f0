package laggardv1

import (
	"fmt"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// benchStackBatch is one node's 5 s window: 8 ranks × 512 distinct stacks of
// 32 frames (kernel head, native middle in two Build-ID'd mappings,
// Python tail), what the agent ships per request.
func benchStackBatch() *stack.Batch {
	b := &stack.Batch{Node: "node-0", StartNS: enter0, EndNS: enter0 + 5e9, Hz: 99, Ratio: 1,
		Mappings: []stack.Mapping{{Start: 0x400000, Limit: 0x900000, BuildID: "0123456789abcdef0123456789abcdef01234567", Path: "/usr/bin/python3.11"},
			{Start: 0x7f0000000000, Limit: 0x7f0001000000, BuildID: "fedcba9876543210fedcba9876543210fedcba98", Path: "/usr/lib/libtorch_cpu.so"}}}
	for r := range 8 {
		for k := range 512 {
			s := stack.Sample{Rank: r, PID: 1000 + r, TID: 1000 + r, Comm: "python3", Count: int64(1 + k%7)}
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

// BenchmarkUnmarshalStacks decodes and validates one node window, in
// samples per second, protobuf and JSON; bytes/sample is the body size.
func BenchmarkUnmarshalStacks(b *testing.B) {
	bt := benchStackBatch()
	pbb, _ := MarshalProtoStacks(bt)
	js, _ := MarshalJSONStacks(bt)
	for _, c := range []struct {
		name string
		body []byte
		dec  func([]byte) (*stack.Batch, error)
	}{{"protobuf", pbb, UnmarshalProtoStacks}, {"json", js, UnmarshalJSONStacks}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if _, err := c.dec(c.body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(bt.Samples)*b.N)/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(len(c.body))/float64(len(bt.Samples)), "bytes/sample")
		})
	}
}
