package laggardv1

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// BenchmarkDecodeCollectives decodes one agent batch of 4,096 calls (64
// ranks × 64 calls) in each encoding; the metric is calls/s.
func BenchmarkDecodeCollectives(b *testing.B) {
	batch := &collective.Batch{}
	for r := range 64 {
		for k := range int64(64) {
			e := int64(1.7e18) + k*2e6 + int64(r)*1000
			batch.Calls = append(batch.Calls, collective.Call{Rank: r, PID: 4000 + r, Comm: "dp-0123456789abcdef", Seq: k, Op: collective.AllReduce,
				Bytes: 26214400, Count: 6553600, Dtype: "float32", Peer: -1, Root: -1, Stream: 0x7f00,
				EnterNS: e, ReturnNS: e + 12_000, DevStartNS: e + 30_000, DevEndNS: e + 1_500_000, Step: -1})
		}
	}
	js, _ := MarshalJSONCollectives(batch)
	pbb, _ := MarshalProtoCollectives(batch)
	for _, c := range []struct {
		name   string
		body   []byte
		decode func([]byte, int) (*collective.Batch, error)
	}{{"json", js, UnmarshalJSONCollectives}, {"protobuf", pbb, UnmarshalProtoCollectives}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for range b.N {
				if _, err := c.decode(c.body, 64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(batch.Calls))/b.Elapsed().Seconds(), "calls/s")
		})
	}
}
