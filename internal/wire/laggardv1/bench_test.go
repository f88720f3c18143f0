package laggardv1

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// benchBatch is 256 six-stage vectors, the Python shipper's batch size.
func benchBatch() []stagevec.Vector {
	vs := make([]stagevec.Vector, 256)
	for i := range vs {
		vs[i] = stagevec.Vector{Step: int64(i / 64), Rank: i % 4, Durations: []float64{1.25, 10.5, 20.125, 2, 3.75, 0.5}, WallMS: 38.125}
		if i%4 == 0 {
			vs[i].Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 9.5, Ready: true}}
		}
	}
	return vs
}

func benchDecode(b *testing.B, body []byte, decode func(*bytes.Reader, *signal.Job) error) {
	job := testJob()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	r := bytes.NewReader(body)
	for b.Loop() {
		r.Reset(body)
		if err := decode(r, job); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(256*7*b.N)/b.Elapsed().Seconds(), "values/s")
}

func BenchmarkDecodeJSONBatch(b *testing.B) {
	body, _ := json.Marshal(map[string]any{"vectors": benchBatch()})
	benchDecode(b, body, func(r *bytes.Reader, j *signal.Job) error { _, err := DecodeJSONBatch(r, j, 0); return err })
}

func BenchmarkDecodeProtoBatch(b *testing.B) {
	body, _ := EncodeProtoBatch(benchBatch())
	benchDecode(b, body, func(r *bytes.Reader, j *signal.Job) error { _, err := DecodeProtoBatch(r, j, 0); return err })
}
