package greyhound

import (
	"fmt"
	"math"
)

// Config holds Greyhound-Detect's thresholds. Defaults follow the paper
// where it gives a number (M = 0.95, 0.9, 10%, 16/32/64 MB); the rest are
// ours and say why.
type Config struct {
	// ACFThreshold is M (§4.2: 0.95).
	ACFThreshold float64 `json:"acf_threshold"`
	// ACFWindow is L, the calls (latest first) the period is detected on.
	// ACF's numerator has L−k terms, so a period p can reach M only when
	// L ≥ p/(1−M) = 20p; 16384 calls admit periods up to MaxPeriod with
	// room for jitter, and cost ~1 ms.
	ACFWindow int `json:"acf_window"`
	// MaxPeriod bounds the lag (calls per iteration). 400: Megatron ranks
	// issue tens to a few hundred calls per iteration.
	MaxPeriod int `json:"max_period"`
	// MinMatch is the fraction of calls that must repeat exactly one
	// period later for an ACF candidate to be accepted (it guards the
	// numeric encoding against chance correlation) and for a period's
	// worth of calls to count as aligned.
	MinMatch float64 `json:"min_match"`
	// Detector is "bocd+v" (default), "bocd" or "window".
	Detector string `json:"detector"`
	// VerifyRel is the BOCD+V verification gate (§4.2: 10%).
	VerifyRel float64 `json:"verify_rel"`
	// VerifyWindow is BOCD+V's confirmation window W in iterations (0:
	// stats.DefaultVerifyAfter = 10, the shortest fail-slow) and
	// VerifyMinSpanMS an optional wall-time floor on it (0: off; 30000
	// waits for 30 s of training, the corpus's fail-slow definition, at
	// the cost of reaction time — docs/design/greyhound.md).
	VerifyWindow    int     `json:"verify_window,omitempty"`
	VerifyMinSpanMS float64 `json:"verify_min_span_ms,omitempty"`
	// DegradedRel: a group is degraded when its execution time exceeds
	// its cluster's median by more than this (§4.3: 10%).
	DegradedRel float64 `json:"degraded_rel"`
	// SlowRel: a rank's GEMM or a link's P2P time beyond the median by
	// more than this is slow (the paper's 10% applied to validation).
	SlowRel float64 `json:"slow_rel"`
	// Entry lateness (late_rank verdict): a rank is late when it enters
	// one collective last on at least LateShare of the ≥ LateMinInstances
	// instances since the onset by a median margin ≥ 1 ms. Zero values
	// take the defaults (configs saved before these fields).
	LateShare        float64 `json:"late_share"`
	LateMinInstances int     `json:"late_min_instances"`
	// ExplainFrac: a localising verdict (slow rank, slow link, late rank)
	// names its component only when what it measured can account for at
	// least this share of the onset's iteration-time increase (issue 16:
	// a 4.8 ms GEMM deficit cannot explain +120 ms per iteration); below
	// twice this share it says other causes may add to it. 0: default.
	ExplainFrac float64 `json:"explain_frac"`
	// ProfileIters is how many latest iterations of calls profiling and
	// lateness look at.
	ProfileIters int `json:"profile_iters"`
	// MaxLatenessInstances bounds the lateness heatmap's columns.
	MaxLatenessInstances int `json:"max_lateness_instances"`
	// Validation plan (§4.3): message sizes, repetitions, GEMM size, the
	// deadline and how many steps ahead the plan is scheduled (every rank
	// must learn of it before at_step; clients poll every ~2 s).
	// BudgetMS caps the benchmarks' time (the training pause beyond the
	// agreement), shared by the GEMM and the passes; StopRatio stops a
	// pass once a link in it is proven that many times slower (P2PTest).
	BudgetMS      int64   `json:"budget_ms"`
	StopRatio     float64 `json:"stop_ratio"`
	P2PSizes      []int64 `json:"p2p_sizes"`
	Reps          int     `json:"reps"`
	GEMMN         int     `json:"gemm_n"`
	GEMMDtype     string  `json:"gemm_dtype"`
	DeadlineMS    int64   `json:"deadline_ms"`
	PlanLeadSteps int64   `json:"plan_lead_steps"`
	// ProfileTimeoutNS: profiling that yields no comparison in this long
	// ends in an inconclusive verdict. HoldNS: a verdict goes back to
	// tracking after this long without a relief.
	ProfileTimeoutNS int64 `json:"profile_timeout_ns"`
	HoldNS           int64 `json:"hold_ns"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		ACFThreshold: 0.95, ACFWindow: 16384, MaxPeriod: 400, MinMatch: 0.9,
		Detector: DetectorBOCDV, VerifyRel: 0.10, DegradedRel: 0.10, SlowRel: 0.10,
		LateShare: 0.6, LateMinInstances: 5, ExplainFrac: 0.25,
		ProfileIters: 20, MaxLatenessInstances: 200,
		BudgetMS: 20_000, StopRatio: 4,
		P2PSizes: []int64{16 << 20, 32 << 20, 64 << 20}, Reps: 3, GEMMN: 1024, GEMMDtype: "float32",
		DeadlineMS: 30_000, PlanLeadSteps: 3,
		ProfileTimeoutNS: 120e9, HoldNS: 600e9,
	}
}

// withDefaults fills the fields whose zero means "the default" (configs
// saved before they existed).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LateShare == 0 {
		c.LateShare = d.LateShare
	}
	if c.LateMinInstances == 0 {
		c.LateMinInstances = d.LateMinInstances
	}
	if c.ExplainFrac == 0 {
		c.ExplainFrac = d.ExplainFrac
	}
	if c.VerifyRel == 0 {
		c.VerifyRel = d.VerifyRel
	}
	return c
}

// Detector names (stats.Detector.Name of each).
const (
	DetectorBOCDV  = "bocd+v"
	DetectorBOCD   = "bocd"
	DetectorWindow = "window"
)

// Validate names the first bad field.
func (c Config) Validate() error {
	frac := func(name string, v float64, lo, hi float64) error {
		if math.IsNaN(v) || v <= lo || v > hi {
			return fmt.Errorf("greyhound config: %s must be in (%g, %g], got %g", name, lo, hi, v)
		}
		return nil
	}
	for _, f := range []struct {
		n      string
		v      float64
		lo, hi float64
	}{
		{"acf_threshold", c.ACFThreshold, 0, 1}, {"min_match", c.MinMatch, 0, 1},
		{"verify_rel", c.VerifyRel, 0, 10}, {"degraded_rel", c.DegradedRel, 0, 10}, {"slow_rel", c.SlowRel, 0, 10},
	} {
		if err := frac(f.n, f.v, f.lo, f.hi); err != nil {
			return err
		}
	}
	switch {
	case c.ACFWindow < 16 || c.ACFWindow > 1<<22:
		return fmt.Errorf("greyhound config: acf_window must be in [16, %d], got %d", 1<<22, c.ACFWindow)
	case c.MaxPeriod < 1 || c.MaxPeriod > c.ACFWindow:
		return fmt.Errorf("greyhound config: max_period must be in [1, acf_window], got %d", c.MaxPeriod)
	case c.Detector != DetectorBOCDV && c.Detector != DetectorBOCD && c.Detector != DetectorWindow:
		return fmt.Errorf("greyhound config: detector must be bocd+v, bocd or window, got %q", c.Detector)
	case c.VerifyWindow < 0 || c.VerifyWindow > 64:
		return fmt.Errorf("greyhound config: verify_window must be in [0, 64], got %d", c.VerifyWindow)
	case math.IsNaN(c.VerifyMinSpanMS) || c.VerifyMinSpanMS < 0 || c.VerifyMinSpanMS > 3.6e6:
		return fmt.Errorf("greyhound config: verify_min_span_ms must be in [0, 3.6e6], got %g", c.VerifyMinSpanMS)
	case c.LateShare != 0 && !(c.LateShare > 0.5 && c.LateShare <= 1):
		return fmt.Errorf("greyhound config: late_share must be in (0.5, 1] (0: default), got %g", c.LateShare)
	case c.ExplainFrac != 0 && !(c.ExplainFrac > 0 && c.ExplainFrac <= 1):
		return fmt.Errorf("greyhound config: explain_frac must be in (0, 1] (0: default), got %g", c.ExplainFrac)
	case c.BudgetMS < 0:
		return fmt.Errorf("greyhound config: budget_ms must be ≥ 0 (0: no cap), got %d", c.BudgetMS)
	case c.StopRatio != 0 && !(c.StopRatio > 1 && c.StopRatio <= 1000):
		return fmt.Errorf("greyhound config: stop_ratio must be in (1, 1000] (0: off), got %g", c.StopRatio)
	case c.LateMinInstances < 0:
		return fmt.Errorf("greyhound config: late_min_instances must be ≥ 0 (0: default), got %d", c.LateMinInstances)
	case c.ProfileIters < 1:
		return fmt.Errorf("greyhound config: profile_iters must be ≥ 1, got %d", c.ProfileIters)
	case c.MaxLatenessInstances < 0:
		return fmt.Errorf("greyhound config: max_lateness_instances must be ≥ 0, got %d", c.MaxLatenessInstances)
	case len(c.P2PSizes) == 0:
		return fmt.Errorf("greyhound config: p2p_sizes must not be empty")
	case c.Reps < 1 || c.Reps > 100:
		return fmt.Errorf("greyhound config: reps must be in [1, 100], got %d", c.Reps)
	case c.GEMMN < 1 || c.GEMMN > 65536:
		return fmt.Errorf("greyhound config: gemm_n must be in [1, 65536], got %d", c.GEMMN)
	case c.DeadlineMS < 1:
		return fmt.Errorf("greyhound config: deadline_ms must be ≥ 1, got %d", c.DeadlineMS)
	case c.PlanLeadSteps < 1:
		return fmt.Errorf("greyhound config: plan_lead_steps must be ≥ 1, got %d", c.PlanLeadSteps)
	case c.ProfileTimeoutNS < 1 || c.HoldNS < 1:
		return fmt.Errorf("greyhound config: profile_timeout_ns and hold_ns must be ≥ 1")
	}
	for i, s := range c.P2PSizes {
		if s < 1 || s > 1<<34 {
			return fmt.Errorf("greyhound config: p2p_sizes[%d] must be in [1, 2^34], got %d", i, s)
		}
	}
	return nil
}
