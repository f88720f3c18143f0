package server

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// statusWriter records the status and size for access logs and metrics.
// It forwards Flush (streamed exports) and Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument adds access logging (debug) and per-route request metrics.
// The route label is the matched mux pattern, so it has bounded
// cardinality whatever the job ids are.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if sw.status == 0 {
				sw.status = http.StatusOK
			}
			route := r.Pattern // set by the mux on this request
			if route == "" {
				route = "other"
			}
			d := time.Since(start)
			s.hm.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
			s.hm.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
			if s.log.Enabled(r.Context(), slog.LevelDebug) {
				s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "route", route, "status", sw.status,
					"bytes", sw.bytes, "dur", d, "remote", r.RemoteAddr)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}
