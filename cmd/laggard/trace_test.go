package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/kair"
)

var updateTrace = flag.Bool("update-trace", false, "rewrite testdata/kair/ (the synthetic traces and the golden report)")

const traceDir = "testdata/kair"

// traceFixture returns the committed 4-rank capture (rewritten first
// with -update-trace).
func traceFixture(t *testing.T) []string {
	t.Helper()
	if *updateTrace {
		if err := os.MkdirAll(traceDir, 0o755); err != nil {
			t.Fatal(err)
		}
		return genTraceFiles(t, traceDir)
	}
	return []string{traceDir + "/rank0.json", traceDir + "/rank1.json", traceDir + "/rank-2.json.gz", traceDir + "/trace_rank_3.json"}
}

// The committed files are what the generator writes: the golden report
// cannot drift from its documented input.
func TestTraceFixtureMatchesGenerator(t *testing.T) {
	want := genTraceFiles(t, t.TempDir())
	for i, p := range traceFixture(t) {
		a, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run go test -run TestTraceGolden -update-trace ./cmd/laggard/)", err)
		}
		b, _ := os.ReadFile(want[i])
		// Compare gzip members by content: compressed bytes may change
		// with the Go version.
		if !bytes.Equal(gunzipIf(t, a), gunzipIf(t, b)) {
			t.Errorf("%s differs from the generator's output: rerun with -update-trace", p)
		}
	}
}

// TestTraceGolden: the whole `laggard trace` path (streaming import, ranks
// from distributedInfo and from names, gzip, baseTimeNanoseconds, clock
// skew, kair.Run, text render) on the synthetic capture with a slow
// backward kernel on rank 2.
// checkTraceGolden compares a text report with its golden file
// (rewritten first with -update-trace).
func checkTraceGolden(t *testing.T, golden, out string) {
	t.Helper()
	if *updateTrace {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("text report differs from %s (rerun with -update-trace if intended):\n%s", golden, out)
	}
}

func TestTraceGolden(t *testing.T) {
	files := traceFixture(t)
	code, out, errs := runCLI(t, append([]string{"trace"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	checkTraceGolden(t, filepath.Join(traceDir, "report.golden.txt"), out)

	code, out, errs = runCLI(t, append([]string{"trace", "--json"}, files...)...)
	if code != 0 {
		t.Fatalf("--json exit %d: %s", code, errs)
	}
	var rep kair.TraceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("bad JSON: %v\n%.500s", err, out)
	}
	if len(rep.Ranks) != 4 || rep.Ranks[2] != 2 || rep.Ranks[3] != 3 {
		t.Errorf("ranks %v, want [0 1 2 3] (2 and 3 from the file names)", rep.Ranks)
	}
	if len(rep.Steps) != genSteps || rep.Steps[0].Step != genFirstStep {
		t.Errorf("steps %+v, want %d from %d", rep.Steps, genSteps, genFirstStep)
	}
	// The skews are recovered by collective alignment (to within the
	// synthetic jitter of a few µs).
	for _, c := range rep.Clock {
		if want := -genSkewNS[c.Rank]; c.Method != kair.ClockCollectives || abs64(c.OffsetNS-want) > 20_000 {
			t.Errorf("rank %d clock %+v, want collectives offset ≈ %d", c.Rank, c, want)
		}
	}
	// Stage 1 ranks rank 2 first. It does not name it: the all-reduce
	// realigns the ranks every step, so the per-step shift is diluted over
	// the 5-step span (D ≈ 0.02, p ≈ 1) — the engine says so instead of
	// guessing, and the report still reaches the culprit through Stages 2–3.
	if rh := rep.Rhythm; rh == nil || len(rh.Order) == 0 || rh.Order[0] != genSlowRank {
		t.Errorf("Stage 1: %+v, want rank %d ranked first", rep.Rhythm, genSlowRank)
	} else if rh.Verdict == kair.RhythmStraggler && rh.Straggler != genSlowRank {
		t.Errorf("Stage 1 named rank %d, not %d", rh.Straggler, genSlowRank)
	}
	var top kair.Instance
	for _, sr := range rep.StepReports {
		for _, in := range sr.Outliers {
			if in.A > top.A {
				top = in
			}
		}
	}
	if top.Rank != genSlowRank || top.Name != "sgemm_bwd" || top.Occurrence != 1 || !(top.ZDur > 3) {
		t.Errorf("Stage 2 top outlier %+v, want rank %d sgemm_bwd#1 with a long duration", top, genSlowRank)
	}
	if len(rep.Causes) == 0 || rep.Causes[0].Kind != kair.KindOp || rep.Causes[0].Rank != genSlowRank || rep.Causes[0].Name != "sgemm_bwd" {
		t.Errorf("Stage 3: %+v, want op sgemm_bwd on rank %d first", rep.Causes, genSlowRank)
	}
	for _, c := range rep.Causes {
		if c.Kind == kair.KindOp && strings.Contains(c.Name, "AllReduce") {
			t.Errorf("the victim all-reduce was blamed: %+v", c)
		}
	}
}

func gunzipIf(t *testing.T, b []byte) []byte {
	t.Helper()
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		return b
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestTraceRankFromName(t *testing.T) {
	cases := []struct {
		path string
		rank int
		ok   bool
		err  string
	}{
		{"rank3.json", 3, true, ""},
		{"/a/rank2/x.json", -1, false, ""}, // only the base name counts
		{"rank-12.pt.trace.json.gz", 12, true, ""},
		{"job_rank_7_step100.json", 7, true, ""},
		{"host1.RANK5.json", 5, true, ""},
		{"worker0-rank0.json", 0, true, ""},
		{"trace.json", -1, false, ""},
		{"crank3.json", -1, false, ""},
		{"ranks3.json", -1, false, ""},
		{"rank.json", -1, false, ""},
		{"rank1_rank1.json", 1, true, ""},
		{"rank1_rank2.json", -1, false, "two ranks"},
		{"rank99999999999999999999.json", -1, false, "out of range"},
	}
	for _, c := range cases {
		r, ok, err := rankFromName(c.path)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), c.path) {
				t.Errorf("%s: err %v, want %q naming the file", c.path, err, c.err)
			}
			continue
		}
		if err != nil || r != c.rank || ok != c.ok {
			t.Errorf("%s: %d %v %v, want %d %v", c.path, r, ok, err, c.rank, c.ok)
		}
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	one := `{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":10,"dur":5}]}`
	noRank := write("trace.json", one)
	r0 := write("rank0.json", one)
	r1 := write("rank1.json", one)
	dup := write("rank_1.json", one)
	bad := write("rank2.json", `{"traceEvents":[{"ph":"X","ts":`)
	empty := write("rank3.json", `{"traceEvents":[]}`)
	info := write("rank4.json", `{"distributedInfo":{"rank":1},"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}]}`)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"trace"}, 2, "Usage: laggard trace"},
		{[]string{"trace", r0}, 2, "at least 2"},
		{[]string{"trace", r0, noRank}, 2, noRank + ": no rank"},
		{[]string{"trace", r0, r1, dup}, 2, "both rank 1"},
		{[]string{"trace", r0, r0}, 2, "both rank 0"},
		{[]string{"trace", r1, info}, 2, "both rank 1"}, // distributedInfo wins over the name
		{[]string{"trace", "-steps", "3,x", r0, r1}, 2, `-steps: "x"`},
		{[]string{"trace", "-align", "ntp", r0, r1}, 2, "-align: want auto, collectives or none"},
		{[]string{"trace", "-windows", "0", r0, r1}, 2, "-windows must be in"},
		{[]string{"trace", "-max-steps", "0", r0, r1}, 2, "-max-steps must be in"},
		{[]string{"trace", r0, filepath.Join(dir, "rank9.json")}, 1, "no such file"},
		{[]string{"trace", r0, bad}, 1, bad + ":"},
		{[]string{"trace", r0, empty}, 1, empty + ": no operator or kernel events"},
		{[]string{"trace", "-steps", "99", traceDir + "/rank0.json", traceDir + "/rank1.json"}, 1, "-steps: step 99"},
		{[]string{"trace", "-max-events", "1", traceDir + "/rank0.json", traceDir + "/rank1.json"}, 1, "raise -max-events"},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("laggard %v: exit %d (want %d), stderr lacks %q:\n%s%s", c.args, code, c.code, c.want, errs, out)
		}
	}
	// Ctrl-C stops the import.
	if code, _, errs := runDone(t, append([]string{"trace"}, traceFixture(t)...)...); code != 1 || !strings.Contains(errs, "context canceled") {
		t.Errorf("interrupted: exit %d: %s", code, errs)
	}
	// A name/distributedInfo conflict is a warning, not an error.
	_, _, errs := runCLI(t, "trace", r0, info)
	if !strings.Contains(errs, "distributedInfo says rank 1, the file name 4") {
		t.Errorf("no conflict warning: %s", errs)
	}
}

func TestTraceParseSteps(t *testing.T) {
	got, err := parseStepList(" 5, 3,5 ")
	if err != nil || len(got) != 2 || got[0] != 3 || got[1] != 5 {
		t.Errorf("parseStepList: %v %v", got, err)
	}
	for _, bad := range []string{"-1", "3,,4", "1e3", "281474976710657"} {
		if _, err := parseStepList(bad); err == nil {
			t.Errorf("parseStepList(%q) accepted", bad)
		}
	}
	if got, err := parseStepList(""); got != nil || err != nil {
		t.Errorf("empty: %v %v", got, err)
	}
}

// -steps reaches the engine: only the named steps are analysed.
func TestTraceStepsFlag(t *testing.T) {
	files := traceFixture(t)
	code, out, errs := runCLI(t, append([]string{"trace", "--json", "-steps", "12", "-align", "none"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep kair.TraceReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Analysed) != 1 || rep.Analysed[0] != 12 || rep.Config.Align != kair.ClockNone {
		t.Errorf("analysed %v align %q, want [12] none", rep.Analysed, rep.Config.Align)
	}
	for _, c := range rep.Clock {
		if c.OffsetNS != 0 {
			t.Errorf("-align none moved rank %d by %d ns", c.Rank, c.OffsetNS)
		}
	}
}

// Progress goes to stderr for large files when asked (-progress).
func TestTraceProgress(t *testing.T) {
	oldMin, oldEvery := progressMinBytes, progressEvery
	progressMinBytes, progressEvery = 0, 0
	t.Cleanup(func() { progressMinBytes, progressEvery = oldMin, oldEvery })
	files := traceFixture(t)
	code, _, errs := runCLI(t, append([]string{"trace", "-progress"}, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"laggard trace: rank0.json: ", "rank-2.json.gz: ", "events in", "MiB of"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	// Without -progress (stderr is no terminal here) nothing is said.
	_, _, errs = runCLI(t, append([]string{"trace"}, files...)...)
	if strings.Contains(errs, "MiB") {
		t.Errorf("progress without -progress: %s", errs)
	}
}

// The help lists the command and its flags.
func TestTraceHelp(t *testing.T) {
	code, out, _ := runCLI(t, "help", "trace")
	if code != 0 || !strings.Contains(out, "-max-steps") || !strings.Contains(out, "-align") || !strings.Contains(out, "laggard trace rank0.json.gz") {
		t.Errorf("help trace: %d\n%s", code, out)
	}
}

// FuzzRankFromName: a rank read from a name is in range and spelled in it.
func FuzzTraceRankFromName(f *testing.F) {
	for _, s := range []string{"rank3.json", "a/rank-12.json.gz", "x_RANK_7_rank_7", "rank1rank2", "rank" + strings.Repeat("9", 30)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		r, ok, err := rankFromName(name)
		if err != nil || !ok {
			if r != -1 || ok {
				t.Fatalf("%q: %d %v %v", name, r, ok, err)
			}
			return
		}
		if r < 0 || r > maxTraceRank || !strings.Contains(strings.ToLower(filepath.Base(name)), "rank") {
			t.Fatalf("%q: rank %d", name, r)
		}
	})
}
