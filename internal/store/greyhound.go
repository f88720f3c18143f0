package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal"
)

// The Greyhound controller's keyspace (docs/format/greyhound.md). Values
// are opaque JSON written by internal/analysis: the store does not import
// the engine, it only keeps the bytes durable and the keys ordered.
// DeleteJob (and so retention) deletes the whole range with the job's
// other keys in one batch.
//
//	g/<job>\x00s                              → controller state
//	g/<job>\x00p<seq uint32>                  → validation plan seq
//	g/<job>\x00r<seq uint32><rank uint32>     → one rank's result for plan seq
const (
	prefixGreyhound = "g/"
	ghState         = 's'
	ghPlan          = 'p'
	ghResult        = 'r'

	// MaxGreyhoundValue bounds one stored value (a state with its
	// transition history, a plan, a rank's result).
	MaxGreyhoundValue = 1 << 20

	// KeepValidations is how many of a job's newest plans (with their
	// results) are kept: SaveGreyhound deletes older ones, so the
	// controller's every-round read of the job's validations stays
	// bounded however many episodes the job has.
	KeepValidations = 8
)

// ValidationRecord is one stored validation plan and the results posted
// for it so far, by rank.
type ValidationRecord struct {
	Seq     uint32
	Plan    []byte
	Results map[int][]byte
}

func ghPrefix(job string) []byte {
	b := make([]byte, 0, len(prefixGreyhound)+len(job)+1+9)
	b = append(b, prefixGreyhound...)
	b = append(b, job...)
	return append(b, 0)
}

func ghPrefixEnd(job string) []byte {
	b := ghPrefix(job)
	b[len(b)-1] = 1
	return b
}

func ghKey(job string, kind byte, seq uint32, rank int) []byte {
	b := append(ghPrefix(job), kind)
	switch kind {
	case ghPlan:
		b = binary.BigEndian.AppendUint32(b, seq)
	case ghResult:
		b = binary.BigEndian.AppendUint32(b, seq)
		b = binary.BigEndian.AppendUint32(b, uint32(rank))
	}
	return b
}

func checkGreyhoundValue(what string, v []byte) error {
	if len(v) == 0 {
		return fmt.Errorf("store: empty greyhound %s", what)
	}
	if len(v) > MaxGreyhoundValue {
		return fmt.Errorf("store: greyhound %s of %d bytes is over the %d-byte limit", what, len(v), MaxGreyhoundValue)
	}
	return nil
}

// ghWrite runs a write of job's greyhound keys under jobMu, so it cannot
// interleave with DeleteJob: a deleted job's state is never written back.
func (s *Store) ghWrite(job string, need int64, fn func() error) error {
	if err := checkJobID(job); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	s.jobMu.Lock()
	defer s.jobMu.Unlock()
	if !s.hasJob(job) {
		return notFound(job)
	}
	if err := s.writable(need); err != nil {
		return err
	}
	return fn()
}

// SaveGreyhound stores the job's controller state and, when plan is not
// nil, a validation plan, in one durable write.
func (s *Store) SaveGreyhound(job string, state []byte, plan *ValidationRecord) error {
	if err := checkGreyhoundValue("state", state); err != nil {
		return err
	}
	need := int64(len(state))
	if plan != nil {
		if err := checkGreyhoundValue("plan", plan.Plan); err != nil {
			return err
		}
		need += int64(len(plan.Plan))
	}
	return s.ghWrite(job, need, func() error {
		b := s.db.NewBatch()
		defer b.Close()
		err := b.Set(ghKey(job, ghState, 0, 0), state, nil)
		if err == nil && plan != nil {
			err = b.Set(ghKey(job, ghPlan, plan.Seq, 0), plan.Plan, nil)
		}
		if err == nil && plan != nil && plan.Seq > KeepValidations {
			// Plans and results older than the newest KeepValidations.
			cut := plan.Seq - KeepValidations + 1
			err = b.DeleteRange(ghKey(job, ghPlan, 0, 0), ghKey(job, ghPlan, cut, 0), nil)
			if err == nil {
				err = b.DeleteRange(ghKey(job, ghResult, 0, 0), ghKey(job, ghResult, cut, 0), nil)
			}
		}
		if err == nil {
			err = s.guard(func() error { return b.Commit(s.wo) })
		}
		if err != nil {
			return fmt.Errorf("store: save greyhound state of job %q: %w", job, err)
		}
		return nil
	})
}

// GreyhoundState returns the job's stored controller state, nil when it
// has none yet.
func (s *Store) GreyhoundState(job string) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	v, closer, err := s.db.Get(ghKey(job, ghState, 0, 0))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read greyhound state of job %q: %w", job, err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// PutValidationResult stores rank's result for plan seq. The first result
// of a rank wins: a retried post of the same bytes is a duplicate (dup
// true, nothing written), so a client that lost the answer can post again
// safely; a post of other bytes for a rank that already answered is a
// *signal.ConflictError naming "rank" (it would otherwise be dropped
// silently while the client believes it was taken).
func (s *Store) PutValidationResult(job string, seq uint32, rank int, res []byte) (dup bool, err error) {
	if err := checkGreyhoundValue("result", res); err != nil {
		return false, err
	}
	if rank < 0 || rank > maxRank {
		return false, fmt.Errorf("store: rank %d out of range", rank)
	}
	err = s.ghWrite(job, int64(len(res)), func() error {
		_, closer, err := s.db.Get(ghKey(job, ghPlan, seq, 0))
		if err != nil {
			if errors.Is(err, pebble.ErrNotFound) {
				return fmt.Errorf("store: job %q has no validation plan %d: %w", job, seq, ErrNotFound)
			}
			return err
		}
		closer.Close()
		k := ghKey(job, ghResult, seq, rank)
		old, closer, err := s.db.Get(k)
		if err == nil {
			same := bytes.Equal(old, res)
			closer.Close()
			if !same {
				return &signal.ConflictError{Field: "rank", Msg: fmt.Sprintf("rank %d already posted a different result for plan %d; the first result stands", rank, seq)}
			}
			dup = true
			return nil
		}
		if !errors.Is(err, pebble.ErrNotFound) {
			return err
		}
		if err := s.guard(func() error { return s.db.Set(k, res, s.wo) }); err != nil {
			return fmt.Errorf("store: put validation result of job %q: %w", job, err)
		}
		return nil
	})
	return dup, err
}

// ValidationRecords returns the job's validation plans with their results
// in plan order; since > 0 skips plans with a lower seq.
func (s *Store) ValidationRecords(job string, since uint32) ([]ValidationRecord, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	pre := ghPrefix(job)
	lo := binary.BigEndian.AppendUint32(append(bytes.Clone(pre), ghPlan), since)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: ghPrefixEnd(job)})
	if err != nil {
		return nil, fmt.Errorf("store: iterate greyhound of job %q: %w", job, err)
	}
	var out []ValidationRecord
	idx := map[uint32]int{}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(pre):]
		switch {
		case len(k) == 5 && k[0] == ghPlan:
			seq := binary.BigEndian.Uint32(k[1:])
			idx[seq] = len(out)
			out = append(out, ValidationRecord{Seq: seq, Plan: bytes.Clone(it.Value()), Results: map[int][]byte{}})
		case len(k) == 9 && k[0] == ghResult:
			seq := binary.BigEndian.Uint32(k[1:])
			if seq < since {
				continue
			}
			if i, ok := idx[seq]; ok {
				out[i].Results[int(binary.BigEndian.Uint32(k[5:]))] = bytes.Clone(it.Value())
			}
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: iterate greyhound of job %q: %w", job, err)
	}
	return out, nil
}

// ValidationPlan returns job's stored plan seq (a point read); the error
// wraps ErrNotFound when there is none.
func (s *Store) ValidationPlan(job string, seq uint32) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	v, closer, err := s.db.Get(ghKey(job, ghPlan, seq, 0))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("store: job %q has no validation plan %d: %w", job, seq, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("store: read validation plan of job %q: %w", job, err)
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

// HasValidationResult reports whether rank posted a result for plan seq
// (a point read).
func (s *Store) HasValidationResult(job string, seq uint32, rank int) (bool, error) {
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return false, notFound(job)
	}
	if rank < 0 || rank > maxRank {
		return false, nil
	}
	_, closer, err := s.db.Get(ghKey(job, ghResult, seq, rank))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: read validation result of job %q: %w", job, err)
	}
	closer.Close()
	return true, nil
}

// ValidationResults returns the results posted for plan seq by rank (a
// prefix scan of that plan's results only).
func (s *Store) ValidationResults(job string, seq uint32) (map[int][]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(job) {
		return nil, notFound(job)
	}
	lo := binary.BigEndian.AppendUint32(append(ghPrefix(job), ghResult), seq)
	pl := len(lo)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: ghKey(job, ghResult, seq+1, 0)})
	if err != nil {
		return nil, fmt.Errorf("store: iterate validation results of job %q: %w", job, err)
	}
	out := map[int][]byte{}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == pl+4 {
			out[int(binary.BigEndian.Uint32(k[pl:]))] = bytes.Clone(it.Value())
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: iterate validation results of job %q: %w", job, err)
	}
	return out, nil
}
