package kair

import (
	"math"
	"slices"
)

// madScale makes 1.4826·MAD a consistent estimator of σ under normality.
const madScale = 1.4826

// score fills the Stage 2 z-scores of every node (§III-B Stage 2): each
// instance group (same category, name and occurrence index within the
// step) is compared across ranks on start, duration and end.
func (d *dag) score(cfg Config) {
	members := make([][]int32, d.groups)
	for k := range d.nodes {
		g := d.nodes[k].grp
		members[g] = append(members[g], int32(k))
	}
	var xs, buf []float64
	var cz, rz []float64
	for _, m := range members {
		if len(m) < cfg.MinRanks {
			continue
		}
		for f := 0; f < 3; f++ {
			xs = xs[:0]
			for _, k := range m {
				nd := &d.nodes[k]
				switch f {
				case 0:
					xs = append(xs, float64(nd.start))
				case 1:
					xs = append(xs, float64(nd.dur))
				default:
					xs = append(xs, float64(nd.end))
				}
			}
			fc := cfg
			if f == 1 && d.nodes[m[0]].coll >= 0 && cfg.ClockErrorNS > fc.MinSigmaNS {
				// A joined collective's scored duration is end − latest
				// arrival across ranks, so it carries the cross-rank clock
				// error: differences below it are not evidence.
				fc.MinSigmaNS = cfg.ClockErrorNS
			}
			cz = classicZ(xs, fc, cz[:0])
			var med float64
			rz, buf, med = robustZ(xs, fc, rz[:0], buf)
			if f < 2 {
				for _, k := range m {
					if f == 0 {
						d.nodes[k].mstart = med
					} else {
						d.nodes[k].mdur = med
					}
				}
			}
			for i, k := range m {
				nd := &d.nodes[k]
				nd.scored = true
				p := cz[i]
				if cfg.Robust {
					p = rz[i]
				}
				switch f {
				case 0:
					nd.cs, nd.rs, nd.zs = cz[i], rz[i], p
				case 1:
					nd.cd, nd.rd, nd.zd = cz[i], rz[i], p
				default:
					nd.ze = p
				}
			}
		}
	}
}

func floorSigma(s, center float64, cfg Config) float64 {
	return max(s, float64(cfg.MinSigmaNS), cfg.MinSigmaRel*math.Abs(center))
}

func z(x, mu, sigma float64) float64 {
	if sigma > 0 {
		return (x - mu) / sigma
	}
	switch {
	case x > mu:
		return math.Inf(1)
	case x < mu:
		return math.Inf(-1)
	}
	return 0
}

// classicZ is the paper's z: (x − μ)/σ, μ and σ over all ranks
// (population), or over the other ranks when cfg.LeaveOneOut, since a
// population z can never exceed sqrt(N−1) (stats.PopulationZ).
func classicZ(xs []float64, cfg Config, out []float64) []float64 {
	n := float64(len(xs))
	var sum, sq float64
	for _, x := range xs {
		sum += x
	}
	mu := sum / n
	for _, x := range xs {
		sq += (x - mu) * (x - mu)
	}
	for _, x := range xs {
		m, v := mu, sq/n
		if cfg.LeaveOneOut {
			// Remove x from the centred sums: Σ(y−μ₋)² = Σ(y−μ)² − (x−μ)²·n/(n−1).
			m = (sum - x) / (n - 1)
			v = max(sq-(x-mu)*(x-mu)*n/(n-1), 0) / (n - 1)
		}
		out = append(out, z(x, m, floorSigma(math.Sqrt(v), m, cfg)))
	}
	return out
}

// robustZ is the median/MAD twin: (x − median)/(1.4826·MAD); one
// straggler moves neither the median nor the MAD. It also returns the
// median (the expected value excess time is measured from).
func robustZ(xs []float64, cfg Config, out, buf []float64) ([]float64, []float64, float64) {
	buf = append(buf[:0], xs...)
	slices.Sort(buf)
	med := median(buf)
	for i, x := range xs {
		buf[i] = math.Abs(x - med)
	}
	slices.Sort(buf)
	s := floorSigma(madScale*median(buf), med, cfg)
	for _, x := range xs {
		out = append(out, z(x, med, s))
	}
	return out, buf, med
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// aScore is a_i = max(|z_s|, |z_d|) (§III-B Stage 2).
func aScore(zs, zd float64) float64 { return max(math.Abs(zs), math.Abs(zd)) }
