package chaos

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// collectiveBody is rank's calls seq [from, from+n) on two communicators,
// as protobuf or JSON.
func collectiveBody(t testing.TB, ctype string, rank int, from, n int64) []byte {
	b := &collective.Batch{}
	base := time.Now().Add(-time.Hour).UnixNano()
	for s := from; s < from+n; s++ {
		comm := "world"
		if s%2 == 1 {
			comm = "dp-" + fmt.Sprint(rank%8)
		}
		e := base + s*1000 + int64(rank)
		b.Calls = append(b.Calls, collective.Call{Rank: rank, PID: 1000 + rank, Comm: comm, Seq: s / 2, Op: collective.AllReduce,
			Bytes: 1 << 22, Count: 1 << 20, Dtype: "bf16", Peer: -1, Root: -1, Step: s / 64, Stream: 7,
			EnterNS: e, ReturnNS: e + 500, DevStartNS: e + 100, DevEndNS: e + 900})
	}
	var body []byte
	var err error
	if ctype == protoType {
		body, err = laggardv1.MarshalProtoCollectives(b)
	} else {
		body, err = laggardv1.MarshalJSONCollectives(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestChaos_LoadCollectives (issue 16 item 9): collective-call ingest
// took the server to 1.0–1.6 GB of RSS within 10 s of load. 64 posters
// (one rank each) post large collective batches as fast as they are
// acknowledged, as JSON and as protobuf, each against a fresh server.
// Assertions: throughput > 0, no answer other than 200/429, and the
// server's peak RSS (VmHWM) under the memory check's bound: 768 MiB for
// ingest — bodies, decodes and the queue are bounded in bytes, so load
// shows as 429, not as memory — with the Greyhound controller off, whose
// analysis of the flooding job is bounded on its own (its MaxCalls, ~250
// MB a report); and, in full mode, 2 GiB (TestChaos_Load's bound) for
// the server as it ships, Greyhound on. A race-built server (go test
// -race) is allowed 3× each bound.
func TestChaos_LoadCollectives(t *testing.T) {
	enabled(t)
	const posters = 64
	calls := int64(pick(16_384, 65_536)) // per batch: ~1 MB of protobuf, ~10 MB of JSON at full size
	dur := pick(4*time.Second, 15*time.Second)
	type run struct {
		name, ctype string
		args        []string
		bound       int64
	}
	runs := []run{
		{"json", jsonType, []string{"-greyhound-interval", "0"}, 768 << 20},
		{"protobuf", protoType, []string{"-greyhound-interval", "0"}, 768 << 20},
	}
	if fullMode {
		runs = append(runs, run{"protobuf, greyhound on", protoType, nil, 2 << 30})
	}
	for _, rc := range runs {
		t.Run(rc.name, func(t *testing.T) {
			s := startServer(t, t.TempDir(), rc.args...)
			s.register(t, "coll", posters)
			// Pre-encoded: the posters spend their CPU sending.
			bodies := make([][][]byte, posters)
			for p := range posters {
				for i := range int64(4) {
					bodies[p] = append(bodies[p], collectiveBody(t, rc.ctype, p, i*calls, calls))
				}
			}
			var (
				acked    atomic.Int64
				statuses statusCounts
				wg       sync.WaitGroup
				firstErr sync.Once
				netErr   error
			)
			client := newClient(posters, 120*time.Second)
			stopMem := s.memSampler()
			start := time.Now()
			deadline := start.Add(dur)
			for p := range posters {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(deadline); {
						r, err := call(client, "POST", s.URL()+"/api/v1/jobs/coll/collectives", rc.ctype, bodies[p][i%len(bodies[p])], nil)
						if err != nil {
							statuses.add(-1)
							firstErr.Do(func() { netErr = err })
							continue
						}
						statuses.add(r.status)
						if r.status == http.StatusOK {
							acked.Add(calls)
							i++
						} else {
							time.Sleep(10 * time.Millisecond)
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			peak, hwm := stopMem()
			t.Logf("collectives %s (%s mode, server flags %v, %d posters × %d-call batches, %v): %d calls acknowledged = %.0f calls/s; RSS peak %.0f MiB, VmHWM %.0f MiB; statuses %v",
				rc.name, modeName(), rc.args, posters, calls, elapsed.Round(time.Millisecond), acked.Load(), float64(acked.Load())/elapsed.Seconds(), mib(peak), mib(hwm), &statuses)
			if acked.Load() == 0 {
				t.Errorf("no batch acknowledged in %v", dur)
			}
			// A transport error is allowed: a 429 before the body is read
			// drains at most 1 MiB of it (shedding must stay cheap), so a
			// client still sending a larger body may see the connection
			// close before it reads the answer. A crash is caught by the
			// harness from the server's log.
			if n := statuses.other(http.StatusOK, http.StatusTooManyRequests, -1); n > 0 {
				t.Errorf("%d answers other than 200 or 429: %v", n, &statuses)
			}
			if netErr != nil {
				t.Logf("first transport error (a shed body over 1 MiB): %v", netErr)
			}
			bound := rc.bound
			if serverRace {
				// go test -race builds the server with the race detector,
				// whose shadow memory multiplies what every allocation
				// costs (Go documents 5–10×; TestChaos_UploadMemory
				// measured ~4×): the bounds above are a normal build's.
				// The defect this guards — RSS growing with the load
				// instead of shedding, 1.0–1.6 GB in a normal build —
				// still fails at 3×.
				bound *= 3
			}
			t.Logf("VmHWM bound %.0f MiB (race-built server: %v)", mib(bound), serverRace)
			if hwm > bound {
				t.Errorf("server VmHWM %.0f MiB under collective load, want < %.0f MiB (race-built server: %v)", mib(hwm), mib(bound), serverRace)
			}
		})
	}
}
