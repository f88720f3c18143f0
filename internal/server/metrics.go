package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Rejection reasons for laggard_ingest_rejected_total.
const (
	reasonInvalid    = "invalid"
	reasonTooLarge   = "too_large"
	reasonMediaType  = "unsupported_media_type"
	reasonUnknownJob = "unknown_job"
	reasonQueueFull  = "queue_full"
	reasonShutdown   = "shutting_down"
	reasonStoreError = "store_error"
)

// Values of the encoding label.
const (
	encodingJSON  = "json"
	encodingProto = "protobuf"
)

const labelJob = "job"

type metrics struct {
	vectors, values, bytes *prometheus.CounterVec // by job, encoding; counted once durable
	rejected               *prometheus.CounterVec // by reason
	shed                   prometheus.Counter
	queueCap               prometheus.Gauge
	commitSeconds          prometheus.Histogram
	commitBatches          prometheus.Histogram
	reportSeconds          prometheus.Histogram
	share                  *prometheus.GaugeVec // by job, stage
	requests               *prometheus.CounterVec
	requestSeconds         *prometheus.HistogramVec
}

// newMetrics registers the server's metrics on reg. queueDepth is read at
// scrape time so the gauge never lags the queue.
func newMetrics(reg prometheus.Registerer, queueDepth func() float64) (*metrics, error) {
	const ns = "laggard"
	m := &metrics{
		vectors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "vectors_total",
			Help: "Stage vectors durably stored."}, []string{labelJob, "encoding"}),
		values: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "values_total",
			Help: "Measurements durably stored (stage durations, wall times and probe samples)."}, []string{labelJob, "encoding"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "bytes_total",
			Help: "Request body bytes of durably stored ingest batches."}, []string{labelJob, "encoding"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "rejected_total",
			Help: "Ingest requests answered with an error, by reason."}, []string{"reason"}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: "ingest", Name: "shed_total",
			Help: "Ingest requests shed with 429 because the queue was full."}),
		queueCap: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "ingest", Name: "queue_capacity",
			Help: "Ingest queue capacity in batches."}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "ingest", Name: "commit_seconds",
			Help: "Latency of one group commit (AppendMany, including fsync).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		commitBatches: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "ingest", Name: "commit_batches",
			Help: "Ingest requests folded into one group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		reportSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "report", Name: "seconds",
			Help: "Latency of computing one window report (scan, assemble, analyze).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "frontier_share",
			Help: "Frontier share of each stage in the job's most recently computed report (StageFrontier §3 eq.2)."}, []string{labelJob, "stage"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by route pattern and status code."}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "http", Name: "request_seconds",
			Help: "HTTP request latency by route pattern.", Buckets: prometheus.DefBuckets}, []string{"route"}),
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: "ingest", Name: "queue_depth",
		Help: "Ingest batches waiting for the writer."}, queueDepth)
	for _, c := range []prometheus.Collector{m.vectors, m.values, m.bytes, m.rejected, m.shed, m.queueCap, depth,
		m.commitSeconds, m.commitBatches, m.reportSeconds, m.share, m.requests, m.requestSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create every reason so rate() works before the first rejection.
	for _, r := range []string{reasonInvalid, reasonTooLarge, reasonMediaType, reasonUnknownJob, reasonQueueFull, reasonShutdown, reasonStoreError} {
		m.rejected.WithLabelValues(r)
	}
	return m, nil
}
