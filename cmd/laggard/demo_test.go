package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/demo"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"golang.org/x/sys/unix"
)

// `laggard demo --json` keeps the job report's fields at the top level and
// puts the Greyhound report beside them.
func TestDemoJSONCarriesBothReports(t *testing.T) {
	rep := &analysis.Report{SchemaVersion: analysis.ReportSchema, JobID: "demo-1", Groups: []analysis.GroupReport{}}
	for _, tc := range []struct {
		name      string
		res       demo.Result
		greyhound bool
		errText   string
	}{
		{"both", demo.Result{Report: rep, Greyhound: ghFixture()}, true, ""},
		{"no greyhound", demo.Result{Report: rep, GreyhoundErr: "GET …/greyhound: 404"}, false, "GET …/greyhound: 404"},
	} {
		var buf bytes.Buffer
		if err := writeDemoJSON(&buf, &tc.res, 0); err != nil {
			t.Fatal(err)
		}
		var got struct {
			analysis.Report
			Greyhound      *analysis.GreyhoundReport `json:"greyhound"`
			GreyhoundError string                    `json:"greyhound_error"`
		}
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, buf.String())
		}
		if got.SchemaVersion != analysis.ReportSchema || got.JobID != "demo-1" {
			t.Errorf("%s: job report fields not at the top level: %s", tc.name, buf.String())
		}
		if (got.Greyhound != nil) != tc.greyhound || got.GreyhoundError != tc.errText {
			t.Errorf("%s: greyhound %v, error %q", tc.name, got.Greyhound != nil, got.GreyhoundError)
		}
		if tc.greyhound && (got.Greyhound.Verdict.Kind != tc.res.Greyhound.Verdict.Kind || got.Greyhound.Iteration.MedianMS != 96) {
			t.Errorf("%s: greyhound report %+v", tc.name, got.Greyhound)
		}
		var raw map[string]json.RawMessage
		_ = json.Unmarshal(buf.Bytes(), &raw)
		if _, ok := raw["greyhound"]; !ok {
			t.Errorf("%s: no greyhound key", tc.name)
		}
		var grades []demo.Grade
		if err := json.Unmarshal(raw["grades"], &grades); err != nil || len(grades) != 3 {
			t.Errorf("%s: grades %s (%v), want one per engine", tc.name, raw["grades"], err)
		}
	}
}

// -sysom auto skips with one line when the profiler cannot run (an
// unprivileged process, simulated by the probe); on fails; off runs nothing.
func TestDemoSysomModes(t *testing.T) {
	denied := func() error {
		return fmt.Errorf("%w: loading the sampler: %w", cpuprof.ErrUnsupported, unix.EPERM)
	}
	o := demo.SysomOptions{ServerURL: "http://127.0.0.1:1", World: 4, Rank: 3, JobID: "demo-1-sysom", Probe: denied, CPUs: []int{0, 1}, Stderr: io.Discard}
	res, err := demoSysom(context.Background(), "auto", o)
	if err != nil || res == nil || res.Skipped == "" {
		t.Fatalf("auto: %+v, %v", res, err)
	}
	var out bytes.Buffer
	if err := printSysom(&out, res); err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(out.String(), "\n")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "CAP_BPF") || !strings.Contains(lines[1], "sudo make demo") {
		t.Errorf("auto: want a header and one skip line naming the reason and sudo make demo:\n%s", out.String())
	}
	if _, err := demoSysom(context.Background(), "on", o); err == nil || !strings.Contains(err.Error(), "sudo make demo") {
		t.Errorf("on: error %v, want one naming sudo make demo", err)
	}
	if res, err := demoSysom(context.Background(), "off", o); res != nil || err != nil {
		t.Errorf("off: %+v, %v", res, err)
	}
	// A failure after the probe (here: no Python client files) is a line
	// in auto mode and an error in on mode.
	ok := o
	ok.Probe = func() error { return nil }
	ok.Python = "/nonexistent/python3"
	res, err = demoSysom(context.Background(), "auto", ok)
	if err != nil || res == nil || res.Err == "" {
		t.Fatalf("auto failure: %+v, %v", res, err)
	}
	out.Reset()
	_ = printSysom(&out, res)
	if !strings.Contains(out.String(), "✘ the SysOM-AI act failed") {
		t.Errorf("auto failure output:\n%s", out.String())
	}
	if _, err := demoSysom(context.Background(), "on", ok); err == nil {
		t.Error("on: a failure is not an error")
	}
}

func sysomFixture() *demo.SysomResult {
	hog := sysom.ForeignPrefix + "python3"
	rep := &analysis.SysomReport{
		Window: analysis.SysomWindow{FromNS: 1_700_000_035e9, ToNS: 1_700_000_070e9, Basis: analysis.BasisRequested,
			BaseFromNS: 1_700_000_000e9, BaseToNS: 1_700_000_035e9, BaseBasis: analysis.BasisRequested, Ranks: 4, Samples: 120, BaseRanks: 4, Calls: 2400},
		Report: &sysom.Report{
			SlowRanks: []sysom.SlowRank{{Group: "world", Rank: 3, MeanLateMs: 48, PeerMeanMs: 1.2, PeerSigmaMs: 0.8, Z: 58, Instances: 300, LastShare: 0.97, Align: sysom.AlignHost}},
			Waterline: []sysom.WaterlineFlag{},
			Diagnoses: []sysom.Diagnosis{{Rank: 3, Group: "world", Peer: 0, Flagged: []string{"slow_rank"}, Layer: sysom.LayerCPU, Cause: sysom.CauseForeign, Confidence: sysom.ConfidenceHigh,
				Layers: []sysom.Layer{{Layer: sysom.LayerCPU, Finding: sysom.FindingDiffers, Cause: sysom.CauseForeign, Evidence: []string{"another process holds 60% of rank 3's CPU samples"},
					Paths: []sysom.HotPath{{Func: hog, Stack: []string{hog}, Fraction: 0.6, Samples: 2000, Cause: sysom.CauseForeign}}}}}},
			Notes: []string{},
		},
	}
	return &demo.SysomResult{Job: "demo-1-sysom", Rank: 3, PinMap: "0:0,1:0,2:0,3:1", HogProcs: 6, Hz: demo.SysomHz, Ratio: demo.SysomRatio,
		FromNS: rep.Window.FromNS, ToNS: rep.Window.ToNS, BaseFromNS: rep.Window.BaseFromNS, BaseToNS: rep.Window.BaseToNS,
		Report: rep, Verdict: demo.JudgeSysom(rep, 3)}
}

// The SysOM-AI section: how it sampled (and that production samples
// less), the windows, the rendered report and the verdict.
func TestDemoSysomSection(t *testing.T) {
	var out bytes.Buffer
	if err := printSysom(&out, sysomFixture()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"sampling at 100% of 99 Hz for the demo; production default 10%",
		"pin map 0:0,1:0,2:0,3:1), a CPU hog of 6 busy processes",
		"window: 35s of the hog vs the 35s before it",
		"SysOM-AI · window",
		"rank 3 (group world, peer rank 0; flagged by slow_rank): layer cpu · foreign_process",
		"[other process] python3",
		"ground truth: CPU hog on rank 3's core",
		"✔ SysOM-AI names rank 3 (hog on rank 3), layer cpu (foreign_process), hot path \"[other process] python3\"",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, out.String())
		}
	}
}

// `laggard demo --json` gains "sysom" (absent with -sysom off).
func TestDemoJSONSysom(t *testing.T) {
	rep := &analysis.Report{SchemaVersion: analysis.ReportSchema, JobID: "demo-1", Groups: []analysis.GroupReport{}}
	for _, tc := range []struct {
		name string
		s    *demo.SysomResult
		want string
	}{
		{"ran", sysomFixture(), `"kind": "located"`},
		{"skipped", &demo.SysomResult{Rank: 3, Skipped: "not permitted"}, `"skipped": "not permitted"`},
		{"off", nil, ""},
	} {
		var buf bytes.Buffer
		if err := writeDemoJSON(&buf, &demo.Result{Report: rep, Sysom: tc.s}, 3); err != nil {
			t.Fatal(err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		s, ok := raw["sysom"]
		if ok != (tc.s != nil) || (ok && !strings.Contains(buf.String(), tc.want)) {
			t.Errorf("%s: sysom key %v (%s)", tc.name, ok, s)
		}
		if tc.s != nil && tc.s.Report != nil {
			var got demo.SysomResult
			if err := json.Unmarshal(s, &got); err != nil || got.Report == nil || got.Report.Report == nil || len(got.Report.Diagnoses) != 1 || got.Report.Window.Calls != 2400 {
				t.Errorf("%s: sysom section does not round-trip: %v %+v", tc.name, err, got)
			}
		}
	}
}
