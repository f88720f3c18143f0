package sysom

import (
	"fmt"
	"math"
)

// Config holds SysOM-AI's thresholds. W, K and Delta are the paper's
// (§3.1: W = 100, k = 2, δ = 0.5%); the rest are ours and say why.
type Config struct {
	// W is the sliding window: the latest W training steps of each
	// communicator (§3.1 "W iterations"; calls without a Step count one
	// instance per step).
	W int `json:"w"`
	// K is k in μ + kσ, for slow ranks and the CPU waterline (§3.1).
	K float64 `json:"k"`
	// Delta is δ, the least CPU-fraction increase (absolute) that counts:
	// the temporal baseline's threshold (§3.1), reused as the least
	// excess a waterline flag or a differential hot path must show so a
	// statistically "significant" 0.01% is never reported.
	Delta float64 `json:"delta"`
	// Alpha is the family-wise false-flag rate the sampling-noise test of
	// the waterline and of the differential hot paths allows per group
	// and window (waterline.go): with N·F (rank, function) tests, k = 2
	// alone would flag ~2% of them on noise.
	Alpha float64 `json:"alpha"`
	// MinSamples is the least number of samples a flagged function (or
	// hot path) must hold on the flagged rank: below it one sample moves
	// the fraction by more than Delta.
	MinSamples int64 `json:"min_samples"`
	// MinTotal is the profile size (samples) below which a rank is thin:
	// it stays in the waterline (the binomial floor handles its noise)
	// with a note, is not picked as a peer, and a CPU conclusion on it
	// has low confidence.
	MinTotal int64 `json:"min_total"`
	// MinInstances is the least number of window steps a rank must
	// appear in to be judged by slow-rank detection.
	MinInstances int `json:"min_instances"`
	// MinPersist is the least share of its steps in which a slow rank
	// must enter later than its peers' median: one late call, or a
	// rank late in a few steps, is transient rather than a straggler.
	MinPersist float64 `json:"min_persist"`
	// MinLateMs is the least mean entry lateness above the peers that
	// flags a slow rank, and LateNoiseMs the σ floor for lateness: host
	// timestamps and NCCL launches jitter by tens of µs, so identical
	// peers (σ ≈ 0) must not flag microsecond differences.
	MinLateMs   float64 `json:"min_late_ms"`
	LateNoiseMs float64 `json:"late_noise_ms"`
	// IterRise is the least relative rise of the iteration time over the
	// baseline (IterMs ≥ IterBaseMs·(1+IterRise)) that starts the
	// temporal comparison: 5% is above run-to-run noise of a steady job
	// (the paper's cases are 10–60%) and below the smallest slowdown an
	// operator acts on.
	IterRise float64 `json:"iter_rise"`
	// GPURel is the least relative GPU-time difference (straggler vs
	// peer) the GPU layer calls a difference: the paper's healthy pairs
	// match "within 1%", its thermal case differs by 7%.
	GPURel float64 `json:"gpu_rel"`
	// GPUUniform is the share of the peer's GPU time, in kernels slowed
	// by at least half the overall slowdown, above which a slowdown is
	// uniform (hardware) rather than kernel-specific (§3.1 GPU diff).
	GPUUniform float64 `json:"gpu_uniform"`
	// OSRatio: an OS signal differs when the straggler's value is at
	// least OSRatio × the peer's and above the signal's absolute floor
	// (docs/design/sysom.md lists the floors).
	OSRatio float64 `json:"os_ratio"`
	// MinExplain is the least share of a measured rise in iteration time
	// a rank's entry delay must account for before its diagnosis may be
	// high confidence (issue 16 item 6a): below half, most of the
	// slowdown has another cause the verdict does not name. With no rise
	// measured, the delay must be at least IterRise of one iteration.
	MinExplain float64 `json:"min_explain"`
	// MaxPaths bounds the hot paths per layer, MaxFlagsPerRank the
	// waterline flags per rank, MaxDiagnoses the diagnosed ranks.
	MaxPaths        int `json:"max_paths"`
	MaxFlagsPerRank int `json:"max_flags_per_rank"`
	MaxDiagnoses    int `json:"max_diagnoses"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		W: 100, K: 2, Delta: 0.005, Alpha: 0.01,
		MinSamples: 20, MinTotal: 200, MinInstances: 10, MinPersist: 0.7,
		MinLateMs: 0.1, LateNoiseMs: 0.02,
		IterRise: 0.05, GPURel: 0.03, GPUUniform: 0.8, OSRatio: 2, MinExplain: 0.5,
		MaxPaths: 5, MaxFlagsPerRank: 10, MaxDiagnoses: 16,
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("sysom config: %s must be %s, got %v", name, want, v)
	}
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.W < 2 || c.W > 1<<20:
		return bad("w", c.W, "in [2, 2^20]")
	case !fin(c.K) || c.K <= 0 || c.K > 100:
		return bad("k", c.K, "in (0, 100]")
	case !fin(c.Delta) || c.Delta <= 0 || c.Delta >= 1:
		return bad("delta", c.Delta, "in (0, 1)")
	case !fin(c.Alpha) || c.Alpha <= 0 || c.Alpha > 0.5:
		return bad("alpha", c.Alpha, "in (0, 0.5]")
	case c.MinSamples < 1:
		return bad("min_samples", c.MinSamples, "≥ 1")
	case c.MinTotal < 1:
		return bad("min_total", c.MinTotal, "≥ 1")
	case c.MinInstances < 1 || c.MinInstances > c.W:
		return bad("min_instances", c.MinInstances, "in [1, w]")
	case !fin(c.MinPersist) || c.MinPersist < 0 || c.MinPersist > 1:
		return bad("min_persist", c.MinPersist, "in [0, 1]")
	case !fin(c.MinLateMs) || c.MinLateMs < 0:
		return bad("min_late_ms", c.MinLateMs, "≥ 0")
	case !fin(c.LateNoiseMs) || c.LateNoiseMs <= 0:
		return bad("late_noise_ms", c.LateNoiseMs, "> 0")
	case !fin(c.IterRise) || c.IterRise <= 0 || c.IterRise > 10:
		return bad("iter_rise", c.IterRise, "in (0, 10]")
	case !fin(c.GPURel) || c.GPURel <= 0 || c.GPURel > 10:
		return bad("gpu_rel", c.GPURel, "in (0, 10]")
	case !fin(c.GPUUniform) || c.GPUUniform <= 0 || c.GPUUniform > 1:
		return bad("gpu_uniform", c.GPUUniform, "in (0, 1]")
	case !fin(c.MinExplain) || c.MinExplain <= 0 || c.MinExplain > 1:
		return bad("min_explain", c.MinExplain, "in (0, 1]")
	case !fin(c.OSRatio) || c.OSRatio <= 1 || c.OSRatio > 1000:
		return bad("os_ratio", c.OSRatio, "in (1, 1000]")
	case c.MaxPaths < 1 || c.MaxPaths > 1000:
		return bad("max_paths", c.MaxPaths, "in [1, 1000]")
	case c.MaxFlagsPerRank < 1 || c.MaxFlagsPerRank > 100000:
		return bad("max_flags_per_rank", c.MaxFlagsPerRank, "in [1, 100000]")
	case c.MaxDiagnoses < 0 || c.MaxDiagnoses > 1<<20:
		return bad("max_diagnoses", c.MaxDiagnoses, "in [0, 2^20]")
	}
	return nil
}
