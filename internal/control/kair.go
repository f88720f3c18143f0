package control

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/store"
)

// KairConfig configures KAIR's triggered capture (§III-A Feature 2: the
// server watches cheap signals and asks suspect ranks plus random peers
// to record a bounded profiler window). The trigger is the incident
// escalation policy (escalate.go: one capture per incident, under its
// cool-down and the job's budget), which replaced KAIR's own auto
// trigger. Zero fields take the defaults.
type KairConfig struct {
	// Steps is the sampled steps a triggered capture records (0: the
	// adapter's default, 5).
	Steps int
	// Interval between sweeps that close captures past their deadline
	// (30s); negative disables the sweep (reads still settle them).
	Interval time.Duration
}

func (c *KairConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
}

// Kair runs KAIR captures: it gives the life cycle (KairLifecycle) the
// server clock and hints (suspects, step time), creates the captures the
// incidents ask for (CreateIncidentCapture), expires captures, and
// counts them. It implements the API's Kair dependency.
type Kair struct {
	cfg  KairConfig
	k    *KairLifecycle
	jobs Jobs
	log  *slog.Logger
	now  func() time.Time

	captures *prometheus.CounterVec

	mu  sync.Mutex
	det StageFrontierSignals
	gh  *Greyhound
}

// NewKair returns the controller over k; its metrics are registered on
// reg.
func NewKair(cfg KairConfig, jobs Jobs, k *KairLifecycle, reg prometheus.Registerer, log *slog.Logger) (*Kair, error) {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	kc := &Kair{cfg: cfg, k: k, jobs: jobs, log: log.With("component", "kair"), now: time.Now,
		captures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard", Subsystem: "kair", Name: "captures_total",
			Help: "KAIR captures entering a state (pending when created; then recording, complete, partial, expired or cancelled), by trigger (manual; incident: the incident escalation; auto: KAIR's former auto trigger)."},
			[]string{"trigger", "state"})}
	if err := reg.Register(kc.captures); err != nil {
		return nil, err
	}
	for _, t := range []string{TriggerManual, TriggerIncident} {
		for _, s := range []store.CaptureState{store.CapturePending, store.CaptureRecording, store.CaptureComplete, store.CapturePartial, store.CaptureExpired, store.CaptureCancelled} {
			kc.captures.WithLabelValues(t, string(s))
		}
	}
	k.OnState = func(c *store.Capture) { kc.captures.WithLabelValues(c.Trigger, string(c.State)).Inc() }
	return kc, nil
}

// SetClock replaces the server clock (tests).
func (k *Kair) SetClock(now func() time.Time) { k.now = now }

// Attach gives the controller the detectors that name suspects and the
// step time for a capture's hints: the StageFrontier evaluation and the
// Greyhound controller (either may be nil).
func (k *Kair) Attach(det StageFrontierSignals, gh *Greyhound) {
	k.mu.Lock()
	k.det, k.gh = det, gh
	k.mu.Unlock()
}

// StageFrontierSignals is what the KAIR driver reads of the background
// StageFrontier evaluation; *detect.Detector implements it.
type StageFrontierSignals interface {
	// Suspects is what job's latest evaluation says about where to
	// look: its median exposed step time in ns (0 when unknown) and the
	// rank it names or its tie set.
	Suspects(job string) (stepNS int64, ranks []int)
	// Advancing reports whether job's steps advanced recently (only
	// then can a capture be asked for: no rank of a finished job polls).
	Advancing(job string) bool
}

// Forget drops a deleted job's cached state.
func (k *Kair) Forget(job string) {
	k.k.Forget(job)
}

// Run sweeps every Interval, closing captures whose deadline passed, until
// ctx is done.
func (k *Kair) Run(ctx context.Context) {
	if k.cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(k.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.Sweep(ctx)
		}
	}
}

// Sweep settles every job's open capture once.
func (k *Kair) Sweep(ctx context.Context) {
	jobs, err := k.jobs.List()
	if err != nil {
		k.log.Warn("listing jobs", "err", err)
		return
	}
	now := k.now().UnixNano()
	for _, j := range jobs {
		if ctx.Err() != nil {
			return
		}
		if err := k.k.Settle(j.ID, now); err != nil && !errors.Is(err, store.ErrNotFound) {
			k.log.Debug("settling captures", "job", j.ID, "err", err)
		}
	}
}

// hints are what the server knows about job beyond the store: suspects
// (StageFrontier's named rank or tie set, Greyhound's verdict ranks and
// degraded groups) and the median exposed step time.
func (k *Kair) hints(job string, trigger string, extra []int) CaptureHints {
	h := CaptureHints{Trigger: trigger, Suspects: slices.Clone(extra)}
	k.mu.Lock()
	det, gh := k.det, k.gh
	k.mu.Unlock()
	if det != nil {
		stepNS, ranks := det.Suspects(job)
		h.StepNS = stepNS
		h.Suspects = append(h.Suspects, ranks...)
	}
	if gh != nil {
		gh.mu.Lock()
		cr, ok := gh.reports[job]
		gh.mu.Unlock()
		if ok && cr.rep != nil {
			h.Suspects = append(h.Suspects, greyhoundSuspects(cr.rep)...)
		}
	}
	return h
}

func greyhoundSuspects(rep *analysis.GreyhoundReport) []int {
	out := slices.Clone(rep.Verdict.Ranks)
	for _, g := range rep.Groups {
		for _, m := range g.Members {
			if m.Degraded {
				out = append(out, m.Ranks...)
			}
		}
	}
	return out
}

// API (api.Kair). Each call reads the server clock once.

// CreateCapture is a manual trigger.
func (k *Kair) CreateCapture(job string, req analysis.CaptureRequest) (*store.Capture, error) {
	return k.k.Create(job, req, k.hints(job, TriggerManual, nil), k.now().UnixNano())
}

// Captures lists job's captures, newest first.
func (k *Kair) Captures(job string) ([]*store.Capture, error) {
	return k.k.Captures(job, k.now().UnixNano())
}

// Capture returns one capture.
func (k *Kair) Capture(job, id string) (*store.Capture, error) {
	return k.k.Capture(job, id, k.now().UnixNano())
}

// CancelCapture cancels an open capture.
func (k *Kair) CancelCapture(job, id string) (*store.Capture, error) {
	return k.k.Cancel(job, id, k.now().UnixNano())
}

// PendingCapture answers a rank's poll.
func (k *Kair) PendingCapture(job string, rank int, step int64, inc int) (*store.Capture, error) {
	return k.k.Pending(job, rank, step, inc, k.now().UnixNano())
}

// CheckUpload checks an upload before its body is read.
func (k *Kair) CheckUpload(job, id string, rank, inc int) (*store.Capture, error) {
	return k.k.CheckUpload(job, id, rank, inc, k.now().UnixNano())
}

// PutTrace stores a rank's trace.
func (k *Kair) PutTrace(job, id string, t *optrace.Trace, hb []store.OpHeartbeat) (*store.Capture, error) {
	return k.k.PutTrace(job, id, t, hb, k.now().UnixNano())
}

// FailRank records a rank's client-side error.
func (k *Kair) FailRank(job, id string, rank int, msg string) (*store.Capture, error) {
	return k.k.FailRank(job, id, rank, msg, k.now().UnixNano())
}

// Report is the KAIR report of a capture.
func (k *Kair) Report(ctx context.Context, job, id string) (*analysis.KairAnswer, error) {
	return k.k.Report(ctx, job, id, k.now().UnixNano())
}

// Timeline is one step's per-rank events of a capture.
func (k *Kair) Timeline(ctx context.Context, job, id string, step int64) (*analysis.KairTimeline, error) {
	return k.k.Timeline(ctx, job, id, step, k.now().UnixNano())
}

// Reporter runs job reports (detect.Reporter; *analysis.Analyzer
// implements it). The incident manager watches the background
// evaluation's (Incidents.WatchReports).
type Reporter interface {
	Run(ctx context.Context, req analysis.Request) (*analysis.Report, error)
}
