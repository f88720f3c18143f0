// Package control is the part of the server that acts: the life cycles
// of what laggard asks of a running job (KAIR captures, Greyhound
// validation plans) and the loops that drive them — auto triggers,
// cool-downs, sweeps, the controller's rounds — with their metrics and
// logs. It sits beside internal/analysis, the read path (resolve a
// window, load it, run an engine, adapt its report), and calls it; it
// never reaches an engine but through analysis, and analysis never
// imports it (internal/lint). docs/design/control.md draws the line and
// says where mitigation's actions will go.
package control

import "github.com/laggard-dev/laggard/internal/signal"

// Jobs lists the registered jobs; *catalog.Catalog implements it.
type Jobs interface {
	List() ([]*signal.Job, error)
}
