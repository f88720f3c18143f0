package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
)

// DeleteJob removes job id — its registration, stats, every stored
// vector, its collective keyspace, its Greyhound controller keyspace
// (state, plans, results), its KAIR captures with their traces and its
// incidents with their working set and index entries — in one durable
// write (range deletions, so its cost does not grow with the job's data;
// the incident index is deleted key by key, one per kept incident). The space is reclaimed by the next
// Reclaim. It is allowed while the disk is nearly full, since it is how
// space is freed. Unknown ids return an error wrapping ErrNotFound.
func (s *Store) DeleteJob(id string) error {
	_, err := s.deleteJob(id, time.Time{})
	return err
}

// DeleteIdleJob is DeleteJob for retention: it deletes the job only if
// nothing was written to it after idleSince, checked under the write lock
// so a job that resumed since its age was read is kept (false, nil).
func (s *Store) DeleteIdleJob(id string, idleSince time.Time) (bool, error) {
	return s.deleteJob(id, idleSince)
}

func (s *Store) deleteJob(id string, idleSince time.Time) (bool, error) {
	var deleted bool
	err := s.deleteJobLocked(id, idleSince, &deleted)
	return deleted, err
}

func (s *Store) deleteJobLocked(id string, idleSince time.Time, deleted *bool) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	s.jobMu.Lock()
	defer s.jobMu.Unlock()
	if !s.hasJob(id) {
		return notFound(id)
	}
	if p := s.broken.Load(); p != nil {
		return *p
	}
	if s.readOnly {
		return fmt.Errorf("%w: the store is read-only (it started on a full disk); free space to delete jobs", ErrDiskFull)
	}
	// The job's lock: no write of this job is between its job check and
	// its apply while the job goes (writes re-check under the lock).
	defer s.locks.lock(id)()
	if !idleSince.IsZero() {
		s.mu.RLock()
		lw := s.lastWrite[id]
		s.mu.RUnlock()
		if lw > idleSince.UnixMilli() {
			return nil // written since: not idle any more
		}
	}
	lo, hi := vecPrefix(id), vecPrefixEnd(id)
	coll := collRanges(id)
	gh := [2][]byte{ghPrefix(id), ghPrefixEnd(id)}
	// The Greyhound controller's keyspace goes in the same batch: a state
	// left behind would be adopted by a job registered again under id.
	ranges := append(append([][2][]byte{{lo, hi}}, coll...), gh)
	prof := profRanges(id) // stacks and OS stats (stack.go)
	ranges = append(ranges, prof...)
	capt := captureRanges(id) // KAIR captures and their traces (capture.go, optrace.go)
	ranges = append(ranges, capt...)
	// Incidents, their evidence and audit (incident.go): retention takes
	// them with the job, like every other keyspace of it.
	inc := incidentRanges(id)
	ranges = append(ranges, inc...)
	incIDs, err := s.jobIncidentIDs(id)
	if err != nil {
		return fmt.Errorf("store: delete job %q: listing its incidents: %w", id, err)
	}
	// Reclaim compacts the collective and Greyhound ranges only when the
	// job has some: every collective write writes its x/ key, every
	// Greyhound write its state key.
	compact := [][2][]byte{{lo, hi}}
	if _, closer, err := s.db.Get(collStatsKey(id)); err == nil {
		closer.Close()
		compact = append(compact, coll...)
	}
	if _, closer, err := s.db.Get(ghKey(id, ghState, 0, 0)); err == nil {
		closer.Close()
		compact = append(compact, gh)
	}
	if _, closer, err := s.db.Get(profStatsKey(id)); err == nil { // every stack/OS write writes y/<job>
		closer.Close()
		compact = append(compact, prof...)
	}
	if s.hasCaptures(id) { // every trace belongs to a capture
		compact = append(compact, capt...)
	}
	if s.hasIncidentData(id) {
		compact = append(compact, inc...)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, r := range ranges {
		if err == nil {
			err = b.DeleteRange(r[0], r[1], nil)
		}
	}
	for _, iid := range incIDs {
		if err == nil {
			err = b.Delete(incidentIndexKey(iid, id), nil)
		}
	}
	if err == nil {
		err = b.Delete(statsKey(id), nil)
	}
	if err == nil {
		err = b.Delete(collStatsKey(id), nil)
	}
	if err == nil {
		err = b.Delete(profStatsKey(id), nil)
	}
	if err == nil {
		err = b.Delete(jobKey(id), nil)
	}
	if err == nil {
		err = s.guard(func() error { return b.Commit(s.wo) })
	}
	if err != nil {
		return fmt.Errorf("store: delete job %q: %w", id, err)
	}
	s.mu.Lock()
	s.metaBytes -= int64(len(s.jobs[id]))
	delete(s.jobs, id)
	delete(s.stats, id)
	delete(s.dims, id)
	delete(s.lastWrite, id)
	s.mu.Unlock()
	s.tailMu.Lock()
	delete(s.tails, id)
	s.tailMu.Unlock()
	s.forgetCollectives(id)
	s.forgetProfiles(id)
	s.delMu.Lock()
	s.deleted = append(s.deleted, compact...)
	s.delMu.Unlock()
	*deleted = true
	return nil
}

// Reclaim compacts the key ranges of jobs deleted since the last call, so
// their space is given back to the filesystem rather than when Pebble's
// own compactions get there. It returns the number of ranges compacted.
func (s *Store) Reclaim() (int, error) {
	s.delMu.Lock()
	ranges := s.deleted
	s.deleted = nil
	s.delMu.Unlock()
	if len(ranges) == 0 {
		return 0, nil
	}
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	if s.readOnly || s.broken.Load() != nil {
		return 0, nil
	}
	slices.SortFunc(ranges, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
	for i, r := range ranges {
		if err := s.guard(func() error { return s.db.Compact(r[0], r[1], true) }); err != nil {
			s.delMu.Lock()
			s.deleted = append(s.deleted, ranges[i:]...)
			s.delMu.Unlock()
			return i, fmt.Errorf("store: reclaim: %w", err)
		}
	}
	return len(ranges), nil
}

// Usage is the store's space figures.
type Usage struct {
	// DiskBytes is the space the database takes on disk (sstables, WAL,
	// MANIFEST).
	DiskBytes uint64
	// FreeBytes is the filesystem's free space (-1 unknown); DiskFull is
	// true while writes are refused for lack of it.
	FreeBytes int64
	DiskFull  bool
	// ReadOnly: opened read-only because the disk was full.
	ReadOnly bool
	Jobs     int
}

// Usage returns the store's space figures.
func (s *Store) Usage() (Usage, error) {
	if err := s.enter(); err != nil {
		return Usage{}, err
	}
	defer s.life.RUnlock()
	u := Usage{DiskBytes: s.db.Metrics().DiskSpaceUsage(), ReadOnly: s.readOnly}
	u.FreeBytes, u.DiskFull = s.space.state()
	u.DiskFull = u.DiskFull || s.readOnly || s.broken.Load() != nil
	s.mu.RLock()
	u.Jobs = len(s.jobs)
	s.mu.RUnlock()
	return u, nil
}

// JobAge is one job's age facts, for retention.
type JobAge struct {
	ID string
	// LastWrite is the time of its last stored vector (zero: none since
	// this was recorded); Created its registration.
	LastWrite, Created time.Time
}

// Last is when the job last changed: its last write, else its creation.
func (a JobAge) Last() time.Time {
	if a.LastWrite.After(a.Created) {
		return a.LastWrite
	}
	return a.Created
}

// JobAges returns every job's age facts, least recently written first.
func (s *Store) JobAges() ([]JobAge, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	s.mu.RLock()
	out := make([]JobAge, 0, len(s.jobs))
	raw := make([][]byte, 0, len(s.jobs))
	for id, b := range s.jobs {
		a := JobAge{ID: id}
		if ms := s.lastWrite[id]; ms > 0 {
			a.LastWrite = time.UnixMilli(ms)
		}
		out = append(out, a)
		raw = append(raw, b)
	}
	s.mu.RUnlock()
	for i := range out {
		// Only the creation time is needed; decoding the whole job would
		// cost its ranks for nothing.
		var c struct {
			Created time.Time `json:"created"`
		}
		if err := json.Unmarshal(raw[i], &c); err == nil {
			out[i].Created = c.Created
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if li, lj := out[i].Last(), out[j].Last(); !li.Equal(lj) {
			return li.Before(lj)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// JobDiskBytes estimates the disk space of job id's vectors, collective
// calls, Greyhound controller records, stacks, OS stats, KAIR
// captures with their traces and incidents with their working set.
func (s *Store) JobDiskBytes(id string) (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	n, err := s.db.EstimateDiskUsage(vecPrefix(id), vecPrefixEnd(id))
	if err != nil {
		return 0, err
	}
	ranges := append(append(collRanges(id), [2][]byte{ghPrefix(id), ghPrefixEnd(id)}), profRanges(id)...)
	if s.hasIncidentData(id) { // as for captures below: an empty range would be estimated at a table's share
		ranges = append(ranges, incidentRanges(id)...)
	}
	if s.hasCaptures(id) {
		// Only then: an empty t/ range inside another job's sstable
		// would be estimated at that table's share.
		ranges = append(ranges, captureRanges(id)...)
	}
	for _, r := range ranges {
		m, err := s.db.EstimateDiskUsage(r[0], r[1])
		if err != nil {
			return 0, err
		}
		n += m
	}
	return n, nil
}

// JobsPage returns up to limit jobs with ids greater than after, in id
// order, decoding only those; next is the cursor of the following page
// ("" on the last). The listing costs one sort of the ids, not a decode
// of every job (D9).
func (s *Store) JobsPage(after string, limit int) (jobs []*signal.Job, next string, err error) {
	if err := s.enter(); err != nil {
		return nil, "", err
	}
	defer s.life.RUnlock()
	limit = max(limit, 1)
	s.mu.RLock()
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		if id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) > limit {
		next = ids[limit-1]
		ids = ids[:limit]
	}
	raw := make([][]byte, len(ids))
	for i, id := range ids {
		raw[i] = s.jobs[id]
	}
	s.mu.RUnlock()
	jobs = make([]*signal.Job, 0, len(ids))
	for i, id := range ids {
		j, err := decodeJob(id, raw[i])
		if err != nil {
			return nil, "", err
		}
		jobs = append(jobs, j)
	}
	return jobs, next, nil
}
