package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gen builds a series of levels with relative Gaussian jitter sd and
// optional one-point spikes (factor spike at the given indices).
func gen(seed uint64, levels []float64, counts []int, sd float64, spikes map[int]float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 11))
	var x []float64
	for i, l := range levels {
		for range counts[i] {
			v := l * (1 + sd*rng.NormFloat64())
			if f, ok := spikes[len(x)]; ok {
				v *= f
			}
			x = append(x, v)
		}
	}
	return x
}

func indices(cps []ChangePoint) []int {
	out := make([]int, len(cps))
	for i, c := range cps {
		out[i] = c.Index
	}
	return out
}

func near(got, want []int, slack int) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] < want[i]-slack || got[i] > want[i]+slack {
			return false
		}
	}
	return true
}

func TestChangePointDetectors(t *testing.T) {
	spikes := map[int]float64{30: 1.6, 75: 1.4, 140: 2.0, 141: 1.3}
	cases := []struct {
		name          string
		x             []float64
		bocdv, window []int // want (BOCD must find at least bocdv)
		slack         int
	}{
		{"onset 20%", gen(1, []float64{100, 120}, []int{100, 100}, 0.02, nil), []int{100}, []int{100}, 1},
		{"onset and relief 50%", gen(2, []float64{75, 112, 75}, []int{80, 60, 80}, 0.02, nil), []int{80, 140}, []int{80, 140}, 1},
		{"jitter and GC spikes, no change", gen(3, []float64{100}, []int{200}, 0.02, spikes), nil, []int{139, 141}, 0}, // a 2-point spike fools the window
		{"ladder 15% then 15%", gen(4, []float64{100, 115, 132}, []int{80, 80, 80}, 0.015, nil), []int{80, 160}, []int{80, 160}, 1},
		{"8% shift is jitter to BOCD+V", gen(5, []float64{100, 108}, []int{100, 100}, 0.01, nil), nil, nil, 0},
		{"80% slowdown", gen(6, []float64{50, 250}, []int{60, 60}, 0.03, nil), []int{60}, []int{60}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := DefaultVerified().Detect(c.x)
			if !near(indices(v), c.bocdv, c.slack) {
				t.Errorf("bocd+v: got %v (%+v), want %v", indices(v), v, c.bocdv)
			}
			b := DefaultBOCD().Detect(c.x)
			for _, w := range c.bocdv {
				if !slices.ContainsFunc(b, func(p ChangePoint) bool { return p.Index >= w-c.slack && p.Index <= w+c.slack }) {
					t.Errorf("bocd: got %v, missing %d", indices(b), w)
				}
			}
			for _, p := range b {
				if p.Score < 0.9 || p.Score > 1 {
					t.Errorf("bocd score %v", p.Score)
				}
			}
			if w := DefaultSlidingWindow().Detect(c.x); !near(indices(w), c.window, c.slack+2) {
				t.Errorf("window: got %v, want %v", indices(w), c.window)
			}
		})
	}
}

// Plain BOCD flags the spikes (the paper's high FPR); verification drops them.
func TestChangePointBOCDFlagsSpikesVerificationDrops(t *testing.T) {
	x := gen(3, []float64{100}, []int{200}, 0.02, map[int]float64{50: 1.8, 120: 1.8})
	if b := DefaultBOCD().Detect(x); len(b) == 0 {
		t.Errorf("plain BOCD found nothing on a 80%% spike; want the spike flagged")
	}
	if v := DefaultVerified().Detect(x); len(v) != 0 {
		t.Errorf("BOCD+V kept %+v", v)
	}
}

// With a constant hazard, A&M's P(r_t=0 | x_1:t) is exactly H whatever the
// data — the reason for our reading of the §4.2 rule (see BOCD doc).
func TestChangePointLiteralRuleIsHazard(t *testing.T) {
	x := gen(7, []float64{100, 200}, []int{30, 30}, 0.02, nil)
	// Slow twin in A&M's parametrisation: r_t=0 excludes x_t.
	const H = 1.0 / 250
	post := slowPosterior(x, DefaultBOCD(), true)
	for t0, p := range post {
		if math.Abs(p[0]-H) > 1e-9 {
			t.Fatalf("t=%d: P(r_t=0)=%v, want H=%v", t0, p[0], H)
		}
	}
}

// slowPosterior is the unpruned O(n²) run-length posterior in plain form
// (no scale adaptation: a fixed prior), the slow twin of BOCDStream. With
// amExclude the new run excludes the current point (A&M); otherwise it
// includes it (our parametrisation). p[t][r] is the mass of run length r
// (points after the first) at time t; in A&M form p[t][0] is the r_t=0 mass.
func slowPosterior(x []float64, d BOCD, amExclude bool) [][]float64 {
	d = d.norm()
	H := 1 / d.Lambda
	type st struct{ mu, kappa, alpha, beta float64 }
	prior := st{math.Log(x[0]), d.Kappa0, d.Alpha0, d.Alpha0 * 0.02 * 0.02}
	pred := func(s st, y float64) float64 {
		nu := 2 * s.alpha
		s2 := s.beta * (s.kappa + 1) / (s.alpha * s.kappa)
		l1, _ := math.Lgamma(s.alpha + 0.5)
		l0, _ := math.Lgamma(s.alpha)
		z := y - s.mu
		return l1 - l0 - 0.5*math.Log(nu*math.Pi*s2) - (s.alpha+0.5)*math.Log1p(z*z/(nu*s2))
	}
	upd := func(s st, y float64) st {
		k1 := s.kappa + 1
		z := y - s.mu
		return st{s.mu + z/k1, k1, s.alpha + 0.5, s.beta + s.kappa*z*z/(2*k1)}
	}
	var out [][]float64
	w := []float64{1}
	stats := []st{prior}
	if !amExclude {
		stats = []st{upd(prior, math.Log(x[0]))}
	}
	for t := 1; t < len(x); t++ {
		y := math.Log(x[t])
		nw := make([]float64, len(w)+1)
		ns := make([]st, len(w)+1)
		tot := 0.0
		for r := range w {
			p := w[r] * math.Exp(pred(stats[r], y))
			nw[r+1] = p * (1 - H)
			ns[r+1] = upd(stats[r], y)
			if amExclude {
				nw[0] += p * H
			}
		}
		if amExclude {
			ns[0] = prior
		} else {
			// New run's prior mean: the most probable run's mean (as the stream).
			best := 0
			for r := range w {
				if w[r] > w[best] {
					best = r
				}
			}
			p0 := prior
			p0.mu = stats[best].mu
			nw[0] = H * math.Exp(pred(p0, y))
			ns[0] = upd(p0, y)
		}
		for _, v := range nw {
			tot += v
		}
		for r := range nw {
			nw[r] /= tot
		}
		w, stats = nw, ns
		out = append(out, slices.Clone(w))
	}
	return out
}

// The pruned stream agrees with the unpruned slow twin on the decision
// probability when the scale is pinned (NoiseFloor = 0.02 > running σ).
func TestChangePointBOCDMatchesSlowTwin(t *testing.T) {
	x := gen(8, []float64{100, 125, 100}, []int{60, 40, 60}, 0.005, map[int]float64{20: 1.3})
	d := DefaultBOCD()
	d.NoiseFloor = 0.02
	d.MinMass = 1e-12
	d.MaxRuns = 400
	post := slowPosterior(x, d, false)
	s := d.newStream()
	s.Push(x[0])
	for t0 := 1; t0 < len(x); t0++ {
		s.Push(x[t0])
		// mass of "run started at t0−k" = slow p[t0−1][k]
		for k := 0; k <= 3 && k <= t0; k++ {
			want := post[t0-1][k]
			got := s.startMass(t0 - k)
			if math.Abs(got-want) > 1e-6 {
				t.Fatalf("t=%d start=%d: stream %v, slow %v", t0, t0-k, got, want)
			}
		}
	}
}

// Batch == streaming, and pruning keeps the hypotheses bounded.
func TestChangePointStreamingEqualsBatch(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		var levels []float64
		var counts []int
		for range 1 + rng.IntN(5) {
			levels = append(levels, 50+rng.Float64()*100)
			counts = append(counts, 5+rng.IntN(80))
		}
		x := gen(seed, levels, counts, 0.01+0.05*rng.Float64(), map[int]float64{rng.IntN(100): 2})
		if seed%5 == 0 {
			x[rng.IntN(len(x))] = math.NaN()
		}
		for _, d := range []Online{DefaultBOCD(), DefaultVerified(), DefaultSlidingWindow()} {
			batch := d.Detect(x)
			s := d.NewStream()
			var stream []ChangePoint
			for i, v := range x {
				got := s.Push(v)
				for _, c := range got {
					if c.Index > i {
						t.Fatalf("%s decided index %d at point %d", d.Name(), c.Index, i)
					}
				}
				stream = append(stream, got...)
			}
			stream = append(stream, s.Flush()...)
			if !slices.Equal(batch, stream) {
				t.Fatalf("seed %d %s: batch %v != stream %v", seed, d.Name(), batch, stream)
			}
			for i := 1; i < len(batch); i++ {
				if batch[i].Index <= batch[i-1].Index {
					t.Fatalf("%s not ascending: %v", d.Name(), indices(batch))
				}
			}
		}
	}
	s := DefaultBOCD().newStream()
	for _, v := range gen(9, []float64{100}, []int{5000}, 0.03, nil) {
		s.Push(v)
		if s.Runs() > 32 {
			t.Fatalf("runs %d > MaxRuns", s.Runs())
		}
	}
}

func TestChangePointDegenerate(t *testing.T) {
	for _, x := range [][]float64{nil, {1}, {0, 0, 0}, {-1, -2, 5}, {math.NaN(), math.Inf(1)}, make([]float64, 100)} {
		for _, d := range []Detector{DefaultBOCD(), DefaultVerified(), DefaultSlidingWindow(), BOCD{}, Verified{}, SlidingWindow{}} {
			for _, c := range d.Detect(x) {
				if math.IsNaN(c.Before) || math.IsNaN(c.After) || math.IsNaN(c.Score) {
					t.Errorf("%s on %v: NaN in %+v", d.Name(), x, c)
				}
			}
		}
	}
	if n := (Verified{Inner: DefaultBOCD()}).Name(); n != "bocd+v" {
		t.Errorf("name %q", n)
	}
}

func BenchmarkBOCD(b *testing.B) {
	x := gen(1, []float64{100, 130, 100, 160}, []int{250_000, 250_000, 250_000, 250_000}, 0.03, nil)
	b.ResetTimer()
	for range b.N {
		s := DefaultBOCD().newStream()
		for _, v := range x {
			s.Push(v)
		}
	}
	b.ReportMetric(float64(len(x))*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}

func BenchmarkBOCDV(b *testing.B) {
	x := gen(1, []float64{100, 130, 100, 160}, []int{250_000, 250_000, 250_000, 250_000}, 0.03, nil)
	b.ResetTimer()
	for range b.N {
		DefaultVerified().Detect(x)
	}
	b.ReportMetric(float64(len(x))*float64(b.N)/b.Elapsed().Seconds(), "points/s")
}
