package stats

import (
	"math"
	"math/bits"
)

// The medians of §4 eq.4 (16k-rank cohort medians per step and stage, and
// per-rank window medians) dominate Analyze. Comparison quickselect on
// random floats mispredicts a branch per element, so selection here is a
// radix select on the IEEE-754 bit patterns, which order like the values
// for non-negative floats: one pass finds the highest bit where the keys
// differ, one pass builds a histogram of the next few bits, one branchless
// pass compacts the bucket holding the wanted rank in place. Each round
// shrinks the keys by ~2^bits, so the cost is O(n) with cheap, predictable
// work per element.

// Key maps a non-negative duration to an order-preserving uint64 (adding
// 0 turns −0 into +0).
func Key(x float64) uint64 { return math.Float64bits(x + 0) }

// MedianKeys returns the median of keys (the mean of the two middle values
// when len is even), reordering and overwriting keys.
func MedianKeys(keys []uint64) float64 {
	n := len(keys)
	switch n {
	case 0:
		return 0
	case 1:
		return math.Float64frombits(keys[0])
	}
	k := n / 2
	lo, hi := select2(keys, k)
	if n%2 == 1 {
		return math.Float64frombits(hi)
	}
	l, h := math.Float64frombits(lo), math.Float64frombits(hi)
	return l + (h-l)/2
}

// Median is MedianKeys for float64 input; it does not modify xs.
func Median(xs []float64) float64 {
	keys := make([]uint64, len(xs))
	for i, x := range xs {
		keys[i] = Key(x)
	}
	return MedianKeys(keys)
}

// select2 returns the (k−1)-th and k-th smallest keys (0-based, k >= 1),
// destroying keys.
func select2(keys []uint64, k int) (uint64, uint64) {
	var counts [1 << 11]int32
	for {
		n := len(keys)
		if n <= 32 {
			insertionSortU(keys)
			return keys[k-1], keys[k]
		}
		u0, diff := keys[0], uint64(0)
		for _, u := range keys {
			diff |= u ^ u0
		}
		if diff == 0 {
			return u0, u0
		}
		width := min(max(bits.Len(uint(n))-2, 4), 11)
		top := bits.Len64(diff) // keys agree on every bit at or above top
		shift := uint(max(top-width, 0))
		mask := uint64(1)<<(uint(top)-shift) - 1
		cnt := counts[:mask+1]
		clear(cnt)
		for _, u := range keys {
			cnt[(u>>shift)&mask]++
		}
		// Buckets b1 <= b2 hold ranks k−1 and k.
		before, b1 := 0, 0
		for before+int(cnt[b1]) <= k-1 {
			before += int(cnt[b1])
			b1++
		}
		b2, upto := b1, before+int(cnt[b1])
		for upto <= k {
			b2++
			upto += int(cnt[b2])
		}
		span := uint64(b2 - b1)
		c := 0
		for _, u := range keys {
			keys[c] = u // c <= i, so compacting in place is safe
			inc := 0
			if (u>>shift)&mask-uint64(b1) <= span {
				inc = 1
			}
			c += inc
		}
		keys, k = keys[:c], k-before
		if c == n { // no progress is impossible (diff != 0), but never loop
			insertionSortU(keys)
			return keys[k-1], keys[k]
		}
	}
}

func insertionSortU(xs []uint64) {
	for i := 1; i < len(xs); i++ {
		x := xs[i]
		j := i - 1
		for j >= 0 && xs[j] > x {
			xs[j+1] = xs[j]
			j--
		}
		xs[j+1] = x
	}
}
