// Package kair implements the pinpointing half of KAIR's multistage
// anomaly analysis engine (KAIR §III-B, "localize, then pinpoint"):
// Stage 2, operator outliers by cross-rank z-scores, and Stage 3,
// backward blame attribution on the step DAG. Stage 1 (rhythm
// localization by pairwise K-S) lives in internal/stats (ecdf.go, ks.go).
//
// Everything is a pure function of its inputs (optrace.Trace per rank):
// no I/O, no clocks, no globals.
//
// Notation (paper → code)
//
//	O_i            operator instance           node (rank, category, name, occurrence k within the step)
//	s_i, d_i       start, duration             node.start (ns since the rank's step start, aligned by
//	                                           Trace.ClockOffsetNS), node.dur
//	μ, σ           cluster mean, SD            per instance group across ranks (Config.LeaveOneOut: of the
//	                                           other ranks); robust twin: median, 1.4826·MAD
//	a_i            max(|z_s|, |z_d|)           Instance.A (primary method), Instance.AClassic / ARobust
//	3              3-sigma rule                Config.ZThreshold
//	O_{i-1}        direct predecessor          the DAG predecessor that ends last (gating predecessor)
//
// Why not the paper's population z verbatim: with N ranks the largest
// population z any one member can reach is sqrt(N−1) (stats.PopulationZ),
// so "a_i > 3" can never fire below N = 11 and one straggler inflates σ
// for everyone. The default is the robust score (median/MAD) — one
// straggler cannot move either — and the classic score is reported beside
// it, leave-one-out by default so small N can still flag.
//
// Collectives: a member's recorded duration includes waiting for the last
// member to arrive — exactly the victim effect §III-B warns about
// (an AllReduce that merely waited). Stage 2 therefore scores a joined
// collective's work part, end − latest arrival, and reports the wait
// separately; Stage 3 follows the cross-rank edge to the latest arriver.
//
// Section → file
//
//	§III-B Stage 2 operator outliers        outliers.go
//	§III-B Stage 3 backward blame, step DAG  dag.go, blame.go
//	thresholds                               config.go
//	report (JSON)                            report.go
//	golden reports, hand-built step DAGs     testdata/*.golden.json, golden_test.go, helpers_test.go
//	1,000,000-event step DAG                 bench_test.go (BenchmarkBlame1M)
package kair
