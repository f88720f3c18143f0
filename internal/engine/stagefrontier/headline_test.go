package stagefrontier

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// diagnose analyzes steps [from, to] and, when ref is set, compares them
// with the reference steps and re-diagnoses, as the analysis layer does.
func diagnose(t testing.TB, s ddpSim, from, to int64, ref *[2]int64, cfg Config) *Report {
	t.Helper()
	rep := analyzeOK(t, s.window(t, from, to), cfg)
	if ref != nil {
		base := analyzeOK(t, s.window(t, ref[0], ref[1]), cfg)
		Diagnose(rep, Compare(rep, base, "healthy reference"))
	}
	return rep
}

// A clear straggler is named at the stage where it creates the exposed
// tail, at every scale, with and without a healthy reference.
func TestHeadlineNamesClearStraggler(t *testing.T) {
	cases := []struct {
		R, rank, st int
		delay       float64
		stage       string
	}{
		{2, 1, simData, 60, stagevec.StageData},
		{4, 0, simData, 120, stagevec.StageData},
		{8, 5, simFwd, 80, stagevec.StageForward},
		{64, 41, simData, 40, stagevec.StageData},
		{256, 133, simData, 30, stagevec.StageData},
		{1024, 641, simData, 30, stagevec.StageData},
	}
	for _, c := range cases {
		for _, withRef := range []bool{false, true} {
			t.Run(fmt.Sprintf("R%d/ref=%v", c.R, withRef), func(t *testing.T) {
				s := ddpSim{R: c.R, T: 60, seed: uint64(c.R), extra: after(20, c.rank, c.st, c.delay)}
				var ref *[2]int64
				if withRef {
					ref = &[2]int64{0, 19}
				}
				rep := diagnose(t, s, 20, 59, ref, DefaultConfig())
				h := rep.Headline
				if h.Rank != c.rank || rep.LeaderRank != c.rank || h.Stage != c.stage {
					t.Fatalf("headline names rank %d at %q (withheld %q: %s), want rank %d at %q\n%s", h.Rank, h.Stage, h.Withheld, h.WithheldWhy, c.rank, c.stage, h.Text)
				}
				wantBasis := BasisStraggler
				if withRef {
					wantBasis = BasisExcess
				}
				if h.Basis != wantBasis {
					t.Errorf("basis %q, want %q: %s", h.Basis, wantBasis, h.Text)
				}
				if !strings.Contains(h.Text, fmt.Sprintf("rank %d", c.rank)) {
					t.Errorf("text does not name the rank: %s", h.Text)
				}
			})
		}
	}
}

// The rank is withheld, with the right reason, where stage vectors cannot
// single one out.
func TestHeadlineWithholdsRank(t *testing.T) {
	tie := func(t, r int) [5]float64 {
		var ex [5]float64
		if t >= 20 && (r == 1 || r == 3) {
			ex[simData] = 60
		}
		return ex
	}
	uniform := func(t, r int) [5]float64 {
		var ex [5]float64
		if t >= 20 {
			ex[simData] = 30
		}
		return ex
	}
	// A shared slowdown hits every rank by a different amount each step
	// (a slow shared filesystem): no rank leads persistently.
	jittery := func(t, r int) [5]float64 {
		var ex [5]float64
		if t >= 20 {
			ex[simData] = 30 + float64((t*7919+r*104729)%20)
		}
		return ex
	}
	cases := []struct {
		name   string
		sim    ddpSim
		ref    bool
		stage  string
		reason []Withheld
		ties   []int
	}{
		{"backward fault absorbed by the allreduce, 8 ranks", ddpSim{R: 8, T: 60, seed: 7, extra: after(20, 4, simBwd, 120)}, true, stagevec.StageBackward, []Withheld{WithheldAbsorbed}, nil},
		{"backward fault without reference", ddpSim{R: 8, T: 60, seed: 7, extra: after(0, 4, simBwd, 120)}, false, stagevec.StageBackward, []Withheld{WithheldAbsorbed}, nil},
		{"callback + barrier, 4 ranks", ddpSim{R: 4, T: 60, seed: 3, extra: after(20, 0, simCb, 120), cbBarrier: true}, true, stagevec.StageCallback, []Withheld{WithheldAbsorbed}, nil},
		{"two ranks tie, 8 ranks", ddpSim{R: 8, T: 60, seed: 11, extra: tie}, true, stagevec.StageData, []Withheld{WithheldTie}, []int{1, 3}},
		{"uneven shared slowdown with reference", ddpSim{R: 8, T: 60, seed: 5, extra: jittery}, true, stagevec.StageData, []Withheld{WithheldUniform}, nil},
		{"uneven shared slowdown, 1024 ranks", ddpSim{R: 1024, T: 40, seed: 5, extra: jittery}, true, stagevec.StageData, []Withheld{WithheldUniform}, nil},
		// Every rank slower by the same amount finishes data together: the
		// rank is withheld as absorbed (the text names the shared rise).
		{"even shared slowdown", ddpSim{R: 8, T: 60, seed: 5, extra: uniform, noise: 4}, true, stagevec.StageData, []Withheld{WithheldAbsorbed}, nil},
		// Without a reference the shared data rise is not visible as a
		// change: the largest share (backward) leads, and still no rank.
		{"even shared slowdown without reference", ddpSim{R: 8, T: 60, seed: 5, extra: uniform, noise: 4}, false, stagevec.StageBackward, []Withheld{WithheldAbsorbed}, nil},
		{"few steps", ddpSim{R: 4, T: 24, seed: 1, extra: after(20, 2, simData, 80)}, false, stagevec.StageData, []Withheld{WithheldFewSteps}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ref *[2]int64
			if c.ref {
				ref = &[2]int64{0, 19}
			}
			rep := diagnose(t, c.sim, 20, int64(c.sim.T-1), ref, DefaultConfig())
			h := rep.Headline
			if h.Rank != -1 || rep.LeaderRank != -1 {
				t.Fatalf("named rank %d; want it withheld (%v)\n%s", h.Rank, c.reason, h.Text)
			}
			if h.Stage != c.stage || !slices.Contains(c.reason, h.Withheld) {
				t.Fatalf("stage %q withheld %q, want %q for %v\n%s", h.Stage, h.Withheld, c.stage, c.reason, h.Text)
			}
			if h.WithheldWhy == "" || !strings.Contains(h.Text, "No consistent straggler rank") {
				t.Errorf("the headline must say why: %s", h.Text)
			}
			if c.ties != nil && !slices.Equal(h.TieSet, c.ties) {
				t.Errorf("tie set %v, want %v", h.TieSet, c.ties)
			}
		})
	}
}

// A leader that changes half way is not named.
func TestHeadlineUnstableLeader(t *testing.T) {
	s := ddpSim{R: 8, T: 80, seed: 13, extra: func(t, r int) [5]float64 {
		var ex [5]float64
		if (t < 40 && r == 2) || (t >= 40 && r == 6) {
			ex[simData] = 80
		}
		return ex
	}}
	rep := diagnose(t, s, 0, 79, nil, DefaultConfig())
	if h := rep.Headline; h.Rank != -1 || h.Withheld != WithheldUnstable {
		t.Fatalf("rank %d withheld %q, want unstable_leader\n%s", h.Rank, h.Withheld, h.Text)
	}
}

// A uniform slowdown is not a wait-displacement pattern even when the
// workload declares DDP (likely_sync_wait needs per-rank displacement).
func TestUniformSlowdownIsNotSyncWait(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ModelFit = true
	s := ddpSim{R: 8, T: 40, seed: 21, noise: 4, bwdMS: 20, extra: func(t, r int) [5]float64 { return [5]float64{120, 0, 0, 0, 0} }}
	rep := diagnose(t, s, 0, 39, nil, cfg)
	if rep.Top1 != stagevec.StageData {
		t.Fatalf("top1 %q, want data", rep.Top1)
	}
	if hasLabel(rep, LabelLikelySyncWait) {
		t.Fatalf("uniform slowdown claims likely_sync_wait: %v", rep.Labels)
	}
	// The same stage share with one straggler rank is the pattern.
	s.extra = after(0, 3, simData, 120)
	rep = diagnose(t, s, 0, 39, nil, cfg)
	if !hasLabel(rep, LabelLikelySyncWait) {
		t.Fatalf("single data straggler lacks likely_sync_wait: %v", labelNames(rep))
	}
}

// At 64+ ranks a steady large stage (backward) holds the largest absolute
// share, but the exposed tail a straggler adds in data is what changed:
// the headline points at data, and the absolute routing is still shown.
func TestSteadyLargeStageDoesNotOutrankExposedTail(t *testing.T) {
	for _, R := range []int{64, 256, 1024} {
		t.Run(fmt.Sprint(R), func(t *testing.T) {
			s := ddpSim{R: R, T: 70, seed: 3, bwdMS: 100, extra: after(30, R/3, simData, 25)}
			for _, ref := range []*[2]int64{{0, 29}, nil} {
				rep := diagnose(t, s, 30, 69, ref, DefaultConfig())
				if rep.Top1 != stagevec.StageBackward {
					t.Fatalf("fixture: absolute top1 %q, want the steady backward", rep.Top1)
				}
				h := rep.Headline
				if h.Stage != stagevec.StageData || h.Rank != R/3 {
					t.Fatalf("ref=%v: headline %q rank %d, want data rank %d\n%s", ref != nil, h.Stage, h.Rank, R/3, h.Text)
				}
				if !strings.Contains(h.Text, "largest share") {
					t.Errorf("headline hides the absolute share: %s", h.Text)
				}
			}
		})
	}
}

// Compare: the excess routing ranks what changed, independent of absolute
// shares, and immaterial changes are called steady.
func TestCompare(t *testing.T) {
	s := ddpSim{R: 16, T: 60, seed: 9, bwdMS: 100, extra: after(30, 2, simData, 30)}
	cur := analyzeOK(t, s.window(t, 30, 59), DefaultConfig())
	ref := analyzeOK(t, s.window(t, 0, 29), DefaultConfig())
	c := Compare(cur, ref, "before")
	if !c.Material || c.ExcessTop1 != stagevec.StageData || c.DeltaMS < 25 || c.DeltaMS > 35 {
		t.Fatalf("comparison %+v", c)
	}
	d, _ := c.stageDelta(stagevec.StageData)
	if d.DeltaShare <= 0.1 || d.CurTailMS < 25 {
		t.Errorf("data delta %+v", d)
	}
	same := Compare(ref, analyzeOK(t, s.window(t, 0, 14), DefaultConfig()), "first half")
	if same.Material {
		t.Errorf("a healthy window against a healthy one is material: %+v", same)
	}
	if !strings.Contains(same.describe(), "steady") {
		t.Errorf("describe: %s", same.describe())
	}
}
