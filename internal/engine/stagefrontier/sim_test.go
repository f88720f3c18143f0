package stagefrontier

import (
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// ddpSim simulates the host-visible stage vectors of a synchronous DDP
// job: every rank waits for the slowest at the gradient allreduce that
// closes backward, so a late rank's delay upstream of it shows up as the
// others' backward wait (§2), and a delay inside backward is absorbed by
// the allreduce. Optional extra delays model the fault families of §6.2.
type ddpSim struct {
	R, T int
	seed uint64
	// extra returns per-step, per-rank injected delays (ms) in data,
	// forward, backward work, callbacks and optimizer.
	extra func(t, r int) [5]float64
	// cbBarrier ends callbacks with a barrier (callback_sync).
	cbBarrier bool
	// noise scales the per-rank jitter (1 = default).
	noise float64
	// bwdMS is the productive backward work per rank (default 80).
	bwdMS float64
}

// vectors returns the job's stage vectors, residual 0, wall = Σ.
func (s ddpSim) vectors() []*stagevec.Vector {
	rng := rand.New(rand.NewPCG(s.seed, 0x5eed))
	if s.noise == 0 {
		s.noise = 1
	}
	if s.bwdMS == 0 {
		s.bwdMS = 80
	}
	var out []*stagevec.Vector
	pre := make([]float64, s.R)
	bwdWork := make([]float64, s.R)
	rows := make([][6]float64, s.R)
	for t := 0; t < s.T; t++ {
		end := 0.0 // when the allreduce can complete
		for r := 0; r < s.R; r++ {
			var ex [5]float64
			if s.extra != nil {
				ex = s.extra(t, r)
			}
			row := &rows[r]
			row[0] = 2 + s.noise*rng.Float64() + ex[0]
			row[1] = 40 + s.noise*rng.NormFloat64() + ex[1]
			pre[r] = row[0] + row[1]
			bwdWork[r] = s.bwdMS + 1.5*s.noise*rng.NormFloat64() + ex[2]
			end = max(end, pre[r]+bwdWork[r])
			row[3] = 0.5 + 0.1*s.noise*rng.Float64() + ex[3]
			row[4] = 5 + 0.3*s.noise*rng.NormFloat64() + ex[4]
		}
		cbEnd := 0.0
		for r := range rows {
			// Every rank leaves the allreduce together, a little jitter.
			rows[r][2] = end + 2 + 0.05*s.noise*rng.Float64() - pre[r]
			cbEnd = max(cbEnd, pre[r]+rows[r][2]+rows[r][3])
		}
		for r := range rows {
			if s.cbBarrier {
				rows[r][3] = cbEnd + 0.05*s.noise*rng.Float64() - (pre[r] + rows[r][2])
			}
			out = append(out, vec(int64(t), r, rows[r][:5]...))
		}
	}
	return out
}

// window assembles steps [from, to] of the simulation.
func (s ddpSim) window(t testing.TB, from, to int64) *stagevec.Window {
	return assemble(t, testJob(s.R, 1), AssembleOptions{FromStep: from, ToStep: to}, s.vectors()...)
}

// after returns an extra function injecting d (ms) into stage st on rank
// r from step onset on.
func after(onset, rank, st int, d float64) func(t, r int) [5]float64 {
	return func(t, r int) [5]float64 {
		var ex [5]float64
		if t >= onset && r == rank {
			ex[st] = d
		}
		return ex
	}
}

const (
	simData = iota
	simFwd
	simBwd
	simCb
	simOpt
)
