package sysom

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// scenarioUntil builds a scenario file's input up to its first command.
func scenarioUntil(t *testing.T, file string) *scenario {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sc := newScenario()
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "> ") {
			break
		}
		if l != "" && !strings.HasPrefix(l, "#") {
			if err := sc.setup(l); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
		}
	}
	return sc
}

// TestOnTimeWaterlineRanksNotDiagnosed (issue 16 item 8b): in the demo's
// layout — a hog on rank 0's core, other processes landing unevenly on
// the core ranks 1-3 share — every rank used to be flagged and
// diagnosed, none had a healthy peer, and the hogged rank's diagnosis
// was "inconclusive". Ranks that enter their collectives on time are
// listed but not diagnosed, and serve as peers.
func TestOnTimeWaterlineRanksNotDiagnosed(t *testing.T) {
	sc := scenarioUntil(t, "testdata/shared_core_foreign.txt")
	rep, err := Analyze(sc.input(), sc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var named []int
	for _, d := range rep.Diagnoses {
		named = append(named, d.Rank)
	}
	if !slices.Equal(named, []int{0}) {
		t.Fatalf("diagnosed ranks %v, want only the hogged rank 0:\n%s", named, render(rep))
	}
	d := rep.Diagnoses[0]
	if d.Layer != LayerCPU || d.Cause != CauseForeign || d.Peer < 1 {
		t.Errorf("rank 0: layer %s cause %s peer %d, want the CPU layer's foreign process against a peer", d.Layer, d.Cause, d.Peer)
	}
	for _, w := range rep.Waterline {
		if w.Rank != 0 && !w.OnTime {
			t.Errorf("rank %d's %s not marked on time", w.Rank, w.Func)
		}
		if w.Rank != 0 && !w.Foreign {
			t.Errorf("rank %d's row %s: only another process's root frame should be a row here", w.Rank, w.Func)
		}
	}
}

// TestVerdictMustExplainTheRise (issue 16 item 6a): a slow rank whose
// delay is 4% of the observed rise is not a high-confidence verdict; the
// same delay explaining the whole rise is.
func TestVerdictMustExplainTheRise(t *testing.T) {
	sc := scenarioUntil(t, "testdata/unexplained_rise.txt")
	in := sc.input()
	rep, err := Analyze(in, sc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diagnoses) != 1 || rep.Diagnoses[0].Rank != 3 {
		t.Fatalf("diagnoses %+v", rep.Diagnoses)
	}
	d := rep.Diagnoses[0]
	if d.Confidence != ConfidenceLow || d.Explained.Basis != ExplainRise || d.Explained.Share > 0.1 || !strings.Contains(d.Summary, "explains only") {
		t.Fatalf("a 4.8 ms delay against a +120 ms rise: confidence %s, explained %+v\n%s", d.Confidence, d.Explained, d.Summary)
	}
	// Scale the rise down to what the delay accounts for.
	in.IterMs = in.IterBaseMs + 5
	rep, err = Analyze(in, sc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d := rep.Diagnoses[0]; d.Confidence != ConfidenceHigh || d.Explained.Share < 0.5 {
		t.Fatalf("a 4.8 ms delay against a +5 ms rise: confidence %s, explained %+v\n%s", d.Confidence, d.Explained, d.Summary)
	}
}
