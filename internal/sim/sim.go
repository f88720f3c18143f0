// Package sim generates synthetic stage-vector jobs for tests, fixtures,
// benchmarks and demos: the host-visible stage vectors of a synchronous
// DDP job, with the fault families of StageFrontier §6.2 injected on
// chosen ranks and steps. It models what the engine must cope with — every
// rank leaves the gradient allreduce together, so a late rank's delay
// upstream of it shows up as the others' backward wait (§2) and a delay
// inside backward is absorbed — without being an engine itself.
package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Stage indexes of Delays (the default schema's explicit stages).
const (
	Data = iota
	Forward
	Backward
	Callbacks
	Optimizer
)

// Delays are injected host-side delays (ms) per explicit default stage.
type Delays [5]float64

// DDP describes one simulated job.
type DDP struct {
	Ranks, Steps int
	Seed         uint64
	// Extra returns the delays injected on rank r at step t (nil: none).
	Extra func(t, r int) Delays
	// CallbackBarrier ends callbacks with a barrier on every rank
	// (the callback_sync family).
	CallbackBarrier bool
	// Noise scales the per-rank jitter (0 means 1).
	Noise float64
	// BackwardMS is the productive backward work per rank (0 means 80).
	BackwardMS float64
	// RanksPerHost names hosts node-000, node-001, … (0 means 8).
	RanksPerHost int
}

// After injects d ms into stage st on rank from step onset on.
func After(onset, rank, st int, d float64) func(t, r int) Delays {
	return func(t, r int) Delays {
		var ex Delays
		if t >= onset && r == rank {
			ex[st] = d
		}
		return ex
	}
}

// Job returns the job registration the vectors belong to: the default
// schema, ranks with hosts and a dense DDP role.
func (s DDP) Job(id string) *signal.Job {
	rph := s.RanksPerHost
	if rph <= 0 {
		rph = 8
	}
	j := &signal.Job{ID: id, Name: id, WorldSize: s.Ranks, Schema: stagevec.DefaultSchema(),
		Labels: map[string]string{"sync_model": "ddp"}}
	for r := 0; r < s.Ranks; r++ {
		j.Ranks = append(j.Ranks, signal.Rank{Rank: r, Host: fmt.Sprintf("node-%03d", r/rph), LocalRank: r % rph,
			Role: signal.Role{DP: r, TP: -1, PP: -1, EP: -1}})
	}
	return j
}

// Vectors returns the stage vectors in (step, rank) order: five explicit
// stages plus a zero residual, wall = their sum.
func (s DDP) Vectors() []stagevec.Vector {
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	noise := s.Noise
	if noise == 0 {
		noise = 1
	}
	bwd := s.BackwardMS
	if bwd == 0 {
		bwd = 80
	}
	out := make([]stagevec.Vector, 0, s.Ranks*s.Steps)
	durs := make([]float64, s.Ranks*s.Steps*6)
	pre := make([]float64, s.Ranks)
	rows := make([][6]float64, s.Ranks)
	for t := 0; t < s.Steps; t++ {
		end := 0.0 // when the allreduce can complete
		for r := 0; r < s.Ranks; r++ {
			var ex Delays
			if s.Extra != nil {
				ex = s.Extra(t, r)
			}
			row := &rows[r]
			row[0] = 2 + noise*rng.Float64() + ex[Data]
			row[1] = 40 + noise*rng.NormFloat64() + ex[Forward]
			pre[r] = row[0] + row[1]
			end = max(end, pre[r]+bwd+1.5*noise*rng.NormFloat64()+ex[Backward])
			row[3] = 0.5 + 0.1*noise*rng.Float64() + ex[Callbacks]
			row[4] = 5 + 0.3*noise*rng.NormFloat64() + ex[Optimizer]
		}
		cbEnd := 0.0
		for r := range rows {
			// Every rank leaves the allreduce together, a little jitter.
			rows[r][2] = end + 2 + 0.05*noise*rng.Float64() - pre[r]
			cbEnd = max(cbEnd, pre[r]+rows[r][2]+rows[r][3])
		}
		for r := range rows {
			if s.CallbackBarrier {
				rows[r][3] = cbEnd + 0.05*noise*rng.Float64() - (pre[r] + rows[r][2])
			}
			d := durs[:6:6]
			durs = durs[6:]
			copy(d, rows[r][:])
			d[5] = 0
			wall := 0.0
			for _, x := range d {
				wall += x
			}
			out = append(out, stagevec.Vector{Step: int64(t), Rank: r, Durations: d, WallMS: wall})
		}
	}
	return out
}

// WithWarmup makes the first three steps slow on every rank (allocation,
// graph capture, DDP bucket rebuilds — 600, 400, 200 ms more forward), then
// applies f (nil: no fault), so a job has a warm-up for the time axis to
// skip.
func WithWarmup(f func(t, r int) Delays) func(t, r int) Delays {
	return func(t, r int) Delays {
		var d Delays
		if f != nil {
			d = f(t, r)
		}
		if t < 3 {
			d[Forward] += float64(600 - 200*t)
		}
		return d
	}
}
