// Package sysom implements SysOM-AI's central diagnosis (Zheng, Mao et
// al., "SysOM-AI: Continuous Cross-Layer Performance Diagnosis for
// Production AI Training", §3.1 and the §5.4 case studies): slow-rank
// detection from collective entry times aligned by barrier semantics,
// the per-group CPU waterline, the layered differential diagnosis
// (GPU → CPU → OS) of a flagged rank against a healthy peer, the
// temporal baseline for uniform slowdowns, and the flame / differential
// trees they read.
//
// Everything is a pure function of its inputs: no I/O, no clocks, no
// globals beyond constant tables.
//
// Notation (paper → code)
//
//	W          sliding window (100)                Config.W (training steps per communicator)
//	k          μ + kσ threshold (2)                Config.K
//	δ          temporal CPU-fraction rise (0.5%)   Config.Delta (also the least waterline / diff excess)
//	g, r, f    group, rank, function               Group, rank ints, stack.Func (name, kind, module)
//	μ_f^g,σ_f^g waterline mean and σ               WaterlineFlag.Mean, .Sigma (leave-one-out, floored)
//	entry time rank's collective entry             late_r, barrier.go (per-window clock offsets)
//	straggler  flagged slow rank                   SlowRank
//	peer       healthy rank compared with          Diagnosis.Peer (closest to the group median)
//
// Deviation: leave-one-out statistics. The paper computes μ and σ over
// all N ranks, the outlier included. Against statistics it is part of,
// an outlier's z is at most sqrt(N−1) (stats.PopulationZ: z_all =
// sqrt((N−1)/N)·z/sqrt(1+z²/N) for the leave-one-out z), so k = 2 can
// never fire for N ≤ 5 — the paper assumes N ≥ 8 (§3.1). Here μ₋ and σ₋
// are the other N−1 ranks': the same rule as N grows (z_all → z), and
// usable for the 2–4-rank groups of small jobs. Identical peers have
// σ₋ ≈ 0, so σ is floored by the noise the data carries: for lateness,
// the standard error of a window mean and a fixed LateNoiseMs; for CPU
// fractions, the binomial sampling σ at a Bonferroni-corrected quantile
// (waterline.go). docs/design/sysom.md has the derivation.
//
// Section → file
//
//	§3.1 slow-rank detection, clock alignment   barrier.go (+ stats/loo.go)
//	§3.1 CPU waterline                          waterline.go, input.go (interning, inclusive counts)
//	§3.1 cross-rank differential diagnosis      diagnose.go (peer, CPU layer), gpu.go, osdiff.go
//	§3.1 / §5.4 hot paths and their causes      hotpath.go, cause.go
//	§3.1 temporal baseline comparison           temporal.go
//	flame / differential flame graphs           tree.go
//	§5.4 cases 1–5                              testdata/*.txt, scenario_test.go
//	report (API/UI JSON)                        report.go
//
// Design notes: docs/design/sysom.md.
package sysom
