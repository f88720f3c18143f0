package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// JobView is a job with its stored-vector summary and, when the
// background evaluation has one, its latest diagnosis.
type JobView struct {
	*signal.Job
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	Vectors   int64 `json:"vectors"`
	Diagnosis any   `json:"diagnosis,omitempty"`
}

func (a *API) view(j *signal.Job) (JobView, error) {
	st, err := a.d.Reader.Stats(j.ID)
	if err != nil {
		return JobView{}, err
	}
	v := JobView{Job: j, FirstStep: st.FirstStep, LastStep: st.LastStep, Vectors: st.Vectors}
	if a.d.Diagnoses != nil {
		if d, ok := a.d.Diagnoses.Latest(j.ID); ok {
			v.Diagnosis = d
		}
	}
	return v, nil
}

// Listing bounds: ?limit=N (default and maximum below) and ?after=ID for
// the next page, in job id order.
const (
	defaultJobPage = 500
	maxJobPage     = 5000
)

func (a *API) listJobs(w http.ResponseWriter, r *http.Request) {
	limit := defaultJobPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxJobPage {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("limit", "must be an integer in [1, %d], got %q", maxJobPage, signal.Clip(v)))
			return
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	if len(after) > signal.MaxJobIDBytes {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("after", "is %d bytes; a job id is at most %d", len(after), signal.MaxJobIDBytes))
		return
	}
	// Only the page is decoded, so a listing costs its page whatever the
	// job count (D9).
	jobs, next, err := a.d.Catalog.Page(after, limit)
	if err != nil {
		a.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	out := make([]JobView, 0, len(jobs))
	for _, j := range jobs {
		v, err := a.view(j)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted since the page was read
		}
		if err != nil {
			a.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		out = append(out, v)
	}
	body := map[string]any{"jobs": out}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

func (a *API) getJob(w http.ResponseWriter, r *http.Request) {
	j, ok := a.job(w, r)
	if !ok {
		return
	}
	v, err := a.view(j)
	if err != nil {
		a.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// putJob registers a job: 201 when new, 200 when the same registration
// arrives again (every rank of a job sends it), 409 when it contradicts
// the stored one in a way that would make stored vectors meaningless, or
// comes from another run (run_id).
func (a *API) putJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !a.requireJSON(w, r) {
		return
	}
	nj, err := laggardv1.DecodeJob(r.Body, id, a.d.MaxBodyBytes)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	j, created, err := a.d.Catalog.Register(nj, func(err error) bool { return errors.Is(err, store.ErrNotFound) })
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	if created {
		a.d.Log.Info("job registered", "job", id, "world_size", j.WorldSize, "stages", len(j.Schema.Stages), "accumulation", j.Accumulation, "run_id", j.RunID)
		writeJSON(w, http.StatusCreated, j)
		return
	}
	writeJSON(w, http.StatusOK, j)
}
