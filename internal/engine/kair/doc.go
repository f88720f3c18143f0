// Package kair implements KAIR's multistage anomaly analysis engine
// (KAIR §III-B, "localize, then pinpoint") and the cross-worker clock
// alignment it needs (§III-A Feature 4): Stage 1, straggler localization
// by the K-S divergence of execution rhythms (Localize; the ECDF and K-S
// kernels live in internal/stats, ecdf.go and ks.go); Stage 2, operator
// outliers by cross-rank z-scores; Stage 3, backward blame attribution on
// the step DAG (Analyze, one step); and Run, the whole pipeline over a
// capture with a verdict.
//
// Everything is a pure function of its inputs (optrace.Trace per rank,
// heartbeats): no I/O, no clocks, no globals.
//
// Notation (paper → code)
//
//	(Feature 4)    clock offset                ClockEstimate.OffsetNS → Trace.ClockOffsetNS (add to a
//	                                           rank's StartNS to reach the reference clock)
//	heartbeat      round-trip sample           Heartbeat; θ = ((s_recv−c_send)+(s_send−c_recv))/2 of the
//	                                           min-RTT samples, ResidualNS = ⌈RTT/2⌉ (OffsetFromHeartbeats)
//	barrier        collective instance         θ ∈ [entry_ref − exit_r, exit_ref − entry_r] per shared
//	                                           (Comm, Seq); intersection → ResidualNS, median exit
//	                                           difference → OffsetNS (AlignByCollectives)
//	t_1 … t_n      fixed-length windows        Rhythm.T0NS + k·Rhythm.WindowNS, n = RhythmConfig.Windows
//	f_{t_k}        completions per window      Rhythm.Freq (EndNS + ClockOffsetNS of RhythmConfig.Categories
//	                                           in the steps every rank has)
//	F(t_k)         ECDF                        stats.Rhythms.CDF, normalized by Rhythm.Totals
//	D_{A,B}        pairwise K-S                Rhythm.D (exact, N×N); Rhythm.RefD against the median ECDF
//	S_A            abnormality score           Rhythm.Score; Rhythm.P its p-value (-1: no sample)
//	candidate      most anomalous worker       Rhythm.Straggler, only when Verdict == straggler (rule below)
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
// Stage 1 verdict (fixed rule, no fixture tuning): fewer than 3 ranks or
// a rank with fewer than 20 completions → inconclusive, saying which; the
// top-scoring rank is named only if its p-value < RhythmConfig.Alpha
// (0.01) and its score ≥ RhythmConfig.Separation (1.5) × the runner-up's;
// the top p ≥ Alpha → none; otherwise inconclusive ("no single rank
// stands out"). A p-value treats completions as independent draws, which
// they are not: read it as a scale of evidence.
//
// What Stage 1 can see: F is normalized over the whole grid, and a
// per-step delay that the next collective absorbs shifts a rank's count
// by at most the ops it had not yet completed, so D ≈ delay per step /
// capture span — it shrinks with the number of steps captured, and
// √n·D decides p. Sustained rhythm differences (a rank that falls behind,
// a stall) and captures with thousands of kernels a step are what it
// localizes; a short per-step delay on a CPU-only trace of ~100 ops a
// step usually stays "none" or "inconclusive", and Stages 2–3 (which
// compare each op instance across ranks) still find it. Run says when
// the two stages disagree.
//
// Run verdict: culprit when the top aggregated cause is actionable (op or
// edge) and appears in at least half the analysed steps; none when no
// analysed step has a late or slow outlier; otherwise inconclusive, with
// the leading candidate named only as a candidate.
//
// Clock alignment in Run (RunConfig.Align "" = auto): offsets already
// set on any trace are used as given; else collectives per rank where
// their barrier constraints are consistent, heartbeats (made relative to
// the lowest rank) for ranks they miss or contradict, else none; with no
// collective shared at all, heartbeats against the server clock.
//
// Collectives: a member's recorded duration includes waiting for the last
// member to arrive — exactly the victim effect §III-B warns about
// (an AllReduce that merely waited). Stage 2 therefore scores a joined
// collective's work part, end − latest arrival, and reports the wait
// separately; Stage 3 follows the cross-rank edge to the latest arriver.
//
// Section → file
//
//	§III-A Feature 4 clock alignment        clock.go
//	§III-B Stage 1 rhythm localization      rhythm.go (kernels: internal/stats ecdf.go, ks.go)
//	§III-B Stage 2 operator outliers        outliers.go
//	§III-B Stage 3 backward blame, step DAG  dag.go, blame.go
//	thresholds                               config.go
//	report (JSON)                            report.go
//	pipeline, aggregation, verdict           run.go
//	golden reports, hand-built step DAGs     testdata/*.golden.json, golden_test.go, helpers_test.go
//	golden TraceReport, multi-step scenarios testdata/run_*.golden.json, run_golden_test.go,
//	                                         run_helpers_test.go (simulateSteps)
//	fuzzing                                  fuzz_test.go (FuzzAnalyze), run_fuzz_test.go (FuzzRun)
//	1,000,000-event step DAG                 bench_test.go (BenchmarkBlame1M)
//	Stage 1 at 2,048 ranks × 512 windows,    run_bench_test.go (BenchmarkLocalize2048x512,
//	a realistic capture end to end           BenchmarkRun)
package kair
