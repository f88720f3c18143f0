package api

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Rejection reasons for laggard_ingest_rejected_total.
const (
	reasonInvalid    = "invalid"
	reasonTooLarge   = "too_large"
	reasonMediaType  = "unsupported_media_type"
	reasonUnknownJob = "unknown_job"
	reasonConflict   = "conflict"
	reasonQueueFull  = "queue_full"
	reasonShutdown   = "shutting_down"
	reasonStoreError = "store_error"
	reasonDiskFull   = "disk_full" // 507: the store keeps its free-space reserve
)

// Values of the encoding label.
const (
	encodingJSON  = "json"
	encodingProto = "protobuf"
)

// Metrics are the API's Prometheus metrics.
type Metrics struct {
	vectors, values, bytes *prometheus.CounterVec // by job, encoding; counted once durable
	calls                  *prometheus.CounterVec // collective calls, by job, encoding
	rejected               *prometheus.CounterVec // by reason
	conflicts              *prometheus.CounterVec // refused re-sends, by record kind
	conflictLog            throttle
	reportSeconds          prometheus.Histogram
	shedLog                throttle
	stacks                 stackMetrics // SysOM-AI ingest (stacks.go)
	kair                   kairMetrics  // KAIR trace uploads (kair.go)
}

// NewMetrics registers the API metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	const ns = "laggard"
	m := &Metrics{
		vectors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "vectors_total",
			Help: "Stage vectors durably stored."}, []string{"job", "encoding"}),
		values: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "values_total",
			Help: "Measurements durably stored (stage durations, wall times and probe samples)."}, []string{"job", "encoding"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "bytes_total",
			Help: "Request body bytes of durably stored ingest batches."}, []string{"job", "encoding"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "calls_total",
			Help: "Collective calls durably stored (resent duplicates not counted)."}, []string{"job", "encoding"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "rejected_total",
			Help: "Ingest requests answered with an error, by reason."}, []string{"reason"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "conflicts_total",
			Help: "Posts refused (409) because they re-sent a stored record with other values, by the kind of record (vectors, calls, samples, points); nothing of the post was applied."}, []string{"records"}),
		reportSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "report", Name: "seconds",
			Help: "Latency of computing one job report (scan, assemble, analyze, time axis).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	for _, c := range []prometheus.Collector{m.vectors, m.values, m.bytes, m.calls, m.rejected, m.conflicts, m.reportSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if err := m.stacks.register(reg); err != nil {
		return nil, err
	}
	if err := m.kair.register(reg); err != nil {
		return nil, err
	}
	for _, k := range []string{"vectors", "calls", "samples", "points"} {
		m.conflicts.WithLabelValues(k)
	}
	// Pre-create every reason so rate() works before the first rejection.
	for _, r := range []string{reasonInvalid, reasonTooLarge, reasonMediaType, reasonUnknownJob, reasonConflict, reasonQueueFull, reasonShutdown, reasonStoreError, reasonDiskFull} {
		m.rejected.WithLabelValues(r)
	}
	return m, nil
}

// ForgetJob drops a deleted job's per-job series, so job ids that come
// and go (retention) do not grow /metrics for ever.
func (m *Metrics) ForgetJob(job string) {
	for _, c := range []*prometheus.CounterVec{m.vectors, m.values, m.bytes, m.calls} {
		c.DeletePartialMatch(prometheus.Labels{"job": job})
	}
	m.stacks.forget(job)
}

func (m *Metrics) countStored(job, encoding string, vs []stagevec.Vector, bytes int64) {
	values := 0
	for i := range vs {
		values += len(vs[i].Durations) + 1 + len(vs[i].Probes) // +1: wall_ms
	}
	m.vectors.WithLabelValues(job, encoding).Add(float64(len(vs)))
	m.values.WithLabelValues(job, encoding).Add(float64(values))
	m.bytes.WithLabelValues(job, encoding).Add(float64(bytes))
}

// countCalls counts a durably stored collective batch.
func (m *Metrics) countCalls(job, encoding string, calls int, bytes int64) {
	m.calls.WithLabelValues(job, encoding).Add(float64(calls))
	m.bytes.WithLabelValues(job, encoding).Add(float64(bytes))
}

// noteConflict counts a post refused for re-sending a stored record with
// other values and logs it (at most every logEvery): the client's
// answer says what conflicts, this says that something re-sends data it
// should not (a restarted job re-using its identity, a client bug).
func (m *Metrics) noteConflict(log *slog.Logger, job, records string, ce *signal.ConflictError) {
	m.conflicts.WithLabelValues(records).Inc()
	m.conflictLog.note(func(missed int) {
		log.Warn("refused a post re-sending stored records with other values (409)", "job", job, "field", ce.Field, "err", ce.Msg,
			"conflicts_since_last_log", missed)
	})
}

// noteShed logs shedding at most every logEvery: under overload every
// request would otherwise log, making the overload worse.
func (m *Metrics) noteShed(log *slog.Logger, job string, depth int) {
	m.shedLog.note(func(missed int) {
		log.Warn("ingest queue full, shedding with 429", "job", job, "queue_depth", depth, "shed_since_last_log", missed+1)
	})
}

// throttle runs a log call at most once every logEvery and counts the
// calls it skipped in between, which the next one reports: a condition
// that fails every request (a full disk answering 507 to each post, an
// overloaded queue) logs a line every 10 s saying how many it stood for,
// not a line per request (issue 16: 1,211 WARN lines in 10 s).
type throttle struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

const logEvery = 10 * time.Second

// note calls emit with the number of calls skipped since the last one,
// or skips this one.
func (l *throttle) note(emit func(missed int)) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < logEvery {
		l.missed++
		l.mu.Unlock()
		return
	}
	missed := l.missed
	l.last, l.missed = now, 0
	l.mu.Unlock()
	emit(missed)
}

// errorLog throttles the WARN lines of failed requests per status: each
// status (500, 503, 507) logs at most one line per logEvery.
type errorLog struct {
	mu sync.Mutex
	by map[int]*throttle
}

func (e *errorLog) note(status int, emit func(missed int)) {
	e.mu.Lock()
	if e.by == nil {
		e.by = map[int]*throttle{}
	}
	t := e.by[status]
	if t == nil {
		t = &throttle{}
		e.by[status] = t
	}
	e.mu.Unlock()
	t.note(emit)
}
