package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// ddpStream is a synthetic 4-rank data-parallel job with two DP pairs
// (Greyhound Fig. 9's comparable AllReduce groups): per iteration each
// rank computes, all-reduces two gradient buckets in its pair (dp0 =
// {0,1}, dp1 = {2,3}) and a small world AllReduce, then steps the
// optimizer. A collective returns when its last member entered plus the
// transfer, so a slow rank makes its partners wait — the evidence
// cross-group comparison sees.
type ddpStream struct {
	t0        int64
	computeMS func(iter, rank int) float64
	calls     []collective.Call // generated so far, in time order per iteration
	iterEnd   []int64
	next      int64 // start of the next iteration
	seq       map[string]int64
}

var ghComms = []collective.Comm{
	{ID: "world", Size: 4, Ranks: []int{0, 1, 2, 3}, Backend: "gloo"},
	{ID: "dp0", Size: 2, Ranks: []int{0, 1}, Backend: "gloo"},
	{ID: "dp1", Size: 2, Ranks: []int{2, 3}, Backend: "gloo"},
}

func newDDPStream(t0 int64, compute func(iter, rank int) float64) *ddpStream {
	return &ddpStream{t0: t0, computeMS: compute, next: t0, seq: map[string]int64{}}
}

const msNS = int64(time.Millisecond)

// iterate generates one iteration and returns its end.
func (d *ddpStream) iterate() int64 {
	it := len(d.iterEnd)
	start := d.next
	pair := func(r int) string { return fmt.Sprintf("dp%d", r/2) }
	// one collective over members whose enter times are given.
	coll := func(comm string, op collective.Op, bytes int64, enter map[int]int64, xferNS int64) int64 {
		last := int64(0)
		for _, e := range enter {
			last = max(last, e)
		}
		ret := last + xferNS
		s := d.seq[comm]
		d.seq[comm]++
		for _, r := range slices.Sorted(func(y func(int) bool) {
			for r := range enter {
				if !y(r) {
					return
				}
			}
		}) {
			d.calls = append(d.calls, collective.Call{Rank: r, Comm: comm, Seq: s, Op: op, Bytes: bytes, Peer: -1, Root: -1,
				EnterNS: enter[r], ReturnNS: ret, DevStartNS: enter[r], DevEndNS: ret, Step: int64(it)})
		}
		return ret
	}
	doneA := map[int]int64{}
	for p := 0; p < 2; p++ {
		enter := map[int]int64{}
		for r := 2 * p; r < 2*p+2; r++ {
			enter[r] = start + int64(d.computeMS(it, r)*float64(msNS))
		}
		ret := coll(pair(2*p), collective.AllReduce, 1<<20, enter, 5*msNS)
		enter = map[int]int64{2 * p: ret + msNS, 2*p + 1: ret + msNS}
		ret = coll(pair(2*p), collective.AllReduce, 2<<20, enter, 8*msNS)
		doneA[2*p], doneA[2*p+1] = ret+msNS, ret+msNS
	}
	ret := coll("world", collective.AllReduce, 4096, doneA, msNS)
	end := ret + 10*msNS
	d.iterEnd = append(d.iterEnd, end)
	d.next = end
	return end
}

// until generates iterations ending by t and returns the new calls; an
// iteration still running at t is generated again later.
func (d *ddpStream) until(t int64) []collective.Call {
	n := len(d.calls)
	for {
		nc, ni, next, seq := len(d.calls), len(d.iterEnd), d.next, maps.Clone(d.seq)
		if d.iterate() > t {
			d.calls, d.iterEnd, d.next, d.seq = d.calls[:nc], d.iterEnd[:ni], next, seq
			break
		}
	}
	return slices.Clone(d.calls[n:])
}

type ghHarness struct {
	t    *testing.T
	dir  string
	st   *store.Store
	ctl  *Greyhound
	reg  *prometheus.Registry
	now  time.Time
	job  string
	gemm func(rank int) float64
	link func(src, dst int) float64
	cfg  GreyhoundConfig
}

func newGHHarness(t *testing.T, dir string, now time.Time) *ghHarness {
	h := &ghHarness{t: t, dir: dir, now: now, job: "run42", cfg: GreyhoundConfig{Interval: -1}}
	h.open()
	return h
}

func (h *ghHarness) open() {
	h.t.Helper()
	st, err := store.Open(h.dir, store.Options{Logger: quietLog, NoSync: true, MinFreeBytes: -1})
	if err != nil {
		h.t.Fatal(err)
	}
	h.st = st
	h.t.Cleanup(func() { _ = st.Close() })
	gh, err := NewGreyhoundLifecycle(st, analysis.DefaultGreyhoundConfig(), analysis.GreyhoundLimits{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.reg = prometheus.NewRegistry()
	h.ctl, err = NewGreyhound(h.cfg, storeJobs{st}, gh, h.reg, quietLog)
	if err != nil {
		h.t.Fatal(err)
	}
	h.ctl.SetClock(func() time.Time { return h.now })
}

func (h *ghHarness) restart() {
	h.t.Helper()
	if err := h.st.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

// ranksPoll plays the clients: every rank polls for a plan and posts its
// measurements (GEMM for listed ranks, every pass link it is in).
func (h *ghHarness) ranksPoll() {
	for r := 0; r < 4; r++ {
		p, err := h.ctl.OpenPlan(h.job, r, -1)
		if err != nil {
			h.t.Fatal(err)
		}
		if p == nil {
			continue
		}
		res := analysis.ValidationResult{Rank: r}
		if p.GEMM != nil && slices.Contains(p.GEMM.Ranks, r) {
			res.GEMMMS = []float64{h.gemm(r), h.gemm(r), h.gemm(r)}
		}
		if p.P2P != nil {
			for i, pass := range p.P2P.Passes {
				for _, l := range pass {
					if l.Src == r || l.Dst == r {
						for _, b := range p.P2P.SizesBytes {
							ms := h.link(l.Src, l.Dst) * float64(b) / float64(16<<20)
							res.P2P = append(res.P2P, analysis.P2PResult{Pass: i, Src: l.Src, Dst: l.Dst, Bytes: b, MS: []float64{ms, ms, ms}})
						}
					}
				}
			}
		}
		b, _ := json.Marshal(res)
		if _, dup, err := h.ctl.PostResult(h.job, p.ID, r, -1, strings.NewReader(string(b))); err != nil || dup {
			h.t.Fatalf("rank %d posting to %s: dup %v, %v", r, p.ID, dup, err)
		}
		// A retried post is a duplicate, not an error.
		if _, dup, err := h.ctl.PostResult(h.job, p.ID, r, -1, strings.NewReader(string(b))); err != nil || !dup {
			h.t.Fatalf("rank %d retrying: dup %v, %v", r, dup, err)
		}
	}
}

func (h *ghHarness) state() *analysis.GreyhoundState {
	gh, _ := analysis.NewGreyhound(h.st, analysis.DefaultGreyhoundConfig(), analysis.GreyhoundLimits{})
	s, err := gh.State(h.job)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// drive runs the job for dur of fake time in controller rounds of 2 s,
// restarting the server once when restartAt is reached.
func (h *ghHarness) drive(d *ddpStream, dur time.Duration, restartIn analysis.GreyhoundPhase) []analysis.GreyhoundPhase {
	ctx := context.Background()
	end := h.now.Add(dur)
	var phases []analysis.GreyhoundPhase
	restarted := false
	for h.now.Before(end) {
		h.now = h.now.Add(2 * time.Second)
		if calls := d.until(h.now.UnixNano()); len(calls) > 0 {
			if _, err := h.st.AppendCollectives(h.job, &collective.Batch{Comms: commViews(), Calls: calls}); err != nil {
				h.t.Fatal(err)
			}
		}
		sample := func() {
			ph := h.state().Controller.Phase
			if len(phases) == 0 || phases[len(phases)-1] != ph {
				phases = append(phases, ph)
			}
			if ph == restartIn && !restarted {
				restarted = true // the plan must survive a server restart
				h.restart()
			}
		}
		h.ctl.EvaluateOnce(ctx)
		sample()
		h.ranksPoll()
		h.ctl.EvaluateOnce(ctx)
		sample()
	}
	return phases
}

// commViews is every member's report of every communicator it joined.
func commViews() []collective.Comm {
	var out []collective.Comm
	for _, c := range ghComms {
		for i, r := range c.Ranks {
			v := c
			v.Rank, v.CommRank = r, i
			out = append(out, v)
		}
	}
	return out
}

func (h *ghHarness) register() {
	if err := h.st.PutJob(&signal.Job{ID: h.job, Name: h.job, WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		h.t.Fatal(err)
	}
}

var t0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)

func TestGreyhoundControllerSlowRank(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	h.register()
	const onsetIter = 200
	d := newDDPStream(t0.UnixNano(), func(it, r int) float64 {
		if it >= onsetIter && r == 2 {
			return 130 // rank 2's GPU/CPU slows down
		}
		return 70
	})
	h.gemm = func(r int) float64 {
		if r == 2 {
			return 6.5
		}
		return 3.1
	}
	h.link = func(src, dst int) float64 { return 10 }
	phases := h.drive(d, 90*time.Second, analysis.PhaseValidation)
	want := []analysis.GreyhoundPhase{analysis.PhaseTracking, analysis.PhaseProfiling, analysis.PhaseValidation, analysis.PhaseVerdict}
	if !slices.Equal(phases, want) {
		for _, tr := range h.state().Controller.History {
			t.Logf("%s → %s: %s %s", tr.From, tr.To, tr.Reason, tr.Evidence)
		}
		t.Fatalf("phases %v, want %v", phases, want)
	}
	s := h.state()
	if s.Controller.Phase != analysis.PhaseVerdict || s.Controller.Verdict == nil {
		t.Fatalf("final state %+v", s.Controller)
	}
	v := s.Controller.Verdict
	if v.Kind != analysis.VerdictSlowRank || !slices.Equal(v.Ranks, []int{2}) {
		t.Fatalf("verdict %+v, want slow_rank [2]", v)
	}
	hist := s.Controller.History
	if len(hist) != 3 {
		t.Fatalf("history %+v", hist)
	}
	onsetEnd := d.iterEnd[onsetIter]
	for i, tr := range hist {
		if tr.AtNS%int64(2*time.Second) != t0.UnixNano()%int64(2*time.Second) {
			t.Errorf("transition %d at %d: not stamped with the server's (fake) clock", i, tr.AtNS)
		}
		if tr.Reason == "" || len(tr.Evidence) == 0 {
			t.Errorf("transition %d without reason or evidence: %+v", i, tr)
		}
	}
	if lat := time.Duration(hist[0].AtNS - onsetEnd); lat <= 0 || lat > 20*time.Second {
		t.Errorf("detection latency %v", lat)
	}
	// The plan was scheduled ahead of the ranks and published durably.
	recs, err := h.st.ValidationRecords(h.job, 0)
	if err != nil || len(recs) != 1 || len(recs[0].Results) == 0 {
		t.Fatalf("validation records %+v, %v", recs, err)
	}
	var plan analysis.ValidationPlan
	if err := json.Unmarshal(recs[0].Plan, &plan); err != nil {
		t.Fatal(err)
	}
	stepAt := stepAtNS(d, hist[1].AtNS)
	if plan.AtStep <= stepAt || float64(plan.AtStep-stepAt)*0.16 < 3 {
		t.Errorf("at_step %d is not ≥ 3 s ahead of step %d (iteration ≈ 160 ms)", plan.AtStep, stepAt)
	}
	if !slices.Contains(plan.GEMM.Ranks, 2) || slices.Contains(plan.GEMM.Ranks, 0) {
		t.Errorf("plan validates ranks %v, want the degraded pair {2,3}", plan.GEMM.Ranks)
	}
	if got := testutil.ToFloat64(h.ctl.m.validations.WithLabelValues("published")); got != 0 {
		// the registry restarted with the server: published was counted by the first one
		t.Logf("published after restart: %v", got)
	}
	if got := testutil.ToFloat64(h.ctl.m.phase.WithLabelValues(h.job, "verdict")); got != 1 {
		t.Errorf("phase gauge verdict = %v", got)
	}
	// The API report carries the controller's history and the judged run.
	gh, _ := analysis.NewGreyhound(h.st, analysis.DefaultGreyhoundConfig(), analysis.GreyhoundLimits{})
	rep, err := gh.Report(context.Background(), analysis.GreyhoundRequest{Job: h.job, NowNS: h.now.UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Controller.Phase != analysis.PhaseVerdict || len(rep.Controller.History) != 3 || len(rep.Validation) != 1 ||
		rep.Validation[0].State != analysis.ValidationDone || rep.Verdict.Kind != analysis.VerdictSlowRank {
		t.Fatalf("report controller %+v validation %+v verdict %+v", rep.Controller, rep.Validation, rep.Verdict)
	}
}

func TestGreyhoundControllerUniformSlowdown(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	h.register()
	d := newDDPStream(t0.UnixNano(), func(it, r int) float64 {
		if it >= 200 {
			return 130 // every rank slows alike (a job-wide cause)
		}
		return 70
	})
	phases := h.drive(d, 60*time.Second, "")
	want := []analysis.GreyhoundPhase{analysis.PhaseTracking, analysis.PhaseProfiling, analysis.PhaseVerdict}
	if !slices.Equal(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	s := h.state()
	if v := s.Controller.Verdict; v == nil || v.Kind != analysis.VerdictUniform {
		t.Fatalf("verdict %+v, want uniform", v)
	}
	if recs, _ := h.st.ValidationRecords(h.job, 0); len(recs) != 0 {
		t.Fatalf("a uniform slowdown published %d validation plans", len(recs))
	}
	if got := testutil.ToFloat64(h.ctl.m.transitions.WithLabelValues("tracking", "profiling")); got != 1 {
		t.Errorf("transitions tracking→profiling = %v", got)
	}
	if n := testutil.CollectAndCount(h.ctl.m.detectLatency); n != 1 {
		t.Errorf("detection latency histogram has %d series", n)
	}
}

func TestGreyhoundManualValidation(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	h.register()
	d := newDDPStream(t0.UnixNano(), func(it, r int) float64 {
		if r == 3 {
			return 100 // slow from the start: no onset to detect
		}
		return 70
	})
	h.gemm = func(r int) float64 { return map[bool]float64{true: 5, false: 3}[r == 3] }
	h.link = func(int, int) float64 { return 10 }
	h.drive(d, 20*time.Second, "")
	if ph := h.state().Controller.Phase; ph != analysis.PhaseTracking {
		t.Fatalf("phase %s before the request, want tracking", ph)
	}
	ph, requested, err := h.ctl.RequestValidation(h.job)
	if err != nil || ph != analysis.PhaseTracking || !requested {
		t.Fatalf("RequestValidation: %s, %v, %v", ph, requested, err)
	}
	h.drive(d, 40*time.Second, "")
	s := h.state()
	if s.Controller.Phase != analysis.PhaseVerdict || s.Controller.Verdict.Kind != analysis.VerdictSlowRank ||
		!slices.Equal(s.Controller.Verdict.Ranks, []int{3}) {
		t.Fatalf("after a manual request: %+v verdict %+v", s.Controller.Phase, s.Controller.Verdict)
	}
	if !strings.Contains(s.Controller.History[0].Reason, "requested through the API") {
		t.Errorf("first transition %+v", s.Controller.History[0])
	}
	if _, _, err := h.ctl.RequestValidation("nope"); err == nil {
		t.Error("manual request for an unknown job accepted")
	}
}

// stepAtNS is the newest step whose iteration ended by t.
func stepAtNS(d *ddpStream, t int64) int64 {
	n := int64(-1)
	for i, e := range d.iterEnd {
		if e <= t {
			n = int64(i)
		}
	}
	return n
}

// A deleted job's controller state goes with it (store.DeleteJob, one
// batch); Forget drops its series, and the id registered again starts
// fresh.
func TestGreyhoundForgetDeletedJob(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	h.register()
	d := newDDPStream(t0.UnixNano(), func(int, int) float64 { return 70 })
	h.drive(d, 10*time.Second, "")
	if _, _, err := h.ctl.RequestValidation(h.job); err != nil {
		t.Fatal(err)
	}
	if ph := h.state().Controller.Phase; ph != analysis.PhaseTracking {
		t.Fatalf("phase %q before the delete", ph)
	}
	if n := testutil.CollectAndCount(h.ctl.m.phase); n != 4 {
		t.Fatalf("phase gauge has %d series, want 4", n)
	}
	if err := h.st.DeleteJob(h.job); err != nil {
		t.Fatal(err)
	}
	h.ctl.Forget(h.job)
	if n := testutil.CollectAndCount(h.ctl.m.phase); n != 0 {
		t.Errorf("phase gauge keeps %d series of the deleted job", n)
	}
	h.ctl.EvaluateOnce(context.Background()) // nothing to evaluate, nothing written back
	h.register()
	if s := h.state(); s.Controller.Phase != "" || s.ManualNS != 0 {
		t.Fatalf("re-registered job inherited state %+v", s)
	}
}

func okEvaluations(c *Greyhound) int {
	return int(testutil.ToFloat64(c.m.evaluations.WithLabelValues("ok")))
}

// review2 #2: a kick evaluates the kicked job only, not a full round
// besides; repeated kicks of one job are one evaluation.
func TestGreyhoundKickEvaluatesOnlyThatJob(t *testing.T) {
	h := &ghHarness{t: t, dir: t.TempDir(), now: t0, job: "run42", cfg: GreyhoundConfig{Interval: time.Hour}}
	h.open()
	h.register()
	d := newDDPStream(t0.UnixNano(), func(int, int) float64 { return 70 })
	h.now = h.now.Add(10 * time.Second)
	if _, err := h.st.AppendCollectives(h.job, &collective.Batch{Comms: commViews(), Calls: d.until(h.now.UnixNano())}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.ctl.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor := func(n int) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); okEvaluations(h.ctl) < n; {
			if time.Now().After(end) {
				t.Fatalf("%d evaluations, want %d", okEvaluations(h.ctl), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1) // the first round
	for range 5 {
		h.ctl.poke(h.job)
	}
	waitFor(2)
	time.Sleep(200 * time.Millisecond)
	if n := okEvaluations(h.ctl); n > 3 { // 5 kicks → 1 or 2 evaluations (one may be taken mid-burst), no rounds
		t.Fatalf("%d evaluations after 5 kicks of one job, want at most 3", n)
	}
}

func TestGreyhoundPokeDeduplicates(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	for range 10 {
		h.ctl.poke("a")
		h.ctl.poke("b")
	}
	if got := h.ctl.takeKicked(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("kicked %v, want [a b]", got)
	}
	if got := h.ctl.takeKicked(); len(got) != 0 {
		t.Fatalf("kicked again %v", got)
	}
}

// review2 #2/#13: a validation request pokes only when it records one,
// and waits on no evaluation in flight; Forget does not either.
func TestGreyhoundRequestAndForgetDoNotWait(t *testing.T) {
	h := newGHHarness(t, t.TempDir(), t0)
	h.register()
	d := newDDPStream(t0.UnixNano(), func(int, int) float64 { return 70 })
	h.drive(d, 10*time.Second, "")
	h.ctl.evalMu.Lock() // an evaluation in flight
	done := make(chan [2]bool)
	go func() {
		_, first, err1 := h.ctl.RequestValidation(h.job)
		_, second, err2 := h.ctl.RequestValidation(h.job)
		if err1 != nil || err2 != nil {
			t.Error(err1, err2)
		}
		h.ctl.Forget("other")
		done <- [2]bool{first, second}
	}()
	select {
	case got := <-done:
		if !got[0] || got[1] {
			t.Errorf("requested %v then %v, want true then false", got[0], got[1])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RequestValidation/Forget waited for the evaluation in flight")
	}
	h.ctl.evalMu.Unlock()
	if got := h.ctl.takeKicked(); !slices.Equal(got, []string{h.job}) {
		t.Fatalf("kicked %v, want one kick of %s", got, h.job)
	}
	// The request is applied by the job's next evaluation.
	h.ctl.evaluate(context.Background(), h.job)
	s := h.state()
	if s.ManualNS != 0 || len(s.Controller.History) == 0 || !strings.Contains(s.Controller.History[0].Reason, "requested through the API") {
		t.Fatalf("after the request: %+v", s)
	}
}

// review2 #6: the default window is served from the controller's round
// while fresh; other windows are computed, at most MaxReports at once.
func TestGreyhoundReportCache(t *testing.T) {
	h := &ghHarness{t: t, dir: t.TempDir(), now: t0, job: "run42", cfg: GreyhoundConfig{Interval: 2 * time.Second, MaxReports: 1}}
	h.open()
	h.register()
	d := newDDPStream(t0.UnixNano(), func(int, int) float64 { return 70 })
	h.drive(d, 20*time.Second, "")
	ctx := context.Background()
	req := analysis.GreyhoundRequest{Job: h.job, NowNS: h.now.UnixNano()}
	a, err := h.ctl.Report(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := h.ctl.Report(ctx, req); a != b {
		t.Fatal("a fresh round's report was not served from the cache")
	}
	if b, _ := h.ctl.Report(ctx, analysis.GreyhoundRequest{Job: h.job, LastNS: 5e9, NowNS: req.NowNS}); b == a {
		t.Fatal("an explicit window was served from the cache")
	}
	h.now = h.now.Add(5 * time.Second) // two intervals: stale
	if b, err := h.ctl.Report(ctx, req); err != nil || b == a {
		t.Fatalf("a stale report was served: %v", err)
	}
	h.ctl.sem <- struct{}{} // the one slot is taken
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := h.ctl.Report(cctx, analysis.GreyhoundRequest{Job: h.job, LastNS: 5e9}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with no slot free: %v, want to wait and give up", err)
	}
	<-h.ctl.sem
}
