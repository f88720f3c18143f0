package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/store"
)

// GreyhoundConfig schedules the per-job Greyhound-Detect controller
// (§4.1). Zero fields take the defaults.
type GreyhoundConfig struct {
	// Interval between rounds (2s): the controller's reaction time adds
	// to the detector's, so it runs far more often than the StageFrontier
	// evaluation. Negative disables the loop.
	Interval time.Duration
	// ActiveFor: a job whose newest call is older than this (by the
	// server's clock since it was last seen advancing) is left alone (15m).
	ActiveFor time.Duration
	// WindowNS is the span of calls one round analyses (5 minutes): enough
	// iterations before an onset for BOCD's baseline.
	WindowNS int64
	// Margin is how far ahead of the ranks a plan's at_step is scheduled
	// (3s): clients poll every ~2 s, plus their shipping delay.
	Margin time.Duration
	// Timeout bounds one job's evaluation (20s).
	Timeout time.Duration
	// MaxJobsPerRound bounds one round (64).
	MaxJobsPerRound int
	// MaxReports bounds the on-demand reports (GET …/greyhound for a
	// window other than the controller's) computed at once (2): each
	// loads up to 2M calls.
	MaxReports int
}

func (c *GreyhoundConfig) setDefaults() {
	if c.Interval == 0 {
		c.Interval = 2 * time.Second
	}
	if c.ActiveFor <= 0 {
		c.ActiveFor = 15 * time.Minute
	}
	if c.WindowNS <= 0 {
		c.WindowNS = 300e9
	}
	if c.Margin <= 0 {
		c.Margin = 3 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 20 * time.Second
	}
	if c.MaxJobsPerRound <= 0 {
		c.MaxJobsPerRound = 64
	}
	if c.MaxReports <= 0 {
		c.MaxReports = 2
	}
}

// maxKicked bounds the jobs waiting for a kicked evaluation; beyond it a
// job waits for the next round.
const maxKicked = 1024

// Greyhound runs Greyhound-Detect's three-phase controller for every
// active job with collective calls. It is the loop around
// GreyhoundLifecycle.Advance (which analyses the job's recent calls and
// steps the engine's pure controller): it schedules jobs, gives each step
// the server clock, persists state and plans, and publishes metrics. It
// implements the API's Greyhound dependency.
type Greyhound struct {
	cfg  GreyhoundConfig
	gh   *GreyhoundLifecycle
	jobs Jobs
	log  *slog.Logger
	m    *ghMetrics
	now  func() time.Time
	kick chan struct{} // a job was added to kicked
	sem  chan struct{} // on-demand report slots

	evalMu sync.Mutex // one evaluation at a time: state is read, stepped, written
	mu     sync.Mutex
	seen   map[string]*ghJob
	// kicked are the jobs to evaluate at once (results, manual
	// requests), each once however often it was kicked.
	kicked  []string
	pending map[string]bool
	// manual holds validation requests (API) until the job's next
	// evaluation applies them: the request never waits on an evaluation
	// in flight (review2 #13).
	manual map[string]int64
	// evalSeq numbers evaluations; forgot[job] is the newest evaluation
	// started when job was forgotten, whose publish must not export the
	// job's series again.
	evalSeq uint64
	forgot  map[string]uint64
	reports map[string]cachedReport
	// onReport, if set (OnReport, before Run), hears every round's
	// report of a job: the incident manager's Greyhound evidence.
	onReport func(job string, rep *analysis.GreyhoundReport)
}

// cachedReport is the report a round computed for a job.
type cachedReport struct {
	rep *analysis.GreyhoundReport
	at  time.Time
}

type ghJob struct {
	calls     int64
	lastNS    int64
	advanced  time.Time
	phase     analysis.GreyhoundPhase
	exported  bool
	evaluated time.Time
}

// NewGreyhound returns the controller loop over gh; its metrics are
// registered on reg.
func NewGreyhound(cfg GreyhoundConfig, jobs Jobs, gh *GreyhoundLifecycle, reg prometheus.Registerer, log *slog.Logger) (*Greyhound, error) {
	cfg.setDefaults()
	if log == nil {
		log = slog.Default()
	}
	m, err := newGHMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Greyhound{cfg: cfg, gh: gh, jobs: jobs, log: log.With("component", "greyhound"), m: m, now: time.Now,
		kick: make(chan struct{}, 1), sem: make(chan struct{}, cfg.MaxReports), seen: map[string]*ghJob{},
		pending: map[string]bool{}, manual: map[string]int64{}, forgot: map[string]uint64{},
		reports: map[string]cachedReport{}}, nil
}

// SetClock replaces the server clock (tests drive the loop with a fake).
func (c *Greyhound) SetClock(now func() time.Time) { c.now = now }

// Run evaluates a round at once and then every Interval, and a job at
// once when a result or a manual request arrives, until ctx is done. A
// kick evaluates only the kicked job: full rounds run on the ticker alone
// (one round loads every active job's window).
func (c *Greyhound) Run(ctx context.Context) {
	if c.cfg.Interval < 0 {
		return
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	c.EvaluateOnce(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.EvaluateOnce(ctx)
		case <-c.kick:
			for _, job := range c.takeKicked() {
				if ctx.Err() != nil {
					return
				}
				c.evaluate(ctx, job)
			}
		}
	}
}

// poke asks Run to evaluate job at once; a job already waiting is not
// queued twice.
func (c *Greyhound) poke(job string) {
	c.mu.Lock()
	if !c.pending[job] && len(c.kicked) < maxKicked {
		c.pending[job] = true
		c.kicked = append(c.kicked, job)
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // Run is already woken
	}
}

func (c *Greyhound) takeKicked() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	jobs := c.kicked
	c.kicked = nil
	clear(c.pending)
	return jobs
}

// EvaluateOnce runs one round over the jobs with collective calls.
func (c *Greyhound) EvaluateOnce(ctx context.Context) {
	jobs, err := c.jobs.List()
	if err != nil {
		c.log.Warn("listing jobs", "err", err)
		c.m.evaluations.WithLabelValues("error").Inc()
		return
	}
	now := c.now()
	known := map[string]bool{}
	var todo []string
	c.mu.Lock()
	for _, j := range jobs {
		known[j.ID] = true
		cs, err := c.gh.CollectiveStats(j.ID)
		if err != nil || cs.Calls == 0 {
			continue
		}
		s := c.seen[j.ID]
		if s == nil {
			s = &ghJob{advanced: now}
			c.seen[j.ID] = s
		}
		if cs.Calls != s.calls || cs.LastNS != s.lastNS {
			s.calls, s.lastNS, s.advanced = cs.Calls, cs.LastNS, now
		}
		busy := s.phase == analysis.PhaseProfiling || s.phase == analysis.PhaseValidation
		if now.Sub(s.advanced) <= c.cfg.ActiveFor || busy {
			todo = append(todo, j.ID)
		} else if s.exported {
			c.m.drop(j.ID)
			s.exported = false
		}
	}
	for id, s := range c.seen {
		if !known[id] {
			if s.exported {
				c.m.drop(id)
			}
			delete(c.seen, id)
		}
	}
	slices.SortStableFunc(todo, func(a, b string) int { return c.seen[a].evaluated.Compare(c.seen[b].evaluated) })
	c.mu.Unlock()
	if len(todo) > c.cfg.MaxJobsPerRound {
		c.m.evaluations.WithLabelValues("skipped").Add(float64(len(todo) - c.cfg.MaxJobsPerRound))
		todo = todo[:c.cfg.MaxJobsPerRound]
	}
	for _, id := range todo {
		if ctx.Err() != nil {
			return
		}
		c.evaluate(ctx, id)
	}
}

// evaluate runs one controller step for job.
func (c *Greyhound) evaluate(ctx context.Context, job string) {
	c.evalMu.Lock()
	defer c.evalMu.Unlock()
	c.mu.Lock()
	c.evalSeq++
	seq := c.evalSeq
	clear(c.forgot) // no other evaluation is in flight (evalMu)
	manual := c.manual[job]
	delete(c.manual, job)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := c.now()
	err := c.step(ctx, job, start, seq, manual)
	if err != nil && manual > 0 {
		c.mu.Lock()
		if _, newer := c.manual[job]; !newer {
			c.manual[job] = manual // the next evaluation tries again
		}
		c.mu.Unlock()
	}
	c.m.seconds.Observe(c.now().Sub(start).Seconds())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, analysis.ErrNoData) {
			return
		}
		c.m.evaluations.WithLabelValues("error").Inc()
		c.log.Debug("greyhound evaluation failed", "job", job, "err", err)
		return
	}
	c.m.evaluations.WithLabelValues("ok").Inc()
}

// step advances job's controller once at now (GreyhoundLifecycle.Advance)
// and keeps the loop's part: persistence, logs and metrics.
func (c *Greyhound) step(ctx context.Context, job string, now time.Time, seq uint64, manual int64) error {
	st, err := c.gh.State(job)
	if err != nil {
		return err
	}
	if manual > 0 {
		requestValidation(st, manual)
	}
	res, err := c.gh.Advance(ctx, job, now.UnixNano(), st, AdvanceOptions{WindowNS: c.cfg.WindowNS, MarginNS: int64(c.cfg.Margin)})
	if err != nil {
		return err
	}
	for _, t := range res.Transitions {
		c.m.transitions.WithLabelValues(string(t.From), string(t.To)).Inc()
		if t.DetectNS >= 0 {
			c.m.detectLatency.Observe(float64(t.DetectNS) / 1e9)
		}
		if t.VerdictNS >= 0 {
			c.m.verdictLatency.Observe(float64(t.VerdictNS) / 1e9)
		}
		if t.Outcome != "" {
			c.m.validations.WithLabelValues(string(t.Outcome)).Inc()
		}
		c.log.Info("greyhound transition", "job", job, "from", t.From, "to", t.To, "reason", t.Reason)
	}
	if res.Plan != nil {
		c.m.validations.WithLabelValues(string(OutcomePublished)).Inc()
	}
	if res.Changed {
		if err := c.gh.Save(job, res.Next, res.Plan); err != nil {
			return fmt.Errorf("saving greyhound state: %w", err)
		}
	}
	if c.publish(job, seq, res.Next.Controller, res.Report) && c.onReport != nil {
		c.onReport(job, res.Report) // incident evidence (Incidents.ObserveGreyhound)
	}
	return nil
}

// OnReport sets fn to hear every round's report of a job, after it is
// published (not for a job forgotten meanwhile); set it before Run. fn
// must not block (Incidents.ObserveGreyhound queues).
func (c *Greyhound) OnReport(fn func(job string, rep *analysis.GreyhoundReport)) { c.onReport = fn }

// publish exports the round's state and caches its report; false when
// the job was forgotten while the round ran.
func (c *Greyhound) publish(job string, seq uint64, s analysis.ControllerState, rep *analysis.GreyhoundReport) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.forgot[job]; ok && f >= seq {
		return false // deleted while this evaluation ran
	}
	c.reports[job] = cachedReport{rep: rep, at: c.now()}
	j := c.seen[job]
	if j == nil {
		j = &ghJob{advanced: c.now()}
		c.seen[job] = j
	}
	j.phase, j.exported, j.evaluated = s.Phase, true, c.now()
	for _, p := range []analysis.GreyhoundPhase{analysis.PhaseTracking, analysis.PhaseProfiling, analysis.PhaseValidation, analysis.PhaseVerdict} {
		v := 0.0
		if p == s.Phase {
			v = 1
		}
		c.m.phase.WithLabelValues(job, string(p)).Set(v)
	}
	if rep.Iteration.MedianMS > 0 {
		c.m.iterMS.WithLabelValues(job).Set(rep.Iteration.MedianMS)
	}
	return true
}

// Forget drops a deleted job's series, cached report and pending
// requests. Its keyspace went with the job (store.DeleteJob). It does not
// wait for an evaluation in flight (which may take Timeout): that
// evaluation's publish sees the job forgotten and exports nothing.
func (c *Greyhound) Forget(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.seen[job]; s != nil && s.exported {
		c.m.drop(job)
	}
	delete(c.seen, job)
	delete(c.reports, job)
	delete(c.manual, job)
	c.forgot[job] = c.evalSeq
}

// Report is the job's Greyhound report (API). For the default window it
// is the report the controller's latest round computed for the job while
// that is fresh (younger than two intervals; it covers the controller's
// window, 5 minutes by default, and shows the state the round left).
// Other windows, or no fresh round, are computed on demand, at most
// MaxReports at once: each loads up to 2M calls.
func (c *Greyhound) Report(ctx context.Context, req analysis.GreyhoundRequest) (*analysis.GreyhoundReport, error) {
	if req.FromNS == 0 && req.ToNS == 0 && req.LastNS == 0 && req.Incarnation == nil && c.cfg.Interval > 0 {
		c.mu.Lock()
		cr, ok := c.reports[req.Job]
		c.mu.Unlock()
		if ok && c.now().Sub(cr.at) < 2*c.cfg.Interval {
			return cr.rep, nil
		}
	}
	select {
	case c.sem <- struct{}{}:
		defer func() { <-c.sem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.gh.Report(ctx, req)
}

// OpenPlan is the plan rank of incarnation inc (-1: the newest) should
// run, nil when none (API).
func (c *Greyhound) OpenPlan(job string, rank, inc int) (*analysis.ValidationPlan, error) {
	return c.gh.OpenPlan(job, rank, inc, c.now().UnixNano())
}

// PostResult stores one rank's result (rank ≥ 0: the rank the poster
// says it is; inc ≥ 0: the incarnation it names) and evaluates the job at once (a complete set of results
// is a verdict without waiting for the round).
func (c *Greyhound) PostResult(job, vid string, rank, inc int, body io.Reader) (*analysis.ValidationResult, bool, error) {
	res, dup, err := c.gh.PostResult(job, vid, c.now().UnixNano(), rank, inc, body)
	if err == nil && !dup {
		c.poke(job)
	}
	return res, dup, err
}

// RequestValidation asks the controller to profile and validate job now;
// it returns the phase the job is in and whether a request was recorded.
// The request is held until the job's next evaluation, which it starts
// at once; nothing is recorded (and nothing evaluated) while the job is
// validating or already has a request waiting.
func (c *Greyhound) RequestValidation(job string) (analysis.GreyhoundPhase, bool, error) {
	st, err := c.gh.State(job)
	if err != nil {
		return "", false, err
	}
	cs, err := c.gh.CollectiveStats(job)
	if err == nil && cs.Calls == 0 {
		err = fmt.Errorf("job %q: %w", job, analysis.ErrNoCalls)
	}
	if err != nil {
		return "", false, err
	}
	if st.ManualNS > 0 || st.Controller.Phase == analysis.PhaseValidation {
		return st.Controller.Phase, false, nil
	}
	c.mu.Lock()
	_, waiting := c.manual[job]
	if !waiting {
		c.manual[job] = c.now().UnixNano()
	}
	c.mu.Unlock()
	if waiting {
		return st.Controller.Phase, false, nil
	}
	c.poke(job)
	return st.Controller.Phase, true, nil
}

type ghMetrics struct {
	phase, iterMS                 *prometheus.GaugeVec
	transitions, validations      *prometheus.CounterVec
	evaluations                   *prometheus.CounterVec
	detectLatency, verdictLatency prometheus.Histogram
	seconds                       prometheus.Histogram
}

func newGHMetrics(reg prometheus.Registerer) (*ghMetrics, error) {
	const ns, sub = "laggard", "greyhound"
	lat := prometheus.ExponentialBuckets(0.5, 2, 12)
	m := &ghMetrics{
		phase: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "phase",
			Help: "The job's Greyhound-Detect controller phase (§4.1): 1 for the current one, 0 for the others."}, []string{"job", "phase"}),
		iterMS: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "iteration_ms",
			Help: "Median collective-derived iteration time (ms) over the controller's window (§4.2 ACF)."}, []string{"job"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "transitions_total",
			Help: "Controller phase transitions, by from and to phase."}, []string{"from", "to"}),
		validations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "validations_total",
			Help: "Validation plans by outcome: published, done (all results in), expired (deadline with ranks missing), abandoned (relief)."}, []string{"outcome"}),
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "evaluations_total",
			Help: "Controller evaluations by result (ok, error, skipped for lack of round budget)."}, []string{"result"}),
		detectLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "detection_latency_seconds",
			Help: "From the end of the onset iteration to the controller entering profiling (server clock).", Buckets: lat}),
		verdictLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "verdict_latency_seconds",
			Help: "From the end of the onset iteration to the verdict (server clock).", Buckets: lat}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "evaluation_seconds",
			Help: "Latency of one controller evaluation.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	for _, c := range []prometheus.Collector{m.phase, m.iterMS, m.transitions, m.validations, m.evaluations, m.detectLatency, m.verdictLatency, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, r := range []string{"ok", "error", "skipped"} {
		m.evaluations.WithLabelValues(r)
	}
	for _, o := range []string{"published", "done", "expired", "abandoned"} {
		m.validations.WithLabelValues(o)
	}
	return m, nil
}

func (m *ghMetrics) drop(job string) {
	m.phase.DeletePartialMatch(prometheus.Labels{"job": job})
	m.iterMS.DeletePartialMatch(prometheus.Labels{"job": job})
}
