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
