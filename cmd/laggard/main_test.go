package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/demo"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDispatch(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		inStderr string
		inStdout string
	}{
		{nil, 2, "Commands:", ""},
		{[]string{"nope"}, 2, `unknown command "nope"`, ""},
		{[]string{"version"}, 0, "", "laggard "},
		{[]string{"analyze"}, 2, "Usage: laggard analyze", ""},
		{[]string{"analyze", "-tau", "2", "../../internal/wire/stagefile/testdata/sync_wait.jsonl"}, 1, "-tau: must be in (0, 1]", ""},
		{[]string{"analyze", "/does/not/exist.jsonl"}, 1, "no such file", ""},
		{[]string{"demo", "-fault", "bogus"}, 1, `-fault "bogus"`, ""},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.inStderr) || !strings.Contains(out, c.inStdout) {
			t.Errorf("laggard %v: code %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errs)
		}
	}
}

// The §2 sync-wait fixture through the whole CLI path: the frontier routes
// the late data boundary, and the JSON report is machine-readable.
func TestAnalyzeFixture(t *testing.T) {
	for _, file := range []string{"../../internal/wire/stagefile/testdata/sync_wait.jsonl", "../../internal/wire/stagefile/testdata/sync_wait.csv"} {
		code, out, errs := runCLI(t, "analyze", "-json", file)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", file, code, errs)
		}
		var rep analysis.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: bad JSON: %v", file, err)
		}
		if len(rep.Groups) != 1 || rep.Groups[0].Report == nil || rep.Groups[0].Report.Top1 != stagevec.StageData || rep.Groups[0].NumRanks != 3 {
			t.Fatalf("%s: want data.next_wait top-1 over one group of 3 ranks, got %.300s", file, out)
		}
		code, out, _ = runCLI(t, "analyze", file)
		if code != 0 || !strings.Contains(out, "routing set") || !strings.Contains(out, "data.next_wait") {
			t.Fatalf("%s: text report missing routing: %s", file, out)
		}
	}
	code, _, errs := runCLI(t, "analyze", "-format", "csv", "../../internal/wire/stagefile/testdata/sync_wait.jsonl")
	if code != 1 || !strings.Contains(errs, "line 1") {
		t.Fatalf("wrong format should name line 1: code %d, %s", code, errs)
	}
}

// TestDemoEndToEnd trains a real (tiny) DDP job against an in-process
// server and checks the diagnosis. It needs PyTorch and is skipped without.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a real DDP job")
	}
	if _, err := demo.FindPython(context.Background(), ""); err != nil {
		t.Skipf("no PyTorch: %v", err)
	}
	data := t.TempDir()
	code, out, errs := runCLI(t, "demo", "-world", "2", "-warmup", "3", "-steps", "12", "-fault", "data",
		"-rank", "1", "-seed", "7", "-keep=false", "-addr", "127.0.0.1:0", "-data", data, "-v",
		"-sysom", "off") // the SysOM-AI act has its own tests (demo_test.go, demo_sysom_live_test.go)
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// The incident first (issue 17 item 7), each engine's report with -v,
	// then the grade of the incident against the injected fault.
	for _, want := range []string{"── incident (", "routing set", "data.next_wait → top-1", "✔ StageFrontier names rank 1 (injected on 1)",
		"── grade: what was injected against the incident's stated cause", "web UI: http://127.0.0.1:"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	if entries, _ := os.ReadDir(data); len(entries) == 0 {
		t.Errorf("demo stored nothing in %s", data)
	}
}
