package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the per-route request metrics.
type httpMetrics struct {
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	const ns = "laggard"
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests by route pattern and status code."}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "http", Name: "request_seconds",
			Help: "HTTP request latency by route pattern.", Buckets: prometheus.DefBuckets}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.requestSeconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newReasonCounter registers a laggard_<subsystem>_<name> counter by
// reason with every reason's series present at 0, so rate() and alerts
// work before the first event.
func newReasonCounter(reg prometheus.Registerer, subsystem, name, help string, reasons ...string) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard", Subsystem: subsystem, Name: name, Help: help},
		[]string{"reason"})
	for _, r := range reasons {
		c.WithLabelValues(r)
	}
	return c, reg.Register(c)
}
