package store

import (
	"fmt"
	"math/bits"

	"github.com/cockroachdb/pebble"
)

// tail is an exact in-memory index of which (rank, micro) keys are stored
// for a job's most recent steps, so the duplicate check behind the distinct
// JobStats.Vectors count costs a bit test instead of a disk probe. Ranks
// of a synchronous job are within a few steps of each other, so nearly
// every write lands in the window; older steps fall back to a
// bloom-filtered probe. (Probing Pebble for every key was ~60% of ingest
// CPU in BenchmarkAppend.)
//
// Invariant: last == the job's JobStats.LastStep, and the row of every
// step in (last-span, last] has exactly the stored keys' bits set. Steps
// above last hold no keys, which is why advancing can simply clear rows.
type tail struct {
	dims        // bit (rank, micro) = rank*acc + micro
	span  int64 // steps covered
	last  int64 // newest covered step; -1 before the first vector
	words int   // uint64s per row
	rows  []uint64
}

// dims are the job's declared shape: world size and accumulation factor
// (at least 1).
type dims struct{ world, acc int }

func jobDims(world, acc int) dims { return dims{max(world, 1), max(acc, 1)} }

const (
	tailMaxSpan = 64
	tailMaxBits = 1 << 24 // 2 MiB per job at most
)

func newTail(world, acc int, last int64) *tail {
	world, acc = max(world, 1), max(acc, 1)
	width := world * acc
	span := int64(max(1, min(tailMaxSpan, tailMaxBits/width)))
	words := (width + 63) / 64
	return &tail{dims: dims{world, acc}, span: span, last: last, words: words, rows: make([]uint64, int(span)*words)}
}

// bit returns the row offset and bit of (step, rank, micro), ok=false when
// the key is outside the window or the job's declared dimensions.
func (t *tail) bit(step int64, rank, micro int) (word int, mask uint64, ok bool) {
	if step > t.last || step <= t.last-t.span || rank >= t.world || micro >= t.acc {
		return 0, 0, false
	}
	i := rank*t.acc + micro
	row := int(step % t.span)
	return row*t.words + i/64, 1 << (i % 64), true
}

// advance moves the window so step is the newest, clearing rows of steps
// that enter it.
func (t *tail) advance(step int64) {
	if step <= t.last {
		return
	}
	if step-t.last >= t.span {
		clear(t.rows)
	} else {
		for s := t.last + 1; s <= step; s++ {
			row := int(s % t.span)
			clear(t.rows[row*t.words : (row+1)*t.words])
		}
	}
	t.last = step
}

// testAndSet reports whether the key is in the window and, if so, whether it
// is stored; it marks it stored (the caller is about to write it).
func (t *tail) testAndSet(step int64, rank, micro int) (known, present bool) {
	w, m, ok := t.bit(step, rank, micro)
	if !ok {
		return false, false
	}
	present = t.rows[w]&m != 0
	t.rows[w] |= m
	return true, present
}

// count is the number of keys in the window (tests only).
func (t *tail) count() int {
	n := 0
	for _, w := range t.rows {
		n += bits.OnesCount64(w)
	}
	return n
}

// loadTail rebuilds job's tail from its newest steps: a bounded key scan of
// at most span steps, done on the first write after Open. Called with wmu
// held.
func (s *Store) loadTail(job string, d dims, st JobStats) (*tail, error) {
	t := newTail(d.world, d.acc, st.LastStep)
	if st.Vectors == 0 {
		return t, nil
	}
	lo := vecKey(job, max(st.FirstStep, st.LastStep-t.span+1), 0, 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: vecPrefixEnd(job)})
	if err != nil {
		return nil, fmt.Errorf("store: load tail of %q: %w", job, err)
	}
	for it.First(); it.Valid(); it.Next() {
		step, rank, micro, ok := parseVecSuffix(it.Key())
		if !ok {
			it.Close()
			return nil, fmt.Errorf("store: key %s: %w: malformed vector key", keyString(it.Key()), ErrCorrupt)
		}
		t.testAndSet(step, rank, micro)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("store: load tail of %q: %w", job, err)
	}
	return t, nil
}
