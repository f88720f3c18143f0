package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Capture triggers (store.Capture.Trigger).
const (
	TriggerManual = "manual"
	TriggerAuto   = "auto"
)

// Errors the HTTP layer maps to 409.
var (
	// ErrCaptureOpen: the job already has an open capture.
	ErrCaptureOpen = errors.New("the job already has an open capture")
	// ErrCaptureClosed: the capture was cancelled (uploads and cancels
	// of closed captures are refused).
	ErrCaptureClosed = errors.New("the capture is closed")
)

// KairSource is what the KAIR adapter reads and writes (store/capture.go,
// store/optrace.go); *store.Store implements it.
type KairSource interface {
	Job(id string) (*signal.Job, error)
	Stats(job string) (store.JobStats, error)
	PutCapture(c *store.Capture) error
	Capture(job, id string) (*store.Capture, error)
	Captures(job string) ([]*store.Capture, error)
	PutOpTrace(job, capture string, t *optrace.Trace, hb []store.OpHeartbeat) error
	OpTraces(job, capture string) ([]optrace.Trace, map[int][]store.OpHeartbeat, error)
	OpTraceEvents(job, capture string, ranks []int) (map[int]int64, error)
}

var _ KairSource = (*store.Store)(nil)

// KairLifecycleConfig bounds captures. Zero fields take the defaults in
// parentheses.
type KairLifecycleConfig struct {
	// Steps is the default number of sampled steps a capture records (5);
	// MaxSteps bounds a request (64).
	Steps, MaxSteps int
	// Every is the default step-level sampling interval (1); MaxEvery
	// bounds a request (1000).
	Every, MaxEvery int
	// MaxRanks bounds the ranks one capture asks (64): a report loads
	// every asked rank's trace (up to 2M events each) at once.
	MaxRanks int
	// AllRanksUpTo: a job of at most this many ranks records all of them
	// by default (16); a larger one records its suspects plus Peers
	// random peers (8), KAIR §III-A Feature 2.
	AllRanksUpTo, Peers int
	// LeadSteps and LeadNS: the default start step is the job's newest
	// step plus max(LeadSteps, LeadNS of steps) (10 steps, 10 s), so every
	// rank has polled the plan before it starts.
	LeadSteps int64
	LeadNS    int64
	// SlackNS is added to the recording's expected end for export and
	// upload (5 min); DeadlineNS is the whole deadline when the step time
	// is unknown (15 min); MaxDeadlineNS caps it (1 h).
	SlackNS, DeadlineNS, MaxDeadlineNS int64
	// MaxReasonLen clips reasons (512 bytes).
	MaxReasonLen int
	// Run configures kair.Run (analysis.DefaultKairRunConfig()).
	Run *analysis.KairRunConfig
	// MaxCaptureEvents bounds the events of all of one capture's traces
	// (8,000,000, ~1.2 GiB decoded): a report loads them all at once.
	MaxCaptureEvents int64
	// CachedReports are the reports kept for repeated reads (8).
	CachedReports int
	// CachedTimelineEvents bounds the events of the timelines kept for
	// repeated reads (1<<20, ~100 MiB).
	CachedTimelineEvents int
}

func (c *KairLifecycleConfig) setDefaults() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def64 := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.Steps, 5)
	def(&c.MaxSteps, 64)
	def(&c.Every, 1)
	def(&c.MaxEvery, 1000)
	def(&c.MaxRanks, 64)
	def(&c.AllRanksUpTo, 16)
	def(&c.Peers, 8)
	def64(&c.LeadSteps, 10)
	def64(&c.LeadNS, 10e9)
	def64(&c.SlackNS, 300e9)
	def64(&c.DeadlineNS, 900e9)
	def64(&c.MaxDeadlineNS, 3600e9)
	def(&c.MaxReasonLen, 512)
	def(&c.CachedReports, 8)
	def64(&c.MaxCaptureEvents, 8_000_000)
	def(&c.CachedTimelineEvents, 1<<20)
	c.Steps = min(c.Steps, c.MaxSteps)
	if c.Run == nil {
		rc := analysis.DefaultKairRunConfig()
		c.Run = &rc
	}
}

// CaptureHints are what the caller knows beyond the store: who asked,
// the suspects to record besides random peers, and the job's step time
// (deadline and lead).
type CaptureHints struct {
	Trigger  string
	Suspects []int
	StepNS   int64
	// Signal names an auto trigger's finding (store.Capture.Signal).
	Signal string
}

// KairLifecycle is KAIR's capture life cycle over the store (create,
// the ranks' polls, uploads and errors, settle, cancel, expiry, the close
// on a restart) and the reports and timelines read from it, cached. The
// clock is always the caller's (Kair gives it the server's). Safe for
// concurrent use.
type KairLifecycle struct {
	src KairSource
	cfg KairLifecycleConfig
	log *slog.Logger
	// OnState, if set, sees every capture entering a state (created as
	// pending included), after it is stored; for metrics. Set it before
	// use.
	OnState func(c *store.Capture)
	// intn picks peers (math/rand/v2 by default; tests fix it).
	intn func(n int) int

	mu   sync.Mutex
	open map[string]*store.Capture // job → open capture (nil: known none); polls read it
	// cache holds recent reports, oldest first.
	cache []cachedKair
	// running makes concurrent reads of one capture compute it once.
	running map[string]*kairFlight
	// gen counts uploads per job (part of the report key; bounded by the
	// jobs, unlike a count per capture).
	gen map[string]uint64
	// timelines holds built timelines, oldest first; timelineEvents
	// counts their events (≤ CachedTimelineEvents).
	timelines      []cachedTimeline
	timelineEvents int
	// progress is, per job, the step each rank last reported in its
	// capture poll (KAIR §III-A Feature 2: a plan starts at a step every
	// rank will reach, chosen from these); one entry per polling rank.
	progress map[string]map[int]*rankProgress
	// lastPoll is, per job, when a rank last polled (whether or not it
	// named its step): a capture asked now will be picked up
	// (Kair.Polling, the incidents' capture capability).
	lastPoll map[string]int64
	// progressInc is, per job, the incarnation the polls in progress come
	// from (the newest a poll named): a restart starts the steps over.
	progressInc map[string]int
	// provisional holds the open captures (job\x00id → created ns) whose
	// start step was set without a known step time, so without a time
	// margin: none is handed out until the polls give a step rate (or
	// provisionalWaitNS passed), and its start is set then.
	provisional map[string]int64
}

// rankProgress is a rank's last poll-reported step and an earlier report
// at least progressGapNS before it (its step rate).
type rankProgress struct {
	step, atNS   int64
	step0, at0NS int64
}

const (
	// progressGapNS: a step rate is measured over reports at least this
	// far apart (polls come every ~2 s).
	progressGapNS = int64(1e9)
	// progressStaleNS: a rank whose last report is older no longer says
	// where the job is (it stopped polling, or the job restarted).
	progressStaleNS = int64(120e9)
	// provisionalWaitNS bounds how long a plan waits for a step rate
	// (two polls of each rank, ~2 s apart) before it is handed out as is.
	provisionalWaitNS = int64(15e9)
)

type cachedTimeline struct {
	key    string // the report's key
	step   int64
	tl     *analysis.KairTimeline
	events int
}

type cachedKair struct {
	key string
	rep *analysis.KairReport
}

type kairFlight struct {
	done chan struct{}
	rep  *analysis.KairReport
	err  error
}

// NewKairLifecycle returns the life cycle over src.
func NewKairLifecycle(src KairSource, cfg KairLifecycleConfig) *KairLifecycle {
	cfg.setDefaults()
	return &KairLifecycle{src: src, cfg: cfg, log: slog.Default(), intn: mrand.IntN, open: map[string]*store.Capture{},
		running: map[string]*kairFlight{}, gen: map[string]uint64{}, progress: map[string]map[int]*rankProgress{},
		progressInc: map[string]int{}, provisional: map[string]int64{}, lastPoll: map[string]int64{}}
}

// SetLogger sets where panics in the engine are logged.
func (k *KairLifecycle) SetLogger(l *slog.Logger) { k.log = l }

// Config returns the effective configuration.
func (k *KairLifecycle) Config() KairLifecycleConfig { return k.cfg }

// Forget drops what is cached about a deleted job.
func (k *KairLifecycle) Forget(job string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.open, job)
	delete(k.gen, job)
	delete(k.progress, job)
	delete(k.progressInc, job)
	delete(k.lastPoll, job)
	for key := range k.provisional {
		if strings.HasPrefix(key, job+"\x00") {
			delete(k.provisional, key)
		}
	}
	k.cache = slices.DeleteFunc(k.cache, func(c cachedKair) bool { return strings.HasPrefix(c.key, job+"\x00") })
	k.timelines = slices.DeleteFunc(k.timelines, func(c cachedTimeline) bool {
		if strings.HasPrefix(c.key, job+"\x00") {
			k.timelineEvents -= c.events
			return true
		}
		return false
	})
}

func cloneCapture(c *store.Capture) *store.Capture {
	if c == nil {
		return nil
	}
	d := *c
	d.Ranks = slices.Clone(c.Ranks)
	d.Fetched = slices.Clone(c.Fetched)
	d.Uploaded = slices.Clone(c.Uploaded)
	if c.Failed != nil {
		d.Failed = make(map[string]string, len(c.Failed))
		for r, m := range c.Failed {
			d.Failed[r] = m
		}
	}
	if d.Fetched == nil {
		d.Fetched = []int{}
	}
	if d.Uploaded == nil {
		d.Uploaded = []int{}
	}
	return &d
}

// openLocked returns job's open capture (settled at nowNS), loading it
// from the store on a cache miss. k.mu is held.
func (k *KairLifecycle) openLocked(job string, nowNS int64) (*store.Capture, error) {
	c, ok := k.open[job]
	if !ok {
		cs, err := k.src.Captures(job)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		for _, x := range cs {
			if analysis.CaptureOpen(x) {
				c = x
				break
			}
		}
		k.open[job] = c
	}
	if c == nil {
		return nil, nil
	}
	if err := k.settleLocked(c, nowNS); err != nil {
		return nil, err
	}
	if !analysis.CaptureOpen(c) {
		k.open[job] = nil
		return nil, nil
	}
	return c, nil
}

// settledState is c's state at nowNS: closed once every asked rank
// answered (complete when all uploaded) or the deadline passed (partial
// with a trace, expired without). Cancelled and complete stay; partial
// and expired captures still take late uploads, so they move on.
func settledState(c *store.Capture, nowNS int64) store.CaptureState {
	if !analysis.CaptureOpen(c) && c.State != store.CapturePartial && c.State != store.CaptureExpired {
		return c.State
	}
	answered := 0
	for _, r := range c.Ranks {
		if slices.Contains(c.Uploaded, r) || c.Failed[strconv.Itoa(r)] != "" {
			answered++
		}
	}
	switch {
	case len(c.Ranks) > 0 && len(c.Uploaded) == len(c.Ranks):
		return store.CaptureComplete
	case answered == len(c.Ranks) || nowNS > c.DeadlineNS:
		if len(c.Uploaded) == 0 {
			return store.CaptureExpired
		}
		return store.CapturePartial
	}
	return c.State
}

// settleLocked moves c to its settled state, storing the change. k.mu is
// held.
func (k *KairLifecycle) settleLocked(c *store.Capture, nowNS int64) error {
	next := settledState(c, nowNS)
	if next == c.State {
		return nil
	}
	prev := c.State
	c.State = next
	if err := k.src.PutCapture(c); err != nil {
		c.State = prev
		return err
	}
	k.notify(c)
	return nil
}

func (k *KairLifecycle) notify(c *store.Capture) {
	if k.OnState != nil {
		k.OnState(cloneCapture(c))
	}
}

// Create asks ranks of job to record (a manual or auto trigger); it
// fails with ErrCaptureOpen while another capture is open.
func (k *KairLifecycle) Create(job string, req analysis.CaptureRequest, h CaptureHints, nowNS int64) (*store.Capture, error) {
	j, err := k.src.Job(job)
	if err != nil {
		return nil, err
	}
	c := &store.Capture{Job: job, Trigger: h.Trigger, CreatedNS: nowNS, Steps: req.Steps, Every: req.Every,
		Fetched: []int{}, Uploaded: []int{}, State: store.CapturePending, Incarnation: j.Current()}
	if c.Trigger == "" {
		c.Trigger = TriggerManual
	}
	if c.Steps == 0 {
		c.Steps = k.cfg.Steps
	}
	if c.Steps < 1 || c.Steps > k.cfg.MaxSteps {
		return nil, signal.FieldErrorf("steps", "must be in [1, %d], got %d", k.cfg.MaxSteps, req.Steps)
	}
	if c.Every == 0 {
		c.Every = k.cfg.Every
	}
	if c.Every < 1 || c.Every > k.cfg.MaxEvery {
		return nil, signal.FieldErrorf("every", "must be in [1, %d], got %d", k.cfg.MaxEvery, req.Every)
	}
	c.Reason = clipText(strings.TrimSpace(req.Reason), k.cfg.MaxReasonLen)
	c.Signal = clipText(h.Signal, 256)
	if c.Ranks, err = k.pickRanks(j, req.Ranks, h.Suspects); err != nil {
		return nil, err
	}
	st, err := k.src.Stats(job)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	// KAIR §III-A Feature 2: ranks start recording at a common step a
	// little ahead of the newest one any rank reported (stored vectors,
	// or the ranks' own polls), so every rank has polled the plan before
	// it starts (issue 16 item 7b).
	k.mu.Lock()
	if h.StepNS <= 0 {
		h.StepNS = k.polledStepNSLocked(job, nowNS)
	}
	newest, known := k.newestStepLocked(job, nowNS, h.StepNS)
	if inc, ok := k.progressInc[job]; ok && inc != c.Incarnation {
		newest, known = -1, false // the polls come from another launch
	}
	k.mu.Unlock()
	// Stored steps are ordinals (stagevec.Ordinal): only the capture's
	// incarnation's steps count.
	if inc, last := stagevec.SplitOrdinal(max(st.LastStep, 0)); st.Vectors > 0 && st.LastStep >= 0 && inc == c.Incarnation && (!known || last > newest) {
		newest, known = last, true
	}
	lead := k.leadSteps(h.StepNS)
	switch {
	case req.StartStep != nil:
		if *req.StartStep < 0 || *req.StartStep > optrace.MaxStep {
			return nil, signal.FieldErrorf("start_step", "must be in [0, %d], got %d", optrace.MaxStep, *req.StartStep)
		}
		c.StartStep = *req.StartStep
	case known:
		c.StartStep = min(newest+lead, optrace.MaxStep)
	}
	wait := k.cfg.DeadlineNS
	if h.StepNS > 0 {
		ahead := max(c.StartStep-max(newest, 0), 0) + int64(c.Steps*c.Every)
		wait = k.cfg.MaxDeadlineNS
		if ahead <= k.cfg.MaxDeadlineNS/h.StepNS { // no overflow: clamped below anyway
			wait = ahead*h.StepNS + k.cfg.SlackNS
		} else if req.StartStep != nil {
			// The capture would expire before its first step: say so now
			// rather than let it lapse unseen.
			return nil, signal.FieldErrorf("start_step", "step %d is %d steps past the newest step %d; at ~%d ms a step the recording would end after the %d s a capture waits",
				c.StartStep, c.StartStep-max(newest, 0), newest, h.StepNS/1e6, k.cfg.MaxDeadlineNS/1e9)
		}
	}
	c.DeadlineNS = nowNS + min(max(wait, k.cfg.SlackNS), k.cfg.MaxDeadlineNS)
	c.ID = store.NewCaptureID()
	k.mu.Lock()
	defer k.mu.Unlock()
	open, err := k.openLocked(job, nowNS)
	if err != nil {
		return nil, err
	}
	if open != nil {
		return nil, fmt.Errorf("job %q: capture %s (%s) is open until %d: %w", signal.Clip(job), open.ID, open.State, open.DeadlineNS, ErrCaptureOpen)
	}
	if err := k.src.PutCapture(c); err != nil {
		return nil, err
	}
	k.open[job] = c
	if req.StartStep == nil && h.StepNS <= 0 {
		k.provisional[job+"\x00"+c.ID] = nowNS
	}
	k.notify(c)
	return cloneCapture(c), nil
}

// clipText cuts s to at most n bytes on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// pickRanks validates asked ranks or picks the default: all ranks of a
// small job, else the suspects plus random peers.
func (k *KairLifecycle) pickRanks(j *signal.Job, asked, suspects []int) ([]int, error) {
	world := j.WorldSize
	if len(asked) > 0 {
		if len(asked) > k.cfg.MaxRanks {
			return nil, signal.FieldErrorf("ranks", "%d ranks, more than the %d one capture may record", len(asked), k.cfg.MaxRanks)
		}
		out := slices.Clone(asked)
		slices.Sort(out)
		for i, r := range out {
			if r < 0 || (world > 0 && r >= world) {
				return nil, signal.FieldErrorf("ranks", "rank %d is not in the job's world [0, %d)", r, world)
			}
			if i > 0 && out[i-1] == r {
				return nil, signal.FieldErrorf("ranks", "rank %d is listed twice", r)
			}
		}
		return out, nil
	}
	if world <= 0 {
		return nil, signal.FieldErrorf("ranks", "the job's world size is unknown: list the ranks to record")
	}
	if world <= k.cfg.AllRanksUpTo {
		out := make([]int, world)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	for _, r := range suspects {
		if r >= 0 && r < world && !slices.Contains(out, r) && len(out) < k.cfg.MaxRanks-k.cfg.Peers {
			out = append(out, r)
		}
	}
	peers := min(max(k.cfg.Peers, k.cfg.AllRanksUpTo-len(out)), world-len(out), k.cfg.MaxRanks-len(out))
	// Random peers (a partial Fisher-Yates over the ranks not chosen):
	// KAIR compares the suspects' rhythm against healthy workers.
	pool := make([]int, 0, world-len(out))
	for r := range world {
		if !slices.Contains(out, r) {
			pool = append(pool, r)
		}
	}
	for i := 0; i < peers; i++ {
		p := i + k.intn(len(pool)-i)
		pool[i], pool[p] = pool[p], pool[i]
		out = append(out, pool[i])
	}
	slices.Sort(out)
	return out, nil
}

// Captures lists job's captures, newest first (open ones settled).
func (k *KairLifecycle) Captures(job string, nowNS int64) ([]*store.Capture, error) {
	if _, err := k.src.Job(job); err != nil {
		return nil, err
	}
	// Read outside k.mu (a list is up to KeepCaptures records); what is
	// settled below is re-read under it.
	cs, err := k.src.Captures(job)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*store.Capture, 0, len(cs))
	for _, c := range cs {
		if cur := k.open[job]; cur != nil && cur.ID == c.ID {
			c = cur
		} else if settledState(c, nowNS) != c.State {
			// c was read before k.mu was taken: an upload or a sweep may
			// have stored a newer record since. Settling (and storing) the
			// stale copy would write back over a late upload, so settle
			// the record as stored now.
			fresh, err := k.src.Capture(job, c.ID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				continue // deleted or evicted meanwhile
			case err != nil:
				k.log.Warn("KAIR: re-reading a capture to settle it", "job", signal.Clip(job), "capture", c.ID, "err", err)
				out = append(out, settledCopy(c, nowNS)) // readable, never written
				continue
			}
			c = fresh
		}
		out = append(out, k.settleRead(c, nowNS))
		k.dropClosedLocked(c)
	}
	return out, nil
}

// settledCopy is a copy of c in its settled state at nowNS.
func settledCopy(c *store.Capture, nowNS int64) *store.Capture {
	d := cloneCapture(c)
	d.State = settledState(c, nowNS)
	return d
}

// settleRead settles c (k.mu held, c as stored or the open cache's) for a
// reader and returns a copy. When storing the change fails (a full disk)
// the settled copy is still returned and the failure logged: reads stay
// readable, and the next read or sweep retries the write.
func (k *KairLifecycle) settleRead(c *store.Capture, nowNS int64) *store.Capture {
	if err := k.settleLocked(c, nowNS); err != nil {
		k.log.Warn("KAIR: storing a settled capture failed; serving it unsaved", "job", signal.Clip(c.Job), "capture", c.ID, "state", settledState(c, nowNS), "err", err)
		return settledCopy(c, nowNS)
	}
	return cloneCapture(c)
}

// dropClosedLocked forgets c as the job's open capture once it closed.
// k.mu is held.
func (k *KairLifecycle) dropClosedLocked(c *store.Capture) {
	if cur := k.open[c.Job]; cur != nil && cur.ID == c.ID && !analysis.CaptureOpen(cur) {
		k.open[c.Job] = nil
	}
}

// Capture returns one capture (settled).
func (k *KairLifecycle) Capture(job, id string, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.loadLocked(job, id)
	if err != nil {
		return nil, err
	}
	out := k.settleRead(c, nowNS)
	k.dropClosedLocked(c)
	return out, nil
}

// loadLocked returns capture id as it is now: the open cache's record or
// the stored one. k.mu is held (every capture write is made under it).
func (k *KairLifecycle) loadLocked(job, id string) (*store.Capture, error) {
	if cur := k.open[job]; cur != nil && cur.ID == id {
		return cur, nil
	}
	c, err := k.src.Capture(job, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("job %q has no capture %q: %w", signal.Clip(job), signal.Clip(id), store.ErrNotFound)
		}
		return nil, err
	}
	return c, nil
}

// captureLocked is capture id settled, for writers: a failed settle
// write is an error. k.mu is held.
func (k *KairLifecycle) captureLocked(job, id string, nowNS int64) (*store.Capture, error) {
	c, err := k.loadLocked(job, id)
	if err != nil {
		return nil, err
	}
	if err := k.settleLocked(c, nowNS); err != nil {
		return nil, err
	}
	k.dropClosedLocked(c)
	return c, nil
}

// Cancel cancels an open capture (a closed one is left as it is and
// returned unchanged: cancelling twice is not an error).
func (k *KairLifecycle) Cancel(job, id string, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.captureLocked(job, id, nowNS)
	if err != nil {
		return nil, err
	}
	if !analysis.CaptureOpen(c) {
		return cloneCapture(c), nil
	}
	prev := c.State
	c.State = store.CaptureCancelled
	if err := k.src.PutCapture(c); err != nil {
		c.State = prev
		return nil, err
	}
	if cur := k.open[job]; cur != nil && cur.ID == id {
		k.open[job] = nil
	}
	k.notify(c)
	return cloneCapture(c), nil
}

// Pending is a rank's poll: the open capture it should record (nil when
// none, or when it already answered), marking it fetched.
//
// step is the step the rank last began (-1: not said, an older client):
// it keeps the job's progress and step rate for the plans' start steps. A
// plan created without a known step time (its start step has no time
// margin, or is 0, "the client's next step") is not handed out until the
// polls give a rate, up to provisionalWaitNS; its start step is set on
// that first fetch, before any rank holds it, so the ranks do not each
// start wherever their poll found them.
//
// inc is the incarnation the polling process belongs to (-1: not said,
// an older client): only a capture of its own launch is handed to it, and
// a poll from a newer launch closes an older launch's open capture — its
// processes are gone (docs/design/roles-and-runs.md).
func (k *KairLifecycle) Pending(job string, rank int, step int64, inc int, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if inc >= 0 {
		switch cur, ok := k.progressInc[job]; {
		case !ok || inc > cur:
			k.progressInc[job] = inc
			if ok {
				delete(k.progress, job) // a restart: its steps start over
			}
		case inc < cur:
			step = -1 // a straggler of an earlier launch says nothing of the newest's progress
		}
	}
	k.noteStepLocked(job, rank, step, nowNS)
	k.lastPoll[job] = nowNS
	c, err := k.openLocked(job, nowNS)
	if err != nil || c == nil {
		return nil, err
	}
	if inc > c.Incarnation {
		return nil, k.closeForRestartLocked(c, inc, nowNS)
	}
	if inc >= 0 && inc < c.Incarnation {
		return nil, nil
	}
	if !slices.Contains(c.Ranks, rank) || slices.Contains(c.Uploaded, rank) || c.Failed[strconv.Itoa(rank)] != "" {
		return nil, nil
	}
	pkey := job + "\x00" + c.ID
	created, provisional := k.provisional[pkey]
	stepNS := int64(0)
	if provisional {
		// Its start was set without a step time: wait for the polls to
		// give one (no rank holds the plan yet, so it may still move). A
		// client that reports no step (older) would never give one.
		if stepNS = k.polledStepNSLocked(job, nowNS); stepNS <= 0 && step >= 0 && nowNS-created < provisionalWaitNS && len(c.Fetched) == 0 {
			return nil, nil
		}
	}
	if !slices.Contains(c.Fetched, rank) {
		next := cloneCapture(c)
		next.Fetched = append(next.Fetched, rank)
		slices.Sort(next.Fetched)
		next.State = store.CaptureRecording
		if provisional && len(c.Fetched) == 0 {
			if newest, ok := k.newestStepLocked(job, nowNS, stepNS); ok {
				next.StartStep = min(max(newest+k.leadSteps(stepNS), next.StartStep), optrace.MaxStep)
			}
		}
		if err := k.src.PutCapture(next); err != nil {
			return nil, err
		}
		entered := c.State != store.CaptureRecording
		k.open[job] = next
		delete(k.provisional, pkey)
		c = next
		if entered {
			k.notify(c)
		}
	}
	return cloneCapture(c), nil
}

// closeForRestartLocked ends capture c of an earlier launch once a
// process of launch inc polls: the ranks it asked are gone, so it stops
// waiting for them (its deadline has passed; uploads already on their way
// are still taken) and says why. k.mu is held.
func (k *KairLifecycle) closeForRestartLocked(c *store.Capture, inc int, nowNS int64) error {
	next := cloneCapture(c)
	next.DeadlineNS = min(next.DeadlineNS, nowNS-1) // passed: settledState closes it
	next.Note = fmt.Sprintf("the job restarted (incarnation %d) while this capture of incarnation %d was open", inc, c.Incarnation)
	next.State = settledState(next, nowNS)
	if err := k.src.PutCapture(next); err != nil {
		return err
	}
	k.open[c.Job] = nil
	delete(k.provisional, c.Job+"\x00"+c.ID)
	k.notify(next)
	return nil
}

// CheckUpload is what an upload must pass before its body is read: the
// capture exists, is not cancelled, asked rank, and belongs to the
// uploading process's incarnation (inc; -1 when the client did not say).
func (k *KairLifecycle) CheckUpload(job, id string, rank, inc int, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.checkUploadLocked(job, id, rank, nowNS)
	if err == nil && inc >= 0 && inc != c.Incarnation {
		return nil, &signal.ConflictError{Field: "incarnation", Msg: fmt.Sprintf("capture %s asked incarnation %d of job %q; this process belongs to incarnation %d", id, c.Incarnation, signal.Clip(job), inc)}
	}
	return c, err
}

func (k *KairLifecycle) checkUploadLocked(job, id string, rank int, nowNS int64) (*store.Capture, error) {
	c, err := k.captureLocked(job, id, nowNS)
	if err != nil {
		return nil, err
	}
	if c.State == store.CaptureCancelled {
		return nil, fmt.Errorf("job %q: capture %s was cancelled: %w", signal.Clip(job), id, ErrCaptureClosed)
	}
	if !slices.Contains(c.Ranks, rank) {
		return nil, signal.FieldErrorf("rank", "capture %s did not ask rank %d to record (it asked %v)", id, rank, c.Ranks)
	}
	return c, nil
}

// PutTrace stores rank's trace of capture id (t.Rank is the rank) with
// its clock samples; a rank's second upload replaces the first. Late
// uploads (past the deadline) are kept: a slow upload still adds
// evidence.
func (k *KairLifecycle) PutTrace(job, id string, t *optrace.Trace, hb []store.OpHeartbeat, nowNS int64) (*store.Capture, error) {
	c, err := k.CheckUpload(job, id, t.Rank, -1, nowNS)
	if err != nil {
		return nil, err
	}
	// A report holds every rank's trace in memory at once: bound their
	// sum, not only each rank's. Concurrent uploads may overshoot by the
	// traces being decoded (api's upload slots).
	others := slices.DeleteFunc(slices.Clone(c.Uploaded), func(r int) bool { return r == t.Rank })
	counts, err := k.src.OpTraceEvents(job, id, others)
	if err != nil {
		return nil, err
	}
	total := int64(len(t.Events))
	for _, n := range counts {
		total += n
	}
	if total > k.cfg.MaxCaptureEvents {
		return nil, fmt.Errorf("%w: %w", store.ErrTraceTooLarge, signal.FieldErrorf("events",
			"rank %d's %d events bring capture %s to %d events, over the %d one report may load; capture fewer steps or ranks",
			t.Rank, len(t.Events), id, total, k.cfg.MaxCaptureEvents))
	}
	// Stored outside the lock: a large trace takes a while, and every
	// rank's poll needs the lock. A capture cancelled meanwhile keeps the
	// trace stored but does not list it.
	if err := k.src.PutOpTrace(job, id, t, hb); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// A re-upload replaces a rank's trace without changing the upload
	// set: the generation in the report key makes cached reports stale.
	k.gen[job]++
	c, err = k.checkUploadLocked(job, id, t.Rank, nowNS)
	if err != nil {
		return nil, err
	}
	next := cloneCapture(c)
	if !slices.Contains(next.Fetched, t.Rank) {
		next.Fetched = append(next.Fetched, t.Rank)
		slices.Sort(next.Fetched)
	}
	if !slices.Contains(next.Uploaded, t.Rank) {
		next.Uploaded = append(next.Uploaded, t.Rank)
		slices.Sort(next.Uploaded)
	}
	delete(next.Failed, strconv.Itoa(t.Rank))
	if len(next.Failed) == 0 {
		next.Failed = nil
	}
	return k.updateLocked(c, next, nowNS)
}

// FailRank records that rank could not record capture id (the client's
// error text).
func (k *KairLifecycle) FailRank(job, id string, rank int, msg string, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.checkUploadLocked(job, id, rank, nowNS)
	if err != nil {
		return nil, err
	}
	if slices.Contains(c.Uploaded, rank) {
		return cloneCapture(c), nil // a trace is stored: the error is stale
	}
	msg = strings.TrimSpace(msg)
	if msg == "" {
		msg = "the client reported an error"
	}
	msg = clipText(msg, k.cfg.MaxReasonLen)
	next := cloneCapture(c)
	if !slices.Contains(next.Fetched, rank) {
		next.Fetched = append(next.Fetched, rank)
		slices.Sort(next.Fetched)
	}
	if next.Failed == nil {
		next.Failed = map[string]string{}
	}
	next.Failed[strconv.Itoa(rank)] = msg
	return k.updateLocked(c, next, nowNS)
}

// updateLocked stores next in place of c (settling it first) and keeps
// the open cache in step. k.mu is held.
func (k *KairLifecycle) updateLocked(c, next *store.Capture, nowNS int64) (*store.Capture, error) {
	prev := c.State
	// A rank that answers had the plan, polled or not.
	if next.State == store.CapturePending {
		next.State = store.CaptureRecording
	}
	next.State = settledState(next, nowNS)
	if err := k.src.PutCapture(next); err != nil {
		return nil, err
	}
	if cur := k.open[c.Job]; cur != nil && cur.ID == c.ID {
		k.open[c.Job] = next
		if !analysis.CaptureOpen(next) {
			k.open[c.Job] = nil
		}
	}
	if next.State != prev {
		k.notify(next)
	}
	return cloneCapture(next), nil
}

// Settle closes job's open capture if its deadline passed (the detect
// loop calls it, so captures expire without traffic).
func (k *KairLifecycle) Settle(job string, nowNS int64) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, err := k.openLocked(job, nowNS)
	return err
}

// Open returns job's open capture, nil when none.
func (k *KairLifecycle) Open(job string, nowNS int64) (*store.Capture, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.openLocked(job, nowNS)
	return cloneCapture(c), err
}

// Report runs KAIR (kair.Run: clock alignment, Stage 1 rhythm, Stages
// 2–3) over capture id's traces, or over the newest capture with an
// upload when id is "". It needs traces of two ranks (analysis.ErrTooFewTraces).
// Reports of an unchanged upload set are cached.
func (k *KairLifecycle) Report(ctx context.Context, job, id string, nowNS int64) (*analysis.KairAnswer, error) {
	c, err := k.pickCapture(job, id, nowNS)
	if err != nil {
		return nil, err
	}
	rep, err := k.report(ctx, c)
	if err != nil {
		return nil, err
	}
	return &analysis.KairAnswer{Capture: c, Report: rep}, nil
}

func (k *KairLifecycle) pickCapture(job, id string, nowNS int64) (*store.Capture, error) {
	if id != "" {
		c, err := k.Capture(job, id, nowNS)
		if err != nil {
			return nil, err
		}
		if len(c.Uploaded) < 2 {
			return nil, fmt.Errorf("job %q, capture %s (%s): %d of %d ranks uploaded a trace; KAIR compares ranks and needs two: %w",
				signal.Clip(job), c.ID, c.State, len(c.Uploaded), len(c.Ranks), analysis.ErrTooFewTraces)
		}
		return c, nil
	}
	cs, err := k.Captures(job, nowNS)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if len(c.Uploaded) == 0 {
			continue
		}
		if len(c.Uploaded) < 2 {
			return nil, fmt.Errorf("job %q: the newest capture with traces, %s (%s), has %d of %d ranks uploaded; KAIR compares ranks and needs two: %w",
				signal.Clip(job), c.ID, c.State, len(c.Uploaded), len(c.Ranks), analysis.ErrTooFewTraces)
		}
		return c, nil
	}
	return nil, fmt.Errorf("job %q has no capture with an uploaded trace (POST …/captures to record one): %w", signal.Clip(job), store.ErrNotFound)
}

// reportKey names a report's inputs. k.mu is held.
func (k *KairLifecycle) reportKey(c *store.Capture) string {
	return fmt.Sprintf("%s\x00%s\x00%v\x00%d", c.Job, c.ID, c.Uploaded, k.gen[c.Job])
}

// report returns c's report: cached, being computed by another request
// (waited for), or computed here.
func (k *KairLifecycle) report(ctx context.Context, c *store.Capture) (*analysis.KairReport, error) {
	for {
		k.mu.Lock()
		key := k.reportKey(c)
		for _, e := range k.cache {
			if e.key == key {
				k.mu.Unlock()
				return e.rep, nil
			}
		}
		if f := k.running[key]; f != nil {
			k.mu.Unlock()
			select {
			case <-f.done:
				// The computing request's client went away: its context
				// error is not this request's answer, so compute here.
				if isCtxErr(f.err) && ctx.Err() == nil {
					continue
				}
				return f.rep, f.err
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		f := &kairFlight{done: make(chan struct{})}
		k.running[key] = f
		k.mu.Unlock()
		f.rep, f.err = k.compute(ctx, c)
		k.mu.Lock()
		delete(k.running, key)
		if f.err == nil {
			k.cache = append(k.cache, cachedKair{key: key, rep: f.rep})
			if len(k.cache) > k.cfg.CachedReports {
				k.cache = slices.Delete(k.cache, 0, len(k.cache)-k.cfg.CachedReports)
			}
		}
		k.mu.Unlock()
		close(f.done)
		return f.rep, f.err
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// compute loads c's traces and runs the pipeline (analysis.RunKairCapture).
// A panic in the engine is a bug; it becomes ErrInternal rather than
// taking the server down.
func (k *KairLifecycle) compute(ctx context.Context, c *store.Capture) (rep *analysis.KairReport, err error) {
	defer func() {
		if p := recover(); p != nil {
			k.log.Error("KAIR analysis panicked", "job", signal.Clip(c.Job), "capture", c.ID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			rep, err = nil, fmt.Errorf("job %q, capture %s: %w: %v", signal.Clip(c.Job), c.ID, analysis.ErrInternal, p)
		}
	}()
	return analysis.RunKairCapture(ctx, k.src, c, *k.cfg.Run)
}

// Timeline returns step's events of capture id (or the newest capture
// with uploads); step < 0 picks the report's first analysed step. Built
// timelines are cached with the report's key (bounded by
// KairLifecycleConfig.CachedTimelineEvents): one load of the traces builds the
// asked step and every analysed step, so the lanes view does not reload
// every rank's trace per click.
func (k *KairLifecycle) Timeline(ctx context.Context, job, id string, step int64, nowNS int64) (*analysis.KairTimeline, error) {
	c, err := k.pickCapture(job, id, nowNS)
	if err != nil {
		return nil, err
	}
	rep, err := k.report(ctx, c)
	if err != nil {
		return nil, err
	}
	if step < 0 {
		switch {
		case len(rep.Analysed) > 0:
			step = rep.Analysed[0]
		case len(rep.Steps) > 0:
			step = rep.Steps[0].Step
		default:
			return nil, fmt.Errorf("job %q, capture %s: no step every rank recorded: %w", signal.Clip(job), c.ID, store.ErrNotFound)
		}
	}
	k.mu.Lock()
	key := k.reportKey(c)
	for _, e := range k.timelines {
		if e.key == key && e.step == step {
			k.mu.Unlock()
			return e.tl, nil
		}
	}
	k.mu.Unlock()
	traces, _, err := k.src.OpTraces(c.Job, c.ID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	steps := []int64{step}
	for _, s := range rep.Analysed {
		if !slices.Contains(steps, s) {
			steps = append(steps, s)
		}
	}
	tls := analysis.KairTimelines(traces, c.Uploaded, rep, steps)
	k.mu.Lock()
	for _, s := range slices.Backward(steps) { // the asked step last: newest in the cache
		if tl := tls[s]; tl != nil {
			k.cacheTimelineLocked(key, s, tl)
		}
	}
	k.mu.Unlock()
	tl := tls[step]
	if tl == nil {
		return nil, signal.FieldErrorf("step", "no rank recorded step %d in this capture", step)
	}
	return tl, nil
}

// cacheTimelineLocked adds a built timeline, dropping the oldest while the
// cached events are over the bound. k.mu is held.
func (k *KairLifecycle) cacheTimelineLocked(key string, step int64, tl *analysis.KairTimeline) {
	n := tl.Events()
	if n > k.cfg.CachedTimelineEvents {
		return
	}
	k.timelines = slices.DeleteFunc(k.timelines, func(e cachedTimeline) bool {
		if e.key == key && e.step == step {
			k.timelineEvents -= e.events
			return true
		}
		return false
	})
	k.timelines = append(k.timelines, cachedTimeline{key: key, step: step, tl: tl, events: n})
	k.timelineEvents += n
	for k.timelineEvents > k.cfg.CachedTimelineEvents {
		k.timelineEvents -= k.timelines[0].events
		k.timelines = slices.Delete(k.timelines, 0, 1)
	}
}

// leadSteps is how far ahead of the newest reported step a plan starts:
// LeadNS of steps at stepNS (LeadSteps when unknown, at least that): the
// newest step a server knows is up to a shipping batch or a poll period
// old, and every rank must poll once (every ~2 s) before the start.
func (k *KairLifecycle) leadSteps(stepNS int64) int64 {
	lead := k.cfg.LeadSteps
	if stepNS > 0 {
		lead = max(lead, min((k.cfg.LeadNS+stepNS-1)/stepNS, 100_000))
	}
	return lead
}

// noteStepLocked records rank's poll-reported step (k.mu held). Bounded:
// one entry per rank that polls a job the store knows.
func (k *KairLifecycle) noteStepLocked(job string, rank int, step, nowNS int64) {
	if step < 0 || step > optrace.MaxStep {
		return
	}
	m := k.progress[job]
	if m == nil {
		m = map[int]*rankProgress{}
		k.progress[job] = m
	}
	p := m[rank]
	switch {
	case p == nil || step < p.step || nowNS-p.atNS > progressStaleNS:
		// First report, a restart (the step went back) or a long silence:
		// start over.
		m[rank] = &rankProgress{step: step, atNS: nowNS, step0: step, at0NS: nowNS}
	default:
		if nowNS-p.atNS >= progressGapNS && step > p.step {
			p.step0, p.at0NS = p.step, p.atNS
		}
		p.step, p.atNS = step, nowNS
	}
}

// polledStepNSLocked is the job's step time from its ranks' poll reports:
// the median over fresh ranks of their rate between two reports (0 when
// none has two). k.mu held.
func (k *KairLifecycle) polledStepNSLocked(job string, nowNS int64) int64 {
	var rates []int64
	for _, p := range k.progress[job] {
		if nowNS-p.atNS <= progressStaleNS && p.step > p.step0 && p.atNS-p.at0NS >= progressGapNS {
			rates = append(rates, (p.atNS-p.at0NS)/(p.step-p.step0))
		}
	}
	if len(rates) == 0 {
		return 0
	}
	slices.Sort(rates)
	return max(rates[len(rates)/2], 1)
}

// newestStepLocked is the newest step any fresh rank has reached by
// nowNS: its last report, plus the steps since at stepNS (0: none). k.mu
// held.
func (k *KairLifecycle) newestStepLocked(job string, nowNS, stepNS int64) (int64, bool) {
	newest, ok := int64(-1), false
	for _, p := range k.progress[job] {
		if nowNS-p.atNS > progressStaleNS {
			continue
		}
		s := p.step
		if stepNS > 0 && nowNS > p.atNS {
			s += (nowNS - p.atNS) / stepNS
		}
		newest, ok = max(newest, min(s, optrace.MaxStep)), true
	}
	return newest, ok
}
