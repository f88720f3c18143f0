// Package lint holds repository-wide tests that keep the architecture
// true (docs/design/architecture.md): data flows one way from the wire to
// the engines, engines are pure, only internal/analysis joins the store
// and the engines, the read path never imports what acts
// (internal/control, docs/design/control.md), and engines and incidents
// meet only in analysis's evidence adapters (engines import nothing of
// internal/incident, which imports no engine, store or analysis).
package lint
