package ingest

import (
	"context"
	"sync"
	"time"
)

// Gate admits requests to the work that happens before Submit: reading a
// body into memory and decoding it. The queue bounds what waits to be
// committed, but a flooding job can keep many large bodies in flight at
// once, and decoding them takes the CPU a small post of another job needs
// (D2: 64 connections posting 65,536-vector batches kept every core busy
// decoding batches the queue then shed, and an unrelated 1-vector post
// waited seconds). So the Gate bounds both, fairly between jobs:
//
//   - body bytes in flight, in total and per job (Reserve/Return), so
//     memory before the queue is bounded too and a flooder is shed with
//     ErrJobShare before its bodies are even read;
//   - concurrent decodes (Acquire): a fixed number of slots handed to
//     waiting jobs round-robin, so another job's request waits for at most
//     one decode of the flooder, not for its backlog.
//
// Hand-written: a weighted or fair semaphore keyed by job is not in the
// standard library, and golang.org/x/sync/semaphore is FIFO over all
// callers, which is exactly the unfairness this avoids.
type Gate struct {
	slots    int
	maxWait  time.Duration
	maxBytes int64
	jobBytes int64

	mu      sync.Mutex
	free    int
	waiting map[string][]chan struct{} // per job, oldest first
	ring    []string                   // jobs with waiters, in service order
	bytes   int64
	held    map[string]int64
}

// SmallBody is the body size a job may always have in flight, and below
// which a body is decoded without a slot: 64 KiB is a few hundred vectors
// (the Python client's batch is 256), well under a millisecond of
// decoding.
const SmallBody = 64 << 10

// GateConfig sizes a Gate. Zero fields take the defaults in parentheses.
type GateConfig struct {
	// Slots is the number of concurrent decodes (2); about the number of
	// cores, since decoding is CPU work.
	Slots int
	// MaxWait bounds the wait for a slot (2s); past it the request is
	// shed with ErrFull rather than left to time out.
	MaxWait time.Duration
	// MaxBytes bounds body bytes in flight (128 MiB); JobBytes one job's
	// share of it (MaxBytes/2). JobBytes should be at least the largest
	// accepted body, or such a body can never be read.
	MaxBytes int64
	JobBytes int64
}

// NewGate returns a Gate.
func NewGate(c GateConfig) *Gate {
	if c.Slots <= 0 {
		c.Slots = 2
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 2 * time.Second
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 128 << 20
	}
	if c.JobBytes <= 0 || c.JobBytes > c.MaxBytes {
		c.JobBytes = c.MaxBytes / 2
	}
	return &Gate{slots: c.Slots, maxWait: c.MaxWait, maxBytes: c.MaxBytes, jobBytes: c.JobBytes,
		free: c.Slots, waiting: map[string][]chan struct{}{}, held: map[string]int64{}}
}

// Reserve takes n bytes of the in-flight budget for job, or fails with
// ErrJobShare (the job holds its share) or ErrFull (the budget is spent).
func (g *Gate) Reserve(job string, n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.held[job]
	switch {
	case h+n <= SmallBody:
		// Every job's first SmallBody bytes are admitted whatever others
		// hold: the room that lets an idle job's small post in while
		// others flood (bounded by the connection limit × SmallBody).
	case h+n > g.jobBytes && h > 0:
		return ErrJobShare
	case g.bytes+n > g.maxBytes && g.bytes > 0:
		return ErrFull
	}
	g.held[job] = h + n
	g.bytes += n
	return nil
}

// Return gives back n bytes Reserve took for job.
func (g *Gate) Return(job string, n int64) {
	if n <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.bytes -= n
	if h := g.held[job] - n; h > 0 {
		g.held[job] = h
	} else {
		delete(g.held, job)
	}
}

// InFlight is the body bytes reserved.
func (g *Gate) InFlight() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bytes
}

// Acquire waits for a decode slot for job and returns the function that
// gives it back. Waiting jobs are served round-robin. It fails with ErrFull
// after MaxWait, or with ctx's error.
func (g *Gate) Acquire(ctx context.Context, job string) (release func(), err error) {
	g.mu.Lock()
	if g.free > 0 && len(g.ring) == 0 {
		g.free--
		g.mu.Unlock()
		return g.release, nil
	}
	ch := make(chan struct{}, 1) // buffered: release never blocks on a gone waiter
	if len(g.waiting[job]) == 0 {
		g.ring = append(g.ring, job)
	}
	g.waiting[job] = append(g.waiting[job], ch)
	g.mu.Unlock()

	t := time.NewTimer(g.maxWait)
	defer t.Stop()
	select {
	case <-ch:
		return g.release, nil
	case <-t.C:
		err = ErrFull
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	if !g.dequeue(job, ch) {
		// Handed a slot while giving up: pass it on.
		g.mu.Unlock()
		g.release()
		return nil, err
	}
	g.mu.Unlock()
	return nil, err
}

// dequeue removes ch from job's waiters; false if it was already served.
// g.mu is held.
func (g *Gate) dequeue(job string, ch chan struct{}) bool {
	w := g.waiting[job]
	for i, c := range w {
		if c != ch {
			continue
		}
		w = append(w[:i], w[i+1:]...)
		if len(w) == 0 {
			delete(g.waiting, job)
			g.dropRing(job)
		} else {
			g.waiting[job] = w
		}
		return true
	}
	return false
}

func (g *Gate) dropRing(job string) {
	for i, j := range g.ring {
		if j == job {
			g.ring = append(g.ring[:i], g.ring[i+1:]...)
			return
		}
	}
}

// release hands the slot to the first waiter of the next job in the ring
// (that job goes to the back if it has more waiters), or frees it.
func (g *Gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ring) == 0 {
		g.free++
		return
	}
	job := g.ring[0]
	g.ring = g.ring[1:]
	w := g.waiting[job]
	ch := w[0]
	if len(w) > 1 {
		g.waiting[job] = w[1:]
		g.ring = append(g.ring, job)
	} else {
		delete(g.waiting, job)
	}
	ch <- struct{}{}
}
