package stats

import (
	"math"
	"slices"
)

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
// A fixed 10 % gate on a 10-point median ignores how noisy the series is:
// on a job whose iterations often run 10–60 % slow by themselves
// (heavy-tailed sequence lengths, bursts, GC) six such iterations in ten
// happen about once in 10⁵ windows, and BOCD proposes a candidate at each
// (issue 16: every remaining false positive of Tables 3–4 was one). So the
// test is also noise-aware: the change must be one the series' own jitter
// — the empirical distribution of its points' deviations from their local
// level over the last 1024 points — would produce with probability at
// most Alpha (chance); until then the window grows, point by point, up to
// MaxAfter. A change far beyond the jitter still decides at After points.
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
	// Alpha makes the test noise-aware (issue 16): a change verifies
	// only when the series' own jitter would put the median of its
	// confirmation window at the after-level with probability at most
	// Alpha (chance); until then the window grows, up to MaxAfter points
	// (default Before), and a change that never gets there is jitter.
	// DefaultVerified sets 1e-6; 0 is the fixed 10 % gate of the first
	// versions.
	Alpha    float64
	MaxAfter int
}

// Verification defaults. W = 10: a fail-slow lasts ≥ 10 iterations (and
// ≥ 30 s; §3, eval/greyhound), so the shortest one fills the window and is
// confirmed, while any burst shorter than W/2 = 5 iterations — microbursts,
// GC, allocator misses, checkpoint stalls — cannot move its median.
// Before = 32 points: the before-median's noise is √(W/B) of the
// after-median's, so the test's noise is dominated by the window we wait
// for, not the one we already have.
//
// Alpha = 1e-6: the false-alarm budget of one candidate. BOCD proposes
// tens of candidates per series and a fleet tracks hundreds of jobs, so a
// per-candidate chance must be far below 1/(candidates × series) for the
// verified changes of healthy jobs to stay at ~0; on the dev corpus FPR
// is 0 for every Alpha in [1e-7, 1e-5] with the same recall and reaction
// time (docs/design/greyhound.md), and 1e-6 is the middle of that range.
const (
	DefaultVerifyBefore = 32
	DefaultVerifyAfter  = 10
	DefaultVerifyAlpha  = 1e-6
)

// DefaultVerified is BOCD+V with the defaults of BOCD and Verified.
func DefaultVerified() Verified {
	return Verified{Inner: DefaultBOCD(), MinRel: 0.10, Before: DefaultVerifyBefore, After: DefaultVerifyAfter, Alpha: DefaultVerifyAlpha}
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
	if !(v.Alpha > 0 && v.Alpha < 1) {
		v.Alpha = 0
	}
	if v.MaxAfter <= 0 {
		v.MaxAfter = v.Before // beyond it the before-level's own noise dominates
	}
	v.MaxAfter = min(max(v.MaxAfter, v.After), histSize/2)
	st := &verifyStream{v: v, inner: v.Inner.NewStream()}
	if v.Alpha > 0 {
		st.jit = newJitter()
	}
	return st
}

type verifyStream struct {
	v       Verified
	inner   Stream
	hist    ring
	t       int
	pending []ChangePoint
	last    int // index of the last verified change (0: none)
	headW   int // the window pending[0] is judged from next (0: After)
	jit     *jitter
}

func (s *verifyStream) Push(x float64) []ChangePoint {
	if s.jit != nil {
		s.jit.observe(s.t, x, s.last)
	}
	s.hist.push(x)
	s.t++
	s.pending = append(s.pending, s.inner.Push(x)...)
	return s.settle(false)
}

func (s *verifyStream) Flush() []ChangePoint {
	s.pending = append(s.pending, s.inner.Flush()...)
	return s.settle(true)
}

// afterEnd returns the end of a confirmation window of w points from c
// and whether the points seen so far complete it: stretched while their
// sum is under MinSpan (bounded by histSize/2 points).
func (s *verifyStream) afterEnd(c, w int) (int, bool) {
	end := c + w
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

// settle verifies the pending candidates, in order, while their
// confirmation windows are complete. At flush a window cut by the end of
// the series counts when it holds at least half of After points (a change
// in the last few points is not yet a sustained one).
func (s *verifyStream) settle(flush bool) []ChangePoint {
	var out []ChangePoint
	for len(s.pending) > 0 {
		c := s.pending[0]
		ok, decided := s.judge(&c, flush)
		if !decided {
			// Decide in order: a later candidate must not settle first
			// and cut this one's before-window.
			break
		}
		s.pending, s.headW = s.pending[1:], 0
		if ok {
			out = append(out, c)
			s.last = c.Index
		}
	}
	return out
}

// judge decides candidate c if the points seen so far allow it: ok when
// verified (c's levels are then set), decided false while it waits for
// more points.
func (s *verifyStream) judge(c *ChangePoint, flush bool) (ok, decided bool) {
	if c.Index <= s.last || c.Index < 1 {
		return false, true
	}
	b0 := max(s.last, c.Index-s.v.Before)
	if c.Index-b0 < minBefore(s.v.After) {
		return false, true // a level needs more than a point or two (a series that starts inside its warm-up tail)
	}
	level := s.hist.median
	if s.v.Mean {
		level = s.hist.mean
	}
	before := level(b0, c.Index)
	for w := max(s.v.After, s.headW); ; w++ {
		a1, done := s.afterEnd(c.Index, w)
		if !done {
			if !(flush && s.t-c.Index >= max((s.v.After+1)/2, 3)) {
				s.headW = w // the shorter windows were judged already
				return false, false
			}
			a1 = s.t
		}
		a1 = min(a1, s.t)
		after := level(c.Index, a1)
		late := level(a1-(a1-c.Index)/2, a1)
		if relGap(after, before) < s.v.MinRel || !(s.v.NoHold || (relGap(late, before) >= s.v.MinRel && (late > before) == (after > before))) {
			return false, true
		}
		if s.v.Alpha == 0 || s.chance(c.Index, a1, before, after) <= s.v.Alpha {
			c.Before, c.After = before, after
			return true, true
		}
		if w >= s.v.MaxAfter || a1 >= s.t && flush {
			return false, true // never distinguishable from this series' jitter
		}
	}
}

// chance is the probability that jitter alone puts the median of the
// window [c, a1) at after or beyond (Alpha > 0): the median of w points
// lies beyond a level when at least ⌈w/2⌉ of them do, and without a
// change each does so with the probability p that the series' own jitter
// shows (jitter: how far its points have strayed from their local level,
// before c). So the chance is P(Binomial(w, p) ≥ ⌈w/2⌉). A change far
// beyond the series' jitter decides at After points; one only as large as
// the jitter often is (heavy-tailed sequence lengths, bursts, GC on a
// noisy series) waits for more points, up to MaxAfter.
func (s *verifyStream) chance(c, a1 int, before, after float64) float64 {
	p := s.jit.beyond(c, s.t, jitterScale(after, before))
	w := a1 - c
	return binomUpper(w, (w+1)/2, p)
}

// jitter is a bounded record of a series' jitter: each point's deviation
// from the median of the jitterBase points before it (jitterScale), over
// the latest jitterKeep points, in bins of jitterBin. Points whose base
// straddles a verified change are left out (their deviation is the
// change, not jitter).
type jitter struct {
	bins  [jitterBins]int32
	n     int
	byIdx [jitterKeep]int16 // bin of point i at i % jitterKeep, −1 none
	idx   int               // points seen
	// base: the latest jitterBase points (NaN for non-finite ones) and
	// their finite values sorted, so each point's median base costs an
	// insertion, not a sort.
	base   [jitterBase]float64
	sorted []float64
}

const (
	jitterBase = 32
	jitterKeep = 1024
	jitterBin  = 0.005 // ≈ 0.5 %
	jitterLo   = -3.0  // deviations beyond ±3 (×20) go to the end bins
	jitterBins = 1200
)

// jitterScale is x's deviation from level m as sign(d)·log(1 + |d|),
// d = (x − m)/|m|: the log ratio for positive series (a 10 % step is the
// same at 75 ms and 7.5 s), monotone in x for any sign (the CLI feeds
// non-positive series on a linear scale). NaN when m is 0.
func jitterScale(x, m float64) float64 {
	d := (x - m) / math.Abs(m)
	if d < 0 {
		return -math.Log1p(-d)
	}
	return math.Log1p(d)
}

func newJitter() *jitter {
	j := &jitter{sorted: make([]float64, 0, jitterBase)}
	for i := range j.byIdx {
		j.byIdx[i] = -1
	}
	for i := range j.base {
		j.base[i] = math.NaN()
	}
	return j
}

// slide moves point t (x) into the base window, dropping point t − jitterBase.
func (j *jitter) slide(t int, x float64) {
	slot := t % jitterBase
	if old := j.base[slot]; !math.IsNaN(old) {
		i, _ := slices.BinarySearch(j.sorted, old)
		j.sorted = slices.Delete(j.sorted, i, i+1)
	}
	j.base[slot] = math.NaN()
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		j.base[slot] = x
		i, _ := slices.BinarySearch(j.sorted, x)
		j.sorted = slices.Insert(j.sorted, i, x)
	}
}

func (j *jitter) median() float64 {
	n := len(j.sorted)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return j.sorted[n/2]
	}
	return j.sorted[n/2-1] + (j.sorted[n/2]-j.sorted[n/2-1])/2
}

func jitterBinOf(lr float64) int16 {
	return int16(min(max(int(math.Floor((lr-jitterLo)/jitterBin)), 0), jitterBins-1))
}

// observe records point t (value x): its deviation from the median of
// the jitterBase points before it.
func (j *jitter) observe(t int, x float64, lastChange int) {
	slot := t % jitterKeep
	if old := j.byIdx[slot]; old >= 0 && j.idx >= jitterKeep {
		j.bins[old]--
		j.n--
	}
	j.byIdx[slot] = -1
	j.idx = t + 1
	m := j.median()
	j.slide(t, x)
	if t < jitterBase/4 || (lastChange > 0 && t-jitterBase < lastChange) || math.IsNaN(x) || math.IsInf(x, 0) || m == 0 {
		return
	}
	b := jitterBinOf(jitterScale(x, m))
	j.byIdx[slot] = b
	j.bins[b]++
	j.n++
}

// beyond is the smoothed share, (k + ½)/(n + 1), of the recorded points
// before c whose log ratio is at least lr (lr > 0) or at most lr (lr < 0);
// the points [c, t) are the window under test and do not count.
func (j *jitter) beyond(c, t int, lr float64) float64 {
	b := int(jitterBinOf(lr))
	k, n := 0, j.n
	if lr >= 0 {
		for i := b; i < jitterBins; i++ {
			k += int(j.bins[i])
		}
	} else {
		for i := 0; i <= b; i++ {
			k += int(j.bins[i])
		}
	}
	for i := max(c, t-jitterKeep); i < t; i++ {
		if v := j.byIdx[i%jitterKeep]; v >= 0 {
			n--
			if (lr >= 0 && int(v) >= b) || (lr < 0 && int(v) <= b) {
				k--
			}
		}
	}
	// Smoothed, (k + ½)/(n + 1); a record shorter than jitterMin points
	// keeps its observed rate but is smoothed as if it had jitterMin: a
	// job's first iterations say little about its jitter's tail, and
	// taking the few unseen points as jitter would make an early change
	// unverifiable (the noise-blind gate's behaviour until the record
	// fills).
	if n > 0 && n < jitterMin {
		return (float64(k)*jitterMin/float64(n) + 0.5) / (jitterMin + 1)
	}
	return (float64(k) + 0.5) / float64(max(n, jitterMin)+1)
}

// jitterMin is the record length below which beyond smooths as if it had
// this many points (2 × Before).
const jitterMin = 64

// binomUpper is P(Binomial(n, p) ≥ k).
func binomUpper(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if k > n {
		return 0
	}
	// term(j) = C(n, j) p^j (1−p)^(n−j), summed from k up, in logs.
	lp, lq := math.Log(p), math.Log1p(-p)
	sum := 0.0
	for j := k; j <= n; j++ {
		lg := lgammaInt(n+1) - lgammaInt(j+1) - lgammaInt(n-j+1)
		sum += math.Exp(lg + float64(j)*lp + float64(n-j)*lq)
	}
	return sum
}

func lgammaInt(n int) float64 {
	v, _ := math.Lgamma(float64(n))
	return v
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
