package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

func kairStore(t *testing.T, world int) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutJob(&signal.Job{ID: "j", WorldSize: world, Schema: stagevec.DefaultSchema()}); err != nil {
		t.Fatal(err)
	}
	return st
}

// stepTrace is rank's trace of steps [from, to]: per step, n CPU ops of
// durNS back to back on one thread.
func stepTrace(rank int, from, to int64, n int, durNS int64) *optrace.Trace {
	tr := &optrace.Trace{Rank: rank}
	t := int64(1_700_000_000_000_000_000)
	for s := from; s <= to; s++ {
		for i := range n {
			tr.Events = append(tr.Events, optrace.Event{Name: "aten::mm", Cat: optrace.CPUOp, TID: 1, Device: -1, StartNS: t, DurNS: durNS, Step: s, Seq: -1})
			t += durNS + int64(i%3)
		}
	}
	return tr
}

const sec = int64(1e9)

// The capture life cycle: pending → recording on the first poll →
// complete once every asked rank uploaded; errors and the deadline close
// it partial or expired; a cancelled one takes no upload.
func TestKairLifecycle(t *testing.T) {
	st := kairStore(t, 3)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	var states []store.CaptureState
	k.OnState = func(c *store.Capture) { states = append(states, c.State) }
	now := int64(1_800_000_000) * sec
	c, err := k.Create("j", analysis.CaptureRequest{Reason: "test"}, CaptureHints{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Ranks, []int{0, 1, 2}) || c.Steps != 5 || c.Every != 1 || c.State != store.CapturePending || c.DeadlineNS != now+900*sec {
		t.Fatalf("capture %+v", c)
	}
	if _, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{Trigger: TriggerAuto}, now); !errors.Is(err, ErrCaptureOpen) {
		t.Fatalf("second capture: %v", err)
	}
	p, err := k.Pending("j", 1, -1, -1, now+sec)
	if err != nil || p == nil || p.ID != c.ID || p.State != store.CaptureRecording || !slices.Equal(p.Fetched, []int{1}) {
		t.Fatalf("poll: %+v %v", p, err)
	}
	if p, _ := k.Pending("j", 1, -1, -1, now+2*sec); p == nil || !slices.Equal(p.Fetched, []int{1}) {
		t.Fatalf("second poll: %+v", p)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(1, 10, 11, 5, 1000), nil, now+3*sec); err != nil {
		t.Fatal(err)
	}
	if p, _ := k.Pending("j", 1, -1, -1, now+4*sec); p != nil {
		t.Fatalf("rank 1 uploaded, still polled: %+v", p)
	}
	if _, err := k.FailRank("j", c.ID, 2, "no torch.profiler", now+5*sec); err != nil {
		t.Fatal(err)
	}
	got, err := k.Capture("j", c.ID, now+6*sec)
	if err != nil || got.State != store.CaptureRecording || got.Failed["2"] != "no torch.profiler" {
		t.Fatalf("after a failure: %+v %v", got, err)
	}
	// Rank 0 never answers: the deadline closes the capture partial.
	got, err = k.Capture("j", c.ID, c.DeadlineNS+1)
	if err != nil || got.State != store.CapturePartial {
		t.Fatalf("past the deadline: %+v %v", got, err)
	}
	// A late upload still counts.
	got, err = k.PutTrace("j", c.ID, stepTrace(0, 10, 11, 5, 1000), nil, c.DeadlineNS+2)
	if err != nil || got.State != store.CapturePartial || !slices.Equal(got.Uploaded, []int{0, 1}) {
		t.Fatalf("late upload: %+v %v", got, err)
	}
	if !slices.Equal(states, []store.CaptureState{store.CapturePending, store.CaptureRecording, store.CapturePartial}) {
		t.Errorf("states seen %v", states)
	}
	// The next capture: cancelled, then refused; expiry with no upload.
	c2, err := k.Create("j", analysis.CaptureRequest{Ranks: []int{2, 0}, Steps: 2, Every: 3}, CaptureHints{}, now+sec)
	if err != nil || !slices.Equal(c2.Ranks, []int{0, 2}) || c2.Steps != 2 || c2.Every != 3 {
		t.Fatalf("second: %+v %v", c2, err)
	}
	if got, err := k.Cancel("j", c2.ID, now+2*sec); err != nil || got.State != store.CaptureCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if _, err := k.PutTrace("j", c2.ID, stepTrace(0, 1, 1, 1, 1), nil, now+3*sec); !errors.Is(err, ErrCaptureClosed) {
		t.Fatalf("upload to cancelled: %v", err)
	}
	if p, _ := k.Pending("j", 0, -1, -1, now+3*sec); p != nil {
		t.Fatalf("cancelled capture polled: %+v", p)
	}
	c3, err := k.Create("j", analysis.CaptureRequest{Ranks: []int{1}}, CaptureHints{}, now+4*sec)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Settle("j", c3.DeadlineNS+1); err != nil {
		t.Fatal(err)
	}
	if got, _ := k.Capture("j", c3.ID, c3.DeadlineNS+1); got.State != store.CaptureExpired {
		t.Fatalf("expired: %+v", got)
	}
	list, err := k.Captures("j", c3.DeadlineNS+1)
	if err != nil || len(list) != 3 || list[0].ID != c3.ID {
		t.Fatalf("list: %d %v", len(list), err)
	}
}

// A restarted server (a fresh adapter over the same store) finds the
// open capture again.
func TestKairOpenSurvivesRestart(t *testing.T) {
	st := kairStore(t, 2)
	now := int64(1_800_000_000) * sec
	c, err := NewKairLifecycle(st, KairLifecycleConfig{}).Create("j", analysis.CaptureRequest{}, CaptureHints{}, now)
	if err != nil {
		t.Fatal(err)
	}
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	if p, err := k.Pending("j", 1, -1, -1, now+sec); err != nil || p == nil || p.ID != c.ID {
		t.Fatalf("poll after restart: %+v %v", p, err)
	}
	if _, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, now); !errors.Is(err, ErrCaptureOpen) {
		t.Fatalf("create after restart: %v", err)
	}
}

func TestKairCreateValidates(t *testing.T) {
	st := kairStore(t, 4)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	neg := int64(-1)
	for _, tc := range []struct {
		req   analysis.CaptureRequest
		field string
	}{
		{analysis.CaptureRequest{Steps: 65}, "steps"},
		{analysis.CaptureRequest{Steps: -1}, "steps"},
		{analysis.CaptureRequest{Every: -2}, "every"},
		{analysis.CaptureRequest{Every: 1001}, "every"},
		{analysis.CaptureRequest{Ranks: []int{4}}, "ranks"},
		{analysis.CaptureRequest{Ranks: []int{1, 1}}, "ranks"},
		{analysis.CaptureRequest{Ranks: []int{-1}}, "ranks"},
		{analysis.CaptureRequest{StartStep: &neg}, "start_step"},
	} {
		if _, err := k.Create("j", tc.req, CaptureHints{}, 1); !isField(err, tc.field) {
			t.Errorf("%+v: %v, want a %s error", tc.req, err, tc.field)
		}
	}
	// At 1 s a step, step 4000 is past the hour a capture waits.
	far := int64(4000)
	if _, err := k.Create("j", analysis.CaptureRequest{StartStep: &far}, CaptureHints{StepNS: 1e9}, 1); !isField(err, "start_step") {
		t.Errorf("far start step: %v", err)
	}
	if _, err := k.Create("nope", analysis.CaptureRequest{}, CaptureHints{}, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	long := strings.Repeat("é", 400) // 800 bytes: clipped on a rune boundary
	c, err := k.Create("j", analysis.CaptureRequest{Reason: long}, CaptureHints{}, 1)
	if err != nil || len(c.Reason) != 512 || !strings.HasPrefix(long, c.Reason) {
		t.Errorf("reason %d bytes, %v", len(c.Reason), err)
	}
}

// A large job records its suspects and random peers; the start step
// leads the newest stored step by 10 steps or 10 s of steps; the
// deadline covers the lead, the recording and the upload slack.
func TestKairDefaultsLargeJob(t *testing.T) {
	st := kairStore(t, 1000)
	vs := []stagevec.Vector{{Step: 500, Rank: 0, WallMS: 10, Durations: make([]float64, len(stagevec.DefaultSchema().Stages))}}
	if err := st.Append("j", vs); err != nil {
		t.Fatal(err)
	}
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	calls := 0
	k.intn = func(n int) int { calls++; return n - 1 }
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{Suspects: []int{977, 3, 977, 5000}, StepNS: 100e6}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Ranks) != 16 || !slices.Contains(c.Ranks, 3) || !slices.Contains(c.Ranks, 977) || calls != 14 || !slices.IsSorted(c.Ranks) {
		t.Errorf("ranks %v (%d random picks)", c.Ranks, calls)
	}
	// 10 s of 100 ms steps = 100 steps of lead.
	if c.StartStep != 600 {
		t.Errorf("start step %d, want 600", c.StartStep)
	}
	if want := (100+5)*int64(100e6) + 300*sec; c.DeadlineNS != want {
		t.Errorf("deadline %d, want %d", c.DeadlineNS, want)
	}
}

func TestKairReportAndTimeline(t *testing.T) {
	st := kairStore(t, 4)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	ctx := context.Background()
	if _, err := k.Report(ctx, "j", "", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no captures: %v", err)
	}
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(0, 1, 3, 40, 1000), nil, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Report(ctx, "j", "", 3); !errors.Is(err, analysis.ErrTooFewTraces) {
		t.Fatalf("one trace: %v", err)
	}
	for r := 1; r < 4; r++ {
		dur := int64(1000)
		if r == 2 {
			dur = 5000 // rank 2's operators run 5× longer
		}
		hb := []store.OpHeartbeat{{ClientSendNS: 10, ServerRecvNS: 20, ServerSendNS: 30, ClientRecvNS: 40}}
		if _, err := k.PutTrace("j", c.ID, stepTrace(r, 1, 3, 40, dur), hb, 2); err != nil {
			t.Fatal(err)
		}
	}
	ans, err := k.Report(ctx, "j", "", 3)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Capture.State != store.CaptureComplete || !slices.Equal(ans.Report.Ranks, []int{0, 1, 2, 3}) {
		t.Fatalf("answer %+v ranks %v", ans.Capture, ans.Report.Ranks)
	}
	again, err := k.Report(ctx, "j", c.ID, 4)
	if err != nil || again.Report != ans.Report {
		t.Errorf("second read not cached: %v", err)
	}
	tl, err := k.Timeline(ctx, "j", c.ID, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if tl.Step != 2 || len(tl.Ranks) != 4 || tl.Truncated {
		t.Fatalf("timeline %+v", tl)
	}
	for _, r := range tl.Ranks {
		if len(r.Events) != 40 || r.Events[0].Lane != "t1" || r.Events[0].Cat != optrace.CPUOp {
			t.Errorf("rank %d: %d events, first %+v", r.Rank, len(r.Events), r.Events[0])
		}
	}
	if _, err := k.Timeline(ctx, "j", c.ID, 9, 5); !isField(err, "step") {
		t.Errorf("unknown step: %v", err)
	}
}

// hookSrc runs hook once between Captures' unlocked store read and the
// lock, counts OpTraces loads, and fails capture writes while failPut is
// set.
type hookSrc struct {
	*store.Store
	hook     func()
	failPut  bool
	loads    int
	blockOps chan struct{} // if set, the first OpTraces waits for it
	entered  chan struct{}
}

func (h *hookSrc) Captures(job string) ([]*store.Capture, error) {
	cs, err := h.Store.Captures(job)
	if f := h.hook; f != nil {
		h.hook = nil
		f()
	}
	return cs, err
}

func (h *hookSrc) PutCapture(c *store.Capture) error {
	if h.failPut {
		return errors.New("disk full")
	}
	return h.Store.PutCapture(c)
}

func (h *hookSrc) OpTraces(job, capture string) ([]optrace.Trace, map[int][]store.OpHeartbeat, error) {
	h.loads++
	if b := h.blockOps; b != nil {
		h.blockOps = nil
		close(h.entered)
		<-b
	}
	return h.Store.OpTraces(job, capture)
}

// Regression (review finding 1): a list that read the records before a
// sweep and a late upload ran must not write its stale copy back over
// them — the late rank's trace would be stored but never listed.
func TestKairCapturesDoesNotLoseLateUpload(t *testing.T) {
	st := kairStore(t, 2)
	src := &hookSrc{Store: st}
	k := NewKairLifecycle(src, KairLifecycleConfig{})
	now := int64(1_800_000_000) * sec
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(0, 10, 11, 5, 1000), nil, now+sec); err != nil {
		t.Fatal(err)
	}
	late := c.DeadlineNS + sec
	src.hook = func() { // runs while Captures holds its stale (recording, [0]) copy
		if err := k.Settle("j", late); err != nil { // the sweep: → partial
			t.Error(err)
		}
		if _, err := k.PutTrace("j", c.ID, stepTrace(1, 10, 11, 5, 1000), nil, late); err != nil { // → complete
			t.Error(err)
		}
	}
	cs, err := k.Captures("j", late)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].State != store.CaptureComplete || !slices.Equal(cs[0].Uploaded, []int{0, 1}) {
		t.Errorf("listed %+v", cs[0])
	}
	got, err := st.Capture("j", c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.CaptureComplete || !slices.Equal(got.Uploaded, []int{0, 1}) {
		t.Fatalf("late upload lost: stored state=%s uploaded=%v", got.State, got.Uploaded)
	}
}

// Reads settle captures but stay readable when storing the settled
// state fails (a full disk): they serve it unsaved, and a later read
// stores it.
func TestKairReadsSurviveFailedSettleWrite(t *testing.T) {
	st := kairStore(t, 2)
	src := &hookSrc{Store: st}
	k := NewKairLifecycle(src, KairLifecycleConfig{})
	k.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := int64(1_800_000_000) * sec
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, now)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if _, err := k.PutTrace("j", c.ID, stepTrace(r, 1, 3, 40, 1000), nil, now+sec); err != nil {
			t.Fatal(err)
		}
	}
	d, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, now+2*sec) // open, unanswered
	if err != nil {
		t.Fatal(err)
	}
	src.failPut = true
	late := d.DeadlineNS + sec
	cs, err := k.Captures("j", late)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(cs) != 2 || cs[0].ID != d.ID || cs[0].State != store.CaptureExpired {
		t.Fatalf("list %+v", cs)
	}
	if one, err := k.Capture("j", d.ID, late); err != nil || one.State != store.CaptureExpired {
		t.Fatalf("get: %+v %v", one, err)
	}
	if ans, err := k.Report(context.Background(), "j", "", late); err != nil || ans.Capture.ID != c.ID {
		t.Fatalf("report: %v", err)
	}
	if got, _ := st.Capture("j", d.ID); got.State == store.CaptureExpired {
		t.Fatal("the failing write was stored")
	}
	src.failPut = false
	if _, err := k.Captures("j", late); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Capture("j", d.ID); got.State != store.CaptureExpired {
		t.Fatalf("settled state not stored once writes work: %s", got.State)
	}
}

// A request waiting on another's computation of the same report is not
// answered with that request's cancellation (its client left).
func TestKairReportWaiterOutlivesLeader(t *testing.T) {
	st := kairStore(t, 2)
	src := &hookSrc{Store: st, blockOps: make(chan struct{}), entered: make(chan struct{})}
	block := src.blockOps
	k := NewKairLifecycle(src, KairLifecycleConfig{})
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if _, err := k.PutTrace("j", c.ID, stepTrace(r, 1, 3, 40, 1000), nil, 2); err != nil {
			t.Fatal(err)
		}
	}
	leaderCtx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() {
		_, err := k.Report(leaderCtx, "j", c.ID, 3)
		leader <- err
	}()
	<-src.entered // the leader is loading traces
	waiter := make(chan error, 1)
	go func() {
		_, err := k.Report(context.Background(), "j", c.ID, 3)
		waiter <- err
	}()
	// Let the waiter reach the flight (were it late, it would compute
	// itself and pass anyway: this only orders, never times, the test).
	time.Sleep(20 * time.Millisecond)
	cancel()
	close(block)
	if err := <-leader; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: %v", err)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("waiter got the leader's cancellation: %v", err)
	}
}

// Timelines are cached with the report: one trace load builds the asked
// step and every analysed step.
func TestKairTimelineCached(t *testing.T) {
	st := kairStore(t, 2)
	src := &hookSrc{Store: st}
	k := NewKairLifecycle(src, KairLifecycleConfig{})
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for r := range 2 {
		if _, err := k.PutTrace("j", c.ID, stepTrace(r, 1, 3, 40, 1000*int64(r+1)), nil, 2); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	ans, err := k.Report(ctx, "j", c.ID, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Report.Analysed) < 2 {
		t.Fatalf("analysed %v", ans.Report.Analysed)
	}
	base := src.loads
	first, err := k.Timeline(ctx, "j", c.ID, ans.Report.Analysed[0], 4)
	if err != nil {
		t.Fatal(err)
	}
	again, err := k.Timeline(ctx, "j", c.ID, ans.Report.Analysed[0], 4)
	if err != nil || again != first {
		t.Fatalf("second read not cached: %v", err)
	}
	if _, err := k.Timeline(ctx, "j", c.ID, ans.Report.Analysed[1], 4); err != nil {
		t.Fatal(err)
	}
	if n := src.loads - base; n != 1 {
		t.Errorf("%d trace loads for three timeline reads", n)
	}
	// A re-upload makes the cached timelines stale.
	if _, err := k.PutTrace("j", c.ID, stepTrace(1, 1, 3, 40, 3000), nil, 5); err != nil {
		t.Fatal(err)
	}
	fresh, err := k.Timeline(ctx, "j", c.ID, ans.Report.Analysed[0], 6)
	if err != nil || fresh == first {
		t.Fatalf("stale timeline after a re-upload: %v", err)
	}
	// The bound: a cache of 10 events keeps none of these.
	small := NewKairLifecycle(st, KairLifecycleConfig{CachedTimelineEvents: 10})
	if _, err := small.Timeline(ctx, "j", c.ID, 1, 7); err != nil {
		t.Fatal(err)
	}
	if len(small.timelines) != 0 || small.timelineEvents != 0 {
		t.Errorf("cache over its bound: %d timelines, %d events", len(small.timelines), small.timelineEvents)
	}
}

// The traces of one capture are bounded in sum (a report loads them all):
// an upload over MaxCaptureEvents is refused naming events; a rank's
// re-upload replaces its own count.
func TestKairCaptureEventBudget(t *testing.T) {
	st := kairStore(t, 3)
	k := NewKairLifecycle(st, KairLifecycleConfig{MaxCaptureEvents: 250})
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(0, 1, 2, 100, 1000), nil, 2); err != nil { // 200 events
		t.Fatal(err)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(0, 1, 2, 110, 1000), nil, 2); err != nil { // re-upload: 220
		t.Fatalf("re-upload within the budget: %v", err)
	}
	_, err = k.PutTrace("j", c.ID, stepTrace(1, 1, 1, 40, 1000), nil, 3) // 260 in all
	if !errors.Is(err, store.ErrTraceTooLarge) || !isField(err, "events") {
		t.Fatalf("over the budget: %v", err)
	}
	got, err := k.Capture("j", c.ID, 4)
	if err != nil || !slices.Equal(got.Uploaded, []int{0}) {
		t.Fatalf("refused upload listed: %+v %v", got, err)
	}
	if _, err := k.PutTrace("j", c.ID, stepTrace(1, 1, 1, 30, 1000), nil, 5); err != nil { // 250
		t.Fatalf("at the budget: %v", err)
	}
}

// Issue 16 item 7b: a plan starts at a step every rank will reach, chosen
// from the ranks' own poll-reported steps — also for a job with no stage
// vectors, where the start used to be 0 ("each rank's next step"), so
// ranks polling seconds apart recorded different steps. The margin is
// LeadNS of steps at the polled step rate.
func TestKairStartStepFromPolls(t *testing.T) {
	st := kairStore(t, 4)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	now := int64(1_800_000_000) * sec
	// Four ranks at ~100 ms a step poll every 2 s; rank 3 is a step behind.
	for i := range int64(3) {
		for r := range 4 {
			step := 100 + 20*i
			if r == 3 {
				step--
			}
			if p, err := k.Pending("j", r, step, -1, now+i*2*sec); err != nil || p != nil {
				t.Fatalf("poll: %+v %v", p, err)
			}
		}
	}
	at := now + 4*sec + 500_000_000 // half a second after the last polls: ~5 more steps
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{Trigger: TriggerAuto}, at)
	if err != nil {
		t.Fatal(err)
	}
	// newest 140 + 5 steps since, + 10 s at 100 ms a step.
	if c.StartStep != 145+100 {
		t.Fatalf("start step %d, want 245 (newest reported 140, +5 since, +100 lead)", c.StartStep)
	}
	// The deadline covers the lead and the recording at the polled rate.
	if want := at + (100+int64(c.Steps))*100_000_000 + 300*sec; c.DeadlineNS != want {
		t.Errorf("deadline %d, want %d", c.DeadlineNS, want)
	}
}

// A plan created without a step time — no rank had said where it is, or
// only once (no rate) — is not handed out until the polls give a rate,
// then gets a start step 10 s of steps ahead on its first fetch, the same
// for every rank; after provisionalWaitNS without a rate it goes out with
// the 10-step lead.
func TestKairStartStepFixedOnFirstFetch(t *testing.T) {
	st := kairStore(t, 3)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	now := int64(1_800_000_000) * sec
	c, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{Trigger: TriggerAuto}, now)
	if err != nil || c.StartStep != 0 {
		t.Fatalf("%+v %v", c, err)
	}
	// One report per rank: no rate yet, the plan is held back.
	for r := range 3 {
		if p, err := k.Pending("j", r, 57, -1, now+sec); err != nil || p != nil {
			t.Fatalf("rank %d, no rate yet: %+v %v", r, p, err)
		}
	}
	// 2 s later at 50 ms a step: the rate is known; start = 97 + 200.
	p0, err := k.Pending("j", 0, 97, -1, now+3*sec)
	if err != nil || p0 == nil || p0.StartStep != 97+200 {
		t.Fatalf("first fetch: %+v %v (want start 297)", p0, err)
	}
	p1, _ := k.Pending("j", 1, 99, -1, now+4*sec)
	p2, _ := k.Pending("j", 2, -1, -1, now+4*sec)
	if p1 == nil || p2 == nil || p1.StartStep != 297 || p2.StartStep != 297 {
		t.Fatalf("later fetches: %+v %+v", p1, p2)
	}
	if got, _ := k.Capture("j", c.ID, now+5*sec); got.StartStep != 297 {
		t.Fatalf("stored start %d", got.StartStep)
	}
	// A job whose ranks report no rate: the plan goes out after the wait.
	st2 := kairStore(t, 2)
	k2 := NewKairLifecycle(st2, KairLifecycleConfig{})
	if _, err := k2.Create("j", analysis.CaptureRequest{}, CaptureHints{Trigger: TriggerAuto}, now); err != nil {
		t.Fatal(err)
	}
	if p, _ := k2.Pending("j", 0, 57, -1, now+sec); p != nil {
		t.Fatalf("held back within the wait: %+v", p)
	}
	if p, _ := k2.Pending("j", 0, 57, -1, now+16*sec); p == nil || p.StartStep != 57+10 {
		t.Fatalf("after the wait: %+v (want start 67)", p)
	}
}
