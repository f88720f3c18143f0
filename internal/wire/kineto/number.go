package kineto

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Numbers and strings as Chrome traces write them.

// parseInt reads a JSON number that must be integral (floats with a zero
// fraction, like 7.0, are accepted).
func parseInt(v []byte) (int64, error) {
	if n, ok := fastInt(v); ok {
		return n, nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return 0, fmt.Errorf("want an integer, got %s", clip(string(v), 32))
	}
	return int64(f), nil
}

func fastInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// parseMicros reads a decimal microsecond count into nanoseconds exactly
// (rounding half up past the third fractional digit); exponent forms fall
// back to float.
func parseMicros(v []byte) (int64, error) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, fmt.Errorf("want a number, got %s", clip(string(v), 32))
	}
	b := v
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	var ip int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i >= 16 { // past 9.99e15 µs: beyond MaxAbsNS, let the slow path say so
			return slowMicros(v)
		}
		ip = ip*10 + int64(b[i]-'0')
	}
	if ip > optrace.MaxAbsNS/1000 {
		return slowMicros(v)
	}
	var frac int64
	if i < len(b) && b[i] == '.' {
		i++
		k := 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			switch {
			case k < 3:
				frac = frac*10 + int64(b[i]-'0')
			case k == 3 && b[i] >= '5':
				frac++
			}
			k++
		}
		for ; k < 3; k++ {
			frac *= 10
		}
	}
	if i != len(b) {
		return slowMicros(v)
	}
	n := ip*1000 + frac
	if neg {
		n = -n
	}
	return n, nil
}

func slowMicros(v []byte) (int64, error) {
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, fmt.Errorf("want a number, got %s", clip(string(v), 32))
	}
	ns := math.Round(f * 1000)
	if math.IsNaN(ns) || math.Abs(ns) > float64(optrace.MaxAbsNS) {
		return 0, fmt.Errorf("%s µs out of range", clip(string(v), 32))
	}
	return int64(ns), nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	// Do not split a UTF-8 sequence.
	for len(s) > 0 && !utf8Start(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0x80 {
		s = s[:len(s)-1]
	}
	return strings.Clone(s)
}

func utf8Start(c byte) bool { return c < 0x80 || c >= 0xC0 }
