// Package incident fuses every engine's findings about a job into one
// incident per slowdown: it opens on the first verified onset from any
// engine, joins the findings whose window overlaps and whose scope
// intersects, keeps competing hypotheses side by side, states a cause only
// when the fusion rule holds, accounts the time lost, says what to do and
// what evidence to ask for next, and resolves on a relief held for the
// hold-down window. The rules and their reasoning: docs/design/incidents.md.
//
// The package is pure (no I/O, no clocks, no globals) and imports no engine
// (ARCHITECTURE.md rule 5): internal/analysis adapts each engine's report
// into Evidence, internal/control runs the loop that feeds Fuse, persists
// its result and acts on its requests.
//
// Files: evidence.go (Evidence, the typed kinds), incident.go (Incident),
// config.go, fuse.go (Fuse: the rules), chain.go (hypotheses, cause chain,
// confidence), lost.go (lost time, resolution), escalate.go (what to ask
// next), recommend.go, fleet.go (the same host across jobs), codec.go
// (the JSON decoder for stored and uploaded incidents).
package incident
