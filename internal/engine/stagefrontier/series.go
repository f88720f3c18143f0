package stagefrontier

import (
	"math"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Series computes only the per-step frontier series of w — exposed time
// F[t,S], per-schema-stage advances, and the final boundary's leader, tie
// size and gap — with the plain loop of §3 ("the accounting core is a
// single pass over steps, ranks, and stages"). The time axis runs it over
// long histories where the full Analyze (medians, gains, labels) is not
// needed, and the tests use it as the slow twin of Analyze's blocked,
// unrolled sweep: both must produce bit-identical series.
func Series(w *stagevec.Window) ([]StepPoint, error) {
	if _, err := checkWindow(w); err != nil {
		return nil, err
	}
	T, R, S := w.Dims()
	G := len(w.Schema.Stages)
	out := make([]StepPoint, T)
	adv := make([]float64, T*G)
	F, sec := make([]float64, S), make([]float64, S)
	for t := 0; t < T; t++ {
		for s := range F {
			F[s], sec[s] = math.Inf(-1), math.Inf(-1)
		}
		n := 0
		for r := 0; r < R; r++ {
			if w.Present != nil && !w.Present[t*R+r] {
				continue
			}
			n++
			p := 0.0
			for s, d := range w.Row(t, r) {
				p += d
				switch {
				case p > F[s]:
					sec[s], F[s] = F[s], p
				case p > sec[s]:
					sec[s] = p
				}
			}
		}
		if n == 0 {
			clear(F)
			clear(sec)
		}
		pt := &out[t]
		pt.Step, pt.ExposedMS = w.Steps[t], F[S-1]
		pt.AdvanceMS = adv[t*G : (t+1)*G : (t+1)*G]
		prev := 0.0
		for s := range F {
			pt.AdvanceMS[w.Group[s]] += F[s] - prev // a[t,s] = F[t,s] − F[t,s−1]
			prev = F[s]
		}
		// The latest-rank tie set of the final boundary, in rank order.
		pt.LeaderRank = -1
		thr := F[S-1] - tieRel*math.Abs(F[S-1])
		for r := 0; r < R && n > 0; r++ {
			if w.Present != nil && !w.Present[t*R+r] {
				continue
			}
			if p := sumOf(w.Row(t, r)); p >= thr {
				if pt.TieSize == 0 {
					pt.LeaderRank = w.Ranks[r].Rank
				}
				pt.TieSize++
			}
		}
		if n > 1 {
			pt.GapMS = F[S-1] - sec[S-1]
		}
	}
	return out, nil
}
