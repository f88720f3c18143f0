package wire

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/model"
)

// benchBatch is 256 six-stage vectors, the Python shipper's batch size.
func benchBatch() []model.StageVector {
	vs := make([]model.StageVector, 256)
	for i := range vs {
		vs[i] = model.StageVector{Step: int64(i / 64), Rank: i % 4, Durations: []float64{1.25, 10.5, 20.125, 2, 3.75, 0.5}, WallMS: 38.125}
		if i%4 == 0 {
			vs[i].Probes = map[string]model.Probe{model.ProbeForwardCUDA: {Value: 9.5, Ready: true}}
		}
	}
	return vs
}

func benchDecode(b *testing.B, body []byte, decode func(*bytes.Reader, *model.Job) error) {
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
	benchDecode(b, body, func(r *bytes.Reader, j *model.Job) error { _, err := DecodeJSONBatch(r, j, 0); return err })
}

func BenchmarkDecodeProtoBatch(b *testing.B) {
	body, _ := EncodeProtoBatch(benchBatch())
	benchDecode(b, body, func(r *bytes.Reader, j *model.Job) error { _, err := DecodeProtoBatch(r, j, 0); return err })
}
