package stats

import (
	"fmt"
	"slices"
)

// KAIR §III-B Stage 1: a worker's "execution rhythm" is the number of
// operators it completes in each of n fixed-length windows, and its ECDF is
// the running sum of those counts. All workers are binned on one shared
// grid, so the ECDFs are comparable point by point and the K-S distance
// of two workers is a max over n grid points (no merge of raw samples).

// Grid is the shared window grid [T0, T0+W·N): window k covers
// [T0+k·W, T0+(k+1)·W) in nanoseconds.
type Grid struct {
	T0 int64 // start of window 0, ns
	W  int64 // window length, ns, > 0
	N  int   // number of windows, > 0
}

// Validate reports a grid that cannot bin anything.
func (g Grid) Validate() error {
	switch {
	case g.W <= 0:
		return fmt.Errorf("stats: grid W = %d ns, want > 0", g.W)
	case g.N <= 0:
		return fmt.Errorf("stats: grid N = %d windows, want > 0", g.N)
	case g.W > (1<<63-1)/int64(g.N), g.T0 > (1<<63-1)-g.W*int64(g.N):
		return fmt.Errorf("stats: grid T0 = %d, W = %d, N = %d overflows int64 ns", g.T0, g.W, g.N)
	}
	return nil
}

// Bin returns the window holding t; ok is false outside [T0, T0+W·N).
func (g Grid) Bin(t int64) (k int, ok bool) {
	if t < g.T0 {
		return 0, false
	}
	k64 := (t - g.T0) / g.W
	if k64 >= int64(g.N) {
		return 0, false
	}
	return int(k64), true
}

// Rhythms holds the frequency vectors and ECDFs of a set of workers on one
// grid. Both are row-major (worker w's row is [w·N, (w+1)·N)) so the
// pairwise K-S loops stream contiguous memory.
//
// Normalization: the paper writes F(t_k) = Σ_{i≤k} f_{t_i}; we divide by
// the worker's total within the grid, Total[w], so F ends at 1 and F is
// the ECDF of the worker's completion times (binned). This makes D a
// proper two-sample K-S statistic in [0, 1] and workers with different
// operator counts comparable. A worker with no completion inside the grid
// (Total 0, e.g. fully stalled) gets F ≡ 0: its D to any non-empty worker
// is then 1, the largest possible divergence, and its p-values are NaN
// (no sample: the test says nothing).
type Rhythms struct {
	Grid    Grid
	Workers int
	Counts  []uint32  // Workers×N: f_{t_k} per worker
	CDF     []float64 // Workers×N: F(t_k), normalized by Total
	Total   []int     // completions inside the grid (the K-S sample size n of the worker)
	Outside []int     // completions outside the grid, not counted
}

// newRhythms allocates the row-major tables for nw workers on g.
func newRhythms(g Grid, nw int) *Rhythms {
	return &Rhythms{
		Grid:    g,
		Workers: nw,
		Counts:  make([]uint32, nw*g.N),
		CDF:     make([]float64, nw*g.N),
		Total:   make([]int, nw),
		Outside: make([]int, nw),
	}
}

// NewRhythms bins times[w] (operator completion times of worker w, ns, any
// order) on g.
func NewRhythms(g Grid, times [][]int64) (*Rhythms, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	n := g.N
	r := newRhythms(g, len(times))
	for w, ts := range times {
		row := r.Counts[w*n : (w+1)*n]
		for _, t := range ts {
			k, ok := g.Bin(t)
			if !ok {
				r.Outside[w]++
				continue
			}
			row[k]++
			r.Total[w]++
		}
		r.fillCDF(w)
	}
	return r, nil
}

// NewRhythmsFromCounts builds Rhythms from precomputed frequency vectors
// (counts[w] of length g.N), e.g. when the store already binned them.
func NewRhythmsFromCounts(g Grid, counts [][]uint32) (*Rhythms, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	n := g.N
	r := newRhythms(g, len(counts))
	for w, c := range counts {
		if len(c) != n {
			return nil, fmt.Errorf("stats: counts[%d] has %d windows, grid has %d", w, len(c), n)
		}
		copy(r.Counts[w*n:], c)
		for _, x := range c {
			r.Total[w] += int(x)
		}
		r.fillCDF(w)
	}
	return r, nil
}

func (r *Rhythms) fillCDF(w int) {
	n := r.Grid.N
	cnt, cdf := r.Counts[w*n:(w+1)*n], r.CDF[w*n:(w+1)*n]
	if r.Total[w] == 0 {
		clear(cdf)
		return
	}
	// Division, not multiplication by 1/total: a correctly rounded s/total
	// is the same float for equal fractions, so workers with proportional
	// counts get D exactly 0.
	tot := float64(r.Total[w])
	s := 0
	for k, c := range cnt {
		s += int(c)
		cdf[k] = float64(s) / tot
	}
}

// Row returns worker w's ECDF (aliases r.CDF).
func (r *Rhythms) Row(w int) []float64 { return r.CDF[w*r.Grid.N : (w+1)*r.Grid.N] }

// Freq returns worker w's frequency vector (aliases r.Counts).
func (r *Rhythms) Freq(w int) []uint32 { return r.Counts[w*r.Grid.N : (w+1)*r.Grid.N] }

// MaxWindowMass is the largest fraction of worker w's completions that
// falls into one window: the binned D of a pair can fall short of the
// exact two-sample D (over the same in-grid samples) by at most the larger
// of the two workers' MaxWindowMass, since inside one window each ECDF
// moves by at most its mass there.
func (r *Rhythms) MaxWindowMass(w int) float64 {
	if r.Total[w] == 0 {
		return 0
	}
	return float64(slices.Max(r.Freq(w))) / float64(r.Total[w])
}
