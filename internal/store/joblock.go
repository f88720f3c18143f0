package store

import (
	"errors"
	"slices"
	"sync"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Writes are serialized per job, not store-wide. A write's expensive part
// is telling new records from re-sent ones: every key that may be stored
// already is read back and compared (conflict.go), and a client replaying
// old steps makes that one read per record. Under one store-wide lock (as
// before issue 16) that work of one job made every other job's commit
// wait: a 1-vector post waited 1.3–1.7 s at p99 behind a replay flood
// (`make chaos`). Under a per-job lock a job only waits for its own
// writes. What a job's writes share — its stats key s/<job>, its tail
// index, its collective and profile indexes — is only touched with the
// job's lock held, so one lock per job is all the ordering they need.
//
// Lock order: life (read) → jobMu (PutJob, DeleteJob, captures,
// Greyhound) → job locks (in id order) → the short map mutexes (mu,
// coll.mu, prof.mu, tailMu).

// jobLocks hands out one mutex per job id, created on demand and dropped
// when no one holds or waits for it, so their number is bounded by the
// writers at work, not by the jobs ever seen.
type jobLocks struct {
	mu sync.Mutex
	m  map[string]*jobLock
}

type jobLock struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

// lock locks the jobs' locks (ids may repeat) in id order, so writers of
// overlapping sets of jobs cannot deadlock, and returns the unlock.
func (l *jobLocks) lock(ids ...string) (unlock func()) {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	held := make([]*jobLock, len(ids))
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*jobLock{}
	}
	for i, id := range ids {
		jl := l.m[id]
		if jl == nil {
			jl = &jobLock{}
			l.m[id] = jl
		}
		jl.refs++
		held[i] = jl
	}
	l.mu.Unlock()
	for _, jl := range held {
		jl.mu.Lock()
	}
	return func() {
		for _, jl := range held {
			jl.mu.Unlock()
		}
		l.mu.Lock()
		for i, jl := range held {
			if jl.refs--; jl.refs == 0 {
				delete(l.m, ids[i])
			}
		}
		l.mu.Unlock()
	}
}

// ErrConflict is wrapped (with a *signal.ConflictError naming the record
// and the cell) by a write that re-sends a stored record with other
// values: a vector of the same (step, rank, micro), a call of the same
// (rank, enter_ns, comm, seq), a stack sample or OS point of the same
// window, node and identity. Nothing of the write is stored. The HTTP API
// answers 409. An identical re-send is not a conflict: it is a duplicate,
// acknowledged and not written again.
var ErrConflict = errors.New("store: conflicting re-send")

// conflict is the error of a conflicting re-send of record field.
func conflict(field, msg string) error {
	return &conflictErr{signal.ConflictError{Field: field, Msg: msg}}
}

// conflictErr is a *signal.ConflictError (errors.As) that is also
// ErrConflict (errors.Is), so the API can count re-send conflicts apart
// from other 409s (a communicator report that contradicts another).
type conflictErr struct{ signal.ConflictError }

func (e *conflictErr) Error() string        { return e.ConflictError.Error() }
func (e *conflictErr) Is(target error) bool { return target == ErrConflict }
func (e *conflictErr) As(target any) bool {
	if p, ok := target.(**signal.ConflictError); ok {
		*p = &e.ConflictError
		return true
	}
	return false
}
