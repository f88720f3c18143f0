package analysis

import (
	"context"
	"errors"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// TestSysomBudgetPerWindowAndKept: the sample cap is charged for kept
// samples only and separately for the current and baseline windows
// (review finding 3). The 10-minute job keeps 720 sample records in the
// default 5 min window and as many in its baseline.
func TestSysomBudgetPerWindowAndKept(t *testing.T) {
	_, s := newSysomStore(t, sysomJob{minutes: 10}, SysomLimits{MaxSamples: 800})
	rep, err := s.Report(context.Background(), SysomRequest{Job: "sj"})
	if err != nil {
		t.Fatalf("current and baseline each fit the cap: %v", err)
	}
	if rep.Window.BaseBasis == BasisNone || rep.Window.Samples != 720 {
		t.Fatalf("window %+v: want a baseline and 720 current samples", rep.Window)
	}
	// Rank −1 (unregistered processes) reads every rank's records but
	// keeps none of them here: no stacks, not a cap error.
	_, s = newSysomStore(t, sysomJob{minutes: 10}, SysomLimits{MaxSamples: 200})
	_, err = s.FlameGraph(context.Background(), FlameRequest{Job: "sj", Sel: Selection{Rank: -1}})
	var le *SysomLimitError
	if errors.As(err, &le) || !errors.Is(err, ErrNoStacks) {
		t.Fatalf("rank -1: %v; want ErrNoStacks, not a cap charged for other ranks", err)
	}
	// A diff's two sides each get the cap (180 kept samples a side).
	if _, err := s.DiffGraph(context.Background(), DiffRequest{Job: "sj", A: Selection{Rank: 0}, B: Selection{Rank: 1}}); err != nil {
		t.Fatalf("diff of two ranks under the cap each: %v", err)
	}
}

// TestSysomSharedFuncTable: every rank's profile carries the same Funcs
// slice, which the engine maps once (review finding 5).
func TestSysomSharedFuncTable(t *testing.T) {
	_, s := newSysomStore(t, sysomJob{minutes: 6, hotFrom: soT0 + 60e9}, SysomLimits{})
	ps, _, err := s.profiles(context.Background(), "sj", soT0, soT0+300e9, nil, &sampleBudget{left: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 {
		t.Fatalf("%d profiles", len(ps))
	}
	f0 := ps[0].Funcs
	for r, p := range ps {
		if len(p.Funcs) != len(f0) || len(f0) == 0 || &p.Funcs[0] != &f0[0] {
			t.Fatalf("rank %d has its own function table (%d funcs vs %d)", r, len(p.Funcs), len(f0))
		}
		for _, st := range p.Stacks {
			for _, f := range st.Frames {
				if int(f) >= len(p.Funcs) {
					t.Fatalf("rank %d: frame %d outside the table", r, f)
				}
			}
		}
	}
}

// TestSysomLatestIgnoresFuture: a profile stored with a future timestamp
// (a bad import) does not move the default window off the live data.
func TestSysomLatestIgnoresFuture(t *testing.T) {
	st, s := newSysomStore(t, sysomJob{minutes: 10}, SysomLimits{})
	fut := soT0 + 30*24*3600e9
	b := &stack.Batch{Node: "import", StartNS: fut, EndNS: fut + 1e9, Samples: []stack.Sample{{Rank: 0, Count: 5, Frames: sym("main", "x")}}}
	if _, err := st.AppendStacks("sj", b); err != nil {
		t.Fatal(err)
	}
	now := soT0 + 10*60e9
	rep, err := s.Report(context.Background(), SysomRequest{Job: "sj", Window: WindowRequest{NowNS: now}})
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	if rep.Window.ToNS > now+ClockSkewNS || rep.Window.Ranks != 4 {
		t.Fatalf("window %+v: want it to end by now+skew over the 4 live ranks", rep.Window)
	}
}
