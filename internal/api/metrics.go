package api

import (
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/ingest"
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
	conflictLog            ingest.Throttle
	incarnations           *prometheus.CounterVec // new incarnations opened, by reason
	reportSeconds          prometheus.Histogram
	shedLog                ingest.Throttle
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
		incarnations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "jobs", Name: "incarnations_opened_total",
			Help: "Job incarnations opened by a restart, a new launch, a resubmission (run_id) or a new layout."}, []string{"reason"}),
		reportSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "report", Name: "seconds",
			Help: "Latency of computing one job report (scan, assemble, analyze, time axis).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	for _, c := range []prometheus.Collector{m.vectors, m.values, m.bytes, m.calls, m.rejected, m.conflicts, m.incarnations, m.reportSeconds} {
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
// other values and logs it (at most every ingest.ThrottleEvery): the client's
// answer says what conflicts, this says that something re-sends data it
// should not (a restarted job re-using its identity, a client bug).
func (m *Metrics) noteConflict(log *slog.Logger, job, records string, ce *signal.ConflictError) {
	m.conflicts.WithLabelValues(records).Inc()
	m.conflictLog.Note(func(missed int) {
		log.Warn("refused a post re-sending stored records with other values (409)", "job", job, "field", ce.Field, "err", ce.Msg,
			"conflicts_since_last_log", missed)
	})
}

// noteShed logs shedding at most every ingest.ThrottleEvery: under overload every
// request would otherwise log, making the overload worse.
func (m *Metrics) noteShed(log *slog.Logger, job string, depth int) {
	m.shedLog.Note(func(missed int) {
		log.Warn("ingest queue full, shedding with 429", "job", job, "queue_depth", depth, "shed_since_last_log", missed+1)
	})
}

// errorLog throttles the WARN lines of failed requests per status: each
// status (500, 503, 507) logs at most one line per ingest.ThrottleEvery.
type errorLog struct {
	mu sync.Mutex
	by map[int]*ingest.Throttle
}

func (e *errorLog) note(status int, emit func(missed int)) {
	e.mu.Lock()
	if e.by == nil {
		e.by = map[int]*ingest.Throttle{}
	}
	t := e.by[status]
	if t == nil {
		t = &ingest.Throttle{}
		e.by[status] = t
	}
	e.mu.Unlock()
	t.Note(emit)
}
