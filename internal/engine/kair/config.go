package kair

import (
	"fmt"
	"math"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Config holds the thresholds of Stages 2 and 3.
type Config struct {
	// ZThreshold is the 3-sigma rule (§III-B Stage 2: a_i > 3).
	ZThreshold float64 `json:"z_threshold"`
	// Robust selects the median/MAD score as the primary one (flags and
	// blame); the classic score is always reported beside it.
	Robust bool `json:"robust"`
	// LeaveOneOut computes the classic μ, σ over the other ranks, so an
	// outlier does not inflate its own σ (see doc.go: population z is
	// capped at sqrt(N−1)). False is the paper verbatim.
	LeaveOneOut bool `json:"leave_one_out"`
	// MinRanks is the fewest ranks an instance group needs to be scored:
	// with two, median/MAD cannot tell which side deviates.
	MinRanks int `json:"min_ranks"`
	// MinSigmaNS and MinSigmaRel floor the spread: σ_eff = max(σ,
	// MinSigmaNS, MinSigmaRel·|center|). Without a floor, ranks that agree
	// to the nanosecond (replayed or synthetic traces) make any jitter
	// infinitely significant; 1 µs is below timer noise of the profiler,
	// 2% is below run-to-run kernel jitter.
	MinSigmaNS  int64   `json:"min_sigma_ns"`
	MinSigmaRel float64 `json:"min_sigma_rel"`
	// ClockErrorNS is the cross-rank clock error (Run sets the largest
	// alignment residual): it floors σ of joined collectives' durations,
	// which are measured across ranks (end − latest arrival). 0 = exact.
	ClockErrorNS int64 `json:"clock_error_ns,omitempty"`
	// MaxWalk bounds one blame walk (DAG hops): a guard against malformed
	// traces, far above real dependency depths within a step.
	MaxWalk int `json:"max_walk"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{ZThreshold: 3, Robust: true, LeaveOneOut: true, MinRanks: 3,
		MinSigmaNS: 1000, MinSigmaRel: 0.02, MaxWalk: 1 << 20}
}

// Validate checks c; errors name the field.
func (c Config) Validate() error {
	switch {
	case !(c.ZThreshold > 0) || math.IsInf(c.ZThreshold, 0):
		return signal.FieldErrorf("z_threshold", "must be a positive finite number, got %v", c.ZThreshold)
	case c.MinRanks < 3:
		return signal.FieldErrorf("min_ranks", "must be ≥ 3, got %d", c.MinRanks)
	case c.MinSigmaNS < 1:
		// A positive floor keeps every z finite (JSON has no ±Inf).
		return signal.FieldErrorf("min_sigma_ns", "must be ≥ 1, got %d", c.MinSigmaNS)
	case !(c.MinSigmaRel >= 0) || c.MinSigmaRel > 1:
		return signal.FieldErrorf("min_sigma_rel", "must be in [0,1], got %v", c.MinSigmaRel)
	case c.ClockErrorNS < 0 || c.ClockErrorNS > optrace.MaxDurNS:
		return signal.FieldErrorf("clock_error_ns", "must be in [0,%d], got %d", optrace.MaxDurNS, c.ClockErrorNS)
	case c.MaxWalk < 1:
		return signal.FieldErrorf("max_walk", "must be ≥ 1, got %d", c.MaxWalk)
	}
	return nil
}

func (c Config) String() string {
	return fmt.Sprintf("z>%g robust=%v loo=%v", c.ZThreshold, c.Robust, c.LeaveOneOut)
}
