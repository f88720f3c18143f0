package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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
	// 64 MiB, less on a small volume: see volumeDefaults): larger
	// memtables mean fewer, larger flushes under ingest.
	MemTableSize uint64
	// NoSync acknowledges writes before the WAL is fsync'd. Tests and
	// benchmarks only: a crash may lose acknowledged vectors. (Durable is
	// the default so that the zero Options is safe.)
	NoSync bool
	// Logger receives Pebble's messages (Info at Debug level). Default
	// slog.Default().
	Logger *slog.Logger

	// MinFreeBytes is the free space the store keeps on its filesystem:
	// below it writes fail with ErrDiskFull instead of letting Pebble hit
	// ENOSPC, which it treats as fatal (space.go). Default max(256 MiB,
	// 4 × MemTableSize), room to flush every memtable — on a volume
	// smaller than 2 GiB, max(volume/8, 4 × MemTableSize) (see
	// volumeDefaults); negative disables the check.
	MinFreeBytes int64
	// FreeSpace reports the free bytes of dir's filesystem; default
	// statfs. Tests inject it.
	FreeSpace func(dir string) (uint64, error)

	// MaxJobs bounds the registered jobs (default 100,000); a new job
	// beyond it fails with ErrTooManyJobs. MaxJobBytes bounds one job's
	// stored registration with its ranks (default 16 MiB) and
	// MaxMetaBytes all jobs' (default 1 GiB): job metadata is held in
	// memory, so these bound the memory it takes (D9).
	MaxJobs      int
	MaxJobBytes  int
	MaxMetaBytes int64

	// MaxJobProfileBytes bounds one job's stored stacks and OS stats
	// (default DefaultMaxJobProfileBytes); past it writes fail with
	// ErrQuota.
	MaxJobProfileBytes int64
}

// ErrTooManyJobs is returned (wrapped, naming the limit) when registering
// a new job would exceed Options.MaxJobs or MaxMetaBytes. The HTTP API
// answers 507.
var ErrTooManyJobs = errors.New("store: job limit reached")

// Store is an open store. All methods are safe for concurrent use.
type Store struct {
	db  *pebble.DB
	log *slog.Logger
	wo  *pebble.WriteOptions

	dir   string
	opt   Options
	po    *pebble.Options // for reopening writable
	space *spaceGuard
	// readOnly: opened read-only because the disk was full; writes fail
	// with ErrDiskFull until reopen succeeds. Changed under life's write
	// lock.
	readOnly  bool
	reopening atomic.Bool
	skipped   atomic.Int64 // undecodable records scans skipped (stack.go)
	// broken is set once a Pebble write failed in a way Pebble cannot
	// recover from (space.go): every later write fails with it and Close
	// leaves the database to the process exit.
	broken atomic.Pointer[error]
	// deleted are the vector ranges of deleted jobs not yet compacted.
	delMu   sync.Mutex
	deleted [][2][]byte

	// life is read-held by every operation and write-held by Close, so
	// Close waits for in-flight calls and later calls see ErrClosed.
	life   sync.RWMutex
	closed bool

	// locks serialize each job's check-and-apply phase of writes
	// (duplicate and conflict check, stats update, memtable apply;
	// joblock.go); the fsync wait happens outside them so concurrent
	// writers share WAL syncs.
	locks jobLocks

	jobMu sync.Mutex // serializes PutJob so db and map agree on the order

	mu        sync.RWMutex        // guards jobs, stats, dims, lastWrite, metaBytes
	jobs      map[string][]byte   // job id → stored JSON (decoded per call, so callers get copies)
	stats     map[string]JobStats // job id → stats, mirrors s/<job>
	dims      map[string]dims     // job id → declared shape, for the tail index
	lastWrite map[string]int64    // job id → Unix ms of its last vector write (0 unknown)
	metaBytes int64               // sum of len(jobs[*])

	tailMu sync.Mutex
	tails  map[string]*tail // guarded by tailMu, each tail by its job's lock; rebuilt lazily after Open

	coll collectives // the collective keyspace's per-job index (collective.go)
	prof profIndex   // the stack and OS-stat keyspaces' per-job stats (stack.go)
}

// Open opens (creating if needed) the store in dir and loads jobs and
// stats, one key per job, so Open cost does not grow with stored vectors.
func Open(dir string, opt Options) (*Store, error) {
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "store")
	opt.Logger = log
	cacheSize := opt.CacheSize
	if cacheSize <= 0 {
		cacheSize = 64 << 20
	}
	volMem, volReserve := volumeDefaults(dir, opt.FreeSpace != nil)
	memSize := opt.MemTableSize
	if memSize == 0 {
		memSize = volMem
	}
	if opt.MinFreeBytes == 0 {
		opt.MinFreeBytes = max(volReserve, 4*int64(memSize))
	}
	if opt.MaxJobs <= 0 {
		opt.MaxJobs = 100_000
	}
	if opt.MaxJobBytes <= 0 {
		opt.MaxJobBytes = 16 << 20
	}
	if opt.MaxMetaBytes <= 0 {
		opt.MaxMetaBytes = 1 << 30
	}
	s := &Store{
		log: log, wo: pebble.Sync, dir: dir, opt: opt,
		jobs: map[string][]byte{}, stats: map[string]JobStats{}, dims: map[string]dims{}, lastWrite: map[string]int64{},
		tails: map[string]*tail{},
	}
	if opt.NoSync {
		s.wo = pebble.NoSync
	}
	s.space = newSpaceGuard(dir, opt.MinFreeBytes, opt.FreeSpace, log)
	s.opt.CacheSize = cacheSize
	// Split = whole key: no MVCC suffixes here, and it lets the duplicate
	// check use SeekPrefixGE as a bloom-filtered exact-key probe. Same name
	// and order as the default comparer, so the on-disk format is unchanged.
	cmp := *pebble.DefaultComparer
	cmp.Split = func(k []byte) int { return len(k) }
	po := &pebble.Options{
		Comparer: &cmp,
		// Obsolete WAL files are deleted, not kept for reuse: see
		// noRecycle.
		Cleaner:                     noRecycle{},
		MemTableSize:                memSize,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       4,
		L0StopWritesThreshold:       24,
		LBaseMaxBytes:               256 << 20,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{log, s.fatal},
		// Pebble's default listener logs these at Info, which we send to
		// Debug; they deserve attention, so surface them at Warn/Error.
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				if isNoSpace(err) {
					s.space.noteNoSpace()
				}
				log.Error("pebble background error", "err", err)
			},
			WriteStallBegin: func(i pebble.WriteStallBeginInfo) { log.Warn("pebble write stall", "reason", i.Reason) },
			WriteStallEnd:   func() { log.Info("pebble write stall ended") },
		},
	}
	// No read-triggered compactions: reads must not write, or a store on
	// a full disk would hit ENOSPC (fatal to Pebble, space.go) just by
	// serving reports. Size-triggered compactions still run.
	po.Experimental.ReadSamplingMultiplier = -1
	po.Levels = make([]pebble.LevelOptions, 7)
	for i := range po.Levels {
		l := &po.Levels[i]
		// 32 KiB blocks: scans dominate reads and values are ~60 bytes.
		l.BlockSize = 32 << 10
		// Bloom filters make the duplicate check of late writes skip
		// sstables that cannot hold the key.
		l.FilterPolicy = bloom.FilterPolicy(10)
		l.FilterType = pebble.TableFilter
		// Files double per level up to 64 MiB, not 512 MiB: a table's
		// bloom filter is one block (10 bits a key), and a block larger
		// than a shard of the block cache (at least 4 MiB) is never
		// cached — every exact-key Get read a multi-MiB filter from the
		// file again (issue 16 item 13).
		if i > 0 {
			l.TargetFileSize = min(po.Levels[i-1].TargetFileSize*2, 64<<20)
		} else {
			l.TargetFileSize = 8 << 20
		}
	}
	s.po = po
	// Opening writable replays the WAL into new sstables and writes a new
	// MANIFEST, which on a full disk fails fatally (space.go); read-only
	// needs no space, so a full disk still serves reads (D7).
	readOnly := s.space.low()
	db, err := s.openDB(readOnly)
	if err != nil && !readOnly && isNoSpace(err) {
		readOnly = true
		db, err = s.openDB(true)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", dir, err)
	}
	if readOnly {
		free, _ := s.space.state()
		log.Error("disk full: store opened read-only; writes answer ErrDiskFull until space is freed, then it reopens writable by itself",
			"dir", dir, "free_bytes", free, "reserve_bytes", opt.MinFreeBytes)
	}
	s.db, s.readOnly = db, readOnly
	s.space.debt = s.compactionDebt
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	log.Debug("store opened", "dir", dir, "jobs", len(s.jobs), "read_only", readOnly)
	return s, nil
}

// compactionDebt is what Pebble's pending compactions still have to
// write (the free-space floor adds it, space.go). It reads s.db, so it is
// called only with life held (every spaceGuard reading is).
func (s *Store) compactionDebt() int64 {
	if s.readOnly || s.db == nil {
		return 0
	}
	m := s.db.Metrics()
	return int64(min(m.Compact.EstimatedDebt, 1<<62)) + max(m.Compact.InProgressBytes, 0)
}

// volumeDefaults are the memtable size and free-space reserve for a
// store on dir's filesystem. On a large volume: 64 MiB memtables and a
// 256 MiB reserve. On a small one both shrink with it (memtables of
// volume/64, at least 1 MiB; a reserve of volume/8, at least eight
// memtables, room to flush them and compact what they become), because the store's
// own write-ahead log takes room the reserve cannot count on: each WAL
// file is preallocated to 1.1 memtables, and up to five memtables (each
// with its WAL) may wait for their flush. With the fixed defaults a
// store on a volume under ~700 MiB could pass below its own reserve
// with its logs alone — and then refuse every write while nothing that
// would free them (a flush, which needs writes) could run: ingest never
// resumed after a disk-full episode (issue 16 item 12). injected: the
// caller supplies free space (tests); the volume is not read.
func volumeDefaults(dir string, injected bool) (memSize uint64, reserve int64) {
	memSize, reserve = 64<<20, 256<<20
	if injected {
		return memSize, reserve
	}
	total, err := statfsTotal(existingParent(dir))
	if err != nil || total == 0 || total >= 2<<30 {
		return memSize, reserve
	}
	memSize = max(1<<20, min(64<<20, total/64)) &^ (1<<20 - 1)
	return memSize, max(int64(total/8), 8*int64(memSize))
}

// existingParent is dir or its nearest existing ancestor (the store may
// not have created dir yet).
func existingParent(dir string) string {
	for d := dir; ; {
		if _, err := os.Stat(d); err == nil {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			return d
		}
		d = p
	}
}

// noRecycle is Pebble's default cleaner (delete) that also turns off its
// WAL recycling: Pebble keeps up to MemTableStopWritesThreshold+1
// obsolete WAL files (each a preallocated 1.1 memtables) to reuse, and
// holds their space for as long as no new WAL is made — which on a full
// disk, where writes are refused, is for ever: the space a flush freed
// never came back (issue 16 item 12). Pebble v1.1 has no option for
// this; it skips recycling for a cleaner that "needs file contents",
// which the ArchiveCleaner two levels down declares, while its Clean
// is shadowed by the DeleteCleaner's one level up (Go's method
// promotion: the shallower wins). A new WAL file costs one more
// metadata sync per memtable (64 MiB of writes), nothing measurable.
type noRecycle struct {
	pebble.DeleteCleaner
	needsContents
}

type needsContents struct{ pebble.ArchiveCleaner }

// openDB opens Pebble with a fresh block cache (a closed DB's cache is
// released with it), turning its fatal-error panic (pebbleLogger.Fatalf)
// into an error so a failed open does not end the process.
func (s *Store) openDB(readOnly bool) (db *pebble.DB, err error) {
	o := *s.po
	o.ReadOnly = readOnly
	o.Cache = pebble.NewCache(s.opt.CacheSize)
	defer o.Cache.Unref()
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, panicError(p)
		}
	}()
	return pebble.Open(s.dir, &o)
}

// panicError turns a recovered Pebble panic into an error, keeping ENOSPC
// recognizable.
func panicError(p any) error {
	if fe, ok := p.(fatalPanic); ok {
		p = fe.msg // a string, so ENOSPC is recognized in the text
	}
	switch v := p.(type) {
	case error:
		return fmt.Errorf("pebble: %w", v)
	case string:
		if containsNoSpace(v) {
			return fmt.Errorf("pebble: %s: %w", v, syscall.ENOSPC)
		}
		return errors.New("pebble: " + v)
	}
	return fmt.Errorf("pebble: %v", p)
}

// writable returns nil when writes may be attempted: the store is not
// read-only, no write has broken Pebble, and need more bytes fit above the
// free-space reserve. Called with life read-held.
func (s *Store) writable(need int64) error {
	if p := s.broken.Load(); p != nil {
		return *p
	}
	if s.readOnly {
		err := s.space.check(need)
		if err == nil {
			// Space is back: reopen writable in the background (it needs
			// life's write lock, which this caller holds for reading).
			s.reopenAsync()
			err = fmt.Errorf("%w: the store is read-only after starting on a full disk and is reopening writable now; retry", ErrDiskFull)
		}
		return err
	}
	return s.space.check(need)
}

// reopenAsync reopens a read-only store writable, once at a time.
func (s *Store) reopenAsync() {
	if !s.reopening.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.reopening.Store(false)
		s.life.Lock()
		defer s.life.Unlock()
		if s.closed || !s.readOnly {
			return
		}
		if err := s.db.Close(); err != nil {
			s.log.Warn("closing the read-only store to reopen it writable", "err", err)
		}
		db, err := s.openDB(false)
		if err != nil {
			s.log.Error("reopening the store writable failed; staying read-only", "err", err)
			if db, err = s.openDB(true); err != nil {
				// Neither works: nothing more can be served.
				e := fmt.Errorf("store: reopen %s: %w", s.dir, err)
				s.broken.Store(&e)
				s.closed = true
				s.log.Error("store unusable", "err", err)
				return
			}
			s.db = db
			return
		}
		s.db, s.readOnly = db, false
		s.tailMu.Lock()
		clear(s.tails)
		s.tailMu.Unlock()
		s.log.Info("store reopened writable: disk space available again", "dir", s.dir)
	}()
}

// guard runs a Pebble write, turning the panics Pebble raises on write
// failures (space.go) into errors; after one, the store refuses writes.
// A failed fsync or write for lack of space marks the disk full.
func (s *Store) guard(write func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.breakWith(panicError(p))
		}
	}()
	if err = write(); err != nil && isNoSpace(err) {
		// Pebble keeps the WAL's error and panics on the next commit with
		// its pipeline locked; never commit again on this instance.
		err = s.breakWith(err)
	}
	return err
}

// breakWith records a write failure Pebble cannot recover from.
func (s *Store) breakWith(cause error) error {
	var err error
	if isNoSpace(cause) {
		s.space.noteNoSpace()
		err = fmt.Errorf("%w: a write failed for lack of space (%v); writes are refused until laggard restarts with space freed (acknowledged data is safe)", ErrDiskFull, cause)
	} else {
		err = fmt.Errorf("store: a write failed (%w); writes are refused until laggard restarts", cause)
	}
	if s.broken.CompareAndSwap(nil, &err) {
		s.log.Error("store write failed; refusing writes until restart, reads keep working", "err", cause)
	}
	return *s.broken.Load()
}

// fatal is Pebble's Logger.Fatalf hook (see pebbleLogger).
func (s *Store) fatal(msg string) {
	if containsNoSpace(msg) {
		s.space.noteNoSpace()
	}
}

// load reads every j/ and s/ key. Both ranges hold one key per job.
func (s *Store) load() error {
	if err := s.scanPrefix(prefixJob, func(id string, v []byte) error {
		var j signal.Job
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("store: key %s: %w: %v", keyString(jobKey(id)), ErrCorrupt, err)
		}
		s.jobs[id] = bytes.Clone(v)
		s.metaBytes += int64(len(v))
		s.dims[id] = jobDims(j.WorldSize, j.Accumulation)
		return nil
	}); err != nil {
		return err
	}
	return s.scanPrefix(prefixStats, func(id string, v []byte) error {
		st, lw, err := decodeStats(statsKey(id), v)
		if err != nil {
			return err
		}
		s.stats[id] = st
		if lw == 0 && st.Vectors > 0 {
			// Written by a version that did not record it: count from
			// now, or retention would take a live job for an idle one.
			lw = time.Now().UnixMilli()
		}
		s.lastWrite[id] = lw
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
	if p := s.broken.Load(); p != nil {
		// Pebble's commit pipeline may still be locked by the failed
		// write; DB.Close would wait on it forever. The WAL holds every
		// acknowledged write; the process exit releases the rest.
		return fmt.Errorf("store: close: not closing the database after a failed write: %w", *p)
	}
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
	if len(b) > s.opt.MaxJobBytes {
		return signal.FieldErrorf("ranks", "job %q would be %d bytes stored with its %d ranks, the limit is %d", signal.Clip(j.ID), len(b), len(j.Ranks), s.opt.MaxJobBytes)
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	// Held across the write so concurrent puts of one job land in the
	// database and in the map in the same order.
	s.jobMu.Lock()
	defer s.jobMu.Unlock()
	s.mu.RLock()
	old, exists := s.jobs[j.ID]
	n, meta := len(s.jobs), s.metaBytes
	s.mu.RUnlock()
	switch {
	case !exists && n >= s.opt.MaxJobs:
		return fmt.Errorf("%w: %d jobs are registered, the limit (-max-jobs) is %d; delete finished jobs (DELETE /api/v1/jobs/{id}) or set a retention", ErrTooManyJobs, n, s.opt.MaxJobs)
	case meta-int64(len(old))+int64(len(b)) > s.opt.MaxMetaBytes:
		return fmt.Errorf("%w: job metadata would take %d bytes, the limit is %d; delete finished jobs or set a retention", ErrTooManyJobs, meta-int64(len(old))+int64(len(b)), s.opt.MaxMetaBytes)
	}
	if err := s.writable(int64(len(b))); err != nil {
		return err
	}
	if err := s.guard(func() error { return s.db.Set(jobKey(j.ID), b, s.wo) }); err != nil {
		return fmt.Errorf("store: put job %q: %w", j.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jobs[j.ID] = b
	s.metaBytes += int64(len(b) - len(old))
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
type pebbleLogger struct {
	l       *slog.Logger
	onFatal func(msg string)
}

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }

// fatalPanic is the panic value of Fatalf, recognized by Store.guard.
// It is an error so an unrecovered panic prints the message.
type fatalPanic struct{ msg string }

func (f fatalPanic) Error() string { return f.msg }

// Fatalf must not return (Pebble relies on it); panic rather than exit so
// an embedding process can still report the failure, and so a write on
// one of our goroutines can recover it (Store.guard). On a Pebble
// background goroutine the panic ends the process; the free-space reserve
// exists so that a full disk never gets here (space.go).
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble fatal", "msg", msg)
	if p.onFatal != nil {
		p.onFatal(msg)
	}
	panic(fatalPanic{"store: pebble fatal: " + msg})
}
