// Package chaos is laggard's end-to-end chaos and load suite. It has no
// code of its own: its tests build the real `laggard serve` binary with
// `go build`, run it as a subprocess on loopback and attack it over HTTP —
// SIGKILL mid-ingest, a full disk, a flooding job, slow clients, load with
// a memory check (vectors: TestChaos_Load; collective calls:
// TestChaos_LoadCollectives, issue 16 item 9), and a probe for every
// defect of issue 6 that is visible over HTTP (TestChaos_D1…TestChaos_D13).
// Because they only speak HTTP, they test behaviour, not internals.
//
// Modes (environment variable LAGGARD_CHAOS):
//
//	unset   short mode, part of `go test ./...` (and so of `make test` and CI):
//	        fewer posters and connections, seconds per scenario, generous
//	        latency bounds; the whole package takes well under 3 minutes
//	full    `make chaos`: 64 posters, 2,000 slow connections, longer runs,
//	        the acceptance bounds (fair-share p99 < 100 ms)
//	off     skip the suite (so does `go test -short`)
//
// LAGGARD_CHAOS_BIN=path runs a prebuilt binary instead of building one;
// LAGGARD_CHAOS_RACE=1/0 forces the server build with or without the race
// detector (default: the same as the test binary, so `go test -race` also
// checks the real server for data races under attack).
//
// Every scenario logs the figures it measured with t.Logf (run with -v).
package chaos
