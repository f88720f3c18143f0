package stats

import (
	"math"
	"math/bits"
	"math/cmplx"
)

// ACF returns the sample autocorrelation of x for lags 0..maxLag exactly as
// Greyhound §4.2 defines it:
//
//	ACF(X)_k = Σ_{t=1}^{L−k} (X_t − μ)(X_{t+k} − μ) / Σ_{t=1}^{L} (X_t − μ)²
//
// with μ the mean of the whole of x (the biased estimator: the numerator
// has L−k terms, the denominator L). Index k of the result is lag k and
// [0] is 1. maxLag is clamped to [0, len(x)−1]; an empty x gives nil.
//
// A sequence with zero variance (a constant, e.g. one call per iteration)
// repeats itself at every lag, so every lag's ACF is 1 and Period returns
// 1 — the limit of a perfectly periodic signal, not a division by zero.
//
// Because the numerator has L−k terms, an exactly periodic sequence of
// period p reaches only about (L−p)/L at lag p: with M = 0.95 a period is
// found only when the window holds at least ~20 periods. Callers size
// their windows accordingly (see greyhound.Config.ACFWindow).
//
// Cost: direct O(L·maxLag) for small products, else an FFT (Wiener–
// Khinchin, zero-padded to avoid wrap-around) in O(L log L), so 100,000
// calls with any maxLag stay far below 100 ms (BenchmarkACF100k).
func ACF(x []float64, maxLag int) []float64 {
	n := len(x)
	if n == 0 {
		return nil
	}
	maxLag = min(max(maxLag, 0), n-1)
	out := make([]float64, maxLag+1)
	mu := 0.0
	for _, v := range x {
		mu += v
	}
	mu /= float64(n)
	den := 0.0
	for _, v := range x {
		d := v - mu
		den += d * d
	}
	if den == 0 || math.IsNaN(den) || math.IsInf(den, 0) {
		for k := range out {
			out[k] = 1
		}
		if den != 0 { // non-finite input: nothing sensible to say
			for k := 1; k < len(out); k++ {
				out[k] = 0
			}
		}
		return out
	}
	if n*(maxLag+1) <= directACFWork {
		acfDirect(x, mu, out)
	} else {
		acfFFT(x, mu, out)
	}
	for k := range out {
		out[k] /= den
	}
	out[0] = 1
	return out
}

// directACFWork is the L·lags product above which the FFT is cheaper
// (measured: the direct loop does ~1 ns per term, the FFT of 2^18 points
// ~10 ms).
const directACFWork = 1 << 22

// acfDirect writes the un-normalised lag sums Σ (x_t−μ)(x_{t+k}−μ).
func acfDirect(x []float64, mu float64, out []float64) {
	d := make([]float64, len(x))
	for i, v := range x {
		d[i] = v - mu
	}
	for k := range out {
		s := 0.0
		a, b := d[:len(d)-k], d[k:]
		for i := range a {
			s += a[i] * b[i]
		}
		out[k] = s
	}
}

// acfFFT is acfDirect through the power spectrum: the autocorrelation of
// the centred series is the inverse transform of |F(x−μ)|², zero-padded to
// ≥ 2L so lags do not wrap.
func acfFFT(x []float64, mu float64, out []float64) {
	m := 1 << bits.Len(uint(2*len(x)-1))
	buf := make([]complex128, m)
	for i, v := range x {
		buf[i] = complex(v-mu, 0)
	}
	fft(buf, false)
	for i, c := range buf {
		r := cmplx.Abs(c)
		buf[i] = complex(r*r, 0)
	}
	fft(buf, true)
	for k := range out {
		out[k] = real(buf[k]) / float64(m)
	}
}

// fft is an in-place iterative radix-2 Cooley–Tukey transform; len(a) must
// be a power of two. inverse flips the twiddle sign (no 1/n scaling). We
// write the 30 lines rather than pull in a numerics module for one call.
func fft(a []complex128, inverse bool) {
	n := len(a)
	for i, j := 1, 0; i < n; i++ {
		bit := n >> 1
		for ; j&bit != 0; bit >>= 1 {
			j ^= bit
		}
		j ^= bit
		if i < j {
			a[i], a[j] = a[j], a[i]
		}
	}
	sign := -1.0
	if inverse {
		sign = 1
	}
	for size := 2; size <= n; size <<= 1 {
		ang := sign * 2 * math.Pi / float64(size)
		wl := complex(math.Cos(ang), math.Sin(ang))
		half := size / 2
		// Twiddles per stage computed once, by recurrence re-seeded every
		// 64 steps so rounding does not accumulate over long stages.
		tw := make([]complex128, half)
		for k := range tw {
			if k%64 == 0 {
				a := ang * float64(k)
				tw[k] = complex(math.Cos(a), math.Sin(a))
			} else {
				tw[k] = tw[k-1] * wl
			}
		}
		for i := 0; i < n; i += size {
			for k := 0; k < half; k++ {
				u, v := a[i+k], a[i+k+half]*tw[k]
				a[i+k], a[i+k+half] = u+v, u-v
			}
		}
	}
}

// Period returns the recurring period of x (Greyhound §4.2):
// Period = argmin_k (ACF(X)_k ≥ m) over k = 1..maxLag, with that lag's
// ACF; ok is false when no lag reaches m. A constant x has period 1.
//
// It evaluates lags one by one and stops at the first that reaches m, so a
// short period costs O(L·k); once the direct work passes ~32·L it
// computes the remaining lags at once by FFT, so the worst case stays
// O(L log L).
func Period(x []float64, maxLag int, m float64) (k int, acf float64, ok bool) {
	n := len(x)
	if n < 2 {
		return 0, 0, false
	}
	maxLag = min(max(maxLag, 0), n-1)
	mu := 0.0
	for _, v := range x {
		mu += v
	}
	mu /= float64(n)
	d := make([]float64, n)
	den := 0.0
	for i, v := range x {
		d[i] = v - mu
		den += d[i] * d[i]
	}
	if math.IsNaN(den) || math.IsInf(den, 0) {
		return 0, 0, false
	}
	if den == 0 {
		if maxLag >= 1 {
			return 1, 1, true
		}
		return 0, 0, false
	}
	work := 0
	for k := 1; k <= maxLag; k++ {
		if work > 32*n {
			a := ACF(x, maxLag)
			for ; k <= maxLag; k++ {
				if a[k] >= m {
					return k, a[k], true
				}
			}
			return 0, 0, false
		}
		s := 0.0
		a, b := d[:n-k], d[k:]
		for i := range a {
			s += a[i] * b[i]
		}
		work += n - k
		if r := s / den; r >= m {
			return k, r, true
		}
	}
	return 0, 0, false
}
