package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Config configures a Server. Zero fields take the defaults below.
type Config struct {
	// Addr is the listen address for ListenAndServe.
	Addr string
	// DataDir is the store's directory; informational (logged).
	DataDir string
	// QueueDepth is the ingest queue capacity in batches (default 1024).
	// A full queue answers 429.
	QueueDepth int
	// MaxBodyBytes bounds a request body (default 64 MiB); larger is 413.
	MaxBodyBytes int64
	// MaxCommitBatches and MaxCommitVectors bound one group commit
	// (defaults 256 and 1<<18).
	MaxCommitBatches int
	MaxCommitVectors int
	// MaxReportCells caps a report window's steps×ranks×effective stages
	// (default 1e8, ~800 MB of float64); larger windows are 413.
	MaxReportCells int64
	// ReportSteps is the default window of a report, in steps (default 200).
	ReportSteps int
	// PrefetchLookback is how many steps before a report window are also
	// scanned so a prefetched data wait recorded there is charged to the
	// step inside the window that consumed it (App. A). Default 8.
	PrefetchLookback int
	// RetryAfter is the back-off advertised with 429 (default 1s).
	RetryAfter time.Duration
	// ShutdownTimeout bounds the graceful drain of open requests (default
	// 30s).
	ShutdownTimeout time.Duration
	// Logger receives errors (warn) and access logs (debug). Default
	// slog.Default().
	Logger *slog.Logger
	// UI is mounted at "/"; nil serves a plain text page.
	UI http.Handler
	// Registry receives the server's metrics and is served at /metrics. If
	// nil, a fresh registry with Go and process collectors is used.
	Registry *prometheus.Registry
}

func (c *Config) setDefaults() {
	setDefault(&c.QueueDepth, 1024)
	setDefault(&c.MaxBodyBytes, 64<<20)
	setDefault(&c.MaxCommitBatches, 256)
	setDefault(&c.MaxCommitVectors, 1<<18)
	setDefault(&c.MaxReportCells, 100_000_000)
	setDefault(&c.ReportSteps, 200)
	setDefault(&c.PrefetchLookback, 8)
	setDefault(&c.RetryAfter, time.Second)
	setDefault(&c.ShutdownTimeout, 30*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault[T int | int64 | time.Duration](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Server serves the laggard HTTP API. Create it with New; it is safe for
// concurrent use.
type Server struct {
	cfg     Config
	st      Store
	log     *slog.Logger
	reg     *prometheus.Registry
	m       *metrics
	q       *queue
	handler http.Handler
	jobs    *jobCache
	shed    shedLog

	mu        sync.Mutex
	addr      net.Addr
	closeOnce sync.Once
}

// New returns a server over st and starts its ingest writer. Call Close
// (or let ListenAndServe/Serve return) to drain it; st stays open and is
// the caller's to close afterwards.
func New(cfg Config, st Store) (*Server, error) {
	if st == nil {
		return nil, errors.New("server: nil store")
	}
	cfg.setDefaults()
	s := &Server{cfg: cfg, st: st, log: cfg.Logger.With("component", "server"), reg: cfg.Registry}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.jobs = newJobCache(st)
	var q *queue
	m, err := newMetrics(s.reg, func() float64 {
		if q == nil {
			return 0
		}
		return float64(q.depth())
	})
	if err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	m.queueCap.Set(float64(cfg.QueueDepth))
	s.m = m
	q = newQueue(st, cfg.QueueDepth, cfg.MaxCommitBatches, cfg.MaxCommitVectors, s.log, m)
	s.q = q
	s.handler = s.routes()
	return s, nil
}

// Registry returns the registry the server's metrics live in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler returns the server's HTTP handler (API, metrics, UI).
func (s *Server) Handler() http.Handler { return s.handler }

// Addr returns the address being served, or the configured Addr before
// Serve has started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr != nil {
		return s.addr.String()
	}
	return s.cfg.Addr
}

// ListenAndServe listens on Config.Addr and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then shuts down gracefully: stop
// accepting connections, let open requests finish (each waiting ingest
// request is acknowledged as its batch commits), drain the ingest queue and
// stop the writer. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.log.Info("serving", "addr", ln.Addr().String(), "data", s.cfg.DataDir, "queue_depth", s.cfg.QueueDepth)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	shutErr := hs.Shutdown(sctx)
	s.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", serveErr)
	}
	if shutErr != nil {
		return fmt.Errorf("server: shutdown: %w", shutErr)
	}
	s.log.Info("stopped")
	return nil
}

// Close stops accepting ingest batches and waits until every queued batch
// is committed and acknowledged. Later ingest requests get 503. It does
// not close the store.
func (s *Server) Close() error {
	s.closeOnce.Do(s.q.close)
	return nil
}

// routes builds the mux (Go 1.22 method+wildcard patterns).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs", s.handleJobs)
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.handleJob)
	mux.HandleFunc("PUT /api/v1/jobs/{id}", s.handlePutJob)
	mux.HandleFunc("POST /api/v1/jobs/{id}/ranks", s.handleRank)
	mux.HandleFunc("POST /api/v1/jobs/{id}/vectors", s.handleIngest)
	mux.HandleFunc("GET /api/v1/jobs/{id}/report", s.handleReport)
	mux.HandleFunc("GET /api/v1/jobs/{id}/export", s.handleExport)
	// Unknown API paths get a JSON 404 rather than falling through to the UI.
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no API route %s %s", r.Method, r.URL.Path))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	ui := s.cfg.UI
	if ui == nil {
		ui = http.HandlerFunc(plainIndex)
	}
	mux.Handle("/", ui)
	return s.instrument(mux)
}

func plainIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "laggard: the web UI is not built into this server.\nAPI: /api/v1/jobs   metrics: /metrics   health: /healthz")
}

// job returns the cached job or an HTTP error status for it.
func (s *Server) job(id string) (*signal.Job, int, error) {
	j, err := s.jobs.get(id)
	switch {
	case err == nil:
		return j, 0, nil
	case isNotFound(err):
		return nil, http.StatusNotFound, fmt.Errorf("unknown job %q", id)
	default:
		return nil, http.StatusInternalServerError, err
	}
}
