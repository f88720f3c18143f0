package api

import (
	"net/http"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
)

// report serves the job report (internal/analysis): the default window
// (steady part since the latest change point) unless last=N or from/to
// choose one, compared with a reference (automatic, ref_from/ref_to, or
// compare=<job>), per role group.
func (a *API) report(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, req, ok := a.request(w, r)
	if !ok {
		return
	}
	rep, err := a.d.Reporter.Run(r.Context(), req)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	a.d.Metrics.reportSeconds.Observe(time.Since(start).Seconds())
	if a.d.OnReport != nil {
		a.d.OnReport(rep)
	}
	writeJSON(w, http.StatusOK, rep)
}

// request resolves the job and parses the report/export parameters, or
// writes the error.
func (a *API) request(w http.ResponseWriter, r *http.Request) (*signal.Job, analysis.Request, bool) {
	job, ok := a.job(w, r)
	if !ok {
		return nil, analysis.Request{}, false
	}
	req, err := analysis.ParseRequest(job.ID, r.URL.Query())
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return nil, req, false
	}
	return job, req, true
}
