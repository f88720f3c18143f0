package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// burst puts a run of k points ×f into a flat jittered series at i.
func burst(seed uint64, n, at, k int, f, sd float64) []float64 {
	x := gen(seed, []float64{100}, []int{n}, sd, nil)
	for i := at; i < at+k && i < n; i++ {
		x[i] *= f
	}
	return x
}

// Persistence (§3: a fail-slow is sustained): a burst shorter than the
// confirmation window's hold half never verifies, however large, while a
// sustained shift of ≥ 10% does, and is decided W−1 points after it.
func TestVerifiedPersistence(t *testing.T) {
	v := DefaultVerified()
	w := v.After
	for seed := uint64(0); seed < 30; seed++ {
		for k := 1; k <= w/2; k++ {
			for _, f := range []float64{1.15, 1.3, 1.5, 2, 5} {
				x := burst(seed, 300, 150, k, f, 0.02)
				if got := v.Detect(x); len(got) != 0 {
					t.Fatalf("seed %d: a %d-point burst ×%v verified: %+v", seed, k, f, got)
				}
			}
		}
		for _, f := range []float64{1.13, 1.25, 1.8} {
			x := gen(seed, []float64{100, 100 * f}, []int{150, 150}, 0.02, nil)
			got := v.Detect(x)
			if len(got) != 1 || got[0].Index < 148 || got[0].Index > 152 || !got[0].Rise() {
				t.Fatalf("seed %d: sustained ×%v: got %+v, want one onset at 150", seed, f, got)
			}
			// Online: decided once the window is complete.
			s := v.NewStream()
			decided := -1
			for i, p := range x {
				if len(s.Push(p)) > 0 && decided < 0 {
					decided = i
				}
			}
			if lag := decided - got[0].Index; lag < w-1 || lag > w+3 {
				t.Errorf("seed %d ×%v: decided %d points after the change, want ≈ W−1 = %d", seed, f, lag, w-1)
			}
		}
	}
}

// A level shift below the gate (the paper's 10%) is jitter at any length;
// a relief of a 10% slowdown (time ×1/1.1) verifies — the gap is taken
// against the lower level.
func TestVerifiedGateAndRelief(t *testing.T) {
	v := DefaultVerified()
	for seed := uint64(0); seed < 20; seed++ {
		x := gen(seed, []float64{100, 106, 100}, []int{200, 300, 200}, 0.01, nil)
		if got := v.Detect(x); len(got) != 0 {
			t.Fatalf("seed %d: a 6%% shift verified: %+v", seed, got)
		}
		x = gen(seed, []float64{100, 113, 100}, []int{200, 300, 200}, 0.01, nil)
		got := v.Detect(x)
		if len(got) != 2 || !got[0].Rise() || got[1].Rise() {
			t.Fatalf("seed %d: 13%% onset and its relief: got %+v", seed, got)
		}
	}
}

// A slow drift (< 10% over thousands of points) never verifies: the
// windows are bounded, so only the drift inside Before+After counts.
func TestVerifiedDrift(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		x := make([]float64, 5000)
		for i := range x {
			x[i] = 100 * (1 + 0.08*float64(i)/5000) * (1 + 0.02*rng.NormFloat64())
		}
		if got := DefaultVerified().Detect(x); len(got) != 0 {
			t.Fatalf("seed %d: a 8%% drift verified: %+v", seed, got)
		}
	}
}

// A change in the first points (a series that starts in its warm-up tail)
// has no before-level to compare with.
func TestVerifiedNeedsABeforeLevel(t *testing.T) {
	x := gen(1, []float64{100}, []int{200}, 0.01, nil)
	x[0] = 140
	if got := DefaultVerified().Detect(x); len(got) != 0 {
		t.Fatalf("a change at index 1 verified: %+v", got)
	}
}

// The wall-time floor stretches the confirmation window: with points of
// 100 (ms) and MinSpan 3000, the decision waits for 30 points.
func TestVerifiedMinSpan(t *testing.T) {
	v := DefaultVerified()
	v.MinSpan = 3000
	x := gen(2, []float64{100, 130}, []int{150, 100}, 0.01, nil)
	s := v.NewStream()
	decided := -1
	for i, p := range x {
		if out := s.Push(p); len(out) > 0 && decided < 0 {
			decided = i
			if out[0].Index < 148 || out[0].Index > 152 {
				t.Fatalf("index %d", out[0].Index)
			}
		}
	}
	if lag := decided - 150; lag < 20 || lag > 30 {
		t.Fatalf("decided %d points after the change, want ≈ 3000/130 ≈ 23", lag)
	}
	// A 12-point burst passes W = 10 but not a 3000-unit floor.
	x = burst(3, 300, 150, 12, 1.4, 0.01)
	if got := DefaultVerified().Detect(x); len(got) == 0 {
		t.Errorf("a 12-point ×1.4 episode did not verify at W = 10")
	}
	if got := v.Detect(x); len(got) != 0 {
		t.Errorf("a 12-point episode (1.7 s of 100 ms points) verified under a 3 s floor: %+v", got)
	}
}

// BOCD reports a step whose evidence builds up slowly (heavy jitter inside
// the slow segment, as congestion fluctuates) and one whose first point is
// uncertain: the decision is on "a run started since the last change",
// not on one index at exactly d points (comm-005's miss, eval report).
func TestBOCDSlowEvidenceAndSpreadLocation(t *testing.T) {
	misses := 0
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		x := make([]float64, 400)
		for i := range x {
			sd, lvl := 0.04, 100.0
			if i >= 250 {
				sd, lvl = 0.12, 130 // +30% with ×3 jitter
			}
			x[i] = lvl * (1 + sd*rng.NormFloat64())
		}
		found := false
		for _, c := range DefaultBOCD().Detect(x) {
			if c.Index >= 245 && c.Index <= 255 && c.Rise() {
				found = true
			}
		}
		if !found {
			misses++
			t.Logf("seed %d: %v", seed, indices(DefaultBOCD().Detect(x)))
		}
	}
	if misses > 2 {
		t.Fatalf("plain BOCD missed a +30%% step in heavy jitter %d/40 times", misses)
	}
}

func ExampleVerified() {
	x := gen(1, []float64{100, 125}, []int{100, 50}, 0.01, nil)
	for _, c := range DefaultVerified().Detect(x) {
		fmt.Printf("change at %d: %.0f → %.0f\n", c.Index, c.Before, c.After)
	}
	// Output: change at 100: 100 → 126
}

// heavyJitter is a flat series at 100 whose iterations run ×1.2–1.6 slow
// with probability p (uneven sequence lengths, bursts: the jitter of the
// noisiest jobs), with 2% Gaussian noise.
func heavyJitter(seed uint64, n int, p float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 11))
	x := make([]float64, n)
	for i := range x {
		x[i] = 100 * (1 + 0.02*rng.NormFloat64())
		if rng.Float64() < p {
			x[i] *= 1.2 + 0.4*rng.Float64()
		}
	}
	return x
}

// Issue 16, item 6b: on a series whose own jitter runs 20–60 % slow one
// iteration in twenty, a 10-point window where six such iterations cluster
// (the corpus's residual false positives: 8–10 iterations of +10–30 %) is
// what that jitter does about once in 10⁵ windows: the noise-aware test
// waits for more points and drops it. The fixed 10 % gate verified it.
func TestVerifiedNoiseAware(t *testing.T) {
	blindFP := 0
	for seed := uint64(0); seed < 20; seed++ {
		x := heavyJitter(seed, 1600, 0.05)
		// six of ten slow, between quiet neighbours
		for i, f := range []float64{1, 1, 1.3, 1.5, 1, 1.25, 1.02, 1.4, 0.99, 1.35, 1.45, 1.01, 1, 1, 1} {
			x[1498+i] = 100 * f
		}
		blind := DefaultVerified()
		blind.Alpha = 0
		if hasOnsetNear(blind.Detect(x), 1500) {
			blindFP++
		}
		if got := DefaultVerified().Detect(x); hasOnsetNear(got, 1500) {
			t.Fatalf("seed %d: a cluster of the series' own jitter verified: %+v", seed, got)
		}
	}
	if blindFP < 10 {
		t.Fatalf("the fixed gate verified the cluster on %d of 20 seeds: the scenario no longer shows the old false positive", blindFP)
	}
}

// A real change on the same noisy series still verifies — later when it
// is no larger than the jitter, at W−1 points when it is far beyond it —
// and on a quiet series a step of 15% decides at W−1 points as before.
func TestVerifiedNoiseAwareKeepsRealChanges(t *testing.T) {
	decide := func(x []float64) (ChangePoint, int) {
		s := DefaultVerified().NewStream()
		for i, p := range x {
			if got := s.Push(p); len(got) > 0 {
				return got[0], i
			}
		}
		return ChangePoint{Index: -1}, -1
	}
	for seed := uint64(0); seed < 20; seed++ {
		for _, c := range []struct {
			f           float64
			p           float64
			maxLag      int
			description string
		}{
			{1.25, 0.05, DefaultVerifyBefore + 3, "+25% inside heavy jitter"},
			{2.0, 0.05, DefaultVerifyAfter + 3, "×2 inside heavy jitter"},
			{1.15, 0, DefaultVerifyAfter + 3, "+15% on a quiet series"},
		} {
			x := heavyJitter(seed, 1600, c.p)
			for i := 1200; i < len(x); i++ {
				x[i] *= c.f
			}
			cp, at := decide(x)
			if cp.Index < 1195 || cp.Index > 1205 || !cp.Rise() {
				t.Fatalf("seed %d, %s: got %+v", seed, c.description, cp)
			}
			if lag := at - cp.Index; lag > c.maxLag {
				t.Errorf("seed %d, %s: decided %d points after the change, want ≤ %d", seed, c.description, lag, c.maxLag)
			}
		}
	}
}

func hasOnsetNear(cps []ChangePoint, at int) bool {
	for _, c := range cps {
		if c.Rise() && c.Index >= at-5 && c.Index <= at+5 {
			return true
		}
	}
	return false
}

// The jitter record's incremental base median equals the median of the
// jitterBase points before each point (the ring's, the slow twin),
// non-finite points included.
func TestJitterBaseMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	j := newJitter()
	var h ring
	for i := range 3000 {
		x := 100 + 10*rng.NormFloat64()
		switch rng.IntN(50) {
		case 0:
			x = math.NaN()
		case 1:
			x = math.Inf(1)
		case 2:
			x = 100 // ties
		}
		if got, want := j.median(), h.median(i-jitterBase, i); got != want {
			t.Fatalf("point %d: incremental median %v, ring median %v", i, got, want)
		}
		j.observe(i, x, 0)
		h.push(x)
	}
}

// A change early in a series — before the jitter record holds many
// points — still verifies: a short record is smoothed as if it were
// jitterMin points long (issue 16: the demo's fault starts at its tenth
// iteration and the first noise-aware version never verified it).
func TestVerifiedEarlyChange(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		x := gen(seed, []float64{100, 240}, []int{10, 60}, 0.03, nil)
		got := DefaultVerified().Detect(x)
		if len(got) != 1 || got[0].Index < 9 || got[0].Index > 11 || !got[0].Rise() {
			t.Fatalf("seed %d: %+v", seed, got)
		}
	}
}
