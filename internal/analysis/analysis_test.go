package analysis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/store"
)

// memJob loads a simulated job into a MemSource.
func memJob(t testing.TB, id string, d sim.DDP) *MemSource {
	return MemSourceOf(d.Job(id), d.Vectors())
}

func run(t testing.TB, src Source, req Request) *Report {
	t.Helper()
	rep, err := New(src, Limits{}).Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run(%+v): %v", req, err)
	}
	if rep.SchemaVersion != ReportSchema {
		t.Fatalf("schema version %q", rep.SchemaVersion)
	}
	return rep
}

func ptr(x int64) *int64 { return &x }

// The default window skips warm-up, starts at the onset and is compared
// with the steady steps before it: the headline names the stage that rose
// and the straggler.
func TestDefaultWindowSinceOnset(t *testing.T) {
	src := memJob(t, "j", sim.DDP{Ranks: 8, Steps: 120, Seed: 1, Extra: sim.WithWarmup(sim.After(60, 3, sim.Data, 100))})
	rep := run(t, src, Request{Job: "j"})
	tl := rep.Timeline
	if tl == nil || tl.WarmupEnd != 3 {
		t.Fatalf("timeline %+v, want warm-up to end at step 3", tl)
	}
	if len(tl.ChangePoints) != 1 || tl.ChangePoints[0].Kind != Onset || absDiff(tl.ChangePoints[0].Step, 60) > 1 {
		t.Fatalf("change points %+v, want one onset at step 60", tl.ChangePoints)
	}
	if cp := tl.ChangePoints[0]; cp.Stages[0].Stage != stagevec.StageData || cp.Stages[0].DeltaMS < 80 {
		t.Errorf("the onset's largest stage shift is %+v, want data ≈ +100", cp.Stages[0])
	}
	if !slices.ContainsFunc(tl.StageChangePoints, func(c StageChangePoint) bool { return c.Stage == stagevec.StageData && c.Kind == Onset }) {
		t.Errorf("no data-stage change point in %+v", tl.StageChangePoints)
	}
	if rep.Window.Basis != BasisSinceChange || rep.Window.From != tl.ChangePoints[0].Step || rep.Window.To != 119 {
		t.Fatalf("window %+v", rep.Window)
	}
	g := rep.Groups[0]
	if n := g.Report.Ranks[3].Steps; int64(n) != rep.Window.To-rep.Window.From+1 {
		t.Errorf("rank 3 reported %d steps of the window %+v", n, rep.Window)
	}
	if g.Comparison == nil || g.Comparison.Reference.FirstStep != 3 || g.Comparison.Reference.LastStep != rep.Window.From-1 {
		t.Fatalf("reference %+v", g.Comparison)
	}
	h := rep.Headline
	if h.Basis != stagefrontier.BasisExcess || h.Stage != stagevec.StageData || h.Rank != 3 {
		t.Fatalf("headline %+v", h)
	}
	for _, want := range []string{"rose", "data.next_wait", "rank 3"} {
		if !strings.Contains(h.Text, want) {
			t.Errorf("headline lacks %q: %s", want, h.Text)
		}
	}
}

// After a relief the default window is the recovered steps, compared with
// the slow period before them.
func TestDefaultWindowSinceRelief(t *testing.T) {
	fault := func(t, r int) sim.Delays {
		var d sim.Delays
		if t >= 20 && t < 80 && r == 5 {
			d[sim.Data] = 100
		}
		return d
	}
	rep := run(t, memJob(t, "j", sim.DDP{Ranks: 8, Steps: 140, Seed: 2, Extra: fault}), Request{Job: "j"})
	cps := rep.Timeline.ChangePoints
	if len(cps) != 2 || cps[0].Kind != Onset || cps[1].Kind != Relief {
		t.Fatalf("change points %+v, want onset then relief", cps)
	}
	if rep.Window.From != cps[1].Step {
		t.Fatalf("window %+v, want since the relief at %d", rep.Window, cps[1].Step)
	}
	cmp := rep.Groups[0].Comparison
	if cmp == nil || !cmp.Material || cmp.DeltaMS >= 0 || !strings.Contains(rep.Headline.Text, "fell") {
		t.Fatalf("comparison %+v headline %s", cmp, rep.Headline.Text)
	}
	if rep.Headline.Rank != -1 {
		t.Errorf("a healthy window names rank %d", rep.Headline.Rank)
	}
}

// Explicit windows and last=N: the reference is still found before the
// change point, and a window that straddles one says so.
func TestExplicitWindows(t *testing.T) {
	src := memJob(t, "j", sim.DDP{Ranks: 4, Steps: 100, Seed: 3, Extra: sim.WithWarmup(sim.After(50, 2, sim.Forward, 80))})
	rep := run(t, src, Request{Job: "j", From: ptr(55), To: ptr(99)})
	if rep.Window.Basis != BasisExplicit || rep.Window.From != 55 || rep.Headline.Rank != 2 || rep.Headline.Stage != stagevec.StageForward {
		t.Fatalf("window %+v headline %+v", rep.Window, rep.Headline)
	}
	if c := rep.Groups[0].Comparison; c == nil || c.Reference.LastStep >= 51 {
		t.Fatalf("comparison %+v", c)
	}
	rep = run(t, src, Request{Job: "j", Last: 20})
	if rep.Window.Basis != BasisLast || rep.Window.From != 80 || rep.Window.To != 99 {
		t.Fatalf("last=20 window %+v", rep.Window)
	}
	rep = run(t, src, Request{Job: "j", From: ptr(30), To: ptr(70)})
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "mixes two regimes") }) {
		t.Errorf("a window across the change point does not say so: %v", rep.Notes)
	}
	// A change detected a step or two after the window's start still
	// marks where the window starts: the reference ends before it.
	rep = run(t, src, Request{Job: "j", From: ptr(48), To: ptr(99)})
	if c := rep.Groups[0].Comparison; c == nil || c.Reference.LastStep != 47 || len(rep.Notes) != 0 {
		t.Errorf("window from 48 with the onset at 50: comparison %+v notes %v", c, rep.Notes)
	}
	rep = run(t, src, Request{Job: "j", From: ptr(60), To: ptr(99), NoReference: true})
	if rep.Groups[0].Comparison != nil || rep.Headline.Basis == stagefrontier.BasisExcess {
		t.Errorf("no_reference still compared: %+v", rep.Headline)
	}
}

// Run A vs run B: another job's default window is the reference.
func TestCompareRuns(t *testing.T) {
	a := sim.DDP{Ranks: 8, Steps: 60, Seed: 4, Extra: sim.After(0, 6, sim.Data, 60)}
	b := sim.DDP{Ranks: 8, Steps: 60, Seed: 5}
	src := multiSource{memJob(t, "run-a", a), memJob(t, "run-b", b)}
	rep := run(t, src, Request{Job: "run-a", CompareJob: "run-b"})
	c := rep.Groups[0].Comparison
	if c == nil || c.Reference.JobID != "run-b" || c.ExcessTop1 != stagevec.StageData || !strings.Contains(c.Reference.Basis, "run run-b") {
		t.Fatalf("comparison %+v", c)
	}
	if rep.Headline.Rank != 6 || rep.Headline.Basis != stagefrontier.BasisExcess {
		t.Errorf("headline %+v", rep.Headline)
	}
}

// Ranks with different roles declare their own stage lists; each role
// group is analysed on its own and no global call is made.
func TestRoleGroups(t *testing.T) {
	job := &signal.Job{ID: "pp", WorldSize: 8, Schema: stagevec.DefaultSchema()}
	pp1 := signal.Schema{Version: "pp/v1", Stages: []string{"recv.wait", stagevec.StageForward, "send.wait", stagevec.StageOther}}
	for r := 0; r < 8; r++ {
		role := signal.Role{DP: r % 4, TP: -1, PP: r / 4, EP: -1}
		job.Ranks = append(job.Ranks, signal.Rank{Rank: r, Role: role})
	}
	job.Groups = []signal.GroupSchema{{Group: "pp1", Schema: pp1, DeclaredBy: 4}}
	m := NewMemSource(job)
	d := sim.DDP{Ranks: 4, Steps: 40, Seed: 6, Extra: sim.After(0, 1, sim.Data, 70)}
	for _, v := range d.Vectors() {
		if err := m.Add(&v); err != nil {
			t.Fatal(err)
		}
		w := stagevec.Vector{Step: v.Step, Rank: v.Rank + 4, Durations: []float64{3, 30, 1, 0}, WallMS: 34}
		if v.Rank == 2 {
			w.Durations[2] = 50 // rank 6 sends late
			w.WallMS = 83
		}
		if err := m.Add(&w); err != nil {
			t.Fatal(err)
		}
	}
	m.Seal()
	rep := run(t, m, Request{Job: "pp"})
	if !rep.RoleAwareNeeded || len(rep.Groups) != 2 || rep.Headline.Rank != -1 || rep.Headline.Withheld != stagefrontier.WithheldRoleGroups {
		t.Fatalf("role-aware report: groups %d headline %+v", len(rep.Groups), rep.Headline)
	}
	byKey := map[string]*stagefrontier.Report{}
	for _, g := range rep.Groups {
		byKey[g.Group] = g.Report
	}
	if r := byKey["pp0"]; r == nil || r.Headline.Stage != stagevec.StageData || r.Headline.Rank != 1 {
		t.Fatalf("pp0 %+v", r)
	}
	if r := byKey["pp1"]; r == nil || r.Top1 != "send.wait" || r.Headline.Rank != 6 || !slices.Equal(r.Stages, pp1.Stages) {
		t.Fatalf("pp1 top1 %q headline %+v stages %v", r.Top1, r.Headline, r.Stages)
	}
	for _, want := range []string{"pp0 (4 ranks)", "pp1 (4 ranks)", "straggler rank 6"} {
		if !strings.Contains(rep.Headline.Text, want) {
			t.Errorf("job headline lacks %q: %s", want, rep.Headline.Text)
		}
	}
	one := run(t, m, Request{Job: "pp", Group: "pp1"})
	if one.RoleAwareNeeded || len(one.Groups) != 1 || one.Headline.Rank != 6 {
		t.Errorf("group=pp1: %+v", one.Headline)
	}
	if _, err := New(m, Limits{}).Run(context.Background(), Request{Job: "pp", Group: "nope"}); !isField(err, ParamGroup) {
		t.Errorf("unknown group: %v", err)
	}
}

func TestErrors(t *testing.T) {
	src := memJob(t, "j", sim.DDP{Ranks: 4, Steps: 30, Seed: 7})
	a := New(src, Limits{MaxCells: 4 * 6 * 10})
	ctx := context.Background()
	var tl *TooLargeError
	if _, err := a.Run(ctx, Request{Job: "j", From: ptr(0), To: ptr(29)}); !errors.As(err, &tl) {
		t.Errorf("30 steps over a 10-step cell limit: %v", err)
	}
	if rep, err := a.Run(ctx, Request{Job: "j"}); err != nil || rep.Window.To-rep.Window.From+1 > 10 {
		t.Errorf("the default window must shrink to the cell limit: %v %+v", err, rep)
	}
	if _, err := a.Run(ctx, Request{Job: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if _, err := a.Run(ctx, Request{Job: "j", From: ptr(500)}); !errors.Is(err, ErrNoData) {
		t.Errorf("window past the data: %v", err)
	}
	bad := 2.0
	if _, err := a.Run(ctx, Request{Job: "j", Tau: &bad}); !isField(err, "candidate_threshold") {
		t.Errorf("tau 2: %v", err)
	}
	empty := NewMemSource(&signal.Job{ID: "e", WorldSize: 2, Schema: stagevec.DefaultSchema()})
	empty.Seal()
	if _, err := New(empty, Limits{}).Run(ctx, Request{Job: "e"}); !errors.Is(err, ErrNoData) {
		t.Errorf("empty job: %v", err)
	}
}

func TestParseRequest(t *testing.T) {
	cases := []struct {
		q     string
		field string
	}{
		{"", ""},
		{"last=50&tau=0.7&model_fit=true&group=pp1", ""},
		{"from=10&to=20&ref_from=0&ref_to=9", ""},
		{"compare=other&no_reference", ""},
		{"last=0", ParamLast},
		{"last=-5", ParamLast},
		{"last=abc", ParamLast},
		{"last=5&from=1", ParamLast},
		{"from=-1", ParamFrom},
		{"from=9223372036854775808", ParamFrom},
		{"from=20&to=10", ParamTo},
		{"ref_from=20&ref_to=10", ParamRefTo},
		{"tau=0", ParamTau},
		{"tau=1.5", ParamTau},
		{"tau=NaN", ParamTau},
		{"model_fit=maybe", ParamModelFit},
		{"no_reference=perhaps", ParamNoRef},
		{"compare=b&ref_from=1", ParamCompare},
	}
	for _, c := range cases {
		q, _ := parseQuery(c.q)
		r, err := ParseRequest("j", q)
		if c.field == "" {
			if err != nil {
				t.Errorf("%q: %v", c.q, err)
				continue
			}
			back, _ := ParseRequest("j", r.Values())
			if !sameRequest(r, back) {
				t.Errorf("%q: Values round trip %+v → %+v", c.q, r, back)
			}
			continue
		}
		if !isField(err, c.field) {
			t.Errorf("%q: err %v, want a FieldError on %q", c.q, err, c.field)
		}
	}
}

// The time axis is computed once per stored state: a second report reads
// only its window.
func TestHistoryCache(t *testing.T) {
	src := &countingSource{Source: memJob(t, "j", sim.DDP{Ranks: 4, Steps: 100, Seed: 8})}
	a := New(src, Limits{ChunkCells: 4 * 6 * 16}) // several chunks
	if _, err := a.Run(context.Background(), Request{Job: "j"}); err != nil {
		t.Fatal(err)
	}
	first := src.scans
	if first < 3 {
		t.Fatalf("%d scans: the history was not chunked", first)
	}
	if _, err := a.Run(context.Background(), Request{Job: "j"}); err != nil {
		t.Fatal(err)
	}
	if again := src.scans - first; again > 2 {
		t.Errorf("second report scanned %d times, want only its window (and no reference)", again)
	}
}

func TestMemSource(t *testing.T) {
	m := NewMemSource(&signal.Job{ID: "m", WorldSize: 2, Schema: stagevec.DefaultSchema()})
	for _, v := range []stagevec.Vector{
		{Step: 5, Rank: 1, Durations: []float64{1, 1, 1, 1, 1}, WallMS: 5},
		{Step: 2, Rank: 0, Durations: []float64{1, 1, 1, 1, 1}, WallMS: 5},
		{Step: 5, Rank: 1, Durations: []float64{2, 2, 2, 2, 2}, WallMS: 10}, // later duplicate wins
		{Step: 9, Rank: 0, Durations: []float64{3, 3, 3, 3, 3}, WallMS: 15},
	} {
		if err := m.Add(&v); err != nil {
			t.Fatal(err)
		}
	}
	m.Seal()
	st, _ := m.Stats("m")
	if st != (store.JobStats{FirstStep: 2, LastStep: 9, Vectors: 3}) {
		t.Fatalf("stats %+v", st)
	}
	var got []float64
	_ = m.Scan("m", 3, 9, func(v *stagevec.Vector) error { got = append(got, v.WallMS); return nil })
	if !slices.Equal(got, []float64{10, 15}) {
		t.Errorf("scan 3–9 walls %v, want [10 15]", got)
	}
	if from, to, ok, _ := m.LastSteps("m", 2); !ok || from != 5 || to != 9 {
		t.Errorf("LastSteps(2) = %d %d %v", from, to, ok)
	}
	if from, _, _, _ := m.LastSteps("m", 10); from != 2 {
		t.Errorf("LastSteps(10) from %d", from)
	}
	if _, err := m.Job("other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("other job: %v", err)
	}
}
