package stats

import "math"

// Moments accumulates a count, sum and sum of squares so the mean and
// population standard deviation of a set — and of the set without one of
// its members (leave-one-out) — are O(1). Values are shifted by the first
// one added, which keeps the sum of squares from cancelling when the
// spread is small against the level (CPU fractions near 0.5 with σ 1e-4).
type Moments struct {
	N          int
	shift      float64
	sum, sumSq float64
}

// Add adds x.
func (m *Moments) Add(x float64) {
	if m.N == 0 {
		m.shift = x
	}
	d := x - m.shift
	m.N++
	m.sum += d
	m.sumSq += d * d
}

// Mean is the mean (0 for an empty set).
func (m Moments) Mean() float64 {
	if m.N == 0 {
		return 0
	}
	return m.shift + m.sum/float64(m.N)
}

// SD is the population standard deviation (divisor N; 0 for N ≤ 1).
func (m Moments) SD() float64 {
	if m.N <= 1 {
		return 0
	}
	n := float64(m.N)
	mu := m.sum / n
	v := m.sumSq/n - mu*mu
	if v <= 0 {
		return 0
	}
	return math.Sqrt(v)
}

// Without returns the moments of the set with one member x removed
// (x must have been added).
func (m Moments) Without(x float64) Moments {
	d := x - m.shift
	return Moments{N: m.N - 1, shift: m.shift, sum: m.sum - d, sumSq: m.sumSq - d*d}
}

// PopulationZ converts a leave-one-out z score (x − μ₋)/σ₋ — μ₋, σ₋ the
// mean and population SD of the other n−1 members — into the z score
// (x − μ)/σ over all n members, x included:
//
//	z_all = sqrt((n−1)/n) · z / sqrt(1 + z²/n)
//
// It rises monotonically in z and is bounded by sqrt(n−1) (z → ∞): an
// outlier among n members can never score above sqrt(n−1) against
// statistics it is part of, so a rule "z_all > k" cannot fire for
// n ≤ k²+1. As n grows, z_all → z (SysOM-AI §3.1 assumes n ≥ 8).
func PopulationZ(z float64, n int) float64 {
	if n < 2 {
		return 0
	}
	fn := float64(n)
	if math.IsInf(z, 1) {
		return math.Sqrt(fn - 1)
	}
	return math.Sqrt((fn-1)/fn) * z / math.Sqrt(1+z*z/fn)
}
