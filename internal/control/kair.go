package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/store"
)

// KairConfig configures KAIR's triggered capture (§III-A Feature 2: the
// server watches cheap signals and asks suspect ranks plus random peers
// to record a bounded profiler window). Zero fields take the defaults.
type KairConfig struct {
	// Off disables the auto trigger; manual captures still work.
	Off bool
	// Cooldown: no auto capture while the job's newest capture (of any
	// trigger) is younger than this (10m).
	Cooldown time.Duration
	// Steps is the sampled steps an auto capture records (0: the
	// adapter's default, 5).
	Steps int
	// Interval between sweeps that close captures past their deadline
	// (30s); negative disables the sweep (reads still settle them).
	Interval time.Duration
}

func (c *KairConfig) setDefaults() {
	if c.Cooldown <= 0 {
		c.Cooldown = 10 * time.Minute
	}
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
}

// Kair runs KAIR captures: it gives the life cycle (KairLifecycle) the
// server clock and hints (suspects, step time), fires the auto trigger
// after StageFrontier evaluations and Greyhound transitions, expires
// captures, and counts them. It implements the API's Kair dependency.
type Kair struct {
	cfg  KairConfig
	k    *KairLifecycle
	jobs Jobs
	log  *slog.Logger
	now  func() time.Time

	captures *prometheus.CounterVec

	mu   sync.Mutex
	det  StageFrontierSignals
	gh   *Greyhound
	seen map[string]onsetSeen // job → the newest onset seen (fresh-onset test)
}

// NewKair returns the controller over k; its metrics are registered on
// reg.
func NewKair(cfg KairConfig, jobs Jobs, k *KairLifecycle, reg prometheus.Registerer, log *slog.Logger) (*Kair, error) {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	kc := &Kair{cfg: cfg, k: k, jobs: jobs, log: log.With("component", "kair"), now: time.Now, seen: map[string]onsetSeen{},
		captures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "laggard", Subsystem: "kair", Name: "captures_total",
			Help: "KAIR captures entering a state (pending when created; then recording, complete, partial, expired or cancelled), by trigger (manual, auto)."},
			[]string{"trigger", "state"})}
	if err := reg.Register(kc.captures); err != nil {
		return nil, err
	}
	for _, t := range []string{TriggerManual, TriggerAuto} {
		for _, s := range []store.CaptureState{store.CapturePending, store.CaptureRecording, store.CaptureComplete, store.CapturePartial, store.CaptureExpired, store.CaptureCancelled} {
			kc.captures.WithLabelValues(t, string(s))
		}
	}
	k.OnState = func(c *store.Capture) { kc.captures.WithLabelValues(c.Trigger, string(c.State)).Inc() }
	return kc, nil
}

// SetClock replaces the server clock (tests).
func (k *Kair) SetClock(now func() time.Time) { k.now = now }

// Attach gives the controller the detectors whose signals fire the auto
// trigger and name suspects: the StageFrontier evaluation (wrap its
// Reporter with Observe) and the Greyhound controller (either may be
// nil).
func (k *Kair) Attach(det StageFrontierSignals, gh *Greyhound) {
	k.mu.Lock()
	k.det, k.gh = det, gh
	k.mu.Unlock()
	if gh != nil {
		gh.onLeaveTracking = k.greyhoundLeft
	}
}

// StageFrontierSignals is what the KAIR driver reads of the background
// StageFrontier evaluation; *detect.Detector implements it.
type StageFrontierSignals interface {
	// Suspects is what job's latest evaluation says about where to
	// look: its median exposed step time in ns (0 when unknown) and the
	// rank it names or its tie set.
	Suspects(job string) (stepNS int64, ranks []int)
	// Advancing reports whether job's steps advanced recently.
	Advancing(job string) bool
}

// Forget drops a deleted job's cached state.
func (k *Kair) Forget(job string) {
	k.k.Forget(job)
	k.mu.Lock()
	delete(k.seen, job)
	k.mu.Unlock()
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

// The auto trigger.

// Reporter runs job reports (detect.Reporter; *analysis.Analyzer
// implements it).
type Reporter interface {
	Run(ctx context.Context, req analysis.Request) (*analysis.Report, error)
}

// Observe wraps the StageFrontier evaluation's Reporter: every report it
// computes is also checked for a trigger signal. Give the wrapper to New
// (the detector) only: API reports are not signals.
func (k *Kair) Observe(r Reporter) Reporter { return observer{r: r, k: k} }

type observer struct {
	r Reporter
	k *Kair
}

func (o observer) Run(ctx context.Context, req analysis.Request) (*analysis.Report, error) {
	rep, err := o.r.Run(ctx, req)
	if err == nil && rep != nil {
		o.k.ObserveReport(req.Job, rep)
	}
	return rep, err
}

// finding is one trigger signal: key names it (store.Capture.Signal;
// one auto capture per key), reason says it to the operator.
type finding struct{ key, reason string }

// onsetSeen is the newest onset step seen in one launch of a job: a
// restarted launch counts its steps from its own start, so its onsets are
// compared with its own, never with the previous launch's.
type onsetSeen struct {
	inc  int
	step int64
}

// ObserveReport checks a StageFrontier report of job for a trigger
// signal: a named straggler (keyed by the named ranks), or a fresh onset
// change point (newer than the newest one seen before; the first report
// of a job after start only records it, so a restart does not capture
// every job's old onset). A job whose steps are not advancing (finished,
// or not seen advancing since the server started) fires nothing: no rank
// would poll its capture.
func (k *Kair) ObserveReport(job string, rep *analysis.Report) {
	// The launch the report reads: a finding is once per launch (a
	// restarted job that slows at the same step again is captured again).
	inc := 0
	if rep.Incarnations != nil && rep.Incarnations.Analysed > 0 {
		inc = rep.Incarnations.Analysed
	}
	var fs []finding
	var suspects []int
	for _, g := range rep.Groups {
		h := g.Report.Headline
		if h.Rank >= 0 && h.Withheld == "" {
			if len(fs) == 0 {
				fs = append(fs, finding{reason: fmt.Sprintf("StageFrontier names rank %d the straggler at stage %s (confidence %.2f)", h.Rank, h.Stage, h.Confidence)})
			}
			if !slices.Contains(suspects, h.Rank) {
				suspects = append(suspects, h.Rank)
			}
		}
	}
	if len(fs) > 0 {
		// KAIR §III-A Feature 2: a persistent straggler is one finding;
		// it is captured once, not every cooldown.
		ranks := slices.Sorted(slices.Values(suspects))
		key := "straggler:"
		for i, r := range ranks {
			if i > 0 {
				key += ","
			}
			key += strconv.Itoa(r)
		}
		fs[0].key = key
	}
	if t := rep.Timeline; t != nil {
		var onset *analysis.ChangePoint
		for i := range t.ChangePoints {
			if c := &t.ChangePoints[i]; c.Kind == analysis.Onset && (onset == nil || c.Step > onset.Step) {
				onset = c
			}
		}
		if onset != nil {
			k.mu.Lock()
			prev, seen := k.seen[job]
			if seen && prev.inc != inc {
				// A new launch: any onset in it is fresh.
				prev = onsetSeen{inc, -1}
			}
			if !seen || onset.Step > prev.step {
				k.seen[job] = onsetSeen{inc, onset.Step}
			}
			k.mu.Unlock()
			if seen && onset.Step > prev.step {
				fs = append(fs, finding{key: fmt.Sprintf("onset:%d", onset.Step),
					reason: fmt.Sprintf("step-time onset at step %d: %.1f → %.1f ms (%+.0f%%)", onset.Step, onset.BeforeMS, onset.AfterMS, onset.Rel*100)})
			}
		}
	}
	if len(fs) == 0 {
		return
	}
	if inc > 0 {
		for i := range fs {
			fs[i].key = fmt.Sprintf("inc%d:%s", inc, fs[i].key)
		}
	}
	if !k.active(job) {
		k.log.Debug("auto capture: job not advancing", "job", job, "signal", fs[0].key)
		return
	}
	k.trigger(job, suspects, fs...)
}

// active reports whether job's steps advanced recently, by the
// StageFrontier detector's account (without one attached: assumed). The
// detector marks a job advancing only once it saw its newest step move
// since start, so after a restart finished jobs stay quiet.
func (k *Kair) active(job string) bool {
	k.mu.Lock()
	det := k.det
	k.mu.Unlock()
	return det == nil || det.Advancing(job)
}

// greyhoundLeft is the Greyhound controller leaving tracking (it saw an
// iteration-time change point and is profiling). The transition's time
// keys the finding: each departure from tracking is captured once.
func (k *Kair) greyhoundLeft(job, why string, rep *analysis.GreyhoundReport) {
	var suspects []int
	key := "greyhound:" + why
	if rep != nil {
		suspects = greyhoundSuspects(rep)
		if rep.Controller.SinceNS > 0 {
			key = "greyhound:" + strconv.FormatInt(rep.Controller.SinceNS, 10)
		}
	}
	k.trigger(job, suspects, finding{key: key, reason: "Greyhound left tracking: " + why})
}

// trigger creates an auto capture of job for the first of fs not yet
// captured (a kept capture carries its key), unless the trigger is off, a
// capture is open, or the newest is younger than the cooldown.
func (k *Kair) trigger(job string, suspects []int, fs ...finding) {
	if k.cfg.Off {
		return
	}
	now := k.now()
	cs, err := k.k.Captures(job, now.UnixNano())
	if err != nil {
		k.log.Debug("auto capture: listing captures", "job", job, "err", err)
		return
	}
	if len(cs) > 0 {
		if analysis.CaptureOpen(cs[0]) || now.UnixNano()-cs[0].CreatedNS < int64(k.cfg.Cooldown) {
			return
		}
	}
	var f *finding
	for i := range fs {
		if !slices.ContainsFunc(cs, func(c *store.Capture) bool { return c.Trigger == TriggerAuto && c.Signal == fs[i].key }) {
			f = &fs[i]
			break
		}
	}
	if f == nil {
		return // captured already: once per finding
	}
	h := k.hints(job, TriggerAuto, suspects)
	h.Signal = f.key
	c, err := k.k.Create(job, analysis.CaptureRequest{Steps: k.cfg.Steps, Reason: f.reason}, h, now.UnixNano())
	switch {
	case errors.Is(err, ErrCaptureOpen):
		return
	case err != nil:
		k.log.Warn("auto capture failed", "job", job, "reason", f.reason, "err", err)
		return
	}
	k.log.Info("auto capture", "job", job, "capture", c.ID, "reason", f.reason, "signal", f.key, "ranks", c.Ranks, "start_step", c.StartStep)
}
