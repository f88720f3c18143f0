package api

import (
	"fmt"
	"net/http"

	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

// export streams the job's stage matrix as JSONL: a {"job": ...} header
// line, then one vector per line in (step, rank, micro) order, for
// from/to (default: everything stored). An error after the first byte can
// only abort the connection, so a truncated export is never mistaken for a
// complete one.
func (a *API) export(w http.ResponseWriter, r *http.Request) {
	job, req, ok := a.request(w, r)
	if !ok {
		return
	}
	st, err := a.d.Reader.Stats(job.ID)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	from, to := st.FirstStep, st.LastStep
	if req.From != nil {
		from = *req.From
	}
	if req.To != nil {
		to = *req.To
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", job.ID+".jsonl"))
	jw, err := stagefile.NewWriter(w, job)
	if err == nil && st.Vectors > 0 && from <= to {
		err = a.d.Reader.Scan(job.ID, from, to, jw.Write)
	}
	if err == nil {
		err = jw.Flush()
	}
	if err != nil {
		if r.Context().Err() == nil {
			a.d.Log.Warn("export aborted", "job", job.ID, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}
