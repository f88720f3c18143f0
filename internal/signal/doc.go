// Package signal holds the coordinates every signal kind shares: jobs and
// their registration contract, ranks and their parallelism roles, the
// ordered stage schema a role group reports, field-naming validation
// errors and input limits.
//
// Each signal kind has its own types package below this one
// (signal/stagevec for StageFrontier stage vectors; collective calls,
// operator events, stacks and counters follow the same pattern), keyed by
// the same job/rank/step coordinates. Nothing here does I/O, so the
// ingest path, the store, the CLI and the analysis engines share one
// vocabulary.
//
// Units: every duration is float64 milliseconds.
package signal
