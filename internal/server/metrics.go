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
