package control

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/store"
)

// EscalationConfig is the escalation policy's cool-downs and budget
// (docs/design/incidents.md "Escalation"; the incident decides what to
// ask for, this decides whether the job can afford it now). Zero fields
// take the defaults.
type EscalationConfig struct {
	// Cooldown per kind: no second request of a kind for a job within
	// it, whichever incident asks. Validation 10m (a validation pauses
	// every rank for a benchmark), capture 10m (KAIR's former auto-trigger
	// cool-down), profile 2m (a SysOM window costs the server, not the
	// job).
	ValidationCooldown time.Duration
	CaptureCooldown    time.Duration
	ProfileCooldown    time.Duration
	// JobBudget requests (of any kind) per job per BudgetWindow (6 per
	// hour): an incident that keeps asking cannot cost the job more.
	JobBudget    int
	BudgetWindow time.Duration
	// Timeout bounds one engine task: a KAIR report, a SysOM evaluation
	// (60s). QueueLen bounds the tasks waiting (64); beyond it a task is
	// dropped and its request fails (recorded) to be asked again.
	Timeout  time.Duration
	QueueLen int
	// SysomInterval: every interval the SysOM-AI analysis runs on jobs
	// whose agents shipped stacks since the last round (SysOM joins the
	// background loop; 60s; negative: off). SysomJobsPerRound bounds one
	// round (4; jobs with an unresolved incident first).
	SysomInterval     time.Duration
	SysomJobsPerRound int
}

func (c *EscalationConfig) setDefaults() {
	defD := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defD(&c.ValidationCooldown, 10*time.Minute)
	defD(&c.CaptureCooldown, 10*time.Minute)
	defD(&c.ProfileCooldown, 2*time.Minute)
	defD(&c.BudgetWindow, time.Hour)
	defD(&c.Timeout, time.Minute)
	if c.SysomInterval == 0 {
		c.SysomInterval = time.Minute
	}
	if c.JobBudget <= 0 {
		c.JobBudget = 6
	}
	if c.QueueLen <= 0 {
		c.QueueLen = 64
	}
	if c.SysomJobsPerRound <= 0 {
		c.SysomJobsPerRound = 4
	}
}

func (c *EscalationConfig) cooldown(k incident.RequestKind) time.Duration {
	switch k {
	case incident.RequestValidation:
		return c.ValidationCooldown
	case incident.RequestCapture:
		return c.CaptureCooldown
	}
	return c.ProfileCooldown
}

// Action results (incident.Action.Result).
const (
	ResultRequested = "requested"
	ResultDone      = "done"
	ResultSkipped   = "skipped"
	ResultFailed    = "failed"
)

// TriggerIncident is the store.Capture.Trigger of captures the
// escalation asks for.
const TriggerIncident = "incident"

// Validator asks Greyhound to validate a job now
// (detect.Controller.RequestValidation).
type Validator interface {
	RequestValidation(job string) (analysis.GreyhoundPhase, bool, error)
}

// Capturer creates a KAIR capture of ranks of job with trigger
// TriggerIncident; stepMS is the job's step time now (the incident's
// slow step time: where the capture starts and how long it waits),
// signal names the incident (one capture per incident also across
// restarts).
type Capturer interface {
	CreateIncidentCapture(job string, ranks []int, stepMS float64, reason, signal string) (*store.Capture, error)
}

// KairReporter computes a capture's KAIR report (detect.Kair.Report).
type KairReporter interface {
	Report(ctx context.Context, job, id string) (*analysis.KairAnswer, error)
}

// SysomReporter runs SysOM-AI's analysis over a window
// (*analysis.Sysom).
type SysomReporter interface {
	Report(ctx context.Context, req analysis.SysomRequest) (*analysis.SysomReport, error)
}

// ProfileSource tells which jobs have stacks (*store.Store).
type ProfileSource interface {
	ProfileStats(job string) (store.ProfileStats, error)
}

// escalator acts on incidents' requests and runs the engine work they
// and the background SysOM loop need, one task at a time.
type escalator struct {
	x *Incidents

	mu sync.Mutex
	// last is, per job and kind, when the latest request was made
	// (cool-down); spent the times of the job's requests in the budget
	// window. Seeded from the job's stored audit on first use.
	last   map[string]map[incident.RequestKind]int64
	spent  map[string][]int64
	seeded map[string]bool
	tasks  chan engineTask
	queued map[string]bool
	// sysomSeen is, per job, the newest stack window end a SysOM round
	// evaluated (a job is evaluated again only when its agent shipped
	// more).
	sysomSeen map[string]int64
}

type engineTask struct {
	key string
	job string
	run func(ctx context.Context)
}

func newEscalator(x *Incidents) *escalator {
	return &escalator{x: x, last: map[string]map[incident.RequestKind]int64{}, spent: map[string][]int64{}, seeded: map[string]bool{},
		tasks: make(chan engineTask, x.cfg.Escalation.QueueLen), queued: map[string]bool{}, sysomSeen: map[string]int64{}}
}

func (e *escalator) forget(job string) {
	e.mu.Lock()
	delete(e.last, job)
	delete(e.spent, job)
	delete(e.seeded, job)
	delete(e.sysomSeen, job)
	e.mu.Unlock()
}

// act decides on every unasked request of job's open incidents and
// records an action for each decision that is new; it reports
// whether it recorded any (the caller fuses again so the audit and the
// requests show them). x.work is held.
func (e *escalator) act(job string, incs []incident.Incident, st *jobState) bool {
	now := e.x.now().UnixNano()
	e.seed(job, st)
	recorded := false
	for i := range incs {
		inc := &incs[i]
		if inc.State != incident.StateOpen {
			// Recovering: the job is back within 10 % of healthy, so a
			// benchmark, a capture or a profile window now would measure
			// the healthy job and cost it for nothing (a relapse re-opens
			// the incident and its requests).
			continue
		}
		for _, w := range inc.Waiting {
			if w.Asked || st.hasAction(inc.ID, w.Kind, ResultRequested, ResultDone) {
				continue
			}
			a := incident.Action{Incident: inc.ID, AtNS: now, Kind: w.Kind, Ranks: slices.Clone(w.Ranks)}
			if ok, why := e.allowed(job, w.Kind, now); !ok {
				a.Result, a.Text = ResultSkipped, why
			} else {
				a.Result, a.Ref, a.Text = e.request(job, inc, w, now)
				if a.Result == ResultRequested {
					e.charge(job, w.Kind, now)
				}
			}
			// A decision repeated (still cooling down, still busy) is not
			// written again: the audit shows it once.
			if st.lastActionSame(inc.ID, w.Kind, a.Result, a.Text) {
				continue
			}
			e.x.m.escalations.WithLabelValues(string(a.Kind), a.Result).Inc()
			e.x.log.Info("incident escalation", "job", job, "incident", inc.ID, "kind", a.Kind, "result", a.Result, "ranks", a.Ranks, "text", a.Text, "ref", a.Ref)
			st.addAction(a)
			recorded = true
		}
	}
	return recorded
}

// seed reads the job's cool-downs and budget from its stored audit once
// (a restart does not reset them).
func (e *escalator) seed(job string, st *jobState) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seeded[job] {
		return
	}
	e.seeded[job] = true
	for _, a := range st.acts {
		if a.a.Result != ResultRequested {
			continue
		}
		if e.last[job] == nil {
			e.last[job] = map[incident.RequestKind]int64{}
		}
		e.last[job][a.a.Kind] = max(e.last[job][a.a.Kind], a.a.AtNS)
		e.spent[job] = append(e.spent[job], a.a.AtNS)
	}
}

// allowed applies the cool-down and the budget.
func (e *escalator) allowed(job string, k incident.RequestKind, now int64) (bool, string) {
	cfg := &e.x.cfg.Escalation
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.last[job][k]; ok && now-t < int64(cfg.cooldown(k)) {
		return false, fmt.Sprintf("cool-down: this job had a %s request within the last %s; asked again when it passes", kindWords(k), cfg.cooldown(k))
	}
	lo := now - int64(cfg.BudgetWindow)
	e.spent[job] = slices.DeleteFunc(e.spent[job], func(t int64) bool { return t < lo })
	if len(e.spent[job]) >= cfg.JobBudget {
		return false, fmt.Sprintf("budget: this job's %d requests per %s are spent; asked again when the window moves on", cfg.JobBudget, cfg.BudgetWindow)
	}
	return true, ""
}

func (e *escalator) charge(job string, k incident.RequestKind, now int64) {
	e.mu.Lock()
	if e.last[job] == nil {
		e.last[job] = map[incident.RequestKind]int64{}
	}
	e.last[job][k] = now
	e.spent[job] = append(e.spent[job], now)
	e.mu.Unlock()
}

// request asks the engine for w; it returns the action's result, the
// engine's reference and the text.
func (e *escalator) request(job string, inc *incident.Incident, w incident.Request, now int64) (result, ref, text string) {
	d := e.x.deps
	switch w.Kind {
	case incident.RequestValidation:
		if d.Validator == nil {
			return ResultSkipped, "", "Greyhound validation is not available on this server (no collective keyspace or its loop is off)"
		}
		phase, recorded, err := d.Validator.RequestValidation(job)
		switch {
		case err != nil:
			return ResultFailed, "", "Greyhound validation: " + err.Error()
		case !recorded:
			return ResultSkipped, string(phase), fmt.Sprintf("busy: Greyhound is already %s or has a request waiting", phase)
		}
		return ResultRequested, string(phase), "asked Greyhound to benchmark every rank and link (" + w.Reason + ")"
	case incident.RequestCapture:
		if d.Capturer == nil {
			return ResultSkipped, "", "KAIR captures are not available on this server (no capture keyspace)"
		}
		reason := fmt.Sprintf("incident %s: %s", inc.ID, clip(inc.Headline, 200))
		c, err := d.Capturer.CreateIncidentCapture(job, w.Ranks, inc.SlowMS, reason, "incident:"+inc.ID)
		switch {
		case errors.Is(err, ErrCaptureOpen):
			return ResultSkipped, "", "busy: the job has an open capture; asked again when it closes"
		case err != nil:
			return ResultFailed, "", "KAIR capture: " + err.Error()
		}
		return ResultRequested, c.ID, fmt.Sprintf("asked ranks %s to record a profiler capture from step %d (%s)", ranksText(c.Ranks), c.StartStep, w.Reason)
	case incident.RequestProfile:
		if d.Sysom == nil {
			return ResultSkipped, "", "SysOM-AI analysis is not available on this server (no symbol store)"
		}
		win, id, ranks := profileWindow(inc, now), inc.ID, slices.Clone(w.Ranks)
		if !e.enqueue(engineTask{key: "profile\x00" + job + "\x00" + id, job: job, run: func(ctx context.Context) {
			e.profile(ctx, job, id, ranks, win)
		}}) {
			return ResultFailed, "", "the engine queue is full; asked again later"
		}
		return ResultRequested, win.ref(job, w.Ranks), fmt.Sprintf("SysOM-AI profile window of ranks %s [%s]: %s", ranksText(w.Ranks), win.words(), w.Reason)
	}
	return ResultSkipped, "", fmt.Sprintf("unknown request kind %q", w.Kind)
}

// window is a SysOM-AI window and its baseline (ns).
type window struct{ from, to, baseFrom, baseTo int64 }

// profileWindow: the incident's "during" stretch up to now, against its
// "before" stretch as the baseline (the job's own healthy profile).
func profileWindow(inc *incident.Incident, now int64) window {
	w := window{from: inc.Windows.During.FromNS, to: max(inc.Windows.During.ToNS, now), baseFrom: inc.Windows.Before.FromNS, baseTo: inc.Windows.Before.ToNS}
	if w.from <= 0 {
		w.from = inc.Opened.WallNS
	}
	if w.baseTo <= 0 || w.baseTo > w.from {
		w.baseTo = w.from
	}
	if w.baseFrom <= 0 || w.baseFrom >= w.baseTo {
		w.baseFrom = w.baseTo - (w.to - w.from) // as long as the slow stretch
	}
	return w
}

func (w window) words() string {
	return time.Unix(0, w.from).UTC().Format("15:04:05") + "–" + time.Unix(0, w.to).UTC().Format("15:04:05") + " against " +
		time.Unix(0, w.baseFrom).UTC().Format("15:04:05") + "–" + time.Unix(0, w.baseTo).UTC().Format("15:04:05")
}

// ref is the engine view of the window: the suspect's flame graph
// against the healthy peer's (the last rank of the request).
func (w window) ref(job string, ranks []int) string {
	q := fmt.Sprintf("from_ns=%d&to_ns=%d", w.from, w.to)
	if len(ranks) >= 2 {
		return fmt.Sprintf("/api/v1/jobs/%s/flamegraph/diff?%s&a_rank=%d&b_rank=%d", job, q, ranks[len(ranks)-1], ranks[0])
	}
	return fmt.Sprintf("/api/v1/jobs/%s/sysom?%s&base_from_ns=%d&base_to_ns=%d", job, q, w.baseFrom, w.baseTo)
}

// profile runs SysOM-AI over the incident's window and feeds what it
// finds; the outcome is recorded against the incident.
func (e *escalator) profile(ctx context.Context, job, incID string, ranks []int, w window) {
	rep, err := e.x.deps.Sysom.Report(ctx, analysis.SysomRequest{Job: job, Window: analysis.WindowRequest{FromNS: w.from, ToNS: w.to,
		BaseFromNS: w.baseFrom, BaseToNS: w.baseTo, NowNS: e.x.now().UnixNano()}})
	a := incident.Action{Incident: incID, AtNS: e.x.now().UnixNano(), Kind: incident.RequestProfile, Ranks: ranks, Ref: w.ref(job, ranks)}
	if err != nil {
		a.Result, a.Text = ResultFailed, "SysOM-AI profile window: "+err.Error()
	} else {
		evs := e.x.adapt(job, func(a *Adapters, hosts map[int]string) []incident.Evidence {
			if a.Sysom == nil {
				return nil
			}
			return a.Sysom(rep, hosts)
		})
		e.x.Observe(job, evs)
		a.Result, a.Text = ResultDone, fmt.Sprintf("SysOM-AI analysed %d ranks' stacks over the window: %d findings", rep.Window.Ranks, len(evs))
	}
	e.x.m.escalations.WithLabelValues(string(a.Kind), a.Result).Inc()
	e.x.record(job, a)
}

// enqueue queues engine work unless the same task is queued or the queue
// is full.
func (e *escalator) enqueue(t engineTask) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.queued[t.key] {
		return true
	}
	select {
	case e.tasks <- t:
		e.queued[t.key] = true
		return true
	default:
		e.x.log.Warn("incident engine queue full: task dropped", "job", t.job, "task", strings.SplitN(t.key, "\x00", 2)[0])
		return false
	}
}

// run executes engine tasks one at a time and, every SysomInterval, the
// background SysOM round, until ctx is done.
func (e *escalator) run(ctx context.Context) {
	var tick <-chan time.Time
	if iv := e.x.cfg.Escalation.SysomInterval; iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-e.tasks:
			e.runTask(ctx, t)
		case <-tick:
			e.sysomRound(ctx)
		}
	}
}

// drain runs every queued task now (tests; Sync does not).
func (e *escalator) drain(ctx context.Context) {
	for {
		select {
		case t := <-e.tasks:
			e.runTask(ctx, t)
		default:
			return
		}
	}
}

func (e *escalator) runTask(ctx context.Context, t engineTask) {
	e.mu.Lock()
	delete(e.queued, t.key)
	e.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, e.x.cfg.Escalation.Timeout)
	defer cancel()
	t.run(tctx)
}

// kairReport computes a finished capture's KAIR report and feeds it.
func (e *escalator) kairReport(ctx context.Context, c *store.Capture) {
	rep, err := e.x.deps.Kair.Report(ctx, c.Job, c.ID)
	incID, forIncident := strings.CutPrefix(c.Signal, "incident:")
	forIncident = forIncident && c.Trigger == TriggerIncident
	a := incident.Action{Incident: incID, AtNS: e.x.now().UnixNano(), Kind: incident.RequestCapture, Ranks: slices.Clone(c.Uploaded), Ref: c.ID}
	if err != nil {
		e.x.log.Debug("KAIR report of a finished capture", "job", c.Job, "capture", c.ID, "err", err)
		a.Result, a.Text = ResultFailed, "KAIR report: "+err.Error()
	} else {
		evs := e.x.adapt(c.Job, func(a *Adapters, hosts map[int]string) []incident.Evidence {
			if a.Kair == nil {
				return nil
			}
			return a.Kair(rep.Capture, rep.Report, hosts)
		})
		e.x.Observe(c.Job, evs)
		a.Result, a.Text = ResultDone, fmt.Sprintf("KAIR compared %d ranks' traces (capture %s, %s): %d findings", len(c.Uploaded), c.ID, c.State, len(evs))
	}
	if forIncident {
		e.x.m.escalations.WithLabelValues(string(a.Kind), a.Result).Inc()
		e.x.record(c.Job, a)
	}
}

// sysomRound is SysOM-AI in the background loop: jobs whose agent
// shipped stacks since their last evaluation, those with an unresolved
// incident first, at most SysomJobsPerRound.
func (e *escalator) sysomRound(ctx context.Context) {
	d := e.x.deps
	if d.Sysom == nil || d.Profiles == nil || d.Jobs == nil {
		return
	}
	jobs, err := d.Jobs.List()
	if err != nil {
		return
	}
	hot := e.x.unresolvedJobs()
	type cand struct {
		job  string
		last int64
		hot  bool
	}
	var todo []cand
	e.mu.Lock()
	for _, j := range jobs {
		ps, err := d.Profiles.ProfileStats(j.ID)
		if err != nil || ps.StackRecords == 0 || ps.LastNS <= e.sysomSeen[j.ID] {
			continue
		}
		todo = append(todo, cand{j.ID, ps.LastNS, hot[j.ID]})
	}
	e.mu.Unlock()
	slices.SortFunc(todo, func(a, b cand) int {
		if a.hot != b.hot {
			if a.hot {
				return -1
			}
			return 1
		}
		return strings.Compare(a.job, b.job)
	})
	for i, c := range todo {
		if i == e.x.cfg.Escalation.SysomJobsPerRound || ctx.Err() != nil {
			break
		}
		tctx, cancel := context.WithTimeout(ctx, e.x.cfg.Escalation.Timeout)
		rep, err := d.Sysom.Report(tctx, analysis.SysomRequest{Job: c.job, Window: analysis.WindowRequest{NowNS: e.x.now().UnixNano()}})
		cancel()
		e.mu.Lock()
		e.sysomSeen[c.job] = c.last
		e.mu.Unlock()
		if err != nil {
			e.x.log.Debug("background SysOM-AI evaluation", "job", c.job, "err", err)
			continue
		}
		e.x.Observe(c.job, e.x.adapt(c.job, func(a *Adapters, hosts map[int]string) []incident.Evidence {
			if a.Sysom == nil {
				return nil
			}
			return a.Sysom(rep, hosts)
		}))
	}
}

// hasAction reports whether job's audit holds an action for (incident,
// kind) with one of results.
func (st *jobState) hasAction(inc string, k incident.RequestKind, results ...string) bool {
	for _, a := range st.acts {
		if a.a.Incident == inc && a.a.Kind == k && slices.Contains(results, a.a.Result) {
			return true
		}
	}
	return false
}

// lastActionSame reports whether the newest action for (incident, kind)
// has this result and text.
func (st *jobState) lastActionSame(inc string, k incident.RequestKind, result, text string) bool {
	var last *incident.Action
	for _, a := range st.acts {
		if a.a.Incident == inc && a.a.Kind == k && (last == nil || a.a.AtNS > last.AtNS) {
			last = &a.a
		}
	}
	return last != nil && last.Result == result && last.Text == text
}

func kindWords(k incident.RequestKind) string {
	switch k {
	case incident.RequestValidation:
		return "Greyhound validation"
	case incident.RequestCapture:
		return "KAIR capture"
	case incident.RequestProfile:
		return "SysOM-AI profile window"
	}
	return string(k)
}

func ranksText(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// CreateIncidentCapture asks ranks (the incident's suspects; the
// capture adds random peers) to record a KAIR capture with trigger
// TriggerIncident; signal names the incident. The incident's step time
// places the start a few steps ahead of the ranks: seconds after an
// onset the background evaluation may not know the job's step time yet,
// and a capture placed without one can start past the job's end. It
// implements Capturer.
func (k *Kair) CreateIncidentCapture(job string, ranks []int, stepMS float64, reason, signal string) (*store.Capture, error) {
	h := k.hints(job, TriggerIncident, ranks)
	h.Signal = signal
	if stepMS > 0 && stepMS < 86_400_000 { // a day bounds a step
		h.StepNS = int64(stepMS * 1e6)
	}
	return k.k.Create(job, analysis.CaptureRequest{Steps: k.cfg.Steps, Reason: reason}, h, k.now().UnixNano())
}

// Follows reports whether the controller evaluates job's collective
// calls (its loop is on and the job's calls advanced within ActiveFor):
// only then can a validation be asked for.
func (c *Greyhound) Follows(job string) bool {
	if c.cfg.Interval < 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.seen[job]
	return j != nil && c.now().Sub(j.advanced) <= c.cfg.ActiveFor
}

// pollFreshNS: ranks that polled for captures this recently will pick a
// new capture up.
const pollFreshNS = int64(30e9)

// Polling reports whether ranks of job polled for captures within the
// last 30 s: a capture asked now will be recorded. It answers at once,
// where the StageFrontier detector needs two evaluations to call a job
// advancing (a client polls before it names its step).
func (k *Kair) Polling(job string) bool {
	now := k.now().UnixNano()
	k.k.mu.Lock()
	defer k.k.mu.Unlock()
	t, ok := k.k.lastPoll[job]
	return ok && now-t <= pollFreshNS
}
