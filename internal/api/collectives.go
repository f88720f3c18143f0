package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// CollectiveReader reads the collective keyspace; *store.Store implements
// it.
type CollectiveReader interface {
	ScanCalls(job string, q store.CallQuery, fn func(*collective.Call) error) error
	Comms(job string) ([]collective.Comm, error)
	CollectiveStats(job string) (store.CollectiveStats, error)
}

// CollectivesAnswer is the answer to a collective post.
type CollectivesAnswer struct {
	AcceptedCalls int `json:"accepted_calls"`
	AcceptedComms int `json:"accepted_comms"`
	// Duplicates are calls already stored (a resent batch): not counted
	// again.
	Duplicates int `json:"duplicates"`
}

// ingestCollectives stores a collective batch (POST
// /api/v1/jobs/{id}/collectives) through the same bounded, fair path as
// stage vectors (intake.go). An unknown job is registered implicitly with
// the world size of ?world=N: a pure-NCCL job's agent is the only thing
// that knows about it (catalog.ImplicitJob).
func (a *API) ingestCollectives(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if a.d.Collectives == nil {
		a.reject(w, r, http.StatusNotImplemented, reasonStoreError, errors.New("this server does not store collective calls"))
		return
	}
	var implicit *signal.Job
	job, err := a.d.Catalog.Get(id)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrNotFound):
		if implicit, err = implicitJob(id, r.URL.Query().Get("world"), err); err != nil {
			status := statusOf(err)
			a.reject(w, r, status, reasonFor(status, reasonUnknownJob), err)
			return
		}
		job = implicit
	default:
		a.reject(w, r, statusOf(err), reasonStoreError, err)
		return
	}
	if !a.checkBodyHeaders(w, r) {
		return
	}
	decode, encoding, err := collectiveDecoder(r)
	if err != nil {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, err)
		return
	}
	var b *collective.Batch
	n, ok := a.readGated(w, r, id, func(body []byte) (err error) {
		if b, err = decode(body, worldAt(job)); err != nil {
			return err
		}
		return b.CheckClock(time.Now().UnixNano()) // one time rule for every signal
	})
	if !ok {
		return
	}
	// Each incarnation's calls are stored apart: a restarted job's
	// process groups keep their names and number their calls from 0
	// again (docs/design/roles-and-runs.md, "Collectives").
	inc := job.Current()
	if b.Incarnation != nil {
		inc = *b.Incarnation
	}
	b.Namespace(inc)
	if implicit != nil {
		// Registered only once the batch is valid, so a bad post leaves
		// no job behind. A registration that raced this one must agree
		// on the world size (409 otherwise).
		if _, _, err := a.d.Catalog.RegisterImplicit(implicit.ID, implicit.WorldSize, implicit.Schema, func(err error) bool { return errors.Is(err, store.ErrNotFound) }); err != nil {
			status := statusOf(err)
			a.reject(w, r, status, reasonFor(status, reasonStoreError), err)
			return
		}
		a.d.Log.Info("job registered by collective ingest", "job", id, "world_size", implicit.WorldSize)
	}
	if len(b.Calls) == 0 && len(b.Comms) == 0 && b.Dropped == 0 {
		writeJSON(w, http.StatusOK, CollectivesAnswer{})
		return
	}
	parts := collectiveParts(b)
	steps := [][]part{parts}
	if len(parts) > 1 && len(b.Comms) > 0 {
		// The first part carries the communicator reports: commit it
		// alone first, so a conflicting report (409) stores no calls.
		steps = [][]part{parts[:1], parts[1:]}
	}
	for _, ps := range steps {
		if !a.commitParts(w, r, id, "calls", ps, n*int64(len(ps))/int64(len(parts))) {
			return
		}
	}
	var ans CollectivesAnswer
	for _, p := range parts {
		ans.AcceptedCalls += p.item.Stored.Records
		ans.AcceptedComms += p.item.Stored.Comms
		ans.Duplicates += p.item.Stored.Duplicates
	}
	a.d.Metrics.countCalls(id, encoding, ans.AcceptedCalls, n)
	writeJSON(w, http.StatusOK, ans)
}

// implicitJob is the registration of unknown job id from its ?world=.
func implicitJob(id, world string, notFound error) (*signal.Job, error) {
	if world == "" {
		return nil, fmt.Errorf("unknown job %q: register it, or pass its world size as ?world=N to register it from collective ingest: %w", signal.Clip(id), notFound)
	}
	n, err := strconv.Atoi(world)
	if err != nil || n < 1 || n > signal.MaxWorldSize {
		return nil, signal.FieldErrorf("world", "must be an integer in [1, %d], got %q", signal.MaxWorldSize, signal.Clip(world))
	}
	j := catalog.ImplicitJob(id, n, stagevec.DefaultSchema())
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return j, nil
}

// worldAt resolves the incarnation a collective batch names to the world
// size its records are validated against (jobAt's rules: one the job
// never had is a 400, one older than the server describes a 409).
func worldAt(job *signal.Job) laggardv1.WorldAt {
	at := jobAt(job)
	return func(inc int) (int, error) {
		j, err := at(inc)
		if err != nil {
			return 0, err
		}
		return j.WorldSize, nil
	}
}

// collectiveDecoder picks the decoder for the request's Content-Type with
// the rules of bodyDecoder (JSON or protobuf only, D4).
func collectiveDecoder(r *http.Request) (func([]byte, laggardv1.WorldAt) (*collective.Batch, error), string, error) {
	mt, err := mediaType(r)
	if err != nil {
		return nil, "", err
	}
	switch mt {
	case "application/json":
		return laggardv1.UnmarshalJSONCollectivesAt, encodingJSON, nil
	case "application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf":
		return laggardv1.UnmarshalProtoCollectivesAt, encodingProto, nil
	}
	return nil, "", fmt.Errorf("unsupported Content-Type %q: send application/json or application/x-protobuf", signal.Clip(mt))
}

// Bounds of GET /collectives: ?limit=N lines (default, maximum).
const (
	defaultCallLimit = 100_000
	maxCallLimit     = 1_000_000
)

// listCollectives streams a job's calls as JSON lines (GET
// /api/v1/jobs/{id}/collectives?from_ns=&to_ns=&rank=&limit=), by rank,
// then enter time. When the limit cut the answer short, the trailer
// Laggard-Truncated is "true"; when the scan failed after lines were
// sent, it is "true" too and the trailer Laggard-Error says why (a scan
// that fails before any line is sent is an ordinary error answer).
func (a *API) listCollectives(w http.ResponseWriter, r *http.Request) {
	j, ok := a.collectiveJob(w, r)
	if !ok {
		return
	}
	q := store.CallQuery{Rank: -1}
	limit := int64(defaultCallLimit)
	for _, p := range []struct {
		name   string
		dst    *int64
		lo, hi int64
	}{{"from_ns", &q.FromNS, 0, collective.MaxNS}, {"to_ns", &q.ToNS, 0, collective.MaxNS}, {"limit", &limit, 1, maxCallLimit}} {
		v := r.URL.Query().Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < p.lo || n > p.hi {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf(p.name, "must be an integer in [%d, %d], got %q", p.lo, p.hi, signal.Clip(v)))
			return
		}
		*p.dst = n
	}
	if v := r.URL.Query().Get("rank"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n >= j.WorldSize {
			a.fail(w, r, http.StatusBadRequest, signal.FieldErrorf("rank", "must be an integer in [0, %d), got %q", j.WorldSize, signal.Clip(v)))
			return
		}
		q.Rank = n
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Trailer", "Laggard-Truncated, Laggard-Error")
	sent := &countingWriter{w: w}
	bw := bufio.NewWriterSize(sent, 64<<10)
	enc := json.NewEncoder(bw)
	var n int64
	errLimit := errors.New("limit")
	err := a.d.Collectives.ScanCalls(j.ID, q, func(c *collective.Call) error {
		if n == limit {
			return errLimit
		}
		n++
		return enc.Encode(c)
	})
	failed := err != nil && !errors.Is(err, errLimit)
	if failed && sent.n == 0 {
		// Nothing on the wire yet (the lines are still buffered): drop
		// them and answer a proper error.
		w.Header().Del("Trailer")
		a.fail(w, r, statusOf(err), err)
		return
	}
	if failed {
		a.d.Log.Warn("collective scan failed mid-answer", "job", j.ID, "lines", n, "err", err)
	}
	_ = bw.Flush() // a failed write means the client left
	// The answer is incomplete when the limit cut it or the scan failed
	// after lines went out (a 200 is already sent): the trailers say so.
	w.Header().Set("Laggard-Truncated", strconv.FormatBool(err != nil))
	if failed {
		w.Header().Set("Laggard-Error", signal.Clip(strings.ReplaceAll(err.Error(), "\n", " ")))
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// collectiveJob is a.job for the collective reads: 501 when this server
// does not store collective calls.
func (a *API) collectiveJob(w http.ResponseWriter, r *http.Request) (*signal.Job, bool) {
	j, ok := a.job(w, r)
	if !ok {
		return nil, false
	}
	if a.d.Collectives == nil {
		a.fail(w, r, http.StatusNotImplemented, errors.New("this server does not store collective calls"))
		return nil, false
	}
	return j, true
}

// listComms answers a job's communicators, the members' reports merged
// (GET /api/v1/jobs/{id}/comms).
func (a *API) listComms(w http.ResponseWriter, r *http.Request) {
	j, ok := a.collectiveJob(w, r)
	if !ok {
		return
	}
	comms, err := a.d.Collectives.Comms(j.ID)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	if comms == nil {
		comms = []collective.Comm{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"comms": comms})
}
