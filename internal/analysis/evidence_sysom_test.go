package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/incident"
)

// sysomGolden wraps one of the engine's golden reports (the paper's
// cases) as the server serves it.
func sysomGolden(t testing.TB, name string) *SysomReport {
	t.Helper()
	var rep sysom.Report
	readJSON(t, "../engine/sysom/testdata/"+name+".golden.json", &rep)
	return &SysomReport{Report: &rep, Job: "j", Window: SysomWindow{FromNS: t0, ToNS: t0 + 60e9, BaseFromNS: t0 - 120e9, BaseToNS: t0 - 60e9, Ranks: 16}}
}

type sysomWant struct {
	kind       incident.Kind
	targets    []string
	layer      incident.Layer
	category   incident.Category
	confidence incident.Confidence
}

// The real OS cases (eval/sysom) and the paper's (engine goldens): every
// slow rank, waterline rank, diagnosis and temporal comparison is one
// finding, with the fields fusion reads.
func TestSysomEvidence(t *testing.T) {
	cases := []struct {
		name string
		rep  func(testing.TB) *SysomReport
		want []sysomWant
	}{
		{"real hog", func(t testing.TB) *SysomReport { return sysomFixture(t, "hog-1") }, []sysomWant{
			{incident.KindSysomDiagnosis, []string{"rank:1"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceLow},
			{incident.KindSysomTemporal, []string{"rank:1"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceLow},
			{incident.KindSysomWaterline, []string{"rank:1"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceLow},
		}},
		// Rank 2 is late, but its delay explains 44% of the rise, under the
		// engine's 50%: a candidate, not a stated cause.
		{"real softirq", func(t testing.TB) *SysomReport { return sysomFixture(t, "softirq-2") }, []sysomWant{
			{incident.KindSysomDiagnosis, []string{"rank:2"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceLow},
			{incident.KindSysomSlowRank, []string{"rank:2"}, incident.LayerCollective, incident.CategoryUnknown, incident.ConfidenceLow},
			{incident.KindSysomWaterline, []string{"rank:2"}, incident.LayerCPU, incident.CategoryUnknown, incident.ConfidenceLow},
		}},
		{"real logging", func(t testing.TB) *SysomReport { return sysomFixture(t, "logging-1") }, []sysomWant{
			{incident.KindSysomTemporal, []string{"job"}, incident.LayerCPU, incident.CategoryCompute, incident.ConfidenceLow},
		}},
		// The hog ran on rank 1's cores, but rank 1 was on time at its
		// collectives: the engine does not diagnose that flag, nor does
		// the incident hear of it.
		{"real vfs", func(t testing.TB) *SysomReport { return sysomFixture(t, "vfs-1") }, []sysomWant{
			{incident.KindSysomTemporal, []string{"job"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceLow},
		}},
		{"thermal", func(t testing.TB) *SysomReport { return sysomGolden(t, "case1_thermal") }, []sysomWant{
			{incident.KindSysomDiagnosis, []string{"rank:0"}, incident.LayerGPU, incident.CategoryCompute, incident.ConfidenceHigh},
			{incident.KindSysomSlowRank, []string{"rank:0"}, incident.LayerCollective, incident.CategoryUnknown, incident.ConfidenceHigh},
		}},
		{"ingestion", func(t testing.TB) *SysomReport { return sysomGolden(t, "case5_ingestion") }, []sysomWant{
			{incident.KindSysomTemporal, []string{"job"}, incident.LayerCPU, incident.CategoryData, incident.ConfidenceLow},
		}},
		{"vfs dentry", func(t testing.TB) *SysomReport { return sysomGolden(t, "case3_vfs_dentry") }, []sysomWant{
			{incident.KindSysomDiagnosis, []string{"rank:8"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceHigh},
			{incident.KindSysomDiagnosis, []string{"rank:9"}, incident.LayerCPU, incident.CategoryOS, incident.ConfidenceHigh},
			{incident.KindSysomSlowRank, []string{"rank:8"}, incident.LayerCollective, incident.CategoryUnknown, incident.ConfidenceHigh},
			{incident.KindSysomSlowRank, []string{"rank:9"}, incident.LayerCollective, incident.CategoryUnknown, incident.ConfidenceHigh},
			{incident.KindSysomWaterline, []string{"rank:8"}, incident.LayerCPU, incident.CategoryUnknown, incident.ConfidenceLow},
			{incident.KindSysomWaterline, []string{"rank:9"}, incident.LayerCPU, incident.CategoryUnknown, incident.ConfidenceLow},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := c.rep(t)
			evs := SysomEvidence(rep, map[int]string{}, EvidenceEnv{AtNS: 3})
			if len(evs) != len(c.want) {
				for _, e := range evs {
					t.Logf("%s %v", e.ID, targetKeys(e.Targets))
				}
				t.Fatalf("%d evidence, want %d", len(evs), len(c.want))
			}
			for i, w := range c.want {
				e := evs[i]
				if e.Kind != w.kind || !slices.Equal(targetKeys(e.Targets), w.targets) || e.Layer != w.layer || e.Category != w.category || e.Confidence != w.confidence {
					t.Errorf("%s: kind %s targets %v layer %q category %q confidence %q, want %+v", e.ID, e.Kind, targetKeys(e.Targets), e.Layer, e.Category, e.Confidence, w)
				}
				if e.Window.FromNS != rep.Window.FromNS || e.Window.ToNS != rep.Window.ToNS || !strings.Contains(e.ID, "/"+timePart(rep.Window.FromNS)) {
					t.Errorf("%s: window %+v, report's %+v", e.ID, e.Window, rep.Window)
				}
				if !strings.HasPrefix(e.View, "/api/v1/jobs/j/sysom?") || (rep.Window.BaseFromNS > 0 && !strings.Contains(e.View, "base_from_ns=")) {
					t.Errorf("%s: view %s", e.ID, e.View)
				}
			}
		})
	}
}

// Whether a slow rank explains the rise is the engine's rule with the
// configuration the report was made with.
func TestSysomSlowRankExplains(t *testing.T) {
	rep := sysomFixture(t, "softirq-2")
	cfg := sysom.DefaultConfig()
	cfg.MinExplain = 0.4
	e := byID(SysomEvidence(rep, nil, EvidenceEnv{Sysom: cfg}), "sysom.slow_rank/")
	if e == nil || e.Confidence != incident.ConfidenceHigh {
		t.Errorf("with MinExplain 0.4 the 44%% delay explains: %+v", e)
	}
	e = byID(SysomEvidence(rep, nil, EvidenceEnv{}), "sysom.slow_rank/")
	if e == nil || e.Confidence != incident.ConfidenceLow || !strings.Contains(e.Reason, "explains only 44%") {
		t.Errorf("with the defaults: %+v", e)
	}
}

// A diagnosis that concludes no layer is a withholding; one without a
// healthy peer says so.
func TestSysomDiagnosisInconclusive(t *testing.T) {
	for _, peer := range []int{-1, 3} {
		rep := &SysomReport{Job: "j", Window: SysomWindow{FromNS: t0, ToNS: t0 + 1e9}, Report: &sysom.Report{Diagnoses: []sysom.Diagnosis{
			{Rank: 2, Group: "world", Peer: peer, Layer: sysom.LayerInconclusive, Confidence: sysom.ConfidenceLow, Summary: "inconclusive"}}}}
		e := byID(SysomEvidence(rep, nil, EvidenceEnv{}), "sysom.diagnosis/")
		if e == nil || e.Confidence != incident.ConfidenceWithheld || e.Withheld != "inconclusive" || len(e.Targets) != 0 {
			t.Errorf("peer %d: %+v", peer, e)
		}
	}
	if SysomEvidence(&SysomReport{Report: &sysom.Report{}}, nil, EvidenceEnv{}) != nil {
		t.Error("a report that names no job gave evidence")
	}
}
