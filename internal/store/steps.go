package store

import (
	"fmt"
	"math"

	"github.com/cockroachdb/pebble"
)

// Step ranges of one job's vectors, bounded to [lo, hi] so a caller can
// ask about one incarnation's steps (a stored step is an ordinal,
// stagevec.Ordinal; the store does not interpret it).

// vecBounds is the key range of job's vectors with lo <= step <= hi.
func vecBounds(jobID string, lo, hi int64) (lower, upper []byte) {
	lower = vecKey(jobID, max(lo, 0), 0, 0)
	upper = vecPrefixEnd(jobID)
	if hi < math.MaxInt64 {
		upper = vecKey(jobID, hi+1, 0, 0)
	}
	return lower, upper
}

// LastStepsIn returns the range [from, to] holding the last n distinct
// stored steps of jobID within [lo, hi] (fewer if there are fewer; got
// says how many); ok is false when there are none or n < 1. Steps may have
// gaps, so this walks back n distinct steps with one seek each rather than
// computing to-n+1.
func (s *Store) LastStepsIn(jobID string, lo, hi int64, n int) (from, to int64, got int, err error) {
	if err := s.enter(); err != nil {
		return 0, 0, 0, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(jobID) {
		return 0, 0, 0, notFound(jobID)
	}
	if n < 1 || hi < lo || hi < 0 {
		return 0, 0, 0, nil
	}
	lower, upper := vecBounds(jobID, lo, hi)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("store: last steps %q: %w", jobID, err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, 0, 0, it.Error()
	}
	stepOf := func() (int64, error) {
		step, _, _, ok := parseVecSuffix(it.Key())
		if !ok {
			return 0, fmt.Errorf("store: key %s: %w: malformed vector key", keyString(it.Key()), ErrCorrupt)
		}
		return step, nil
	}
	if to, err = stepOf(); err != nil {
		return 0, 0, 0, err
	}
	from, got = to, 1
	for ; got < n; got++ {
		// The smallest key of step `from` is (from, 0, 0); the entry before
		// it belongs to the previous distinct step.
		if !it.SeekLT(vecKey(jobID, from, 0, 0)) {
			break
		}
		if from, err = stepOf(); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := it.Error(); err != nil {
		return 0, 0, 0, fmt.Errorf("store: last steps %q: %w", jobID, err)
	}
	return from, to, got, nil
}

// StepSpan returns the first and last stored step of jobID within
// [lo, hi]; ok is false when none is stored there. Two seeks.
func (s *Store) StepSpan(jobID string, lo, hi int64) (first, last int64, ok bool, err error) {
	if err := s.enter(); err != nil {
		return 0, 0, false, err
	}
	defer s.life.RUnlock()
	if !s.hasJob(jobID) {
		return 0, 0, false, notFound(jobID)
	}
	if hi < lo || hi < 0 {
		return 0, 0, false, nil
	}
	lower, upper := vecBounds(jobID, lo, hi)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, 0, false, fmt.Errorf("store: step span %q: %w", jobID, err)
	}
	defer it.Close()
	if !it.First() {
		return 0, 0, false, it.Error()
	}
	var okF, okL bool
	first, _, _, okF = parseVecSuffix(it.Key())
	it.Last()
	last, _, _, okL = parseVecSuffix(it.Key())
	if !okF || !okL {
		return 0, 0, false, fmt.Errorf("store: key %s: %w: malformed vector key", keyString(it.Key()), ErrCorrupt)
	}
	return first, last, true, it.Error()
}
