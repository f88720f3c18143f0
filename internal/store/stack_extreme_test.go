package store

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// extremeAddrs are native addresses whose deltas hit the varint limits.
var extremeAddrs = []uint64{0, 1, 1 << 63, 1<<63 - 1, 1<<63 + 1, math.MaxUint64, math.MaxUint64 - 1, 0x7f10}

// TestStackCodecExtremes: every value the encoder writes, the decoder
// reads back — address deltas of the full int64 range (2^63 included)
// and meta counters up to MaxInt64 (review finding 2).
func TestStackCodecExtremes(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 2))
	for it := range 2000 {
		b := stackBatch("n", t0)
		b.Dropped = []int64{0, math.MaxInt64, math.MaxInt64/2 + 1}[it%3]
		b.Unwind.FPFrames = math.MaxInt64
		fr := make([]stack.Frame, 1+rng.IntN(6))
		for j := range fr {
			a := extremeAddrs[rng.IntN(len(extremeAddrs))]
			if rng.IntN(3) == 0 {
				a = rng.Uint64()
			}
			fr[j] = stack.Frame{Kind: stack.Native, Addr: a, Mapping: 0}
		}
		b.Samples[0].Frames = fr
		if err := b.Validate(); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		var e stackEnc
		v := e.appendStackRecord(nil, b, []int32{0}, true)
		var back stack.Batch
		if err := decodeStackRecord(v, t0, 1, &back); err != nil {
			t.Fatalf("iteration %d: frames %+v: %v", it, fr, err)
		}
		if !reflect.DeepEqual(back.Samples[0].Frames, fr) || back.Dropped != b.Dropped || back.Unwind != b.Unwind {
			t.Fatalf("iteration %d: round trip changed the record:\n in %+v\nout %+v", it, fr, back.Samples[0].Frames)
		}
	}
}

// TestScanSkipsCorruptRecord: a stored record that does not decode is
// skipped, counted and reported; the rest of the window still reads.
func TestScanSkipsCorruptRecord(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendStacks("a", stackBatch("n", t0)); err != nil {
		t.Fatal(err)
	}
	// Damage rank 0's record (a bug in an older writer, or the disk).
	prefix := jobRange(prefixStack, "a", stackSuffixLen)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: rangeEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	var bad []byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if k[len(prefix)+11] == 1 { // rank1 = 1: rank 0
			bad = append([]byte(nil), k...)
		}
	}
	it.Close()
	if bad == nil {
		t.Fatal("no rank-0 record")
	}
	if err := s.db.Set(bad, []byte{stackVersion, 0, 1, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var skipped []error
	var got []*stack.Batch
	err = s.ScanStacks("a", StackQuery{Rank: -1, OnSkip: func(_ string, err error) { skipped = append(skipped, err) }},
		func(b *stack.Batch) error { got = append(got, b); return nil })
	if err != nil {
		t.Fatalf("scan failed on one bad record: %v", err)
	}
	if len(got) != 2 || len(skipped) != 1 || !errors.Is(skipped[0], ErrCorrupt) || s.SkippedRecords() != 1 {
		t.Fatalf("got %d records, skipped %v, counter %d; want 2, one ErrCorrupt, 1", len(got), skipped, s.SkippedRecords())
	}
}
