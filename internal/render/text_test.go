package render

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/sim"
)

func report(t *testing.T, d sim.DDP, req analysis.Request) *analysis.Report {
	t.Helper()
	m := analysis.MemSourceOf(d.Job(req.Job), d.Vectors())
	rep, err := analysis.New(m, analysis.Limits{}).Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestTextShowsHeadlineEvidenceAndTimeAxis(t *testing.T) {
	rep := report(t, sim.DDP{Ranks: 8, Steps: 100, Seed: 1, Extra: sim.After(50, 3, sim.Data, 100)}, analysis.Request{Job: "fixture"})
	var buf bytes.Buffer
	if err := Text(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"job fixture", "8 ranks", "window: the steps since the latest change point",
		"▶ Step time rose", "Straggler:",
		"excess over the reference:     {data.next_wait}",
		"straggler: rank 3 on node-000 at data.next_wait",
		"frontier_accounting", "ranks setting the frontier at data.next_wait",
		"per_stage_max", "rank0_local", "top-1", "excess",
		"onset  at step 50",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
}

func TestTextSaysWhyNoRank(t *testing.T) {
	rep := report(t, sim.DDP{Ranks: 4, Steps: 60, Seed: 2, Extra: sim.After(30, 1, sim.Backward, 100)}, analysis.Request{Job: "absorbed"})
	var buf bytes.Buffer
	if err := Text(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No consistent straggler rank", "straggler: none named (absorbed_in_stage)", "model.backward_cpu_wall"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("lacks %q:\n%s", want, buf.String())
		}
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n--; f.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestTextReportsWriteErrors(t *testing.T) {
	rep := report(t, sim.DDP{Ranks: 2, Steps: 20, Seed: 3}, analysis.Request{Job: "w"})
	if err := Text(&failWriter{n: 3}, rep); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("want the write error, got %v", err)
	}
}

func TestWrap(t *testing.T) {
	got := wrap("aaa bbb ccc ddd", 7, "  ")
	if got != "aaa bbb\n  ccc\n  ddd" {
		t.Errorf("wrap = %q", got)
	}
}
