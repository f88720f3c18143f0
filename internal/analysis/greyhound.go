package analysis

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/stats"
	"github.com/laggard-dev/laggard/internal/store"
)

// GreyhoundSource is what the Greyhound adapter reads: the collective
// keyspace (contract §2), the stage vectors' step numbers and wall times
// (the plan's at_step, §7.2's truth), and the controller's own keyspace
// (docs/format/greyhound.md; internal/control writes it).
// *store.Store implements it.
type GreyhoundSource interface {
	Job(id string) (*signal.Job, error)
	Stats(job string) (store.JobStats, error)
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
	CollectiveStats(job string) (store.CollectiveStats, error)
	ScanCalls(job string, q store.CallQuery, fn func(c *collective.Call) error) error
	Comms(job string) ([]collective.Comm, error)
	GreyhoundState(job string) ([]byte, error)
	ValidationRecords(job string, since uint32) ([]store.ValidationRecord, error)
	ValidationPlan(job string, seq uint32) ([]byte, error)
	ValidationResults(job string, seq uint32) (map[int][]byte, error)
}

var _ GreyhoundSource = (*store.Store)(nil)

// GreyhoundLimits bound what one Greyhound report reads. Zero fields take
// defaults.
type GreyhoundLimits struct {
	// WindowNS is the default window: the latest calls over this span
	// (10 minutes), ending at the newest stored call.
	WindowNS int64
	// MaxCalls caps the calls one report holds (2,000,000, ~250 MB); a
	// default window shrinks to fit, an explicit one is cut and marked
	// telemetry-limited.
	MaxCalls int
	// MaxTruthSteps bounds the stage vectors read for §7.2's truth (4096).
	MaxTruthSteps int64
}

func (l *GreyhoundLimits) setDefaults() {
	if l.WindowNS <= 0 {
		l.WindowNS = 600e9
	}
	if l.MaxCalls <= 0 {
		l.MaxCalls = 2_000_000
	}
	if l.MaxTruthSteps <= 0 {
		l.MaxTruthSteps = 4096
	}
}

// ErrNoCalls: the job has no collective calls in the requested window.
var ErrNoCalls = fmt.Errorf("no collective calls in the requested window: %w", ErrNoData)

// Greyhound request parameters.
const (
	ParamFromNS = "from_ns"
	ParamToNS   = "to_ns"
	ParamLastS  = "last_s"
)

// GreyhoundRequest chooses a Greyhound report's window in ns since the
// Unix epoch (0: open) or the last LastNS before the newest call.
type GreyhoundRequest struct {
	Job          string
	FromNS, ToNS int64
	LastNS       int64
	// NowNS is the caller's clock (the report's generated_ns, plan
	// expiry); the adapter never reads a clock itself.
	NowNS int64
	// Incarnation chooses the launch of a restarted job whose calls are
	// read (nil: the newest; IncAll: every one): a default window ends
	// at the chosen launch's newest call, an explicit one is clamped to
	// the launch's span of time (docs/design/roles-and-runs.md).
	Incarnation *int
}

// ParseGreyhoundRequest reads from_ns, to_ns, last_s and incarnation.
func ParseGreyhoundRequest(job string, q url.Values, nowNS int64) (GreyhoundRequest, error) {
	r := GreyhoundRequest{Job: job, NowNS: nowNS}
	ns := func(name string) (int64, error) {
		v := q.Get(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > collective.MaxNS {
			return 0, signal.FieldErrorf(name, "must be a Unix-epoch nanosecond time in [0, %d], got %q", collective.MaxNS, signal.Clip(v))
		}
		return n, nil
	}
	var err error
	if r.FromNS, err = ns(ParamFromNS); err != nil {
		return r, err
	}
	if r.ToNS, err = ns(ParamToNS); err != nil {
		return r, err
	}
	if r.ToNS > 0 && r.ToNS < r.FromNS {
		return r, signal.FieldErrorf(ParamToNS, "%d is before from_ns=%d", r.ToNS, r.FromNS)
	}
	if v := q.Get(ParamLastS); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0 && f <= 30*86400) {
			return r, signal.FieldErrorf(ParamLastS, "must be seconds in (0, 2592000], got %q", signal.Clip(v))
		}
		if r.FromNS != 0 || r.ToNS != 0 {
			return r, signal.FieldErrorf(ParamLastS, "use either last_s or from_ns/to_ns")
		}
		r.LastNS = int64(f * 1e9)
	}
	r.Incarnation, err = incarnationChoice(q)
	return r, err
}

// GreyhoundState is what the server keeps per job beside the engine's
// controller state: which change points the controller has consumed, when
// the open plan was published and a pending manual request.
type GreyhoundState struct {
	Controller greyhound.ControllerState `json:"controller"`
	// SeenNS is the end_ns of the newest change point fed to Step.
	SeenNS int64 `json:"seen_ns,omitempty"`
	// OnsetNS is the end_ns of the onset that started the current
	// episode (detection and verdict latency are measured from it).
	OnsetNS int64 `json:"onset_ns,omitempty"`
	// PlanCreatedNS is when the open plan was published (server clock).
	PlanCreatedNS int64 `json:"plan_created_ns,omitempty"`
	// ManualNS is a validation asked for through the API, not yet acted on.
	ManualNS int64 `json:"manual_ns,omitempty"`
	// Incarnation is the job launch this state follows: when a newer one
	// appears the state starts over (no change point across a restart,
	// no validation planned for processes that are gone).
	Incarnation int `json:"incarnation,omitempty"`
	// Published is the newest plan published. Ranks that fetched it run
	// it at at_step whatever the controller does meanwhile, so it is
	// served, and its results accepted, until its deadline even when a
	// relief has withdrawn it from the controller (§4.3): withdrawing it
	// would leave the ranks that have it waiting for the others.
	Published *PublishedPlan `json:"published,omitempty"`
}

// PublishedPlan is when a plan went out and how long it stays open.
type PublishedPlan struct {
	ID         string `json:"id"`
	CreatedNS  int64  `json:"created_ns"`
	DeadlineMS int64  `json:"deadline_ms"`
}

// Greyhound is the store→Greyhound-engine adapter: it resolves windows,
// loads calls, communicators, validation runs and the controller state,
// and runs greyhound.Analyze. Stepping the controller, publishing plans
// and taking results act, so they live in internal/control
// (control.GreyhoundLifecycle). Safe for concurrent use.
type Greyhound struct {
	src GreyhoundSource
	cfg greyhound.Config
	lim GreyhoundLimits
}

// NewGreyhound returns the adapter; cfg must be valid.
func NewGreyhound(src GreyhoundSource, cfg greyhound.Config, lim GreyhoundLimits) (*Greyhound, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lim.setDefaults()
	return &Greyhound{src: src, cfg: cfg, lim: lim}, nil
}

// Config returns the engine configuration.
func (g *Greyhound) Config() greyhound.Config { return g.cfg }

// CollectiveStats is the job's collective summary.
func (g *Greyhound) CollectiveStats(job string) (store.CollectiveStats, error) {
	return g.src.CollectiveStats(job)
}

// lastStep is the newest training step of the job's stage vectors in
// the view steps (one incarnation's training steps), -1 when none.
func lastStep(steps stepSource, job string) int64 {
	st, err := steps.Stats(job)
	if err != nil || st.Vectors == 0 || st.LastStep < 0 {
		return -1
	}
	return st.LastStep
}

// stepSource is what the adapter reads of the stage vectors.
type stepSource interface {
	Stats(job string) (store.JobStats, error)
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
}

// steps is the job's stage vectors as incarnation inc shows them:
// training steps, never the stored ordinals (stagevec.Ordinal), through
// the reports' view (View). nil for IncAll: steps repeat across launches,
// so neither at_step nor §7.2's truth is defined over them.
func (g *Greyhound) steps(j *signal.Job, inc int) (stepSource, error) {
	if inc == IncAll {
		return nil, nil
	}
	src, ok := g.src.(Source)
	if !ok {
		return g.src, nil // a source without ordinals: one incarnation
	}
	v, _, err := View(src, j, inc)
	return v, err
}

// State loads the job's controller state (a fresh one when none is
// stored).
func (g *Greyhound) State(job string) (*GreyhoundState, error) {
	b, err := g.src.GreyhoundState(job)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return &GreyhoundState{}, nil
	}
	var s GreyhoundState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("job %q: stored greyhound state: %w: %v", job, store.ErrCorrupt, err)
	}
	return &s, nil
}

// WirePlan is the engine's plan as published to the ranks
// (docs/format/greyhound.md), created at createdNS.
func WirePlan(p *greyhound.Plan, createdNS int64) *ValidationPlan {
	w := &ValidationPlan{ID: p.ID, AtStep: p.AtStep, DeadlineMS: p.DeadlineMS, CreatedNS: createdNS, BudgetMS: p.BudgetMS,
		GEMM: &GEMMTest{Ranks: p.GEMM.Ranks, N: p.GEMM.N, Dtype: p.GEMM.Dtype, Reps: p.GEMM.Reps},
		P2P:  &P2PTest{SizesBytes: p.P2P.SizesBytes, Reps: p.P2P.Reps, PassBudgetMS: p.P2P.PassBudgetMS, StopRatio: p.P2P.StopRatio}}
	for _, pass := range p.P2P.Passes {
		ls := make([]Link, len(pass))
		for i, l := range pass {
			ls[i] = Link{Src: l.Src, Dst: l.Dst}
		}
		w.P2P.Passes = append(w.P2P.Passes, ls)
	}
	return w
}

func enginePlan(w *ValidationPlan) greyhound.Plan {
	p := greyhound.Plan{ID: w.ID, AtStep: w.AtStep, DeadlineMS: w.DeadlineMS, BudgetMS: w.BudgetMS}
	if w.GEMM != nil {
		p.GEMM = greyhound.GEMMTest{Ranks: w.GEMM.Ranks, N: w.GEMM.N, Dtype: w.GEMM.Dtype, Reps: w.GEMM.Reps}
	}
	if w.P2P != nil {
		p.P2P = greyhound.P2PTest{SizesBytes: w.P2P.SizesBytes, Reps: w.P2P.Reps, PassBudgetMS: w.P2P.PassBudgetMS, StopRatio: w.P2P.StopRatio}
		for _, pass := range w.P2P.Passes {
			ls := make([]greyhound.Link, len(pass))
			for i, l := range pass {
				ls[i] = greyhound.Link{Src: l.Src, Dst: l.Dst}
			}
			p.P2P.Passes = append(p.P2P.Passes, ls)
		}
	}
	return p
}

func engineResult(r *ValidationResult) greyhound.RankResult {
	out := greyhound.RankResult{Rank: r.Rank, Missed: r.Missed, GEMMMS: r.GEMMMS, Error: r.Error, PausedFromNS: r.PausedFromNS, PausedToNS: r.PausedToNS}
	for _, p := range r.P2P {
		out.P2P = append(out.P2P, greyhound.P2PResult{Pass: p.Pass, Src: p.Src, Dst: p.Dst, Bytes: p.Bytes, MS: p.MS})
	}
	return out
}

// storedRun decodes one stored plan with its results. Stored results were
// checked when posted; one that no longer decodes is skipped, never fatal.
func storedRun(rec store.ValidationRecord) (*ValidationPlan, []greyhound.RankResult, error) {
	var w ValidationPlan
	if err := json.Unmarshal(rec.Plan, &w); err != nil {
		return nil, nil, fmt.Errorf("stored validation plan %d: %w: %v", rec.Seq, store.ErrCorrupt, err)
	}
	ranks := slices.Sorted(func(yield func(int) bool) {
		for r := range rec.Results {
			if !yield(r) {
				return
			}
		}
	})
	var res []greyhound.RankResult
	for _, r := range ranks {
		var v ValidationResult
		if json.Unmarshal(rec.Results[r], &v) == nil && v.Rank == r {
			res = append(res, engineResult(&v))
		}
	}
	return &w, res, nil
}

// Validations returns the job's validation runs of incarnation inc
// (IncAll: every one), expired as of nowNS.
func (g *Greyhound) Validations(job string, inc int, nowNS int64) ([]greyhound.ValidationRun, error) {
	recs, err := g.src.ValidationRecords(job, 0)
	if err != nil {
		return nil, err
	}
	out := make([]greyhound.ValidationRun, 0, len(recs))
	for _, rec := range recs {
		w, res, err := storedRun(rec)
		if err != nil {
			return nil, err
		}
		if inc != IncAll && w.Incarnation != inc {
			continue
		}
		out = append(out, greyhound.ValidationRun{Plan: enginePlan(w), Results: res, CreatedNS: w.CreatedNS,
			Expired: nowNS-w.CreatedNS >= w.DeadlineMS*1e6})
	}
	return out, nil
}

// Results returns the results posted so far for plan id (the open plan):
// a prefix scan of that plan's results only.
func (g *Greyhound) Results(job, id string) ([]greyhound.RankResult, error) {
	seq, err := ParseValidationID(id)
	if err != nil {
		return nil, err
	}
	byRank, err := g.src.ValidationResults(job, seq)
	if err != nil {
		return nil, err
	}
	ranks := slices.Sorted(func(yield func(int) bool) {
		for r := range byRank {
			if !yield(r) {
				return
			}
		}
	})
	var res []greyhound.RankResult
	for _, r := range ranks {
		var v ValidationResult
		if json.Unmarshal(byRank[r], &v) == nil && v.Rank == r {
			res = append(res, engineResult(&v))
		}
	}
	return res, nil
}

// Plan reads the job's stored validation plan seq (point read); the
// error wraps store.ErrNotFound when there is none.
func (g *Greyhound) Plan(job string, seq uint32) (*ValidationPlan, error) {
	b, err := g.src.ValidationPlan(job, seq)
	if err != nil {
		return nil, err
	}
	var w ValidationPlan
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("stored validation plan %d: %w: %v", seq, store.ErrCorrupt, err)
	}
	return &w, nil
}

// window resolves the request's [from, to] over what is stored within
// the incarnation's span of time [lo, hi).
func (g *Greyhound) window(req GreyhoundRequest, cs store.CollectiveStats, lo, hi int64) (from, to int64, explicit bool) {
	cs.FirstNS, cs.LastNS = max(cs.FirstNS, lo), min(cs.LastNS, hi-1)
	switch {
	case req.FromNS != 0 || req.ToNS != 0:
		from, to = req.FromNS, req.ToNS
		if to == 0 {
			to = cs.LastNS
		}
		return max(from, cs.FirstNS), min(to, cs.LastNS), true
	case req.LastNS > 0:
		return max(cs.LastNS-req.LastNS, cs.FirstNS), cs.LastNS, true
	}
	from = max(cs.LastNS-g.lim.WindowNS, cs.FirstNS)
	// Shrink the default window to MaxCalls at the job's average rate.
	if span := cs.LastNS - cs.FirstNS; span > 0 && cs.Calls > int64(g.lim.MaxCalls) {
		rate := float64(cs.Calls) / float64(span)
		from = max(from, cs.LastNS-int64(float64(g.lim.MaxCalls)/rate))
	}
	return from, cs.LastNS, false
}

// GreyhoundInput is a loaded window: the engine input plus what the
// controller needs about it.
type GreyhoundInput struct {
	In greyhound.Input
	// Limited: the window was cut at MaxCalls.
	Limited bool
	// LastStep is the newest training step known (vectors or the calls'
	// step numbers), -1 unknown; LastStepNS when its first call entered.
	LastStep, LastStepNS int64
	// LastCallNS is the newest call's enter time.
	LastCallNS int64
	// Incarnation is the launch read (IncAll: every one) and
	// IncarnationNote says so in words when the job restarted.
	Incarnation     int
	IncarnationNote string
}

// Load reads the request's window into an engine input (without the
// controller state).
func (g *Greyhound) Load(ctx context.Context, req GreyhoundRequest) (*GreyhoundInput, error) {
	j, err := g.src.Job(req.Job)
	if err != nil {
		return nil, err
	}
	cs, err := g.src.CollectiveStats(j.ID)
	if err != nil {
		return nil, err
	}
	if cs.Calls == 0 {
		return nil, fmt.Errorf("job %q: %w", j.ID, ErrNoCalls)
	}
	inc, lo, hi, err := incarnationSpan(j, req.Incarnation)
	if err != nil {
		return nil, err
	}
	steps, err := g.steps(j, inc)
	if err != nil {
		return nil, err
	}
	from, to, _ := g.window(req, cs, lo, hi)
	if to < from {
		return nil, fmt.Errorf("job %q stores calls from %d to %d ns (incarnation %s: from %d to %d): %w", j.ID, cs.FirstNS, cs.LastNS, IncarnationText(inc), lo, hi, ErrNoCalls)
	}
	gi := &GreyhoundInput{LastStep: -1, Incarnation: inc}
	_, gi.IncarnationNote = incarnationOf(j, &inc)
	if steps != nil {
		gi.LastStep = lastStep(steps, j.ID)
	}
	in := &gi.In
	*in = greyhound.Input{Job: j.ID, NowNS: req.NowNS, World: j.WorldSize, Dropped: cs.Dropped}
	errFull := errors.New("full")
	n := 0
	// first enter of each step on any rank: the step's start for §7.2's
	// truth and at_step.
	stepStart := map[int64]int64{}
	err = g.src.ScanCalls(j.ID, store.CallQuery{FromNS: from, ToNS: to, Rank: -1}, func(c *collective.Call) error {
		if n++; n&8191 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if len(in.Calls) >= g.lim.MaxCalls {
			return errFull
		}
		in.Calls = append(in.Calls, *c)
		if c.Step >= 0 {
			if t, ok := stepStart[c.Step]; !ok || c.EnterNS < t {
				stepStart[c.Step] = c.EnterNS
			}
		}
		gi.LastCallNS = max(gi.LastCallNS, c.EnterNS)
		return nil
	})
	if errors.Is(err, errFull) {
		gi.Limited, err = true, nil
		in.Dropped = max(in.Dropped, 1) // marks the report telemetry-limited
	}
	if err != nil {
		return nil, err
	}
	if len(in.Calls) == 0 {
		return nil, fmt.Errorf("job %q: %w", j.ID, ErrNoCalls)
	}
	if in.Comms, err = g.src.Comms(j.ID); err != nil {
		return nil, err
	}
	for s, t := range stepStart {
		if s > gi.LastStep || (s == gi.LastStep && gi.LastStepNS == 0) {
			gi.LastStep, gi.LastStepNS = s, t
		}
	}
	if gi.LastStepNS == 0 {
		gi.LastStepNS = gi.LastCallNS
	}
	if steps != nil {
		in.Steps = g.truth(steps, j.ID, stepStart)
	}
	if in.Validations, err = g.Validations(j.ID, inc, req.NowNS); err != nil {
		return nil, err
	}
	return gi, nil
}

// truth builds §7.2's reference step times: the client's own step wall
// time (median over ranks) ending where the next step's first call
// entered. Empty without stage vectors.
func (g *Greyhound) truth(vecs stepSource, job string, stepStart map[int64]int64) []greyhound.StepTruth {
	if len(stepStart) < 2 {
		return nil
	}
	steps := slices.Sorted(func(yield func(int64) bool) {
		for s := range stepStart {
			if !yield(s) {
				return
			}
		}
	})
	lo, hi := steps[0], steps[len(steps)-1]
	lo = max(lo, hi-g.lim.MaxTruthSteps)
	wall := map[int64][]float64{}
	_ = vecs.Scan(job, lo, hi, func(v *stagevec.Vector) error {
		if v.WallMS > 0 && !math.IsInf(v.WallMS, 0) {
			wall[v.Step] = append(wall[v.Step], v.WallMS)
		}
		return nil
	})
	var out []greyhound.StepTruth
	for _, s := range steps {
		next, ok := stepStart[s+1]
		ws := wall[s]
		if !ok || len(ws) == 0 {
			continue
		}
		ms := stats.Median(ws)
		out = append(out, greyhound.StepTruth{Step: s, StartNS: next - int64(ms*1e6), EndNS: next})
	}
	return out
}

// Report runs Greyhound-Detect over the request's window with the
// server's controller state and validation runs.
func (g *Greyhound) Report(ctx context.Context, req GreyhoundRequest) (*greyhound.Report, error) {
	gi, err := g.Load(ctx, req)
	if err != nil {
		return nil, err
	}
	s, err := g.State(req.Job)
	if err != nil {
		return nil, err
	}
	if s.Controller.Phase != "" && s.Incarnation == gi.Incarnation {
		gi.In.State = &s.Controller
	}
	rep, err := greyhound.Analyze(gi.In, g.cfg)
	if err != nil {
		return nil, err
	}
	gi.label(rep)
	return rep, nil
}

// label says on rep which launch it reads.
func (gi *GreyhoundInput) label(rep *greyhound.Report) {
	rep.Incarnation, rep.IncarnationNote = gi.Incarnation, gi.IncarnationNote
}

// LatestChange returns the newest decisive change point of rep ending
// after seenNS, or nil.
func LatestChange(rep *greyhound.Report, seenNS int64, cfg greyhound.Config) *greyhound.ChangePointView {
	var best *greyhound.ChangePointView
	for i := range rep.ChangePoints {
		c := &rep.ChangePoints[i]
		if cfg.Detector == greyhound.DetectorBOCDV && !c.Verified {
			continue
		}
		if c.EndNS > seenNS && (best == nil || cmp.Compare(c.EndNS, best.EndNS) > 0) {
			best = c
		}
	}
	return best
}
