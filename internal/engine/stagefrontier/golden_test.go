package stagefrontier

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// TestGoldenReport pins the full Report JSON of the §2 sync-wait fixture
// with hosts, roles and forward event samples. Run with -update after an
// intended change and review the diff.
func TestGoldenReport(t *testing.T) {
	job := testJob(3, 1)
	for r := 0; r < 3; r++ {
		job.Ranks = append(job.Ranks, signal.Rank{Rank: r, Host: "node-" + string(rune('a'+r)), Role: signal.Role{DP: r, PP: 0, Name: "dense"}})
	}
	vs := syncWaitVectors(4)
	for i, v := range vs {
		v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 1.5, Ready: i%5 != 0}}
	}
	cfg := DefaultConfig()
	cfg.ModelFit = true
	rep := analyzeOK(t, assemble(t, job, AssembleOptions{}, vs...), cfg)
	got, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "sync_wait_report.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestGoldenReport -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("report differs from %s; rerun with -update and review the diff:\n%s", path, got)
	}
}
