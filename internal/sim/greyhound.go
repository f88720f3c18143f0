package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Greyhound fail-slow corpus: labelled iteration-time series with the
// characteristics of the Greyhound characterization study (§3) — the
// nuisances a detector must ignore (§4.2: GC, allocator misses, uneven
// sequence lengths) and the fail-slows it must find (transient and
// persistent, −10%…−80% throughput, sub-minute to hours, ladders and
// compound events), in the proportions of Table 1. The generative model
// and the reasons for each term are documented in eval/greyhound/README.md;
// change it only together with that file, never to favour a detector.

// Series classes (Table 1's two probing populations).
const (
	ClassComputation   = "computation"
	ClassCommunication = "communication"
)

// Fail-slow shapes.
const (
	ShapeStep     = "step"     // one level change, then relief (or none: persistent)
	ShapeLadder   = "ladder"   // 2–3 successively worse levels (§3.3 Fig. 4, §3.4 Fig. 5)
	ShapeCompound = "compound" // congestion with a GPU throttle inside it (§3.4 Fig. 6)
	ShapeCreep    = "creep"    // consecutive <10% steps adding up to ≥10% (§7.2's missed case)
)

// FailSlow is one labelled event. Onset is the first slow iteration and
// Relief the first healthy one again (len(series) when it persists).
type FailSlow struct {
	Onset  int    `json:"onset"`
	Relief int    `json:"relief"`
	Cause  string `json:"cause"` // cpu_contention, gpu_degradation, network_congestion
	Shape  string `json:"shape"`
	// Loss is the worst throughput loss in the event (1 − healthy/slow
	// iteration time), in (0, 1).
	Loss float64 `json:"loss"`
	// DurationS is the event's wall time in seconds.
	DurationS  float64 `json:"duration_s"`
	Persistent bool    `json:"persistent,omitempty"`
}

// GreyhoundSeries is one labelled iteration-time series. Iters holds every
// iteration's time in seconds, warm-up included; Warmup leading
// iterations are the job's warm-up, which a tracker skips (they are not
// a fail-slow and are not labelled). Event iterations index Iters.
type GreyhoundSeries struct {
	ID       string     `json:"id"`
	Class    string     `json:"class"`
	Positive bool       `json:"positive"`
	BaseS    float64    `json:"base_s"`
	Warmup   int        `json:"warmup"`
	Events   []FailSlow `json:"events,omitempty"`
	// Nuisances lists the nuisance terms present (for per-nuisance error
	// breakdowns).
	Nuisances []string  `json:"nuisances"`
	Iters     []float64 `json:"-"`
}

// GreyhoundCorpus sets the corpus size and seed.
type GreyhoundCorpus struct {
	Seed uint64
	// Comp/CompPos and Comm/CommPos: series and positives per class.
	Comp, CompPos, Comm, CommPos int
	// MinIters/MaxIters bound each series' length (uniform).
	MinIters, MaxIters int
	// Disable switches nuisance terms off by name (Nuisances below) for
	// ablations. Every random draw still happens, so the other terms of
	// each series stay exactly as in the full corpus.
	Disable []string
}

// Nuisances names the nuisance terms of the corpus (README).
var Nuisances = []string{"jitter", "uneven_seqlen", "drift", "gc", "alloc_miss", "checkpoint", "microburst", "subthreshold_shift"}

func (c GreyhoundCorpus) on(name string) bool { return !slices.Contains(c.Disable, name) }

// GreyhoundSeed is the committed corpus seed: the tables in
// eval/greyhound/results are for this corpus.
const GreyhoundSeed = 20250711

// DefaultGreyhoundCorpus is Table 1's probing populations: 392
// single-node jobs with 6 computation fail-slows, 107 four-node jobs with
// 43 (42 congestion + 1 CPU contention).
func DefaultGreyhoundCorpus() GreyhoundCorpus {
	return GreyhoundCorpus{Seed: GreyhoundSeed, Comp: 392, CompPos: 6, Comm: 107, CommPos: 43, MinIters: 3000, MaxIters: 10000}
}

// Model parameters (README "Generative model" explains each).
const (
	fsMinIters = 10   // a fail-slow lasts at least this many iterations…
	fsMinS     = 30.0 // …and this many seconds; shorter bursts are jitter
	burstMax   = 3    // nuisance bursts last at most this many iterations
	lossFloor  = 0.10 // §3: a fail-slow costs ≥10% throughput
	subMax     = 0.07 // sub-threshold level shifts in negatives stay ≤7%
)

// Generate returns the corpus: computation series first, then
// communication. Each series draws from its own stream (seed, class,
// index), so one series never depends on how many others there are.
func (c GreyhoundCorpus) Generate() []GreyhoundSeries {
	out := make([]GreyhoundSeries, 0, c.Comp+c.Comm)
	for _, cl := range []struct {
		name   string
		n, pos int
		bit    uint64
	}{{ClassComputation, c.Comp, c.CompPos, 1}, {ClassCommunication, c.Comm, c.CommPos, 2}} {
		ordinal := 0
		for i, p := range c.positives(cl.n, cl.pos, cl.bit) {
			out = append(out, c.series(cl.name, i, p, ordinal, cl.pos))
			if p {
				ordinal++
			}
		}
	}
	return out
}

// positives spreads k positives over n series pseudo-randomly.
func (c GreyhoundCorpus) positives(n, k int, class uint64) []bool {
	rng := rand.New(rand.NewPCG(c.Seed, 0xc1a55<<8|class))
	p := make([]bool, n)
	for _, i := range rng.Perm(n)[:min(k, n)] {
		p[i] = true
	}
	return p
}

// causeFor assigns Table 1's root causes: computation positives 4 CPU
// contention + 2 GPU degradation (scaled), communication positives all
// congestion but one CPU contention; among congestion, ~25% ladders,
// ~10% compound and one creeping case.
func causeFor(class string, ordinal, total int) (cause, shape string) {
	if class == ClassComputation {
		if ordinal < (2*total+2)/3 {
			return "cpu_contention", ShapeStep
		}
		return "gpu_degradation", ShapeStep
	}
	switch {
	case ordinal == 0:
		return "cpu_contention", ShapeStep
	case ordinal == 1:
		return "network_congestion", ShapeCreep
	case ordinal%10 == 2:
		return "network_congestion", ShapeCompound
	case ordinal%4 == 3:
		return "network_congestion", ShapeLadder
	}
	return "network_congestion", ShapeStep
}

// series draws one series; ordinal numbers the positives of its class
// (it picks the root cause and shape, Table 1).
func (c GreyhoundCorpus) series(class string, idx int, positive bool, ordinal, positives int) GreyhoundSeries {
	classBit := uint64(1)
	if class == ClassCommunication {
		classBit = 2
	}
	rng := rand.New(rand.NewPCG(c.Seed, classBit<<32|uint64(idx)))
	comm := class == ClassCommunication
	s := GreyhoundSeries{ID: fmt.Sprintf("%s-%03d", class[:4], idx), Class: class, Positive: positive}
	n := c.MinIters + rng.IntN(max(c.MaxIters-c.MinIters, 0)+1)
	// §3.2: 10k iterations in 70–90 min (~0.5 s); §3.3: 10k in ~5 h (~1.8 s).
	if comm {
		s.BaseS = uniform(rng, 1.0, 3.0)
	} else {
		s.BaseS = uniform(rng, 0.3, 1.0)
	}
	s.Warmup = 5 + rng.IntN(26)
	// level[i] multiplies the healthy iteration time (fail-slows, shifts,
	// drift); noise[i] scales the extra jitter inside an event.
	level := make([]float64, n)
	noise := make([]float64, n)
	for i := range level {
		level[i], noise[i] = 1, 1
	}
	if positive {
		s.Events = placeEvents(rng, &s, n, comm, level, noise, ordinal, positives)
	} else if rng.Float64() < 0.15 {
		// A small neighbour arrives or the data mix changes: a persistent
		// level shift below the 10% a fail-slow needs.
		if c.on("subthreshold_shift") {
			s.Nuisances = append(s.Nuisances, "subthreshold_shift")
		}
		for k := 1 + rng.IntN(2); k > 0; k-- {
			a := s.Warmup + rng.IntN(n-s.Warmup)
			b := min(n, a+100+rng.IntN(n/2))
			f := 1 / (1 - uniform(rng, 0.02, subMax))
			if !c.on("subthreshold_shift") {
				f = 1
			}
			for i := a; i < b; i++ {
				level[i] = max(level[i], f) // overlapping shifts never stack past the gate
			}
		}
	}
	// Slow drift < 10% peak to peak: a ramp or a slow cycle (thermal,
	// data-order effects), plus a slow mean-reverting wander.
	amp := uniform(rng, 0, 0.08)
	ouSD := 0.01
	if !c.on("drift") {
		amp, ouSD = 0, 0
	}
	if rng.IntN(2) == 0 {
		for i := range level {
			level[i] *= 1 + amp*float64(i)/float64(n)
		}
	} else {
		per, ph := uniform(rng, 1000, 5000), uniform(rng, 0, 2*math.Pi)
		for i := range level {
			level[i] *= 1 + amp/2*math.Sin(2*math.Pi*float64(i)/per+ph)
		}
	}
	ou, tau, sd := 0.0, uniform(rng, 50, 400), ouSD
	for i := range level {
		ou += -ou/tau + sd*math.Sqrt(2/tau)*rng.NormFloat64()
		level[i] *= 1 + ou
	}
	// Per-iteration jitter (Gaussian), larger on the network.
	sigma := uniform(rng, 0.005, 0.03)
	if comm {
		sigma = uniform(rng, 0.01, 0.05)
	}
	// Uneven sequence lengths: a lognormal token count per iteration
	// (mean 1), of which share a of the time scales with length.
	sigL, a := uniform(rng, 0.2, 0.6), uniform(rng, 0.03, 0.12)
	if !c.on("jitter") {
		sigma = 0
	}
	if !c.on("uneven_seqlen") {
		a = 0
	}
	// Periodic Python GC: one slow iteration every gcP (±1).
	gcP, gcAmp := 0, 0.0
	if rng.Float64() < 0.7 {
		gcP, gcAmp = 50+rng.IntN(351), uniform(rng, 0.1, 0.6)
	}
	allocP := uniform(rng, 0, 0.003) // allocator cache misses
	ckP := 0
	if rng.Float64() < 0.5 {
		ckP = 500 + rng.IntN(1501)
	}
	// Microbursts: ≤3-iteration slowdowns of 15–50% (a neighbour's burst),
	// about one per 2000 iterations; too short to be a fail-slow.
	burstRate := 1.0 / 2000
	if !c.on("gc") {
		gcP = 0
	}
	if !c.on("alloc_miss") {
		allocP = 0
	}
	if !c.on("checkpoint") {
		ckP = 0
	}
	if !c.on("microburst") {
		burstRate = 0
	}
	for _, nz := range []struct {
		name string
		on   bool
	}{{"drift", amp > 0}, {"jitter", sigma > 0}, {"uneven_seqlen", a > 0}, {"gc", gcP > 0}, {"alloc_miss", allocP > 0},
		{"checkpoint", ckP > 0}, {"microburst", burstRate > 0}} {
		if nz.on {
			s.Nuisances = append(s.Nuisances, nz.name)
		}
	}
	s.Iters = make([]float64, n)
	burstLeft, burstF := 0, 1.0
	for i := 0; i < n; i++ {
		t := s.BaseS * level[i]
		L := math.Exp(sigL*rng.NormFloat64() - sigL*sigL/2)
		t *= 1 + a*(L-1)
		t *= 1 + sigma*noise[i]*rng.NormFloat64()
		if burstLeft == 0 && rng.Float64() < burstRate {
			burstLeft, burstF = 1+rng.IntN(burstMax), 1+uniform(rng, 0.15, 0.5)
		}
		if burstLeft > 0 {
			t *= burstF
			burstLeft--
		}
		if gcP > 0 && i > 0 && i%gcP == 0 {
			t += s.BaseS * gcAmp * uniform(rng, 0.7, 1.3)
		}
		if rng.Float64() < allocP {
			t += s.BaseS * uniform(rng, 0.2, 1.0)
		}
		if ckP > 0 && i > 0 && i%ckP == 0 {
			t += uniform(rng, 5, 60) // a synchronous checkpoint save, seconds
		}
		if i < s.Warmup {
			// Warm-up: allocation, graph capture, bucket rebuilds.
			t *= 1 + 3*math.Exp(-float64(i)/4)
		}
		s.Iters[i] = max(t, 0.2*s.BaseS)
	}
	return s
}

// placeEvents draws a positive series' fail-slows, writes them into level
// and noise, and returns their labels.
func placeEvents(rng *rand.Rand, s *GreyhoundSeries, n int, comm bool, level, noise []float64, ordinal, total int) []FailSlow {
	cause, shape := causeFor(s.Class, ordinal, total)
	count := 1
	switch {
	case cause == "cpu_contention" && rng.IntN(2) == 0: // §3.2 Case-1: two episodes
		count = 2
	case comm && shape == ShapeStep && rng.Float64() < 0.3: // §3.3 Fig. 4
		count = 2
	}
	var evs []FailSlow
	start := s.Warmup + 200
	for k := 0; k < count; k++ {
		room := n - start
		if room < 300 {
			break
		}
		onset := start + rng.IntN(room*2/3)
		var durS float64
		if comm {
			// Lognormal, mean 24 min, sub-minute to hours (§3.3, Fig. 1).
			durS = min(max(1440*math.Exp(1.4*rng.NormFloat64()-1.4*1.4/2), 40), 9000)
		} else {
			// Exponential, mean 10 min (§3.2), at least a minute.
			durS = min(max(600*rng.ExpFloat64(), 60), 1800)
		}
		var loss float64
		if comm {
			loss = lossFloor + 0.7*betaish(rng) // −10%…−80%
		} else {
			loss = uniform(rng, lossFloor, 0.5) // −10%…−50%
		}
		ev := FailSlow{Onset: onset, Cause: cause, Shape: shape, Loss: loss}
		ev.Relief, ev.Loss = applyShape(rng, shape, s.BaseS, onset, durS, loss, level, noise)
		ev.Persistent = ev.Relief >= n
		if comm && !ev.Persistent && k == count-1 && rng.Float64() < 0.15 {
			// Persistent congestion: the job ends slow.
			f := level[ev.Relief-1]
			for i := ev.Relief; i < n; i++ {
				level[i], noise[i] = f, noise[ev.Relief-1]
			}
			ev.Relief, ev.Persistent = n, true
		}
		ev.Relief = min(ev.Relief, n)
		for i := ev.Onset; i < ev.Relief; i++ {
			ev.DurationS += s.BaseS * level[i]
		}
		evs = append(evs, ev)
		start = ev.Relief + 100
	}
	return evs
}

// applyShape writes one event starting at onset and returns its relief
// iteration and worst loss.
func applyShape(rng *rand.Rand, shape string, base float64, onset int, durS, loss float64, level, noise []float64) (int, float64) {
	n := len(level)
	set := func(a, b int, f, nz float64) {
		for i := max(a, 0); i < min(b, n); i++ {
			level[i] *= f
			noise[i] = max(noise[i], nz)
		}
	}
	iters := func(durS, f float64) int {
		return max(fsMinIters, int(math.Ceil(max(durS, fsMinS)/(base*f))))
	}
	// Jitter grows inside an event (contention and congestion fluctuate).
	nz := uniform(rng, 1.5, 3)
	switch shape {
	case ShapeLadder:
		k := 2 + rng.IntN(2)
		at := onset
		for j := 1; j <= k; j++ {
			lj := loss * float64(j) / float64(k)
			lj = max(lj, lossFloor)
			f := 1 / (1 - lj)
			m := iters(durS/float64(k), f)
			set(at, at+m, f, nz)
			at += m
		}
		return at, loss
	case ShapeCompound:
		f := 1 / (1 - loss)
		m := iters(durS, f)
		set(onset, onset+m, f, nz)
		// A GPU throttle (−10…−50%) inside the congestion (§3.4 Fig. 6).
		g := uniform(rng, 0.1, 0.5)
		a := onset + m/4 + rng.IntN(max(m/4, 1))
		b := a + max(fsMinIters, m/3)
		set(a, b, 1/(1-g), 1)
		return max(onset+m, b), 1 - (1-loss)*(1-g)
	case ShapeCreep:
		// Three consecutive 5–7% steps (each below the gate) that add up.
		at, f := onset, 1.0
		for j := 0; j < 3; j++ {
			f2 := f / (1 - uniform(rng, 0.05, 0.07))
			m := iters(durS/3, f2)
			set(at, onset+1<<30, f2/f, 0) // each step persists until relief
			at += m
			f = f2
		}
		// Undo the open-ended tail beyond relief.
		for i := at; i < n; i++ {
			level[i] /= f
		}
		return at, 1 - 1/f
	}
	f := 1 / (1 - loss)
	m := iters(durS, f)
	set(onset, onset+m, f, nz)
	return onset + m, loss
}

func uniform(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

// betaish is a Beta(2,3)-distributed draw (mean 0.4, mode 1/3): most
// congestion costs a third of throughput, a few cost far more.
func betaish(rng *rand.Rand) float64 {
	g := func(k int) float64 {
		s := 0.0
		for range k {
			s += rng.ExpFloat64()
		}
		return s
	}
	x, y := g(2), g(3)
	return x / (x + y)
}
