package api

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"

	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

type decoder func(io.Reader, *signal.Job, int64) ([]stagevec.Vector, error)

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
		return laggardv1.DecodeJSONBatch, encodingJSON, nil
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf":
		return laggardv1.DecodeProtoBatch, encodingProto, nil
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

// checkStepRange refuses a batch holding a step far outside the job's
// stored range (D1; the rule and its reasons are at stagevec.StepRange):
// one such vector would stretch every later "last N steps" window and
// could not be taken back. A job with no stored steps is anchored at the
// batch's smallest step. The error names the vector, the job's stored
// range and the accepted one.
func (a *API) checkStepRange(jobID string, vs []stagevec.Vector) error {
	st, err := a.d.Reader.Stats(jobID)
	if err != nil {
		// The absolute bound (stagevec.MaxStep) still holds; an
		// unreadable summary must not stop ingest.
		a.d.Log.Debug("step range check skipped", "job", jobID, "err", err)
		return nil
	}
	first, last := st.FirstStep, st.LastStep
	stored := st.Vectors > 0
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
		have := fmt.Sprintf("the job's stored steps are [%d, %d]", st.FirstStep, st.LastStep)
		if !stored {
			have = fmt.Sprintf("the job has no stored steps and this batch's smallest is %d", first)
		}
		return signal.FieldErrorf("vectors["+strconv.Itoa(i)+"].step",
			"%d is far outside job %q's range: %s, so steps must lie in [%d, %d] (a corrupt or reset step counter?)",
			s, signal.Clip(jobID), have, lo, hi)
	}
	return nil
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
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unsupported Content-Encoding %q", signal.Clip(enc)))
		return
	}
	if r.ContentLength > a.d.MaxBodyBytes {
		a.reject(w, r, http.StatusRequestEntityTooLarge, reasonTooLarge,
			fmt.Errorf("%w: %d bytes, the limit is %d; send smaller batches", laggardv1.ErrTooLarge, r.ContentLength, a.d.MaxBodyBytes))
		return
	}
	decode, encoding, err := bodyDecoder(r)
	if err != nil {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, err)
		return
	}
	body := &countingReader{r: r.Body}
	vs, err := decode(body, job, a.d.MaxBodyBytes)
	if err != nil {
		status := statusOf(err)
		a.reject(w, r, status, reasonFor(status, reasonInvalid), err)
		return
	}
	if len(vs) == 0 {
		writeJSON(w, http.StatusOK, map[string]int{"accepted": 0})
		return
	}
	if err := a.checkStepRange(job.ID, vs); err != nil {
		a.reject(w, r, http.StatusBadRequest, reasonInvalid, err)
		return
	}
	done, err := a.d.Vectors.Submit(job.ID, vs, len(vs), body.n)
	switch {
	case errors.Is(err, ingest.ErrFull):
		m.noteShed(a.d.Log, job.ID, a.d.Vectors.Depth())
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(1, a.d.RetryAfter.Seconds())))))
		a.reject(w, r, http.StatusTooManyRequests, reasonQueueFull, err)
		return
	case err != nil:
		a.reject(w, r, http.StatusServiceUnavailable, reasonShutdown, err)
		return
	}
	select {
	case err := <-done:
		var fe *signal.FieldError
		switch {
		case errors.As(err, &fe): // a value the store cannot represent
			a.reject(w, r, http.StatusBadRequest, reasonInvalid, err)
			return
		case err != nil:
			status := statusOf(err) // 507 + Retry-After when the disk is full (D7)
			a.reject(w, r, status, reasonFor(status, reasonStoreError), fmt.Errorf("storing batch: %w", err))
			return
		}
		m.countStored(job.ID, encoding, vs, body.n)
		writeJSON(w, http.StatusOK, map[string]int{"accepted": len(vs)})
	case <-r.Context().Done():
		// The client left; the batch still commits (it was valid), it
		// just cannot be acknowledged. A retry overwrites the same keys.
	}
}

func reasonFor(status int, reason string) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return reasonTooLarge
	case http.StatusInternalServerError:
		return reasonStoreError
	case http.StatusConflict:
		return reasonConflict
	}
	return reason
}

func (a *API) reject(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	a.d.Metrics.rejected.WithLabelValues(reason).Inc()
	a.fail(w, r, status, err)
}
