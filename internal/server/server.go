package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/buildinfo"
	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/detect"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/notify"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/symbolize"
)

// Config configures a Server. Zero fields take the defaults below.
type Config struct {
	// Addr is the listen address for ListenAndServe.
	Addr string
	// DataDir is the store's directory; informational (logged).
	DataDir string
	// QueueDepth is the ingest queue capacity in requests (default 1024)
	// and QueueBytes in decoded bytes (default ingest.DefaultMaxBytes,
	// 64 MiB). A full queue
	// answers 429.
	QueueDepth int
	QueueBytes int64
	// MaxBodyBytes bounds a request body (default 64 MiB); larger is 413.
	MaxBodyBytes int64
	// MaxCommitBatches and MaxCommitVectors bound one group commit
	// (defaults 256 and 1<<18).
	MaxCommitBatches int
	MaxCommitVectors int
	// Analysis bounds reports (window cells, default window, time axis).
	Analysis analysis.Limits
	// Detect configures the background evaluation of active jobs; a
	// negative Interval disables it.
	Detect detect.Config
	// Greyhound schedules the per-job Greyhound-Detect controller (a
	// negative Interval disables its loop; the report and validation
	// routes still serve).
	Greyhound control.GreyhoundConfig
	// Kair configures KAIR's triggered capture (default steps, sweep;
	// kair.go); what triggers it is the incident escalation.
	Kair control.KairConfig
	// Incidents bounds and schedules the incident manager and its
	// escalation policy (internal/control, incidents.go); IncidentsOff
	// turns the layer off (-incidents=false): no incidents, no
	// escalation, no automatic captures or validations.
	Incidents    control.IncidentsConfig
	IncidentsOff bool
	// IncidentAdapters turn engine reports into incident evidence (zero:
	// internal/analysis's; tests substitute their own).
	IncidentAdapters control.Adapters
	// MaxTraceBytes and MaxTraceEvents bound one rank's KAIR trace upload
	// (defaults api.DefaultMaxTraceBytes, api.DefaultMaxTraceEvents).
	MaxTraceBytes  int64
	MaxTraceEvents int
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
	// Access is who may call the server: tokens, hosts (auth.go).
	Access Access
	// HTTP bounds connections (timeouts, limits) and configures TLS
	// (listen.go).
	HTTP HTTPOptions
	// Lifecycle is retention and the background compactor (lifecycle.go).
	Lifecycle LifecycleConfig
	// Symbols is the central symbol store agents upload binaries to
	// (HEAD/POST /api/v1/symbols/{buildid}), e.g. symbolize.OpenStore of
	// <data dir>/symbols; nil answers those routes 501.
	Symbols api.SymbolStore
	// Notify sends incident state changes to Alertmanager and a webhook
	// (notify.go); no sink: off.
	Notify notify.Config
}

func (c *Config) setDefaults() {
	setDefault(&c.MaxBodyBytes, 64<<20)
	setDefault(&c.RetryAfter, time.Second)
	setDefault(&c.ShutdownTimeout, 30*time.Second)
	c.HTTP.setDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func setDefault[T int | int64 | time.Duration](p *T, v T) {
	if *p <= 0 {
		*p = v
	}
}

// Store is what the server needs from internal/store. *store.Store
// implements it; tests substitute fakes (a blocking writer for
// backpressure, a failing one for error paths).
type Store interface {
	catalog.Store
	analysis.OrdinalSource
	// AppendMany stores several batches atomically and durably in one
	// write; the ingest writer's group commit.
	AppendMany([]store.Batch) error
}

var _ Store = (*store.Store)(nil)

// Server wires laggard's components into one process: the catalog, the
// ingest queue and its writer, the analysis layer, the background
// evaluation, the HTTP API, /metrics, /healthz and the UI. Create it with
// New; it is safe for concurrent use.
type Server struct {
	cfg        Config
	log        *slog.Logger
	reg        *prometheus.Registry
	hm         *httpMetrics
	am         *authMetrics
	hyg        *hygieneMetrics
	routes     map[string]access // what each route needs (auth.go)
	vectors    *api.VectorQueue
	analyzer   *analysis.Analyzer
	detector   *detect.Detector
	greyhound  *control.Greyhound // nil when the store has no collective keyspace
	handler    http.Handler
	life       *lifecycle // nil when the store has no lifecycle (lifecycle.go)
	apiMetrics *api.Metrics
	sysom      *analysis.Sysom     // nil without a stack keyspace or symbol store (sysom.go)
	resolver   *symbolize.Resolver // names the stacks sysom reads
	kair       *control.Kair       // nil without a capture keyspace (kair.go)
	kairLife   *control.KairLifecycle
	incidents  *control.Incidents // nil when the layer is off (incidents.go)
	notifier   *notify.Notifier   // nil without a sink (notify.go)

	mu        sync.Mutex
	addr      net.Addr
	closeOnce sync.Once
}

// New returns a server over st and starts its ingest writer and the
// background evaluation. Call Close (or let Serve return) to stop them; st
// stays open and is the caller's to close afterwards.
func New(cfg Config, st Store) (*Server, error) {
	if st == nil {
		return nil, errors.New("server: nil store")
	}
	cfg.setDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "server"), reg: cfg.Registry, routes: maps.Clone(routeAccess)}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var err error
	if s.hm, err = newHTTPMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if s.am, err = newAuthMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if s.hyg, err = newHygieneMetrics(s.reg); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if err := buildinfo.Register(s.reg); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	qm, err := ingest.NewMetrics(s.reg)
	if err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	am, err := api.NewMetrics(s.reg)
	if err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	s.apiMetrics = am
	// One queue for every signal kind (ingest.Item): one byte budget, one
	// FIFO per job, shared group commits.
	s.vectors = ingest.New(ingest.Config{MaxRequests: cfg.QueueDepth, MaxBytes: cfg.QueueBytes,
		MaxCommitRequests: cfg.MaxCommitBatches, MaxCommitItems: cfg.MaxCommitVectors,
		// A full disk fails every request alike: no one-by-one retry.
		Shared: func(err error) bool { return errors.Is(err, store.ErrDiskFull) }},
		api.Commit(st), s.log, qm)
	cat := catalog.New(st)
	s.analyzer = analysis.New(st, cfg.Analysis)
	s.analyzer.SetLogger(s.log)
	if err := s.reg.Register(s.analyzer.Collector()); err != nil { // laggard_analysis_panics_total
		s.vectors.Close()
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if err := s.startKair(&cfg, st, cat); err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.startIncidents(&cfg, st); err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if s.detector, err = detect.New(cfg.Detect, cat, st, s.detectReporter(), s.reg, s.log); err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := s.startLifecycle(st, cat); err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if gsrc, ok := st.(control.GreyhoundStore); ok {
		gh, err := control.NewGreyhoundLifecycle(gsrc, analysis.DefaultGreyhoundConfig(), analysis.GreyhoundLimits{})
		if err == nil {
			s.greyhound, err = control.NewGreyhound(cfg.Greyhound, cat, gh, s.reg, s.log)
		}
		if err != nil {
			s.vectors.Close()
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	if s.kair != nil {
		s.kair.Attach(s.detector, s.greyhound)
	}
	gate, err := s.newGate()
	if err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if err := s.startSysom(&cfg, st); err != nil {
		s.vectors.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.wireIncidents(&cfg, st, cat)
	var ghAPI api.Greyhound
	if s.greyhound != nil {
		ghAPI = s.greyhound
	}
	mux := http.NewServeMux()
	colls, _ := st.(api.CollectiveReader) // optional: test stores may lack it
	api.New(api.Deps{Catalog: cat, Reader: st, Vectors: s.vectors, Collectives: colls, Gate: gate, Reporter: s.analyzer, Diagnoses: s.detector, Greyhound: ghAPI,
		Metrics: am, Log: s.log, MaxBodyBytes: cfg.MaxBodyBytes, RetryAfter: cfg.RetryAfter, OnDelete: s.onDelete, Symbols: cfg.Symbols, Sysom: s.sysomAPI(), Kair: s.kairAPI(),
		MaxTraceBytes: cfg.MaxTraceBytes, MaxTraceEvents: cfg.MaxTraceEvents, Incidents: s.apiIncidents()}).Register(mux)
	// Routes outside api.Register declare what they need with s.handle
	// (api.Register's routes are listed in routeAccess).
	s.handle(mux, "GET /metrics", needRead, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	s.handle(mux, "GET /healthz", public, s.healthz(st))
	ui := cfg.UI
	if ui == nil {
		ui = http.HandlerFunc(plainIndex)
	}
	s.handle(mux, "/", public, ui)
	s.handler = s.instrument(s.guard(mux))
	if err := s.startNotify(&cfg); err != nil {
		s.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.notifyIncidents()
	return s, nil
}

// newGate sizes the ingest gate (ingest.Gate): a decode slot per core
// (at least two), and half the queue's memory budget for bodies in
// flight, at least two of the largest bodies so one always fits a job's
// share.
func (s *Server) newGate() (*ingest.Gate, error) {
	qb := s.cfg.QueueBytes
	if qb <= 0 {
		qb = ingest.DefaultMaxBytes
	}
	maxBytes := max(qb/2, 2*s.cfg.MaxBodyBytes)
	g := ingest.NewGate(ingest.GateConfig{Slots: max(2, runtime.GOMAXPROCS(0)), MaxBytes: maxBytes,
		// A largest body plus slack: the limit reader reads a byte past
		// MaxBodyBytes to answer 413, which must not trip the share (429).
		JobBytes: max(maxBytes/2, s.cfg.MaxBodyBytes+ingest.SmallBody)})
	inflight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "laggard", Subsystem: "ingest", Name: "inflight_bytes",
		Help: "Request body bytes being read or decoded, before the ingest queue."}, func() float64 { return float64(g.InFlight()) })
	return g, s.reg.Register(inflight)
}

// Registry returns the registry the server's metrics live in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Handler returns the server's HTTP handler (API, metrics, UI).
func (s *Server) Handler() http.Handler { return s.handler }

// Greyhound returns the Greyhound-Detect controller (nil when the store
// has no collective keyspace).
func (s *Server) Greyhound() *control.Greyhound { return s.greyhound }

// Detector returns the background evaluation.
func (s *Server) Detector() *detect.Detector { return s.detector }

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

// Serve serves on ln and runs the background evaluation until ctx is
// done, then shuts down gracefully: stop accepting connections, let open
// requests finish (each waiting ingest request is acknowledged as its
// batch commits), drain the ingest queue and stop the writer. It returns
// nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.Access.Tokens == nil && !s.cfg.Access.Insecure && !IsLoopback(ln.Addr()) {
		ln.Close()
		s.Close()
		return fmt.Errorf("server: %w: %s (set Access.Tokens, or Access.Insecure)", ErrExposed, ln.Addr())
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	hs, ln := s.httpServer(ln)
	s.log.Info("serving", "addr", ln.Addr().String(), "data", s.cfg.DataDir, "tls", s.cfg.HTTP.TLS != nil,
		"auth", s.cfg.Access.Tokens != nil)
	dctx, stopDetect := context.WithCancel(ctx)
	detectDone := make(chan struct{})
	ghDone := make(chan struct{})
	kairDone := make(chan struct{})
	incDone := make(chan struct{})
	go func() { defer close(detectDone); s.detector.Run(dctx) }()
	go func() {
		defer close(incDone)
		if s.incidents != nil {
			s.incidents.Run(dctx)
		}
	}()
	go func() {
		defer close(kairDone)
		if s.kair != nil {
			s.kair.Run(dctx)
		}
	}()
	go func() {
		defer close(ghDone)
		if s.greyhound != nil {
			s.greyhound.Run(dctx)
		}
	}()
	errc := make(chan error, 1)
	go func() {
		if s.cfg.HTTP.TLS != nil {
			errc <- hs.ServeTLS(ln, "", "") // certificates from TLSConfig
			return
		}
		errc <- hs.Serve(ln)
	}()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	stopDetect()
	<-detectDone
	<-ghDone
	<-kairDone
	<-incDone
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
	s.closeOnce.Do(func() { s.stopLifecycle(); s.vectors.Close(); s.closeSysom(); s.closeNotify() })
	return nil
}

// writeHealth is the optional store method /healthz asks; *store.Store
// implements it.
type writeHealth interface {
	// WriteError is nil while writes are accepted.
	WriteError() error
}

// healthz answers 200 "ok", or 200 "degraded: <why>" while the store
// refuses every write (a full disk: ingest answers 507) but reads work.
// Still 200: the process is alive and serving reads, and a restart would
// not free disk space, so liveness and readiness probes must not fail on
// it; alert on the body, the Laggard-Health header or
// laggard_store_disk_full.
func (s *Server) healthz(st Store) http.Handler {
	wh, _ := st.(writeHealth)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if wh != nil {
			if err := wh.WriteError(); err != nil {
				w.Header().Set("Laggard-Health", "degraded")
				fmt.Fprintf(w, "degraded: writes are refused (ingest answers 507), reads work: %v\n", err)
				return
			}
		}
		w.Header().Set("Laggard-Health", "ok")
		fmt.Fprintln(w, "ok")
	})
}

func plainIndex(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "laggard: the web UI is not built into this server.\nAPI: /api/v1/jobs   metrics: /metrics   health: /healthz")
}
