package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
)

func sysomFixture() *analysis.SysomReport {
	return &analysis.SysomReport{
		Window: analysis.SysomWindow{FromNS: 1751372100e9, ToNS: 1751372400e9, Basis: analysis.BasisLatest,
			BaseFromNS: 1751371320e9, BaseToNS: 1751371620e9, BaseBasis: analysis.BasisFirstSteady, Ranks: 4, Samples: 240, BaseRanks: 4, Calls: 1200, OSBatches: 60},
		Report: &sysom.Report{
			SlowRanks: []sysom.SlowRank{{Group: "world", Rank: 2, MeanLateMs: 30, PeerMeanMs: 0.01, PeerSigmaMs: 0.02, Z: 1499, Instances: 100, LastShare: 1, Align: sysom.AlignExit}},
			Waterline: []sysom.WaterlineFlag{{Group: "world", Rank: 2, Func: "d_lookup", Kind: "symbol", Fraction: 0.21, Mean: 0, Sigma: 0, Z: 1e6, Samples: 1440, New: true}},
			Diagnoses: []sysom.Diagnosis{{Rank: 2, Group: "world", Peer: 0, Flagged: []string{"slow_rank", "waterline"}, Layer: sysom.LayerCPU, Cause: sysom.CauseVFSLock,
				Confidence: sysom.ConfidenceHigh, Summary: "rank 2 spends 21% of its CPU in d_lookup under log_stats; its peers do not.",
				Layers: []sysom.Layer{
					{Layer: sysom.LayerGPU, Finding: sysom.FindingNotObserved, Evidence: []string{"no GPU kernel timings"}},
					{Layer: sysom.LayerCPU, Finding: sysom.FindingDiffers, Cause: sysom.CauseVFSLock, Evidence: []string{"new hot path"},
						Paths: []sysom.HotPath{{Func: "d_lookup", Stack: []string{"main", "train_step", "log_stats", "vfs_statx", "a", "b", "c", "d", "d_lookup"}, Fraction: 0.21, Samples: 1440, Cause: sysom.CauseVFSLock}},
						Next:  "a system service churns the dentry cache"}}}},
			Notes: []string{"GPU layer not observed"},
		},
	}
}

func TestSysomText(t *testing.T) {
	var b bytes.Buffer
	if err := Sysom(&b, sysomFixture()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"SysOM-AI · window 2025-07-01 12:15:00 → 12:20:00 UTC (5m0s, latest)",
		"baseline  2025-07-01 12:02:00 → 12:07:00 UTC (first_steady)",
		"▶ 1 rank(s) diagnosed",
		"rank 2 (group world, peer rank 0; flagged by slow_rank, waterline): layer cpu · vfs_dentry_lock · confidence high",
		"  gpu  not_observed",
		"d_lookup 21.00% vs peer 0.00% (1440 samples) [vfs_dentry_lock]",
		"main → train_step → log_stats → … → b → c → d → d_lookup",
		"next: a system service churns the dentry cache",
		"d_lookup (new)",
		"  - GPU layer not observed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if testing.Verbose() {
		t.Log("\n" + out)
	}
	// A report without the engine part (decoded from a partial JSON) still renders.
	var e bytes.Buffer
	if err := Sysom(&e, &analysis.SysomReport{}); err != nil || !strings.Contains(e.String(), "no report") {
		t.Errorf("empty report: %v %q", err, e.String())
	}
}
