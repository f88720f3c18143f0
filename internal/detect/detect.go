// Package detect re-analyses active jobs on a schedule — the analogue of
// Prometheus's rules manager — so every job's diagnosis and its metrics
// exist without anyone opening a page: alerts can fire unattended, and the
// job list shows each job's current diagnosis.
//
// A job is active while its newest stored step keeps advancing; its
// series are dropped once it has been idle for Config.ActiveFor, so
// finished jobs do not keep alerts firing.
package detect

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/stats"
)

// Config schedules the evaluation. Zero fields take the defaults.
type Config struct {
	// Interval between rounds (30s); negative disables the loop (Run
	// returns at once; EvaluateOnce still works).
	Interval time.Duration
	// ActiveFor: a job whose newest step has not advanced for this long is
	// idle; its metrics are dropped (15m).
	ActiveFor time.Duration
	// MaxJobsPerRound bounds the work of one round (64); jobs beyond it
	// wait for the next round, oldest evaluation first.
	MaxJobsPerRound int
	// Timeout bounds one job's evaluation (30s).
	Timeout time.Duration
	// FastInterval is how often a hot job (Hot: an onset is suspected or
	// an incident is unresolved) is evaluated again when new data arrived
	// (5s, at most Interval), so an incident localizes in seconds rather
	// than at the next round. MaxHot bounds the hot jobs (16) and HotFor
	// how long a mark lasts (2m): the extra CPU is bounded by MaxHot
	// evaluations per FastInterval.
	FastInterval time.Duration
	MaxHot       int
	HotFor       time.Duration
}

func (c *Config) setDefaults() {
	if c.Interval == 0 {
		c.Interval = 30 * time.Second
	}
	if c.ActiveFor <= 0 {
		c.ActiveFor = 15 * time.Minute
	}
	if c.MaxJobsPerRound <= 0 {
		c.MaxJobsPerRound = 64
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.FastInterval <= 0 {
		c.FastInterval = 5 * time.Second
	}
	if c.Interval > 0 {
		c.FastInterval = min(c.FastInterval, c.Interval)
	}
	if c.MaxHot <= 0 {
		c.MaxHot = 16
	}
	if c.HotFor <= 0 {
		c.HotFor = 2 * time.Minute
	}
}

// Jobs lists the registered jobs; *catalog.Catalog implements it.
type Jobs interface {
	List() ([]*signal.Job, error)
}

// Stats reads a job's stored-step summary; *store.Store implements it.
type Stats interface {
	Stats(job string) (analysis.JobStats, error)
}

// Reporter runs job reports; *analysis.Analyzer implements it.
type Reporter interface {
	Run(ctx context.Context, req analysis.Request) (*analysis.Report, error)
}

// Summary is a job's latest background diagnosis, as the job list shows
// it.
type Summary struct {
	EvaluatedAt time.Time `json:"evaluated_at"`
	// LastStep is the newest stored step of the newest incarnation
	// (Incarnation) that has vectors.
	LastStep    int64             `json:"last_step"`
	Incarnation int               `json:"incarnation"`
	Active      bool              `json:"active"`
	Window      analysis.Window   `json:"window"`
	Headline    analysis.Headline `json:"headline"`
	// ExposedMS is the median exposed step time over the window.
	ExposedMS  float64               `json:"exposed_ms"`
	LastChange *analysis.ChangePoint `json:"last_change,omitempty"`
	Error      string                `json:"error,omitempty"`
}

type jobState struct {
	lastStep    int64
	vectors     int64
	firstSeen   time.Time
	advancedAt  time.Time // zero: not seen advancing since start
	evaluatedAt time.Time
	exported    bool // its series are in the registry
}

// Detector runs the evaluation loop. Safe for concurrent use.
type Detector struct {
	cfg   Config
	jobs  Jobs
	stats Stats
	rep   Reporter
	log   *slog.Logger
	m     *metrics
	now   func() time.Time

	mu     sync.Mutex
	state  map[string]*jobState
	latest map[string]*Summary
	hot    map[string]time.Time // job → hot until
	kick   chan struct{}        // a job became hot
}

// New returns a Detector; its metrics are registered on reg.
func New(cfg Config, jobs Jobs, st Stats, rep Reporter, reg prometheus.Registerer, log *slog.Logger) (*Detector, error) {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Detector{cfg: cfg, jobs: jobs, stats: st, rep: rep, log: log.With("component", "detect"), m: m, now: time.Now,
		state: map[string]*jobState{}, latest: map[string]*Summary{}, hot: map[string]time.Time{}, kick: make(chan struct{}, 1)}, nil
}

// Hot asks for prompt evaluations of job for HotFor: every FastInterval
// while its data advances, instead of every Interval. It never blocks;
// beyond MaxHot jobs the mark is ignored (the job keeps the round's
// cadence).
func (d *Detector) Hot(job string) {
	d.mu.Lock()
	_, was := d.hot[job]
	if !was && len(d.hot) >= d.cfg.MaxHot {
		now := d.now()
		for j, until := range d.hot {
			if now.After(until) {
				delete(d.hot, j)
			}
		}
		if len(d.hot) >= d.cfg.MaxHot {
			d.mu.Unlock()
			return
		}
	}
	d.hot[job] = d.now().Add(d.cfg.HotFor)
	d.mu.Unlock()
	if !was {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// Latest returns the job's latest summary (api.Diagnoses).
func (d *Detector) Latest(job string) (any, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.latest[job]
	if !ok {
		return nil, false
	}
	c := *s
	return &c, true
}

// Suspects is what job's latest evaluation says about where to look: its
// median exposed step time in ns (0 when unknown; a day bounds a step)
// and the rank it names or its tie set. KAIR's capture hints
// (control.Kair).
func (d *Detector) Suspects(job string) (stepNS int64, ranks []int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.latest[job]
	if !ok {
		return 0, nil
	}
	if s.ExposedMS > 0 && s.ExposedMS < 86_400_000 { // ms
		stepNS = int64(s.ExposedMS * 1e6)
	}
	if s.Headline.Rank >= 0 {
		ranks = append(ranks, s.Headline.Rank)
	}
	return stepNS, append(ranks, s.Headline.TieSet...)
}

// Advancing reports whether job's newest step advanced within ActiveFor.
// A job counts as advancing only once its newest step was seen to move
// since the server started, so after a restart finished jobs stay quiet
// (KAIR's auto trigger, control.Kair).
func (d *Detector) Advancing(job string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state[job]
	return s != nil && !s.advancedAt.IsZero() && d.now().Sub(s.advancedAt) <= d.cfg.ActiveFor
}

// Stopped reports whether job stopped reporting: its newest step has not
// advanced for ActiveFor (since it was last seen advancing, or since the
// server first saw it). at is when it last advanced (else when it was
// first seen: it stopped at or before then), step its newest training
// step. An incident still open then is resolved as "job stopped".
func (d *Detector) Stopped(job string) (at time.Time, step int64, stopped bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state[job]
	if s == nil {
		return time.Time{}, 0, false
	}
	at = s.advancedAt
	if at.IsZero() {
		at = s.firstSeen
	}
	if d.now().Sub(at) <= d.cfg.ActiveFor {
		return time.Time{}, 0, false
	}
	_, step = stagevec.SplitOrdinal(max(s.lastStep, 0))
	return at, step, true
}

// Forget drops a deleted job's state, diagnosis and series now, rather
// than at the next round (which would also drop them, the job being gone).
func (d *Detector) Forget(job string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.state[job]; s != nil && s.exported {
		d.m.drop(job)
	}
	delete(d.state, job)
	delete(d.latest, job)
	delete(d.hot, job)
}

// Run evaluates a round at once and then every Interval, and hot jobs
// every FastInterval, until ctx is done.
func (d *Detector) Run(ctx context.Context) {
	if d.cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	fast := time.NewTicker(d.cfg.FastInterval)
	defer fast.Stop()
	d.EvaluateOnce(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.EvaluateOnce(ctx)
		case <-fast.C:
			d.EvaluateHot(ctx)
		case <-d.kick:
			d.EvaluateHot(ctx)
		}
	}
}

// EvaluateHot evaluates the hot jobs whose data changed since their last
// evaluation and that were not evaluated within FastInterval.
func (d *Detector) EvaluateHot(ctx context.Context) {
	now := d.now()
	var todo []string
	d.mu.Lock()
	for job, until := range d.hot {
		if now.After(until) {
			delete(d.hot, job)
			continue
		}
		// A job the rounds have not seen yet (it began after the last
		// one) is evaluated now too: its first incident must not wait a
		// whole Interval.
		if s := d.state[job]; s != nil && now.Sub(s.evaluatedAt) < d.cfg.FastInterval {
			continue
		}
		todo = append(todo, job)
	}
	d.mu.Unlock()
	slices.Sort(todo)
	for _, job := range todo {
		if ctx.Err() != nil {
			return
		}
		st, err := d.stats.Stats(job)
		if err != nil {
			continue
		}
		d.mu.Lock()
		s := d.state[job]
		if s == nil {
			// First sighting: like a round's, it records the job without
			// calling it advancing, and evaluates it.
			s = &jobState{lastStep: st.LastStep, vectors: st.Vectors, firstSeen: now}
			d.state[job] = s
		}
		changed := s.evaluatedAt.IsZero() || d.noteStats(s, st, now)
		d.mu.Unlock()
		if changed && st.Vectors > 0 {
			d.m.evaluations.WithLabelValues("prompt").Inc()
			d.evaluate(ctx, job)
		}
	}
}

// noteStats records a job's stored-step summary and reports whether it
// changed; d.mu is held.
func (d *Detector) noteStats(s *jobState, st analysis.JobStats, now time.Time) bool {
	changed := st.LastStep != s.lastStep || st.Vectors != s.vectors
	if st.LastStep > s.lastStep {
		s.advancedAt = now
	}
	s.lastStep, s.vectors = st.LastStep, st.Vectors
	return changed
}

// EvaluateOnce runs one round: it notes which jobs advanced, evaluates up
// to MaxJobsPerRound of those with new data (never-evaluated jobs too, so
// the job list has a diagnosis), and drops the series of idle jobs.
func (d *Detector) EvaluateOnce(ctx context.Context) {
	jobs, err := d.jobs.List()
	if err != nil {
		d.log.Warn("listing jobs", "err", err)
		d.m.evaluations.WithLabelValues("error").Inc()
		return
	}
	now := d.now()
	type due struct {
		id   string
		last time.Time
	}
	var todo []due
	active := 0
	d.mu.Lock()
	known := map[string]bool{}
	for _, j := range jobs {
		known[j.ID] = true
		st, err := d.stats.Stats(j.ID)
		if err != nil {
			continue
		}
		s := d.state[j.ID]
		if s == nil {
			s = &jobState{lastStep: st.LastStep, vectors: st.Vectors, firstSeen: now}
			d.state[j.ID] = s
			if st.Vectors > 0 {
				todo = append(todo, due{j.ID, s.evaluatedAt})
			}
			continue
		}
		changed := d.noteStats(s, st, now)
		isActive := !s.advancedAt.IsZero() && now.Sub(s.advancedAt) <= d.cfg.ActiveFor
		if isActive {
			active++
		} else if s.exported {
			d.m.drop(j.ID)
			s.exported = false
			if l := d.latest[j.ID]; l != nil {
				l.Active = false
			}
		}
		if changed && st.Vectors > 0 {
			todo = append(todo, due{j.ID, s.evaluatedAt})
		}
	}
	for id, s := range d.state { // deleted jobs
		if !known[id] {
			if s.exported {
				d.m.drop(id)
			}
			delete(d.state, id)
			delete(d.latest, id)
			delete(d.hot, id)
		}
	}
	d.mu.Unlock()
	d.m.active.Set(float64(active))
	slices.SortStableFunc(todo, func(a, b due) int { return a.last.Compare(b.last) })
	if len(todo) > d.cfg.MaxJobsPerRound {
		d.m.evaluations.WithLabelValues("skipped").Add(float64(len(todo) - d.cfg.MaxJobsPerRound))
		todo = todo[:d.cfg.MaxJobsPerRound]
	}
	for _, t := range todo {
		if ctx.Err() != nil {
			return
		}
		d.evaluate(ctx, t.id)
	}
}

// evaluate runs the job's default report and publishes it.
func (d *Detector) evaluate(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	start := d.now()
	rep, err := d.rep.Run(ctx, analysis.Request{Job: id})
	d.m.seconds.Observe(d.now().Sub(start).Seconds())
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.state[id]
	if s == nil {
		return
	}
	s.evaluatedAt = d.now()
	// Stored steps are ordinals (stagevec.Ordinal): they keep increasing
	// across restarts, which is what "advancing" needs; the summary shows
	// the training step.
	inc, last := stagevec.SplitOrdinal(max(s.lastStep, 0))
	if s.lastStep < 0 {
		last = s.lastStep
	}
	sum := &Summary{EvaluatedAt: s.evaluatedAt, LastStep: last, Incarnation: inc, Active: !s.advancedAt.IsZero() && s.evaluatedAt.Sub(s.advancedAt) <= d.cfg.ActiveFor}
	if err != nil {
		d.m.evaluations.WithLabelValues("error").Inc()
		d.log.Debug("evaluation failed", "job", id, "err", err)
		sum.Error = err.Error()
		if prev := d.latest[id]; prev != nil { // keep the last good diagnosis
			prev.Error, prev.EvaluatedAt = sum.Error, sum.EvaluatedAt
			return
		}
		d.latest[id] = sum
		return
	}
	d.m.evaluations.WithLabelValues("ok").Inc()
	sum.Window, sum.Headline = rep.Window, rep.Headline
	if len(rep.Groups) > 0 {
		sum.ExposedMS = medianExposed(rep.Groups[0])
	}
	if rep.Timeline != nil && len(rep.Timeline.ChangePoints) > 0 {
		c := rep.Timeline.ChangePoints[len(rep.Timeline.ChangePoints)-1]
		sum.LastChange = &c
	}
	d.latest[id] = sum
	if sum.Active {
		d.m.publish(id, rep, sum, s)
		s.exported = true
	}
}

func medianExposed(g analysis.GroupReport) float64 {
	xs := make([]float64, len(g.Report.StepSeries))
	for i, p := range g.Report.StepSeries {
		xs[i] = p.ExposedMS
	}
	return stats.Median(xs)
}

type metrics struct {
	exposed, shareG, excess, straggler, confidence, headline, label *prometheus.GaugeVec
	changes, lastChange, ratio, lastStep, evaluatedAt               *prometheus.GaugeVec
	evaluations                                                     *prometheus.CounterVec
	seconds                                                         prometheus.Histogram
	active                                                          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns = "laggard"
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: "job", Name: name, Help: help}, labels)
	}
	m := &metrics{
		exposed:     g("exposed_step_ms", "Median exposed step time (ms) over the job's current default window (StageFrontier Σ_t F[t,S]/T).", "job", "group"),
		shareG:      g("stage_share", "Frontier share of exposed time per stage in the current default window (StageFrontier §3 eq.2).", "job", "group", "stage"),
		excess:      g("stage_excess_ms", "Per-step frontier advance change vs the job's healthy reference window (ms/step); absent without a reference.", "job", "group", "stage"),
		straggler:   g("straggler_rank", "The straggler rank the diagnosis names; -1 when it is withheld.", "job", "group"),
		confidence:  g("leader_confidence", "Lead fraction of the named or candidate rank at the headline stage (0..1).", "job", "group"),
		headline:    g("headline_info", "The current diagnosis: stage, basis and withheld reason; always 1.", "job", "group", "stage", "basis", "withheld"),
		label:       g("label", "Evidence labels the current diagnosis emits; always 1.", "job", "group", "label"),
		changes:     g("change_points", "Change points in the job's step-time history.", "job", "kind"),
		lastChange:  g("last_change_step", "Step of the most recent change point.", "job"),
		ratio:       g("step_time_change_ratio", "After/before median exposed step time at the most recent change point (1 when none).", "job"),
		lastStep:    g("last_step", "Newest stored step.", "job"),
		evaluatedAt: g("last_evaluation_timestamp_seconds", "When the job was last evaluated (Unix seconds).", "job"),
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: "detect", Name: "evaluations_total",
			Help: "Background job evaluations by result (ok, error, skipped for lack of round budget) and prompt evaluations of hot jobs (prompt: an onset suspected or an incident unresolved)."}, []string{"result"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: "detect", Name: "evaluation_seconds",
			Help: "Latency of one background job evaluation.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: "detect", Name: "active_jobs",
			Help: "Jobs whose newest step advanced within the active window."}),
	}
	for _, c := range []prometheus.Collector{m.exposed, m.shareG, m.excess, m.straggler, m.confidence, m.headline, m.label,
		m.changes, m.lastChange, m.ratio, m.lastStep, m.evaluatedAt, m.evaluations, m.seconds, m.active} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"ok", "error", "skipped", "prompt"} {
		m.evaluations.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) vecs() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{m.exposed, m.shareG, m.excess, m.straggler, m.confidence, m.headline, m.label,
		m.changes, m.lastChange, m.ratio, m.lastStep, m.evaluatedAt}
}

func (m *metrics) drop(job string) {
	for _, v := range m.vecs() {
		v.DeletePartialMatch(prometheus.Labels{"job": job})
	}
}

// publish replaces the job's series with the report's.
func (m *metrics) publish(job string, rep *analysis.Report, sum *Summary, s *jobState) {
	m.drop(job)
	for _, g := range rep.Groups {
		r := g.Report
		m.exposed.WithLabelValues(job, g.Group).Set(medianExposed(g))
		for i, st := range r.Stages {
			if !r.RawOnly && i < len(r.Share) {
				m.shareG.WithLabelValues(job, g.Group, st).Set(r.Share[i])
			}
		}
		if c := g.Comparison; c != nil {
			for _, sd := range c.Stages {
				m.excess.WithLabelValues(job, g.Group, sd.Stage).Set(sd.DeltaMS)
			}
		}
		h := r.Headline
		m.straggler.WithLabelValues(job, g.Group).Set(float64(h.Rank))
		m.confidence.WithLabelValues(job, g.Group).Set(h.Confidence)
		m.headline.WithLabelValues(job, g.Group, h.Stage, string(h.Basis), string(h.Withheld)).Set(1)
		for _, l := range r.Labels {
			m.label.WithLabelValues(job, g.Group, string(l.Name)).Set(1)
		}
	}
	counts := map[analysis.ChangeKind]int{analysis.Onset: 0, analysis.Relief: 0}
	ratio := 1.0
	if t := rep.Timeline; t != nil {
		for _, c := range t.ChangePoints {
			counts[c.Kind]++
		}
		if n := len(t.ChangePoints); n > 0 {
			c := t.ChangePoints[n-1]
			m.lastChange.WithLabelValues(job).Set(float64(c.Step))
			if c.BeforeMS > 0 && !math.IsInf(c.AfterMS/c.BeforeMS, 0) {
				ratio = c.AfterMS / c.BeforeMS
			}
		}
	}
	for k, n := range counts {
		m.changes.WithLabelValues(job, string(k)).Set(float64(n))
	}
	m.ratio.WithLabelValues(job).Set(ratio)
	m.lastStep.WithLabelValues(job).Set(float64(sum.LastStep)) // the training step, not the stored ordinal
	m.evaluatedAt.WithLabelValues(job).Set(float64(sum.EvaluatedAt.UnixNano()) / 1e9)
}
