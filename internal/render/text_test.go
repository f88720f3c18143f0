package render

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

func fixtureReport(t *testing.T) *stagefrontier.Report {
	t.Helper()
	f, err := os.Open("../wire/stagefile/testdata/sync_wait.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var asm *stagefrontier.Assembler
	if _, err := stagefile.ReadJSONL(f, stagefile.Sink{
		Job: func(j *signal.Job) error {
			asm = stagefrontier.NewAssembler(j, stagefrontier.AssembleOptions{})
			return nil
		},
		Vector: func(v *stagevec.Vector) error { return asm.Add(v) },
	}); err != nil {
		t.Fatal(err)
	}
	w, err := asm.Finish()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stagefrontier.Analyze(w, stagefrontier.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestTextShowsRoutingLeaderLabelsAndBaselines(t *testing.T) {
	rep := fixtureReport(t)
	var buf bytes.Buffer
	if err := Text(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"job fixture", "3 ranks",
		"routing set: {data.next_wait",
		"leader rank: 1",
		"frontier_accounting",
		"ranks setting the frontier at data.next_wait",
		"per_stage_max", "rank0_local",
		"top-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// Every stage gets a line, in schema order.
	last := -1
	for _, st := range rep.Stages {
		i := strings.Index(out, st)
		if i < 0 || i < last {
			t.Fatalf("stage %s missing or out of order", st)
		}
		last = i
	}
}

func TestTextRawOnly(t *testing.T) {
	rep := fixtureReport(t)
	rep.RawOnly, rep.Share = true, nil
	var buf bytes.Buffer
	if err := Text(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "raw advances only") || strings.Contains(buf.String(), "%  ") {
		t.Fatalf("raw-only report must not print shares:\n%s", buf.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTextReportsWriteErrors(t *testing.T) {
	if err := Text(failWriter{}, fixtureReport(t)); err == nil {
		t.Fatal("a failing writer must surface its error")
	}
}
