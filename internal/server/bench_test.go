package server

import (
	"bytes"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

const (
	benchWorld = 64
	benchSteps = 4 // per batch: 64 ranks × 4 steps = 256 vectors, the Python shipper's batch size
)

// benchIngest posts b.N pre-encoded batches (distinct steps, so every
// vector is a new key and encoding is outside the timer) from parallel clients through the full HTTP path into a
// real store, and reports stored measurements per second.
func benchIngest(b *testing.B, ctype string, encode func(testing.TB, []stagevec.Vector) []byte) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			st, err := store.Open(b.TempDir(), store.Options{Logger: quiet, NoSync: mode.noSync})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			_, ts := start(b, st, Config{QueueDepth: 4096})
			register(b, ts.URL, testJob("bench", benchWorld), http.StatusCreated)
			bodies := make([][]byte, b.N)
			values := 0
			for i := range bodies {
				vs := vectors(benchWorld, int64(i*benchSteps), int64((i+1)*benchSteps))
				bodies[i] = encode(b, vs)
				if i == 0 {
					for _, v := range vs {
						values += len(v.Durations) + 1 + len(v.Probes)
					}
				}
			}
			url := ts.URL + "/api/v1/jobs/bench/vectors"
			var next, bytesSent atomic.Int64
			b.SetParallelism(4) // several ranks shipping at once lets group commit work
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
				for pb.Next() {
					body := bodies[next.Add(1)-1]
					bytesSent.Add(int64(len(body)))
					res, err := client.Post(url, ctype, bytes.NewReader(body))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						b.Errorf("status %d", res.StatusCode)
						return
					}
				}
			})
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*values)/sec, "values/s")
			b.ReportMetric(float64(b.N*benchWorld*benchSteps)/sec, "vectors/s")
			b.ReportMetric(float64(bytesSent.Load())/float64(b.N), "body-B/op")
		})
	}
}

func BenchmarkIngestJSON(b *testing.B)  { benchIngest(b, jsonType, jsonBatch) }
func BenchmarkIngestProto(b *testing.B) { benchIngest(b, protoType, protoBatch) }
