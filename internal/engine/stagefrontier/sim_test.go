package stagefrontier

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
)

// ddpSim adapts sim.DDP (a synchronous DDP job with injected faults) to
// these tests.
type ddpSim struct {
	R, T      int
	seed      uint64
	extra     func(t, r int) [5]float64
	cbBarrier bool
	noise     float64
	bwdMS     float64
}

func (s ddpSim) vectors() []*stagevec.Vector {
	d := sim.DDP{Ranks: s.R, Steps: s.T, Seed: s.seed, CallbackBarrier: s.cbBarrier, Noise: s.noise, BackwardMS: s.bwdMS}
	if s.extra != nil {
		d.Extra = func(t, r int) sim.Delays { return sim.Delays(s.extra(t, r)) }
	}
	vs := d.Vectors()
	out := make([]*stagevec.Vector, len(vs))
	for i := range vs {
		out[i] = &vs[i]
	}
	return out
}

// window assembles steps [from, to] of the simulation.
func (s ddpSim) window(t testing.TB, from, to int64) *stagevec.Window {
	return assemble(t, testJob(s.R, 1), AssembleOptions{FromStep: from, ToStep: to}, s.vectors()...)
}

// after injects d (ms) into stage st on rank from step onset on.
func after(onset, rank, st int, d float64) func(t, r int) [5]float64 {
	f := sim.After(onset, rank, st, d)
	return func(t, r int) [5]float64 { return f(t, r) }
}

const (
	simData = sim.Data
	simFwd  = sim.Forward
	simBwd  = sim.Backward
	simCb   = sim.Callbacks
	simOpt  = sim.Optimizer
)
