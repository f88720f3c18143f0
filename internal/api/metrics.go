package api

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	incarnations           *prometheus.CounterVec // new incarnations opened, by reason
	reportSeconds          prometheus.Histogram
	shedLog                shedLog
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
		incarnations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "jobs", Name: "incarnations_opened_total",
			Help: "Job incarnations opened by a restart, a new launch, a resubmission (run_id) or a new layout."}, []string{"reason"}),
		reportSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "report", Name: "seconds",
			Help: "Latency of computing one job report (scan, assemble, analyze, time axis).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	for _, c := range []prometheus.Collector{m.vectors, m.values, m.bytes, m.calls, m.rejected, m.incarnations, m.reportSeconds} {
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

// noteShed logs shedding at most every shedLogEvery: under overload every
// request would otherwise log, making the overload worse.
func (m *Metrics) noteShed(log *slog.Logger, job string, depth int) { m.shedLog.note(log, job, depth) }

type shedLog struct {
	mu     sync.Mutex
	last   time.Time
	missed int
}

const shedLogEvery = 10 * time.Second

func (l *shedLog) note(log *slog.Logger, job string, depth int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.last) < shedLogEvery {
		l.missed++
		return
	}
	log.Warn("ingest queue full, shedding with 429", "job", job, "queue_depth", depth, "shed_since_last_log", l.missed+1)
	l.last, l.missed = now, 0
}
