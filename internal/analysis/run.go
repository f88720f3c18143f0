package analysis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/stats"
	"github.com/laggard-dev/laggard/internal/store"
)

// Limits bound what one Run reads and holds. Zero fields take defaults.
type Limits struct {
	// MaxCells caps one window's steps × ranks × effective stages (default
	// 1e8, ~800 MB of float64); larger explicit windows are refused with
	// *TooLargeError, default windows shrink to fit.
	MaxCells int64
	// ReportSteps is the longest default window, in stored steps (200).
	ReportSteps int
	// HistorySteps and HistoryCells bound the time axis (2,000 steps,
	// 5e7 cells); ChunkCells is how much of it is assembled at once (4e6).
	HistorySteps int
	HistoryCells int64
	ChunkCells   int64
	// PrefetchLookback: steps before a window also scanned so a prefetched
	// data wait recorded there is charged inside it (App. A). Default 8.
	PrefetchLookback int
	// MaxWarmup caps the warm-up skipped at the start of the history (50).
	MaxWarmup int
	// MinReferenceSteps: an automatic reference window needs this many
	// steps (5, the change-point detector's shortest segment).
	MinReferenceSteps int
}

func (l *Limits) setDefaults() {
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	defi := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&l.MaxCells, 100_000_000)
	defi(&l.ReportSteps, 200)
	defi(&l.HistorySteps, 2000)
	def(&l.HistoryCells, 50_000_000)
	def(&l.ChunkCells, 4_000_000)
	defi(&l.PrefetchLookback, 8)
	defi(&l.MaxWarmup, 50)
	defi(&l.MinReferenceSteps, 5)
}

// TooLargeError is a window that stores more than Limits.MaxCells cells
// (stored steps × ranks that sent data × effective stages): what a window
// costs is what it holds, never its span of step numbers or the declared
// world size (issue 6 D1, D2b, D12).
type TooLargeError struct{ Steps, Cells, Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the window stores at least %d steps × %d cells per step (%d cells), over the limit of %d cells; ask for fewer steps (last=N or from/to)",
		e.Steps, e.Cells/max(e.Steps, 1), e.Cells, e.Limit)
}

// ErrNoData: the job has no vectors in the requested window.
var ErrNoData = errors.New("no stage vectors in the requested window")

// Analyzer runs job reports over a Source. It is safe for concurrent use.
type Analyzer struct {
	src      Source
	lim      Limits
	detector stats.Detector
	cache    *histCache
	log      *slog.Logger
	panics   *atomic.Int64
	inc      int // the incarnation src shows (over); part of the time-axis cache key
}

// New returns an Analyzer over src.
func New(src Source, lim Limits) *Analyzer {
	lim.setDefaults()
	return &Analyzer{src: src, lim: lim, detector: stats.DefaultSegmenter(stagefrontier.DefaultConfig().LeaderGapMS), cache: &histCache{}, log: slog.Default(), panics: new(atomic.Int64)}
}

// SetLogger sets where a recovered panic is logged (default slog.Default).
func (a *Analyzer) SetLogger(l *slog.Logger) {
	if l != nil {
		a.log = l
	}
}

// Limits returns the effective limits.
func (a *Analyzer) Limits() Limits { return a.lim }

// Panics counts panics Run recovered from.
func (a *Analyzer) Panics() int64 { return a.panics.Load() }

// Collector exports Panics as laggard_analysis_panics_total.
func (a *Analyzer) Collector() prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "laggard", Subsystem: "analysis", Name: "panics_total",
		Help: "Report computations that panicked and were answered with an error (a bug: the log has the stack)."},
		func() float64 { return float64(a.panics.Load()) })
}

// ErrInternal wraps a panic recovered inside analysis.
var ErrInternal = errors.New("internal error in analysis")

// Run computes the report req asks for. A panic while analyzing stored
// data is a bug, but it must not take the server down: it becomes an
// ErrInternal error, logged with its stack and counted (Collector).
func (a *Analyzer) Run(ctx context.Context, req Request) (rep *Report, err error) {
	defer func() {
		if p := recover(); p != nil {
			a.panics.Add(1)
			a.log.Error("analysis panicked", "job", signal.Clip(req.Job), "request", req.Values().Encode(), "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			rep, err = nil, fmt.Errorf("job %q: %w: %v", signal.Clip(req.Job), ErrInternal, p)
		}
	}()
	job, err := a.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	src, info, err := View(a.src, job, req.inc())
	if err != nil {
		return nil, err
	}
	inc := req.inc()
	if inc == IncNewest {
		inc = job.Current()
	}
	rep, err = a.over(src, inc).run(ctx, req)
	if rep != nil && info != nil {
		rep.Incarnations = info
		rep.Notes = append([]string{info.Note}, rep.Notes...)
		if tl := rep.Timeline; tl != nil && info.Analysed == IncAll {
			for _, sp := range info.List[1:] {
				if sp.At != nil && *sp.At > tl.From && *sp.At <= tl.To {
					tl.Restarts = append(tl.Restarts, Restart{At: *sp.At, Incarnation: sp.N, Reason: sp.Reason, Step: sp.FirstStep})
				}
			}
		}
	}
	return rep, err
}

// over is a with src, incarnation inc's view (or IncAll), as its Source;
// it shares the time-axis cache and the panic count.
func (a *Analyzer) over(src Source, inc int) *Analyzer {
	b := *a
	b.src, b.inc = src, inc
	return &b
}

func (a *Analyzer) run(ctx context.Context, req Request) (*Report, error) {
	r, err := a.resolve(ctx, req)
	if err != nil {
		return nil, err
	}
	job, gs, h, cfg := r.job, r.groups, r.hist, r.cfg
	rep := &Report{SchemaVersion: ReportSchema, JobID: job.ID, JobName: job.Name, RoleAwareNeeded: len(gs) > 1}
	if h != nil {
		rep.Timeline = h.timeline(gs[0].key)
		if h.truncated {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the time axis covers the last %d stored steps (%d–%d); older steps exist", len(h.steps), h.from, h.to))
		}
	}
	win := r.win
	rep.Window = win
	ref, refBasis, refJob, note := a.resolveReference(ctx, job, gs, h, win, req)
	if note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	for _, c := range rep.timelineChanges() {
		if c.Step > addSat(win.From, changeSlack) && c.Step <= win.To && win.Basis != BasisSinceChange {
			rep.Notes = append(rep.Notes, fmt.Sprintf("the window contains a change point at step %d (%s, %.1f → %.1f ms/step): it mixes two regimes", c.Step, c.Kind, c.BeforeMS, c.AfterMS))
		}
	}
	var bad skipped
	for _, g := range gs {
		gr, err := a.runGroup(ctx, job, g, win, ref, refBasis, refJob, cfg, &bad)
		if err != nil {
			return nil, err
		}
		if gr != nil {
			rep.Groups = append(rep.Groups, *gr)
		}
	}
	if n := bad.note(); n != "" {
		rep.Notes = append(rep.Notes, n)
	}
	rep.Notes = append(rep.Notes, bad.silent...)
	if len(rep.Groups) == 0 {
		return nil, fmt.Errorf("job %q steps %d–%s: %w", job.ID, win.From, stepText(win.To), ErrNoData)
	}
	rep.Headline = jobHeadline(rep)
	return rep, nil
}

// resolved is a request turned into what Run reads: the job, its role
// groups, the time axis and the window.
type resolved struct {
	job    *signal.Job
	cfg    stagefrontier.Config
	groups []group
	hist   *history
	win    Window
}

// resolve reads the job and its time axis and resolves the window, without
// analyzing it (Run does; a run-B comparison needs only the window).
func (a *Analyzer) resolve(ctx context.Context, req Request) (*resolved, error) {
	job, err := a.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	cfg, err := req.config(job)
	if err != nil {
		return nil, err
	}
	gs := groupsOf(job)
	if req.Group != "" {
		i := slices.IndexFunc(gs, func(g group) bool { return g.key == req.Group })
		if i < 0 {
			return nil, signal.FieldErrorf(ParamGroup, "job %q has no role group %q (groups: %s)", job.ID, signal.Clip(req.Group), groupKeys(gs))
		}
		gs = []group{gs[i]}
	}
	st, err := a.src.Stats(job.ID)
	if err != nil {
		return nil, err
	}
	if st.Vectors == 0 {
		return nil, fmt.Errorf("job %q: %w", job.ID, ErrNoData)
	}
	h, err := a.history(ctx, job, gs, st)
	if err != nil {
		return nil, err
	}
	win, err := a.resolveWindow(job, gs, st, h, req)
	if err != nil {
		return nil, err
	}
	return &resolved{job: job, cfg: cfg, groups: gs, hist: h, win: win}, nil
}

func (r *Report) timelineChanges() []ChangePoint {
	if r.Timeline == nil {
		return nil
	}
	return r.Timeline.ChangePoints
}

func groupKeys(gs []group) string {
	keys := make([]string, len(gs))
	for i, g := range gs {
		keys[i] = g.key
	}
	return strings.Join(keys, ", ")
}

// history returns the cached time axis when nothing was stored since.
func (a *Analyzer) history(ctx context.Context, job *signal.Job, gs []group, st store.JobStats) (*history, error) {
	sizes := make([]string, len(gs))
	for i, g := range gs {
		sizes[i] = fmt.Sprintf("%s=%d", g.key, g.ranks)
	}
	key := histKey{job: job.ID, inc: a.inc, last: st.LastStep, vectors: st.Vectors, groups: strings.Join(sizes, ","), ranks: len(job.Ranks), schemas: len(job.Groups)}
	if h := a.cache.get(key); h != nil {
		return h, nil
	}
	h, err := a.readHistory(ctx, job, gs, st)
	if err != nil || h == nil {
		return h, err
	}
	a.cache.put(key, h)
	return h, nil
}

// resolveWindow turns the request into a step range: explicit bounds or
// last=N as asked, else the default — the steps since the latest change
// point (after warm-up), at most ReportSteps of them.
func (a *Analyzer) resolveWindow(job *signal.Job, gs []group, st store.JobStats, h *history, req Request) (Window, error) {
	// Explicit and last=N windows are not checked here: their cost is what
	// they store, which assembling them counts (Limits.MaxCells), not the
	// arithmetic span of their step numbers (D1, D12).
	per := cellsPerStep(gs)
	switch {
	case req.From != nil || req.To != nil:
		w := Window{From: st.FirstStep, To: st.LastStep, Basis: BasisExplicit}
		if req.From != nil {
			w.From = *req.From
		}
		if req.To != nil {
			w.To = *req.To
		}
		// Clamp to what is stored: the window never spans steps that
		// cannot have data.
		w.From, w.To = max(w.From, st.FirstStep), min(w.To, st.LastStep)
		if w.From > w.To {
			return w, fmt.Errorf("job %q stores steps %d–%d: %w", job.ID, st.FirstStep, st.LastStep, ErrNoData)
		}
		w.Reason = fmt.Sprintf("steps %d–%d as requested", w.From, w.To)
		return w, nil
	case req.Last > 0:
		from, to, ok, err := a.src.LastSteps(job.ID, req.Last)
		if err != nil {
			return Window{}, err
		}
		if !ok {
			return Window{}, fmt.Errorf("job %q: %w", job.ID, ErrNoData)
		}
		return Window{From: from, To: to, Basis: BasisLast, Reason: fmt.Sprintf("the last %d stored steps", req.Last)}, nil
	}
	if h == nil || len(h.steps) == 0 {
		return Window{}, fmt.Errorf("job %q: %w", job.ID, ErrNoData)
	}
	start, basis := h.warmup, BasisSteady
	reason := "the steady steps of the recent history"
	if h.warmup > 0 {
		reason = fmt.Sprintf("the steady steps after warm-up (steps %d–%d skipped)", h.steps[0], h.steps[h.warmup-1])
	}
	if n := len(h.cps); n > 0 {
		c := h.cps[n-1]
		start, basis = c.Index, BasisSinceChange
		kind := "onset"
		if !c.Rise() {
			kind = "relief"
		}
		reason = fmt.Sprintf("the steps since the latest change point (%s at step %d: %.1f → %.1f ms/step)", kind, h.steps[c.Index], c.Before, c.After)
	}
	limit := int(min(int64(a.lim.ReportSteps), max(a.lim.MaxCells/per, 1)))
	if len(h.steps)-start > limit {
		start = len(h.steps) - limit
		reason += fmt.Sprintf(", the last %d of them", limit)
	}
	return Window{From: h.steps[start], To: h.steps[len(h.steps)-1], Basis: basis, Reason: reason}, nil
}

// refWindow is a resolved reference window.
type refWindow struct{ from, to int64 }

// resolveReference picks the window the report is compared with: the one
// asked for, another run's default window, or the steady steps before the
// latest change point at or before the window's start. It never fails the
// report: when no reference fits, the note says why.
func (a *Analyzer) resolveReference(ctx context.Context, job *signal.Job, gs []group, h *history, win Window, req Request) (*refWindow, string, *signal.Job, string) {
	switch {
	case req.RefFrom != nil || req.RefTo != nil:
		r := &refWindow{from: 0, to: win.From - 1}
		if req.RefFrom != nil {
			r.from = *req.RefFrom
		}
		if req.RefTo != nil {
			r.to = *req.RefTo
		}
		return r, fmt.Sprintf("requested reference steps %d–%d", r.from, r.to), job, ""
	case req.CompareJob != "":
		other, err := a.src.Job(req.CompareJob)
		if err != nil {
			return nil, "", nil, fmt.Sprintf("no comparison: job %q: %v", req.CompareJob, err)
		}
		sub, err := a.resolve(ctx, Request{Job: other.ID})
		if err != nil {
			return nil, "", nil, fmt.Sprintf("no comparison: job %q: %v", req.CompareJob, err)
		}
		return &refWindow{sub.win.From, sub.win.To}, fmt.Sprintf("run %s, its %s", other.ID, sub.win.Reason), other, ""
	case req.NoReference:
		return nil, "", nil, ""
	}
	if h == nil {
		return nil, "", nil, ""
	}
	// The latest change point at or before the window's start (or just
	// after it: a detector places a change within a step or two of where
	// it happened).
	ci := -1
	for i, c := range h.cps {
		if h.steps[c.Index] <= addSat(win.From, changeSlack) {
			ci = i
		}
	}
	if ci < 0 {
		return nil, "", nil, "no change point precedes the window in the time axis, so there is no healthy reference: the stage ranking rests on absolute shares"
	}
	lo := h.warmup
	if ci > 0 {
		lo = h.cps[ci-1].Index
	}
	hi := h.cps[ci].Index // exclusive
	for hi > lo && h.steps[hi-1] >= win.From {
		hi-- // the reference ends before the window
	}
	lo = max(lo, hi-a.lim.ReportSteps)
	if hi-lo < a.lim.MinReferenceSteps {
		return nil, "", nil, fmt.Sprintf("only %d steady steps precede the change at step %d (need %d for a reference)", hi-lo, h.steps[h.cps[ci].Index], a.lim.MinReferenceSteps)
	}
	kind := "onset"
	if !h.cps[ci].Rise() {
		kind = "relief"
	}
	return &refWindow{h.steps[lo], h.steps[hi-1]}, fmt.Sprintf("before the %s at step %d", kind, h.steps[h.cps[ci].Index]), job, ""
}

// changeSlack is how many steps after a window's start a change point may
// sit and still count as where the window starts.
const changeSlack = 2

// runGroup analyzes one role group's window and, with a reference,
// compares and re-diagnoses it. nil when the group has no data there.
func (a *Analyzer) runGroup(ctx context.Context, job *signal.Job, g group, win Window, ref *refWindow, refBasis string, refJob *signal.Job, cfg stagefrontier.Config, bad *skipped) (*GroupReport, error) {
	w, err := a.window(ctx, job, g.key, win.From, win.To, bad)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, nil
	}
	rep, err := stagefrontier.Analyze(w, cfg)
	if err != nil {
		return nil, fmt.Errorf("role group %s: %w", g.key, err)
	}
	gr := &GroupReport{Group: g.key, NumRanks: g.ranks, Report: rep}
	if ref != nil && refJob != nil {
		key := g.key
		if refJob.ID != job.ID {
			if rgs := groupsOf(refJob); !slices.ContainsFunc(rgs, func(x group) bool { return x.key == key }) {
				key = rgs[0].key // run B's largest group
			}
		}
		if rw, err := a.window(ctx, refJob, key, ref.from, ref.to, &skipped{}); err == nil && rw != nil {
			// A reference that cannot be assembled (too large, no data) only
			// means no comparison; the report says so through its absence.
			if base, err := stagefrontier.Analyze(rw, cfg); err == nil {
				gr.Comparison = stagefrontier.Compare(rep, base, refBasis)
				gr.Comparison.Reference.Group = key
				stagefrontier.Diagnose(rep, gr.Comparison)
			}
		}
	}
	return gr, nil
}

// skipped counts stored vectors the job's registration or the value
// bounds no longer accept (written before a schema change, or by an older
// version that took 1e308 or step 2^62): they are left out and reported,
// never allowed to fail the report. silent notes the role groups whose
// window leaves out ranks that sent nothing.
type skipped struct {
	n      int
	first  string
	silent []string
}

func (s *skipped) add(v *stagevec.Vector, err error) {
	if s.n == 0 {
		s.first = fmt.Sprintf("step %d rank %d: %v", v.Step, v.Rank, err)
	}
	s.n++
}

func (s *skipped) note() string {
	if s.n == 0 {
		return ""
	}
	return fmt.Sprintf("%d stored vectors do not fit the job's registration or the value bounds and were left out (first: %s)", s.n, s.first)
}

// adder feeds v to the assemblers, skipping a vector they reject; a
// window over its cell limit stops the scan.
func (s *skipped) adder(asms ...*stagefrontier.Assembler) func(v *stagevec.Vector) error {
	return func(v *stagevec.Vector) error {
		for _, as := range asms {
			if err := as.Add(v); err != nil {
				var tl *stagefrontier.TooLargeError
				if errors.As(err, &tl) {
					return err
				}
				s.add(v, err)
				return nil
			}
		}
		return nil
	}
}

// tooLarge turns the assembler's limit error into the API's.
func tooLarge(err error) error {
	var tl *stagefrontier.TooLargeError
	if errors.As(err, &tl) {
		return &TooLargeError{Steps: int64(tl.Steps), Cells: tl.Cells(), Limit: tl.Limit}
	}
	return err
}

// window assembles one group's steps [from, to]; nil when it has none.
func (a *Analyzer) window(ctx context.Context, job *signal.Job, key string, from, to int64, bad *skipped) (*stagevec.Window, error) {
	if to < from {
		return nil, nil
	}
	asm := stagefrontier.NewAssembler(job, stagefrontier.AssembleOptions{FromStep: from, ToStep: to, Group: key, MaxCells: a.lim.MaxCells})
	if err := a.scan(ctx, job.ID, from, to, bad.adder(asm)); err != nil {
		return nil, tooLarge(err)
	}
	w, err := asm.Finish()
	if err != nil {
		var fe *signal.FieldError
		var tl *stagefrontier.TooLargeError
		if errors.As(err, &fe) || errors.As(err, &tl) {
			return nil, tooLarge(err)
		}
		return nil, nil // no vectors of this group in the window
	}
	if n := asm.LeftOut(); n > 0 {
		_, R, _ := w.Dims()
		bad.silent = append(bad.silent, fmt.Sprintf("role group %s: %d of its ranks sent nothing in the window; the per-rank listing carries %d ranks (%d of the silent ones) and leaves out the other %d (see the missing_ranks finding)",
			key, n+R-countSeen(w), R, R-countSeen(w), n))
	}
	return w, nil
}

// countSeen counts the window's ranks that reported at least one cell.
func countSeen(w *stagevec.Window) int {
	T, R, _ := w.Dims()
	if w.Present == nil {
		return R
	}
	n := 0
	for r := 0; r < R; r++ {
		for t := 0; t < T; t++ {
			if w.Present[t*R+r] {
				n++
				break
			}
		}
	}
	return n
}

// scan reads [from − lookback, to] so prefetched data waits recorded
// before the window are charged to the step inside it that consumed them
// (App. A); it checks ctx every few thousand vectors.
func (a *Analyzer) scan(ctx context.Context, job string, from, to int64, fn func(*stagevec.Vector) error) error {
	n := 0
	return a.src.Scan(job, max(0, addSat(from, -int64(a.lim.PrefetchLookback))), to, func(v *stagevec.Vector) error {
		if n++; n&4095 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return fn(v)
	})
}

// addSat is a+b clamped to the int64 range: window arithmetic on stored
// step numbers (which older versions took up to 2^63−1) must never wrap
// and let a window through or shift it (D12).
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}

// jobHeadline is the job's headline: the group's with one role group; with
// several, a summary that names no global stage or rank.
func jobHeadline(rep *Report) stagefrontier.Headline {
	if len(rep.Groups) == 1 && !rep.RoleAwareNeeded {
		return rep.Groups[0].Report.Headline
	}
	h := stagefrontier.Headline{Rank: -1, Basis: stagefrontier.BasisNone, Withheld: stagefrontier.WithheldRoleGroups}
	var parts []string
	for _, g := range rep.Groups {
		gh := g.Report.Headline
		s := fmt.Sprintf("%s (%d ranks): %s", g.Group, g.NumRanks, orDash(gh.Stage))
		if gh.Rank >= 0 {
			s += fmt.Sprintf(", straggler rank %d", gh.Rank)
		} else if gh.Withheld != "" {
			s += fmt.Sprintf(", no rank named (%s)", strings.ReplaceAll(string(gh.Withheld), "_", " "))
		}
		parts = append(parts, s)
	}
	h.WithheldWhy = "ranks with different roles are not compared with each other"
	h.Text = fmt.Sprintf("%d role groups are diagnosed separately; ranks with different roles are not compared (role_aware_needed). %s.", len(rep.Groups), strings.Join(parts, "; "))
	return h
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// histCache keeps recent time axes: a report recomputes it only when the
// job stored something since (its stats changed) or its ranks changed.
type histCache struct {
	mu sync.Mutex
	m  map[histKey]*history
	q  []histKey
}

type histKey struct {
	job           string
	inc           int // the incarnation read (IncAll: all of them)
	last, vectors int64
	groups        string
	ranks         int
	schemas       int
}

const histCacheEntries = 32

func (c *histCache) get(k histKey) *history {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *histCache) put(k histKey, h *history) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[histKey]*history{}
	}
	if _, ok := c.m[k]; ok {
		return
	}
	// Drop the job's stale entries first, then the oldest overall.
	for i := 0; i < len(c.q); i++ {
		if c.q[i].job == k.job {
			delete(c.m, c.q[i])
			c.q = slices.Delete(c.q, i, i+1)
			i--
		}
	}
	if len(c.q) >= histCacheEntries {
		delete(c.m, c.q[0])
		c.q = c.q[1:]
	}
	c.m[k] = h
	c.q = append(c.q, k)
}
