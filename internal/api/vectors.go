package api

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

type decoder func([]byte, laggardv1.JobAt) (laggardv1.Batch, error)

// bodyDecoder picks the decoder for the request's Content-Type. Only the
// JSON and protobuf types are accepted: an absent type, and the types an
// HTML form can send cross-site without a CORS preflight
// (application/x-www-form-urlencoded, multipart/form-data, text/plain),
// are refused with 415, so a page in a browser cannot forge a post (D4).
func bodyDecoder(r *http.Request) (decoder, string, error) {
	mt, err := mediaType(r)
	if err != nil {
		return nil, "", err
	}
	switch mt {
	case "application/json":
		return laggardv1.UnmarshalJSONBatchAt, encodingJSON, nil
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf":
		return laggardv1.UnmarshalProtoBatchAt, encodingProto, nil
	}
	return nil, "", fmt.Errorf("unsupported Content-Type %q: send application/json or application/x-protobuf", signal.Clip(mt))
}

// mediaType returns the request body's media type, or an error when the
// Content-Type is absent or malformed.
func mediaType(r *http.Request) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", errors.New("missing Content-Type: send application/json or application/x-protobuf")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", fmt.Errorf("bad Content-Type %q: %v", signal.Clip(ct), err)
	}
	return mt, nil
}

// requireJSON refuses, with 415, a job registration or rank join whose
// body is not declared application/json (D4: see bodyDecoder).
func (a *API) requireJSON(w http.ResponseWriter, r *http.Request) bool {
	mt, err := mediaType(r)
	if err == nil && mt != "application/json" {
		err = fmt.Errorf("unsupported Content-Type %q: send application/json", signal.Clip(mt))
	}
	if err != nil {
		a.fail(w, r, http.StatusUnsupportedMediaType, err)
		return false
	}
	return true
}

// checkStepRange refuses a batch holding a step far outside its
// incarnation's stored range (D1; the rule and its reasons are at
// stagevec.StepRange): one such vector would stretch every later "last N
// steps" window and could not be taken back. An incarnation with no
// stored steps is anchored at the batch's smallest step (a restart may
// resume anywhere). The error names the vector, the stored range and the
// accepted one.
func (a *API) checkStepRange(jobID string, inc int, vs []stagevec.Vector) error {
	first, last, stored, err := a.stepSpan(jobID, inc)
	if err != nil {
		// The absolute bound (stagevec.MaxStep) still holds; an
		// unreadable summary must not stop ingest.
		a.d.Log.Debug("step range check skipped", "job", jobID, "err", err)
		return nil
	}
	if !stored {
		first = vs[0].Step
		for i := range vs {
			first = min(first, vs[i].Step)
		}
		last = first
	}
	lo, hi := stagevec.StepRange(first, last)
	for i := range vs {
		s := vs[i].Step
		if s >= lo && s <= hi {
			continue
		}
		have := fmt.Sprintf("its incarnation %d's stored steps are [%d, %d]", inc, first, last)
		if !stored {
			have = fmt.Sprintf("its incarnation %d has no stored steps and this batch's smallest is %d", inc, first)
		}
		return signal.FieldErrorf("vectors["+strconv.Itoa(i)+"].step",
			"%d is far outside job %q's range: %s, so steps must lie in [%d, %d] (a corrupt or reset step counter?)",
			s, signal.Clip(jobID), have, lo, hi)
	}
	return nil
}

// stepSpan is incarnation inc's first and last stored training step:
// from the job's in-memory stats when all its vectors are inc's (a job
// launched once, the common case), else two seeks.
func (a *API) stepSpan(jobID string, inc int) (first, last int64, ok bool, err error) {
	st, err := a.d.Reader.Stats(jobID)
	if err != nil {
		return -1, -1, false, err
	}
	if st.Vectors == 0 {
		return -1, -1, false, nil
	}
	fi, fs := stagevec.SplitOrdinal(st.FirstStep)
	li, ls := stagevec.SplitOrdinal(st.LastStep)
	if fi == inc && li == inc {
		return fs, ls, true, nil
	}
	return analysis.LaunchSteps(a.d.Reader, jobID, inc)
}

// incarnationParam reads a request's optional ?incarnation=N: the launch
// the calling process belongs to (docs/design/roles-and-runs.md); -1 when
// absent. One the job never had is a 400, one older than the server
// describes a 409 (jobAt).
func incarnationParam(r *http.Request, job *signal.Job) (int, error) {
	v := r.URL.Query().Get("incarnation")
	if v == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > signal.MaxIncarnation {
		return -1, signal.FieldErrorf("incarnation", "must be an integer in [0, %d], got %q", signal.MaxIncarnation, signal.Clip(v))
	}
	if _, err := jobAt(job)(n); err != nil {
		return -1, err
	}
	return n, nil
}

// jobAt resolves the incarnation a batch names for the decoder: the job as
// that incarnation saw it (its world size and stage lists validate the
// vectors). One the job never had is a 400; one older than the server
// describes is a 409.
func jobAt(job *signal.Job) laggardv1.JobAt {
	return func(inc int) (*signal.Job, error) {
		switch {
		case inc < 0:
			return job, nil
		case inc > job.Current():
			return nil, signal.FieldErrorf("incarnation", "job %q has no incarnation %d (its newest is %d); a process learns its incarnation from the job registration and rank join answers", signal.Clip(job.ID), inc, job.Current())
		}
		if _, ok := job.Incarnation(inc); !ok {
			return nil, &signal.ConflictError{Field: "incarnation", Msg: fmt.Sprintf("incarnation %d of job %q is older than the %d the server describes; its data can no longer be added to", inc, signal.Clip(job.ID), signal.KeepIncarnations)}
		}
		return job.At(inc), nil
	}
}

// shed answers 429 + Retry-After for a request the queue or the gate
// refused (queue full, the job's share, no decode slot in time), or 503
// once the server is shutting down.
func (a *API) shed(w http.ResponseWriter, r *http.Request, job string, err error) {
	if !errors.Is(err, ingest.ErrFull) { // shutting down, or the client left while waiting
		a.reject(w, r, http.StatusServiceUnavailable, reasonShutdown, err)
		return
	}
	a.d.Metrics.noteShed(a.d.Log, job, a.d.Vectors.Depth())
	if errors.Is(err, ingest.ErrJobShare) {
		// This job already holds its share while others are served: a
		// client that ignores Retry-After (64 connections re-posting 4 MB
		// bodies every few ms) would turn shedding into a busy loop of
		// connections and refused bodies, which takes the CPU another
		// job's post needs (issue 16 item 13). Answer it after a short
		// pause; another job's post is never paused.
		t := time.NewTimer(shedPause)
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(1, a.d.RetryAfter.Seconds())))))
	a.reject(w, r, http.StatusTooManyRequests, reasonQueueFull, err)
}

// shedPause is how long a job over its share waits for its 429.
const shedPause = 250 * time.Millisecond

// gatedReader counts the body bytes it has received in the gate's
// in-flight budget — bytes that arrived, not the Content-Length, or a
// client promising a large body and trickling it would hold budget for
// free — and returns them on close. A refused reservation ends the read
// with err set.
type gatedReader struct {
	r        io.Reader
	g        *ingest.Gate
	job      string
	reserved int64
	err      error
}

func (gr *gatedReader) Read(p []byte) (int, error) {
	if gr.err != nil {
		return 0, gr.err
	}
	n, err := gr.r.Read(p)
	if gr.g != nil && n > 0 {
		if rerr := gr.g.Reserve(gr.job, int64(n)); rerr != nil {
			gr.err = rerr
			return 0, rerr
		}
		gr.reserved += int64(n)
	}
	return n, err
}

func (gr *gatedReader) close() {
	if gr.g != nil {
		gr.g.Return(gr.job, gr.reserved)
		gr.reserved = 0
	}
}

// countingReader counts body bytes for the ingest bytes metric.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ingestVectors validates a batch completely (nothing is stored on any
// error), queues it and answers only after the writer has committed it.
func (a *API) ingestVectors(w http.ResponseWriter, r *http.Request) {
	m := a.d.Metrics
	id := r.PathValue("id")
	job, err := a.d.Catalog.Get(id)
	if err != nil {
		err = fmt.Errorf("unknown job %q: %w", signal.Clip(id), err)
		status := statusOf(err)
		a.reject(w, r, status, reasonFor(status, reasonUnknownJob), err)
		return
	}
	if !a.checkBodyHeaders(w, r) {
		return
	}
	decode, encoding, err := bodyDecoder(r)
	if err != nil {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, err)
		return
	}
	var bt laggardv1.Batch
	n, ok := a.readGated(w, r, job.ID, func(b []byte) (err error) {
		bt, err = decode(b, jobAt(job))
		return err
	})
	if !ok {
		return
	}
	vs, inc := bt.Vectors, bt.Incarnation
	if inc < 0 {
		inc = job.Current()
	}
	if len(vs) == 0 {
		writeJSON(w, http.StatusOK, map[string]int{"accepted": 0})
		return
	}
	if err := a.checkStepRange(job.ID, inc, vs); err != nil {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, err)
		return
	}
	// Stored steps are ordinals: each incarnation's vectors are their own
	// keys, so a restart re-sending steps never lands on an earlier
	// launch's (docs/design/roles-and-runs.md).
	for i := range vs {
		vs[i].Step = stagevec.Ordinal(inc, vs[i].Step)
	}
	// A large batch goes to the queue in parts of at most submitPart
	// vectors, acknowledged together (commitParts).
	parts := make([]part, 0, (len(vs)+submitPart-1)/submitPart)
	for off := 0; off < len(vs); off += submitPart {
		end := min(off+submitPart, len(vs))
		p := vs[off:end:end] // capped: the queue charges a part's capacity
		parts = append(parts, part{item: &ingest.Item{Vectors: p}, items: len(p), first: off})
	}
	if !a.commitParts(w, r, job.ID, "vectors", parts, n) {
		return
	}
	m.countStored(job.ID, encoding, vs, n)
	writeJSON(w, http.StatusOK, map[string]int{"accepted": len(vs)})
}

// submitPart is the most vectors one queue request holds: about 0.4 MiB
// of decoded cost at 6 stages, a few milliseconds of commit work, under
// the queue's commit bound (1 MiB) so parts of several jobs share a
// commit.
const submitPart = 2048

func reasonFor(status int, reason string) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return reasonTooLarge
	case http.StatusInternalServerError:
		return reasonStoreError
	case http.StatusInsufficientStorage:
		return reasonDiskFull
	case http.StatusConflict:
		return reasonConflict
	}
	return reason
}

func (a *API) reject(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	a.d.Metrics.rejected.WithLabelValues(reason).Inc()
	a.fail(w, r, status, err)
}
