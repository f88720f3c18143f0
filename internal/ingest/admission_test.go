package ingest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestD2_GateServesJobsRoundRobin: with every decode slot held by a
// flooding job and more of its requests waiting, another job's request is
// served at the next release, not after the flooder's backlog.
func TestD2_GateServesJobsRoundRobin(t *testing.T) {
	g := NewGate(GateConfig{Slots: 1, MaxWait: 10 * time.Second})
	rel, err := g.Acquire(context.Background(), "flood")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(job string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.Acquire(context.Background(), job)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, job)
			mu.Unlock()
			r()
		}()
	}
	for range 5 {
		start("flood")
	}
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting["flood"]) == 5 })
	start("small")
	waitFor(t, func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.waiting["small"]) == 1 })
	rel()
	wg.Wait()
	// The flooder's oldest waiter was first in the ring; the small job is
	// served right after it, ahead of the other four.
	if len(order) != 6 || order[0] != "flood" || order[1] != "small" {
		t.Fatalf("service order %v, want the small job second", order)
	}
	if g.free != 1 || len(g.ring) != 0 || len(g.waiting) != 0 {
		t.Fatalf("gate not idle after all releases: free %d ring %v waiting %d", g.free, g.ring, len(g.waiting))
	}
}

func TestGateWaitBounded(t *testing.T) {
	g := NewGate(GateConfig{Slots: 1, MaxWait: 20 * time.Millisecond})
	rel, _ := g.Acquire(context.Background(), "a")
	if _, err := g.Acquire(context.Background(), "b"); !errors.Is(err, ErrFull) {
		t.Fatalf("Acquire past MaxWait: %v, want ErrFull", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Acquire(ctx, "b"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v", err)
	}
	rel()
	// The waiters that gave up left nothing behind: the slot is free.
	r2, err := g.Acquire(context.Background(), "c")
	if err != nil {
		t.Fatalf("slot not free after the waiters gave up: %v", err)
	}
	r2()
	if g.free != 1 || len(g.ring) != 0 {
		t.Fatalf("free %d ring %v", g.free, g.ring)
	}
}

func TestGateReserveShares(t *testing.T) {
	const M = 1 << 20
	g := NewGate(GateConfig{MaxBytes: 100 * M, JobBytes: 60 * M})
	steps := []struct {
		job  string
		n    int64
		want error
	}{
		{"a", 50 * M, nil},
		{"a", 20 * M, ErrJobShare}, // 70 > 60 while a holds bytes
		{"b", 40 * M, nil},
		{"c", 20 * M, ErrFull}, // 110 > 100
		{"c", 10 * M, nil},
		// The budget is spent, but a job's first SmallBody bytes are
		// always admitted: an idle job's small post gets in.
		{"d", 4 << 10, nil},
		{"d", SmallBody - 4<<10, nil},
		{"d", 1, ErrFull},
	}
	for i, s := range steps {
		if err := g.Reserve(s.job, s.n); !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("step %d: Reserve(%s, %d) = %v, want %v", i, s.job, s.n, err, s.want)
		}
	}
	g.Return("a", 50*M)
	g.Return("b", 40*M)
	g.Return("c", 10*M)
	g.Return("d", SmallBody)
	if g.InFlight() != 0 || len(g.held) != 0 {
		t.Fatalf("in flight %d, held %v after returning everything", g.InFlight(), g.held)
	}
	// A single body larger than the job share is admitted when the job
	// holds nothing, or it could never be read.
	if err := g.Reserve("a", 80*M); err != nil {
		t.Fatalf("lone large body refused: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
