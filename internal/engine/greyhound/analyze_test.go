package greyhound

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
)

func slowRankJob() job {
	j := defaultJob()
	j.iters, j.slowFrom, j.slowTo, j.slowFactor, j.slowRank = 160, 100, 160, 1.5, 6
	return j
}

func steps(j job) []StepTruth {
	starts, durs := j.truth()
	var out []StepTruth
	for i := range starts {
		out = append(out, StepTruth{Step: int64(i), StartNS: starts[i], EndNS: starts[i] + int64(durs[i]*1e6)})
	}
	return out
}

// End to end: a rank slows down at iteration 100; BOCD+V finds the onset,
// cross-group comparison the groups containing rank 6, validation the rank.
func TestAnalyzeSlowRankEndToEnd(t *testing.T) {
	cfg := DefaultConfig()
	j := slowRankJob()
	in := Input{Job: "run42", NowNS: t0 + 30e9, Calls: j.calls(), Comms: j.comms(), World: 8, Steps: steps(j)}
	rep, err := Analyze(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Iteration.Period != 7 || rep.Iteration.Method != MethodACF || rep.Iteration.TruthErrorPct == nil || *rep.Iteration.TruthErrorPct > 1.2 {
		t.Fatalf("iteration %+v", rep.Iteration)
	}
	var onsets []ChangePointView
	for _, c := range rep.ChangePoints {
		if c.Verified {
			onsets = append(onsets, c)
		}
	}
	if len(onsets) != 1 || onsets[0].Kind != KindOnset || onsets[0].Index < 98 || onsets[0].Index > 101 {
		t.Fatalf("change points %+v", rep.ChangePoints)
	}
	sus := Suspects(rep.Groups)
	var comms []string
	for _, g := range sus {
		comms = append(comms, g.Comm)
	}
	slices.Sort(comms)
	if !slices.Equal(comms, []string{"dp2", "tp1"}) {
		t.Fatalf("suspects %v; groups %+v", comms, rep.Groups)
	}
	if rep.Controller.Phase != PhaseValidation || rep.Controller.Plan == nil {
		t.Fatalf("controller %+v", rep.Controller)
	}
	// The validation results come back: rank 6's GEMM is slow.
	plan := *rep.Controller.Plan
	in.Validations = []ValidationRun{{Plan: plan, Results: results(plan, map[int]float64{6: 4.5}, nil)}}
	rep, err = Analyze(in, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict.Kind != VerdictSlowRank || !slices.Equal(rep.Verdict.Ranks, []int{6}) || rep.Controller.Phase != PhaseVerdict {
		t.Fatalf("verdict %+v phase %s", rep.Verdict, rep.Controller.Phase)
	}
	if len(rep.Validation) != 1 || rep.Validation[0].State != ValidationDone {
		t.Fatalf("validation %+v", rep.Validation)
	}
	// The lateness matrix shows rank 6 entering last during the slowdown.
	six := slices.Index(rep.Lateness.Ranks, 6)
	var last LateInstance
	for _, in := range rep.Lateness.Instances {
		if in.LateMS[six] != nil {
			last = in
		}
	}
	worst, wr := -1.0, -1
	for i, v := range last.LateMS {
		if v != nil && *v > worst {
			worst, wr = *v, rep.Lateness.Ranks[i]
		}
	}
	if wr != 6 {
		t.Errorf("latest instance %+v: latest entry rank %d", last, wr)
	}
	b, err := json.MarshalIndent(rep, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	golden := "testdata/slow_rank_report.golden.json"
	if *rewrite {
		os.WriteFile(golden, append(b, '\n'), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(b), bytes.TrimSpace(want)) {
		t.Errorf("report differs from %s (run with -rewrite after checking the change)", golden)
	}
}

// A slow link: every group is fine except dp3's instances, which run 2×.
func TestAnalyzeSlowLinkGroup(t *testing.T) {
	j := defaultJob()
	j.iters, j.slowFrom, j.slowTo, j.slowFactor, j.slowComm = 150, 100, 150, 2.0, "dp3"
	rep, err := Analyze(Input{Calls: j.calls(), Comms: j.comms(), World: 8}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sus := Suspects(rep.Groups)
	if len(sus) != 1 || sus[0].Comm != "dp3" || !slices.Equal(sus[0].Ranks, []int{3, 7}) {
		t.Fatalf("suspects %+v", sus)
	}
}

func TestAnalyzeQuietAndDegenerate(t *testing.T) {
	cfg := DefaultConfig()
	rep, err := Analyze(Input{Calls: defaultJob().calls(), World: 8}, cfg)
	if err != nil || rep.Verdict.Kind != VerdictNone || rep.Controller.Phase != PhaseTracking {
		t.Fatalf("%v %+v", err, rep.Verdict)
	}
	rep, err = Analyze(Input{}, cfg)
	if err != nil || rep.Verdict.Kind != VerdictInconclusive {
		t.Fatalf("%v %+v", err, rep)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	bad := defaultJob().calls()[:3]
	bad[1].Op = 0
	if _, err := Analyze(Input{Calls: bad}, cfg); err == nil || err.Error()[:9] != "calls[1]." {
		t.Fatalf("bad op: %v", err)
	}
	c := cfg
	c.ACFThreshold = 2
	if _, err := Analyze(Input{}, c); err == nil {
		t.Fatal("bad config accepted")
	}
	for _, d := range []string{DetectorBOCD, DetectorWindow} {
		c := cfg
		c.Detector = d
		rep, err := Analyze(Input{Calls: slowRankJob().calls(), Comms: slowRankJob().comms(), World: 8}, c)
		if err != nil || len(rep.ChangePoints) == 0 || rep.Detector != d {
			t.Fatalf("%s: %v %+v", d, err, rep.ChangePoints)
		}
	}
}
