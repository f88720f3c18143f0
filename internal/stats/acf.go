package stats

import "math"

// SymbolACF returns Greyhound §4.2's autocorrelation of a sequence of
// categorical symbols (a rank's collective calls), for lags 0..maxLag:
//
//	ACF(X)_k = Σ_{t=1}^{L−k} (X_t − μ)·(X_{t+k} − μ) / Σ_{t=1}^{L} ‖X_t − μ‖²
//
// with X_t the one-hot vector of symbol x_t and μ the mean vector (the
// symbols' frequencies p_c) — the paper's formula with the only encoding
// that treats every pair of distinct calls as equally different. It
// reduces to counts of exact matches:
//
//	ACF_k = (M_k − Σ_{t≤L−k} (p_{x_t} + p_{x_{t+k}}) + (L−k)·q) / (L·(1 − q))
//
// where M_k is the number of t with x_t = x_{t+k} and q = Σ_c p_c² the
// chance that two calls drawn at random match. So it is the fraction of
// calls that repeat k calls later, corrected for chance agreement (a
// sequence dominated by one symbol repeats itself at every lag without
// any period) — exact, and independent of how symbols are numbered: any
// scalar encoding of the calls would weight pairs of symbols by the
// distance of their codes (issue 16: two DDP buckets hashed 0.025 apart
// left one warm-up call dominating the variance).
//
// A negative symbol is a missing value (a call known to be lost, e.g. a
// gap in its communicator's sequence numbers): it is imputed with the
// mean, the classical treatment of missing points in an autocorrelation,
// so it adds nothing to either sum and the frequencies are those of the
// observed calls. A lost call then costs the period's ACF about 1/L
// instead of shifting every later call by one position.
//
// As in the paper's estimator the numerator has L−k terms and the
// denominator L, so an exactly periodic sequence of period p reaches only
// (L−p)/L at lag p: with M = 0.95 the window must hold ≥ 20 periods.
//
// Index k of the result is lag k and [0] is 1. maxLag is clamped to
// [0, len(x)−1]; an empty x gives nil. A sequence with one observed
// symbol repeats itself at every lag: every lag's ACF is 1 (the limit of
// a periodic signal). Cost O(L·maxLag).
func SymbolACF(x []int32, maxLag int) []float64 {
	n := len(x)
	if n == 0 {
		return nil
	}
	maxLag = min(max(maxLag, 0), n-1)
	out := make([]float64, maxLag+1)
	a := newSymbolStats(x)
	for k := range out {
		if a.den == 0 {
			out[k] = 1
			continue
		}
		out[k], _ = a.lag(x, k)
	}
	out[0] = 1
	return out
}

// symbolStats holds the frequencies SymbolACF centres with.
type symbolStats struct {
	p    []float64 // p[t] = frequency of x_t among the observed calls, 0 if missing
	q    float64   // Σ_c p_c²
	cum  []float64 // cum[i] = Σ_{t<i} p[t]
	miss int       // missing points
	den  float64   // Σ_obs ‖X_t − μ‖² = L_obs·(1 − q)
}

func newSymbolStats(x []int32) symbolStats {
	n := len(x)
	count := map[int32]int{}
	obs := 0
	for _, s := range x {
		if s >= 0 {
			count[s]++
			obs++
		}
	}
	st := symbolStats{p: make([]float64, n), cum: make([]float64, n+1), miss: n - obs}
	if obs == 0 {
		return st
	}
	var sq int64 // Σ count², exact: the result must not depend on map order
	for _, c := range count {
		sq += int64(c) * int64(c)
	}
	st.q = float64(sq) / (float64(obs) * float64(obs))
	for i, s := range x {
		if s >= 0 {
			st.p[i] = float64(count[s]) / float64(obs)
		}
		st.cum[i+1] = st.cum[i] + st.p[i]
	}
	if len(count) > 1 {
		st.den = float64(obs) * (1 - st.q)
	}
	return st
}

// lag is the exact ACF at lag k and the match rate among the pairs whose
// both calls were observed.
func (s symbolStats) lag(x []int32, k int) (acf, match float64) {
	num, matches, pairs := 0.0, 0, 0
	for t := 0; t+k < len(x); t++ {
		a, b := x[t], x[t+k]
		if a < 0 || b < 0 {
			continue
		}
		pairs++
		num += s.q - s.p[t] - s.p[t+k]
		if a == b {
			matches++
			num++
		}
	}
	if pairs > 0 {
		match = float64(matches) / float64(pairs)
	}
	return num / s.den, match
}

// SymbolPeriod returns the recurring period of x (Greyhound §4.2):
// Period = argmin_k (ACF(X)_k ≥ m) over k = 1..maxLag with SymbolACF's
// ACF, that lag's ACF and its exact match rate (the fraction of observed
// calls equal to the call k later); ok is false when no lag reaches m. A
// sequence of one observed symbol has period 1.
//
// A lag is abandoned as soon as its mismatches exceed what ACF ≥ m allows
// (a bound, loosened by the missing points, that never drops a lag that
// reaches m; the survivor's ACF is then computed exactly), so a lag that
// is not the period costs about (1 − m)·L comparisons and the whole
// search about (1 − m)·L·maxLag + L·period.
func SymbolPeriod(x []int32, maxLag int, m float64) (k int, acf, match float64, ok bool) {
	n := len(x)
	if n < 2 || math.IsNaN(m) {
		return 0, 0, 0, false
	}
	maxLag = min(max(maxLag, 0), n-1)
	a := newSymbolStats(x)
	if a.den == 0 {
		if maxLag >= 1 && a.miss < n {
			return 1, 1, 1, true
		}
		return 0, 0, 0, false
	}
	for k := 1; k <= maxLag; k++ {
		// numerator = M_k − Σ_valid (p_t + p_{t+k} − q) ≤ (n−k) − mismatches
		// − (Σ_all (p_t + p_{t+k}) − 2·miss) + (n−k)·q: each missing point
		// is in at most two pairs, with weights ≤ 1.
		chanceLB := a.cum[n-k] + (a.cum[n] - a.cum[k]) - 2*float64(a.miss) - float64(n-k)*a.q
		allowed := float64(n-k) - chanceLB - m*a.den
		if allowed < 0 {
			continue
		}
		limit := int(math.Floor(allowed + 1e-9))
		miss := 0
		for t := 0; t+k < n && miss <= limit; t++ {
			if x[t] != x[t+k] && x[t] >= 0 && x[t+k] >= 0 {
				miss++
			}
		}
		if miss > limit {
			continue
		}
		if r, mt := a.lag(x, k); r >= m {
			return k, r, mt, true
		}
	}
	return 0, 0, 0, false
}
