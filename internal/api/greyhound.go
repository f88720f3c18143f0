package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/control"
	"github.com/laggard-dev/laggard/internal/signal"
)

// Greyhound is the Greyhound-Detect controller the routes below serve
// (docs/format/greyhound.md); *control.Greyhound implements it.
type Greyhound interface {
	Report(ctx context.Context, req analysis.GreyhoundRequest) (*analysis.GreyhoundReport, error)
	// OpenPlan is the plan rank of incarnation inc (?incarnation=; -1:
	// the newest) should run, nil when none: a plan belongs to the
	// launch it was made for.
	OpenPlan(job string, rank, inc int) (*analysis.ValidationPlan, error)
	// PostResult stores one rank's result; rank ≥ 0 is the rank the
	// request names (?rank=), which the body must agree with, -1 none;
	// inc the incarnation it names (-1: the newest).
	PostResult(job, vid string, rank, inc int, body io.Reader) (*analysis.ValidationResult, bool, error)
	// RequestValidation returns the job's phase and whether a request
	// was recorded (false while validating or with one waiting).
	RequestValidation(job string) (analysis.GreyhoundPhase, bool, error)
}

// registerGreyhound adds the Greyhound routes; their scopes are in
// internal/server's routeAccess.
func (a *API) registerGreyhound(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/jobs/{id}/greyhound", a.greyhoundReport)
	mux.HandleFunc("POST /api/v1/jobs/{id}/greyhound/validate", a.greyhoundValidate)
	mux.HandleFunc("GET /api/v1/jobs/{id}/validation", a.validationPlan)
	mux.HandleFunc("POST /api/v1/jobs/{id}/validation/{vid}/results", a.validationResult)
}

var errNoGreyhound = errors.New("the Greyhound controller is not enabled on this server")

func (a *API) greyhound(w http.ResponseWriter, r *http.Request) (*signal.Job, bool) {
	if a.d.Greyhound == nil {
		a.fail(w, r, http.StatusNotFound, errNoGreyhound)
		return nil, false
	}
	return a.job(w, r)
}

// greyhoundReport serves the job's Greyhound report (contract §5):
// iteration time, change points, group comparison, lateness, controller
// phase and history, validation runs and the verdict.
func (a *API) greyhoundReport(w http.ResponseWriter, r *http.Request) {
	job, ok := a.greyhound(w, r)
	if !ok {
		return
	}
	req, err := analysis.ParseGreyhoundRequest(job.ID, r.URL.Query(), time.Now().UnixNano())
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	rep, err := a.d.Greyhound.Report(r.Context(), req)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(rep); err != nil {
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("job %q: cannot encode the greyhound report: %w", signal.Clip(job.ID), err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}

// validationPlan answers a rank's poll (?rank=R[&incarnation=N]): 204 with
// no plan for it, else the plan (§3; clients poll every ~2 s while the job
// runs).
func (a *API) validationPlan(w http.ResponseWriter, r *http.Request) {
	job, ok := a.greyhound(w, r)
	if !ok {
		return
	}
	v := r.URL.Query().Get("rank")
	rank, err := strconv.Atoi(v)
	if err != nil || rank < 0 || (job.WorldSize > 0 && rank >= job.WorldSize) {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("rank", "must be a rank in [0, %d), got %q", max(job.WorldSize, 1), signal.Clip(v)))
		return
	}
	inc, err := incarnationParam(r, job)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	p, err := a.d.Greyhound.OpenPlan(job.ID, rank, inc)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if p == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// validationResult takes one rank's results for plan {vid} (optionally
// ?rank=R, which the body's rank must equal): 200 accepted or duplicate (a
// retry of the same result changes nothing), 400 naming the field, 404
// for an unknown plan, 409 for a closed plan or a different second result
// of a rank (naming rank).
func (a *API) validationResult(w http.ResponseWriter, r *http.Request) {
	job, ok := a.greyhound(w, r)
	if !ok {
		return
	}
	rank := -1
	if v := r.URL.Query().Get("rank"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (job.WorldSize > 0 && n >= job.WorldSize) {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("rank", "must be a rank in [0, %d), got %q", max(job.WorldSize, 1), signal.Clip(v)))
			return
		}
		rank = n
	}
	inc, err := incarnationParam(r, job)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	body := http.MaxBytesReader(w, r.Body, analysis.MaxResultBytes+1)
	res, dup, err := a.d.Greyhound.PostResult(job.ID, r.PathValue("vid"), rank, inc, body)
	if err != nil {
		status := statusOf(err)
		if errors.Is(err, control.ErrPlanClosed) {
			status = http.StatusConflict
		}
		a.fail(w, r, status, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"accepted": !dup, "duplicate": dup, "rank": res.Rank})
}

// greyhoundValidate asks the controller to validate the job now.
func (a *API) greyhoundValidate(w http.ResponseWriter, r *http.Request) {
	job, ok := a.greyhound(w, r)
	if !ok {
		return
	}
	ph, requested, err := a.d.Greyhound.RequestValidation(job.ID)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	if requested {
		a.d.Log.Info("greyhound validation requested", "job", job.ID, "remote", r.RemoteAddr)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"job": job.ID, "phase": ph, "requested": requested})
}
