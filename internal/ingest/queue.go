// Package ingest is the bounded, group-committing ingest queue every
// signal kind's handler submits to. Handlers validate a request completely
// (nothing is stored on any error), submit it, and answer only once the
// single writer has committed it durably — so a 200 always means stored.
// The queue is bounded in requests and in bytes; when either bound is
// reached it sheds load with ErrFull (the HTTP layer answers 429 +
// Retry-After) instead of letting latency and memory grow without bound.
package ingest

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrFull: the queue is at its request or byte bound; retry later.
	ErrFull = errors.New("ingest queue is full")
	// ErrClosed: the queue no longer accepts requests (shutdown).
	ErrClosed = errors.New("server is shutting down")
)

// Config bounds a Queue. Zero fields take the defaults in parentheses.
type Config struct {
	// MaxRequests is the queue capacity in requests (1024).
	MaxRequests int
	// MaxBytes bounds the request bytes waiting in the queue (256 MiB).
	MaxBytes int64
	// MaxCommitRequests and MaxCommitItems bound one group commit (256
	// requests, 1<<18 items).
	MaxCommitRequests int
	MaxCommitItems    int
}

func (c *Config) setDefaults() {
	if c.MaxRequests <= 0 {
		c.MaxRequests = 1024
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 256 << 20
	}
	if c.MaxCommitRequests <= 0 {
		c.MaxCommitRequests = 256
	}
	if c.MaxCommitItems <= 0 {
		c.MaxCommitItems = 1 << 18
	}
}

// Request is one validated ingest request waiting for its commit.
type Request[T any] struct {
	Job     string
	Payload T
	// Items and Bytes are its size: what one commit and the queue bound.
	Items int
	Bytes int64
	done  chan error // buffered: the writer never blocks on a gone client
}

// Commit stores several requests' payloads atomically and durably.
type Commit[T any] func(reqs []*Request[T]) error

// Queue is a bounded ingest queue drained by one writer. One writer keeps
// commits ordered and lets it fold every waiting request into one
// commit: under load the commit grows and the fsync cost per request
// falls, which is what lets durable ingest keep up (group commit).
type Queue[T any] struct {
	cfg    Config
	commit Commit[T]
	log    *slog.Logger
	m      *Metrics

	mu     sync.Mutex // guards closed and bytes against a closing channel
	closed bool
	bytes  int64
	ch     chan *Request[T]
	done   chan struct{}
}

// New starts a queue whose writer calls commit. m may be nil.
func New[T any](cfg Config, commit Commit[T], log *slog.Logger, m *Metrics) *Queue[T] {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	q := &Queue[T]{cfg: cfg, commit: commit, log: log, m: m, ch: make(chan *Request[T], cfg.MaxRequests), done: make(chan struct{})}
	if m != nil {
		m.capacity.Set(float64(cfg.MaxRequests))
		m.capacityBytes.Set(float64(cfg.MaxBytes))
		m.depth = func() float64 { return float64(len(q.ch)) }
		m.queued = func() float64 { return float64(q.QueuedBytes()) }
	}
	go q.run()
	return q
}

// Submit enqueues a request without blocking and returns the channel its
// commit result arrives on.
func (q *Queue[T]) Submit(job string, payload T, items int, bytes int64) (<-chan error, error) {
	r := &Request[T]{Job: job, Payload: payload, Items: items, Bytes: bytes, done: make(chan error, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	// A request larger than the byte bound alone is still admitted into
	// an empty queue, or it could never be stored.
	if q.bytes > 0 && q.bytes+bytes > q.cfg.MaxBytes {
		q.shed()
		return nil, ErrFull
	}
	select {
	case q.ch <- r:
		q.bytes += bytes
		return r.done, nil
	default:
		q.shed()
		return nil, ErrFull
	}
}

func (q *Queue[T]) shed() {
	if q.m != nil {
		q.m.shed.Inc()
	}
}

// Depth is the number of requests waiting.
func (q *Queue[T]) Depth() int { return len(q.ch) }

// Close stops accepting requests and returns once every queued request has
// been committed and acknowledged.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	<-q.done
}

func (q *Queue[T]) run() {
	defer close(q.done)
	group := make([]*Request[T], 0, q.cfg.MaxCommitRequests)
	for r := range q.ch {
		group = append(group[:0], r)
		n := r.Items
	fill: // take whatever else is already waiting, never wait for more
		for len(group) < q.cfg.MaxCommitRequests && n < q.cfg.MaxCommitItems {
			select {
			case r, ok := <-q.ch:
				if !ok {
					break fill
				}
				group = append(group, r)
				n += r.Items
			default:
				break fill
			}
		}
		q.commitGroup(group)
		clear(group) // drop references so acknowledged payloads can be freed
	}
}

func (q *Queue[T]) commitGroup(group []*Request[T]) {
	start := time.Now()
	err := q.commit(group)
	if q.m != nil {
		q.m.commitSeconds.Observe(time.Since(start).Seconds())
		q.m.commitRequests.Observe(float64(len(group)))
	}
	if err != nil && len(group) > 1 {
		// One bad request (say, its job vanished) must not fail the
		// requests it happened to share a commit with.
		q.log.Warn("group commit failed, committing requests one by one", "requests", len(group), "err", err)
		for _, r := range group {
			q.commitGroup([]*Request[T]{r})
		}
		return
	}
	for _, r := range group {
		// Freed before the answer, so an acknowledged client's next
		// request finds the room it left.
		q.mu.Lock()
		q.bytes -= r.Bytes
		q.mu.Unlock()
		r.done <- err
	}
}

// QueuedBytes is the request bytes waiting.
func (q *Queue[T]) QueuedBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// Metrics are the queue's Prometheus metrics.
type Metrics struct {
	shed           prometheus.Counter
	capacity       prometheus.Gauge
	capacityBytes  prometheus.Gauge
	commitSeconds  prometheus.Histogram
	commitRequests prometheus.Histogram
	depth, queued  func() float64
}

// NewMetrics registers the queue metrics on reg (laggard_ingest_*).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "laggard", "ingest"
	m := &Metrics{
		shed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shed_total",
			Help: "Ingest requests shed with 429 because the queue was full (requests or bytes)."}),
		capacity: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_capacity",
			Help: "Ingest queue capacity in requests."}),
		capacityBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_capacity_bytes",
			Help: "Ingest queue capacity in request bytes."}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_seconds",
			Help: "Latency of one group commit (including fsync).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		commitRequests: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_batches",
			Help: "Ingest requests folded into one group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		depth:  func() float64 { return 0 },
		queued: func() float64 { return 0 },
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_depth",
		Help: "Ingest requests waiting for the writer."}, func() float64 { return m.depth() })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_bytes",
		Help: "Request bytes waiting for the writer."}, func() float64 { return m.queued() })
	for _, c := range []prometheus.Collector{m.shed, m.capacity, m.capacityBytes, m.commitSeconds, m.commitRequests, depth, queued} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
