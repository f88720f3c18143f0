package pprof

import (
	"math"
	"testing"
)

// Counts near int64's limits never wrap (review finding 9).
func TestMulSat(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{0, 5, 0}, {3, 4, 12}, {math.MaxInt64, 2, math.MaxInt64}, {1 << 40, 10_101_010, math.MaxInt64},
		{1 << 31, 1 << 31, 1 << 62},
	} {
		if got := mulSat(c.a, c.b); got != c.want {
			t.Errorf("mulSat(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
