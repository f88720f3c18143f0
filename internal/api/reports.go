package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
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
	// Encode before the status line: a report that cannot be encoded (a
	// non-finite number is a bug) must be a logged 500 with an error
	// body, never a 200 with an empty or cut body (D5).
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(rep); err != nil {
		a.fail(w, r, http.StatusInternalServerError, fmt.Errorf("job %q: cannot encode the report: %w", signal.Clip(req.Job), err))
		return
	}
	a.d.Metrics.reportSeconds.Observe(time.Since(start).Seconds())
	if a.d.OnReport != nil {
		a.d.OnReport(rep)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w) // a failed write means the client left
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
