package control

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

type kairEnv struct {
	st  *store.Store
	k   *Kair
	now time.Time
}

func newKairTest(t *testing.T, world int, cfg KairConfig) *kairEnv {
	t.Helper()
	quiet := quietLog
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutJob(&signal.Job{ID: "j", WorldSize: world, Schema: stagevec.DefaultSchema()}); err != nil {
		t.Fatal(err)
	}
	k, err := NewKair(cfg, storeJobs{st}, NewKairLifecycle(st, KairLifecycleConfig{}), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	e := &kairEnv{st: st, k: k, now: time.Unix(1_800_000_000, 0)}
	k.SetClock(func() time.Time { return e.now })
	return e
}

func (e *kairEnv) captures(t *testing.T) []*store.Capture {
	t.Helper()
	cs, err := e.k.Captures("j")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// stragglerReport names rank (or withholds it when withheld is set).
func stragglerReport(rank int, withheld stagefrontier.Withheld) *analysis.Report {
	h := stagefrontier.Headline{Rank: rank, Stage: "fwd", Confidence: 0.9, Withheld: withheld}
	if withheld != "" {
		h.Rank = -1
	}
	return &analysis.Report{Groups: []analysis.GroupReport{{Group: "all", Report: &stagefrontier.Report{Headline: h}}}}
}

func onsetReport(step int64) *analysis.Report {
	rep := stragglerReport(-1, stagefrontier.WithheldSingleRank)
	rep.Timeline = &analysis.Timeline{ChangePoints: []analysis.ChangePoint{
		{Step: step - 40, Kind: analysis.Relief}, {Step: step, Kind: analysis.Onset, BeforeMS: 100, AfterMS: 150, Rel: 0.5}}}
	return rep
}

// A named straggler fires one auto capture; while it is open, and for
// the cooldown after the newest capture, the same signal fires none.
func TestKairAutoTriggerOnceWithCooldown(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{Cooldown: 10 * time.Minute, Steps: 3})
	e.k.ObserveReport("j", stragglerReport(2, ""))
	cs := e.captures(t)
	if len(cs) != 1 {
		t.Fatalf("%d captures after a straggler report", len(cs))
	}
	c := cs[0]
	if c.Trigger != TriggerAuto || c.Steps != 3 || !strings.Contains(c.Reason, "rank 2") || !slices.Equal(c.Ranks, []int{0, 1, 2, 3}) {
		t.Fatalf("auto capture %+v", c)
	}
	e.k.ObserveReport("j", stragglerReport(2, "")) // open
	if _, err := e.k.CancelCapture("j", c.ID); err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(9 * time.Minute)
	e.k.ObserveReport("j", stragglerReport(2, "")) // cooling down
	if n := len(e.captures(t)); n != 1 {
		t.Fatalf("%d captures within the cooldown", n)
	}
	e.now = e.now.Add(2 * time.Minute)
	e.k.ObserveReport("j", stragglerReport(1, ""))
	cs = e.captures(t)
	if len(cs) != 2 || !strings.Contains(cs[0].Reason, "rank 1") {
		t.Fatalf("after the cooldown: %d captures, newest %+v", len(cs), cs[0])
	}
	if got := testutil.ToFloat64(e.k.captures.WithLabelValues("auto", "pending")); got != 2 {
		t.Errorf("captures_total{auto,pending} = %v", got)
	}
	if got := testutil.ToFloat64(e.k.captures.WithLabelValues("auto", "cancelled")); got != 1 {
		t.Errorf("captures_total{auto,cancelled} = %v", got)
	}
	// A manual capture is refused while the auto one is open.
	if _, err := e.k.CreateCapture("j", analysis.CaptureRequest{}); !errors.Is(err, ErrCaptureOpen) {
		t.Errorf("manual during auto: %v", err)
	}
}

// Withheld rankings and -kair-trigger=off fire nothing.
func TestKairAutoTriggerQuiet(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	e.k.ObserveReport("j", stragglerReport(-1, stagefrontier.WithheldSingleRank))
	if n := len(e.captures(t)); n != 0 {
		t.Fatalf("withheld: %d captures", n)
	}
	off := newKairTest(t, 4, KairConfig{Off: true})
	off.k.ObserveReport("j", stragglerReport(3, ""))
	off.k.greyhoundLeft("j", "onset", nil)
	if n := len(off.captures(t)); n != 0 {
		t.Fatalf("trigger off: %d captures", n)
	}
}

// An onset fires only when it is newer than the one seen before: the
// first report after start records it (a restart does not capture every
// job's old onset).
func TestKairFreshOnset(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	e.k.ObserveReport("j", onsetReport(100))
	e.k.ObserveReport("j", onsetReport(100))
	if n := len(e.captures(t)); n != 0 {
		t.Fatalf("old onset: %d captures", n)
	}
	e.k.ObserveReport("j", onsetReport(150))
	cs := e.captures(t)
	if len(cs) != 1 || !strings.Contains(cs[0].Reason, "onset at step 150") {
		t.Fatalf("fresh onset: %d captures %+v", len(cs), cs)
	}
}

// A restarted launch counts its steps from its own start: its onset at
// step 120 is fresh although launch 0's was at 150, and a finding
// captured in launch 0 (the same straggler) is captured again in launch 1.
func TestKairFindingsPerLaunch(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{Cooldown: time.Minute})
	e.k.ObserveReport("j", onsetReport(100))
	e.k.ObserveReport("j", onsetReport(150))
	e.now = e.now.Add(2 * time.Hour) // past the capture's deadline and the cooldown
	e.k.ObserveReport("j", stragglerReport(2, ""))
	if cs := e.captures(t); len(cs) != 2 || cs[0].Signal != "straggler:2" {
		t.Fatalf("launch 0: %d captures, newest %+v", len(cs), cs[0])
	}
	relaunched := func(rep *analysis.Report) *analysis.Report {
		rep.Incarnations = &analysis.Incarnations{Analysed: 1, Newest: 1}
		return rep
	}
	e.now = e.now.Add(2 * time.Hour)
	e.k.ObserveReport("j", relaunched(onsetReport(120)))
	cs := e.captures(t)
	if len(cs) != 3 || cs[0].Signal != "inc1:onset:120" {
		t.Fatalf("launch 1's onset at step 120 (launch 0's at 150): %d captures, newest %+v", len(cs), cs[0])
	}
	e.now = e.now.Add(2 * time.Hour)
	e.k.ObserveReport("j", relaunched(stragglerReport(2, "")))
	if cs := e.captures(t); len(cs) != 4 || cs[0].Signal != "inc1:straggler:2" {
		t.Fatalf("launch 1's straggler (captured in launch 0): %d captures, newest %+v", len(cs), cs[0])
	}
}

type fixedReporter struct {
	rep *analysis.Report
	err error
}

func (f fixedReporter) Run(context.Context, analysis.Request) (*analysis.Report, error) {
	return f.rep, f.err
}

// Observe wraps the detector's Reporter: its reports are signals, its
// errors are not.
func TestKairObserveWrapsReporter(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	if _, err := e.k.Observe(fixedReporter{err: errors.New("boom")}).Run(context.Background(), analysis.Request{Job: "j"}); err == nil {
		t.Fatal("error swallowed")
	}
	if n := len(e.captures(t)); n != 0 {
		t.Fatalf("%d captures after an error", n)
	}
	rep, err := e.k.Observe(fixedReporter{rep: stragglerReport(0, "")}).Run(context.Background(), analysis.Request{Job: "j"})
	if err != nil || rep == nil || len(e.captures(t)) != 1 {
		t.Fatalf("report %v, %v, %d captures", rep, err, len(e.captures(t)))
	}
}

// Greyhound leaving tracking fires a capture naming its suspects, which
// a large job records beside random peers.
func TestKairGreyhoundTrigger(t *testing.T) {
	e := newKairTest(t, 64, KairConfig{})
	rep := &analysis.GreyhoundReport{}
	rep.Verdict.Ranks = []int{41}
	e.k.greyhoundLeft("j", "iteration time rose 30%", rep)
	cs := e.captures(t)
	if len(cs) != 1 || !slices.Contains(cs[0].Ranks, 41) || len(cs[0].Ranks) != 16 || !strings.Contains(cs[0].Reason, "Greyhound") {
		t.Fatalf("greyhound capture %+v", cs)
	}
}

// The sweep expires a capture nobody answered, without any request.
func TestKairSweepExpires(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	c, err := e.k.CreateCapture("j", analysis.CaptureRequest{})
	if err != nil {
		t.Fatal(err)
	}
	e.now = time.Unix(0, c.DeadlineNS+1)
	e.k.Sweep(context.Background())
	if got := testutil.ToFloat64(e.k.captures.WithLabelValues("manual", "expired")); got != 1 {
		t.Fatalf("captures_total{manual,expired} = %v", got)
	}
	got, err := e.st.Capture("j", c.ID)
	if err != nil || got.State != store.CaptureExpired {
		t.Fatalf("stored %+v %v", got, err)
	}
}

// Regression (review finding 3): a persistent straggler is one finding,
// captured once — not every cooldown until the operator's captures are
// evicted — and not again by a restarted server (the finding is stored
// with the capture). A new finding still fires.
func TestKairAutoTriggerOncePerFinding(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{Cooldown: 10 * time.Minute})
	m, err := e.k.CreateCapture("j", analysis.CaptureRequest{Reason: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		e.now = e.now.Add(61 * time.Minute) // past the deadline and the cooldown
		e.k.ObserveReport("j", stragglerReport(2, ""))
	}
	cs := e.captures(t)
	if len(cs) != 2 || cs[0].Trigger != TriggerAuto || cs[0].Signal != "straggler:2" || cs[1].ID != m.ID {
		t.Fatalf("after 40 cooldowns of one straggler: %d captures, newest %+v", len(cs), cs[0])
	}
	// A restarted server (fresh controller and adapter over the store).
	k2, err := NewKair(KairConfig{Cooldown: 10 * time.Minute}, storeJobs{e.st}, NewKairLifecycle(e.st, KairLifecycleConfig{}), prometheus.NewRegistry(), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	k2.SetClock(func() time.Time { return e.now })
	e.now = e.now.Add(61 * time.Minute)
	k2.ObserveReport("j", stragglerReport(2, ""))
	if n := len(e.captures(t)); n != 2 {
		t.Fatalf("restart re-captured the same straggler: %d captures", n)
	}
	k2.ObserveReport("j", stragglerReport(3, ""))
	if cs := e.captures(t); len(cs) != 3 || cs[0].Signal != "straggler:3" {
		t.Fatalf("a new straggler: %d captures, newest %+v", len(cs), cs[0])
	}
	// An already-captured straggler with a fresh onset: the onset fires.
	e.now = e.now.Add(61 * time.Minute)
	k2.ObserveReport("j", onsetReport(100)) // first onset after start: recorded only
	e.now = e.now.Add(61 * time.Minute)
	rep := onsetReport(200)
	rep.Groups = stragglerReport(3, "").Groups
	k2.ObserveReport("j", rep)
	if cs := e.captures(t); len(cs) != 4 || cs[0].Signal != "onset:200" {
		t.Fatalf("fresh onset beside a captured straggler: %d captures, newest %+v", len(cs), cs[0])
	}
}

// fakeFrontier is the StageFrontier evaluation as the driver reads it.
type fakeFrontier struct {
	advancing bool
	stepNS    int64
	ranks     []int
}

func (f *fakeFrontier) Suspects(string) (int64, []int) { return f.stepNS, f.ranks }
func (f *fakeFrontier) Advancing(string) bool          { return f.advancing }

// With the StageFrontier detector attached, a job not seen advancing
// (finished, or not yet since a restart) fires nothing; once its steps
// advance, it does (detect.TestAdvancing covers the detector's side).
func TestKairAutoTriggerSkipsIdleJobs(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	det := &fakeFrontier{}
	e.k.Attach(det, nil)
	e.k.ObserveReport("j", stragglerReport(2, ""))
	if n := len(e.captures(t)); n != 0 {
		t.Fatalf("idle job: %d captures", n)
	}
	det.advancing = true
	e.k.ObserveReport("j", stragglerReport(2, ""))
	if n := len(e.captures(t)); n != 1 {
		t.Fatalf("advancing job: %d captures", n)
	}
	det.advancing = false // stopped
	e.now = e.now.Add(2 * time.Hour)
	e.k.ObserveReport("j", stragglerReport(1, ""))
	if n := len(e.captures(t)); n != 1 {
		t.Fatalf("finished job: %d captures", n)
	}
}

// The detector's step time and named ranks are a manual capture's hints:
// its suspects are recorded beside random peers.
func TestKairHintsFromFrontier(t *testing.T) {
	e := newKairTest(t, 64, KairConfig{})
	e.k.Attach(&fakeFrontier{stepNS: 100e6, ranks: []int{7, 9}}, nil)
	c, err := e.k.CreateCapture("j", analysis.CaptureRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Ranks, 7) || !slices.Contains(c.Ranks, 9) || len(c.Ranks) != 16 {
		t.Fatalf("ranks %v", c.Ranks)
	}
	// No step known yet: the 5 recorded steps at 100 ms plus 5 min of
	// slack (15 min without a step time).
	if want := e.now.UnixNano() + 5*int64(100e6) + 300e9; c.DeadlineNS != want {
		t.Fatalf("deadline %d, want %d (step time not taken)", c.DeadlineNS, want)
	}
}

// Each Greyhound departure from tracking is one finding: the same
// transition reported twice fires once.
func TestKairGreyhoundOncePerTransition(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{Cooldown: time.Minute})
	rep := &analysis.GreyhoundReport{}
	rep.Controller.SinceNS = 123
	e.k.greyhoundLeft("j", "iteration time rose 30%", rep)
	e.now = e.now.Add(2 * time.Hour)
	e.k.greyhoundLeft("j", "iteration time rose 30%", rep)
	if cs := e.captures(t); len(cs) != 1 || cs[0].Signal != "greyhound:123" {
		t.Fatalf("one transition: %+v", cs)
	}
	rep.Controller.SinceNS = 456
	e.k.greyhoundLeft("j", "iteration time rose 30%", rep)
	if n := len(e.captures(t)); n != 2 {
		t.Fatalf("a second transition: %d captures", n)
	}
}
