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
	// Paused: the iteration overlaps a validation pause (the ranks
	// benchmarking, §4.3), so it is no evidence of a fail-slow: the
	// change-point detector does not see it.
	Paused bool `json:"paused,omitempty"`
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
//     in order of first appearance. ACF is taken on the symbols
//     themselves (stats.SymbolACF: the paper's formula on their one-hot
//     encoding, the chance-corrected fraction of calls that repeat k calls
//     later), never on numeric codes: any scalar code weights two calls
//     by the distance of their codes, so detectability would depend on
//     how ids were assigned or hashed.
//  2. Period = the first lag with ACF ≥ M on the latest ACFWindow calls
//     (warm-up lives at the start, so the window ends at the last call),
//     over the calls that recur often enough to be part of a period
//     (detectPeriod).
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
	seq := withGaps(calls[w0:], win)
	p, acf, match := detectPeriod(seq, cfg)
	if p == 0 && w0 == 0 && len(seq) >= 40 {
		// The window starts at the rank's first call: its warm-up (a
		// first iteration's buckets in another order) mismatches like any
		// call, and where one bucket size dominates, every mismatch weighs
		// 1/(1−q) times more (stats.SymbolACF). Warm-up lives at the
		// start, so try again without the first tenth of the window.
		p, acf, match = detectPeriod(seq[len(seq)/10:], cfg)
	}
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

// maxGapFill bounds the placeholders one sequence gap adds: a longer gap
// is a loss of telemetry, not a few dropped calls, and its phase is lost
// anyway.
const maxGapFill = 8

// withGaps returns the window's symbols with a placeholder (a negative id,
// unique, so it matches nothing) for each call a communicator's sequence
// numbers show missing: a call dropped by the client (its ring buffer full)
// leaves a gap in seq, and without the placeholder every later call is one
// position early — a phase slip that costs up to a period of mismatches
// at the period's lag instead of about one call's worth (stats.SymbolACF
// imputes placeholders). A seq number is missing when no call of the
// window holds it between the communicator's lowest and highest; a call
// issued out of order (a late bucket) is not a loss. The placeholder goes
// just before the call holding the next present seq: where exactly the
// lost call sat among other communicators' calls is unknown, and a
// misplacement costs only the calls in between.
func withGaps(calls []collective.Call, win []int32) []int32 {
	bySeq := map[string][]int{} // comm → indexes of its calls
	for i := range calls {
		bySeq[calls[i].Comm] = append(bySeq[calls[i].Comm], i)
	}
	fill := map[int]int{} // call index → placeholders before it
	for _, idx := range bySeq {
		slices.SortFunc(idx, func(a, b int) int { return cmpInt64(calls[a].Seq, calls[b].Seq) })
		for j := 1; j < len(idx); j++ {
			if gap := calls[idx[j]].Seq - calls[idx[j-1]].Seq - 1; gap > 0 {
				fill[idx[j]] = int(min(gap, maxGapFill))
			}
		}
	}
	out := make([]int32, 0, len(win)+len(fill))
	next := int32(-1)
	for i := range calls {
		for range fill[i] {
			out = append(out, next)
			next--
		}
		out = append(out, win[i])
	}
	return out
}

// detectPeriod returns the recurring period of the window (§4.2), or 0:
// the first lag whose symbol-exact ACF (stats.SymbolPeriod: the paper's
// formula on the one-hot encoding of the calls, i.e. the chance-corrected
// fraction of calls that repeat k calls later) reaches M, computed over
// the window's recurring calls; negative ids are placeholders for
// dropped calls (withGaps).
//
// Recurring: a call of the iteration occurs in every period, and a period
// is admissible only when the window holds ≥ 1/(1−M) = 20 of them, so a
// symbol seen fewer than half as many times as the window holds periods of
// the longest admissible lag cannot belong to the pattern: it is warm-up
// (initial broadcasts, a first iteration's bucket rebuild) or an
// irregular call (logging, a checkpoint barrier). Left in, a rare call is
// all the variance a near-constant sequence has (one DDP bucket after a
// warm-up broadcast) and no lag would reach M; it is skipped here as the
// alignment skips it later. The recurring calls must make up MinMatch of
// the window, else the window has no pattern worth the name.
func detectPeriod(win []int32, cfg Config) (p int, acf, match float64) {
	maxLag := maxLagFor(len(win), cfg)
	count := map[int32]int{}
	for _, s := range win {
		count[s]++
	}
	minCount := max(2, (len(win)/maxLag+1)/2)
	core := make([]int32, 0, len(win))
	for _, s := range win {
		if s < 0 || count[s] >= minCount { // placeholders (withGaps) keep the phase
			core = append(core, s)
		}
	}
	if len(core) < 3 || float64(len(core)) < cfg.MinMatch*float64(len(win)) {
		return 0, 0, 0
	}
	k, a, m, ok := stats.SymbolPeriod(core, maxLagFor(len(core), cfg), cfg.ACFThreshold)
	if !ok {
		return 0, 0, 0
	}
	return k, a, m
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
	// Prefer an exact period close after it: warm-up calls drawn from
	// the steady ones (a first iteration's buckets in another order) can
	// match MinMatch of a period where one symbol dominates, and an
	// alignment begun inside the warm-up misplaces the first iterations.
	if start >= 0 {
		p := len(tmpl)
		if e := findStart(syms[:min(n, start+5*p)], start, tmpl, 1); e >= 0 {
			start = e
		}
	}
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
