package server

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// errorBody is every API error: {"error": "...", "field": "..."}.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client left
}

// fail writes an API error. A *signal.FieldError names its field. Server
// faults are logged at warn; client errors only in the debug access log.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	body := errorBody{Error: err.Error()}
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		body.Field = fe.Field
	}
	if status >= 500 {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		s.log.Debug("request rejected", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	writeJSON(w, status, body)
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

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
			s.m.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
			s.m.requestSeconds.WithLabelValues(route).Observe(d.Seconds())
			if s.log.Enabled(r.Context(), slog.LevelDebug) {
				s.log.Debug("http", "method", r.Method, "path", r.URL.Path, "route", route, "status", sw.status,
					"bytes", sw.bytes, "dur", d, "remote", r.RemoteAddr)
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

// shedLog rate-limits the queue-full warning: under overload every request
// would otherwise log, making the overload worse.
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
