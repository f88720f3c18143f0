package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/sim"
)

// ACFRow is one layout of the ACF iteration-time evaluation.
type ACFRow struct {
	Setting, Layout                        string
	Ranks, Found                           int
	Periods                                string
	ErrMeanPct, ErrWorstPct, PerIterP50Pct float64
}

// acfLayouts are Fig. 13's settings: four GPUs on one node (S) and the
// two multi-node runs (M: 2T2D2P on 2 nodes, 2T4D on 4 nodes of 2).
var acfLayouts = []struct {
	setting string
	p       sim.Parallel
	iterS   float64
}{
	{"S", sim.Parallel{TP: 1, DP: 4, PP: 1, GPUsPerNode: 4}, 1.0},
	{"S", sim.Parallel{TP: 2, DP: 2, PP: 1, GPUsPerNode: 4}, 1.0},
	{"S", sim.Parallel{TP: 4, DP: 1, PP: 1, GPUsPerNode: 4}, 1.0},
	{"S", sim.Parallel{TP: 1, DP: 2, PP: 2, GPUsPerNode: 4}, 1.0},
	{"S", sim.Parallel{TP: 2, DP: 1, PP: 2, GPUsPerNode: 4}, 1.0},
	{"M", sim.Parallel{TP: 2, DP: 2, PP: 2, GPUsPerNode: 4}, 1.8},
	{"M", sim.Parallel{TP: 2, DP: 4, PP: 1, GPUsPerNode: 2}, 1.8},
}

// acfEval runs greyhound.IterationTimes on every rank's synthetic call
// sequence (several interleaved communicators, jitter, swapped buckets,
// irregular logging/checkpoint calls) and compares with the known
// iteration boundaries.
func acfEval(iters int, seed uint64) ([]ACFRow, error) {
	cfg := greyhound.DefaultConfig()
	var rows []ACFRow
	for _, l := range acfLayouts {
		row := ACFRow{Setting: l.setting, Layout: l.p.Name(), Ranks: l.p.World()}
		periods := map[int]bool{}
		var errs, per []float64
		for r := range l.p.World() {
			tr := l.p.Trace(r, sim.TraceOpts{Iters: iters, Seed: seed, IterS: l.iterS})
			s, err := greyhound.IterationTimes(tr.Calls, cfg)
			if err != nil {
				return nil, fmt.Errorf("%s rank %d: %w", l.p.Name(), r, err)
			}
			if !s.OK {
				continue
			}
			row.Found++
			periods[s.Period] = true
			e, pi := iterError(s.Iters, tr)
			errs = append(errs, e)
			per = append(per, pi...)
		}
		var ps []string
		for _, p := range slices.Sorted(maps.Keys(periods)) {
			ps = append(ps, fmt.Sprint(p))
		}
		row.Periods = strings.Join(ps, ",")
		row.ErrMeanPct, row.ErrWorstPct, row.PerIterP50Pct = mean(errs), math.NaN(), quantile(per, 0.5)
		if len(errs) > 0 {
			row.ErrWorstPct = slices.Max(errs)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// iterError is §7.2's measure — |mean estimated − mean true| / mean true,
// true iterations being those wholly inside the estimated span — and each
// estimated iteration's relative error against the true iteration that
// contains its midpoint (percent).
func iterError(est []greyhound.Iter, tr sim.CallTrace) (float64, []float64) {
	from := est[0].EndNS - int64(est[0].MS*1e6)
	to := est[len(est)-1].EndNS
	var truth []float64
	for i := range tr.IterEndNS {
		if tr.IterStartNS[i] >= from && tr.IterEndNS[i] <= to {
			truth = append(truth, float64(tr.IterEndNS[i]-tr.IterStartNS[i])/1e6)
		}
	}
	var ms []float64
	var per []float64
	for _, it := range est {
		ms = append(ms, it.MS)
		mid := it.EndNS - int64(it.MS*1e6/2)
		i := sort.Search(len(tr.IterEndNS), func(i int) bool { return tr.IterEndNS[i] > mid })
		if i < len(tr.IterEndNS) && tr.IterStartNS[i] <= mid {
			t := float64(tr.IterEndNS[i]-tr.IterStartNS[i]) / 1e6
			per = append(per, 100*math.Abs(it.MS-t)/t)
		}
	}
	if len(truth) == 0 {
		return math.NaN(), per
	}
	m := mean(truth)
	return 100 * math.Abs(mean(ms)-m) / m, per
}

func writeACF(w io.Writer, rows []ACFRow) error {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = []string{r.Setting, r.Layout, fmt.Sprint(r.Ranks), r.Periods, fmt.Sprint(r.Found), ff(r.ErrMeanPct), ff(r.ErrWorstPct), ff(r.PerIterP50Pct)}
	}
	return writeRows(w, []string{"setting", "layout", "ranks", "periods", "found", "err_mean_pct", "err_worst_rank_pct", "per_iter_p50_pct"}, out)
}
