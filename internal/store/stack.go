package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// The stack and OS-stat keyspaces (SysOM-AI §4: each node agent ships its
// raw stacks and OS counters every 5 s; symbolization is deferred to the
// server, §3.4). Byte layouts: docs/format/stack.md, docs/format/osstat.md.
//
//	k/<job>\x00<start_ns u64><rank+1 u32><id u64> → one rank's stacks of one node window
//	o/<job>\x00<start_ns u64><id u64>             → one node window's OS points
//	y/<job>                                      → ProfileStats, 64 bytes
//
// Keys are time-major so a window of every rank (the CPU waterline reads
// a group's ranks together) is one iterator in time order; one rank's
// window skips the other ranks' keys by seeking. <id> is the FNV-1a hash
// of the node name and the record's encoded value: a resent batch
// rewrites the same keys and is counted as duplicates, while a window
// its shipper split into several posts (an agent halving a batch the
// server refused as too large) keeps every part.
const (
	prefixStack     = "k/"
	prefixOSStat    = "o/"
	prefixProfStats = "y/"

	stackSuffixLen  = 8 + 4 + 8
	osstatSuffixLen = 8 + 8

	// DefaultMaxJobProfileBytes is one job's stack and OS-stat quota
	// (Options.MaxJobProfileBytes): at the agent's default 99 Hz × 10%
	// a rank's 5 s window is a few kilobytes, so this is months of a
	// 1,024-rank job; retention frees it.
	DefaultMaxJobProfileBytes = int64(16) << 30
)

// ErrQuota is wrapped by writes that would take a job past its stack and
// OS-stat quota (Options.MaxJobProfileBytes). The HTTP API answers 507.
var ErrQuota = errors.New("store: job quota reached")

// StackBatch is one job's stack batch for AppendStacksMany.
type StackBatch struct {
	JobID string
	Batch *stack.Batch
}

// StackAppend is what one stack batch added: Records new (rank, window,
// node) records holding Samples samples, and Duplicates records that were
// already stored (a resent batch; not written again).
type StackAppend struct {
	Records, Samples, Duplicates int
}

// StackQuery selects stack records for ScanStacks: windows overlapping
// [FromNS, ToNS] (0 = open on that side) of one rank, or every rank when
// Rank is -1. Rank -1 also selects unregistered processes' samples; a
// query for one rank r ≥ 0 returns the records of rank r only.
type StackQuery struct {
	FromNS, ToNS int64
	Rank         int
	// OnSkip, if set, hears of each stored record the scan skipped because
	// it does not decode (the scan goes on: one bad record never fails
	// every read of its window). Store.SkippedRecords counts them too.
	OnSkip func(key string, err error)
}

// SkippedRecords counts stack and OS records scans skipped as
// undecodable since the store opened (a metric: each is a bug or disk
// damage worth a look).
func (s *Store) SkippedRecords() int64 { return s.skipped.Load() }

// skip counts and logs one undecodable record.
func (s *Store) skip(key []byte, err error, on func(string, error)) {
	s.skipped.Add(1)
	s.log.Warn("store: skipping undecodable record", "key", keyString(key), "err", err)
	if on != nil {
		on(keyString(key), err)
	}
}

// ProfileStats summarizes one job's stack and OS-stat keyspaces. It is
// maintained on every write and persisted in the same batch (y/<job>).
type ProfileStats struct {
	StackRecords, Samples, StackBytes int64
	OSRecords, OSBytes                int64
	// FirstNS is the earliest window start, LastNS the latest window end
	// over both kinds (0 when empty).
	FirstNS, LastNS int64
	// MaxSpanNS is the longest stored window: how far a scan looks back
	// for windows overlapping its start.
	MaxSpanNS int64
}

const profStatsLen = 8 * 8

func (st *ProfileStats) fields() []*int64 {
	return []*int64{&st.StackRecords, &st.Samples, &st.StackBytes, &st.OSRecords, &st.OSBytes, &st.FirstNS, &st.LastNS, &st.MaxSpanNS}
}

func encodeProfStats(st ProfileStats) []byte {
	b := make([]byte, 0, profStatsLen)
	for _, p := range st.fields() {
		b = binary.BigEndian.AppendUint64(b, uint64(*p))
	}
	return b
}

func decodeProfStats(b []byte) (ProfileStats, error) {
	var st ProfileStats
	if len(b) != profStatsLen {
		return st, corrupt("profile stats value is %d bytes, want %d", len(b), profStatsLen)
	}
	for i, p := range st.fields() {
		*p = int64(binary.BigEndian.Uint64(b[8*i:]))
		if *p < 0 {
			return ProfileStats{}, corrupt("profile stats field %d negative", i)
		}
	}
	return st, nil
}

// profIndex caches each job's ProfileStats (loaded on first use).
type profIndex struct {
	mu   sync.Mutex
	jobs map[string]*ProfileStats
}

func profStatsKey(id string) []byte { return append([]byte(prefixProfStats), id...) }

// profRanges are job id's stack and OS-stat key ranges [lo, hi), deleted
// with the job; y/<job> is a single key, deleted separately.
func profRanges(id string) [][2][]byte {
	out := make([][2][]byte, 0, 2)
	for _, p := range []string{prefixStack, prefixOSStat} {
		lo := jobRange(p, id, 0)
		out = append(out, [2][]byte{lo, rangeEnd(lo)})
	}
	return out
}

// forgetProfiles drops job's cached stats (DeleteJob); the job's lock is held.
func (s *Store) forgetProfiles(job string) {
	s.prof.mu.Lock()
	delete(s.prof.jobs, job)
	s.prof.mu.Unlock()
}

// profStats returns job's stats, loading them on first use; prof.mu is
// held.
func (s *Store) profStats(job string) (*ProfileStats, error) {
	if st := s.prof.jobs[job]; st != nil {
		return st, nil
	}
	st := &ProfileStats{}
	v, closer, err := s.db.Get(profStatsKey(job))
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("store: job %q: profile stats: %w", job, err)
	default:
		*st, err = decodeProfStats(v)
		closer.Close()
		if err != nil {
			return nil, fmt.Errorf("store: key %q: %w", profStatsKey(job), err)
		}
	}
	if s.prof.jobs == nil {
		s.prof.jobs = map[string]*ProfileStats{}
	}
	s.prof.jobs[job] = st
	return st, nil
}

// ProfileStats returns job's stack and OS-stat summary without scanning.
func (s *Store) ProfileStats(job string) (ProfileStats, error) {
	if err := s.enter(); err != nil {
		return ProfileStats{}, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return ProfileStats{}, notFound(job)
	}
	s.prof.mu.Lock()
	defer s.prof.mu.Unlock()
	st, err := s.profStats(job)
	if err != nil {
		return ProfileStats{}, err
	}
	if !s.hasJob(job) { // deleted while loading: do not keep its stats
		delete(s.prof.jobs, job)
		return ProfileStats{}, notFound(job)
	}
	return *st, nil
}

// recordID is a record's identity within its (start, rank): the node and
// the record's content (the encoding is deterministic).
func recordID(node string, val []byte) uint64 {
	h := fnv.New64a()
	h.Write([]byte(node))
	h.Write([]byte{0})
	h.Write(val)
	return h.Sum64()
}

// profRec is one encoded record of a pending write.
type profRec struct {
	batch      int // index of the request it came from
	key, val   []byte
	samples    int
	os         bool
	start, end int64
	// For the conflict check (stack_conflict.go): the record's node and
	// rank, and its content — stack samples idx of sb (indices in the
	// posted batch), or the OS batch ob.
	node string
	rank int
	sb   *stack.Batch
	idx  []int32
	ob   *osstat.Batch
}

// cell is the record's conflict-check content.
func (r *profRec) cell() cellRec {
	if r.os {
		return osCell(r.ob)
	}
	return stackCell(r.sb, r.idx)
}

var stackEncPool = sync.Pool{New: func() any { return new(stackEnc) }}

// checkWindow is the store's own guard on a window (the decoders validate
// more).
func checkWindow(start, end int64) error {
	if start <= 0 || end < start {
		return signal.FieldErrorf("end_ns", "window [%d, %d] is empty or reversed", start, end)
	}
	if end-start > MaxWindowNS {
		return signal.FieldErrorf("end_ns", "window [start_ns, end_ns] of %d ns is longer than the %d ns (1 h) one record may span", end-start, MaxWindowNS)
	}
	return nil
}

// AppendStacks stores one job's stack batch durably and atomically: one
// record per rank (samples of unregistered processes under rank -1), each
// with the raw frames and its own mapping and string tables. The batch's
// dropped count and unwind stats go on its first record (the lowest
// rank). A record already stored — same window start, rank, node and
// content — is a duplicate and is not written again. The job must exist
// (ErrNotFound otherwise).
func (s *Store) AppendStacks(job string, b *stack.Batch) (StackAppend, error) {
	res, err := s.AppendStacksMany([]StackBatch{{JobID: job, Batch: b}})
	if err != nil {
		return StackAppend{}, err
	}
	return res[0], nil
}

// AppendStacksMany is AppendStacks for several batches (group commit):
// one Pebble batch and one WAL fsync for all, stored entirely or not at
// all. The result has one entry per batch.
func (s *Store) AppendStacksMany(batches []StackBatch) ([]StackAppend, error) {
	jobs := make([]string, len(batches))
	var recs []profRec
	e := stackEncPool.Get().(*stackEnc)
	defer stackEncPool.Put(e)
	var byRank map[int][]int32
	for bi, sb := range batches {
		jobs[bi] = sb.JobID
		b := sb.Batch
		if err := checkJobID(sb.JobID); err != nil {
			return nil, err
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("store: job %q: %w", sb.JobID, err)
		}
		if err := checkWindow(b.StartNS, b.EndNS); err != nil {
			return nil, fmt.Errorf("store: job %q: %w", sb.JobID, err)
		}
		if byRank == nil {
			byRank = map[int][]int32{}
		}
		clear(byRank)
		for i := range b.Samples {
			r := b.Samples[i].Rank
			byRank[r] = append(byRank[r], int32(i))
		}
		ranks := make([]int, 0, len(byRank))
		for r := range byRank {
			ranks = append(ranks, r)
		}
		if len(ranks) == 0 {
			if b.Dropped == 0 && b.Unwind == (stack.UnwindStats{}) {
				continue // nothing to keep
			}
			ranks = append(ranks, -1) // a drop-only report
		}
		slices.Sort(ranks)
		prefix := jobRange(prefixStack, sb.JobID, stackSuffixLen)
		meta := b.Dropped != 0 || b.Unwind != (stack.UnwindStats{})
		for k, r := range ranks {
			val := e.appendStackRecord(nil, b, byRank[r], meta && k == 0)
			key := binary.BigEndian.AppendUint64(slices.Clip(prefix), uint64(b.StartNS))
			key = binary.BigEndian.AppendUint32(key, uint32(r+1))
			key = binary.BigEndian.AppendUint64(key, recordID(b.Node, val))
			recs = append(recs, profRec{batch: bi, key: key, val: val, samples: len(byRank[r]), start: b.StartNS, end: b.EndNS,
				node: b.Node, rank: r, sb: b, idx: slices.Clone(byRank[r])})
		}
	}
	return s.commitProf(jobs, recs)
}

// AppendOSStats stores one node window's OS points durably; a batch
// already stored under the same (window start, node) is a duplicate and
// is not written again. The job must exist.
func (s *Store) AppendOSStats(job string, b *osstat.Batch) error {
	_, err := s.AppendOSStatsMany([]OSStatBatch{{JobID: job, Batch: b}})
	return err
}

// OSStatBatch is one job's OS batch for AppendOSStatsMany.
type OSStatBatch struct {
	JobID string
	Batch *osstat.Batch
}

// AppendOSStatsMany is AppendOSStats for several batches in one durable
// write. The result counts per batch: Records 1 when stored, Duplicates
// 1 when it already was; Samples is the points stored.
func (s *Store) AppendOSStatsMany(batches []OSStatBatch) ([]StackAppend, error) {
	jobs := make([]string, len(batches))
	recs := make([]profRec, 0, len(batches))
	e := stackEncPool.Get().(*stackEnc)
	defer stackEncPool.Put(e)
	for bi, ob := range batches {
		jobs[bi] = ob.JobID
		b := ob.Batch
		if err := checkJobID(ob.JobID); err != nil {
			return nil, err
		}
		if err := b.Validate(); err != nil {
			return nil, fmt.Errorf("store: job %q: %w", ob.JobID, err)
		}
		if len(b.Absent) > maxOSAbsent {
			return nil, fmt.Errorf("store: job %q: %w", ob.JobID, signal.FieldErrorf("absent", "more than %d absences", maxOSAbsent))
		}
		if err := checkWindow(b.StartNS, b.EndNS); err != nil {
			return nil, fmt.Errorf("store: job %q: %w", ob.JobID, err)
		}
		val := appendOSStatRecord(nil, e, b)
		key := binary.BigEndian.AppendUint64(jobRange(prefixOSStat, ob.JobID, osstatSuffixLen), uint64(b.StartNS))
		key = binary.BigEndian.AppendUint64(key, recordID(b.Node, val))
		recs = append(recs, profRec{batch: bi, key: key, val: val, samples: len(b.Points), os: true, start: b.StartNS, end: b.EndNS,
			node: b.Node, ob: b})
	}
	return s.commitProf(jobs, recs)
}

// commitProf writes recs of the batches of jobs (one entry per batch) in
// one durable Pebble batch, skipping records already stored, refusing
// (ErrConflict) a record that conflicts with its window's stored ones
// (stack_conflict.go), and updates each job's ProfileStats, quota and
// last-write time.
func (s *Store) commitProf(jobs []string, recs []profRec) ([]StackAppend, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	var need int64
	for _, job := range jobs {
		if !s.hasJob(job) {
			return nil, notFound(job)
		}
	}
	for i := range recs {
		need += int64(len(recs[i].key) + len(recs[i].val))
	}
	if err := s.writable(need); err != nil {
		return nil, err
	}
	res := make([]StackAppend, len(jobs))
	quota := s.opt.MaxJobProfileBytes
	if quota <= 0 {
		quota = DefaultMaxJobProfileBytes
	}
	unlock := s.locks.lock(jobs...)
	pb := s.db.NewBatch()
	work := map[string]*ProfileStats{}
	seen := map[string]bool{}
	// pending are the cells of the records this write adds, by cell
	// (the key without its record id) and node.
	pending := map[string][]cellRec{}
	err := func() error {
		s.prof.mu.Lock()
		defer s.prof.mu.Unlock()
		for _, job := range jobs {
			if work[job] != nil {
				continue
			}
			if !s.hasJob(job) { // DeleteJob (which holds the job's lock) may have run
				return notFound(job)
			}
			st, err := s.profStats(job)
			if err != nil {
				return err
			}
			cp := *st
			work[job] = &cp
		}
		return nil
	}()
	for i := 0; err == nil && i < len(recs); i++ {
		r := &recs[i]
		job := jobs[r.batch]
		if seen[string(r.key)] {
			res[r.batch].Duplicates++
			continue
		}
		seen[string(r.key)] = true
		_, closer, gerr := s.db.Get(r.key)
		if gerr == nil {
			closer.Close()
			res[r.batch].Duplicates++
			continue
		}
		if !errors.Is(gerr, pebble.ErrNotFound) {
			err = fmt.Errorf("store: duplicate check: %w", gerr)
			break
		}
		// Not this record: is its window's cell already holding others?
		var stored []cellRec
		if stored, err = s.storedCell(r); err != nil {
			break
		}
		ck := string(r.key[:len(r.key)-8]) + "\x00" + r.node
		nr := r.cell()
		dup, cerr := cellVerdict(r, nr, append(stored, pending[ck]...))
		if cerr != nil {
			err = fmt.Errorf("store: job %q: %w", signal.Clip(job), cerr)
			break
		}
		if dup {
			res[r.batch].Duplicates++
			continue
		}
		pending[ck] = append(pending[ck], nr)
		st := work[job]
		n := int64(len(r.key) + len(r.val))
		if st.StackBytes+st.OSBytes+n > quota {
			err = fmt.Errorf("%w: job %q would hold %d bytes of stacks and OS stats, the limit is %d; delete old jobs or shorten retention",
				ErrQuota, signal.Clip(job), st.StackBytes+st.OSBytes+n, quota)
			break
		}
		if r.os {
			st.OSRecords++
			st.OSBytes += n
		} else {
			st.StackRecords++
			st.StackBytes += n
			st.Samples += int64(r.samples)
		}
		if st.FirstNS == 0 || r.start < st.FirstNS {
			st.FirstNS = r.start
		}
		st.LastNS = max(st.LastNS, r.end)
		st.MaxSpanNS = max(st.MaxSpanNS, r.end-r.start)
		res[r.batch].Records++
		res[r.batch].Samples += r.samples
		err = pb.Set(r.key, r.val, nil)
	}
	now := time.Now().UnixMilli()
	if err == nil {
		for job, st := range work {
			if err = pb.Set(profStatsKey(job), encodeProfStats(*st), nil); err != nil {
				break
			}
			// The job's last-write time: retention must see a job
			// that only ships stacks as active.
			s.mu.RLock()
			js, ok := s.stats[job]
			s.mu.RUnlock()
			if !ok {
				js = emptyStats
			}
			if err = pb.Set(statsKey(job), encodeStats(js, now), nil); err != nil {
				break
			}
		}
	}
	if err != nil {
		unlock()
		pb.Close()
		return nil, err
	}
	if err := s.guard(func() error {
		if s.wo.Sync {
			return s.db.ApplyNoSyncWait(pb, s.wo)
		}
		return s.db.Apply(pb, s.wo)
	}); err != nil {
		unlock()
		if errors.Is(err, ErrDiskFull) {
			return nil, err
		}
		return nil, fmt.Errorf("store: append stacks: %w", err) // Pebble may still own pb
	}
	s.prof.mu.Lock()
	for job, st := range work {
		if s.prof.jobs == nil {
			s.prof.jobs = map[string]*ProfileStats{}
		}
		s.prof.jobs[job] = st
	}
	s.prof.mu.Unlock()
	s.mu.Lock()
	for job := range work {
		s.lastWrite[job] = now
	}
	s.mu.Unlock()
	unlock()
	if s.wo.Sync {
		if err := s.guard(pb.SyncWait); err != nil {
			return nil, fmt.Errorf("store: append stacks: wal sync: %w", err)
		}
	}
	return res, pb.Close()
}

// scanWindowStart is where a scan for windows overlapping [from, …]
// starts: the longest stored window before from.
func (s *Store) scanWindowStart(job string, from int64) (int64, error) {
	s.prof.mu.Lock()
	defer s.prof.mu.Unlock()
	st, err := s.profStats(job)
	if err != nil {
		return 0, err
	}
	if !s.hasJob(job) {
		delete(s.prof.jobs, job)
		return 0, notFound(job)
	}
	return max(from-st.MaxSpanNS, 0), nil
}

// peekSpan reads a record value's window length (both codecs put it as
// the first varint after the version, and the stack codec after a flags
// byte) without decoding the rest.
func peekSpan(v []byte, skip int) (int64, bool) {
	if len(v) < skip {
		return 0, false
	}
	u, n := binary.Uvarint(v[skip:])
	if n <= 0 || u > uint64(MaxStackSpanNS) {
		return 0, false
	}
	return int64(u), true
}

// ScanStacks calls fn with every stored stack record of job whose window
// overlaps q, in window-start order (then rank, then node), stopping at
// (and returning unchanged) the first error fn returns. Each call gets a
// freshly decoded batch the callee may keep: one rank's samples of one
// node window (Rank set on every sample), its mapping table, rate and
// window; Dropped and Unwind are set on one record per shipped batch. A
// value that cannot be decoded stops the scan with an error wrapping
// ErrCorrupt that names the key.
func (s *Store) ScanStacks(job string, q StackQuery, fn func(b *stack.Batch) error) error {
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
	if to < from || q.Rank < -1 || q.Rank >= maxRank {
		return nil
	}
	lo, err := s.scanWindowStart(job, from)
	if err != nil {
		return err
	}
	prefix := jobRange(prefixStack, job, stackSuffixLen)
	seek := func(start int64, rank1 uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(slices.Clip(prefix), uint64(start)), rank1)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: rangeEnd(prefix)})
	if err != nil {
		return fmt.Errorf("store: scan stacks %q: %w", job, err)
	}
	defer it.Close()
	want := uint32(q.Rank + 1)
	for ok := it.SeekGE(seek(lo, 0)); ok; {
		key := it.Key()
		if len(key) != len(prefix)+stackSuffixLen {
			return fmt.Errorf("store: key %q: %w: malformed stack key", key, ErrCorrupt)
		}
		suf := key[len(prefix):]
		start, rank1 := binary.BigEndian.Uint64(suf), binary.BigEndian.Uint32(suf[8:])
		if start > math.MaxInt64 || rank1 > stack.MaxRank+1 {
			return fmt.Errorf("store: key %q: %w: stack key out of range", key, ErrCorrupt)
		}
		if int64(start) > to {
			break
		}
		if q.Rank >= 0 && rank1 != want {
			if rank1 < want {
				ok = it.SeekGE(seek(int64(start), want))
			} else {
				ok = it.SeekGE(seek(int64(start)+1, 0))
			}
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("store: key %q: %w", key, err)
		}
		span, sok := peekSpan(val, 2)
		if !sok {
			s.skip(key, fmt.Errorf("%w: stack record header", ErrCorrupt), q.OnSkip)
		} else if int64(start)+span >= from {
			b := new(stack.Batch)
			if err := decodeStackRecord(val, int64(start), int(rank1)-1, b); err != nil {
				s.skip(key, err, q.OnSkip)
			} else if err := fn(b); err != nil {
				return err
			}
		}
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: scan stacks %q: %w", job, err)
	}
	return nil
}

// ScanOSStats calls fn with every stored OS batch of job whose interval
// overlaps [fromNS, toNS] (0 = open), in start order, each freshly
// decoded; it stops at (and returns) the first error fn returns.
func (s *Store) ScanOSStats(job string, fromNS, toNS int64, fn func(b *osstat.Batch) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return notFound(job)
	}
	from, to := max(fromNS, 0), toNS
	if to <= 0 {
		to = math.MaxInt64
	}
	if to < from {
		return nil
	}
	lo, err := s.scanWindowStart(job, from)
	if err != nil {
		return err
	}
	prefix := jobRange(prefixOSStat, job, osstatSuffixLen)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), uint64(lo)), UpperBound: rangeEnd(prefix)})
	if err != nil {
		return fmt.Errorf("store: scan os stats %q: %w", job, err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		key := it.Key()
		if len(key) != len(prefix)+osstatSuffixLen || !bytes.HasPrefix(key, prefix) {
			return fmt.Errorf("store: key %q: %w: malformed os key", key, ErrCorrupt)
		}
		start := binary.BigEndian.Uint64(key[len(prefix):])
		if start > math.MaxInt64 {
			return fmt.Errorf("store: key %q: %w: os key out of range", key, ErrCorrupt)
		}
		if int64(start) > to {
			break
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("store: key %q: %w", key, err)
		}
		span, sok := peekSpan(val, 1)
		if !sok {
			s.skip(key, fmt.Errorf("%w: os record header", ErrCorrupt), nil)
			continue
		}
		if int64(start)+span < from {
			continue
		}
		b := new(osstat.Batch)
		if err := decodeOSStatRecord(val, int64(start), b); err != nil {
			s.skip(key, err, nil)
			continue
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: scan os stats %q: %w", job, err)
	}
	return nil
}
