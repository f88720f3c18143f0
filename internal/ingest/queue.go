// Package ingest is the bounded, group-committing ingest queue every
// signal kind's handler submits to. Handlers validate a request completely
// (nothing is stored on any error), submit it, and answer only once the
// single writer has committed it durably — so a 200 always means stored.
//
// The queue is bounded by what requests really cost: a request's cost is
// its decoded in-memory size (Cost), not its body bytes, so a compact
// protobuf body that decodes into many vectors counts as what it holds.
// It is also fair between jobs: each job has its own FIFO sub-queue, the
// writer serves the jobs round-robin and takes at most a fair share of one
// group commit from each, and a job that already has requests waiting may
// hold at most JobShare of the byte budget. Part of the budget is kept for
// small requests of jobs with nothing waiting, so one flooding job (or
// many) cannot make another job's small post wait behind its backlog: that
// post is admitted and committed in the next commit. When a bound is
// reached the queue sheds with ErrFull or ErrJobShare (the HTTP layer
// answers 429 + Retry-After) instead of letting latency and memory grow.
package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ErrFull: the queue is at its request or byte bound; retry later.
	ErrFull = errors.New("ingest queue is full")
	// ErrJobShare: this job already holds its share of the queue while
	// other jobs are served; retry later. errors.Is(ErrJobShare, ErrFull).
	ErrJobShare = fmt.Errorf("%w: this job already holds its share of the queue (other jobs are served first)", ErrFull)
	// ErrClosed: the queue no longer accepts requests (shutdown).
	ErrClosed = errors.New("server is shutting down")
)

// Shed reasons, the reason label of laggard_ingest_shed_total.
const (
	ReasonQueueFull = "queue_full"
	ReasonJobShare  = "job_share"
)

// Config bounds a Queue. Zero fields take the defaults in parentheses.
type Config struct {
	// MaxRequests is the queue capacity in requests (1024).
	MaxRequests int
	// MaxBytes bounds the cost (decoded in-memory bytes) of the requests
	// waiting in the queue (64 MiB: hundreds of commits' worth, and with
	// the body and decode budgets and Go's GC headroom the part of the
	// server's memory ingest may take; at 256 MiB a collective flood took
	// the server past 1 GB of RSS, issue 16 item 9).
	MaxBytes int64
	// JobShare is the fraction of MaxBytes and MaxRequests one job may
	// hold once it has requests waiting (0.5). A job's first waiting
	// request is admitted whenever the queue has room.
	JobShare float64
	// Reserve is the fraction of MaxBytes and MaxRequests only small
	// requests (cost ≤ Reserve·MaxBytes/16) of jobs with nothing waiting
	// may use (0.125): the room that lets an idle job's post in while
	// others flood.
	Reserve float64
	// MaxCommitRequests, MaxCommitItems and MaxCommitBytes bound one group
	// commit (256 requests, 1<<18 items, 1 MiB of cost), which bounds a
	// commit's latency and so the wait of a request admitted behind it:
	// about two commits. 1 MiB is ~5k vectors, a few milliseconds of
	// encoding and applying when they are new, against an fsync of about
	// a millisecond, so the fsync is still amortized; re-sent old steps
	// cost a duplicate probe each under the store's write lock, which is
	// why the bound is not larger (measured with 64 posters: the same
	// ingest rate at 1 MiB as at 4 MiB, and another job's post waited a
	// fifth as long behind a replay flood). A single request larger than
	// that is committed alone.
	MaxCommitRequests int
	MaxCommitItems    int
	MaxCommitBytes    int64
	// Writers is the number of concurrent group commits (2); one job's
	// requests are never in two at once, so each job's order holds.
	Writers int
	// Shared, if set, tells a commit error that would fail every request
	// alike (the store refuses all writes: a full disk) from one that may
	// be one request's fault. A failed group commit is retried request by
	// request, so that one bad request does not fail the others, unless
	// its error is shared: then each request gets it at once.
	Shared func(error) bool
}

// DefaultMaxBytes is Config.MaxBytes's default.
const DefaultMaxBytes = 64 << 20

func (c *Config) setDefaults() {
	if c.MaxRequests <= 0 {
		c.MaxRequests = 1024
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.JobShare <= 0 || c.JobShare > 1 {
		c.JobShare = 0.5
	}
	if c.Reserve <= 0 || c.Reserve >= 1 {
		c.Reserve = 0.125
	}
	if c.MaxCommitRequests <= 0 {
		c.MaxCommitRequests = 256
	}
	if c.MaxCommitItems <= 0 {
		c.MaxCommitItems = 1 << 18
	}
	if c.Writers <= 0 {
		c.Writers = 2
	}
	if c.MaxCommitBytes <= 0 {
		c.MaxCommitBytes = 1 << 20
	}
}

// Request is one validated ingest request waiting for its commit.
type Request[T any] struct {
	Job     string
	Payload T
	// Items and Bytes are its size: Bytes is its cost (see Queue.Submit),
	// what the queue and one commit are bounded by.
	Items int
	Bytes int64
	done  chan error // buffered: the writer never blocks on a gone client
}

// Commit stores several requests' payloads atomically and durably.
type Commit[T any] func(reqs []*Request[T]) error

// jobQueue is one job's waiting requests, oldest first.
type jobQueue[T any] struct {
	reqs  []*Request[T]
	bytes int64
	busy  bool // a writer is committing this job's requests
	// ratio is the job's last request's cost per byte the caller gave
	// (decoded in-memory bytes per body byte), so Precheck can charge a
	// body what it will cost once decoded.
	ratio float64
	// holds are requests admitted by Hold whose bodies are being read
	// and decoded, and holdBytes their estimated cost: counted like
	// waiting requests, so concurrent admissions cannot all pass on the
	// same room.
	holds     int
	holdBytes int64
	inRing    bool // listed in Queue.ring (has or had requests waiting)
}

// Queue is a bounded, per-job fair ingest queue drained by a few writers.
//
// Group commit is what makes durable ingest fast: a writer folds every
// job's waiting requests into one commit, so under load commits grow and
// the fsync cost per request falls. What a FIFO queue with one writer
// must not do is serve jobs first-come-first-served — that is how one
// job's backlog delayed another job's post for 95 s (D2). Here each job
// has its own sub-queue, served round-robin with a fair share of each
// commit, and commits are bounded in bytes, so a job's post waits for at
// most the commit in flight and its own.
//
// Why two writers (Config.Writers) rather than one: a commit cannot be
// smaller than its largest request (a request is stored atomically), and
// a flooding job's 16k-vector batch takes ~60 ms to encode and apply on a
// loaded machine, so with one writer a small post waited ~2 such commits
// (p50 120 ms measured in TestD2_FairShareHTTP). With a second writer a
// job's post is taken as soon as it arrives while the other writer is
// busy with the flood; the two commits overlap everywhere but the store's
// short serialized apply, and still share WAL fsyncs. More writers would
// only contend on that apply. A job is committed by one writer at a time
// (jobQueue.busy), which keeps each job's requests in order.
type Queue[T any] struct {
	cfg    Config
	commit Commit[T]
	log    *slog.Logger
	m      *Metrics

	mu     sync.Mutex
	closed bool
	bytes  int64 // cost of all waiting requests
	reqs   int   // waiting requests
	held   int64 // estimated cost of the requests admitted by Hold, not yet released
	holds  int
	jobs   map[string]*jobQueue[T]
	ring   []string // jobs with waiting requests, in service order

	retryLog Throttle

	wake    chan struct{} // buffered(1): work arrived, a job became free, or the queue closed
	done    chan struct{}
	writers sync.WaitGroup
}

// New starts a queue whose writer calls commit. m may be nil.
func New[T any](cfg Config, commit Commit[T], log *slog.Logger, m *Metrics) *Queue[T] {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	q := &Queue[T]{cfg: cfg, commit: commit, log: log, m: m, jobs: map[string]*jobQueue[T]{},
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	if m != nil {
		m.capacity.Set(float64(cfg.MaxRequests))
		m.capacityBytes.Set(float64(cfg.MaxBytes))
		m.depth = func() float64 { return float64(q.Depth()) }
		m.queued = func() float64 { return float64(q.QueuedBytes()) }
		m.jobsWaiting = func() float64 { return float64(q.Jobs()) }
	}
	for range cfg.Writers {
		q.writers.Add(1)
		go q.run()
	}
	go func() { q.writers.Wait(); close(q.done) }()
	return q
}

// Submit enqueues a request without blocking and returns the channel its
// commit result arrives on. bytes is the caller's size of the request;
// the queue charges max(bytes, Cost(payload)), so a payload it knows
// (stage vectors) is charged its decoded in-memory size even when the
// caller passes body bytes.
func (q *Queue[T]) Submit(job string, payload T, items int, bytes int64) (<-chan error, error) {
	cost := max(bytes, Cost(payload), 1)
	r := &Request[T]{Job: job, Payload: payload, Items: items, Bytes: cost, done: make(chan error, 1)}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	if err := q.admit(job, cost); err != nil {
		q.shed(err)
		if jq := q.jobs[job]; jq != nil && bytes > 0 {
			jq.ratio = float64(cost) / float64(bytes) // learnt from a shed request too
		}
		return nil, err
	}
	jq := q.jobs[job]
	if jq == nil {
		jq = &jobQueue[T]{}
		q.jobs[job] = jq
	}
	if !jq.inRing {
		q.ring = append(q.ring, job)
		jq.inRing = true
	}
	if bytes > 0 {
		jq.ratio = float64(cost) / float64(bytes)
	}
	jq.reqs = append(jq.reqs, r)
	jq.bytes += cost
	q.bytes += cost
	q.reqs++
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return r.done, nil
}

// Precheck applies Submit's admission to a request of bodyBytes without
// enqueueing anything, so a handler can shed a job that already holds
// its share before reading and decoding its body (the cost of refusing
// it then is a header, not a decode). A job with requests waiting is
// charged what its body will cost decoded, by the cost per body byte of
// its last request: charging the body's bytes let a flood's compact
// protobuf bodies (a third of their decoded size) pass here only to be
// shed at Submit after their decode — most of a replay flood's server
// CPU (issue 16 item 13). The real cost is checked again at Submit.
func (q *Queue[T]) Precheck(job string, bodyBytes int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if err := q.admit(job, q.estimate(job, bodyBytes)); err != nil {
		q.shed(err)
		return err
	}
	return nil
}

// estimate is what a body of bodyBytes will cost job decoded. q.mu is
// held.
func (q *Queue[T]) estimate(job string, bodyBytes int64) int64 {
	cost := bodyBytes
	if jq := q.jobs[job]; jq != nil && jq.ratio > 1 {
		cost = int64(min(float64(bodyBytes)*jq.ratio, 1<<62))
	}
	return max(cost, 1)
}

// Hold is Precheck that also holds the admitted request's estimated cost
// against the job's share and the queue's bounds until release is called
// (once its body is read and decoded; Submit then charges the real
// cost). Without it a flood's concurrent posts each passed the same
// check on the same room: 64 connections had their 4 MB bodies read,
// then shed at the gate or the queue — a third of a replay flood's
// server CPU reading bodies it then refused (issue 16 item 13).
func (q *Queue[T]) Hold(job string, bodyBytes int64) (release func(), err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	cost := q.estimate(job, bodyBytes)
	if err := q.admit(job, cost); err != nil {
		q.shed(err)
		return nil, err
	}
	jq := q.jobs[job]
	if jq == nil {
		jq = &jobQueue[T]{}
		q.jobs[job] = jq
	}
	jq.holds++
	jq.holdBytes += cost
	q.holds++
	q.held += cost
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			jq.holds--
			jq.holdBytes -= cost
			q.holds--
			q.held -= cost
			if jq.holds == 0 && !jq.inRing && q.jobs[job] == jq {
				delete(q.jobs, job)
			}
		})
	}, nil
}

// admit applies the bounds to a request of cost from job; q.mu is held.
// In order: the queue's own bounds (ErrFull), the job's share once it has
// requests waiting (ErrJobShare), and the reserve, which only a small
// request of a job with nothing waiting may use (ErrFull).
func (q *Queue[T]) admit(job string, cost int64) error {
	c := &q.cfg
	// A request larger than the byte bound alone is still admitted into
	// an empty queue, or it could never be stored.
	reqs, bytes := q.reqs+q.holds, q.bytes+q.held
	if reqs+1 > c.MaxRequests || (bytes > 0 && bytes+cost > c.MaxBytes) {
		return ErrFull
	}
	var held int64
	var heldReqs int
	if jq := q.jobs[job]; jq != nil {
		held, heldReqs = jq.bytes+jq.holdBytes, len(jq.reqs)+jq.holds
	}
	if heldReqs > 0 && (float64(held+cost) > c.JobShare*float64(c.MaxBytes) || float64(heldReqs+1) > max(1, c.JobShare*float64(c.MaxRequests))) {
		return ErrJobShare
	}
	reserveB := int64(c.Reserve * float64(c.MaxBytes))
	if heldReqs == 0 && cost <= reserveB/16 {
		return nil // may use the reserve: the room a flood cannot take
	}
	reserveR := int(c.Reserve * float64(c.MaxRequests))
	if reqs+1 > max(c.MaxRequests-reserveR, 1) || (bytes > 0 && bytes+cost > c.MaxBytes-reserveB) {
		return ErrFull
	}
	return nil
}

// CountShed counts a request shed with err outside the queue (by the
// Gate, before its body was read) in laggard_ingest_shed_total.
func (q *Queue[T]) CountShed(err error) { q.shed(err) }

func (q *Queue[T]) shed(err error) {
	if q.m == nil {
		return
	}
	if errors.Is(err, ErrJobShare) {
		q.m.shed.WithLabelValues(ReasonJobShare).Inc()
	} else {
		q.m.shed.WithLabelValues(ReasonQueueFull).Inc()
	}
}

// Depth is the number of requests waiting.
func (q *Queue[T]) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.reqs
}

// QueuedBytes is the cost of the requests waiting.
func (q *Queue[T]) QueuedBytes() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.bytes
}

// JobBytes is the cost of job's waiting requests.
func (q *Queue[T]) JobBytes(job string) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if jq := q.jobs[job]; jq != nil {
		return jq.bytes
	}
	return 0
}

// Jobs is the number of jobs with requests waiting.
func (q *Queue[T]) Jobs() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ring)
}

// Close stops accepting requests and returns once every queued request has
// been committed and acknowledged.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	q.mu.Unlock()
	<-q.done
}

func (q *Queue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *Queue[T]) run() {
	defer q.writers.Done()
	var group []*Request[T]
	for {
		q.mu.Lock()
		group = q.take(group[:0])
		closed, more := q.closed, q.reqs > 0
		q.mu.Unlock()
		if len(group) == 0 {
			if closed && !more {
				q.signal() // let the other writers see it too
				return
			}
			<-q.wake
			continue
		}
		if more {
			q.signal() // another writer may take the rest
		}
		q.commitGroup(group)
		q.mu.Lock()
		for _, r := range group {
			if jq := q.jobs[r.Job]; jq != nil {
				jq.busy = false
			}
		}
		q.dropIdle()
		q.mu.Unlock()
		q.signal()
		clear(group) // drop references so acknowledged payloads can be freed
	}
}

// dropIdle forgets jobs with nothing waiting and no commit; q.mu is held.
func (q *Queue[T]) dropIdle() {
	ring := q.ring[:0]
	for _, job := range q.ring {
		if jq := q.jobs[job]; len(jq.reqs) > 0 || jq.busy {
			ring = append(ring, job)
		} else {
			jq.inRing = false
			if jq.holds == 0 {
				delete(q.jobs, job)
			}
		}
	}
	clear(q.ring[len(ring):])
	q.ring = ring
}

// take removes the next group commit from the queue: round-robin over the
// jobs with waiting requests that no other writer is committing, at most
// a fair share of the commit's bounds from each (but at least one request
// from a job it reaches, so a request larger than its share still
// progresses), oldest first within a job. Jobs it did not reach come
// first next time, those it served go last. q.mu is held.
func (q *Queue[T]) take(group []*Request[T]) []*Request[T] {
	c := &q.cfg
	ready := 0
	for _, job := range q.ring {
		if jq := q.jobs[job]; !jq.busy && len(jq.reqs) > 0 {
			ready++
		}
	}
	if ready == 0 {
		return group
	}
	shareB := max(c.MaxCommitBytes/int64(ready), 1)
	shareI := max(c.MaxCommitItems/ready, 1)
	shareR := max(c.MaxCommitRequests/ready, 1)
	var gb int64
	gi := 0
	full := func(r *Request[T]) bool {
		return len(group) > 0 && (len(group) >= c.MaxCommitRequests || gb+r.Bytes > c.MaxCommitBytes || gi+r.Items > c.MaxCommitItems)
	}
	var served, rest []string
	stopped := false
	for _, job := range q.ring {
		jq := q.jobs[job]
		if stopped || jq.busy || len(jq.reqs) == 0 || full(jq.reqs[0]) {
			stopped = stopped || (!jq.busy && len(jq.reqs) > 0)
			rest = append(rest, job)
			continue
		}
		var jb int64
		ji, jr := 0, 0
		for len(jq.reqs) > 0 {
			r := jq.reqs[0]
			if jr > 0 && (jb+r.Bytes > shareB || ji+r.Items > shareI || jr >= shareR) || full(r) {
				break
			}
			group = append(group, r)
			jq.reqs[0] = nil
			jq.reqs = jq.reqs[1:]
			jb, ji, jr = jb+r.Bytes, ji+r.Items, jr+1
			gb, gi = gb+r.Bytes, gi+r.Items
		}
		jq.bytes -= jb
		jq.busy = true
		q.bytes -= jb
		q.reqs -= jr
		served = append(served, job)
	}
	q.ring = append(append(q.ring[:0], rest...), served...)
	return group
}

func (q *Queue[T]) commitGroup(group []*Request[T]) {
	start := time.Now()
	err := q.commit(group)
	if q.m != nil {
		q.m.commitSeconds.Observe(time.Since(start).Seconds())
		q.m.commitRequests.Observe(float64(len(group)))
		var b int64
		for _, r := range group {
			b += r.Bytes
		}
		q.m.commitBytes.Observe(float64(b))
	}
	if err != nil && len(group) > 1 && (q.cfg.Shared == nil || !q.cfg.Shared(err)) {
		// One bad request (say, its job vanished) must not fail the
		// requests it happened to share a commit with.
		q.logRetry(len(group), err)
		for _, r := range group {
			q.commitGroup([]*Request[T]{r})
		}
		return
	}
	for _, r := range group {
		r.done <- err
	}
}

// logRetry logs a group commit retried request by request, at most once
// every 10 s (with how many it stands for): a client that conflicts with
// its stored data on every post must not write a line per commit.
func (q *Queue[T]) logRetry(n int, err error) {
	q.retryLog.Note(func(missed int) {
		q.log.Warn("group commit failed, committing requests one by one", "requests", n, "err", err, "same_since_last_log", missed)
	})
}

// Throttle runs a log call at most once every ThrottleEvery and counts
// the calls it skipped in between, which the next one reports: a
// condition that fails every request (a full disk answering 507 to each
// post, an overloaded queue) logs a line every 10 s saying how many it
// stood for, not a line per request (issue 16: 1,211 WARN lines in 10 s).
// The zero value is ready to use.
type Throttle struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

// ThrottleEvery is the least time between two lines of one Throttle.
const ThrottleEvery = 10 * time.Second

// Note calls emit with the number of calls skipped since the last one,
// or skips this one.
func (l *Throttle) Note(emit func(missed int)) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < ThrottleEvery {
		l.missed++
		l.mu.Unlock()
		return
	}
	missed := l.missed
	l.last, l.missed = now, 0
	l.mu.Unlock()
	emit(missed)
}

// Metrics are the queue's Prometheus metrics.
type Metrics struct {
	shed                       *prometheus.CounterVec
	capacity                   prometheus.Gauge
	capacityBytes              prometheus.Gauge
	commitSeconds              prometheus.Histogram
	commitRequests             prometheus.Histogram
	commitBytes                prometheus.Histogram
	depth, queued, jobsWaiting func() float64
}

// NewMetrics registers the queue metrics on reg (laggard_ingest_*). There
// is deliberately no per-job gauge: job ids are unbounded, and the shed
// counter by reason plus queue_jobs say whether fairness is at work.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns, sub = "laggard", "ingest"
	m := &Metrics{
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "shed_total",
			Help: "Ingest requests shed with 429, by reason: queue_full (request or byte bound) or job_share (the job already holds its share of the queue)."}, []string{"reason"}),
		capacity: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_capacity",
			Help: "Ingest queue capacity in requests."}),
		capacityBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_capacity_bytes",
			Help: "Ingest queue capacity in bytes of decoded request cost."}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_seconds",
			Help: "Latency of one group commit (including fsync).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		commitRequests: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_batches",
			Help: "Ingest requests folded into one group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		commitBytes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "commit_bytes",
			Help: "Decoded cost in bytes of the requests in one group commit.", Buckets: prometheus.ExponentialBuckets(1024, 4, 10)}),
		depth:       func() float64 { return 0 },
		queued:      func() float64 { return 0 },
		jobsWaiting: func() float64 { return 0 },
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_depth",
		Help: "Ingest requests waiting for the writer."}, func() float64 { return m.depth() })
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_bytes",
		Help: "Decoded cost in bytes of the requests waiting for the writer."}, func() float64 { return m.queued() })
	jobs := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "queue_jobs",
		Help: "Jobs with ingest requests waiting (each is served its fair share per commit)."}, func() float64 { return m.jobsWaiting() })
	for _, c := range []prometheus.Collector{m.shed, m.capacity, m.capacityBytes, m.commitSeconds, m.commitRequests, m.commitBytes, depth, queued, jobs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{ReasonQueueFull, ReasonJobShare} {
		m.shed.WithLabelValues(r) // exported at 0 so rate() works from the start
	}
	return m, nil
}
