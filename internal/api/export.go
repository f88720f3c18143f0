package api

import (
	"fmt"
	"net/http"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

// export streams one incarnation's stage matrix (the newest unless
// ?incarnation=N) as JSONL: a {"job": ...} header line (the job as that
// incarnation saw it), then one vector per line in (step, rank, micro)
// order, for from/to (default: everything stored). An error after the
// first byte can only abort the connection, so a truncated export is
// never mistaken for a complete one.
func (a *API) export(w http.ResponseWriter, r *http.Request) {
	cur, req, ok := a.request(w, r)
	if !ok {
		return
	}
	inc := cur.Current()
	if req.Incarnation != nil {
		inc = *req.Incarnation
	}
	if inc == analysis.IncAll {
		a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf(analysis.ParamIncarnation, "an export holds one incarnation: ask for each (0–%d) in turn", cur.Current()))
		return
	}
	at, err := jobAt(cur)(inc)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	job := *at
	job.Incarnations = nil // the file holds this one incarnation
	first, last, stored, err := a.stepSpan(job.ID, inc)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	from, to := first, last
	if req.From != nil {
		from = *req.From
	}
	if req.To != nil {
		to = *req.To
	}
	// The headers go out with the first flushed bytes (the writer buffers
	// 64 KiB), so a failure before then is still a logged JSON 500, not
	// an empty 200 (D5).
	cw := &sentWriter{w: w, header: func() {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", job.ID+".jsonl"))
	}}
	jw, err := stagefile.NewWriter(cw, &job)
	if err == nil && stored && from <= to {
		lo, hi := stagevec.OrdinalRange(inc, from, to)
		err = a.d.Reader.Scan(job.ID, lo, hi, func(v *stagevec.Vector) error {
			_, v.Step = stagevec.SplitOrdinal(v.Step)
			return jw.Write(v)
		})
	}
	if err == nil {
		err = jw.Flush()
	}
	if err != nil {
		if r.Context().Err() != nil {
			panic(http.ErrAbortHandler) // the client left
		}
		if !cw.sent {
			a.fail(w, r, statusOf(err), fmt.Errorf("export of job %q failed: %w", job.ID, err))
			return
		}
		a.d.Log.Warn("export aborted", "job", job.ID, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// sentWriter records whether anything was written, setting the export's
// headers just before the first byte.
type sentWriter struct {
	w      http.ResponseWriter
	header func()
	sent   bool
}

func (s *sentWriter) Write(p []byte) (int, error) {
	if !s.sent {
		s.header()
		s.sent = true
	}
	return s.w.Write(p)
}
