package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's own Prometheus metrics (a private registry: the
// agent exposes them only on -metrics-addr).
type Metrics struct {
	Registry    *prometheus.Registry
	rings       prometheus.Gauge
	records     prometheus.Counter
	ringDropped prometheus.Counter
	lost        prometheus.Counter
	invalid     prometheus.Counter
	shipped     prometheus.Counter
	shipDropped prometheus.Counter
	batches     prometheus.Counter
	postErrors  prometheus.Counter
	queued      prometheus.Gauge
	validations *prometheus.CounterVec
	// sanitized counts strings repaired before shipping (not UTF-8, too
	// long, not a valid id), by kind: calls, stacks, osstats.
	sanitized *prometheus.CounterVec
}

// NewMetrics registers the agent's metrics in a new registry.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	f := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "laggard_agent", Name: name, Help: help})
		r.MustRegister(c)
		return c
	}
	g := func(name, help string) prometheus.Gauge {
		c := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "laggard_agent", Name: name, Help: help})
		r.MustRegister(c)
		return c
	}
	m := &Metrics{
		Registry:    r,
		rings:       g("nccl_rings", "NCCL shim rings mapped now."),
		records:     f("nccl_records_total", "Records read from NCCL shim rings."),
		ringDropped: f("nccl_ring_dropped_total", "Records the shim dropped because its ring was full."),
		lost:        f("nccl_slots_lost_total", "Ring slots given up because their writer never finished."),
		invalid:     f("nccl_invalid_total", "Records that did not translate into a valid call or communicator."),
		shipped:     f("calls_shipped_total", "Calls the server accepted."),
		shipDropped: f("calls_dropped_total", "Calls dropped by the agent (queue full or batch rejected)."),
		batches:     f("batches_total", "Batches the server accepted."),
		postErrors:  f("post_errors_total", "Failed POSTs."),
		queued:      g("calls_queued", "Calls waiting to be shipped."),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard_agent", Name: "validations_total", Help: "Validation plans handled, by outcome."}, []string{"outcome"}),
	}
	m.sanitized = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard_agent", Name: "strings_sanitized_total",
		Help: "Strings from other processes repaired before shipping (invalid UTF-8 replaced, clipped, ids escaped), by kind."}, []string{"kind"})
	r.MustRegister(m.validations, m.sanitized)
	return m
}
