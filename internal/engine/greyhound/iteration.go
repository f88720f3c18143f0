package greyhound

import (
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

// Symbol is what §4.2 encodes a call as: the operation, its size and its
// communicator (and, for Send/Recv, the peer — a pipeline stage sends the
// same bytes to its two neighbours on one world communicator, and those
// are different calls of the iteration).
type Symbol struct {
	Op    collective.Op `json:"op"`
	Bytes int64         `json:"bytes"`
	Comm  string        `json:"comm"`
	Peer  int           `json:"peer,omitempty"`
}

func symbolOf(c *collective.Call) Symbol {
	s := Symbol{Op: c.Op, Bytes: c.Bytes, Comm: c.Comm}
	if c.Op.P2P() {
		s.Peer = c.Peer
	}
	return s
}

// Iter is one iteration: its duration and the time it ended (the start of
// the next, i.e. the next anchor call's enter time).
type Iter struct {
	Iter  int     `json:"iter"`
	EndNS int64   `json:"end_ns"`
	MS    float64 `json:"ms"`
	// Estimated: one of its two anchor calls was missing (dropped) and its
	// time was estimated from the other calls of that iteration.
	Estimated bool `json:"estimated,omitempty"`
}

// IterSeries is one rank's iteration-time series (§4.2).
type IterSeries struct {
	Rank   int     `json:"rank"`
	OK     bool    `json:"ok"`
	Reason string  `json:"reason,omitempty"`
	Period int     `json:"period"`
	ACF    float64 `json:"acf"`
	// Match is the fraction of the window's calls equal to the call one
	// period later.
	Match  float64 `json:"match"`
	Anchor Symbol  `json:"anchor"`
	// Warmup counts the calls before the first full period that matches
	// the steady pattern; Unmatched the calls the alignment skipped
	// (extra, reordered or foreign calls); Resyncs how often it lost the
	// pattern and found it again (the series has a gap there).
	Warmup    int    `json:"warmup"`
	Unmatched int    `json:"unmatched"`
	Resyncs   int    `json:"resyncs"`
	Iters     []Iter `json:"iters"`
}

// IterationTimes derives one rank's iteration times from its calls in
// enter order (§4.2):
//
//  1. Each call becomes a symbol (op, bytes, comm[, peer]) with a dense id
//     in order of first appearance. ACF needs numbers, but dense ids in
//     first-appearance order make every iteration a ramp 0,1,2,…, whose
//     autocorrelation at lag 1 approaches 1 as the ramp lengthens (200
//     distinct calls give ACF₁ ≈ 0.97 > M): a false period 1. So each id
//     is fed to ACF as a fixed pseudo-random value (a hash of the id):
//     then ACF_k estimates the fraction of calls that repeat k calls
//     later, which is what "recurring period" means, and a candidate lag
//     is confirmed by counting exact symbol matches (≥ MinMatch).
//  2. Period = the first lag with ACF ≥ M on the latest ACFWindow calls
//     (warm-up lives at the start, so the window ends at the last call).
//  3. The steady pattern (template) is the per-phase majority symbol over
//     the window. The anchor is the phase whose one-period intervals are
//     the most regular (least MAD/median): every anchor's intervals sum
//     to the same elapsed time, so the choice only moves jitter, and the
//     most regular one feeds BOCD the least noise.
//  4. The whole sequence is aligned to the template from the first full
//     period that matches it (earlier calls are warm-up, e.g. a first
//     iteration with bucket rebuilds). A dropped call is skipped over, an
//     extra or reordered call is skipped, and after more than half a
//     period of mismatches the alignment re-synchronises on the next full
//     matching period (leaving a gap: the iteration count across it is
//     unknown).
//  5. Iteration j ends when the anchor call of iteration j+1 enters; its
//     time is that minus the previous anchor's (the same call one period
//     earlier). A dropped anchor is estimated from the iteration's other
//     calls and their median offset to the anchor. Differences of
//     successive anchors telescope: the series sums to the elapsed time
//     between its first and last anchor.
func IterationTimes(calls []collective.Call, cfg Config) (IterSeries, error) {
	if err := cfg.Validate(); err != nil {
		return IterSeries{}, err
	}
	out := IterSeries{Rank: -1}
	if len(calls) == 0 {
		out.Reason = "no calls"
		return out, nil
	}
	out.Rank = calls[0].Rank
	for i := range calls {
		if calls[i].Rank != out.Rank {
			return out, fmt.Errorf("calls[%d].rank: %d, want one rank (%d)", i, calls[i].Rank, out.Rank)
		}
	}
	if !slices.IsSortedFunc(calls, func(a, b collective.Call) int { return cmpInt64(a.EnterNS, b.EnterNS) }) {
		calls = slices.Clone(calls)
		slices.SortStableFunc(calls, func(a, b collective.Call) int { return cmpInt64(a.EnterNS, b.EnterNS) })
	}
	n := len(calls)
	ids := make(map[Symbol]int32)
	var table []Symbol
	syms := make([]int32, n)
	ts := make([]int64, n)
	for i := range calls {
		s := symbolOf(&calls[i])
		id, ok := ids[s]
		if !ok {
			id = int32(len(table))
			ids[s] = id
			table = append(table, s)
		}
		syms[i], ts[i] = id, calls[i].EnterNS
	}
	if n < 3 {
		out.Reason = fmt.Sprintf("%d calls are too few for a period", n)
		return out, nil
	}
	w0 := max(0, n-cfg.ACFWindow)
	win := syms[w0:]
	p, acf, match := detectPeriod(win, cfg)
	if p == 0 {
		out.Reason = fmt.Sprintf("no lag in 1..%d reaches ACF ≥ %.2f with %.0f%% of calls repeating (window %d calls)",
			maxLagFor(len(win), cfg), cfg.ACFThreshold, 100*cfg.MinMatch, len(win))
		return out, nil
	}
	out.Period, out.ACF, out.Match = p, acf, match
	tmpl, at := template(win, p)
	anchor := anchorPhase(win, ts[w0:], tmpl, at)
	rot := make([]int32, p)
	for i := range rot {
		rot[i] = tmpl[(anchor+i)%p]
	}
	out.Anchor = table[rot[0]]
	al := align(syms, ts, rot, cfg.MinMatch)
	out.Warmup, out.Unmatched, out.Resyncs = al.warmup, al.unmatched, al.resyncs
	out.Iters = al.series(p)
	out.OK = len(out.Iters) > 0
	if !out.OK {
		out.Reason = fmt.Sprintf("period %d found but fewer than two aligned iterations", p)
	}
	return out, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func maxLagFor(L int, cfg Config) int {
	// Lags beyond L·(1−M) cannot reach M: ACF_k ≤ (L−k)/L for any input
	// made of repeats.
	return max(1, min(cfg.MaxPeriod, int(float64(L)*(1-cfg.ACFThreshold)), L-1))
}

// scramble maps a dense id to a fixed value in [0, 1) (SplitMix64), so
// ACF sees unordered categories, not a ramp.
func scramble(id int32) float64 {
	z := uint64(id) + 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// detectPeriod returns the first lag with ACF ≥ M whose exact symbol
// match rate is ≥ MinMatch, or 0.
func detectPeriod(win []int32, cfg Config) (p int, acf, match float64) {
	allSame := true
	for _, s := range win {
		if s != win[0] {
			allSame = false
			break
		}
	}
	if allSame { // one call per iteration (or one kind): variance 0, period 1
		return 1, 1, 1
	}
	x := make([]float64, len(win))
	for i, s := range win {
		x[i] = scramble(s)
	}
	maxLag := maxLagFor(len(win), cfg)
	k, a, ok := stats.Period(x, maxLag, cfg.ACFThreshold)
	if !ok {
		return 0, 0, 0
	}
	if m := matchRate(win, k); m >= cfg.MinMatch {
		return k, a, m
	}
	// A chance correlation of the encoding: try the later lags.
	all := stats.ACF(x, maxLag)
	for j := k + 1; j <= maxLag; j++ {
		if all[j] >= cfg.ACFThreshold {
			if m := matchRate(win, j); m >= cfg.MinMatch {
				return j, all[j], m
			}
		}
	}
	return 0, 0, 0
}

func matchRate(s []int32, k int) float64 {
	if k <= 0 || k >= len(s) {
		return 0
	}
	m := 0
	for i := 0; i+k < len(s); i++ {
		if s[i] == s[i+k] {
			m++
		}
	}
	return float64(m) / float64(len(s)-k)
}

// template returns one period of the steady pattern: the p calls that
// start the longest stretch of win where every call repeats p calls
// later. (A per-phase vote over the whole window would mix phases: each
// dropped call shifts every later call by one.) The result is a rotation
// of the iteration's call pattern; the anchor fixes the rotation.
func template(win []int32, p int) ([]int32, int) {
	bestAt, bestLen, cur := 0, -1, 0
	for i := 0; i+p < len(win); i++ {
		if win[i] == win[i+p] {
			cur++
			if cur > bestLen {
				bestLen, bestAt = cur, i-cur+1
			}
		} else {
			cur = 0
		}
	}
	return slices.Clone(win[bestAt : bestAt+p]), bestAt
}

// anchorPhase picks the phase whose one-period intervals in the window
// have the least robust dispersion (MAD / median); ties to the lowest.
// Phase ph of tmpl sits at positions ≡ at+ph (mod p) of win.
func anchorPhase(win []int32, ts []int64, tmpl []int32, at int) int {
	p := len(tmpl)
	best, bestD := 0, math.Inf(1)
	var iv, dev []float64
	for ph := range p {
		iv = iv[:0]
		for i := (at + ph) % p; i+p < len(win); i += p {
			if win[i] == tmpl[ph] && win[i+p] == tmpl[ph] {
				iv = append(iv, float64(ts[i+p]-ts[i]))
			}
		}
		if len(iv) < 2 {
			continue
		}
		med := stats.Median(iv)
		if med <= 0 {
			continue
		}
		dev = dev[:0]
		for _, v := range iv {
			dev = append(dev, math.Abs(v-med))
		}
		if d := stats.Median(dev) / med; d < bestD {
			best, bestD = ph, d
		}
	}
	return best
}

// alignment is the result of walking the sequence against the template.
type alignment struct {
	// per call: iteration and phase, or −1
	iter, phase []int
	ts          []int64
	segStart    []bool // iteration j starts a new segment (after warm-up or a resync)
	nIter       int
	warmup      int
	unmatched   int
	resyncs     int
}

// findStart returns the first index ≥ from where a full period matches
// the template from phase 0 with at least minMatch, or −1.
func findStart(syms []int32, from int, tmpl []int32, minMatch float64) int {
	p := len(tmpl)
	need := int(math.Ceil(minMatch * float64(p)))
	for i := from; i+p <= len(syms); i++ {
		if syms[i] != tmpl[0] {
			continue
		}
		m := 0
		for k := range p {
			if syms[i+k] == tmpl[k] {
				m++
			}
		}
		if m >= need {
			return i
		}
	}
	return -1
}

func align(syms []int32, ts []int64, tmpl []int32, minMatch float64) alignment {
	n, p := len(syms), len(tmpl)
	a := alignment{iter: make([]int, n), phase: make([]int, n), ts: ts}
	for i := range a.iter {
		a.iter[i], a.phase[i] = -1, -1
	}
	start := findStart(syms, 0, tmpl, minMatch)
	if start < 0 {
		a.warmup = n
		return a
	}
	a.warmup = start
	j, ph, misses := 0, 0, 0
	a.segStart = append(a.segStart, true)
	maxMiss := max(2, p/2)
	look := min(p-1, 8)
	i := start
	advance := func(d int) {
		ph += d
		for ph >= p {
			ph -= p
			j++
			a.segStart = append(a.segStart, false)
		}
	}
	for i < n {
		if syms[i] == tmpl[ph] {
			a.iter[i], a.phase[i] = j, ph
			advance(1)
			misses = 0
			i++
			continue
		}
		// Dropped calls: the symbol is expected d phases later.
		skipped := false
		for d := 1; d <= look; d++ {
			if syms[i] == tmpl[(ph+d)%p] && (i+1 >= n || syms[i+1] == tmpl[(ph+d+1)%p]) {
				advance(d)
				skipped = true
				break
			}
		}
		if skipped {
			continue // matches on the next turn
		}
		a.unmatched++
		misses++
		if i+1 < n && syms[i+1] == tmpl[ph] { // an extra call
			i++
		} else { // a substitution: the expected call came as another
			advance(1)
			i++
		}
		if misses > maxMiss {
			next := findStart(syms, i, tmpl, minMatch)
			a.resyncs++
			if next < 0 {
				a.unmatched += n - i
				break
			}
			a.unmatched += next - i
			i, ph, misses = next, 0, 0
			j++
			a.segStart = append(a.segStart, true)
		}
	}
	a.nIter = j + 1
	for len(a.segStart) < a.nIter {
		a.segStart = append(a.segStart, false)
	}
	return a
}

// series turns the alignment into iteration times (see IterationTimes).
func (a alignment) series(p int) []Iter {
	if a.nIter < 2 {
		return nil
	}
	exact := make([]int64, a.nIter)
	has := make([]bool, a.nIter)
	for i, j := range a.iter {
		if j >= 0 && a.phase[i] == 0 && !has[j] {
			exact[j], has[j] = a.ts[i], true
		}
	}
	// Median offset of each phase after the anchor of its iteration.
	offs := make([][]float64, p)
	for i, j := range a.iter {
		if j >= 0 && a.phase[i] > 0 && has[j] {
			offs[a.phase[i]] = append(offs[a.phase[i]], float64(a.ts[i]-exact[j]))
		}
	}
	off := make([]float64, p)
	okOff := make([]bool, p)
	for ph := 1; ph < p; ph++ {
		if len(offs[ph]) > 0 {
			off[ph], okOff[ph] = medianSigned(offs[ph]), true
		}
	}
	bound := make([]int64, a.nIter)
	est := make([]bool, a.nIter)
	var cand [][]float64 = make([][]float64, a.nIter)
	for i, j := range a.iter {
		if j >= 0 && !has[j] && okOff[a.phase[i]] {
			cand[j] = append(cand[j], float64(a.ts[i])-off[a.phase[i]])
		}
	}
	present := make([]bool, a.nIter)
	for j := range a.nIter {
		switch {
		case has[j]:
			bound[j], present[j] = exact[j], true
		case len(cand[j]) > 0:
			bound[j], present[j], est[j] = int64(medianSigned(cand[j])), true, true
		}
	}
	var out []Iter
	for j := 1; j < a.nIter; j++ {
		if !present[j] || !present[j-1] || a.segStart[j] || bound[j] < bound[j-1] {
			continue
		}
		out = append(out, Iter{Iter: j - 1, EndNS: bound[j], MS: float64(bound[j]-bound[j-1]) / 1e6, Estimated: est[j] || est[j-1]})
	}
	return out
}

// medianSigned is the median of values of any sign (stats.Median orders
// non-negative values only); it reorders xs.
func medianSigned(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return xs[n/2-1] + (xs[n/2]-xs[n/2-1])/2
}
