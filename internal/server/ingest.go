package server

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// decodeStatus maps a wire decoder error to its HTTP status.
func decodeStatus(err error) int {
	if errors.Is(err, laggardv1.ErrTooLarge) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

type decoder func(io.Reader, *signal.Job, int64) ([]stagevec.Vector, error)

// bodyDecoder picks the decoder for the request's Content-Type; an absent
// type means JSON.
func bodyDecoder(r *http.Request) (decoder, string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return laggardv1.DecodeJSONBatch, encodingJSON, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return nil, "", fmt.Errorf("bad Content-Type %q: %v", ct, err)
	}
	switch mt {
	case "application/json",
		// curl -d sends this by default; the body is still parsed strictly.
		"application/x-www-form-urlencoded":
		return laggardv1.DecodeJSONBatch, encodingJSON, nil
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf":
		return laggardv1.DecodeProtoBatch, encodingProto, nil
	}
	return nil, "", fmt.Errorf("unsupported Content-Type %q: send application/json or application/x-protobuf", mt)
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

// handleIngest validates a batch completely (nothing is stored on any
// error), queues it and answers only after the writer has committed it.
func (s *Server) handleIngest(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	job, status, err := s.job(id)
	if err != nil {
		s.reject(w, r, status, reasonFor(status, reasonUnknownJob), err)
		return
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		s.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unsupported Content-Encoding %q", enc))
		return
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		s.reject(w, r, http.StatusRequestEntityTooLarge, reasonTooLarge,
			fmt.Errorf("%w: %d bytes, the limit is %d; send smaller batches", laggardv1.ErrTooLarge, r.ContentLength, s.cfg.MaxBodyBytes))
		return
	}
	decode, encoding, err := bodyDecoder(r)
	if err != nil {
		s.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, err)
		return
	}
	body := &countingReader{r: r.Body}
	vs, err := decode(body, job, s.cfg.MaxBodyBytes)
	if err != nil {
		status := decodeStatus(err)
		s.reject(w, r, status, reasonFor(status, reasonInvalid), err)
		return
	}
	if len(vs) == 0 {
		writeJSON(w, http.StatusOK, map[string]int{"accepted": 0})
		return
	}
	p := &pending{job: job.ID, encoding: encoding, vectors: vs, bytes: body.n, done: make(chan error, 1)}
	switch err := s.q.submit(p); {
	case errors.Is(err, errQueueFull):
		s.m.shed.Inc()
		s.shed.note(s.log, job.ID, s.q.depth())
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(1, s.cfg.RetryAfter.Seconds())))))
		s.reject(w, r, http.StatusTooManyRequests, reasonQueueFull, err)
		return
	case err != nil:
		s.reject(w, r, http.StatusServiceUnavailable, reasonShutdown, err)
		return
	}
	select {
	case err := <-p.done:
		var fe *signal.FieldError
		switch {
		case errors.As(err, &fe): // a value the store cannot represent
			s.reject(w, r, http.StatusBadRequest, reasonInvalid, err)
			return
		case err != nil:
			s.reject(w, r, http.StatusInternalServerError, reasonStoreError, fmt.Errorf("storing batch: %w", err))
			return
		}
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
	}
	return reason
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, status int, reason string, err error) {
	s.m.rejected.WithLabelValues(reason).Inc()
	s.fail(w, r, status, err)
}
