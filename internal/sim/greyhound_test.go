package sim

import (
	"math"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

func smallCorpus() GreyhoundCorpus {
	c := DefaultGreyhoundCorpus()
	c.Comp, c.CompPos, c.Comm, c.CommPos = 40, 6, 30, 20
	c.MinIters, c.MaxIters = 3000, 4000
	return c
}

func TestGreyhoundCorpusProportions(t *testing.T) {
	c := DefaultGreyhoundCorpus()
	c.MinIters, c.MaxIters = 3000, 3000 // proportions do not depend on length; keep it quick
	got := map[string][2]int{}
	for _, s := range c.Generate() {
		g := got[s.Class]
		g[0]++
		if s.Positive {
			g[1]++
		}
		got[s.Class] = g
	}
	// Table 1: 392 jobs / 6 computation fail-slows, 107 / 43.
	if got[ClassComputation] != [2]int{392, 6} || got[ClassCommunication] != [2]int{107, 43} {
		t.Fatalf("proportions %v, want computation [392 6], communication [107 43]", got)
	}
}

func TestGreyhoundCorpusDeterministic(t *testing.T) {
	a, b := smallCorpus().Generate(), smallCorpus().Generate()
	for i := range a {
		if a[i].ID != b[i].ID || !slices.Equal(a[i].Iters, b[i].Iters) || !slices.Equal(a[i].Events, b[i].Events) {
			t.Fatalf("series %d differs between two generations", i)
		}
	}
	c := smallCorpus()
	c.Seed++
	if slices.Equal(c.Generate()[0].Iters, a[0].Iters) {
		t.Fatal("another seed gave the same series")
	}
}

// Labels must mean what the README says: a positive has events of ≥10%
// throughput loss lasting ≥ max(10 iterations, 30 s) — measured on the
// generated data, not just on the drawn parameters; a negative has none.
func TestGreyhoundCorpusLabels(t *testing.T) {
	for _, s := range smallCorpus().Generate() {
		if s.Positive != (len(s.Events) > 0) {
			t.Fatalf("%s: positive=%v with %d events", s.ID, s.Positive, len(s.Events))
		}
		if len(s.Iters) < 3000 || s.Warmup < 5 || s.Warmup > 30 {
			t.Fatalf("%s: %d iterations, warm-up %d", s.ID, len(s.Iters), s.Warmup)
		}
		for i, v := range s.Iters {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("%s: iteration %d = %v", s.ID, i, v)
			}
		}
		prev := s.Warmup
		for _, e := range s.Events {
			if e.Onset < prev+100 || e.Relief <= e.Onset || e.Relief > len(s.Iters) {
				t.Fatalf("%s: event %+v out of order (previous end %d)", s.ID, e, prev)
			}
			if e.Loss < lossFloor || e.Loss >= 0.95 || e.Relief-e.Onset < fsMinIters || e.DurationS < fsMinS {
				t.Fatalf("%s: event %+v below the fail-slow definition", s.ID, e)
			}
			// The measured slowdown: median inside vs the 200 healthy
			// iterations before the onset. Ladders and creeps ramp up, so
			// look at the worst 50-iteration window inside.
			before := stats.Median(s.Iters[e.Onset-200 : e.Onset])
			worst := 0.0
			for a := e.Onset; a+min(50, e.Relief-e.Onset) <= e.Relief; a += 10 {
				worst = max(worst, stats.Median(s.Iters[a:a+min(50, e.Relief-e.Onset)]))
			}
			if loss := 1 - before/worst; loss < 0.08 {
				t.Fatalf("%s: event %+v measures only %.3f throughput loss", s.ID, e, loss)
			}
			prev = e.Relief
		}
	}
}

func TestGreyhoundCorpusShapesAndDurations(t *testing.T) {
	shapes := map[string]int{}
	var commDur, compDur []float64
	for _, s := range DefaultGreyhoundCorpus().Generate() {
		for _, e := range s.Events {
			shapes[e.Shape]++
			if s.Class == ClassCommunication {
				commDur = append(commDur, e.DurationS)
			} else {
				compDur = append(compDur, e.DurationS)
			}
		}
	}
	for _, sh := range []string{ShapeStep, ShapeLadder, ShapeCompound, ShapeCreep} {
		if shapes[sh] == 0 {
			t.Errorf("no %s events in the default corpus: %v", sh, shapes)
		}
	}
	// §3.3: communication events from sub-minute to over 100 minutes.
	if slices.Min(commDur) > 60 || slices.Max(commDur) < 6000 {
		t.Errorf("communication durations span [%.0f, %.0f] s, want sub-minute to >100 min", slices.Min(commDur), slices.Max(commDur))
	}
	if slices.Max(compDur) > 3600 {
		t.Errorf("computation event of %.0f s; §3.2 says short-lived", slices.Max(compDur))
	}
}

func TestParallelTrace(t *testing.T) {
	for _, p := range []Parallel{{TP: 1, DP: 4, PP: 1}, {TP: 2, DP: 2, PP: 1}, {TP: 2, DP: 2, PP: 2, GPUsPerNode: 4}, {TP: 4, DP: 1, PP: 1}} {
		for r := range p.World() {
			tr := p.Trace(r, TraceOpts{Iters: 60, Seed: 1})
			if len(tr.IterEndNS) != 60 {
				t.Fatalf("%s rank %d: %d iterations", p.Name(), r, len(tr.IterEndNS))
			}
			seq := map[string]int64{}
			last := int64(0)
			for i := range tr.Calls {
				c := &tr.Calls[i]
				if err := c.Validate(p.World()); err != nil {
					t.Fatalf("%s rank %d call %d: %v", p.Name(), r, i, err)
				}
				if c.EnterNS < last {
					t.Fatalf("%s rank %d call %d enters before the previous one", p.Name(), r, i)
				}
				last = c.EnterNS
				seq[c.Comm]++
				_ = c
			}
			for i := range tr.Comms {
				if err := tr.Comms[i].Validate(p.World()); err != nil {
					t.Fatalf("%s rank %d comm %d: %v", p.Name(), r, i, err)
				}
			}
			// Every member of a communicator issues the same number of
			// calls on it (one instance each), swaps included.
			for _, c := range tr.Comms {
				for _, m := range c.Ranks {
					other := p.Trace(m, TraceOpts{Iters: 60, Seed: 1})
					n := 0
					for _, oc := range other.Calls {
						if oc.Comm == c.ID {
							n++
						}
					}
					if int64(n) != seq[c.ID] {
						t.Fatalf("%s comm %s: rank %d has %d calls, rank %d has %d", p.Name(), c.ID, r, seq[c.ID], m, n)
					}
				}
			}
		}
	}
	if (Parallel{TP: 2, DP: 2, PP: 2}).Name() != "2T2D2P" || (Parallel{TP: 1, DP: 4, PP: 1}).Name() != "1T4D" {
		t.Fatal("names")
	}
	_ = collective.AllReduce
}

func BenchmarkGreyhoundCorpus(b *testing.B) {
	c := DefaultGreyhoundCorpus()
	for b.Loop() {
		c.Generate()
	}
}

// With every nuisance off a negative is its base time after the warm-up,
// and switching terms off never moves the labels of a positive.
func TestGreyhoundCorpusDisable(t *testing.T) {
	c := smallCorpus()
	c.Disable = Nuisances
	full := smallCorpus().Generate()
	for i, s := range c.Generate() {
		if len(s.Nuisances) != 0 {
			t.Fatalf("%s: nuisances %v with all disabled", s.ID, s.Nuisances)
		}
		if !slices.Equal(s.Events, full[i].Events) {
			t.Fatalf("%s: events changed when nuisances were disabled", s.ID)
		}
		if s.Positive {
			continue
		}
		for j, v := range s.Iters[s.Warmup:] {
			if math.Abs(v-s.BaseS) > 1e-12 {
				t.Fatalf("%s: iteration %d = %v, want base %v", s.ID, s.Warmup+j, v, s.BaseS)
			}
		}
	}
}
