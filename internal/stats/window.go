package stats

import (
	"math"
	"slices"
)

// SlidingWindow is the sliding-window baseline of Greyhound Tables 3–4: it
// reports a fail-slow when "the window's value" deviates by more than
// MinRel from the window median (§7.2). We define the window's value as
// the median of the Recent latest points (so one GC spike is not a
// fail-slow: the paper's baseline has 0% FPR on computation traces) and
// the reference as the median of the Window points before them.
//
// It is edge-triggered: crossing out of the band reports an onset at the
// first of the Recent points and freezes the reference level; coming back
// within MinRel of it reports a relief. A deviation that persists Window
// points becomes the new normal (the reference slides on), as a
// long-running sliding window would do.
type SlidingWindow struct {
	Window int     // reference length (default 20 points)
	Recent int     // points in the window's value (default 3)
	MinRel float64 // deviation that counts (default 0.10)
}

// DefaultSlidingWindow returns the defaults documented on SlidingWindow.
func DefaultSlidingWindow() SlidingWindow {
	return SlidingWindow{Window: 20, Recent: 3, MinRel: 0.10}
}

// Name implements Detector.
func (SlidingWindow) Name() string { return "window" }

// Detect implements Detector; Score is the relative deviation.
func (w SlidingWindow) Detect(x []float64) []ChangePoint { return detectOnline(w, x) }

// NewStream implements Online.
func (w SlidingWindow) NewStream() Stream {
	def := DefaultSlidingWindow()
	if w.Window < 1 {
		w.Window = def.Window
	}
	if w.Recent < 1 {
		w.Recent = def.Recent
	}
	if !(w.MinRel > 0) {
		w.MinRel = def.MinRel
	}
	w.Window = min(w.Window, histSize-w.Recent-1)
	return &windowStream{w: w}
}

type windowStream struct {
	w        SlidingWindow
	hist     ring
	t        int
	deviated bool
	ref      float64 // frozen reference while deviated
	since    int     // onset index while deviated
}

func (s *windowStream) Push(x float64) []ChangePoint {
	s.hist.push(x)
	s.t++
	w := s.w
	if s.t < w.Window+w.Recent {
		return nil
	}
	first := s.t - w.Recent
	val := s.hist.median(first, s.t)
	if !s.deviated {
		ref := s.hist.median(first-w.Window, first)
		if dev := relDev(val, ref); dev > w.MinRel {
			at := s.firstBeyond(first, ref, true)
			s.deviated, s.ref, s.since = true, ref, at
			return []ChangePoint{{Index: at, Before: ref, After: val, Score: dev}}
		}
		return nil
	}
	if relDev(val, s.ref) <= w.MinRel {
		s.deviated = false
		at := s.firstBeyond(first, s.ref, false)
		return []ChangePoint{{Index: at, Before: s.hist.median(s.since, at), After: val, Score: relDev(val, s.ref)}}
	}
	if first-s.since >= w.Window { // the deviation is the new normal
		s.deviated = false
	}
	return nil
}

func (s *windowStream) Flush() []ChangePoint { return nil }

// firstBeyond is the first index of the Recent points that is out of the
// band around ref (out) or back inside it (!out): the change starts there,
// not at the window's first point.
func (s *windowStream) firstBeyond(first int, ref float64, out bool) int {
	for i := first; i < s.t; i++ {
		if (relDev(s.hist.buf[i%histSize], ref) > s.w.MinRel) == out {
			return i
		}
	}
	return first
}

// relDev is |v − ref| / |ref|, 0 when ref is 0 or either is non-finite.
func relDev(v, ref float64) float64 {
	if ref == 0 || math.IsNaN(v) || math.IsNaN(ref) || math.IsInf(v, 0) || math.IsInf(ref, 0) {
		return 0
	}
	return math.Abs(v-ref) / math.Abs(ref)
}

// sortedMedian is the median of a short slice of any sign (Median's radix
// select orders non-negative values only); it reorders xs.
func sortedMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return xs[n/2-1] + (xs[n/2]-xs[n/2-1])/2
}
