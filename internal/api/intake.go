package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/laggard-dev/laggard/internal/ingest"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// The ingest path every signal kind's POST shares (docs/design/
// ingest-fairness.md): header checks, the gated body read and decode, and
// queueing in bounded parts acknowledged together. Only decoding and the
// payload differ per kind.

// Queue is the ingest queue every signal kind's requests are committed by.
type Queue = ingest.Queue[*ingest.Item]

// Committer is what Commit stores into; *store.Store implements it.
type Committer interface {
	AppendMany([]store.Batch) error
}

// CollectiveCommitter is the optional store method behind collective
// ingest; *store.Store implements it.
type CollectiveCommitter interface {
	AppendCollectivesMany([]store.CollectiveBatch) ([]store.CollectiveAppend, error)
}

// ProfileCommitter is the optional store method set behind stack and OS
// ingest (stacks.go); *store.Store implements it.
type ProfileCommitter interface {
	AppendStacksMany([]store.StackBatch) ([]store.StackAppend, error)
	AppendOSStatsMany([]store.OSStatBatch) ([]store.StackAppend, error)
}

// Commit is the queue writer's group commit over st: each signal kind's
// requests in one store write (vectors and collectives are separate
// writes, each request stored entirely or not at all).
func Commit(st Committer) ingest.Commit[*ingest.Item] {
	cs, _ := st.(CollectiveCommitter)
	ps, _ := st.(ProfileCommitter)
	// stored are requests whose write succeeded in a group commit that
	// failed as a whole (the other kind's write failed): the queue then
	// retries the group's requests one by one, and a stored request must
	// not be written again (a second fsync, or collectives answered as
	// duplicates). Each is retried exactly once, which removes it.
	var mu sync.Mutex
	stored := map[*ingest.Item]bool{}
	return func(reqs []*ingest.Request[*ingest.Item]) error {
		var vb []store.Batch
		var vreqs, creqs, done []*ingest.Item
		var cb []store.CollectiveBatch
		var sb []store.StackBatch
		var ob []store.OSStatBatch
		var sreqs, oreqs []*ingest.Item
		for _, r := range reqs {
			if r.Payload.Parts.Refused() {
				// A part after a refused one: refused too. In a group,
				// fail the group: the queue then commits its requests
				// one by one and only this one gets the error.
				return ingest.ErrPartRefused
			}
		}
		mu.Lock()
		for _, r := range reqs {
			if stored[r.Payload] {
				delete(stored, r.Payload)
				continue
			}
			if b := r.Payload.Stacks; b != nil {
				sb = append(sb, store.StackBatch{JobID: r.Job, Batch: b})
				sreqs = append(sreqs, r.Payload)
				continue
			}
			if b := r.Payload.OSStats; b != nil {
				ob = append(ob, store.OSStatBatch{JobID: r.Job, Batch: b})
				oreqs = append(oreqs, r.Payload)
				continue
			}
			if c := r.Payload.Collectives; c != nil {
				cb = append(cb, store.CollectiveBatch{JobID: r.Job, Batch: c})
				creqs = append(creqs, r.Payload)
				continue
			}
			vb = append(vb, store.Batch{JobID: r.Job, Vectors: r.Payload.Vectors})
			vreqs = append(vreqs, r.Payload)
		}
		mu.Unlock()
		err := func() error {
			if len(cb) > 0 {
				// Collectives first: a client can make their write fail
				// (a communicator conflict is 409), and nothing is stored
				// yet then.
				if cs == nil {
					return errors.New("this store does not keep collective calls")
				}
				res, err := cs.AppendCollectivesMany(cb)
				if err != nil {
					return err
				}
				for i, r := range res {
					creqs[i].Stored = ingest.Stored{Records: r.Calls, Comms: r.Comms, Duplicates: r.Duplicates}
				}
				done = append(done, creqs...)
			}
			if len(sb)+len(ob) > 0 && ps == nil {
				return errors.New("this store does not keep stacks or OS stats")
			}
			for _, k := range []struct {
				reqs  []*ingest.Item
				write func() ([]store.StackAppend, error)
			}{{sreqs, func() ([]store.StackAppend, error) { return ps.AppendStacksMany(sb) }},
				{oreqs, func() ([]store.StackAppend, error) { return ps.AppendOSStatsMany(ob) }}} {
				if len(k.reqs) == 0 {
					continue
				}
				res, err := k.write()
				if err != nil {
					return err
				}
				for i, r := range res {
					k.reqs[i].Stored = ingest.Stored{Records: r.Records, Samples: r.Samples, Duplicates: r.Duplicates}
				}
				done = append(done, k.reqs...)
			}
			if len(vb) > 0 {
				if err := st.AppendMany(vb); err != nil {
					return err
				}
				for _, it := range vreqs {
					it.Stored = ingest.Stored{Records: len(it.Vectors)}
				}
			}
			return nil
		}()
		if err != nil && len(reqs) > 1 && len(done) > 0 {
			mu.Lock()
			for _, it := range done {
				stored[it] = true
			}
			mu.Unlock()
		}
		if err != nil && len(reqs) == 1 {
			reqs[0].Payload.Parts.Refuse() // this request's own failure
		}
		return err
	}
}

// checkBodyHeaders refuses, before anything is read, a body the server
// will not decode: a content coding (415; bodies are sent identity), a
// declared length over the limit (413).
func (a *API) checkBodyHeaders(w http.ResponseWriter, r *http.Request) bool {
	if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		a.reject(w, r, http.StatusUnsupportedMediaType, reasonMediaType, fmt.Errorf("unsupported Content-Encoding %q", signal.Clip(enc)))
		return false
	}
	if r.ContentLength > a.d.MaxBodyBytes {
		a.reject(w, r, http.StatusRequestEntityTooLarge, reasonTooLarge,
			fmt.Errorf("%w: %d bytes, the limit is %d; send smaller batches", laggardv1.ErrTooLarge, r.ContentLength, a.d.MaxBodyBytes))
		return false
	}
	return true
}

// readGated sheds a job that holds its share of the queue, then reads the
// body through the gate and calls decode with it (taking a decode slot for
// a large body). It returns the body's size; on false the answer is
// written. decode's errors are answered with their status (400, 413).
func (a *API) readGated(w http.ResponseWriter, r *http.Request, job string, decode func(b []byte) error) (int64, bool) {
	// Shed a job that already holds its share of the queue before its
	// body is read: refusing it then costs a header, not a decode (D2).
	// The admission holds the body's estimated cost until it is decoded,
	// so a flood's concurrent posts do not all pass on the same room.
	release, err := a.d.Vectors.Hold(job, r.ContentLength) // a length of -1 (unknown) counts as 1
	if err != nil {
		a.shed(w, r, job, err)
		return 0, false
	}
	defer release()
	body := &countingReader{r: r.Body}
	in := &gatedReader{r: body, g: a.d.Gate, job: job}
	defer in.close()
	err = readBody(in, a.d.MaxBodyBytes, r.ContentLength, func(b []byte) error {
		// Decoding a large body is the CPU-heavy part: it takes one of a
		// few slots, handed round-robin between jobs (ingest.Gate). A
		// small body decodes in microseconds and goes straight through,
		// so a job's small post never waits for another job's decode.
		if a.d.Gate != nil && len(b) > ingest.SmallBody {
			release, err := a.d.Gate.Acquire(r.Context(), job)
			if err != nil {
				in.err = err
				return err
			}
			defer release()
		}
		return decode(b)
	})
	// The body buffer is gone once decoded; its bytes leave the gate and
	// the decoded records are charged to the queue from here on.
	in.close()
	if in.err != nil {
		if errors.Is(in.err, ingest.ErrFull) { // not a client that left while waiting
			a.d.Vectors.CountShed(in.err)
		}
		a.shed(w, r, job, in.err)
		return 0, false
	}
	if err != nil {
		status := statusOf(err)
		a.reject(w, r, status, reasonFor(status, reasonInvalid), err)
		return 0, false
	}
	return body.n, true
}

// readBody reads all of r, failing with laggardv1.ErrTooLarge past limit
// bytes, and calls fn with the body (valid only during fn). Its buffer
// grows as bytes arrive (so a client that declares a large body and
// trickles it holds no memory it has not sent, and the gate's count of
// arrived bytes is what the buffer holds), doubling, but never past the
// declared length: a 4 MB body used to end in an 8 MB buffer (the growth
// that finds EOF doubled it), half of it uncharged — with 64 flooding
// connections, 200 MB of body buffers where the gate counted 128 MB
// (issue 16 item 9).
func readBody(r io.Reader, limit, declared int64, fn func(b []byte) error) error {
	if limit <= 0 {
		limit = laggardv1.DefaultLimit
	}
	end := limit + 1 // reading one byte past the limit tells 413 from a full body
	if declared >= 0 && declared < limit {
		end = declared + 1 // +1: room for the read that sees EOF
	}
	var buf []byte
	if end <= smallBuf {
		p := smallBufs.Get().(*[]byte)
		defer smallBufs.Put(p)
		buf = (*p)[:0]
	}
	for {
		if len(buf) == cap(buf) {
			n := min(max(2*int64(cap(buf)), 4<<10), end)
			if n <= int64(len(buf)) {
				n = int64(len(buf)) + 4<<10 // past the declared length: net/http stops it there, so only a bad reader gets here
			}
			nb := make([]byte, len(buf), n) // not append: it may round past the declared length
			copy(nb, buf)
			buf = nb
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if int64(len(buf)) > limit {
			return fmt.Errorf("%w: more than %d bytes", laggardv1.ErrTooLarge, limit)
		}
		if err == io.EOF {
			return fn(buf)
		}
		if err != nil {
			if errors.Is(err, laggardv1.ErrTooLarge) {
				return err
			}
			return &signal.FieldError{Field: "body", Msg: "reading: " + signal.Clip(err.Error())}
		}
	}
}

// smallBufs recycles the buffers of small bodies (a client's usual batch
// of a few hundred records): decoded values never alias the body.
var smallBufs = sync.Pool{New: func() any { b := make([]byte, 0, smallBuf); return &b }}

const smallBuf = 64 << 10

// part is one queue request of a batch: its payload, its record count and
// the index of its first record in the batch (for error messages).
type part struct {
	item  *ingest.Item
	items int
	first int
	// orig, if set, maps a record's index in the part to its index in the
	// posted batch (a part whose records were reordered: stackParts);
	// else that index is first + the index in the part.
	orig []int
}

// batchField renames a field path the store gave within the part
// ("samples[4].count") to the posted batch's ("samples[4100].count").
func (p part) batchField(field, what string) string {
	if p.orig == nil {
		return shiftIndex(field, what, p.first)
	}
	return mapIndex(field, what, func(i int) int {
		if i >= 0 && i < len(p.orig) {
			return p.orig[i]
		}
		return i
	})
}

// commitParts queues a batch's parts and waits until every one is
// durable. Each part is one bounded commit, so another job's post is
// committed between a flood's parts instead of waiting for one huge
// commit (D2). Parts of a batch that is not acknowledged may be stored; a
// retry rewrites the same keys. bodyN is charged to the parts pro rata.
// what names the records in errors ("vectors", "calls").
func (a *API) commitParts(w http.ResponseWriter, r *http.Request, job, what string, parts []part, bodyN int64) bool {
	total := 0
	for _, p := range parts {
		total += p.items
	}
	dones := make([]<-chan error, 0, len(parts))
	var shared *ingest.Parts
	if len(parts) > 1 {
		shared = &ingest.Parts{}
	}
	for _, p := range parts {
		p.item.Parts = shared
		done, err := a.d.Vectors.Submit(job, p.item, p.items, bodyN*int64(p.items)/int64(max(total, 1)))
		switch {
		case errors.Is(err, ingest.ErrFull):
			a.shed(w, r, job, err)
			return false
		case err != nil:
			a.reject(w, r, http.StatusServiceUnavailable, reasonShutdown, err)
			return false
		}
		dones = append(dones, done)
	}
	for i, done := range dones {
		var err error
		select {
		case err = <-done:
		case <-r.Context().Done():
			// The client left; the batch still commits (it was valid),
			// it just cannot be acknowledged.
			return false
		}
		var fe *signal.FieldError
		var ce *signal.ConflictError
		resent := errors.Is(err, store.ErrConflict)
		if err != nil && len(dones) > 1 {
			// The store names records within the part: name them in the
			// batch ("calls[4100].pid", not "calls[4].pid").
			switch {
			case errors.As(err, &ce):
				idx := make([]int, len(ce.Indexes))
				for k, x := range ce.Indexes {
					idx[k] = parts[i].first + x
				}
				err = &signal.ConflictError{Field: parts[i].batchField(ce.Field, what), Indexes: idx, Msg: ce.Msg + fmt.Sprintf(
					" (this batch went to the store in %d parts of at most %d records; parts before the one refused, records [0, %d), may be stored: resend the batch without the conflicting record, and they are duplicates)",
					len(parts), parts[0].items, parts[i].first)}
			case errors.As(err, &fe):
				err = &signal.FieldError{Field: parts[i].batchField(fe.Field, what), Msg: fe.Msg}
			default:
				err = fmt.Errorf("%s from index %d: %w", what, parts[i].first, err)
			}
		}
		switch {
		case errors.As(err, &ce): // 409: a re-sent record that differs from the stored one, or a communicator report contradicting the stored one
			if resent {
				a.d.Metrics.noteConflict(a.d.Log, job, what, ce)
			}
			a.reject(w, r, http.StatusConflict, reasonConflict, err)
			return false
		case errors.As(err, &fe): // a value the store cannot represent
			a.reject(w, r, http.StatusBadRequest, reasonInvalid, err)
			return false
		case err != nil:
			status := statusOf(err) // 507 + Retry-After when the disk is full (D7)
			a.reject(w, r, status, reasonFor(status, reasonStoreError), fmt.Errorf("storing batch: %w", err))
			return false
		}
	}
	return true
}

// collectiveParts splits a collective batch into queue parts of at most
// collectivePart calls; communicator reports and drops travel with the
// first.
func collectiveParts(b *collective.Batch) []part {
	if len(b.Calls) <= collectivePart {
		return []part{{item: &ingest.Item{Collectives: b}, items: len(b.Calls) + len(b.Comms)}}
	}
	parts := make([]part, 0, (len(b.Calls)+collectivePart-1)/collectivePart)
	for off := 0; off < len(b.Calls); off += collectivePart {
		end := min(off+collectivePart, len(b.Calls))
		pb := &collective.Batch{Calls: b.Calls[off:end:end]} // capped: the queue charges a part's capacity
		if off == 0 {
			pb.Comms, pb.Dropped = b.Comms, b.Dropped
		}
		parts = append(parts, part{item: &ingest.Item{Collectives: pb}, items: len(pb.Calls) + len(pb.Comms), first: off})
	}
	return parts
}

// collectivePart is the most calls one queue request holds: about 0.7 MiB
// of decoded cost, under the queue's commit bound (1 MiB), and ~3 ms of
// store work (BenchmarkAppendCollectives).
const collectivePart = 4096

// shiftIndex adds off to the index of a field path "what[i]…".
func shiftIndex(field, what string, off int) string {
	return mapIndex(field, what, func(i int) int { return i + off })
}

// mapIndex maps the index of a field path "what[i]…" through f.
func mapIndex(field, what string, f func(int) int) string {
	rest, ok := strings.CutPrefix(field, what+"[")
	if !ok {
		return field
	}
	num, tail, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(num)
	if !ok || err != nil {
		return field
	}
	return what + "[" + strconv.Itoa(f(i)) + "]" + tail
}
