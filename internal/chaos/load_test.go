package chaos

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChaos_Load: 64 concurrent posters (one rank each, 256-vector
// batches) ingest for a fixed time, once as JSON and once as protobuf,
// each against a fresh server. It measures values/s (acknowledged vectors
// × 6 stages per second), post latency and the server's RSS. Assertion:
// throughput > 0, no answer other than 200/429, RSS peak < 2 GiB.
func TestChaos_Load(t *testing.T) {
	enabled(t)
	const posters, batch = 64, 256
	dur := pick(3*time.Second, 20*time.Second)
	for _, enc := range []struct{ name, ctype string }{{"json", jsonType}, {"protobuf", protoType}} {
		t.Run(enc.name, func(t *testing.T) {
			s := startServer(t, t.TempDir())
			s.register(t, "load", posters)
			var (
				vectors  atomic.Int64
				statuses statusCounts
				mu       sync.Mutex
				lat      []time.Duration
				wg       sync.WaitGroup
			)
			client := newClient(posters, 60*time.Second)
			stopMem := s.memSampler()
			cpu0 := s.procCPU(t)
			start := time.Now()
			deadline := start.Add(dur)
			for p := range posters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for step := int64(0); time.Now().Before(deadline); {
						body := encode(enc.ctype, grid(step, batch, p))
						r, err := call(client, "POST", s.URL()+"/api/v1/jobs/load/vectors", enc.ctype, body, nil)
						if err != nil {
							statuses.add(-1)
							continue
						}
						statuses.add(r.status)
						if r.status == http.StatusOK {
							mine = append(mine, r.took)
							vectors.Add(batch)
							step += batch
						} else {
							time.Sleep(10 * time.Millisecond)
						}
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			cpu := s.procCPU(t) - cpu0
			peak, hwm := stopMem()
			vps := float64(vectors.Load()) / elapsed.Seconds()
			t.Logf("load %s (%s mode, %d posters, %d-vector batches, %v): %d vectors acknowledged = %.0f vectors/s = %.0f values/s (%d stages); post p50 %v p99 %v; server CPU %v (%.2f cores); RSS peak %.0f MiB, VmHWM %.0f MiB; statuses %v",
				enc.name, modeName(), posters, batch, elapsed.Round(time.Millisecond), vectors.Load(), vps, vps*float64(valuesPerVector),
				valuesPerVector, quantile(lat, 0.5).Round(time.Microsecond), quantile(lat, 0.99).Round(time.Microsecond),
				cpu, cpu.Seconds()/elapsed.Seconds(), mib(peak), mib(hwm), &statuses)
			if vectors.Load() == 0 {
				t.Errorf("no batch acknowledged in %v", dur)
			}
			if n := statuses.other(http.StatusOK, http.StatusTooManyRequests); n > 0 {
				t.Errorf("%d answers other than 200 or 429: %v", n, &statuses)
			}
			if hwm > 2<<30 {
				t.Errorf("server VmHWM %.0f MiB under load, want < 2048 MiB", mib(hwm))
			}
			// Everything acknowledged is counted as stored.
			if n := s.storedVectors(t, "load"); n < vectors.Load() {
				t.Errorf("the job reports %d vectors stored, fewer than the %d acknowledged", n, vectors.Load())
			}
		})
	}
}
