package analysis

import (
	"fmt"
	"math"
	"net/url"
	"strconv"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
)

// Request asks for one job report. The zero window is the default window
// (steady part, since the latest change point); Last or From/To choose it.
type Request struct {
	Job string
	// From/To bound the window (inclusive); either may be nil (the stored
	// first/last step). Last takes the last N stored steps instead.
	From, To *int64
	Last     int
	// RefFrom/RefTo choose the reference window explicitly (before/after).
	RefFrom, RefTo *int64
	// CompareJob compares with another run's default window (run A vs
	// run B) instead of the job's own history.
	CompareJob string
	// NoReference skips the automatic reference window.
	NoReference bool
	// Group restricts the report to one role group.
	Group string
	// Tau and ModelFit override the StageFrontier defaults; ModelFit's
	// default comes from the job's sync_model label.
	Tau      *float64
	ModelFit *bool
	// Incarnation chooses the launch to read (IncAll: every one on one
	// axis); nil reads the newest (docs/design/roles-and-runs.md).
	Incarnation *int
}

// inc is the incarnation r asks for (IncNewest when none).
func (r Request) inc() int {
	if r.Incarnation == nil {
		return IncNewest
	}
	return *r.Incarnation
}

// Request parameters, as query parameters (API) and flags (CLI): one
// parser, so both accept and reject the same values.
const (
	ParamFrom       = "from"
	ParamTo         = "to"
	ParamLast       = "last"
	ParamRefFrom    = "ref_from"
	ParamRefTo      = "ref_to"
	ParamCompare    = "compare"
	ParamNoRef      = "no_reference"
	ParamGroup      = "group"
	ParamTau        = "tau"
	ParamModelFit   = "model_fit"
	maxLast         = 1 << 20
	maxStepParamLen = 20
)

// ParseRequest reads a Request for job from query parameters. Errors are
// *signal.FieldError naming the parameter.
func ParseRequest(job string, q url.Values) (Request, error) {
	r := Request{Job: job}
	var err error
	if r.From, err = stepParam(q, ParamFrom); err != nil {
		return r, err
	}
	if r.To, err = stepParam(q, ParamTo); err != nil {
		return r, err
	}
	if r.RefFrom, err = stepParam(q, ParamRefFrom); err != nil {
		return r, err
	}
	if r.RefTo, err = stepParam(q, ParamRefTo); err != nil {
		return r, err
	}
	if v := q.Get(ParamLast); v != "" || q.Has(ParamLast) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLast {
			return r, signal.FieldErrorf(ParamLast, "must be an integer in [1, %d], got %q", maxLast, signal.Clip(v))
		}
		if r.From != nil || r.To != nil {
			return r, signal.FieldErrorf(ParamLast, "use either last or from/to")
		}
		r.Last = n
	}
	if r.From != nil && r.To != nil && *r.To < *r.From {
		return r, signal.FieldErrorf(ParamTo, "%d is before from=%d", *r.To, *r.From)
	}
	if r.RefFrom != nil && r.RefTo != nil && *r.RefTo < *r.RefFrom {
		return r, signal.FieldErrorf(ParamRefTo, "%d is before ref_from=%d", *r.RefTo, *r.RefFrom)
	}
	r.CompareJob = q.Get(ParamCompare)
	if r.CompareJob != "" && (r.RefFrom != nil || r.RefTo != nil) {
		return r, signal.FieldErrorf(ParamCompare, "use either compare or ref_from/ref_to")
	}
	if r.NoReference, err = boolParam(q, ParamNoRef); err != nil {
		return r, err
	}
	r.Group = q.Get(ParamGroup)
	if q.Has(ParamIncarnation) {
		inc, err := ParseIncarnation(q)
		if err != nil {
			return r, err
		}
		if inc != IncNewest {
			r.Incarnation = &inc
		}
	}
	if v := q.Get(ParamTau); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0 && x <= 1) {
			return r, signal.FieldErrorf(ParamTau, "must be in (0, 1], got %q", signal.Clip(v)) // StageFrontier §4 τ
		}
		r.Tau = &x
	}
	if v := q.Get(ParamModelFit); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return r, signal.FieldErrorf(ParamModelFit, "must be true or false, got %q", signal.Clip(v))
		}
		r.ModelFit = &b // App. C model-fit indicator m
	}
	return r, nil
}

func stepParam(q url.Values, name string) (*int64, error) {
	if !q.Has(name) {
		return nil, nil
	}
	v := q.Get(name)
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || x < 0 || len(v) > maxStepParamLen {
		return nil, signal.FieldErrorf(name, "must be a step number >= 0, got %q", signal.Clip(v))
	}
	return &x, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return q.Has(name), nil // a bare ?no_reference means true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, signal.FieldErrorf(name, "must be true or false, got %q", signal.Clip(v))
	}
	return b, nil
}

// config resolves the StageFrontier configuration for job: defaults, the
// job's declared workload semantics, then the request's overrides.
func (r Request) config(job *signal.Job) (stagefrontier.Config, error) {
	cfg := stagefrontier.DefaultConfig()
	cfg.ModelFit = stagefrontier.ModelFitFromJob(job)
	if r.Tau != nil {
		cfg.CandidateThreshold = *r.Tau
	}
	if r.ModelFit != nil {
		cfg.ModelFit = *r.ModelFit
	}
	return cfg, cfg.Validate()
}

// Values renders r as query parameters (the inverse of ParseRequest), for
// links and clients.
func (r Request) Values() url.Values {
	q := url.Values{}
	set := func(k string, p *int64) {
		if p != nil {
			q.Set(k, strconv.FormatInt(*p, 10))
		}
	}
	set(ParamFrom, r.From)
	set(ParamTo, r.To)
	set(ParamRefFrom, r.RefFrom)
	set(ParamRefTo, r.RefTo)
	if r.Last > 0 {
		q.Set(ParamLast, strconv.Itoa(r.Last))
	}
	if r.CompareJob != "" {
		q.Set(ParamCompare, r.CompareJob)
	}
	if r.NoReference {
		q.Set(ParamNoRef, "true")
	}
	if r.Group != "" {
		q.Set(ParamGroup, r.Group)
	}
	if r.Tau != nil {
		q.Set(ParamTau, strconv.FormatFloat(*r.Tau, 'g', -1, 64))
	}
	if r.ModelFit != nil {
		q.Set(ParamModelFit, strconv.FormatBool(*r.ModelFit))
	}
	if r.Incarnation != nil {
		q.Set(ParamIncarnation, IncarnationText(*r.Incarnation))
	}
	return q
}

func stepText(s int64) string {
	if s == math.MaxInt64 {
		return "end"
	}
	return fmt.Sprint(s)
}
