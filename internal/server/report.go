package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

// window is a resolved inclusive step range.
type window struct{ from, to int64 }

// resolveWindow reads last=N or from=A&to=B. A missing bound of from/to
// defaults to the job's first or last stored step. ok is false when the
// job has no vectors in range.
func (s *Server) resolveWindow(job *signal.Job, q url.Values, allowLast bool) (w window, ok bool, err error) {
	_, hasFrom := q["from"]
	_, hasTo := q["to"]
	if hasFrom || hasTo {
		if q.Has("last") {
			return w, false, &signal.FieldError{Field: "last", Msg: "use either last or from/to"}
		}
		st, err := s.st.Stats(job.ID)
		if err != nil {
			return w, false, err
		}
		w = window{st.FirstStep, st.LastStep}
		if hasFrom {
			if w.from, err = stepParam(q, "from"); err != nil {
				return w, false, err
			}
		}
		if hasTo {
			if w.to, err = stepParam(q, "to"); err != nil {
				return w, false, err
			}
		}
		if w.from > w.to && hasFrom && hasTo {
			return w, false, &signal.FieldError{Field: "to", Msg: fmt.Sprintf("%d is before from=%d", w.to, w.from)}
		}
		// Clamp to what is stored: the window (and its cell count) never
		// covers steps that cannot have data.
		w.from, w.to = max(w.from, st.FirstStep), min(w.to, st.LastStep)
		return w, st.Vectors > 0 && w.from <= w.to, nil
	}
	n := s.cfg.ReportSteps
	if !allowLast {
		st, err := s.st.Stats(job.ID)
		if err != nil {
			return w, false, err
		}
		return window{st.FirstStep, st.LastStep}, st.Vectors > 0, nil
	}
	if v := q.Get("last"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 {
			return w, false, &signal.FieldError{Field: "last", Msg: fmt.Sprintf("must be a positive integer, got %q", v)}
		}
		n = x
	}
	from, to, ok, err := s.st.LastSteps(job.ID, n)
	return window{from, to}, ok, err
}

func stepParam(q url.Values, name string) (int64, error) {
	v, err := strconv.ParseInt(q.Get(name), 10, 64)
	if err != nil || v < 0 {
		return 0, &signal.FieldError{Field: name, Msg: fmt.Sprintf("must be a step number >= 0, got %q", q.Get(name))}
	}
	return v, nil
}

// reportConfig is stagefrontier.DefaultConfig with the job's declared
// workload semantics, overridden by query parameters.
func reportConfig(job *signal.Job, q url.Values) (stagefrontier.Config, error) {
	cfg := stagefrontier.DefaultConfig()
	cfg.ModelFit = stagefrontier.ModelFitFromJob(job)
	if v := q.Get("tau"); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0 && x <= 1) {
			return cfg, &signal.FieldError{Field: "tau", Msg: fmt.Sprintf("must be in (0, 1], got %q", v)}
		}
		cfg.CandidateThreshold = x // StageFrontier §4 routing threshold τ
	}
	if v := q.Get("model_fit"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, &signal.FieldError{Field: "model_fit", Msg: fmt.Sprintf("must be true or false, got %q", v)}
		}
		cfg.ModelFit = b // App. C sync-wait model-fit indicator m
	}
	return cfg, nil
}

// checkCells refuses windows whose dense matrix would be too large to
// assemble: T steps × R ranks × S effective stages (schema stages ×
// accumulation factor, StageFrontier §3).
func (s *Server) checkCells(job *signal.Job, w window) error {
	steps := w.to - w.from + 1
	perStep := int64(job.WorldSize) * int64(len(job.Schema.Stages)) * int64(max(job.Accumulation, 1))
	if steps > s.cfg.MaxReportCells/max(perStep, 1) {
		return fmt.Errorf("window of %d steps × %d ranks × %d stages exceeds the limit of %d cells; ask for fewer steps (last=N or from/to)",
			steps, job.WorldSize, perStep/int64(job.WorldSize), s.cfg.MaxReportCells)
	}
	return nil
}

func (s *Server) handleReport(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	job, status, err := s.job(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	q := r.URL.Query()
	cfg, err := reportConfig(job, q)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	win, ok, err := s.resolveWindow(job, q, true)
	if err != nil {
		s.fail(w, r, paramStatus(err), err)
		return
	}
	if !ok {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("job %q has no vectors in the requested window", job.ID))
		return
	}
	if err := s.checkCells(job, win); err != nil {
		s.fail(w, r, http.StatusRequestEntityTooLarge, err)
		return
	}
	rep, err := s.analyze(job, win, cfg)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("analysis failed: %w", err))
		return
	}
	s.m.reportSeconds.Observe(time.Since(start).Seconds())
	s.setShare(job.ID, rep)
	writeJSON(w, http.StatusOK, rep)
}

// analyze streams the window (plus a prefetch lookback) from the store
// into the assembler and runs the frontier engine.
func (s *Server) analyze(job *signal.Job, win window, cfg stagefrontier.Config) (*stagefrontier.Report, error) {
	asm := stagefrontier.NewAssembler(job, stagefrontier.AssembleOptions{FromStep: win.from, ToStep: win.to})
	scanFrom := max(0, win.from-int64(s.cfg.PrefetchLookback))
	if err := s.st.Scan(job.ID, scanFrom, win.to, asm.Add); err != nil {
		return nil, err
	}
	wnd, err := asm.Finish()
	if err != nil {
		return nil, err
	}
	return stagefrontier.Analyze(wnd, cfg)
}

// setShare publishes the report's frontier shares (§3 eq.2). Old stage
// series of the job are dropped first so a schema's stages never linger.
func (s *Server) setShare(jobID string, rep *stagefrontier.Report) {
	s.m.share.DeletePartialMatch(map[string]string{labelJob: jobID})
	for i, st := range rep.Stages {
		if i < len(rep.Share) {
			s.m.share.WithLabelValues(jobID, st).Set(rep.Share[i])
		}
	}
}

func paramStatus(err error) int {
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		return http.StatusBadRequest
	}
	if isNotFound(err) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// handleExport streams the job's stage matrix as JSONL: a {"job": ...}
// header line, then one StageVector per line in (step, rank, micro)
// order. An error after the first byte can only abort the connection, so
// a truncated export is never mistaken for a complete one.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	job, status, err := s.job(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	win, ok, err := s.resolveWindow(job, r.URL.Query(), false)
	if err != nil {
		s.fail(w, r, paramStatus(err), err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", job.ID+".jsonl"))
	jw, err := stagefile.NewWriter(w, job)
	if err == nil && ok {
		err = s.st.Scan(job.ID, win.from, win.to, jw.Write)
	}
	if err == nil {
		err = jw.Flush()
	}
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Warn("export aborted", "job", job.ID, "err", err)
		}
		panic(http.ErrAbortHandler)
	}
}
