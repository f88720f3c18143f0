// Package stagefrontier implements StageFrontier max-prefix frontier accounting
// (Yoon et al., 2026): exact additive exposed-makespan accounting of aligned
// ordered stage vectors, the slack identity, lag/leader evidence, the routing
// candidate set, clipped direct-exposure gain, the ordered-stage contract
// checks and the deterministic evidence labeler of App. B–C.
//
// Everything here is a pure function over stagevec.Window and Config: no I/O,
// no globals, so the server, the CLI, the evaluation harness and benchmarks
// share one implementation.
package stagefrontier
