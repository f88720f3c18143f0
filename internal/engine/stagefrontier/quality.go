package stagefrontier

import (
	"math"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// quality summarises telemetry health (App. A Table 11). Closure and
// overlap shares are per rank over the window — Σ_t max(±e,0) / Σ_t W —
// and the worst rank is reported, so one noisy cell in 16k×1000 does not
// trip the gate while a rank whose spans do not close does.
func (a *analyzer) quality() Quality {
	w := a.w
	T, R := a.T, a.R
	q := Quality{Dropped: w.Dropped, Nested: w.Nested}
	res, ovl, wall := make([]float64, R), make([]float64, R), make([]float64, R)
	for t := 0; t < T; t++ {
		cl, wl := w.Closure[t*R:(t+1)*R], w.Wall[t*R:(t+1)*R]
		cl, wl = cl[:len(res)], wl[:len(res)] // lets the compiler drop bounds checks
		var pr []bool
		if a.pres != nil {
			pr = a.pres[t*R : (t+1)*R]
		}
		for r, e := range cl {
			if pr != nil && !pr[r] {
				q.MissingCells++
				continue
			}
			res[r] += max(e, 0)
			ovl[r] += max(-e, 0)
			wall[r] += wl[r]
		}
	}
	seen := make([]bool, R)
	for r := 0; r < R; r++ {
		seen[r] = a.acct.nSteps[r] > 0
		if !seen[r] {
			q.MissingRanks = append(q.MissingRanks, a.rankID(r))
			continue
		}
		if wall[r] > 0 {
			q.MaxClosureShare = max(q.MaxClosureShare, capRatio(res[r]/wall[r]))
			q.MaxOverlapShare = max(q.MaxOverlapShare, capRatio(ovl[r]/wall[r]))
		} else if ovl[r] > 0 {
			q.MaxOverlapShare = 1
		}
	}
	q.RoleGroups = roleGroups(w, seen)
	ev := a.events(-1)
	q.EventSamples = ev.samples
	if ev.samples > 0 {
		q.EventReadyRatio = float64(ev.ready) / float64(ev.samples)
	}
	return q
}

// maxRatio caps a share whose denominator is a vanishing but positive
// wall time (a valid 5e-324 ms): it reads as "dominates", never as +Inf,
// which a report cannot encode (issue 6 D5).
const maxRatio = 1e12

func capRatio(x float64) float64 {
	if !(x <= maxRatio) { // also NaN
		return maxRatio
	}
	return x
}

// eventStats is the forward CUDA-event side channel (§5) over a set of
// cells: sampled and ready counts and Σ event / Σ CPU-wall forward.
type eventStats struct {
	samples, ready int
	eventMS, cpuMS float64
}

func (e eventStats) ratio() float64 {
	if e.cpuMS <= 0 {
		if e.eventMS > 0 {
			return math.Inf(1)
		}
		return 0
	}
	return e.eventMS / e.cpuMS
}

// events collects the forward event channel for one rank (rank >= 0) or
// every rank (rank < 0).
func (a *analyzer) events(rank int) eventStats {
	var ev eventStats
	col := a.w.Probes[stagevec.ProbeForwardCUDA]
	fwd := a.w.Schema.Index(stagevec.StageForward)
	if col == nil || fwd < 0 {
		return ev
	}
	for t := 0; t < a.T; t++ {
		lo, hi := 0, a.R
		if rank >= 0 {
			lo, hi = rank, rank+1
		}
		for r := lo; r < hi; r++ {
			i := t*a.R + r
			if !col.Sampled[i] || !a.present(t, r) {
				continue
			}
			ev.samples++
			if math.IsNaN(col.Value[i]) {
				continue
			}
			ev.ready++
			ev.eventMS += col.Value[i]
			row := a.w.Row(t, r)
			for s, d := range row {
				if a.group[s] == fwd {
					ev.cpuMS += d
				}
			}
		}
	}
	return ev
}
