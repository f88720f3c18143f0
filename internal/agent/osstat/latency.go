package osstat

import (
	"math"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// latencySource is the wakeup→run latency reader (sched tracepoints).
type latencySource interface {
	// Drain tracks exactly the given pids from now on and returns
	// runq_latency_p99/max per rank for the window since the last call.
	Drain(ranks map[int]int) ([]osstat.Point, error)
	Close() error
}

// Histogram layout shared with bpf/schedlat.c: values below 8 ns exact,
// then 8 sub-buckets per power of two (±6%); the largest index of a
// uint64 is 495.
const (
	subBits  = 3
	sub      = 1 << subBits
	nBuckets = 512
	maxSlots = 256 // ranks tracked at once (MAX_SLOTS)
)

// bucketOf mirrors bucket_of in bpf/schedlat.c.
func bucketOf(d uint64) int {
	if d < sub {
		return int(d)
	}
	l := 63 - leadingZeros(d)
	return sub + (l-subBits)*sub + int((d>>(l-subBits))&(sub-1))
}

func leadingZeros(d uint64) int {
	n := 0
	for d&(1<<63) == 0 {
		d <<= 1
		n++
	}
	return n
}

// bucketRange is [lo, hi) of a bucket.
func bucketRange(b int) (lo, hi uint64) {
	if b < sub {
		return uint64(b), uint64(b) + 1
	}
	l := (b-sub)/sub + subBits
	s := uint64((b - sub) % sub)
	lo = (sub + s) << (l - subBits)
	return lo, lo + 1<<(l-subBits)
}

// quantile returns the q-quantile (ns) of a histogram: the middle of the
// bucket holding the ceil(q·n)-th value; ok false when it is empty.
func quantile(counts []uint64, q float64) (float64, bool) {
	var n uint64
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		return 0, false
	}
	target := uint64(math.Ceil(q * float64(n)))
	target = max(target, 1)
	var cum uint64
	for b, c := range counts {
		cum += c
		if cum >= target {
			lo, hi := bucketRange(b)
			return (float64(lo) + float64(hi-1)) / 2, true
		}
	}
	return 0, false
}

// slotTable hands out the MAX_SLOTS histogram slots of bpf/schedlat.c to
// ranks, reusing the slots of ranks that are gone.
type slotTable struct {
	ids  map[int]uint32 // rank → slot
	free []uint32       // released slots
	next uint32         // slots [0, next) were handed out at least once
}

// assign releases the slots of ranks not in active and gives every
// active rank a slot. fresh lists the slots newly given out that were
// used before (their histogram must be zeroed); full reports a rank left
// without one.
func (t *slotTable) assign(active map[int]bool) (fresh []uint32, full bool) {
	if t.ids == nil {
		t.ids = map[int]uint32{}
	}
	for r, s := range t.ids {
		if !active[r] {
			delete(t.ids, r)
			t.free = append(t.free, s)
		}
	}
	for r := range active {
		if _, ok := t.ids[r]; ok {
			continue
		}
		switch {
		case len(t.free) > 0:
			s := t.free[len(t.free)-1]
			t.free = t.free[:len(t.free)-1]
			t.ids[r] = s
			fresh = append(fresh, s)
		case t.next < maxSlots:
			t.ids[r] = t.next
			t.next++
		default:
			full = true
		}
	}
	return fresh, full
}
