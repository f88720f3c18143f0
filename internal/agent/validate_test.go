package agent

import (
	"context"
	"net/http/httptest"
	"testing"
)

// Issue 16, item 5: the plan's budget bounds the trap (the training pause)
// below its deadline, and the result says when training was paused so the
// server can mask it out of its detector.
func TestValidationBudgetBoundsTheTrap(t *testing.T) {
	dir := t.TempDir()
	w := newRing(t, dir)
	w.Append(rec(0))
	fs := &fakeServer{plan: `{"id":"v-1","at_step":10,"deadline_ms":30000,"budget_ms":1500,"gemm":{"ranks":[3],"n":64,"dtype":"float32","reps":3}}`}
	srv := httptest.NewServer(fs)
	defer srv.Close()
	pc := &pauseChecker{w: w}
	a, _ := New(Config{Server: srv.URL, ShmDir: dir, Executor: pc})
	a.Step(context.Background())
	a.pollValidation(context.Background())
	a.wg.Wait()
	if !pc.saw.Load() || pc.ms.Load() != 1500 {
		t.Fatalf("trap armed for %d ms, want the 1500 ms budget (deadline 30000)", pc.ms.Load())
	}
	if len(fs.results) != 1 {
		t.Fatalf("results %+v", fs.results)
	}
	r := fs.results[0]
	if r.PausedFromNS <= 0 || r.PausedToNS <= r.PausedFromNS {
		t.Fatalf("pause not reported: %+v", r)
	}
	if d := planHold(Plan{DeadlineMS: 30000}); d.Milliseconds() != 30000 {
		t.Fatalf("no budget: hold %v", d)
	}
	if d := planHold(Plan{DeadlineMS: 3_600_000, BudgetMS: 0}); d != maxDeadline {
		t.Fatalf("a huge deadline: hold %v", d)
	}
}
