package stats

import (
	"cmp"
	"math"
	"slices"
	"sort"
)

// ChangePoint is a step in the level of a series: Index is the first
// point of the new segment. Before and After are the medians of the
// adjacent segments, so one spike never moves them.
type ChangePoint struct {
	Index  int     `json:"index"`
	Before float64 `json:"before"`
	After  float64 `json:"after"`
	// Score is the detector's statistic for the split (for RankSegmenter,
	// the standardised Mann–Whitney |z|).
	Score float64 `json:"score"`
}

// Rise reports whether the level went up (for step times: an onset; a fall
// is a relief).
func (c ChangePoint) Rise() bool { return c.After > c.Before }

// Delta is After − Before.
func (c ChangePoint) Delta() float64 { return c.After - c.Before }

// RelChange is (After − Before) / Before, or 0 when Before is 0. It is
// clamped to ±maxRel so a vanishing Before (5e-324 ms) reads as a huge
// change, never as ±Inf, which a report cannot encode.
func (c ChangePoint) RelChange() float64 {
	if c.Before == 0 {
		return 0
	}
	r := (c.After - c.Before) / c.Before
	switch {
	case r > maxRel:
		return maxRel
	case r < -maxRel:
		return -maxRel
	case r != r: // NaN: an infinite level
		return 0
	}
	return r
}

const maxRel = 1e12

// Detector finds level changes in a series. The time axis of every engine
// goes through this interface so another detector (Greyhound's BOCD with
// verification) can replace the first one without touching callers.
type Detector interface {
	// Detect returns the change points of x in ascending Index order.
	Detect(x []float64) []ChangePoint
	// Name identifies the detector in reports.
	Name() string
}

// RankSegmenter is a robust change-point detector: binary segmentation on
// the Mann–Whitney rank-sum statistic, accepting a split only when it is
// both significant and material. Ranks make it indifferent to the heavy
// tails of step times (a periodic checkpoint spike is one rank, not a
// mean shift), and the materiality gate keeps the autocorrelation of real
// step-time series — which inflates any independence-based z — from
// producing changes nobody would act on.
//
// We write it ourselves rather than depend on a change-point library:
// none of the maintained Go numerics libraries (gonum included) ships a
// robust offline segmenter, and the algorithm is short.
type RankSegmenter struct {
	// MinSegment is the fewest points on either side of a change.
	MinSegment int
	// Z is the |z| a split must reach. The largest of n correlated
	// standardised statistics under no change grows like √(2 ln ln n)
	// (a Brownian-bridge supremum), ~3 for the lengths we see, so 4 keeps
	// false splits rare without missing a real 10% shift over a few dozen
	// steps.
	Z float64
	// MinRelChange and MinAbsChange: a split must move the median by at
	// least max(MinRelChange·|before|, MinAbsChange). 10% matches the
	// verification gate Greyhound applies to its change points (§4.3).
	MinRelChange float64
	MinAbsChange float64
	// MaxChanges bounds the output (the most significant are kept).
	MaxChanges int
}

// DefaultSegmenter returns the defaults documented on RankSegmenter's
// fields: segments of at least 5 points, |z| ≥ 4, a 10% median shift of at
// least minAbs, at most 32 changes.
func DefaultSegmenter(minAbs float64) RankSegmenter {
	return RankSegmenter{MinSegment: 5, Z: 4, MinRelChange: 0.10, MinAbsChange: minAbs, MaxChanges: 32}
}

// Name implements Detector.
func (RankSegmenter) Name() string { return "rank-segmentation" }

// Detect implements Detector. Non-finite points are treated as the largest
// values (a missing or broken step is slow, not fast). It runs in
// O(n log² n) time.
func (d RankSegmenter) Detect(x []float64) []ChangePoint {
	m := max(d.MinSegment, 2)
	if len(x) < 2*m {
		return nil
	}
	xs := make([]float64, len(x))
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			v = math.MaxFloat64
		}
		xs[i] = v
	}
	sc := newSegScratch(len(xs))
	var cuts []cut
	var split func(a, b int)
	split = func(a, b int) {
		k, z := sc.bestSplit(xs, a, b, m)
		// Only significance gates the recursion: a short bump inside a
		// long segment (onset then relief) moves the median of the whole
		// remainder too little to pass the effect gate, but its own
		// segments do once the second split is made. Materiality is
		// judged below, against each change's final neighbours.
		if k < 0 || z < d.Z {
			return
		}
		cuts = append(cuts, cut{k, z})
		split(a, k)
		split(k, b)
	}
	split(0, len(xs))
	// Binary segmentation judges each split against its whole parent
	// segment; re-check every change against its final neighbours and drop
	// the ones that are no longer material, weakest first.
	for {
		slices.SortFunc(cuts, func(p, q cut) int { return p.at - q.at })
		weak := -1
		for i, c := range cuts {
			lo, hi := 0, len(xs)
			if i > 0 {
				lo = cuts[i-1].at
			}
			if i+1 < len(cuts) {
				hi = cuts[i+1].at
			}
			if !d.material(xs[lo:c.at], xs[c.at:hi]) && (weak < 0 || c.z < cuts[weak].z) {
				weak = i
			}
		}
		if weak < 0 {
			break
		}
		cuts = slices.Delete(cuts, weak, weak+1)
	}
	if d.MaxChanges > 0 && len(cuts) > d.MaxChanges {
		slices.SortFunc(cuts, func(p, q cut) int { return cmp.Compare(q.z, p.z) })
		cuts = cuts[:d.MaxChanges]
		slices.SortFunc(cuts, func(p, q cut) int { return p.at - q.at })
	}
	out := make([]ChangePoint, len(cuts))
	for i, c := range cuts {
		lo, hi := 0, len(x)
		if i > 0 {
			lo = cuts[i-1].at
		}
		if i+1 < len(cuts) {
			hi = cuts[i+1].at
		}
		out[i] = ChangePoint{Index: c.at, Before: Median(xs[lo:c.at]), After: Median(xs[c.at:hi]), Score: c.z}
	}
	return out
}

type cut struct {
	at int
	z  float64
}

// material applies the effect-size gate to two adjacent segments.
func (d RankSegmenter) material(left, right []float64) bool {
	b, a := Median(left), Median(right)
	return math.Abs(a-b) >= max(d.MinRelChange*math.Abs(b), d.MinAbsChange)
}

// segScratch holds the buffers of bestSplit so recursion does not allocate
// per level.
type segScratch struct {
	idx   []int
	ranks []float64
}

func newSegScratch(n int) *segScratch {
	return &segScratch{idx: make([]int, n), ranks: make([]float64, n)}
}

// bestSplit returns the split k in [a+m, b−m] maximising the standardised
// Mann–Whitney statistic between x[a:k] and x[k:b], and its |z|; k is −1
// when the segment is too short or constant.
func (sc *segScratch) bestSplit(x []float64, a, b, m int) (int, float64) {
	n := b - a
	if n < 2*m {
		return -1, 0
	}
	idx := sc.idx[:n]
	for i := range idx {
		idx[i] = a + i
	}
	sort.SliceStable(idx, func(i, j int) bool { return x[idx[i]] < x[idx[j]] })
	// Midranks (1-based) with the tie correction term Σ(t³ − t).
	ranks := sc.ranks[:n]
	ties := 0.0
	for i := 0; i < n; {
		j := i + 1
		for j < n && x[idx[j]] == x[idx[i]] {
			j++
		}
		r := float64(i+j+1) / 2
		for k := i; k < j; k++ {
			ranks[idx[k]-a] = r
		}
		t := float64(j - i)
		ties += t*t*t - t
		i = j
	}
	N := float64(n)
	tieFactor := (N + 1) - ties/(N*(N-1))
	if tieFactor <= 0 { // every value equal: nothing to split
		return -1, 0
	}
	best, bestZ := -1, 0.0
	sum := 0.0
	for i := 0; i < n-m; i++ {
		sum += ranks[i]
		left := float64(i + 1)
		if i+1 < m {
			continue
		}
		right := N - left
		u := sum - left*(left+1)/2
		mu := left * right / 2
		sd := math.Sqrt(left * right / 12 * tieFactor)
		if z := math.Abs(u-mu) / sd; z > bestZ {
			best, bestZ = a+i+1, z
		}
	}
	return best, bestZ
}

// Warmup returns how many leading points of x are warm-up: the first
// segment when the first change is a fall within the first quarter of the
// series (at most maxWarmup points), then any leading points of the steady
// segment that are outliers above it (robust z > 5 and ≥ minRel above its
// median). First steps of a training job are slow (allocation, graph
// capture, bucket rebuilds), and including them biases every baseline.
func Warmup(x []float64, cps []ChangePoint, maxWarmup int, minRel float64) int {
	n := len(x)
	limit := min(maxWarmup, n/4)
	skip := 0
	if len(cps) > 0 && cps[0].Index <= limit && !cps[0].Rise() {
		skip = cps[0].Index
	}
	end := n
	for _, c := range cps {
		if c.Index > skip {
			end = c.Index
			break
		}
	}
	seg := x[skip:end]
	if len(seg) < 3 {
		return skip
	}
	med := Median(seg)
	dev := make([]float64, len(seg))
	for i, v := range seg {
		dev[i] = math.Abs(v - med)
	}
	sigma := 1.4826 * Median(dev) // MAD scaled to a normal σ
	band := max(5*sigma, minRel*math.Abs(med))
	for skip < min(limit, end-1) && x[skip] > med+band {
		skip++
	}
	return skip
}
