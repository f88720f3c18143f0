package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Batch is one job's vectors for AppendMany.
type Batch struct {
	JobID   string
	Vectors []stagevec.Vector
}

// Append stores vs for jobID in one atomic, fsync'd write: when it returns
// nil every vector is durable; on error none was stored. A vector whose
// (step, rank, micro) is already stored with the same values is a
// duplicate (a retry): acknowledged, not written again. One stored with
// other values is a conflict: the call fails with ErrConflict (a
// *signal.ConflictError naming "vectors[i]" and the cell) and stores
// nothing; so does a batch holding one cell twice with different values
// (a *signal.FieldError). The job must have been put first (ErrNotFound
// otherwise). Vectors are not checked against the job schema — callers
// run stagevec.Vector.Validate — only for what the key layout and codec
// can represent, reported as a *signal.FieldError naming
// "vectors[i].<field>".
func (s *Store) Append(jobID string, vs []stagevec.Vector) error {
	return s.AppendMany([]Batch{{JobID: jobID, Vectors: vs}})
}

// AppendMany is Append for several jobs' batches at once: all of them go
// into ONE Pebble batch and ONE WAL fsync (group commit), and are stored
// entirely or not at all. Batches may repeat a job id.
func (s *Store) AppendMany(batches []Batch) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()

	// Phase 1, no locks: check, encode and sort every batch.
	total := 0
	enc := make([]*encoded, 0, len(batches))
	defer func() {
		for _, e := range enc {
			scratchPool.Put(e)
		}
	}()
	wrap := func(bi int, job string, err error) error {
		if len(batches) == 1 {
			return fmt.Errorf("store: job %q: %w", job, err)
		}
		return fmt.Errorf("store: job %q (batch %d): %w", job, bi, err)
	}
	jobs := make([]string, 0, len(batches))
	for bi := range batches {
		b := &batches[bi]
		if !s.hasJob(b.JobID) {
			return notFound(b.JobID)
		}
		total += len(b.Vectors)
		e := scratchPool.Get().(*encoded)
		enc = append(enc, e)
		if err := e.encode(b.JobID, b.Vectors); err != nil {
			return wrap(bi, b.JobID, err)
		}
		jobs = append(jobs, b.JobID)
	}
	if total == 0 {
		return nil
	}
	need := int64(0)
	for _, e := range enc {
		need += int64(len(e.keys) + len(e.vals))
	}
	if err := s.writable(need); err != nil {
		return err
	}

	// Phase 2, under the jobs' locks: tell new vectors from re-sent ones
	// (a conflict fails the write), then apply. Per job, so one job's
	// re-sent history does not hold up another job's commit.
	unlock := s.locks.lock(jobs...)
	pb := s.db.NewBatch()
	var err error
	for _, e := range enc {
		// DeleteJob (which holds the job's lock) may have run since
		// phase 1: never write vectors, or stats, for a job that is gone.
		if !s.hasJob(e.job) {
			err = notFound(e.job)
			break
		}
	}
	var next map[string]JobStats
	if err == nil {
		var bi int
		next, bi, err = s.nextStats(enc)
		if err != nil && bi >= 0 {
			err = wrap(bi, enc[bi].job, err)
		}
	}
	for _, e := range enc {
		for _, i := range e.fresh {
			if err == nil {
				err = pb.Set(e.key(i), e.val(i), nil)
			}
		}
	}
	now := time.Now().UnixMilli()
	if err == nil {
		for id, st := range next {
			if err = pb.Set(statsKey(id), encodeStats(st, now), nil); err != nil {
				break
			}
		}
	}
	applied := false
	if err == nil {
		err = s.guard(func() error {
			if s.wo.Sync {
				return s.db.ApplyNoSyncWait(pb, s.wo)
			}
			return s.db.Apply(pb, s.wo)
		})
		applied = true
	}
	if err != nil {
		// The tails may already include this write; rebuild them from
		// disk on the next write.
		s.tailMu.Lock()
		for _, e := range enc {
			delete(s.tails, e.job)
		}
		s.tailMu.Unlock()
		unlock()
		if !applied {
			pb.Close()
		} // else Pebble may still own the batch after a failed apply
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrDiskFull) || errors.Is(err, ErrConflict) {
			return err
		}
		var fe *signal.FieldError
		if errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("store: append: %w", err)
	}
	s.mu.Lock()
	for id, st := range next {
		s.stats[id] = st
		s.lastWrite[id] = now
	}
	s.mu.Unlock()
	unlock()

	// Phase 3, no locks: wait for the WAL fsync, shared with any writers
	// that committed meanwhile. Re-sent duplicates were not written, but
	// the batch holds the stats key, so this also waits for the fsync of
	// whatever write stored them first.
	if s.wo.Sync {
		if err := s.guard(pb.SyncWait); err != nil {
			return fmt.Errorf("store: append: wal sync: %w", err)
		}
	}
	return pb.Close()
}

// nextStats sorts each batch's vectors into new ones (e.fresh, to be
// written), duplicates (skipped) and conflicts (an error, with the index
// of its batch), and computes each touched job's stats after the write,
// counting only new keys. Keys above LastStep or below FirstStep are new
// by construction; keys in the recent-steps window are answered by the
// job's tail index when absent; a key the tail holds, or a late key older
// than the window, is read back and compared. Called with the jobs'
// locks held; updates the tails, which the caller drops if the write
// then fails.
func (s *Store) nextStats(enc []*encoded) (map[string]JobStats, int, error) {
	next := make(map[string]JobStats, len(enc))
	shape := make(map[string]dims, len(enc))
	s.mu.RLock()
	for _, e := range enc {
		if _, ok := next[e.job]; !ok {
			st, ok := s.stats[e.job]
			if !ok {
				st = emptyStats
			}
			next[e.job] = st
			shape[e.job] = s.dims[e.job]
		}
	}
	s.mu.RUnlock()
	var probe *keyProbe
	defer func() {
		if probe != nil {
			probe.close()
		}
	}()
	for ei, e := range enc {
		old := next[e.job]
		st := old
		t, err := s.tail(e.job, shape[e.job], old)
		if err != nil {
			return nil, -1, err
		}
		if probe == nil || !bytes.Equal(probe.lo, vecPrefix(e.job)) {
			if probe != nil {
				probe.close()
			}
			probe = &keyProbe{s: s, lo: vecPrefix(e.job), hi: vecPrefixEnd(e.job)}
		}
		shared := sameJobEarlier(enc[:ei], e.job)
		e.fresh = e.fresh[:0]
		// Every re-sent vector with other values is found before the
		// batch is refused: the 409 names the first and lists them all
		// (bounded), so a client drops them in one answer.
		var refused *conflictErr
		for _, i := range e.order {
			key := e.key(i)
			step, rank, micro, _ := parseVecSuffix(key)
			t.advance(step)
			check := false
			if known, present := t.testAndSet(step, rank, micro); known {
				check = present || shared
			} else {
				check = shared || old.covers(step)
			}
			if check {
				stored, err := s.storedVec(probe, e, i, enc[:ei])
				if err != nil {
					return nil, -1, err
				}
				if stored != nil {
					if !bytes.Equal(stored, e.val(i)) {
						if refused == nil {
							refused = &conflictErr{signal.ConflictError{Field: fmt.Sprintf("vectors[%d]", i), Msg: fmt.Sprintf(
								"%s, rank %d, micro %d is already stored with other values (%s); a re-sent vector must be identical to the stored one, and nothing of this batch was stored",
								cellStep(step), rank, micro, vecDiff(stored, e.val(i), "stored", "sent"))}}
						}
						if len(refused.Indexes) < maxListedConflicts {
							refused.Indexes = append(refused.Indexes, int(i))
						}
					}
					continue // an identical re-send: nothing to write
				}
			}
			e.fresh = append(e.fresh, i)
			st.add(step)
		}
		if refused != nil {
			slices.Sort(refused.Indexes)
			if n := len(refused.Indexes); n > 1 {
				refused.Msg += fmt.Sprintf(" (%d re-sent vectors of this batch differ: conflicts lists them)", n)
			}
			return nil, ei, refused
		}
		next[e.job] = st
	}
	return next, -1, nil
}

// maxListedConflicts bounds the indexes a 409 lists (a client re-sending
// a whole run lists at most this many per answer; it drops those and asks
// again).
const maxListedConflicts = 4096

// cellStep names a stored (ordinal) step as the client knows it: the
// training step, and the incarnation when it is not the first launch (a
// 409 naming ordinal 281474976710685 would tell a user nothing).
func cellStep(ord int64) string {
	inc, step := stagevec.SplitOrdinal(ord)
	if inc == 0 {
		return fmt.Sprintf("step %d", step)
	}
	return fmt.Sprintf("step %d of incarnation %d", step, inc)
}

// tail returns job's tail index, loading it on first use or when the
// job's shape changed. Called with the job's lock held.
func (s *Store) tail(job string, d dims, st JobStats) (*tail, error) {
	s.tailMu.Lock()
	t := s.tails[job]
	s.tailMu.Unlock()
	if t != nil && t.dims == d {
		return t, nil
	}
	t, err := s.loadTail(job, d, st)
	if err != nil {
		return nil, err
	}
	s.tailMu.Lock()
	s.tails[job] = t
	s.tailMu.Unlock()
	return t, nil
}

// sameJobEarlier is true when an earlier batch of the same AppendMany call
// is for job, so keys may collide across batches.
func sameJobEarlier(earlier []*encoded, job string) bool {
	for _, p := range earlier {
		if p.job == job {
			return true
		}
	}
	return false
}

// storedVec returns the value key i of e has in an earlier batch of this
// call (the latest such) or else in the store, or nil when it has none.
func (s *Store) storedVec(probe *keyProbe, e *encoded, i int32, earlier []*encoded) ([]byte, error) {
	key := e.key(i)
	for k := len(earlier) - 1; k >= 0; k-- {
		if p := earlier[k]; p.job == e.job {
			if v, ok := p.lookup(key); ok {
				return v, nil
			}
		}
	}
	return probe.get(key)
}

// encoded is one batch's keys and values, sorted and de-duplicated. Pooled:
// at ~3000 values per call its buffers are the main per-call garbage.
type encoded struct {
	job   string
	klen  int
	keys  []byte  // n fixed-length keys back to back
	vals  []byte  // values back to back
	voff  []int32 // value i is vals[voff[i]:voff[i+1]]
	steps []int64
	order []int32 // indices in ascending key order, identical duplicates removed
	fresh []int32 // of order, the keys to write (not stored yet); set by nextStats
}

var scratchPool = sync.Pool{New: func() any { return new(encoded) }}

func (e *encoded) key(i int32) []byte { return e.keys[int(i)*e.klen : int(i+1)*e.klen] }
func (e *encoded) val(i int32) []byte { return e.vals[e.voff[i]:e.voff[i+1]] }

// lookup returns key's value among e's (sorted) keys.
func (e *encoded) lookup(key []byte) ([]byte, bool) {
	k, ok := slices.BinarySearchFunc(e.order, key, func(i int32, k []byte) int { return bytes.Compare(e.key(i), k) })
	if !ok {
		return nil, false
	}
	return e.val(e.order[k]), true
}

func (e *encoded) encode(job string, vs []stagevec.Vector) error {
	if len(vs) > math.MaxInt32/2 {
		return fmt.Errorf("too many vectors (%d)", len(vs))
	}
	prefix := vecPrefix(job)
	e.job, e.klen = job, len(prefix)+vecSuffixLen
	e.keys, e.vals = e.keys[:0], e.vals[:0]
	e.voff, e.steps, e.order = append(e.voff[:0], 0), e.steps[:0], e.order[:0]
	sorted := true
	for i := range vs {
		v := &vs[i]
		if err := checkEncodable(v); err != nil {
			fe := err.(*signal.FieldError)
			return &signal.FieldError{Field: fmt.Sprintf("vectors[%d].%s", i, fe.Field), Msg: fe.Msg}
		}
		e.keys = appendVecSuffix(append(e.keys, prefix...), v.Step, v.Rank, v.Micro)
		e.vals = appendValue(e.vals, v)
		if len(e.vals) > math.MaxInt32 {
			return fmt.Errorf("batch values exceed 2 GiB")
		}
		e.voff = append(e.voff, int32(len(e.vals)))
		e.steps = append(e.steps, v.Step)
		e.order = append(e.order, int32(i))
		if i > 0 && sorted && bytes.Compare(e.key(int32(i-1)), e.key(int32(i))) >= 0 {
			sorted = false
		}
	}
	if sorted { // the common case: clients ship in (step, rank) order
		return nil
	}
	// Stable, so equal keys keep their order in the batch.
	slices.SortStableFunc(e.order, func(a, b int32) int { return bytes.Compare(e.key(a), e.key(b)) })
	out := e.order[:0]
	for k, i := range e.order {
		if k+1 < len(e.order) && bytes.Equal(e.key(i), e.key(e.order[k+1])) {
			if j := e.order[k+1]; !bytes.Equal(e.val(i), e.val(j)) {
				// One cell twice with different values: which one is
				// meant? Refused, like any malformed batch.
				step, rank, micro, _ := parseVecSuffix(e.key(i))
				return &signal.FieldError{Field: fmt.Sprintf("vectors[%d]", j), Msg: fmt.Sprintf(
					"%s, rank %d, micro %d is also vectors[%d] with other values (%s): send each vector once",
					cellStep(step), rank, micro, i, vecDiff(e.val(i), e.val(j), fmt.Sprintf("in vectors[%d]", i), fmt.Sprintf("in vectors[%d]", j)))}
			}
			continue // the same vector twice: stored once
		}
		out = append(out, i)
	}
	e.order = out
	return nil
}

// Scan calls fn for every stored vector of jobID with fromStep <= step <=
// toStep, in ascending (step, rank, micro) order, stopping at (and
// returning unchanged) the first error fn returns.
//
// v is reused between calls, including its Durations slice and Probes map:
// fn must copy what it keeps beyond the call (see CloneVector). A value
// that cannot be decoded stops the scan with an error wrapping ErrCorrupt
// that names the key.
func (s *Store) Scan(jobID string, fromStep, toStep int64, fn func(v *stagevec.Vector) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if !s.hasJob(jobID) {
		return notFound(jobID)
	}
	fromStep = max(fromStep, 0)
	if toStep < fromStep {
		return nil
	}
	lo := vecKey(jobID, fromStep, 0, 0)
	hi := vecPrefixEnd(jobID)
	if toStep < math.MaxInt64 {
		hi = vecKey(jobID, toStep+1, 0, 0)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: scan %q: %w", jobID, err)
	}
	var (
		dec valueDecoder
		v   stagevec.Vector
	)
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		step, rank, micro, ok := parseVecSuffix(key)
		if !ok || len(key) != len(lo) {
			it.Close()
			return fmt.Errorf("store: key %s: %w: malformed vector key", keyString(key), ErrCorrupt)
		}
		val, err := it.ValueAndErr()
		if err == nil {
			err = dec.decode(val, &v)
		}
		if err != nil {
			it.Close()
			return fmt.Errorf("store: key %s: %w", keyString(key), err)
		}
		v.Step, v.Rank, v.Micro = step, rank, micro
		if err := fn(&v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: scan %q: %w", jobID, err)
	}
	return nil
}

// CloneVector returns a deep copy of v, for Scan callbacks that keep
// vectors.
func CloneVector(v *stagevec.Vector) stagevec.Vector {
	c := *v
	c.Durations = slices.Clone(v.Durations)
	if v.Probes != nil {
		c.Probes = make(map[string]stagevec.Probe, len(v.Probes))
		for k, p := range v.Probes {
			c.Probes[k] = p
		}
	}
	return c
}

// LastSteps returns the range [from, to] holding the last n distinct stored
// steps of jobID (fewer if the job has fewer); ok is false when it has no
// vectors or n < 1. See LastStepsIn.
func (s *Store) LastSteps(jobID string, n int) (from, to int64, ok bool, err error) {
	from, to, got, err := s.LastStepsIn(jobID, 0, math.MaxInt64, n)
	return from, to, got > 0, err
}
