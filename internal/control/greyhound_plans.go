package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// Greyhound's validation protocol (§4.3, docs/format/greyhound.md): the
// controller's record and the plans it publishes are written here, the
// ranks poll the open plan and post their results here. The read path
// (windows, the report, the stored runs as the engine's input) is
// analysis.Greyhound, which GreyhoundLifecycle embeds.

// GreyhoundStore is what the Greyhound life cycle reads and writes:
// analysis's read view plus the controller's record and the validation
// results. *store.Store implements it.
type GreyhoundStore interface {
	analysis.GreyhoundSource
	SaveGreyhound(job string, state []byte, plan *store.ValidationRecord) error
	PutValidationResult(job string, seq uint32, rank int, res []byte) (dup bool, err error)
	HasValidationResult(job string, seq uint32, rank int) (bool, error)
}

var _ GreyhoundStore = (*store.Store)(nil)

// GreyhoundLifecycle is Greyhound-Detect's controller over the store: it
// steps the controller (Advance, greyhound_advance.go), stores its state
// and publishes plans (Save), serves the open plan (OpenPlan) and takes
// the ranks' results (PostResult). It reads through the embedded
// analysis.Greyhound and never reads a clock. Safe for concurrent use.
type GreyhoundLifecycle struct {
	*analysis.Greyhound
	src GreyhoundStore
}

// NewGreyhoundLifecycle returns the life cycle over src; cfg must be
// valid.
func NewGreyhoundLifecycle(src GreyhoundStore, cfg analysis.GreyhoundConfig, lim analysis.GreyhoundLimits) (*GreyhoundLifecycle, error) {
	g, err := analysis.NewGreyhound(src, cfg, lim)
	if err != nil {
		return nil, err
	}
	return &GreyhoundLifecycle{Greyhound: g, src: src}, nil
}

// planOpen reports whether the plan is still open at nowNS (CreatedNS 0: no
// deadline known, open).
func planOpen(p *analysis.PublishedPlan, nowNS int64) bool {
	return p != nil && (p.CreatedNS == 0 || nowNS-p.CreatedNS < p.DeadlineMS*1e6)
}

// published is the plan open to the ranks: the state's Published, or for
// a state written before it existed, the controller's plan while it
// validates.
func published(s *analysis.GreyhoundState) *analysis.PublishedPlan {
	if s.Published != nil {
		return s.Published
	}
	if p := s.Controller.Plan; p != nil && s.Controller.Phase == analysis.PhaseValidation {
		return &analysis.PublishedPlan{ID: p.ID, CreatedNS: s.PlanCreatedNS, DeadlineMS: p.DeadlineMS}
	}
	return nil
}

// Save stores the state and, when plan is not nil, publishes it (one
// durable write).
func (g *GreyhoundLifecycle) Save(job string, s *analysis.GreyhoundState, plan *analysis.GreyhoundPlan) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	var rec *store.ValidationRecord
	if plan != nil {
		seq, err := analysis.ParseValidationID(plan.ID)
		if err != nil {
			return fmt.Errorf("plan id: %w", err)
		}
		wp := analysis.WirePlan(plan, s.PlanCreatedNS)
		wp.Incarnation = s.Incarnation
		pb, err := json.Marshal(wp)
		if err != nil {
			return err
		}
		rec = &store.ValidationRecord{Seq: seq, Plan: pb}
	}
	return g.src.SaveGreyhound(job, b, rec)
}

// OpenPlan returns the plan rank should run: the newest published plan
// until its deadline (whatever the controller's phase since), unless rank
// already answered it or the plan was made for another incarnation than
// the poller's (inc ≥ 0; -1: the job's newest); nil when none. Point
// reads only: ranks poll it every ~2 s.
func (g *GreyhoundLifecycle) OpenPlan(job string, rank, inc int, nowNS int64) (*analysis.ValidationPlan, error) {
	j, err := g.src.Job(job)
	if err != nil {
		return nil, err
	}
	s, err := g.State(job)
	if err != nil {
		return nil, err
	}
	pub := published(s)
	if !planOpen(pub, nowNS) {
		return nil, nil
	}
	seq, err := analysis.ParseValidationID(pub.ID)
	if err != nil {
		return nil, err
	}
	if done, err := g.src.HasValidationResult(job, seq, rank); err != nil || done {
		return nil, err
	}
	w, err := g.Plan(job, seq)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // state saved, plan not: cannot happen (one batch)
	}
	if err != nil || w.Incarnation != pollerIncarnation(j, inc) {
		return nil, err // a plan belongs to the launch it was made for
	}
	return w, nil
}

// pollerIncarnation is the incarnation a validation poll or result comes
// from: the one it names, else the job's newest.
func pollerIncarnation(j *signal.Job, inc int) int {
	if inc >= 0 {
		return inc
	}
	return j.Current()
}

// ErrPlanClosed: a result for a plan that is no longer open (answered
// after its deadline, or for a plan a newer one replaced); the API says
// 409.
var ErrPlanClosed = errors.New("the validation plan is closed")

// PostResult checks one rank's result against plan id and stores it at
// nowNS. wantRank (≥ 0) is the rank the poster says it is (?rank=): the
// body must agree. A rank's repeated post of the same result is a
// duplicate (dup true) and changes nothing; another result for a rank
// that answered is a *signal.ConflictError naming rank. A plan stays open
// until its deadline even after the controller moved on (Published). A
// result from another incarnation than the plan's (inc ≥ 0 as the poster
// names it, -1: the job's newest) is a *signal.ConflictError naming
// incarnation: a plan belongs to the launch it was made for.
func (g *GreyhoundLifecycle) PostResult(job, id string, nowNS int64, wantRank, inc int, body io.Reader) (res *analysis.ValidationResult, dup bool, err error) {
	seq, err := analysis.ParseValidationID(id)
	if err != nil {
		return nil, false, err
	}
	j, err := g.src.Job(job)
	if err != nil {
		return nil, false, err
	}
	w, err := g.Plan(job, seq)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, fmt.Errorf("job %q has no validation plan %s: %w", job, id, store.ErrNotFound)
		}
		return nil, false, err
	}
	if from := pollerIncarnation(j, inc); w.Incarnation != from {
		return nil, false, &signal.ConflictError{Field: analysis.ParamIncarnation, Msg: fmt.Sprintf("validation plan %s of job %q was made for incarnation %d, not %d", id, signal.Clip(job), w.Incarnation, from)}
	}
	res, err = analysis.DecodeValidationResult(body, w, j.At(w.Incarnation).WorldSize)
	if err != nil {
		return nil, false, err
	}
	if wantRank >= 0 && res.Rank != wantRank {
		return nil, false, signal.FieldErrorf("rank", "is %d, but the request is for rank %d", res.Rank, wantRank)
	}
	s, err := g.State(job)
	if err != nil {
		return nil, false, err
	}
	if pub := published(s); pub == nil || pub.ID != id || !planOpen(pub, nowNS) {
		// Closed: a retry of a stored result is still answered (dup or
		// conflict, nothing written); a new one is refused.
		if has, err := g.src.HasValidationResult(job, seq, res.Rank); err != nil || !has {
			if err == nil {
				err = fmt.Errorf("job %q: plan %s: %w (the controller is in %s)", job, id, ErrPlanClosed, s.Controller.Phase)
			}
			return nil, false, err
		}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, false, err
	}
	dup, err = g.src.PutValidationResult(job, seq, res.Rank, b)
	if err != nil {
		return nil, false, err
	}
	return res, dup, nil
}
