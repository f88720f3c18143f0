// Package agent is the node agent: it drains the NCCL shim's rings
// (internal/agent/nccl), ships the calls to the server per job (bounded,
// with backoff), and carries out validation plans through the shim's
// pause trap (Greyhound §4.1 worker agent, §4.3 validation).
//
// It imports internal/signal/... and its own sources, never store or
// engine (arch rule 2; internal/lint enforces it), and nothing it does can
// block or fail the trainer (arch rule 7).
package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/agent/gpu"
	"github.com/laggard-dev/laggard/internal/agent/nccl"
	aosstat "github.com/laggard-dev/laggard/internal/agent/osstat"
)

// Config configures an Agent.
type Config struct {
	Server string // base URL, e.g. http://laggard:7070
	Token  string // bearer token (ingest scope)
	ShmDir string // ring directory (default /dev/shm)
	// DefaultJob names rings whose trainer set no job id.
	DefaultJob string
	Interval   time.Duration // drain + ship period (default 1 s)
	// ValidationInterval is how often pending validation plans are
	// polled (default 2 s, contracts §3); negative disables polling.
	ValidationInterval time.Duration
	Grace              time.Duration // dead rings kept this long (default 30 s)
	// RequestTimeout bounds each HTTP request (default and at most 5 s).
	RequestTimeout     time.Duration
	MaxQueue, MaxBatch int
	// TrustedUIDs may own ring files besides the producer's own uid and
	// the agent's (nccl.Config.TrustedUIDs).
	TrustedUIDs []uint32
	Client      *http.Client
	Executor    Executor
	Log         *slog.Logger
	Metrics     *Metrics

	// SysOM-AI sources (ship_profile.go), each off unless enabled.
	// Socket is the registration socket's path ("" none): training
	// processes announce job and rank there, and stacks and OS counters
	// are attributed through it.
	Socket string
	// ProfileOn runs the CPU profiler with Profile (its RankOf and Emit
	// are the agent's); OSOn the OS collector with OS (and NVML).
	ProfileOn bool
	Profile   cpuprof.Config
	OSOn      bool
	OS        aosstat.Config
	// MaxProfileBytes bounds the stack batches held while the server is
	// away (default 64 MiB); the oldest go first, counted.
	MaxProfileBytes int
	// ShowOtherProcesses is the admin's opt-in to ship other processes'
	// names and stacks on a rank's CPUs to the rank's job even when its
	// registrant could not read them (default: one opaque
	// "[other process] (hidden)" frame; docs/security.md).
	ShowOtherProcesses bool
}

// Agent is one node's agent.
type Agent struct {
	cfg      Config
	col      *nccl.Collector
	ship     *Shipper
	client   *http.Client
	metrics  *Metrics
	mu       sync.Mutex        // guards handled, running
	handled  map[string]string // job/rank → last plan id handled
	running  map[string]bool   // job/rank → a plan is running (one at a time, R9)
	valQuiet map[string]time.Time
	wg       sync.WaitGroup
	last     nccl.Stats
	side     *sysomSide
	// source constructors (tests substitute fakes)
	newProf func(cpuprof.Config) (stackSource, error)
	newOS   func(aosstat.Config) (osSource, error)
	newGPU  func() (gpu.Source, error)
}

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	cfg.Server = strings.TrimRight(cfg.Server, "/")
	if cfg.Server == "" {
		return nil, errors.New("agent: the server URL is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.ValidationInterval == 0 {
		cfg.ValidationInterval = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Executor == nil {
		cfg.Executor = NoExecutor{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.RequestTimeout <= 0 || cfg.RequestTimeout > maxRequestTimeout {
		cfg.RequestTimeout = maxRequestTimeout
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.RequestTimeout}
	}
	a := &Agent{
		cfg:      cfg,
		col:      nccl.NewCollector(nccl.Config{Dir: cfg.ShmDir, DefaultJob: cfg.DefaultJob, Grace: cfg.Grace, Log: cfg.Log, TrustedUIDs: cfg.TrustedUIDs}),
		client:   cfg.Client,
		metrics:  cfg.Metrics,
		handled:  map[string]string{},
		running:  map[string]bool{},
		valQuiet: map[string]time.Time{},
	}
	a.side = newSysomSide(&a.cfg, cfg.Metrics)
	a.newProf = func(c cpuprof.Config) (stackSource, error) { return cpuprof.New(c) }
	a.newOS = func(c aosstat.Config) (osSource, error) { return aosstat.New(c) }
	a.newGPU = gpu.Open
	a.ship = &Shipper{Server: cfg.Server, Token: cfg.Token, Client: cfg.Client, Log: cfg.Log, MaxQueue: cfg.MaxQueue, MaxBatch: cfg.MaxBatch, RequestTimeout: cfg.RequestTimeout, Metrics: cfg.Metrics}
	return a, nil
}

func (a *Agent) auth(r *http.Request) {
	if a.cfg.Token != "" {
		r.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	}
}

// Run drains every Interval on one goroutine and ships and polls
// validation plans on another (B5: a slow or blackholed server must never
// stop draining — the shim drops once its ring is full). When ctx ends it
// drains and ships one last time (bounded by 10 s) and releases the rings.
func (a *Agent) Run(ctx context.Context) error {
	defer a.col.Close()
	a.cfg.Log.Info("agent started", "server", a.cfg.Server, "shm_dir", a.cfg.ShmDir, "interval", a.cfg.Interval)
	var loops sync.WaitGroup
	a.side.start(ctx, &loops, a.newProf, a.newOS, a.newGPU)
	loops.Add(2)
	go func() {
		defer loops.Done()
		a.drainLoop(ctx)
	}()
	go func() {
		defer loops.Done()
		a.shipLoop(ctx)
	}()
	loops.Wait()
	a.wg.Wait() // running plans release their traps and post
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	a.Step(fctx)
	a.side.flush(fctx)
	if n := a.ship.Queued(); n > 0 {
		a.cfg.Log.Warn("agent stopped with calls unshipped", "calls", n)
	}
	a.cfg.Log.Info("agent stopped")
	return nil
}

func (a *Agent) drainLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	var dirWarned bool
	for {
		if err := a.drain(); err != nil && !dirWarned {
			dirWarned = true
			a.cfg.Log.Warn("cannot read the ring directory; will keep trying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) shipLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	var valC <-chan time.Time
	if a.cfg.ValidationInterval > 0 {
		vt := time.NewTicker(a.cfg.ValidationInterval)
		defer vt.Stop()
		valC = vt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = a.ship.Flush(ctx)
		case <-valC:
			a.pollValidation(ctx)
		}
	}
}

// drain reads every ring once into the ship queue.
func (a *Agent) drain() error {
	jobs, err := a.col.Poll()
	for _, j := range jobs {
		a.ship.Add(j.Job, j.World, j.Comms, j.Calls, j.Dropped)
	}
	a.updateStats()
	return err
}

// Step drains every ring once and ships what is queued (the final pass,
// and tests).
func (a *Agent) Step(ctx context.Context) error {
	err := a.drain()
	_ = a.ship.Flush(ctx)
	return err
}

func (a *Agent) updateStats() {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.col.Stats()
	m := a.metrics
	m.rings.Set(float64(s.Rings))
	m.records.Add(float64(s.Records - a.last.Records))
	m.ringDropped.Add(float64(s.RingDropped - a.last.RingDropped))
	m.lost.Add(float64(s.Lost - a.last.Lost))
	m.invalid.Add(float64(s.Invalid - a.last.Invalid))
	a.last = s
}
