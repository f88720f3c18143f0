package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	pyclient "github.com/laggard-dev/laggard/clients/python"
	"github.com/laggard-dev/laggard/internal/demo"
)

// The SysOM-AI act end to end against an in-process server: root, the
// eBPF profiler and PyTorch needed, ~90 s; LAGGARD_LIVE_SYSOM=1 runs it.
func TestDemoSysomLive(t *testing.T) {
	if os.Getenv("LAGGARD_LIVE_SYSOM") != "1" {
		t.Skip("set LAGGARD_LIVE_SYSOM=1 to run the SysOM-AI act (root, eBPF, PyTorch; ~90 s)")
	}
	if err := demo.ProbeProfiler(); err != nil {
		t.Skipf("SysOM-AI act cannot run here: %s", demo.SkipReason(err))
	}
	url, stop := inProcessServer(t)
	defer stop()
	log, _ := newLogger(os.Stderr, "warn", false)
	ctx := context.Background()
	res, err := demoSysom(ctx, "on", demo.SysomOptions{ServerURL: url, Files: pyclient.FS, World: 4, Rank: 2, Seed: 7,
		JobID: "live-sysom-" + time.Now().UTC().Format("150405"), Stderr: os.Stderr, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := printSysom(&out, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	if res.Verdict == nil || res.Verdict.Kind == demo.VerdictNoData {
		t.Fatalf("no verdict or no data: %+v", res.Verdict)
	}
	// Issue 16 item 8b: the hogged rank only.
	if len(res.Verdict.Extra) > 0 {
		t.Errorf("ranks %v named besides the hogged rank 2: %s", res.Verdict.Extra, res.Verdict.Line)
	}
}
