package kair

import (
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/stats"
)

// KAIR §III-B Stage 1, straggler localization via distribution divergence:
// each rank's "execution rhythm" is its operator completions per window
// of one shared grid; the exact pairwise K-S distances D(A,B), the
// abnormality score S_A (mean D to the peers), a p-value and the ranking
// come from internal/stats (ecdf.go, ks.go), beside the O(N·n)
// approximation against a median reference ECDF.

// RhythmConfig holds Stage 1's parameters. Zero fields take the defaults.
type RhythmConfig struct {
	// Windows is n, the windows of the shared grid over the common span.
	Windows int `json:"windows"`
	// Categories are the events counted as completions; empty = auto:
	// device work (kernels, copies, device-side collectives) when every
	// rank recorded enough of it, else host work. On a GPU the host
	// launches asynchronously and runs ahead, so host completions keep
	// their rhythm while the device falls behind.
	Categories []optrace.Category `json:"categories,omitempty"`
	// Alpha is the p-value the top rank needs to be named.
	Alpha float64 `json:"alpha"`
	// Separation is the ratio Score[top] / Score[runner-up] needed.
	Separation float64 `json:"separation"`
	// Frame is the time axis completions are placed on: FrameStep (the
	// default) measures each completion from its own rank's start of that
	// step and pools the steps, FrameCapture uses the aligned clock over
	// the whole capture (the paper's literal reading). See Localize.
	Frame RhythmFrame `json:"frame"`
}

// RhythmFrame is Stage 1's time axis.
type RhythmFrame string

const (
	FrameStep    RhythmFrame = "step"
	FrameCapture RhythmFrame = "capture"
)

// Stage 1 defaults. 256 windows: a step of ~100 ms spread over a few
// steps still gets sub-ms windows, and 2,048 ranks × 256 windows is a few
// MB of ECDFs. Categories: everything that is work (user ranges and
// Python frames enclose other ops and would count them twice).
const (
	defaultWindows    = 256
	defaultAlpha      = 0.01
	defaultSeparation = 1.5
	// maxWindows bounds the grid (memory: ranks × windows × 12 bytes).
	maxWindows = 1 << 16
	// minRhythmRanks: with two ranks D(A,B) is symmetric, so S cannot say
	// which one is odd.
	minRhythmRanks = 3
	// minCompletions: below ~20 samples a K-S p-value is meaningless.
	minCompletions = 20
	// agreementK is the top-k the exact and approximate rankings are
	// compared on.
	agreementK = 5
)

// hostCategories / deviceCategories are the auto choices of
// RhythmConfig.Categories. Collective counts in both: a device-side
// collective is device work, a host-side one (gloo) host work, and
// Localize keeps only the side it counts.
func hostCategories() []optrace.Category {
	return []optrace.Category{optrace.CPUOp, optrace.Collective, optrace.Runtime}
}

func deviceCategories() []optrace.Category {
	return []optrace.Category{optrace.GPUKernel, optrace.Memcpy, optrace.Memset, optrace.Collective}
}

// autoCategories picks device work when every rank has device
// completions and at least min(minCompletions, its host completions) of
// them, else host work.
func autoCategories(traces []optrace.Trace) []optrace.Category {
	for i := range traces {
		dev, host := 0, 0
		for j := range traces[i].Events {
			e := &traces[i].Events[j]
			switch {
			case e.Device >= 0 && (e.Cat.OnDevice() || e.Cat == optrace.Collective):
				dev++
			case e.Device < 0 && (e.Cat == optrace.CPUOp || e.Cat == optrace.Collective || e.Cat == optrace.Runtime):
				host++
			}
		}
		if dev == 0 || dev < min(minCompletions, host) {
			return hostCategories()
		}
	}
	return deviceCategories()
}

// DefaultRhythmConfig returns the documented Stage 1 defaults.
func DefaultRhythmConfig() RhythmConfig {
	return RhythmConfig{Windows: defaultWindows,
		Alpha: defaultAlpha, Separation: defaultSeparation, Frame: FrameStep}
}

// withDefaults fills zero fields.
func (c RhythmConfig) withDefaults() RhythmConfig {
	if c.Windows == 0 {
		c.Windows = defaultWindows
	}
	if c.Alpha == 0 {
		c.Alpha = defaultAlpha
	}
	if c.Separation == 0 {
		c.Separation = defaultSeparation
	}
	if c.Frame == "" {
		c.Frame = FrameStep
	}
	return c
}

// Validate checks c (after defaults); errors name the field.
func (c RhythmConfig) Validate() error {
	switch {
	case c.Windows < 1 || c.Windows > maxWindows:
		return signal.FieldErrorf("windows", "must be in [1,%d], got %d", maxWindows, c.Windows)
	case !(c.Alpha > 0 && c.Alpha < 1):
		return signal.FieldErrorf("alpha", "must be in (0,1), got %v", c.Alpha)
	case !(c.Separation >= 1) || math.IsInf(c.Separation, 0):
		return signal.FieldErrorf("separation", "must be a finite number ≥ 1, got %v", c.Separation)
	case c.Frame != FrameStep && c.Frame != FrameCapture:
		return signal.FieldErrorf("frame", "must be %q or %q, got %q", FrameStep, FrameCapture, signal.Clip(string(c.Frame)))
	}
	for i, k := range c.Categories {
		if !k.Valid() {
			return signal.FieldErrorf(fmt.Sprintf("categories[%d]", i), "invalid category %d", uint8(k))
		}
	}
	return nil
}

// RhythmVerdict is Stage 1's conclusion.
type RhythmVerdict string

const (
	RhythmStraggler    RhythmVerdict = "straggler"    // one rank singled out
	RhythmNone         RhythmVerdict = "none"         // rhythms agree
	RhythmInconclusive RhythmVerdict = "inconclusive" // too few ranks/completions, or no clear top
)

// RhythmAgreement is stats.RankAgreement made JSON-safe: the exact
// ranking (Score) against the approximation (RefD).
type RhythmAgreement struct {
	K        int     `json:"k"`
	Overlap  int     `json:"overlap"`
	Top1     bool    `json:"top1"`
	Spearman float64 `json:"spearman"`
	Kendall  float64 `json:"kendall"`
	// Defined is false when a correlation is undefined (N < 2 or a
	// constant score vector); the undefined one reads 0.
	Defined bool `json:"defined"`
}

// Rhythm is the Stage 1 result. Every per-worker slice is in Ranks order.
type Rhythm struct {
	// Frame is the time axis actually used (FrameCapture when step
	// numbers were missing). T0NS is the grid start: on the reference
	// clock in FrameCapture, ns into the step (0) in FrameStep.
	Frame RhythmFrame `json:"frame"`
	// Categories are the completions counted (cfg's, or the auto choice).
	Categories []optrace.Category `json:"categories"`
	T0NS       int64              `json:"t0_ns"`
	WindowNS   int64              `json:"window_ns"`
	Windows    int                `json:"windows"`
	Ranks      []int              `json:"ranks"`
	Totals     []int              `json:"totals"` // completions inside the grid per rank
	Freq       [][]uint32         `json:"freq"`   // per rank, completions per window (Fig. 4 view)
	D          []float64          `json:"d"`      // exact pairwise D, len(Ranks)² row-major
	Score      []float64          `json:"score"`  // S_A
	// P is the per-rank p-value (stats.KSMatrix.P); -1 when the rank has
	// no completion (no sample: the test says nothing).
	P    []float64 `json:"p"`
	RefD []float64 `json:"ref_d"` // approximation: D against the median reference ECDF
	RefP []float64 `json:"ref_p"` // -1 when no sample
	// Order is ranks (not indices) by descending Score.
	Order     []int           `json:"order"`
	Agreement RhythmAgreement `json:"agreement"`
	// StepLeaders is, per common step (FrameStep, ≥ 2 steps), the rank
	// diverging most in that step alone (-1: too few completions); a
	// straggler must lead in at least half of those with a leader.
	StepLeaders []int         `json:"step_leaders,omitempty"`
	Verdict     RhythmVerdict `json:"verdict"`
	Straggler   int           `json:"straggler"` // rank, -1 unless Verdict == straggler
	Why         string        `json:"why"`       // one sentence: why named / why withheld
}

// commonSteps is the steps (≥ 0) every trace has events in, ascending.
func commonSteps(traces []optrace.Trace) []int64 {
	if len(traces) == 0 {
		return nil
	}
	var common map[int64]bool
	for i := range traces {
		have := map[int64]bool{}
		for j := range traces[i].Events {
			if s := traces[i].Events[j].Step; s >= 0 && (common == nil || common[s]) {
				have[s] = true
			}
		}
		common = have
		if len(common) == 0 {
			return nil
		}
	}
	out := make([]int64, 0, len(common))
	for s := range common {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Localize runs Stage 1 on traces already aligned (Trace.ClockOffsetNS).
//
// Completions: the end times of the events in cfg.Categories whose Step
// is one every rank has (so ranks that captured a different number of
// steps compare the same work), binned on one grid of cfg.Windows equal
// windows spanning the earliest start to the latest completion over all
// ranks.
//
// Time axis (cfg.Frame). FrameStep, the default, measures every
// completion from its own rank's start of that step and pools the steps:
// the ECDF is the rank's within-step rhythm. Why not the paper's absolute
// clock verbatim (FrameCapture): in synchronous training the next
// collective absorbs a per-step delay, so on the capture-wide clock a
// rank that is late inside every step is back in line at every step end
// and D shrinks like delay/(capture span) — more captured steps, less
// signal. Pooled step phases keep D at the displaced fraction of each
// step whatever the number of steps, and need no cross-rank clock
// alignment (each rank is measured against itself). Traces without a
// common step fall back to FrameCapture over the overlap of the ranks'
// capture spans.
//
// Verdict (fixed rule, not tuned to fixtures):
//   - fewer than 3 ranks, or a rank with fewer than 20 completions →
//     inconclusive (says which);
//   - the top-scoring rank is named only if its p-value < Alpha and its
//     score ≥ Separation × the runner-up's;
//   - the top rank's p ≥ Alpha → none (the rhythms agree);
//   - otherwise inconclusive: no single rank stands out.
func Localize(traces []optrace.Trace, cfg RhythmConfig) (*Rhythm, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkRanks(traces); err != nil {
		return nil, err
	}
	idx := make([]int, len(traces))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return traces[a].Rank - traces[b].Rank })
	cats := cfg.Categories
	side := 0 // 1: device events only, -1: host only, 0: both
	if len(cats) == 0 {
		cats = autoCategories(traces)
		side = -1
		if slices.Contains(cats, optrace.GPUKernel) {
			side = 1
		}
	}
	var want [256]bool
	for _, c := range cats {
		want[c] = true
	}
	steps := commonSteps(traces)
	inStep := make(map[int64]bool, len(steps))
	for _, s := range steps {
		inStep[s] = true
	}
	n := len(idx)
	times := make([][]int64, n)
	stepOf := make([][]int64, n) // FrameStep: the step of each completion
	frame := cfg.Frame
	if len(steps) == 0 {
		frame = FrameCapture // no step to measure from
	}
	// Span: with common steps, [earliest start, latest end] of the
	// counted events over all ranks; without, the overlap of the ranks'
	// spans of counted events.
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	olo, ohi := int64(math.MinInt64), int64(math.MaxInt64)
	for j, i := range idx {
		t := &traces[i]
		var base map[int64]int64
		if frame == FrameStep {
			base = stepStarts(t, inStep)
		}
		rlo, rhi := int64(math.MaxInt64), int64(math.MinInt64)
		var ts []int64
		for k := range t.Events {
			e := &t.Events[k]
			if !e.Cat.Valid() || !want[e.Cat] || e.DurNS < 0 || (side > 0 && e.Device < 0) || (side < 0 && e.Device >= 0) {
				continue
			}
			if len(steps) > 0 && !inStep[e.Step] {
				continue
			}
			off := t.ClockOffsetNS
			if frame == FrameStep {
				off = -base[e.Step]
			}
			s, ok1 := addSat(e.StartNS, off)
			end, ok2 := addSat(s, e.DurNS)
			if !ok1 || !ok2 {
				continue
			}
			ts = append(ts, end)
			if frame == FrameStep {
				stepOf[j] = append(stepOf[j], e.Step)
			}
			rlo, rhi = min(rlo, s), max(rhi, end)
		}
		times[j] = ts
		lo, hi = min(lo, rlo), max(hi, rhi)
		olo, ohi = max(olo, rlo), min(ohi, rhi)
	}
	if len(steps) == 0 {
		lo, hi = olo, ohi
	}
	g := stats.Grid{T0: 0, W: 1, N: cfg.Windows}
	if lo <= hi {
		// Windows [T0, T0+W·N) must hold hi itself: W = ⌊span/N⌋ + 1.
		span, ok := sub(hi, lo)
		if !ok {
			return nil, signal.FieldErrorf("traces", "time span of the completions overflows int64 ns")
		}
		g = stats.Grid{T0: lo, W: span/int64(cfg.Windows) + 1, N: cfg.Windows}
	}
	if err := g.Validate(); err != nil {
		return nil, signal.FieldErrorf("traces", "%v", err)
	}
	rh, err := stats.NewRhythms(g, times)
	if err != nil {
		return nil, err
	}
	m := stats.KSPairwise(rh, 0)
	ref := stats.KSReference(rh, 0)
	ag := stats.CompareRankings(m.Score, ref.D, agreementK)

	out := &Rhythm{Frame: frame, Categories: cats, T0NS: g.T0, WindowNS: g.W, Windows: g.N, Ranks: make([]int, n),
		Totals: slices.Clone(rh.Total), Freq: make([][]uint32, n), D: jsonSafe(m.D, 0),
		Score: jsonSafe(m.Score, 0), P: jsonSafe(m.P, -1), RefD: jsonSafe(ref.D, 0),
		RefP: jsonSafe(ref.P, -1), Order: make([]int, n), Straggler: -1,
		Agreement: RhythmAgreement{K: ag.K, Overlap: ag.Overlap, Top1: ag.Top1,
			Spearman: finiteOr(ag.Spearman, 0), Kendall: finiteOr(ag.Kendall, 0),
			Defined: !math.IsNaN(ag.Spearman) && !math.IsNaN(ag.Kendall)}}
	if out.Totals == nil {
		out.Totals = []int{}
	}
	for j, i := range idx {
		out.Ranks[j] = traces[i].Rank
		out.Freq[j] = slices.Clone(rh.Freq(j))
	}
	for j, w := range m.Order {
		out.Order[j] = out.Ranks[w]
	}
	out.Verdict, out.Straggler, out.Why = rhythmVerdict(out, m.Order, cfg, len(steps))
	if frame == FrameStep && len(steps) >= 2 {
		out.StepLeaders = stepLeaders(steps, times, stepOf, out.Ranks, cfg.Windows)
		if out.Verdict == RhythmStraggler {
			k, known := 0, 0
			for _, r := range out.StepLeaders {
				if r >= 0 {
					known++
				}
				if r == out.Straggler {
					k++
				}
			}
			if known > 0 && 2*k < known {
				// Pooling lets one rank's unusual steps (a stall, a GC)
				// dominate; a straggler is one in most steps.
				out.Verdict, out.Why = RhythmInconclusive, fmt.Sprintf(
					"rank %d diverges most over the pooled steps (S = %.3f) but leads the per-step divergence in only %d of %d steps: not a consistent straggler",
					out.Straggler, out.Score[slices.Index(out.Ranks, out.Straggler)], k, known)
				out.Straggler = -1
			}
		}
	}
	return out, nil
}

// stepLeaders is, per step, the rank whose within-step rhythm diverges
// most from the median reference ECDF (stats.KSReference, O(N·n) per
// step, so the check stays cheap at thousands of ranks); -1 when the step
// has too few completions to compare.
func stepLeaders(steps []int64, times, stepOf [][]int64, ranks []int, windows int) []int {
	out := make([]int, len(steps))
	per := make([][]int64, len(times))
	for si, s := range steps {
		out[si] = -1
		hi := int64(0)
		ok := true
		for j := range times {
			per[j] = per[j][:0]
			for i, t := range times[j] {
				if stepOf[j][i] == s {
					per[j] = append(per[j], t)
					hi = max(hi, t)
				}
			}
			ok = ok && len(per[j]) >= minCompletions
		}
		if !ok || hi < 0 {
			continue
		}
		g := stats.Grid{T0: 0, W: hi/int64(windows) + 1, N: windows}
		rh, err := stats.NewRhythms(g, per)
		if err != nil {
			continue
		}
		ref := stats.KSReference(rh, 0)
		if len(ref.Order) > 0 {
			out[si] = ranks[ref.Order[0]]
		}
	}
	return out
}

// stepStarts is, per common step, the earliest start of any event of the
// step on this rank (the ProfilerStep#N range when the profiler wrote
// one, so a late data fetch at the top of the step counts as lateness).
// Clock offsets cancel: each rank is measured against itself.
func stepStarts(t *optrace.Trace, inStep map[int64]bool) map[int64]int64 {
	base := make(map[int64]int64, len(inStep))
	for k := range t.Events {
		e := &t.Events[k]
		if !inStep[e.Step] {
			continue
		}
		if b, ok := base[e.Step]; !ok || e.StartNS < b {
			base[e.Step] = e.StartNS
		}
	}
	return base
}

// rhythmVerdict applies the rule documented on Localize.
func rhythmVerdict(r *Rhythm, order []int, cfg RhythmConfig, nsteps int) (RhythmVerdict, int, string) {
	n := len(r.Ranks)
	if n < minRhythmRanks {
		return RhythmInconclusive, -1, fmt.Sprintf(
			"%d ranks: K-S localization needs at least %d, since with two the divergence is symmetric and cannot say which rank is odd", n, minRhythmRanks)
	}
	scope := fmt.Sprintf("the %d steps every rank captured", nsteps)
	if nsteps == 0 {
		scope = "the overlap of the captures (no step every rank has)"
	}
	for j, tot := range r.Totals {
		if tot < minCompletions {
			return RhythmInconclusive, -1, fmt.Sprintf(
				"rank %d completed only %d operators in %s: K-S needs at least %d", r.Ranks[j], tot, scope, minCompletions)
		}
	}
	top, second := order[0], order[1]
	st, s2, p := r.Score[top], r.Score[second], r.P[top]
	switch {
	case p >= 0 && p < cfg.Alpha && st >= cfg.Separation*s2:
		return RhythmStraggler, r.Ranks[top], fmt.Sprintf(
			"rank %d's rhythm diverges most (S = %.3f, p = %.2g < %g) and stands apart from the runner-up rank %d (S = %.3f, ratio ≥ %g)",
			r.Ranks[top], st, p, cfg.Alpha, r.Ranks[second], s2, cfg.Separation)
	case p >= cfg.Alpha:
		return RhythmNone, -1, fmt.Sprintf(
			"no rank's rhythm diverges significantly: the most divergent, rank %d, has S = %.3f, p = %.2g ≥ %g", r.Ranks[top], st, p, cfg.Alpha)
	}
	return RhythmInconclusive, -1, fmt.Sprintf(
		"no single rank stands out: top two scores %.3f (rank %d), %.3f (rank %d), ratio below %g",
		st, r.Ranks[top], s2, r.Ranks[second], cfg.Separation)
}

// jsonSafe copies xs with NaN/±Inf replaced by bad (JSON has neither).
func jsonSafe(xs []float64, bad float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = finiteOr(x, bad)
	}
	return out
}

func finiteOr(x, bad float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return bad
	}
	return x
}
