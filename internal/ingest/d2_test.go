package ingest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// slowCommit is a store that takes a fixed time per commit and counts
// commits, like a disk whose fsync is slow.
type slowCommit struct {
	delay   time.Duration
	started atomic.Int64
	mu      sync.Mutex
	in      map[string]int64 // job → number of the last commit that held it
}

func (s *slowCommit) commit(reqs []*Request[[]stagevec.Vector]) error {
	n := s.started.Add(1)
	s.mu.Lock()
	for _, r := range reqs {
		s.in[r.Job] = n
	}
	s.mu.Unlock()
	time.Sleep(s.delay)
	return nil
}

func bigBatch(n int) []stagevec.Vector {
	vs := make([]stagevec.Vector, n)
	for i := range vs {
		vs[i] = stagevec.Vector{Step: int64(i), Durations: make([]float64, 8)}
	}
	return vs
}

// D2: one job floods the queue with big batches through a slow store; an
// unrelated job's 1-vector post must be admitted (no 429) and committed
// within a bounded number of commits — not after the flood's backlog.
// On the old FIFO queue it waited behind every queued flood batch (94.8 s
// in the probe) or was shed.
func TestD2_FairShare(t *testing.T) {
	sc := &slowCommit{delay: 5 * time.Millisecond, in: map[string]int64{}}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// A commit holds up to 2 flood batches' worth of items; the queue
	// holds many more.
	q := New(Config{MaxRequests: 1024, MaxBytes: 64 << 20, MaxCommitItems: 8192}, sc.commit, nil, m)
	defer q.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 4 { // flooders: keep the queue as full as it lets them
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				vs := bigBatch(4096)
				// Body bytes like a compact protobuf encoding.
				if _, err := q.Submit("flood", vs, len(vs), 16<<10); err == nil {
					admitted.Add(1)
				} else {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for q.Depth() < 8 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if q.Depth() < 8 {
		t.Fatalf("the flood did not build a backlog (depth %d)", q.Depth())
	}

	var lat []time.Duration
	var maxCommits int64
	for i := range 20 {
		start := time.Now()
		done, err := q.Submit("small", bigBatch(1), 1, 200)
		if err != nil {
			t.Fatalf("post %d of the unrelated job refused while another floods: %v", i, err)
		}
		s0 := sc.started.Load() // commits started before it could be taken
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("post %d of the unrelated job not committed after 10s (depth %d)", i, q.Depth())
		}
		lat = append(lat, time.Since(start))
		sc.mu.Lock()
		maxCommits = max(maxCommits, sc.in["small"]-s0+1) // +1: the commit in flight
		sc.mu.Unlock()
	}
	// Counted from commit starts: its own commit, and those the writers
	// (two by default) had already taken when it was queued. The old FIFO
	// queue made it wait for the whole backlog (or shed it).
	if maxCommits > 3 {
		t.Errorf("the unrelated job's post waited up to %d commits (want <= 3); latencies %v", maxCommits, lat)
	}
	t.Logf("unrelated 1-vector post: max %d commits, latencies %v; flood batches admitted %d", maxCommits, lat, admitted.Load())
}

// D2: the queue's byte bound is on what requests cost in memory once
// decoded, not on their body bytes: compact bodies that decode into many
// vectors cannot take memory past the bound.
func TestD2_MemoryBoundedByCost(t *testing.T) {
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	commit := func(reqs []*Request[[]stagevec.Vector]) error {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
		return nil
	}
	const maxBytes = 16 << 20
	q := New(Config{MaxRequests: 1 << 16, MaxBytes: maxBytes}, commit, nil, nil)
	defer func() { close(gate); q.Close() }()

	var held int64
	var dones []<-chan error
	for i := range 256 {
		vs := bigBatch(2048)
		done, err := q.Submit("j"+string(rune('a'+i%26)), vs, len(vs), 8<<10) // ~8 KiB of body each
		if errors.Is(err, ErrFull) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dones = append(dones, done)
		if i == 0 {
			<-entered // the first is in the (held) commit
			time.Sleep(10 * time.Millisecond)
			continue
		}
		held += int64(cap(vs))*int64(vectorSizeForTest) + int64(len(vs))*8*8
	}
	if len(dones) < 2 {
		t.Fatalf("admitted only %d requests", len(dones))
	}
	// Beyond the bound: what the writers' commits hold (the first request
	// is in one; the second writer may hold a group of up to
	// MaxCommitBytes, taken from the queue while this loop ran).
	var c Config
	c.setDefaults()
	if held > maxBytes+c.MaxCommitBytes+int64(2048*(vectorSizeForTest+64)) {
		t.Fatalf("queued requests hold %d MiB decoded, the bound is %d MiB (%d requests admitted)", held>>20, maxBytes>>20, len(dones))
	}
	t.Logf("%d requests admitted, %d MiB decoded", len(dones), held>>20)
}

// vectorSizeForTest is the in-memory size of a stagevec.Vector struct.
const vectorSizeForTest = 120
