package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// CollectiveBatch is one job's collective batch for AppendCollectivesMany.
type CollectiveBatch struct {
	JobID string
	Batch *collective.Batch
}

// CollectiveAppend is what one batch added: Calls new calls (duplicates
// of stored ones excluded), Comms communicator reports merged, and
// Duplicates calls that were already stored (a resent batch).
type CollectiveAppend struct {
	Calls, Comms, Duplicates int
}

// CallQuery selects calls for ScanCalls: enter_ns in [FromNS, ToNS]
// (0 = open on that side) and one rank, or every rank when Rank is -1.
type CallQuery struct {
	FromNS, ToNS int64
	Rank         int
}

// collectives is the store's in-memory index of the collective keyspace,
// per job: the interned communicator table, each (rank, comm)'s highest
// stored seq and the job's CollectiveStats. Loaded lazily from disk (m/,
// h/ and x/ keys, a few per rank and communicator, never the calls).
type collectives struct {
	mu   sync.Mutex
	jobs map[string]*collJob
}

type collJob struct {
	ids       map[string]uint32
	comms     []commRec // by index; ID "" for an index lost to a failed write
	persisted []bool    // comms[i] is on disk as it is in memory
	hw        map[uint64]int64
	stats     CollectiveStats // Ranks is derived from hw
	sizes     int64           // sum of the reported communicators' sizes
}

// Bounds on one job's communicator table: the table and the members are
// held in memory for as long as the job lives, so what one batch (and one
// job) may add is capped rather than left to the world size (a 1 MB body
// of size-2^20 reports must not ask for 64 GiB).
const (
	// MaxJobComms bounds the distinct communicator ids of a job (those
	// only seen in calls included).
	MaxJobComms = 1 << 16
	// MaxBatchCommSizes bounds the sum of the sizes of the communicators
	// first reported in one batch: one world communicator of 2^20 fits.
	MaxBatchCommSizes = collective.MaxCommSize
	// MaxJobCommSizes bounds the sum of the sizes of a job's reported
	// communicators (every member of each may be known).
	MaxJobCommSizes = 1 << 22
)

func hwKey(rank int, comm uint32) uint64 { return uint64(rank)<<32 | uint64(comm) }

// collJob returns job's index, loading it on first use. c.mu is held.
func (s *Store) collJob(job string) (*collJob, error) {
	if cj := s.coll.jobs[job]; cj != nil {
		return cj, nil
	}
	cj := &collJob{ids: map[string]uint32{}, hw: map[uint64]int64{}}
	pl := len(prefixComm) + len(job) + 1
	err := s.scanRange(jobRange(prefixComm, job, 8), func(k, v []byte) error {
		if len(k) != pl+4 && len(k) != pl+8 {
			return corrupt("communicator key of %d bytes", len(k))
		}
		idx := binary.BigEndian.Uint32(k[pl:])
		if idx >= MaxJobComms {
			return corrupt("communicator index %d", idx)
		}
		if len(k) == pl+8 { // a member: its header (a shorter key) came first
			cr := binary.BigEndian.Uint32(k[pl+4:])
			if int(idx) >= len(cj.comms) || !cj.persisted[idx] || int64(cr) >= int64(cj.comms[idx].Size) {
				return corrupt("member %d of communicator #%d without its communicator", cr, idx)
			}
			rank, err := decodeMember(v)
			if err != nil {
				return err
			}
			m := &cj.comms[idx]
			if _, dup := m.commRankOf(rank); dup {
				return corrupt("communicator %q lists rank %d twice", signal.Clip(m.ID), rank)
			}
			m.add(int32(cr), rank)
			return nil
		}
		m, err := decodeComm(v)
		if err != nil {
			return err
		}
		for len(cj.comms) <= int(idx) {
			cj.comms, cj.persisted = append(cj.comms, commRec{}), append(cj.persisted, false)
		}
		if _, dup := cj.ids[m.ID]; dup {
			return corrupt("communicator %q stored twice", signal.Clip(m.ID))
		}
		cj.comms[idx], cj.persisted[idx], cj.ids[m.ID] = m, true, idx
		cj.sizes += int64(m.Size)
		return nil
	})
	if err == nil {
		err = s.scanRange(jobRange(prefixHighWater, job, 8), func(k, v []byte) error {
			if len(k) < 8 || len(v) != 8 {
				return corrupt("high-water key or value malformed")
			}
			seq := binary.BigEndian.Uint64(v)
			if seq > uint64(collective.MaxSeq) {
				return corrupt("high-water seq %d", seq)
			}
			cj.hw[hwKey(int(binary.BigEndian.Uint32(k[len(k)-8:])), binary.BigEndian.Uint32(k[len(k)-4:]))] = int64(seq)
			return nil
		})
	}
	if err == nil {
		var v []byte
		var closer interface{ Close() error }
		v, closer, err = s.db.Get(collStatsKey(job))
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			err = nil
		case err == nil:
			cj.stats, err = decodeCollStats(v)
			closer.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store: job %q: collective index: %w", job, err)
	}
	if s.coll.jobs == nil {
		s.coll.jobs = map[string]*collJob{}
	}
	s.coll.jobs[job] = cj
	return cj, nil
}

// liveCollJob is collJob for a reader that checked hasJob before taking
// c.mu: a DeleteJob in between must not leave an index cached for a job
// that is gone. c.mu is held.
func (s *Store) liveCollJob(job string) (*collJob, error) {
	cj, err := s.collJob(job)
	if err == nil && !s.hasJob(job) {
		delete(s.coll.jobs, job)
		return nil, notFound(job)
	}
	return cj, err
}

// scanRange calls fn for every key in the range jobRange started.
func (s *Store) scanRange(lo []byte, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: rangeEnd(lo)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			it.Close()
			return fmt.Errorf("key %s: %w", keyString(it.Key()), err)
		}
	}
	return it.Close()
}

// intern returns comm id's index, adding it (unpersisted) if new. c.mu
// is held. An index is never reused, so one assigned for a write that
// then failed stays reserved; the record is written by the next write
// that uses it.
func (cj *collJob) intern(id string) (uint32, bool) {
	if i, ok := cj.ids[id]; ok {
		return i, true
	}
	if len(cj.comms) >= MaxJobComms {
		return 0, false
	}
	i := uint32(len(cj.comms))
	cj.ids[id] = i
	cj.comms = append(cj.comms, commRec{ID: id})
	cj.persisted = append(cj.persisted, false)
	return i, true
}

// collEncoded is one batch's calls encoded: keys sorted, identical
// duplicates within the batch removed (one key twice with different
// values is refused).
type collEncoded struct {
	job   string
	cj    *collJob
	batch *collective.Batch
	klen  int
	keys  []byte
	vals  []byte
	voff  []int32
	order []int32
	fresh []int32  // of order, the calls to write; set by collMerge
	comm  []uint32 // comm index per call
}

var collPool = sync.Pool{New: func() any { return new(collEncoded) }}

func (e *collEncoded) key(i int32) []byte { return e.keys[int(i)*e.klen : int(i+1)*e.klen] }
func (e *collEncoded) val(i int32) []byte { return e.vals[e.voff[i]:e.voff[i+1]] }

// lookup returns key's value among e's (sorted) keys.
func (e *collEncoded) lookup(key []byte) ([]byte, bool) {
	k, ok := slices.BinarySearchFunc(e.order, key, func(i int32, k []byte) int { return bytes.Compare(e.key(i), k) })
	if !ok {
		return nil, false
	}
	return e.val(e.order[k]), true
}

// klen0 is the job's key prefix (for write-size estimates).
func (e *collEncoded) klen0() []byte { return jobRange(prefixComm, e.job, 8) }

// intern interns the batch's comm ids into e.comm; c.mu is held. A job
// at MaxJobComms refuses a new id, naming the record.
func (e *collEncoded) intern(cj *collJob) error {
	b := e.batch
	e.comm = slices.Grow(e.comm[:0], len(b.Calls))[:len(b.Calls)]
	full := func(field string) error {
		return signal.FieldErrorf(field, "the job already has %d communicators, the most one job may have", MaxJobComms)
	}
	last, lastIdx := "", uint32(0)
	for i := range b.Calls {
		if id := b.Calls[i].Comm; id != last || i == 0 { // calls come in runs of one comm
			idx, ok := cj.intern(id)
			if !ok {
				return full(fmt.Sprintf("calls[%d].comm", i))
			}
			last, lastIdx = id, idx
		}
		e.comm[i] = lastIdx
	}
	for i := range b.Comms {
		if _, ok := cj.intern(b.Comms[i].ID); !ok {
			return full(fmt.Sprintf("comms[%d].id", i))
		}
	}
	return nil
}

// encode checks and encodes b's calls; comm indexes were interned into
// e.comm by the caller.
func (e *collEncoded) encode(b *collective.Batch) error {
	prefix := jobRange(prefixCall, e.job, callSuffixLen)
	e.klen = len(prefix) + callSuffixLen
	e.keys, e.vals = slices.Grow(e.keys[:0], len(b.Calls)*e.klen), e.vals[:0]
	e.voff, e.order = append(e.voff[:0], 0), e.order[:0]
	sorted := true
	for i := range b.Calls {
		c := &b.Calls[i]
		e.keys = appendCallSuffix(append(e.keys, prefix...), c.Rank, c.EnterNS, e.comm[i], c.Seq)
		e.vals = appendCall(e.vals, c)
		if len(e.vals) > math.MaxInt32 {
			return errors.New("batch values exceed 2 GiB")
		}
		e.voff = append(e.voff, int32(len(e.vals)))
		e.order = append(e.order, int32(i))
		if i > 0 && sorted && bytes.Compare(e.key(int32(i-1)), e.key(int32(i))) >= 0 {
			sorted = false
		}
	}
	if sorted {
		return nil
	}
	slices.SortStableFunc(e.order, func(a, b int32) int { return bytes.Compare(e.key(a), e.key(b)) })
	out := e.order[:0]
	for k, i := range e.order {
		if k+1 < len(e.order) && bytes.Equal(e.key(i), e.key(e.order[k+1])) {
			if j := e.order[k+1]; !bytes.Equal(e.val(i), e.val(j)) {
				c := &b.Calls[j]
				return signal.FieldErrorf(fmt.Sprintf("calls[%d]", j), "rank %d's call seq %d on %s entered at %d ns is also calls[%d] with other values: send each call once",
					c.Rank, c.Seq, sentComm(c.Comm), c.EnterNS, i)
			}
			continue // the same call twice: stored once
		}
		out = append(out, i)
	}
	e.order = out
	return nil
}

// check runs the store's own bounds over b, naming the record.
func checkCollBatch(b *collective.Batch) error {
	if len(b.Calls) > math.MaxInt32/2 {
		return fmt.Errorf("too many calls (%d)", len(b.Calls))
	}
	if b.Dropped < 0 {
		return signal.FieldErrorf("dropped", "must be ≥ 0, got %d", b.Dropped)
	}
	for i := range b.Calls {
		if err := checkCall(&b.Calls[i]); err != nil {
			return prefixField(fmt.Sprintf("calls[%d]", i), err)
		}
	}
	for i := range b.Comms {
		if err := b.Comms[i].Validate(0); err != nil {
			return prefixField(fmt.Sprintf("comms[%d]", i), err)
		}
	}
	return nil
}

func prefixField(path string, err error) error {
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		return &signal.FieldError{Field: path + "." + fe.Field, Msg: fe.Msg}
	}
	return fmt.Errorf("%s: %w", path, err)
}

// AppendCollectives stores one job's collective batch durably and
// atomically: communicator reports merged into the job's communicator
// table, calls keyed by (rank, enter_ns, comm, seq). A call already stored
// (a resent batch) is counted in Duplicates, not Calls. A communicator
// report that contradicts the stored one (another size, another rank at a
// communicator rank) is a *signal.ConflictError naming "comms[i].<field>"
// and nothing is stored. The job must exist (ErrNotFound otherwise).
func (s *Store) AppendCollectives(job string, b *collective.Batch) (CollectiveAppend, error) {
	res, err := s.AppendCollectivesMany([]CollectiveBatch{{JobID: job, Batch: b}})
	if err != nil {
		return CollectiveAppend{}, err
	}
	return res[0], nil
}

// collWork is one job's pending changes during an AppendCollectivesMany.
type collWork struct {
	cj    *collJob
	comms map[uint32]*commDelta // changed or to be persisted
	hw    map[uint64]int64      // changed high-water marks
	stats CollectiveStats
	sizes int64 // cj.sizes with this commit's new communicators
}

// commDelta is what a commit adds to one communicator: its header as
// merged and the members newly known (only these are written: one key per
// member, so assembling an n-member communicator writes O(n), not O(n²)).
type commDelta struct {
	hdr        commRec // header fields only
	hdrDirty   bool
	add, addAt map[int32]int32 // comm_rank → rank and back
}

func (w *collWork) delta(idx uint32) *commDelta {
	d := w.comms[idx]
	if d == nil {
		d = &commDelta{hdr: w.cj.comms[idx].header(), hdrDirty: !w.cj.persisted[idx]}
		w.comms[idx] = d
	}
	return d
}

// AppendCollectivesMany is AppendCollectives for several batches (group
// commit): one Pebble batch and one WAL fsync for all, stored entirely or
// not at all. Batches may repeat a job. The result has one entry per
// batch. A call already stored with the same values is a duplicate; one
// stored with other values fails the write with ErrConflict naming
// "calls[i]".
func (s *Store) AppendCollectivesMany(batches []CollectiveBatch) ([]CollectiveAppend, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()

	wrap := func(bi int, job string, err error) error {
		if len(batches) == 1 {
			return fmt.Errorf("store: job %q: %w", job, err)
		}
		return fmt.Errorf("store: job %q (batch %d): %w", job, bi, err)
	}
	// Phase 1, no locks: the store's own checks.
	jobs := make([]string, 0, len(batches))
	for bi, cb := range batches {
		if !s.hasJob(cb.JobID) {
			return nil, notFound(cb.JobID)
		}
		if err := checkCollBatch(cb.Batch); err != nil {
			return nil, wrap(bi, cb.JobID, err)
		}
		jobs = append(jobs, cb.JobID)
	}

	// Phase 2, under the jobs' locks: intern, encode, merge
	// communicators, tell new calls from re-sent ones, apply.
	unlock := s.locks.lock(jobs...)
	unlocked := false
	defer func() {
		if !unlocked {
			unlock()
		}
	}()
	enc := make([]*collEncoded, 0, len(batches))
	defer func() {
		for _, e := range enc {
			e.cj, e.batch = nil, nil
			collPool.Put(e)
		}
	}()
	var need int64
	for bi, cb := range batches {
		e := collPool.Get().(*collEncoded)
		enc = append(enc, e)
		e.job, e.batch = cb.JobID, cb.Batch
		s.coll.mu.Lock()
		cj, err := s.liveCollJob(cb.JobID)
		if err == nil {
			e.cj = cj
			err = e.intern(cj)
		}
		s.coll.mu.Unlock()
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, err
			}
			return nil, wrap(bi, cb.JobID, err)
		}
		if err := e.encode(cb.Batch); err != nil {
			return nil, wrap(bi, cb.JobID, err)
		}
		need += int64(len(e.keys) + len(e.vals))
		for i := range cb.Batch.Comms { // the communicator and member keys
			need += int64(len(e.klen0()) + 64 + 16*(1+len(cb.Batch.Comms[i].Ranks)))
		}
	}
	if err := s.writable(need); err != nil {
		return nil, err
	}
	res, work, bi, err := s.collMerge(batches, enc)
	if err != nil {
		if bi >= 0 {
			err = wrap(bi, enc[bi].job, err)
		}
		return nil, err
	}
	pb := s.db.NewBatch()
	for _, e := range enc {
		for _, i := range e.fresh {
			if err == nil {
				err = pb.Set(e.key(i), e.val(i), nil)
			}
		}
	}
	now := time.Now().UnixMilli()
	if err == nil {
		err = s.collWrites(pb, work, now)
	}
	if err != nil {
		pb.Close()
		return nil, fmt.Errorf("store: batch: %w", err)
	}
	if err := s.guard(func() error {
		if s.wo.Sync {
			return s.db.ApplyNoSyncWait(pb, s.wo)
		}
		return s.db.Apply(pb, s.wo)
	}); err != nil {
		if errors.Is(err, ErrDiskFull) {
			return nil, err
		}
		return nil, fmt.Errorf("store: append collectives: %w", err) // Pebble may still own pb
	}
	s.coll.mu.Lock()
	for _, w := range work {
		for idx, d := range w.comms {
			m := &w.cj.comms[idx]
			m.setHeader(d.hdr)
			for cr, rank := range d.add {
				m.add(cr, rank)
			}
			w.cj.persisted[idx] = w.cj.persisted[idx] || d.hdrDirty
		}
		w.cj.sizes = w.sizes
		for k, seq := range w.hw {
			w.cj.hw[k] = seq
		}
		w.cj.stats = w.stats
	}
	s.coll.mu.Unlock()
	s.mu.Lock()
	for job := range work {
		s.lastWrite[job] = now
	}
	s.mu.Unlock()
	unlocked = true
	unlock()

	if s.wo.Sync {
		if err := s.guard(pb.SyncWait); err != nil {
			return nil, fmt.Errorf("store: append collectives: wal sync: %w", err)
		}
	}
	return res, pb.Close()
}

// collMerge computes every batch's effect with the jobs' locks held: the
// merged communicators, which calls are new (e.fresh; a seq above the
// (rank, comm) high-water mark is new by construction, one at or below it
// is read back: absent is new, identical a duplicate, different a
// conflict) and the stats. The jobs' indexes are only changed by writers,
// which the locks exclude, so they are read here without coll.mu. On an
// error, bi is the batch it names (-1: none).
func (s *Store) collMerge(batches []CollectiveBatch, enc []*collEncoded) (res []CollectiveAppend, work map[string]*collWork, bi int, err error) {
	work = map[string]*collWork{}
	res = make([]CollectiveAppend, len(batches))
	var probe *keyProbe
	defer func() {
		if probe != nil {
			probe.close()
		}
	}()
	for bi, e := range enc {
		// DeleteJob (which holds the job's lock) may have run since phase 1.
		s.coll.mu.Lock()
		gone := !s.hasJob(e.job) || s.coll.jobs[e.job] != e.cj
		s.coll.mu.Unlock()
		if gone {
			return nil, nil, -1, notFound(e.job)
		}
		w := work[e.job]
		if w == nil {
			w = &collWork{cj: e.cj, comms: map[uint32]*commDelta{}, hw: map[uint64]int64{}, stats: e.cj.stats, sizes: e.cj.sizes}
			work[e.job] = w
		}
		var newSizes int64
		for i := range e.batch.Comms {
			changed, err := w.mergeComm(&e.batch.Comms[i], &newSizes)
			if err != nil {
				return nil, nil, bi, prefixConflict(fmt.Sprintf("comms[%d]", i), err)
			}
			if changed {
				res[bi].Comms++
			}
		}
		if lo := jobRange(prefixCall, e.job, 0); probe == nil || !bytes.Equal(probe.lo, lo) {
			if probe != nil {
				probe.close()
			}
			probe = &keyProbe{s: s, lo: lo, hi: rangeEnd(lo)}
		}
		e.fresh = e.fresh[:0]
		for _, i := range e.order {
			c := &e.batch.Calls[i]
			idx := e.comm[i]
			k := hwKey(c.Rank, idx)
			hw, ok := w.hw[k]
			if !ok {
				if hw, ok = w.cj.hw[k]; !ok {
					hw = -1
				}
			}
			if c.Seq > hw {
				w.hw[k] = c.Seq
			} else {
				stored, err := storedCall(probe, e, i, enc[:bi])
				if err != nil {
					return nil, nil, -1, err
				}
				if stored != nil {
					if !bytes.Equal(stored, e.val(i)) {
						return nil, nil, bi, conflict(fmt.Sprintf("calls[%d]", i), fmt.Sprintf(
							"rank %d's call seq %d on communicator %s entered at %d ns is already stored with other values; a re-sent call must be identical to the stored one, and nothing of this batch was stored",
							c.Rank, c.Seq, sentComm(c.Comm), c.EnterNS))
					}
					res[bi].Duplicates++
					continue
				}
			}
			e.fresh = append(e.fresh, i)
			res[bi].Calls++
			st := &w.stats
			if st.Calls == 0 || c.EnterNS < st.FirstNS {
				st.FirstNS = c.EnterNS
			}
			st.LastNS = max(st.LastNS, c.EnterNS)
			st.Calls++
		}
		// Drops count once: a batch adds them when it stored something
		// new (a resent batch, all duplicates, adds nothing), or when it
		// carries no records at all (a drop-only report).
		if res[bi].Calls+res[bi].Comms > 0 || len(e.batch.Calls)+len(e.batch.Comms) == 0 {
			w.stats.Dropped = min(w.stats.Dropped+e.batch.Dropped, math.MaxInt64/2)
		}
		// Communicators first seen in calls are stored with their id only.
		for _, idx := range e.comm {
			if !w.cj.persisted[idx] {
				w.delta(idx)
			}
		}
	}
	return res, work, -1, nil
}

// storedCall returns the value call i of e has in an earlier batch of
// this write (the latest such) or else in the store, or nil.
func storedCall(probe *keyProbe, e *collEncoded, i int32, earlier []*collEncoded) ([]byte, error) {
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

func prefixConflict(path string, err error) error {
	var ce *signal.ConflictError
	if errors.As(err, &ce) {
		return &signal.ConflictError{Field: path + "." + ce.Field, Msg: ce.Msg}
	}
	return prefixField(path, err)
}

// mergeComm merges one member's report into the pending table: the
// members' reports assemble the member list; a report that contradicts it
// is a conflict (two different communicators under one id, or a bug in
// the capturer) rather than a silent overwrite. changed is false for a
// report that adds nothing (a resend). newSizes sums the sizes of the
// communicators first reported in this batch (MaxBatchCommSizes).
func (w *collWork) mergeComm(c *collective.Comm, newSizes *int64) (changed bool, err error) {
	idx := w.cj.ids[c.ID]
	base := &w.cj.comms[idx]
	d := w.delta(idx)
	switch {
	case !d.hdr.reported():
		if *newSizes+int64(c.Size) > MaxBatchCommSizes {
			return false, signal.FieldErrorf("size", "the communicators first reported in this batch sum to more than %d members: send fewer per batch", MaxBatchCommSizes)
		}
		if w.sizes+int64(c.Size) > MaxJobCommSizes {
			return false, signal.FieldErrorf("size", "the job's communicators would sum to more than %d members", MaxJobCommSizes)
		}
		*newSizes += int64(c.Size)
		w.sizes += int64(c.Size)
		d.hdr.Size, d.hdrDirty, changed = c.Size, true, true
	case d.hdr.Size != c.Size:
		return false, &signal.ConflictError{Field: "size", Msg: fmt.Sprintf("communicator %s has size %d, this report says %d", sentComm(c.ID), d.hdr.Size, c.Size)}
	}
	for _, f := range []struct {
		name      string
		have, got *string
	}{{"parent", &d.hdr.Parent, &c.Parent}, {"backend", &d.hdr.Backend, &c.Backend}} {
		switch {
		case *f.got == "" || *f.got == *f.have:
		case *f.have == "":
			*f.have, d.hdrDirty, changed = *f.got, true, true
		default:
			return false, &signal.ConflictError{Field: f.name, Msg: fmt.Sprintf("communicator %s has %s %q, this report says %q", sentComm(c.ID), f.name, signal.Clip(*f.have), signal.Clip(*f.got))}
		}
	}
	place := func(field string, cr, rank int) error {
		c32, r32 := int32(cr), int32(rank)
		cur, ok := base.rankAt(c32)
		if !ok {
			cur, ok = d.add[c32]
		}
		if ok {
			if cur == r32 {
				return nil
			}
			return &signal.ConflictError{Field: field, Msg: fmt.Sprintf("communicator %s has rank %d at comm_rank %d, this report puts rank %d there", sentComm(c.ID), cur, cr, rank)}
		}
		j, ok := base.commRankOf(r32)
		if !ok {
			j, ok = d.addAt[r32]
		}
		if ok {
			return &signal.ConflictError{Field: field, Msg: fmt.Sprintf("communicator %s has rank %d at comm_rank %d, this report puts it at %d", sentComm(c.ID), rank, j, cr)}
		}
		if d.add == nil {
			d.add, d.addAt = map[int32]int32{}, map[int32]int32{}
		}
		d.add[c32], d.addAt[r32], changed = r32, c32, true
		return nil
	}
	for i, r := range c.Ranks {
		if err := place("ranks", i, r); err != nil {
			return false, err
		}
	}
	if err := place("comm_rank", c.CommRank, c.Rank); err != nil {
		return false, err
	}
	return changed, nil
}

// collWrites adds the index keys of work to pb: communicator records,
// high-water marks, stats, and the job's last-write time (retention must
// see a pure-NCCL job as active).
func (s *Store) collWrites(pb *pebble.Batch, work map[string]*collWork, now int64) error {
	var kb, vb []byte
	for job, w := range work {
		for idx, d := range w.comms {
			kb = binary.BigEndian.AppendUint32(append(kb[:0], jobRange(prefixComm, job, 8)...), idx)
			if d.hdrDirty {
				if err := pb.Set(kb, appendComm(vb[:0], &d.hdr), nil); err != nil {
					return err
				}
			}
			for cr, rank := range d.add {
				if err := pb.Set(binary.BigEndian.AppendUint32(kb, uint32(cr)), appendMember(vb[:0], rank), nil); err != nil {
					return err
				}
			}
		}
		for k, seq := range w.hw {
			kb = binary.BigEndian.AppendUint64(append(kb[:0], jobRange(prefixHighWater, job, 8)...), k)
			if err := pb.Set(kb, binary.BigEndian.AppendUint64(vb[:0], uint64(seq)), nil); err != nil {
				return err
			}
		}
		if err := pb.Set(collStatsKey(job), encodeCollStats(w.stats), nil); err != nil {
			return err
		}
		s.mu.RLock()
		st, ok := s.stats[job]
		s.mu.RUnlock()
		if !ok {
			st = emptyStats
		}
		if err := pb.Set(statsKey(job), encodeStats(st, now), nil); err != nil {
			return err
		}
	}
	return nil
}

// ScanCalls calls fn for every stored call of job matching q, by rank
// ascending, then enter_ns ascending (ties by the communicator's index in
// the job's table, then seq), stopping at (and returning unchanged) the
// first error fn returns. c is reused between calls; its strings are
// immutable, so copying the struct (*c) is a full copy. A stored value
// that cannot be decoded stops the scan with an error wrapping ErrCorrupt
// that names the key.
func (s *Store) ScanCalls(job string, q CallQuery, fn func(c *collective.Call) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return notFound(job)
	}
	from, to := max(q.FromNS, 0), q.ToNS
	if to <= 0 {
		to = math.MaxInt64
	}
	if to < from || q.Rank > maxRank {
		return nil
	}
	prefix := jobRange(prefixCall, job, callSuffixLen)
	seek := func(rank int64) []byte { // first key of rank at or after from
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint32(slices.Clip(prefix), uint32(rank)), uint64(from))
	}
	lo, hi := prefix, rangeEnd(prefix)
	if q.Rank >= 0 {
		lo = seek(int64(q.Rank))
		if q.Rank < maxRank {
			hi = binary.BigEndian.AppendUint32(slices.Clip(prefix), uint32(q.Rank+1))
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: scan calls %q: %w", job, err)
	}
	defer it.Close()
	// The comm table is read after the iterator is open: every call the
	// iterator sees had its comm interned before it was written.
	s.coll.mu.Lock()
	cj, err := s.liveCollJob(job)
	var names []string
	if err == nil {
		names = make([]string, len(cj.comms))
		for i := range cj.comms {
			names[i] = cj.comms[i].ID
		}
	}
	s.coll.mu.Unlock()
	if err != nil {
		return err
	}
	var (
		dec callReader
		c   collective.Call
	)
	for ok := it.SeekGE(lo); ok; {
		key := it.Key()
		rank, enter, idx, seq, kok := parseCallSuffix(key)
		if !kok || len(key) != len(prefix)+callSuffixLen {
			return fmt.Errorf("store: key %s: %w: malformed call key", keyString(key), ErrCorrupt)
		}
		if enter < from {
			ok = it.SeekGE(seek(int64(rank)))
			continue
		}
		if enter > to {
			if rank >= maxRank {
				break
			}
			ok = it.SeekGE(seek(int64(rank) + 1))
			continue
		}
		if int(idx) >= len(names) || names[idx] == "" {
			return fmt.Errorf("store: key %s: %w: communicator #%d is not in the job's table", keyString(key), ErrCorrupt, idx)
		}
		c.Rank, c.EnterNS, c.Comm, c.Seq = rank, enter, names[idx], seq
		val, err := it.ValueAndErr()
		if err == nil {
			err = dec.decode(val, &c)
		}
		if err != nil {
			return fmt.Errorf("store: key %s: %w", keyString(key), err)
		}
		if err := fn(&c); err != nil {
			return err
		}
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: scan calls %q: %w", job, err)
	}
	return nil
}

// Comms returns job's communicators as the members' reports merged, one
// per id in id order: Ranks is the member list in communicator-rank order
// once every member is known (nil before), Rank, CommRank and Host are
// zero. Communicators seen only in calls, never reported, are left out.
func (s *Store) Comms(job string) ([]collective.Comm, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	s.coll.mu.Lock()
	defer s.coll.mu.Unlock()
	cj, err := s.liveCollJob(job)
	if err != nil {
		return nil, err
	}
	out := make([]collective.Comm, 0, len(cj.comms))
	for i := range cj.comms {
		m := &cj.comms[i]
		if !m.reported() || !cj.persisted[i] {
			continue
		}
		c := collective.Comm{ID: m.ID, Size: m.Size, Parent: m.Parent, Backend: m.Backend}
		if m.dense != nil {
			c.Ranks = make([]int, len(m.dense))
			for j, r := range m.dense {
				c.Ranks[j] = int(r)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b collective.Comm) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// CollectiveStats returns job's collective summary without scanning calls.
func (s *Store) CollectiveStats(job string) (CollectiveStats, error) {
	if err := s.enter(); err != nil {
		return CollectiveStats{}, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return CollectiveStats{}, notFound(job)
	}
	s.coll.mu.Lock()
	defer s.coll.mu.Unlock()
	cj, err := s.liveCollJob(job)
	if err != nil {
		return CollectiveStats{}, err
	}
	st := cj.stats
	ranks := map[uint32]struct{}{}
	for k := range cj.hw {
		ranks[uint32(k>>32)] = struct{}{}
	}
	st.Ranks = len(ranks)
	return st, nil
}

// forgetCollectives drops job's index (DeleteJob); the job's lock is held.
func (s *Store) forgetCollectives(job string) {
	s.coll.mu.Lock()
	delete(s.coll.jobs, job)
	s.coll.mu.Unlock()
}

// sentComm names a stored communicator id as its sender knows it: the id
// as sent, and its incarnation past the first launch (a 409 naming
// "inc1:default_pg" would name an id no client ever sent).
func sentComm(stored string) string {
	inc, id := collective.CommIncarnation(stored)
	if inc == 0 {
		return fmt.Sprintf("%q", signal.Clip(id))
	}
	return fmt.Sprintf("%q of incarnation %d", signal.Clip(id), inc)
}
