package stats

import (
	"math"
	"slices"
)

// Quantile returns the q-quantile of xs (linear interpolation between
// order statistics, q clamped to [0, 1]); NaN for an empty slice. xs is
// not modified.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return sortedQuantile(s, q)
}

func sortedQuantile(s []float64, q float64) float64 {
	q = min(max(q, 0), 1)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (h-float64(lo))*(s[hi]-s[lo])
}

// TrimmedMean is the mean of xs without the lowest and highest
// floor(trim·n) values (trim in [0, 0.5)): one extreme value cannot move
// it, unlike the mean, while it keeps more of the data than the median.
// NaN for an empty slice.
func TrimmedMean(xs []float64, trim float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.Floor(min(max(trim, 0), 0.499) * float64(len(s))))
	s = s[k : len(s)-k]
	var sum float64
	for _, x := range s {
		sum += x
	}
	return sum / float64(len(s))
}

// TwoProportionZ is the pooled two-proportion z statistic for k1 of n1
// against k2 of n2 (positive when the first share is higher); 0 when
// either side is empty or the pooled share is 0 or 1.
func TwoProportionZ(k1, n1, k2, n2 float64) float64 {
	if n1 <= 0 || n2 <= 0 {
		return 0
	}
	p := (k1 + k2) / (n1 + n2)
	if p <= 0 || p >= 1 {
		return 0
	}
	se := math.Sqrt(p * (1 - p) * (1/n1 + 1/n2))
	return (k1/n1 - k2/n2) / se
}

// UpperZ is the one-sided standard-normal quantile for a false-alarm
// rate alpha spread over m tests (Bonferroni): the z a test must beat.
func UpperZ(alpha float64, m int) float64 {
	m = max(m, 1)
	return math.Sqrt2 * math.Erfcinv(2*alpha/float64(m))
}

// BinomialUpperTail is P(X ≥ k) for X ~ Binomial(n, p): the one-sided
// sign-test p-value of k successes in n (summed in log space).
func BinomialUpperTail(k, n int, p float64) float64 {
	switch {
	case k <= 0:
		return 1
	case k > n:
		return 0
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	lgn, _ := math.Lgamma(float64(n + 1))
	var sum float64
	for i := k; i <= n; i++ {
		a, _ := math.Lgamma(float64(i + 1))
		b, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgn - a - b + float64(i)*math.Log(p) + float64(n-i)*math.Log1p(-p))
	}
	return min(sum, 1)
}
