package chaos

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChaos_KillNine: posters ingest concurrently while the server is
// SIGKILLed at random moments three times and restarted on the same data
// directory. Assertion: every vector the server acknowledged with 200 is
// in the export afterwards (0 lost), and ingest works after each restart.
func TestChaos_KillNine(t *testing.T) {
	enabled(t)
	posters := pick(8, 64)
	jobs := pick(2, 8)
	batch := int64(pick(64, 256)) // steps per batch; one rank per poster
	gapMin, gapMax := pick(400*time.Millisecond, 3*time.Second), pick(1500*time.Millisecond, 10*time.Second)
	const kills = 3

	s := startServer(t, t.TempDir())
	world := posters / jobs
	for j := range jobs {
		s.register(t, fmt.Sprintf("kill-%d", j), world)
	}

	// Each poster retries its batch until it is acknowledged, so its
	// acknowledged steps are exactly [0, acked).
	acked := make([]atomic.Int64, posters)
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		statuses statusCounts
	)
	client := newClient(posters, 30*time.Second)
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job, rank := fmt.Sprintf("kill-%d", p%jobs), p/jobs
			ctype := []string{jsonType, protoType}[p%2]
			for step := int64(0); !stop.Load(); {
				body := encode(ctype, grid(step, batch, rank))
				r, err := call(client, "POST", s.URL()+"/api/v1/jobs/"+job+"/vectors", ctype, body, nil)
				if err != nil {
					statuses.add(-1)
					time.Sleep(20 * time.Millisecond) // the server is down or restarting
					continue
				}
				statuses.add(r.status)
				if r.status != http.StatusOK {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				step += batch
				acked[p].Store(step)
			}
		}()
	}
	total := func() (n int64) {
		for i := range acked {
			n += acked[i].Load()
		}
		return n
	}
	// waitProgress waits until more than from steps are acknowledged.
	waitProgress := func(from int64, what string) {
		deadline := time.Now().Add(60 * time.Second)
		for total() <= from {
			if time.Now().After(deadline) {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("no acknowledged ingest %s within 60s (statuses %v)", what, &statuses)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	var restarts []time.Duration
	waitProgress(0, "before the first kill")
	for k := 1; k <= kills; k++ {
		time.Sleep(gapMin + rand.N(gapMax-gapMin))
		before := total()
		s.kill()
		start := time.Now()
		if err := s.start(); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("restart %d on the same data dir: %v", k, err)
		}
		restarts = append(restarts, time.Since(start).Round(time.Millisecond))
		t.Logf("kill -9 #%d after %d acknowledged vectors; restarted in %v", k, before, restarts[k-1])
		waitProgress(total(), fmt.Sprintf("after restart %d", k))
	}
	time.Sleep(gapMin)
	stop.Store(true)
	wg.Wait()

	// Every acknowledged (job, step, rank) must be stored.
	var ackedN, lost, stored int64
	for j := range jobs {
		job := fmt.Sprintf("kill-%d", j)
		seen := make([][]bool, world)
		for r := range world {
			seen[r] = make([]bool, acked[j+r*jobs].Load())
		}
		stored += int64(s.exported(t, job, func(k key) {
			if k.rank >= 0 && k.rank < world && k.step >= 0 && k.step < int64(len(seen[k.rank])) {
				seen[k.rank][k.step] = true
			}
		}))
		for r := range world {
			for step, ok := range seen[r] {
				ackedN++
				if !ok {
					if lost < 5 {
						t.Errorf("lost: job %s step %d rank %d was acknowledged but is not stored", job, step, r)
					}
					lost++
				}
			}
		}
	}
	t.Logf("kill -9 (%s mode): %d posters on %d jobs, %d kills, restarts %v; acknowledged %d vectors, lost %d; export holds %d; statuses %v",
		modeName(), posters, jobs, kills, restarts, ackedN, lost, stored, &statuses)
	if lost > 0 {
		t.Errorf("%d of %d acknowledged vectors lost across %d SIGKILLs", lost, ackedN, kills)
	}
	if n := statuses.other(http.StatusOK, http.StatusTooManyRequests, -1); n > 0 {
		t.Errorf("%d ingest answers other than 200, 429 or a dropped connection: %v", n, &statuses)
	}
}
