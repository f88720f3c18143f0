// Package model holds laggard's plain data types: jobs, ranks and their
// parallelism roles, ordered stage schemas, per-rank stage vectors and the
// dense analysis window built from them.
//
// The types are deliberately I/O free so the ingest server, the CLI and the
// analysis engines share one vocabulary. Later signal families (collective
// events, operator events, stack profiles, network telemetry) are added as
// sibling files with their own types keyed by the same JobID/rank/step
// coordinates, so nothing here has to be reshaped for them.
//
// Units: every duration is float64 milliseconds of CPU wall clock.
package model
