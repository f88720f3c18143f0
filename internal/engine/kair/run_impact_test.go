package kair

import (
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Issue 16 items 6a and 7a: a cause that cost its own rank time is named
// only when the other ranks waited for that time at their collectives, in
// more than half the analysed steps. Rank 2's backward op runs 30 ms long in
// every step (a material 10%+ of the step, 2× anything else); in the
// "absorbed" steps every other rank spends longer still outside any
// profiled operator before the AllReduce (an un-profiled host wait), so
// rank 2 is not the one they wait for there.
func TestRunCulpritMustExplainTheWait(t *testing.T) {
	const slow = 30_000_000
	for _, c := range []struct {
		name     string
		absorbed map[int64]bool
		want     TraceVerdict
		say      string
	}{
		{"waited for in every step", nil, VerdictCulprit, "accounts for"},
		{"absorbed in 2 of 3 steps", map[int64]bool{1: true, 2: true}, VerdictInconclusive, "did not wait for it"},
		{"absorbed in every step", map[int64]bool{0: true, 1: true, 2: true}, VerdictInconclusive, "never the last to arrive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(20, 20) }, func(s int64, p [][]op) {
				p[2][22].dur += slow
				if c.absorbed[s] {
					for r := range p {
						if r != 2 {
							p[r][40].gap += slow + slow/2 // before the AllReduce
						}
					}
				}
			}))
			rep := mustRun(t, tr, nil, DefaultRunConfig())
			if rep.Verdict != c.want || !strings.Contains(rep.Headline, c.say) {
				t.Fatalf("verdict %s, want %s saying %q:\n%s", rep.Verdict, c.want, c.say, dumpRun(rep))
			}
			if len(rep.Causes) == 0 || rep.Causes[0].Rank != 2 || rep.Causes[0].Name != "aten::bwd2" {
				t.Fatalf("top cause is not rank 2's slow op:\n%s", dumpRun(rep))
			}
			im := rep.Impact
			if im == nil || !im.Checked || im.Rank != 2 || im.Material != (c.want == VerdictCulprit) {
				t.Fatalf("impact %+v", im)
			}
			// The excess is material either way; what differs is the wait.
			if float64(im.ExcessNS) < 0.1*float64(im.StepNS) {
				t.Errorf("excess %d of a %d ns step: the scenario lost its point", im.ExcessNS, im.StepNS)
			}
			if c.want == VerdictCulprit && (im.ExplainedNS < slow*9/10 || im.HeldSteps != 3) {
				t.Errorf("culprit explains %d ns (held in %d steps), want ≈ %d in 3", im.ExplainedNS, im.HeldSteps, slow)
			}
		})
	}
}

// Issue 16 item 7c: two candidates of comparable cost on one rank make the
// rank certain (verdict culprit_rank, both listed); on two ranks that both
// arrive late at the collective neither is named; a candidate whose rank
// is not late at any collective (its time is after the AllReduce, where
// nobody waits for it) does not compete (6a).
func TestRunCandidatesOnOneRank(t *testing.T) {
	for _, c := range []struct {
		name       string
		secondRank int
		secondOp   int
		want       TraceVerdict
	}{
		{"same rank", 2, 25, VerdictRank},
		{"different ranks", 1, 25, VerdictInconclusive},
		{"other rank not late", 1, 41, VerdictCulprit}, // optimizer.step, after the AllReduce
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(20, 20) }, func(_ int64, p [][]op) {
				p[2][5].dur += 30_000_000                     // a forward op
				p[c.secondRank][c.secondOp].dur += 24_000_000 // within 2× of it
			}))
			rep := mustRun(t, tr, nil, DefaultRunConfig())
			if rep.Verdict != c.want {
				t.Fatalf("verdict %s, want %s:\n%s", rep.Verdict, c.want, dumpRun(rep))
			}
			switch c.want {
			case VerdictInconclusive:
				if !strings.Contains(rep.Headline, "neither is named") || !strings.Contains(rep.Headline, "after the median rank") {
					t.Errorf("headline %s", rep.Headline)
				}
				return
			case VerdictCulprit:
				if rep.Causes[0].Rank != 2 || rep.Causes[1].Rank != 1 || rep.Causes[1].Name != "optimizer.step" || rep.Impact == nil || rep.Impact.Rank != 2 {
					t.Errorf("causes %+v impact %+v", rep.Causes[:2], rep.Impact)
				}
				return
			}
			for _, s := range []string{"Culprit rank 2", "aten::fwd5", "aten::bwd5", "together they account for"} {
				if !strings.Contains(rep.Headline, s) {
					t.Errorf("headline lacks %q: %s", s, rep.Headline)
				}
			}
			if im := rep.Impact; im == nil || im.Rank != 2 || len(im.Causes) != 2 || !im.Material {
				t.Errorf("impact %+v", im)
			}
		})
	}
}

// Issue 16 item 12: events may come in any order, but one thread's step
// ranges may not overlap. A rank whose step 2 starts before its step 1
// ends (a clock stepped back mid-capture) is named in the headline.
func TestRunClockWentBackwards(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(10, 10) }, nil))
	for r := range tr {
		ends := map[int64]int64{}
		for _, e := range tr[r].Events {
			ends[e.Step] = max(ends[e.Step], e.EndNS())
		}
		for i := range tr[r].Events {
			if e := &tr[r].Events[i]; e.Cat == optrace.UserRange {
				e.DurNS = ends[e.Step] - e.StartNS
			}
		}
	}
	clean := mustRun(t, tr, nil, DefaultRunConfig())
	if strings.Contains(clean.Headline, "back in time") {
		t.Fatalf("clean trace: %s", clean.Headline)
	}
	for i := range tr[1].Events {
		if e := &tr[1].Events[i]; e.Step == 2 {
			e.StartNS -= 400_000 // the clock stepped back 0.4 ms before step 2
		}
	}
	rep := mustRun(t, tr, nil, DefaultRunConfig())
	if !strings.Contains(rep.Headline, "Rank 1's trace goes back in time at 1 step boundary(ies) (ProfilerStep#2 starts") {
		t.Fatalf("headline: %s", rep.Headline)
	}
}

// Issue 16 item 6a for Stage 1: a rank whose rhythm differs (extra copies
// no other rank has) but that nobody waits for is named with that said.
func TestRunRhythmStragglerNobodyWaitsFor(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), everyStep(8, func() []op { return richProgram(20, 20) }, nil))
	copyBurst(tr, 6, 3)
	cfg := DefaultRunConfig()
	cfg.Rhythm.Categories = []optrace.Category{optrace.CPUOp, optrace.Memcpy, optrace.Collective}
	rep := mustRun(t, tr, nil, cfg)
	if rep.Rhythm.Verdict != RhythmStraggler || rep.Rhythm.Straggler != 6 || rep.Verdict == VerdictCulprit ||
		!strings.Contains(rep.Headline, "the other ranks did not wait for rank 6 at collectives") {
		t.Fatalf("%s", dumpRun(rep))
	}
}

// Noise-awareness with few steps: of two analysed steps, one in which a
// rank's op ran long and held the others is one noisy step, not a
// culprit (both steps must show it); in both, it is named.
func TestRunTwoStepsNeedBoth(t *testing.T) {
	for _, c := range []struct {
		slow map[int64]bool
		want TraceVerdict
	}{
		{map[int64]bool{1: true}, VerdictInconclusive},
		{map[int64]bool{0: true, 1: true}, VerdictCulprit},
	} {
		tr := simulateSteps(stepsUpTo(2), everyStep(4, func() []op { return richProgram(20, 20) }, func(s int64, p [][]op) {
			if c.slow[s] {
				p[3][10].dur += 30_000_000
			}
		}))
		rep := mustRun(t, tr, nil, DefaultRunConfig())
		if rep.Verdict != c.want || len(rep.Analysed) != 2 {
			t.Errorf("slow in steps %v: verdict %s, want %s: %s", c.slow, rep.Verdict, c.want, rep.Headline)
		}
	}
}
