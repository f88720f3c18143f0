package server

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

var (
	errQueueFull = errors.New("ingest queue is full")
	errClosed    = errors.New("server is shutting down")
)

// pending is one validated ingest request waiting for its commit.
type pending struct {
	job      string
	encoding string
	vectors  []stagevec.Vector
	bytes    int64
	done     chan error // buffered: the writer never blocks on a gone client
}

// queue is the bounded ingest queue and its single writer. One writer
// keeps commits ordered and lets it fold every waiting request into one
// AppendMany: under load the batch grows and the fsync cost per request
// falls, which is what lets durable ingest keep up (group commit).
type queue struct {
	st  Store
	log *slog.Logger
	m   *metrics

	maxGroup   int // requests per commit
	maxVectors int // vectors per commit

	mu     sync.RWMutex // guards closed against sends on a closed channel
	closed bool
	ch     chan *pending
	done   chan struct{}
}

func newQueue(st Store, depth, maxGroup, maxVectors int, log *slog.Logger, m *metrics) *queue {
	q := &queue{st: st, log: log, m: m, maxGroup: maxGroup, maxVectors: maxVectors,
		ch: make(chan *pending, depth), done: make(chan struct{})}
	go q.run()
	return q
}

// submit enqueues p without blocking.
func (q *queue) submit(p *pending) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return errClosed
	}
	select {
	case q.ch <- p:
		return nil
	default:
		return errQueueFull
	}
}

func (q *queue) depth() int { return len(q.ch) }

// close stops accepting batches and returns once every queued batch has
// been committed and acknowledged.
func (q *queue) close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	<-q.done
}

func (q *queue) run() {
	defer close(q.done)
	group := make([]*pending, 0, q.maxGroup)
	for p := range q.ch {
		group = append(group[:0], p)
		n := len(p.vectors)
	fill: // take whatever else is already waiting, never wait for more
		for len(group) < q.maxGroup && n < q.maxVectors {
			select {
			case p, ok := <-q.ch:
				if !ok {
					break fill
				}
				group = append(group, p)
				n += len(p.vectors)
			default:
				break fill
			}
		}
		q.commit(group)
		clear(group) // drop references so acknowledged vectors can be freed
	}
}

func (q *queue) commit(group []*pending) {
	batches := make([]store.Batch, len(group))
	for i, p := range group {
		batches[i] = store.Batch{JobID: p.job, Vectors: p.vectors}
	}
	start := time.Now()
	err := q.st.AppendMany(batches)
	q.m.commitSeconds.Observe(time.Since(start).Seconds())
	q.m.commitBatches.Observe(float64(len(group)))
	if err != nil && len(group) > 1 {
		// One bad batch (say, its job vanished) must not fail the
		// requests it happened to share a commit with.
		q.log.Warn("group commit failed, committing batches one by one", "batches", len(group), "err", err)
		for _, p := range group {
			q.commit([]*pending{p})
		}
		return
	}
	for _, p := range group {
		if err == nil {
			q.count(p)
		}
		p.done <- err
	}
}

func (q *queue) count(p *pending) {
	values := 0
	for i := range p.vectors {
		values += len(p.vectors[i].Durations) + 1 + len(p.vectors[i].Probes) // +1: wall_ms
	}
	q.m.vectors.WithLabelValues(p.job, p.encoding).Add(float64(len(p.vectors)))
	q.m.values.WithLabelValues(p.job, p.encoding).Add(float64(values))
	q.m.bytes.WithLabelValues(p.job, p.encoding).Add(float64(p.bytes))
}
