// Package analysis is the only path from stored signals to the analysis
// engines: it resolves which steps a report covers (the default window
// skips warm-up and starts at the latest change point), reads them through
// a narrow Source (the embedded store, or files loaded in memory by the
// CLI), splits the job into comparable role groups, runs each engine, and
// adapts the engines' reports into one job report with a time axis and a
// plain-language headline. The server, the CLI, the demo, the background
// evaluation and the eval harness all call Run, so they agree on every
// window and every word.
//
// Engines stay pure (no I/O, clocks or globals); everything that reads,
// bounds or caches lives here.
package analysis
