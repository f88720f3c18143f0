package control

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// ddp4 is a synthetic 4-rank data-parallel job with two DP pairs
// (Greyhound Fig. 9's comparable groups): each iteration every rank
// computes, all-reduces a bucket in its pair (dp0 = {0,1}, dp1 = {2,3})
// and joins a small world all-reduce. A collective returns when its last
// member entered plus the transfer, so a slow rank makes its partner wait.
type ddp4 struct {
	computeMS func(iter, rank int) float64
	next      int64 // start of the next iteration
	seq       map[string]int64
	iterEnd   []int64
	pending   []collective.Call // generated, ending after the last until
}

var ddp4Comms = []collective.Comm{
	{ID: "world", Size: 4, Ranks: []int{0, 1, 2, 3}, Backend: "gloo"},
	{ID: "dp0", Size: 2, Ranks: []int{0, 1}, Backend: "gloo"},
	{ID: "dp1", Size: 2, Ranks: []int{2, 3}, Backend: "gloo"},
}

func (d *ddp4) iterate() []collective.Call {
	it := len(d.iterEnd)
	var calls []collective.Call
	coll := func(comm string, bytes int64, enter map[int]int64, xferNS int64) int64 {
		last := int64(0)
		for _, e := range enter {
			last = max(last, e)
		}
		ret, s := last+xferNS, d.seq[comm]
		d.seq[comm]++
		for r := range 4 {
			if e, ok := enter[r]; ok {
				calls = append(calls, collective.Call{Rank: r, Comm: comm, Seq: s, Op: collective.AllReduce, Bytes: bytes, Peer: -1, Root: -1,
					EnterNS: e, ReturnNS: ret, DevStartNS: e, DevEndNS: ret, Step: int64(it)})
			}
		}
		return ret
	}
	done := map[int]int64{}
	for p := range 2 {
		enter := map[int]int64{}
		for r := 2 * p; r < 2*p+2; r++ {
			enter[r] = d.next + int64(d.computeMS(it, r)*1e6)
		}
		ret := coll([]string{"dp0", "dp1"}[p], 2<<20, enter, 8e6)
		done[2*p], done[2*p+1] = ret+1e6, ret+1e6
	}
	end := coll("world", 4096, done, 1e6) + 10e6
	d.iterEnd = append(d.iterEnd, end)
	d.next = end
	return calls
}

// until returns the calls of the iterations that ended by t.
func (d *ddp4) until(t int64) []collective.Call {
	var out []collective.Call
	for {
		if d.pending == nil {
			d.pending = d.iterate()
		}
		if d.iterEnd[len(d.iterEnd)-1] > t {
			return out
		}
		out, d.pending = append(out, d.pending...), nil
	}
}

func ddp4Views() []collective.Comm {
	var out []collective.Comm
	for _, c := range ddp4Comms {
		for i, r := range c.Ranks {
			v := c
			v.Rank, v.CommRank = r, i
			out = append(out, v)
		}
	}
	return out
}

func newGreyhoundStore(t *testing.T) (*store.Store, *GreyhoundLifecycle) {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.PutJob(&signal.Job{ID: "run42", Name: "run42", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		t.Fatal(err)
	}
	g, err := NewGreyhoundLifecycle(st, analysis.DefaultGreyhoundConfig(), analysis.GreyhoundLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return st, g
}

var ghT0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// advance runs one controller step at nowNS the way the server's loop
// does: load the state, Advance, save what changed.
func advance(t *testing.T, g *GreyhoundLifecycle, nowNS int64) *AdvanceResult {
	t.Helper()
	s, err := g.State("run42")
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Advance(context.Background(), "run42", nowNS, s, AdvanceOptions{WindowNS: 300e9, MarginNS: 3e9})
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed {
		if err := g.Save("run42", res.Next, res.Plan); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// answer plays the ranks: each polls for a plan and posts its GEMM time
// (rank 2's GPU is slow) and its links' P2P times.
func answer(t *testing.T, g *GreyhoundLifecycle, nowNS int64) {
	t.Helper()
	for r := range 4 {
		p, err := g.OpenPlan("run42", r, -1, nowNS)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			continue
		}
		res := analysis.ValidationResult{Rank: r}
		if slices.Contains(p.GEMM.Ranks, r) {
			ms := map[bool]float64{true: 6.5, false: 3.1}[r == 2]
			res.GEMMMS = []float64{ms, ms, ms}
		}
		for i, pass := range p.P2P.Passes {
			for _, l := range pass {
				if l.Src == r || l.Dst == r {
					for _, b := range p.P2P.SizesBytes {
						ms := 10 * float64(b) / float64(16<<20)
						res.P2P = append(res.P2P, analysis.P2PResult{Pass: i, Src: l.Src, Dst: l.Dst, Bytes: b, MS: []float64{ms, ms, ms}})
					}
				}
			}
		}
		b, _ := json.Marshal(res)
		if _, _, err := g.PostResult("run42", p.ID, nowNS, r, -1, strings.NewReader(string(b))); err != nil {
			t.Fatalf("rank %d posting to %s: %v", r, p.ID, err)
		}
	}
}

// Advance walks a slow rank through the whole episode (§4.1): onset →
// profiling → validation (a published plan) → verdict, and says what the
// server measures on each transition.
func TestGreyhoundAdvanceSlowRank(t *testing.T) {
	st, g := newGreyhoundStore(t)
	const onsetIter = 200
	d := &ddp4{seq: map[string]int64{}, next: ghT0, computeMS: func(it, r int) float64 {
		if it >= onsetIter && r == 2 {
			return 130
		}
		return 70
	}}
	var trs []Advanced
	var plans []*analysis.GreyhoundPlan
	phase := analysis.GreyhoundPhase("")
	now := ghT0
	for i := 0; i < 60 && phase != analysis.PhaseVerdict; i++ {
		now += 2e9
		if calls := d.until(now); len(calls) > 0 {
			if _, err := st.AppendCollectives("run42", &collective.Batch{Comms: ddp4Views(), Calls: calls}); err != nil {
				t.Fatal(err)
			}
		}
		res := advance(t, g, now)
		trs = append(trs, res.Transitions...)
		if res.Plan != nil {
			plans = append(plans, res.Plan)
		}
		if res.Plan != nil && res.Next.PlanCreatedNS != now {
			t.Errorf("plan %s published at %d, state says %d", res.Plan.ID, now, res.Next.PlanCreatedNS)
		}
		phase = res.Next.Controller.Phase
		answer(t, g, now)
	}
	var path []string
	for _, tr := range trs {
		path = append(path, string(tr.From)+"→"+string(tr.To))
	}
	want := []string{"tracking→profiling", "profiling→validation", "validation→verdict"}
	if !slices.Equal(path, want) {
		t.Fatalf("transitions %v, want %v", path, want)
	}
	onsetEnd := d.iterEnd[onsetIter]
	t.Logf("detection %.1f s, verdict %.1f s after the onset", float64(trs[0].DetectNS)/1e9, float64(trs[2].VerdictNS)/1e9)
	if det := trs[0].DetectNS; det <= 0 || det > 20e9 || trs[0].VerdictNS != -1 {
		t.Errorf("entering profiling: detection %d ns, verdict %d ns", det, trs[0].VerdictNS)
	}
	if trs[1].DetectNS != -1 || trs[1].VerdictNS != -1 || trs[1].Outcome != "" {
		t.Errorf("entering validation measured %+v", trs[1])
	}
	if v := trs[2].VerdictNS; v <= trs[0].DetectNS || trs[2].Outcome != OutcomeDone {
		t.Errorf("verdict: latency %d ns (detection %d), outcome %q", v, trs[0].DetectNS, trs[2].Outcome)
	}
	if len(plans) != 1 || !slices.Contains(plans[0].GEMM.Ranks, 2) {
		t.Fatalf("plans %+v, want one validating rank 2", plans)
	}
	s, err := g.State("run42")
	if err != nil {
		t.Fatal(err)
	}
	// review2 #4: the deadline is sized from the plan (not the engine's
	// 30 s constant) and the same everywhere it is kept.
	if p := plans[0]; p.DeadlineMS <= analysis.DefaultGreyhoundConfig().DeadlineMS || s.Published == nil ||
		s.Published.ID != p.ID || s.Published.DeadlineMS != p.DeadlineMS {
		t.Errorf("plan deadline %d ms, published %+v", p.DeadlineMS, s.Published)
	}
	if v := s.Controller.Verdict; v == nil || v.Kind != analysis.VerdictSlowRank || !slices.Equal(v.Ranks, []int{2}) {
		t.Fatalf("verdict %+v, want slow_rank [2]", v)
	}
	if s.OnsetNS <= onsetEnd-200e6 || s.OnsetNS > onsetEnd+2e9 {
		t.Errorf("episode onset %d, the slowdown began at %d", s.OnsetNS, onsetEnd)
	}
	// Stepping again with nothing new changes nothing.
	if res := advance(t, g, now); res.Changed || len(res.Transitions) != 0 || res.Plan != nil {
		t.Errorf("an idle step changed the state: %+v", res)
	}
}

// A manual request moves tracking to profiling without an onset; no
// detection latency is measured for it.
func TestGreyhoundAdvanceManual(t *testing.T) {
	st, g := newGreyhoundStore(t)
	d := &ddp4{seq: map[string]int64{}, next: ghT0, computeMS: func(int, int) float64 { return 70 }}
	now := ghT0 + 20e9
	if _, err := st.AppendCollectives("run42", &collective.Batch{Comms: ddp4Views(), Calls: d.until(now)}); err != nil {
		t.Fatal(err)
	}
	if res := advance(t, g, now); !res.Changed || res.Next.Controller.Phase != analysis.PhaseTracking {
		t.Fatalf("first step: changed %v, phase %q", res.Changed, res.Next.Controller.Phase)
	}
	s, _ := g.State("run42")
	if !requestValidation(s, now+1e9) {
		t.Fatal("request in tracking refused")
	}
	if err := g.Save("run42", s, nil); err != nil {
		t.Fatal(err)
	}
	res := advance(t, g, now+2e9)
	if len(res.Transitions) == 0 {
		t.Fatal("no transition on a manual request")
	}
	tr := res.Transitions[0]
	if tr.From != analysis.PhaseTracking || tr.To != analysis.PhaseProfiling || !strings.Contains(tr.Reason, "requested through the API") ||
		!strings.Contains(string(tr.Evidence), `"manual":true`) || tr.DetectNS != -1 {
		t.Errorf("manual transition %+v", tr)
	}
	if res.Next.ManualNS != 0 || res.Next.OnsetNS != 0 {
		t.Errorf("after the manual step: manual %d, onset %d", res.Next.ManualNS, res.Next.OnsetNS)
	}
}

func TestGreyhoundStateRequestValidation(t *testing.T) {
	var s analysis.GreyhoundState
	if !requestValidation(&s, 5) || s.ManualNS != 5 || s.Controller.Phase != analysis.PhaseTracking || s.Controller.Since != 5 {
		t.Fatalf("fresh state after a request: %+v", s)
	}
	s = analysis.GreyhoundState{Controller: analysis.ControllerState{Phase: analysis.PhaseValidation}}
	if requestValidation(&s, 7) || s.ManualNS != 0 {
		t.Fatalf("a request while validating was recorded: %+v", s)
	}
}

func TestManualProfile(t *testing.T) {
	hist := make([]analysis.Transition, greyhound.MaxHistory)
	for i := range hist {
		hist[i] = analysis.Transition{From: analysis.PhaseVerdict, To: analysis.PhaseTracking, AtNS: int64(i)}
	}
	in := analysis.ControllerState{Phase: analysis.PhaseVerdict, Since: 1, History: hist, Verdict: &analysis.GreyhoundVerdict{Kind: analysis.VerdictUniform}}
	out, plan := greyhound.Step(in, greyhound.Observation{NowNS: 100, Manual: true}, analysis.DefaultGreyhoundConfig())
	if plan != nil {
		t.Fatalf("a manual request published a plan at once: %+v", plan)
	}
	if out.Phase != analysis.PhaseProfiling || out.Since != 100 || out.Verdict != nil || out.Plan != nil {
		t.Fatalf("state %+v", out)
	}
	if len(out.History) != greyhound.MaxHistory || out.History[0].AtNS != 1 {
		t.Fatalf("history not trimmed to the newest %d: len %d, first at %d", greyhound.MaxHistory, len(out.History), out.History[0].AtNS)
	}
	last := out.History[len(out.History)-1]
	if last.From != analysis.PhaseVerdict || last.To != analysis.PhaseProfiling || last.AtNS != 100 || !strings.HasPrefix(last.Reason, "manual request") {
		t.Fatalf("transition %+v", last)
	}
	if in.History[len(in.History)-1].AtNS != greyhound.MaxHistory-1 {
		t.Fatal("the input history was modified")
	}
}

func TestProfileReady(t *testing.T) {
	cfg := analysis.DefaultGreyhoundConfig() // ProfileIters 20, ProfileTimeoutNS 120 s
	series := func(ends ...int64) *analysis.GreyhoundReport {
		r := &analysis.GreyhoundReport{}
		for _, e := range ends {
			r.Iteration.Series = append(r.Iteration.Series, greyhound.Iter{EndNS: e, MS: 100})
		}
		return r
	}
	after := func(n int) []int64 { // n iterations after an onset at 1000
		var e []int64
		for i := range n {
			e = append(e, 1001+int64(i))
		}
		return e
	}
	for _, tc := range []struct {
		name    string
		onsetNS int64
		ends    []int64
		sinceNS int64 // profiling entered
		want    bool
	}{
		{"manual: no onset", 0, nil, 0, true},
		{"too few after the onset", 1000, append([]int64{900, 950}, after(19)...), 0, false},
		{"enough after the onset", 1000, after(20), 0, true},
		{"half the timeout with 3", 1000, after(3), -60e9, true},
		{"half the timeout with 2", 1000, after(2), -60e9, false},
		{"before half the timeout", 1000, after(3), -59e9, false},
	} {
		cs := analysis.ControllerState{Phase: analysis.PhaseProfiling, Since: tc.sinceNS}
		if got := profileReady(series(tc.ends...), cs, &analysis.GreyhoundState{OnsetNS: tc.onsetNS}, cfg, 0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLeadSteps(t *testing.T) {
	rep := func(ms ...float64) *analysis.GreyhoundReport {
		r := &analysis.GreyhoundReport{}
		for _, m := range ms {
			r.Iteration.Series = append(r.Iteration.Series, greyhound.Iter{MS: m})
		}
		return r
	}
	for _, tc := range []struct {
		name       string
		rep        *analysis.GreyhoundReport
		lastStepNS int64
		nowNS      int64
		marginNS   int64
		want       int64
	}{
		{"no iterations", rep(), 0, 10e9, 3e9, 1},
		{"margin only", rep(100, 100), 10e9, 10e9, 3e9, 30},
		{"lag and margin", rep(100), 9e9, 10e9, 3e9, 40},
		// The latest 5 iterations (slow, after an onset) size the step.
		{"latest iterations", rep(50, 50, 50, 200, 200, 200, 200, 200), 10e9, 10e9, 3e9, 15},
		{"rounded up", rep(70), 10e9, 10e9, 3e9, 43},
		{"at least one", rep(1e6), 10e9, 10e9, 0, 1},
		{"step newer than now", rep(100), 11e9, 10e9, 1e9, 10},
	} {
		gi := &analysis.GreyhoundInput{LastStepNS: tc.lastStepNS}
		if got := leadSteps(gi, tc.rep, tc.nowNS, tc.marginNS); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// review2 #4: the deadline covers the lead to at_step, the agreement and
// the benchmark on a 100 Mbit/s link, within [base, MaxPlanDeadlineMS].
func TestPlanDeadlineMS(t *testing.T) {
	plan := func(passes int) *analysis.GreyhoundPlan {
		p := &analysis.GreyhoundPlan{}
		p.GEMM.N, p.GEMM.Reps = 1024, 3
		p.P2P.SizesBytes, p.P2P.Reps = []int64{16 << 20, 32 << 20, 64 << 20}, 3
		for range passes {
			p.P2P.Passes = append(p.P2P.Passes, nil)
		}
		return p
	}
	// GEMM 3·2·1024³/10e9 = 0.644 s; one pass 3·(112 MiB)/12.5e6 = 28.19 s.
	gemm, pass := 3*2*math.Pow(1024, 3)/10e9, 3*float64(112<<20)/12.5e6
	for _, tc := range []struct {
		name         string
		passes       int
		leadNS, base int64
		want         int64
	}{
		{"gemm only", 0, 0, 1000, int64(math.Ceil(15000 + 1.25*gemm*1e3))},
		{"four passes, 6 s lead", 4, 6e9, 30000, int64(math.Ceil(6000 + 15000 + 1.25*(gemm+4*pass)*1e3))},
		{"negative lead counts 0", 0, -5e9, 1000, int64(math.Ceil(15000 + 1.25*gemm*1e3))},
		{"base floor", 0, 0, 60000, 60000},
		{"cap", 40, 0, 30000, MaxPlanDeadlineMS},
	} {
		if got := PlanDeadlineMS(plan(tc.passes), tc.leadNS, tc.base); got != tc.want {
			t.Errorf("%s: %d ms, want %d", tc.name, got, tc.want)
		}
	}
}

// review2 #3: a plan withdrawn by a relief keeps being served, and its
// results accepted, until its deadline; then polls see nothing and new
// results are refused, while a retry of a stored one is still a duplicate.
func TestPublishedPlanOutlivesRelief(t *testing.T) {
	_, g := newGreyhoundStore(t)
	plan := &analysis.GreyhoundPlan{ID: "v-1", AtStep: 50, DeadlineMS: 40_000}
	plan.GEMM = greyhound.GEMMTest{Ranks: []int{1, 2}, N: 64, Dtype: "float32", Reps: 1}
	now := ghT0
	s := &analysis.GreyhoundState{Controller: greyhound.NewController(now)}
	s.Controller.Phase, s.Controller.Plan = analysis.PhaseValidation, plan
	s.PlanCreatedNS, s.Published = now, &analysis.PublishedPlan{ID: "v-1", CreatedNS: now, DeadlineMS: plan.DeadlineMS}
	if err := g.Save("run42", s, plan); err != nil {
		t.Fatal(err)
	}
	post := func(rank int, at int64, body string) (bool, error) {
		_, dup, err := g.PostResult("run42", "v-1", at, rank, -1, strings.NewReader(body))
		return dup, err
	}
	if _, err := post(1, now+1e9, `{"rank":1,"gemm_ms":[2]}`); err != nil {
		t.Fatal(err)
	}
	// A relief: the controller drops the plan and goes back to tracking.
	s.Controller.Phase, s.Controller.Plan, s.PlanCreatedNS = analysis.PhaseTracking, nil, 0
	if err := g.Save("run42", s, nil); err != nil {
		t.Fatal(err)
	}
	if p, err := g.OpenPlan("run42", 2, -1, now+5e9); err != nil || p == nil || p.ID != "v-1" {
		t.Fatalf("rank 2 polling after the relief: %+v, %v; want v-1", p, err)
	}
	if p, _ := g.OpenPlan("run42", 1, -1, now+5e9); p != nil {
		t.Fatalf("rank 1 answered, still served %s", p.ID)
	}
	if _, err := post(2, now+6e9, `{"rank":2,"gemm_ms":[2]}`); err != nil {
		t.Fatalf("result after the relief, before the deadline: %v", err)
	}
	// A body for another rank than the one asked for.
	var fe *signal.FieldError
	if _, err := post(3, now+6e9, `{"rank":0}`); !errors.As(err, &fe) || fe.Field != "rank" {
		t.Fatalf("rank mismatch: %v", err)
	}
	late := now + 40e9
	if p, _ := g.OpenPlan("run42", 3, -1, late); p != nil {
		t.Fatalf("served after the deadline: %+v", p)
	}
	if _, err := post(3, late, `{"rank":3}`); !errors.Is(err, ErrPlanClosed) {
		t.Fatalf("result after the deadline: %v, want ErrPlanClosed", err)
	}
	if dup, err := post(2, late, `{"rank":2,"gemm_ms":[2]}`); err != nil || !dup {
		t.Fatalf("retry after the deadline: dup %v, %v", dup, err)
	}
	var ce *signal.ConflictError
	if _, err := post(2, late, `{"rank":2,"gemm_ms":[3]}`); !errors.As(err, &ce) || ce.Field != "rank" {
		t.Fatalf("a different second result: %v, want a conflict naming rank", err)
	}
}

// Once the history is full (MaxHistory) a transition does not lengthen
// it; it must still be seen as new (else the state is not saved).
func TestNewTransitions(t *testing.T) {
	mk := func(n, from int) []analysis.Transition {
		var h []analysis.Transition
		for i := range n {
			h = append(h, analysis.Transition{From: analysis.PhaseTracking, To: analysis.PhaseProfiling, AtNS: int64(from + i), Reason: "r"})
		}
		return h
	}
	full := mk(greyhound.MaxHistory, 0)
	after := append(slices.Clone(full[1:]), mk(1, greyhound.MaxHistory)...)
	if got := newTransitions(full, after); len(got) != 1 || got[0].AtNS != greyhound.MaxHistory {
		t.Fatalf("full history: %d new", len(got))
	}
	if got := newTransitions(full, full); len(got) != 0 {
		t.Fatalf("unchanged: %d new", len(got))
	}
	if got := newTransitions(nil, mk(2, 0)); len(got) != 2 {
		t.Fatalf("from empty: %d new", len(got))
	}
}
