package stagevec

import "github.com/laggard-dev/laggard/internal/signal"

// A stored step is an ordinal: the incarnation in the top 16 bits, the
// step (at most MaxStep) below. Ordinals of a job sort by incarnation, then
// step, so each incarnation's vectors are one contiguous key range, a
// restarted job re-sending steps 0–29 never lands on the first launch's
// keys, and a scan across incarnations reads them in launch order. Jobs
// stored before incarnations existed are incarnation 0 unchanged.

// ordinalShift is where the incarnation starts in an ordinal.
const ordinalShift = 48

// Ordinal is the stored step of step in incarnation inc.
func Ordinal(inc int, step int64) int64 {
	return int64(inc)<<ordinalShift | step&MaxStep
}

// SplitOrdinal is Ordinal's inverse.
func SplitOrdinal(ord int64) (inc int, step int64) {
	return int(ord >> ordinalShift), ord & MaxStep
}

// OrdinalRange is incarnation inc's [from, to] steps as ordinals, with
// from and to clamped into [0, MaxStep].
func OrdinalRange(inc int, from, to int64) (int64, int64) {
	return Ordinal(inc, min(max(from, 0), MaxStep)), Ordinal(inc, min(max(to, 0), MaxStep))
}

// ValidIncarnation checks an incarnation number from outside.
func ValidIncarnation(field string, inc int) error {
	if inc < 0 || inc > signal.MaxIncarnation {
		return signal.FieldErrorf(field, "must be in [0, %d], got %d", signal.MaxIncarnation, inc)
	}
	return nil
}
