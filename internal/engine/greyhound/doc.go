// Package greyhound implements Greyhound-Detect (Wu et al., "GREYHOUND:
// Hunting Fail-Slows in Hybrid-Parallel Training at Scale", USENIX ATC
// 2025, §4): iteration time from the collective-call sequence by ACF
// (§4.2), slow-iteration detection by BOCD with verification (§4.2, via
// internal/stats), cross-group comparison of comparable clusters (§4.3),
// the O(1)-pass validation planner and judge (§4.3, Fig. 10) and the
// three-phase controller (§4.1) as a pure state machine.
//
// Everything is a pure function of its inputs: no I/O, no clocks (times
// come from the calls and observations), no globals.
//
// Notation (paper → code)
//
//	X, x_t     call sequence of one rank        symbols (dense ids), one-hot in stats.SymbolACF
//	L          ACF window length (calls)        Config.ACFWindow
//	k          lag                              1..min(Config.MaxPeriod, L·(1−M))
//	M          ACF threshold (0.95)             Config.ACFThreshold
//	Period     argmin_k ACF_k ≥ M               IterSeries.Period
//	r_t        BOCD run length                  stats.BOCD (see its decision rule)
//	0.9        change-point threshold           stats.BOCD.Threshold
//	10%        verification / degraded / slow   Config.VerifyRel, Config.DegradedRel, Config.SlowRel
//	AR_i       communication group              Group (comm, op, bytes)
//	cluster    comparable cluster               Cluster (op, bytes, group size)
//
// Section → file
//
//	§4.1 three phases                 controller.go
//	§4.2 iteration time analysis      iteration.go (+ stats/acf.go)
//	§4.2 slow iteration detection     analyze.go (+ stats/bocd.go, stats/verify.go, stats/window.go)
//	§4.3 profiling, cross-group       groups.go (also entry lateness per instance)
//	§4.3 validation, Fig. 10          validation.go
//	§7.2 iteration-time error         analyze.go (truth_error_pct)
//	report (API/UI/CLI JSON)          report.go
//
// Design notes: docs/design/greyhound.md.
package greyhound
