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
// background evaluation has one, its latest diagnosis. FirstStep and
// LastStep are the newest incarnation's (Incarnation); Vectors counts
// every incarnation's.
type JobView struct {
	*signal.Job
	Incarnation int   `json:"incarnation"`
	FirstStep   int64 `json:"first_step"`
	LastStep    int64 `json:"last_step"`
	Vectors     int64 `json:"vectors"`
	Diagnosis   any   `json:"diagnosis,omitempty"`
}

func (a *API) view(j *signal.Job) (JobView, error) {
	st, err := a.d.Reader.Stats(j.ID)
	if err != nil {
		return JobView{}, err
	}
	first, last, _, err := a.stepSpan(j.ID, j.Current())
	if err != nil {
		return JobView{}, err
	}
	v := JobView{Job: j.Public(), Incarnation: j.Current(), FirstStep: first, LastStep: last, Vectors: st.Vectors}
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

// Registered is the answer to a job registration or a rank join: what was
// registered and the incarnation the registering process belongs to,
// which its later batches name (docs/design/roles-and-runs.md).
type Registered struct {
	*signal.Job
	Incarnation int `json:"incarnation"`
}

// putJob registers a job: 201 when new, 200 when the same registration
// arrives again (every rank of a job sends it) or opens a new incarnation
// (a restart, a resubmission), 409 when it contradicts its incarnation in
// a way that would make stored vectors meaningless.
func (a *API) putJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !a.requireJSON(w, r) {
		return
	}
	nj, p, err := laggardv1.DecodeJob(r.Body, id, a.d.MaxBodyBytes)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	before := -1
	if old, err := a.d.Catalog.Get(id); err == nil {
		before = old.Current()
	}
	j, inc, created, err := a.d.Catalog.Register(nj, p, func(err error) bool { return errors.Is(err, store.ErrNotFound) })
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	out := Registered{Job: j.Public(), Incarnation: inc}
	if created {
		a.d.Log.Info("job registered", "job", id, "world_size", j.WorldSize, "stages", len(j.Schema.Stages), "accumulation", j.Accumulation, "run_id", j.RunID)
		writeJSON(w, http.StatusCreated, out)
		return
	}
	a.noteIncarnation(j, before)
	writeJSON(w, http.StatusOK, out)
}

// noteIncarnation logs and counts a registration that opened a new
// incarnation of j (newest before it: before).
func (a *API) noteIncarnation(j *signal.Job, before int) {
	if before < 0 || j.Current() <= before {
		return
	}
	in, _ := j.Incarnation(j.Current())
	if a.d.Metrics != nil {
		a.d.Metrics.incarnations.WithLabelValues(string(in.Reason)).Inc()
	}
	a.d.Log.Info("job restarted: new incarnation", "job", j.ID, "incarnation", in.N, "reason", in.Reason, "detail", in.Detail)
}
