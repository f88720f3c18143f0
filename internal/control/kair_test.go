package control

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/analysis"
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

// fakeFrontier is the StageFrontier evaluation as the driver reads it.
type fakeFrontier struct {
	advancing bool
	stepNS    int64
	ranks     []int
}

func (f *fakeFrontier) Suspects(string) (int64, []int) { return f.stepNS, f.ranks }
func (f *fakeFrontier) Advancing(string) bool          { return f.advancing }

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

// The incident escalation's capture: trigger incident, the incident's
// suspects recorded beside random peers, its signal kept (one capture per
// incident across restarts), counted; refused while one is open.
func TestKairIncidentCapture(t *testing.T) {
	e := newKairTest(t, 64, KairConfig{Steps: 3})
	var _ Capturer = e.k
	c, err := e.k.CreateIncidentCapture("j", []int{41, 7}, 100, "incident inc-1: rank 41 is slowing the job", "incident:inc-1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Trigger != TriggerIncident || c.Signal != "incident:inc-1" || c.Steps != 3 || !slices.Contains(c.Ranks, 41) || !slices.Contains(c.Ranks, 7) || len(c.Ranks) != 16 {
		t.Fatalf("incident capture %+v", c)
	}
	// The incident's step time (100 ms) sets how long the capture waits:
	// 3 steps plus 5 min of slack (15 min without a step time).
	if want := e.now.UnixNano() + 3*int64(100e6) + 300e9; c.DeadlineNS != want {
		t.Fatalf("deadline %d, want %d (the incident's step time not taken)", c.DeadlineNS, want)
	}
	if got := testutil.ToFloat64(e.k.captures.WithLabelValues(TriggerIncident, "pending")); got != 1 {
		t.Fatalf("captures_total{incident,pending} = %v", got)
	}
	if _, err := e.k.CreateIncidentCapture("j", []int{3}, 100, "again", "incident:inc-2"); !errors.Is(err, ErrCaptureOpen) {
		t.Fatalf("second capture while one is open: %v", err)
	}
	stored, err := e.st.Capture("j", c.ID)
	if err != nil || stored.Trigger != TriggerIncident {
		t.Fatalf("stored %+v, %v", stored, err)
	}
}

// Polling: ranks that polled for captures within 30 s (naming their step
// or not) make a job capturable at once; a silent one is not.
func TestKairPolling(t *testing.T) {
	e := newKairTest(t, 4, KairConfig{})
	if e.k.Polling("j") {
		t.Fatal("polling before any poll")
	}
	if _, err := e.k.PendingCapture("j", 1, -1, 0); err != nil { // a poll that names no step yet
		t.Fatal(err)
	}
	if !e.k.Polling("j") {
		t.Fatal("not polling right after a poll")
	}
	e.now = e.now.Add(31 * time.Second)
	if e.k.Polling("j") {
		t.Fatal("still polling 31 s after the last poll")
	}
}
