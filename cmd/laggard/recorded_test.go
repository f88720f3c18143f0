package main

import (
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Series recorded from the real DDP demo trainer (gloo, CPU) with a 120 ms
// fault on a hidden rank from step 10: the time axis finds the onset
// there, the default window starts at it, and the rank is named or
// honestly withheld — never wrong.
func TestRecordedSeries(t *testing.T) {
	cases := []struct {
		file     string
		stage    string
		rank     int
		withheld stagefrontier.Withheld
	}{
		{"testdata/ddp4-data-onset10.jsonl", stagevec.StageData, 0, ""},
		{"testdata/ddp8-backward-onset10.jsonl.gz", stagevec.StageBackward, -1, stagefrontier.WithheldAbsorbed},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			code, out, errs := runCLI(t, "analyze", c.file, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var rep analysis.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			cps := rep.Timeline.ChangePoints
			if len(cps) != 1 || cps[0].Kind != analysis.Onset || cps[0].Step < 10 || cps[0].Step > 11 {
				t.Fatalf("change points %+v, want one onset at step 10", cps)
			}
			if rep.Window.Basis != analysis.BasisSinceChange || rep.Window.From != cps[0].Step {
				t.Errorf("window %+v", rep.Window)
			}
			h := rep.Headline
			if h.Stage != c.stage || h.Rank != c.rank || h.Withheld != c.withheld || h.Basis != stagefrontier.BasisExcess {
				t.Errorf("headline stage %q rank %d withheld %q basis %q, want %q %d %q excess\n%s", h.Stage, h.Rank, h.Withheld, h.Basis, c.stage, c.rank, c.withheld, h.Text)
			}
		})
	}
}
