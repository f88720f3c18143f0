package kair

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// Golden TraceReport (the JSON `laggard trace --json` and the API serve)
// of a small multi-step capture: 4 ranks, 3 steps, rank 2's fwd2 slow in
// every step, rank 3's clock 2 ms ahead. Regenerate with
// go test -run GoldenRun -update after a deliberate change and review
// the diff.
func TestGoldenRunReport(t *testing.T) {
	tr := simulateSteps(stepsUpTo(3), everyStep(4, func() []op { return richProgram(8, 8) }, func(_ int64, p [][]op) {
		p[2][2].dur *= 30
	}))
	tr = skewed(tr, map[int]int64{3: 2_000_000})
	cfg := DefaultRunConfig()
	cfg.Rhythm.Windows = 16
	rep := mustRun(t, tr, nil, cfg)
	got, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "run_slow_op_4ranks.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("report differs from %s:\n%s", path, got)
	}
	// The fixture must stay meaningful, not merely stable.
	if rep.Verdict != VerdictCulprit || rep.Causes[0].Rank != 2 || rep.Causes[0].Name != "aten::fwd2" ||
		rep.Clock[3].OffsetNS != -2_000_000 {
		t.Fatalf("fixture lost its point: %s", dumpRun(rep))
	}
}
