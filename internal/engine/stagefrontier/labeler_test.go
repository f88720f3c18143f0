package stagefrontier

import (
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// syncWaitVectors is the §2 fixture: rank 1's data arrives late (4 vs 1);
// ranks 0 and 2 wait for it inside backward (5 vs 2).
func syncWaitVectors(steps int) []*stagevec.Vector {
	var vs []*stagevec.Vector
	for s := int64(1); s <= int64(steps); s++ {
		vs = append(vs, vec(s, 0, 1, 2, 5, 0, 1), vec(s, 1, 4, 2, 2, 0, 1), vec(s, 2, 1, 2, 5, 0, 1))
	}
	return vs
}

func TestSyncWaitFixture(t *testing.T) {
	w := assemble(t, testJob(3, 1), AssembleOptions{}, syncWaitVectors(10)...)
	for _, fit := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.ModelFit = fit
		rep := analyzeOK(t, w, cfg)
		if rep.Top1 != stagevec.StageData {
			t.Fatalf("frontier top1 = %q, want data", rep.Top1)
		}
		if want := []float64{40, 20, 20, 0, 10, 0}; !slices.Equal(rep.AdvanceMS, want) {
			t.Errorf("advances = %v, want %v", rep.AdvanceMS, want)
		}
		for _, m := range []string{MethodPerStageMax, MethodPerStageAvg} {
			if b := baseline(rep, m); b.Top1 == stagevec.StageData {
				t.Errorf("%s routes to data; the fixture says it must not", m)
			}
		}
		if rep.LeaderRank != 1 {
			t.Errorf("LeaderRank = %d, want 1", rep.LeaderRank)
		}
		if fit {
			for _, l := range []LabelName{LabelLikelySyncWait, LabelSyncWaitDependent} {
				if !hasLabel(rep, l) {
					t.Errorf("model_fit=true: missing %s in %v", l, labelNames(rep))
				}
			}
		} else {
			if !hasLabel(rep, LabelCoCritical) || !slices.Equal(rep.CoCriticalStages, []string{stagevec.StageData, stagevec.StageBackward}) {
				t.Errorf("model_fit=false: labels %v co-critical %v, want co_critical {data, backward}", labelNames(rep), rep.CoCriticalStages)
			}
			if hasLabel(rep, LabelSyncWaitDependent) || hasLabel(rep, LabelLikelySyncWait) {
				t.Errorf("model_fit=false must not claim sync wait: %v", labelNames(rep))
			}
		}
		if !hasLabel(rep, LabelFrontierAccounting) {
			t.Errorf("frontier_accounting missing")
		}
	}
}

// directVectors: intermittent backward stalls on every rank (3 of 10 steps).
func directVectors(R int) []*stagevec.Vector {
	var vs []*stagevec.Vector
	for s := int64(0); s < 10; s++ {
		bwd := 5.0
		if s == 2 || s == 5 || s == 8 {
			bwd = 50
		}
		for r := 0; r < R; r++ {
			vs = append(vs, vec(s, r, 1, 2, bwd, 0, 1))
		}
	}
	return vs
}

func TestDirectExposure(t *testing.T) {
	rep := analyzeOK(t, assemble(t, testJob(4, 1), AssembleOptions{}, directVectors(4)...), DefaultConfig())
	if rep.Top1 != stagevec.StageBackward || !hasLabel(rep, LabelDirectExposure) {
		t.Fatalf("top1 %q labels %v, want backward with direct_exposure", rep.Top1, labelNames(rep))
	}
	if g := rep.GainMS[BaselineRankMedian][2]; g != 135 {
		t.Errorf("rank-median gain of backward = %v, want 3×45", g)
	}
	if hasLabel(rep, LabelCoCritical) {
		t.Errorf("unexpected co_critical: %v", rep.Labels)
	}
}

func TestDowngradeLabels(t *testing.T) {
	tests := []struct {
		name   string
		job    func() *signal.Job
		vecs   func() []*stagevec.Vector
		want   LabelName
		absent LabelName
		co     []string
	}{
		{
			name: "two-stage tie", job: func() *signal.Job { return testJob(2, 1) },
			vecs: func() []*stagevec.Vector {
				return []*stagevec.Vector{vec(0, 0, 5, 5, 1), vec(0, 1, 5, 5, 1), vec(1, 0, 5, 5, 1), vec(1, 1, 5, 5, 1)}
			},
			want: LabelCoCritical, co: []string{stagevec.StageData, stagevec.StageForward},
		},
		{
			name: "role heterogeneous", want: LabelRoleAwareNeeded, absent: LabelDirectExposure,
			job: func() *signal.Job {
				j := testJob(4, 1)
				for r := 0; r < 4; r++ {
					j.Ranks = append(j.Ranks, signal.Rank{Rank: r, Role: signal.Role{PP: r % 2, Name: "dense"}})
				}
				return j
			},
			vecs: func() []*stagevec.Vector { return directVectors(4) },
		},
		{
			name: "dropped vectors", job: func() *signal.Job { return testJob(4, 1) }, want: LabelTelemetryLimited, absent: LabelDirectExposure,
			vecs: func() []*stagevec.Vector { vs := directVectors(4); vs[3].Dropped = 2; return vs },
		},
		{
			name: "closure residual", job: func() *signal.Job { return testJob(4, 1) }, want: LabelTelemetryLimited, absent: LabelDirectExposure,
			vecs: func() []*stagevec.Vector {
				vs := directVectors(4)
				for _, v := range vs {
					if v.Rank == 2 {
						v.Durations = v.Durations[:5]
						v.WallMS *= 2 // half the step is not covered by spans
					}
				}
				return vs
			},
		},
		{
			name: "missing rank", job: func() *signal.Job { return testJob(5, 1) }, want: LabelTelemetryLimited, absent: LabelDirectExposure,
			vecs: func() []*stagevec.Vector { return directVectors(4) },
		},
		{
			name: "accumulation collapsed", job: func() *signal.Job { return testJob(4, 2) }, want: LabelGradAccumAmbiguous, absent: LabelDirectExposure,
			vecs: func() []*stagevec.Vector { return directVectors(4) }, // only micro 0 arrives
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyzeOK(t, assemble(t, tc.job(), AssembleOptions{}, tc.vecs()...), DefaultConfig())
			if !hasLabel(rep, tc.want) {
				t.Fatalf("labels %v, want %s", labelNames(rep), tc.want)
			}
			if tc.absent != "" && hasLabel(rep, tc.absent) {
				t.Errorf("labels %v must not contain %s", labelNames(rep), tc.absent)
			}
			if tc.co != nil && !slices.Equal(rep.CoCriticalStages, tc.co) {
				t.Errorf("co-critical %v, want %v", rep.CoCriticalStages, tc.co)
			}
			for _, l := range rep.Labels {
				if l.Axis == "" || l.Reason == "" {
					t.Errorf("label %s lacks axis or reason: %+v", l.Name, l)
				}
			}
		})
	}
}

// forwardVectors: 4 ranks, 6 steps with forward CPU wall fwd and backward
// bwd on every rank, and a CUDA-event forward sample of event ms.
func forwardVectors(fwd, bwd, event float64, ready bool) []*stagevec.Vector {
	var vs []*stagevec.Vector
	for s := int64(0); s < 6; s++ {
		for r := 0; r < 4; r++ {
			f := fwd
			if r == 1 && s%2 == 0 {
				f += 1 // rank 1 leads forward so the leader's samples are used
			}
			v := vec(s, r, 1, f, bwd, 0, 1)
			v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: event, Ready: ready}}
			vs = append(vs, v)
		}
	}
	return vs
}

func TestForwardLabels(t *testing.T) {
	tests := []struct {
		name            string
		fwd, bwd, event float64
		ready           bool
		want            []LabelName
		absent          []LabelName
	}{
		{"device supported + spillover", 20, 60, 40, true, []LabelName{LabelForwardDeviceSupported, LabelForwardSpillover}, []LabelName{LabelForwardHostOverhead}},
		{"host overhead", 60, 20, 2, true, []LabelName{LabelForwardHostOverhead}, []LabelName{LabelForwardDeviceSupported, LabelForwardSpillover}},
		{"scope limited", 20, 60, 40, false, []LabelName{LabelForwardEventScopeLimits}, []LabelName{LabelForwardDeviceSupported, LabelForwardHostOverhead}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyzeOK(t, assemble(t, testJob(4, 1), AssembleOptions{}, forwardVectors(tc.fwd, tc.bwd, tc.event, tc.ready)...), DefaultConfig())
			for _, l := range tc.want {
				if !hasLabel(rep, l) {
					t.Errorf("missing %s in %v", l, labelNames(rep))
				}
			}
			for _, l := range tc.absent {
				if hasLabel(rep, l) {
					t.Errorf("unexpected %s in %v", l, labelNames(rep))
				}
			}
			if rep.Quality.EventSamples != 24 {
				t.Errorf("event samples = %d, want 24", rep.Quality.EventSamples)
			}
		})
	}
}

func TestLeaderSwitches(t *testing.T) {
	var vs []*stagevec.Vector
	for s := int64(0); s < 8; s++ {
		slow := int(s % 2) // the slow rank alternates every step
		for r := 0; r < 3; r++ {
			bwd := 10.0
			if r == slow {
				bwd = 30
			}
			vs = append(vs, vec(s, r, 1, 2, bwd, 0, 1))
		}
	}
	rep := analyzeOK(t, assemble(t, testJob(3, 1), AssembleOptions{}, vs...), DefaultConfig())
	if rep.LeaderSwitches != 7 || rep.LeaderSwitchRate != 1 {
		t.Fatalf("switches %d rate %v, want 7 and 1", rep.LeaderSwitches, rep.LeaderSwitchRate)
	}
	if !hasLabel(rep, LabelCoCritical) {
		t.Errorf("high leader switching must emit co_critical: %v", labelNames(rep))
	}
}

func TestRawOnlyBelowFloor(t *testing.T) {
	rep := analyzeOK(t, assemble(t, testJob(2, 1), AssembleOptions{}, vec(0, 0, 0.1, 0.2), vec(0, 1, 0.2, 0.1)), DefaultConfig())
	if !rep.RawOnly || rep.Share != nil || rep.AdvanceMS == nil {
		t.Fatalf("raw_only=%v share=%v advances=%v, want raw advances only", rep.RawOnly, rep.Share, rep.AdvanceMS)
	}
	if hasLabel(rep, LabelCoCritical) || hasLabel(rep, LabelDirectExposure) {
		t.Errorf("percentage labels below the floor: %v", labelNames(rep))
	}
}

// A persistent data straggler whose wait the others absorb in backward: the
// step-closing collective makes the final boundary's leader noise, so
// switches must be counted at the routed (data) boundary, where rank 1
// leads every step.
func TestLeaderSwitchesAtRoutedBoundary(t *testing.T) {
	var vs []*stagevec.Vector
	for s := int64(0); s < 10; s++ {
		noisy := int(s % 3) // who finishes the step last alternates
		for r := 0; r < 3; r++ {
			data, bwd, other := 1.0, 60.0, 0.0
			if r == 1 {
				data, bwd = 51, 10
			}
			if r == noisy {
				other = 3
			}
			vs = append(vs, vec(s, r, data, 5, bwd, 0, 1, other))
		}
	}
	rep := analyzeOK(t, assemble(t, testJob(3, 1), AssembleOptions{}, vs...), DefaultConfig())
	if rep.Top1 != stagevec.StageData || rep.LeaderRank != 1 {
		t.Fatalf("top1 %q leader %d, want data led by rank 1", rep.Top1, rep.LeaderRank)
	}
	if rep.LeaderSwitches != 0 {
		t.Fatalf("switches %d at the data boundary, want 0", rep.LeaderSwitches)
	}
	for _, l := range rep.Labels {
		if strings.Contains(l.Reason, "leader switch") {
			t.Errorf("label %s blames leader switching: %s", l.Name, l.Reason)
		}
	}
}
