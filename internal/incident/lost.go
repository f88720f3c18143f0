package incident

import (
	"cmp"
	"slices"
	"sort"
)

// progress is the job's step-time series merged from every progress
// evidence (one sample per incarnation and step; the latest report wins).
type progress struct {
	s     []Sample // sorted by (incarnation, step)
	inc   []int    // incarnation of each sample
	ranks int
}

func newProgress(evs []*Evidence) *progress {
	// One flat slice sorted by (incarnation, step, newest report first),
	// then the first of each (incarnation, step) kept: no map, because
	// fusing a thousand jobs a round must stay cheap (bench_test.go).
	type row struct {
		inc int
		at  int64
		s   Sample
	}
	p := &progress{}
	n := 0
	for _, e := range evs {
		if e.Signal == SignalProgress {
			n += len(e.Samples)
			p.ranks = max(p.ranks, e.Ranks)
		}
	}
	if n == 0 {
		return p
	}
	rows := make([]row, 0, n)
	for _, e := range evs {
		if e.Signal != SignalProgress {
			continue
		}
		for _, s := range e.Samples {
			rows = append(rows, row{e.Incarnation, e.AtNS, s})
		}
	}
	cmpRow := func(a, b row) int {
		return cmp.Or(cmp.Compare(a.inc, b.inc), cmp.Compare(a.s.Step, b.s.Step), -cmp.Compare(a.at, b.at), -cmp.Compare(a.s.MS, b.s.MS), -cmp.Compare(a.s.WallNS, b.s.WallNS))
	}
	if !slices.IsSortedFunc(rows, cmpRow) {
		slices.SortFunc(rows, cmpRow)
	}
	p.s, p.inc = make([]Sample, 0, len(rows)), make([]int, 0, len(rows))
	for i, r := range rows {
		if i > 0 && r.inc == rows[i-1].inc && r.s.Step == rows[i-1].s.Step {
			continue
		}
		p.s = append(p.s, r.s)
		p.inc = append(p.inc, r.inc)
	}
	return p
}

// wallOf maps a step of an incarnation to its wall time (the nearest
// sample at or after it; 0 when unknown).
func (p *progress) wallOf(inc int, step int64) int64 {
	i := sort.Search(len(p.s), func(i int) bool {
		return p.inc[i] > inc || (p.inc[i] == inc && p.s[i].Step >= step)
	})
	if i < len(p.s) && p.inc[i] == inc && p.s[i].WallNS > 0 {
		return p.s[i].WallNS
	}
	if i > 0 && p.inc[i-1] == inc && p.s[i-1].WallNS > 0 {
		return p.s[i-1].WallNS
	}
	return 0
}

// before reports whether sample i lies before point pt.
func (p *progress) before(i int, pt Point) bool {
	if pt.WallNS > 0 && p.s[i].WallNS > 0 {
		return p.s[i].WallNS < pt.WallNS
	}
	return p.s[i].Step < pt.Step
}

// healthyBefore is the median step time of the (up to 50) samples just
// before pt: the healthy reference of lost time and recovery.
func (p *progress) healthyBefore(pt Point) (float64, bool) {
	var xs []float64
	for i := len(p.s) - 1; i >= 0 && len(xs) < 50; i-- {
		if p.before(i, pt) {
			xs = append(xs, p.s[i].MS)
		}
	}
	if len(xs) < 3 {
		return 0, false
	}
	return median(xs), true
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

// healthy is the incident's healthy step time on the progress axis: the
// series before the onset, else StageFrontier's own onset level.
func (f *fuser) healthy(b *building) float64 {
	if h, ok := f.prog.healthyBefore(b.openedAt); ok {
		return h
	}
	return b.healthy[EngineStageFrontier]
}

// slowRun is how many consecutive slow samples show the slowdown on the
// series: the series confirms a recovery only after it has shown the
// slowdown, so an onset another engine saw (and the step series never
// did) is not "recovered" by it.
const slowRun = 3

// maxAboveShare is the share of samples after a recovery that may still
// exceed the healthy band (noise, a checkpoint step).
const maxAboveShare = 0.2

// recovery finds where the step series came back within RecoverRel of
// healthy after the incident's onset (before the next incident at next):
// just after the last run of slowRun slow samples, with at most
// maxAboveShare of the samples since above the band.
func (p *progress) recovery(b *building, cfg Config, next int64) (Point, bool) {
	var h float64
	if x, ok := p.healthyBefore(b.openedAt); ok {
		h = x
	} else {
		h = b.healthy[EngineStageFrontier]
	}
	if h <= 0 || len(b.onsets) == 0 {
		return Point{}, false
	}
	thr := (1 + cfg.RecoverRel) * h
	var idx []int
	for i := range p.s {
		if p.before(i, b.openedAt) {
			continue
		}
		if next > 0 && p.s[i].WallNS >= next {
			continue
		}
		idx = append(idx, i)
	}
	last, run := -1, 0
	for k, i := range idx {
		if p.s[i].MS > thr {
			run++
			if run >= slowRun {
				last = k
			}
		} else {
			run = 0
		}
	}
	if last < 0 || last+1 >= len(idx) {
		return Point{}, false
	}
	above := 0
	for _, i := range idx[last+1:] {
		if p.s[i].MS > thr {
			above++
		}
	}
	if float64(above) > maxAboveShare*float64(len(idx)-last-1) {
		return Point{}, false
	}
	s := p.s[idx[last+1]]
	return Point{WallNS: s.WallNS, Step: s.Step}, true
}

// lastBefore is the newest sample before wall time next (any when next
// is negative).
func (p *progress) lastBefore(next int64) (Sample, bool) {
	for i := len(p.s) - 1; i >= 0; i-- {
		if next < 0 || (p.s[i].WallNS > 0 && p.s[i].WallNS < next) {
			return p.s[i], true
		}
	}
	return Sample{}, false
}

// stepsAfter counts samples after pt (hold-down in steps).
func (p *progress) stepsAfter(pt Point) int64 {
	var n int64
	for i := range p.s {
		if !p.before(i, pt) {
			n++
		}
	}
	return n
}

// lost is Σ over the incident's samples of (step time − healthy), the
// accumulated loss of Greyhound §5.1 Algorithm 1. Without a step series it
// is estimated from the onset's level change over the incident's span,
// and marked partial.
func (f *fuser) lost(b *building, end Point) Lost {
	h := f.healthy(b)
	var l Lost
	first := int64(-1)
	if h > 0 {
		for i := range f.prog.s {
			if f.prog.before(i, b.openedAt) || !f.prog.before(i, end) {
				continue
			}
			if first < 0 {
				first = f.prog.s[i].Step
			}
			l.Steps++
			if d := f.prog.s[i].MS - h; d > 0 {
				l.Seconds += d / 1000
			}
		}
	}
	if l.Steps > 0 {
		l.Partial = first > b.openedAt.Step+1 && b.openedAt.Step > 0
		l.RankSeconds = l.Seconds * float64(f.prog.ranks)
		return l
	}
	// Estimate: (after − before) per iteration × iterations in the span.
	for _, o := range b.onsets {
		if o.Signal == SignalOnset && o.AfterMS > o.BeforeMS && o.BeforeMS > 0 && end.WallNS > b.openedAt.WallNS {
			iters := float64(end.WallNS-b.openedAt.WallNS) / 1e6 / o.AfterMS
			l.Seconds = iters * (o.AfterMS - o.BeforeMS) / 1000
			l.Steps = int64(iters)
			l.Partial = true
			l.RankSeconds = l.Seconds * float64(max(f.prog.ranks, o.Ranks))
			break
		}
	}
	return l
}
