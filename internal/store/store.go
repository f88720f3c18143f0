package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"

	"github.com/laggard-dev/laggard/internal/signal"
)

// ErrNotFound is returned (wrapped, with the job id) for an unknown job.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("store: closed")

// Options tunes the store. The zero value is a durable store with
// defaults sized for one server process.
type Options struct {
	// CacheSize is the block cache in bytes (default 64 MiB).
	CacheSize int64
	// MemTableSize is the size of each Pebble memtable in bytes (default
	// 64 MiB): larger memtables mean fewer, larger flushes under ingest.
	MemTableSize uint64
	// NoSync acknowledges writes before the WAL is fsync'd. Tests and
	// benchmarks only: a crash may lose acknowledged vectors. (Durable is
	// the default so that the zero Options is safe.)
	NoSync bool
	// Logger receives Pebble's messages (Info at Debug level). Default
	// slog.Default().
	Logger *slog.Logger
}

// Store is an open store. All methods are safe for concurrent use.
type Store struct {
	db  *pebble.DB
	log *slog.Logger
	wo  *pebble.WriteOptions

	// life is read-held by every operation and write-held by Close, so
	// Close waits for in-flight calls and later calls see ErrClosed.
	life   sync.RWMutex
	closed bool

	// wmu serializes the check-and-apply phase of writes (duplicate check,
	// stats update, memtable apply); the fsync wait happens outside it so
	// concurrent writers share WAL syncs.
	wmu sync.Mutex

	jobMu sync.Mutex // serializes PutJob so db and map agree on the order

	mu    sync.RWMutex        // guards jobs and stats
	jobs  map[string][]byte   // job id → stored JSON (decoded per call, so callers get copies)
	stats map[string]JobStats // job id → stats, mirrors s/<job>
	dims  map[string]dims     // job id → declared shape, for the tail index

	tails map[string]*tail // guarded by wmu; rebuilt lazily after Open
}

// Open opens (creating if needed) the store in dir and loads jobs and
// stats, one key per job, so Open cost does not grow with stored vectors.
func Open(dir string, opt Options) (*Store, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "store")
	cacheSize := opt.CacheSize
	if cacheSize <= 0 {
		cacheSize = 64 << 20
	}
	memSize := opt.MemTableSize
	if memSize == 0 {
		memSize = 64 << 20
	}
	cache := pebble.NewCache(cacheSize)
	defer cache.Unref()
	// Split = whole key: no MVCC suffixes here, and it lets the duplicate
	// check use SeekPrefixGE as a bloom-filtered exact-key probe. Same name
	// and order as the default comparer, so the on-disk format is unchanged.
	cmp := *pebble.DefaultComparer
	cmp.Split = func(k []byte) int { return len(k) }
	po := &pebble.Options{
		Comparer:                    &cmp,
		Cache:                       cache,
		MemTableSize:                memSize,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		LBaseMaxBytes:               256 << 20,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{log},
		// Pebble's default listener logs these at Info, which we send to
		// Debug; they deserve attention, so surface them at Warn/Error.
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) { log.Error("pebble background error", "err", err) },
			WriteStallBegin: func(i pebble.WriteStallBeginInfo) { log.Warn("pebble write stall", "reason", i.Reason) },
			WriteStallEnd:   func() { log.Info("pebble write stall ended") },
		},
	}
	po.Levels = make([]pebble.LevelOptions, 7)
	for i := range po.Levels {
		l := &po.Levels[i]
		// 32 KiB blocks: scans dominate reads and values are ~60 bytes.
		l.BlockSize = 32 << 10
		// Bloom filters make the duplicate check of late writes skip
		// sstables that cannot hold the key.
		l.FilterPolicy = bloom.FilterPolicy(10)
		l.FilterType = pebble.TableFilter
		if i > 0 {
			l.TargetFileSize = po.Levels[i-1].TargetFileSize * 2
		} else {
			l.TargetFileSize = 8 << 20
		}
	}
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	s := &Store{
		db: db, log: log, wo: pebble.Sync,
		jobs: map[string][]byte{}, stats: map[string]JobStats{}, dims: map[string]dims{},
		tails: map[string]*tail{},
	}
	if opt.NoSync {
		s.wo = pebble.NoSync
	}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	log.Debug("store opened", "dir", dir, "jobs", len(s.jobs))
	return s, nil
}

// load reads every j/ and s/ key. Both ranges hold one key per job.
func (s *Store) load() error {
	if err := s.scanPrefix(prefixJob, func(id string, v []byte) error {
		var j signal.Job
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("store: key %s: %w: %v", keyString(jobKey(id)), ErrCorrupt, err)
		}
		s.jobs[id] = bytes.Clone(v)
		s.dims[id] = jobDims(j.WorldSize, j.Accumulation)
		return nil
	}); err != nil {
		return err
	}
	return s.scanPrefix(prefixStats, func(id string, v []byte) error {
		st, err := decodeStats(statsKey(id), v)
		if err != nil {
			return err
		}
		s.stats[id] = st
		return nil
	})
}

func (s *Store) scanPrefix(prefix string, fn func(id string, v []byte) error) error {
	lo := []byte(prefix)
	hi := []byte(prefix)
	hi[len(hi)-1]++
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: iterate %s: %w", prefix, err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(string(it.Key()[len(prefix):]), it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("store: iterate %s: %w", prefix, err)
	}
	return nil
}

// Close flushes nothing extra (the WAL already holds every acknowledged
// write), waits for in-flight calls and closes the database.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	return nil
}

// enter read-locks the store's lifetime; callers defer s.life.RUnlock().
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

func notFound(id string) error { return fmt.Errorf("store: job %q: %w", id, ErrNotFound) }

// PutJob creates or replaces job j (ranks joining re-put it). The store
// does not validate the job beyond what the key layout needs; callers run
// signal.Job.Validate.
func (s *Store) PutJob(j *signal.Job) error {
	if err := checkJobID(j.ID); err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("store: encode job %q: %w", j.ID, err)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	// Held across the write so concurrent puts of one job land in the
	// database and in the map in the same order.
	s.jobMu.Lock()
	defer s.jobMu.Unlock()
	if err := s.db.Set(jobKey(j.ID), b, s.wo); err != nil {
		return fmt.Errorf("store: put job %q: %w", j.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[j.ID] = b
	s.dims[j.ID] = jobDims(j.WorldSize, j.Accumulation)
	if _, ok := s.stats[j.ID]; !ok {
		s.stats[j.ID] = emptyStats
	}
	return nil
}

// Job returns a fresh copy of job id, or an error wrapping ErrNotFound.
func (s *Store) Job(id string) (*signal.Job, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	s.mu.RLock()
	b, ok := s.jobs[id]
	s.mu.RUnlock()
	if !ok {
		return nil, notFound(id)
	}
	return decodeJob(id, b)
}

// Jobs returns fresh copies of all jobs sorted by id.
func (s *Store) Jobs() ([]*signal.Job, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	s.mu.RLock()
	ids := make([]string, 0, len(s.jobs))
	raw := make(map[string][]byte, len(s.jobs))
	for id, b := range s.jobs {
		ids = append(ids, id)
		raw[id] = b
	}
	s.mu.RUnlock()
	slices.Sort(ids)
	out := make([]*signal.Job, 0, len(ids))
	for _, id := range ids {
		j, err := decodeJob(id, raw[id])
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func decodeJob(id string, b []byte) (*signal.Job, error) {
	var j signal.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("store: key %s: %w: %v", keyString(jobKey(id)), ErrCorrupt, err)
	}
	return &j, nil
}

// Stats returns job id's maintained counters without touching disk.
func (s *Store) Stats(id string) (JobStats, error) {
	if err := s.enter(); err != nil {
		return JobStats{}, err
	}
	defer s.life.RUnlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.jobs[id]; !ok {
		return JobStats{}, notFound(id)
	}
	st, ok := s.stats[id]
	if !ok {
		st = emptyStats
	}
	return st, nil
}

func (s *Store) hasJob(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.jobs[id]
	return ok
}

// pebbleLogger routes Pebble's logging into slog. Pebble's Infof is chatty
// (flushes, compactions), so it goes to Debug.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }

// Fatalf must not return (Pebble relies on it); panic rather than exit so
// an embedding process can still report the failure.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal", "msg", msg)
	panic("store: pebble fatal: " + msg)
}
