package sysom

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// CPU waterline (§3.1): per communication group, each function's
// inclusive CPU fraction on each rank (samples with the function on the
// stack / the profile's Total), its mean and σ across the group's ranks,
// and a flag for (rank, function) above μ + Kσ.
//
// Two guards keep the flags to what the samples can support:
//   - leave-one-out μ₋, σ₋ (the other ranks): with the flagged rank
//     inside its own statistics z can never exceed sqrt(N−1), so the
//     paper's k = 2 is blind for N ≤ 5 (doc.go);
//   - sampling noise: a rank's fraction from T samples of a function
//     whose true share is p has the binomial σ_b = sqrt(p(1−p)/T)
//     (times sqrt(1 + 1/(N−1)) for the peers' mean's own noise). A
//     group holds N·F (rank, function) tests, so the excess must also
//     beat z_α·σ_b with z_α the one-sided normal quantile for a
//     family-wise false-flag rate Alpha over those tests (Bonferroni),
//     plus the absolute Delta and MinSamples. The reported Sigma is
//     max(σ₋, σ_b·z_α/K), so Z ≥ K is the whole rule.

// rankProf is one rank's prepared profile.
type rankProf struct {
	rank int
	p    *stack.Profile
	gid  []int32
	inc  []incCount // inclusive counts by global id
	// own is the rank's own samples: Total less other processes'
	// (stacks under a ForeignPrefix root).
	own int64
}

// Own functions and other processes (issue 16 item 8b). The paper's
// waterline is the training process's own CPU profile; laggard's
// profiles also hold other processes' samples on the rank's CPUs
// (interference). Mixing them in one denominator made every own
// function's share fall on a rank whose core another process took, so
// its peers' own functions (sgemm_, the forward pass) rose above the
// group's mean and they were flagged for the hog on someone else's core.
// So a function of the rank's own process is judged as its share of the
// rank's own samples, and another process only as one row — its root
// frame, "[other process] name" — as its share of all the rank's samples
// (how much of the rank's CPU time it took); its internal functions are
// not waterline rows at all (they flagged ten rows for one compiler).

// prepare interns every profile's functions and computes the inclusive
// counts the waterline needs.
func prepare(ps map[int]*stack.Profile, in *interner, sc *incScratch) map[int]*rankProf {
	ranks := make([]int, 0, len(ps))
	for r := range ps {
		ranks = append(ranks, r)
	}
	slices.Sort(ranks)
	out := make(map[int]*rankProf, len(ps))
	fs := make([][]stack.Func, len(ranks))
	for i, r := range ranks {
		fs[i] = ps[r].Funcs
	}
	gids := in.tables(fs)
	for i, r := range ranks {
		out[r] = &rankProf{rank: r, p: ps[r], gid: gids[i]}
	}
	foreign := in.foreignRoots()
	// Inclusive counts are independent per rank: spread them over the
	// CPUs (each worker with its own scratch; results do not depend on
	// the schedule).
	workers := min(runtime.GOMAXPROCS(0), 8, max(len(ranks)/16, 1))
	var wg sync.WaitGroup
	for w := range workers {
		s := sc
		if w > 0 {
			s = &incScratch{}
		}
		s.grow(len(in.funcs))
		wg.Go(func() {
			for i := w; i < len(ranks); i += workers {
				rp := out[ranks[i]]
				rp.inc, rp.own = inclusive(rp.p, rp.gid, foreign, s)
			}
		})
	}
	wg.Wait()
	return out
}

// noiseZ is the one-sided normal quantile for a false-flag rate alpha
// spread over m tests (never below k).
func noiseZ(alpha float64, m int, k float64) float64 {
	if m < 1 {
		m = 1
	}
	return max(k, math.Sqrt2*math.Erfcinv(2*alpha/float64(m)))
}

// waterline flags one group's ranks. members are the group's ranks with
// a profile of at least MinSamples samples, sorted.
func waterline(group string, members []*rankProf, funcs []stack.Func, foreign []bool, cfg Config) []WaterlineFlag {
	n := len(members)
	if n < 2 {
		return nil
	}
	nf := len(funcs)
	sum := make([]float64, nf)
	sum2 := make([]float64, nf)
	present := make([]int32, nf)
	tests := 0
	// denom is the samples a function's share is of (see rankProf.own).
	denom := func(m *rankProf, fn int32) float64 {
		if foreign[fn] {
			return float64(m.p.Total)
		}
		return float64(m.own)
	}
	for _, m := range members {
		for _, c := range m.inc {
			t := denom(m, c.fn)
			if t <= 0 {
				continue
			}
			x := float64(c.n) / t
			sum[c.fn] += x
			sum2[c.fn] += x * x
			present[c.fn]++
		}
		tests += len(m.inc)
	}
	zb := noiseZ(cfg.Alpha, tests, cfg.K)
	others := float64(n - 1)
	var out []WaterlineFlag
	for _, m := range members {
		start := len(out)
		for _, c := range m.inc {
			t := denom(m, c.fn)
			if c.n < cfg.MinSamples || t <= 0 {
				continue
			}
			x := float64(c.n) / t
			mu := (sum[c.fn] - x) / others
			d := x - mu
			if d < cfg.Delta {
				continue
			}
			v := (sum2[c.fn]-x*x)/others - mu*mu
			sd := math.Sqrt(max(v, 0))
			p := min(max(mu, 0), 1)
			// The difference x − μ₋ carries the rank's sampling noise
			// and, 1/(N−1) as much, the peers' mean's.
			sb := math.Sqrt(p * (1 - p) / t * (1 + 1/others))
			sigma := max(sd, sb*zb/cfg.K)
			z := 1e6
			if sigma > 0 {
				z = min(d/sigma, 1e6)
			}
			if z <= cfg.K {
				continue
			}
			f := funcs[c.fn]
			out = append(out, WaterlineFlag{Group: group, Rank: m.rank, Func: f.Name, Module: f.Module, Kind: f.Kind.String(),
				Fraction: round(x, 5), Mean: round(mu, 5), Sigma: round(sigma, 6), Z: round(z, 2), Samples: c.n, New: present[c.fn] == 1,
				Foreign: foreign[c.fn]})
		}
		flags := out[start:]
		slices.SortFunc(flags, func(a, b WaterlineFlag) int {
			return cmp.Or(cmp.Compare(b.Fraction-b.Mean, a.Fraction-a.Mean), cmp.Compare(a.Func, b.Func), cmp.Compare(a.Module, b.Module))
		})
		if len(flags) > cfg.MaxFlagsPerRank {
			out = out[:start+cfg.MaxFlagsPerRank]
		}
	}
	return out
}

// groupMembers returns the group's ranks with a profile, and notes.
// Thin profiles (< MinTotal samples) stay in: the binomial floor σ_b ∝
// 1/√T already keeps their noise from flagging, and a rank whose
// profile is thin may be the one a hog starved. Only a profile below
// MinSamples (it can never hold a flag) is left out.
func groupMembers(g Group, profs map[int]*rankProf, cfg Config) ([]*rankProf, []string) {
	var ms []*rankProf
	var notes []string
	for _, r := range g.Ranks {
		rp := profs[r]
		if rp == nil {
			continue
		}
		switch t := rp.p.Total; {
		case t < cfg.MinSamples:
			notes = append(notes, fmt.Sprintf("group %s: rank %d has %d samples (< min_samples %d): left out of the CPU waterline", g.ID, r, t, cfg.MinSamples))
			continue
		case t < cfg.MinTotal:
			notes = append(notes, fmt.Sprintf("group %s: rank %d has only %d samples (< min_total %d): kept in the CPU waterline, but a function needs ≥ %d samples (%s of its profile) to be flagged there", g.ID, r, t, cfg.MinTotal, cfg.MinSamples, pct(float64(cfg.MinSamples)/float64(t))))
		}
		ms = append(ms, rp)
	}
	slices.SortFunc(ms, func(a, b *rankProf) int { return cmp.Compare(a.rank, b.rank) })
	return ms, notes
}
