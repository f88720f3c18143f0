package stats

import "math"

// Verified is BOCD+V (Greyhound §4.2, "change-point verification"): it
// keeps a change point of Inner only when the level before and after it
// differs by at least MinRel (paper: 10%), so jitter the inner detector
// mistakes for a change (GC pauses, allocator misses, uneven sequence
// lengths, a neighbour's microburst) is dropped.
//
// A fail-slow is a *sustained* change (§3: sub-minute to hours); a burst
// of a few slow iterations is jitter however large. So the after-level is
// a robust level over a confirmation window of After points starting at
// the candidate (the median by default: a burst of fewer than After/2
// points cannot move it), optionally stretched until the window covers
// MinSpan of the series' own units (iteration times are durations, so
// this is a minimum wall time). The before-level is the median of up to
// Before points ending at the candidate, cut at the previous verified
// change (a ladder is judged step by step); earlier unverified candidates
// do not cut it — they are jitter by this very test, and cutting there
// would leave a few noisy points after every GC pause. The decision comes
// After−1 points after the change (the reaction-time cost of persistence;
// docs/design/greyhound.md gives the trade-off).
//
// The relative difference is taken against the lower level,
// |after − before| / min(before, after): "the slow level is ≥ MinRel above
// the fast one" for an onset and for a relief alike (against the higher
// level, the relief of a 10% slowdown reads 9.1%). The paper compares
// averages; Mean compares arithmetic means instead of medians.
type Verified struct {
	Inner  Online
	MinRel float64 // default 0.10 (§4.2)
	Before int     // default 32
	After  int     // the confirmation window W; default 10
	// MinSpan, when > 0, stretches the confirmation window until the sum
	// of its points reaches it (at most histSize/2 points): a wall-time
	// persistence floor in the series' units. Off by default.
	MinSpan float64
	Mean    bool
	// NoHold drops the hold test (the change must also show, ≥ MinRel in
	// the same direction, in the last half of the confirmation window).
	NoHold bool
}

// Verification defaults. W = 10: a fail-slow lasts ≥ 10 iterations (and
// ≥ 30 s; §3, eval/greyhound), so the shortest one fills the window and is
// confirmed, while any burst shorter than W/2 = 5 iterations — microbursts,
// GC, allocator misses, checkpoint stalls — cannot move its median.
// Before = 32 points: the before-median's noise is √(W/B) of the
// after-median's, so the test's noise is dominated by the window we wait
// for, not the one we already have.
const (
	DefaultVerifyBefore = 32
	DefaultVerifyAfter  = 10
)

// DefaultVerified is BOCD+V with the defaults of BOCD and Verified.
func DefaultVerified() Verified {
	return Verified{Inner: DefaultBOCD(), MinRel: 0.10, Before: DefaultVerifyBefore, After: DefaultVerifyAfter}
}

// Name implements Detector: the inner name with "+v" ("bocd+v").
func (v Verified) Name() string {
	if v.Inner == nil {
		return "bocd+v"
	}
	return v.Inner.Name() + "+v"
}

// Detect implements Detector. Before/After are the compared levels and
// Score the inner detector's score.
func (v Verified) Detect(x []float64) []ChangePoint { return detectOnline(v, x) }

// NewStream implements Online.
func (v Verified) NewStream() Stream {
	if v.Inner == nil {
		v.Inner = DefaultBOCD()
	}
	if !(v.MinRel > 0) {
		v.MinRel = 0.10
	}
	if v.Before < 1 {
		v.Before = DefaultVerifyBefore
	}
	if v.After < 1 {
		v.After = DefaultVerifyAfter
	}
	if !(v.MinSpan > 0) || math.IsInf(v.MinSpan, 0) {
		v.MinSpan = 0
	}
	v.Before = min(v.Before, histSize/2)
	v.After = min(v.After, histSize/2)
	return &verifyStream{v: v, inner: v.Inner.NewStream()}
}

type verifyStream struct {
	v       Verified
	inner   Stream
	hist    ring
	t       int
	pending []ChangePoint
	last    int // index of the last verified change (0: none)
}

func (s *verifyStream) Push(x float64) []ChangePoint {
	s.hist.push(x)
	s.t++
	s.pending = append(s.pending, s.inner.Push(x)...)
	return s.settle(false)
}

func (s *verifyStream) Flush() []ChangePoint {
	s.pending = append(s.pending, s.inner.Flush()...)
	return s.settle(true)
}

// afterEnd returns the end of c's confirmation window and whether the
// points seen so far complete it: After points, stretched while their sum
// is under MinSpan (bounded by histSize/2 points).
func (s *verifyStream) afterEnd(c int) (int, bool) {
	end := c + s.v.After
	if s.v.MinSpan > 0 {
		sum := 0.0
		for i := c; i < c+histSize/2; i++ {
			if i >= s.t {
				return i, false
			}
			if v := s.hist.at(i); v > 0 && !math.IsInf(v, 0) {
				sum += v
			}
			if sum >= s.v.MinSpan {
				end = max(end, i+1)
				break
			}
			end = max(end, i+1)
		}
	}
	return end, end <= s.t
}

// settle verifies the pending candidates whose confirmation window is
// complete. At flush a window cut by the end of the series counts when it
// holds at least half of After points (a change in the last few points is
// not yet a sustained one).
func (s *verifyStream) settle(flush bool) []ChangePoint {
	var out []ChangePoint
	k := 0
	for _, c := range s.pending {
		a1, done := s.afterEnd(c.Index)
		if !done && !(flush && s.t-c.Index >= max((s.v.After+1)/2, 3)) {
			s.pending[k] = c
			k++
			continue
		}
		a1 = min(a1, s.t)
		if c.Index <= s.last || c.Index < 1 {
			continue
		}
		b0 := max(s.last, c.Index-s.v.Before)
		if c.Index-b0 < minBefore(s.v.After) {
			continue // a level needs more than a point or two (a series that starts inside its warm-up tail)
		}
		level := s.hist.median
		if s.v.Mean {
			level = s.hist.mean
		}
		before, after := level(b0, c.Index), level(c.Index, a1)
		late := level(a1-(a1-c.Index)/2, a1)
		if rel := relGap(after, before); rel >= s.v.MinRel && (s.v.NoHold || (relGap(late, before) >= s.v.MinRel && (late > before) == (after > before))) {
			c.Before, c.After = before, after
			out = append(out, c)
			s.last = c.Index
		}
	}
	s.pending = s.pending[:k]
	return out
}

// minBefore is the fewest points a before-level needs: as many as half
// the confirmation window, at least 3.
func minBefore(after int) int { return max(3, (after+1)/2) }

// relGap is |a − b| / min(|a|, |b|), 0 when either is 0 or non-finite.
func relGap(a, b float64) float64 {
	lo := min(math.Abs(a), math.Abs(b))
	if lo == 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0
	}
	return math.Abs(a-b) / lo
}
