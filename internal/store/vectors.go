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
// (step, rank, micro) is already stored replaces it (latest wins; within
// one call the later element wins). The job must have been put first
// (ErrNotFound otherwise). Vectors are not checked against the job
// schema — callers run stagevec.Vector.Validate — only for what the key
// layout and codec can represent, reported as a *signal.FieldError naming
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
	for bi := range batches {
		b := &batches[bi]
		if !s.hasJob(b.JobID) {
			return notFound(b.JobID)
		}
		total += len(b.Vectors)
		e := scratchPool.Get().(*encoded)
		enc = append(enc, e)
		if err := e.encode(b.JobID, b.Vectors); err != nil {
			if len(batches) == 1 {
				return fmt.Errorf("store: job %q: %w", b.JobID, err)
			}
			return fmt.Errorf("store: job %q (batch %d): %w", b.JobID, bi, err)
		}
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
	pb := s.db.NewBatch()
	for _, e := range enc {
		for _, i := range e.order {
			if err := pb.Set(e.key(i), e.val(i), nil); err != nil {
				pb.Close()
				return fmt.Errorf("store: batch: %w", err)
			}
		}
	}

	// Phase 2, under wmu: duplicate check against stored keys, stats, and
	// the memtable apply. Serialized so each writer sees the previous
	// writer's keys when counting distinct vectors.
	s.wmu.Lock()
	var err error
	for _, e := range enc {
		// DeleteJob (which holds wmu) may have run since phase 1: never
		// write vectors, or stats, for a job that is gone.
		if !s.hasJob(e.job) {
			err = notFound(e.job)
			break
		}
	}
	var next map[string]JobStats
	if err == nil {
		next, err = s.nextStats(enc)
	}
	now := time.Now().UnixMilli()
	if err == nil {
		for id, st := range next {
			if err = pb.Set(statsKey(id), encodeStats(st, now), nil); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = s.guard(func() error {
			if s.wo.Sync {
				return s.db.ApplyNoSyncWait(pb, s.wo)
			}
			return s.db.Apply(pb, s.wo)
		})
	}
	if err != nil {
		// The tails may already include this write; rebuild them from
		// disk on the next write.
		for _, e := range enc {
			delete(s.tails, e.job)
		}
		s.wmu.Unlock()
		// Not closed: after a failed apply Pebble may still own the batch.
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrDiskFull) {
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
	s.wmu.Unlock()

	// Phase 3, no locks: wait for the WAL fsync, shared with any writers
	// that committed meanwhile.
	if s.wo.Sync {
		if err := s.guard(pb.SyncWait); err != nil {
			return fmt.Errorf("store: append: wal sync: %w", err)
		}
	}
	return pb.Close()
}

// nextStats computes each touched job's stats after the write, counting
// only keys not already stored. Keys above LastStep or below FirstStep are
// new by construction; keys in the recent-steps window are answered by the
// job's tail index; only late keys older than that cost a bloom-filtered
// probe. Called with wmu held; updates the tails, which the caller drops
// if the write then fails.
func (s *Store) nextStats(enc []*encoded) (map[string]JobStats, error) {
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
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			it.Close()
		}
	}()
	for ei, e := range enc {
		old := next[e.job]
		st := old
		t := s.tails[e.job]
		if t == nil || t.dims != shape[e.job] {
			var err error
			if t, err = s.loadTail(e.job, shape[e.job], old); err != nil {
				return nil, err
			}
			s.tails[e.job] = t
		}
		if ei > 0 && e.job != enc[ei-1].job && it != nil {
			it.Close()
			it = nil
		}
		shared := sameJobEarlier(enc[:ei], e.job)
		for _, i := range e.order {
			step, rank, micro, _ := parseVecSuffix(e.key(i))
			t.advance(step)
			if known, present := t.testAndSet(step, rank, micro); known {
				if present {
					continue
				}
			} else if shared || old.covers(step) {
				isNew, err := s.absent(&it, e, i, enc[:ei])
				if err != nil {
					return nil, err
				}
				if !isNew {
					continue
				}
			}
			st.add(step)
		}
		next[e.job] = st
	}
	return next, nil
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

// absent reports whether key i of e is neither stored nor in an earlier
// batch of this call.
func (s *Store) absent(it **pebble.Iterator, e *encoded, i int32, earlier []*encoded) (bool, error) {
	key := e.key(i)
	for _, p := range earlier {
		if p.job == e.job && p.has(key) {
			return false, nil
		}
	}
	if *it == nil {
		var err error
		*it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: vecPrefix(e.job), UpperBound: vecPrefixEnd(e.job)})
		if err != nil {
			return false, fmt.Errorf("store: duplicate check: %w", err)
		}
	}
	// SeekPrefixGE with the default comparer (prefix = whole key) is an
	// exact-key probe that consults bloom filters.
	if (*it).SeekPrefixGE(key) && bytes.Equal((*it).Key(), key) {
		return false, nil
	}
	if err := (*it).Error(); err != nil {
		return false, fmt.Errorf("store: duplicate check: %w", err)
	}
	return true, nil
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
	order []int32 // indices in ascending key order, duplicates removed (last wins)
}

var scratchPool = sync.Pool{New: func() any { return new(encoded) }}

func (e *encoded) key(i int32) []byte { return e.keys[int(i)*e.klen : int(i+1)*e.klen] }
func (e *encoded) val(i int32) []byte { return e.vals[e.voff[i]:e.voff[i+1]] }

// has reports whether key is among e's (sorted) keys.
func (e *encoded) has(key []byte) bool {
	_, ok := slices.BinarySearchFunc(e.order, key, func(i int32, k []byte) int { return bytes.Compare(e.key(i), k) })
	return ok
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
	// Stable, so among equal keys the later vector sorts last and wins.
	slices.SortStableFunc(e.order, func(a, b int32) int { return bytes.Compare(e.key(a), e.key(b)) })
	out := e.order[:0]
	for k, i := range e.order {
		if k+1 < len(e.order) && bytes.Equal(e.key(i), e.key(e.order[k+1])) {
			continue
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
