package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Test time axis: step s at incT0 + s × 100 ms; healthy steps take 100 ms.
const (
	incT0     = int64(1_700_000_000_000_000_000)
	incStepNS = int64(100 * time.Millisecond)
)

func atStep(step int64) int64 { return incT0 + step*incStepNS }

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  int64
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Unix(0, c.t) }
func (c *clock) set(ns int64)   { c.mu.Lock(); c.t = ns; c.mu.Unlock() }

func openStore(t *testing.T, dir string, jobs ...string) *store.Store {
	t.Helper()
	st, err := store.Open(dir, store.Options{Logger: quiet, NoSync: true, CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, j := range jobs {
		if _, err := st.Job(j); err == nil {
			continue
		}
		if err := st.PutJob(&signal.Job{ID: j, WorldSize: 8, Schema: stagevec.DefaultSchema(), Created: time.Unix(0, incT0)}); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

type rig struct {
	x   *Incidents
	st  *store.Store
	reg *prometheus.Registry
	clk *clock
	mu  sync.Mutex
	chg []Change
}

func newRig(t *testing.T, st *store.Store, cfg IncidentsConfig) *rig {
	t.Helper()
	r := &rig{st: st, reg: prometheus.NewRegistry(), clk: &clock{t: atStep(0)}}
	x, err := NewIncidents(cfg, st, r.reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	x.SetClock(r.clk.now)
	x.Subscribe(func(c Change) {
		// Told after it is stored: the change is readable now.
		got, err := x.Get(c.Incident.ID)
		if err != nil || got.State != c.To {
			t.Errorf("change %s → %s of %s told before it was stored: %v, %v", c.From, c.To, c.Incident.ID, got, err)
		}
		r.mu.Lock()
		r.chg = append(r.chg, c)
		r.mu.Unlock()
	})
	r.x = x
	return r
}

func (r *rig) sync(now int64) {
	r.clk.set(now)
	r.x.Drain(context.Background())
}

func (r *rig) changes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.chg {
		out = append(out, fmt.Sprintf("%s:%s→%s", c.Incident.ID, c.From, c.To))
	}
	return out
}

func (r *rig) list(t *testing.T, job string) []incident.Incident {
	t.Helper()
	incs, err := r.x.List(IncidentQuery{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	return incs
}

// Evidence builders (the shapes internal/analysis's adapters produce).

func series(job string, from, to int64, ms func(int64) float64) incident.Evidence {
	e := incident.Evidence{ID: fmt.Sprintf("sf/progress/%d", from), Kind: incident.KindProgress, Engine: incident.EngineStageFrontier, Job: job,
		AtNS: atStep(to), Window: incident.Span{FromStep: from, ToStep: to - 1, FromNS: atStep(from), ToNS: atStep(to - 1)}, Signal: incident.SignalProgress, Ranks: 8}
	for s := from; s < to; s++ {
		e.Samples = append(e.Samples, incident.Sample{Step: s, WallNS: atStep(s), MS: ms(s)})
	}
	return e
}

func slowBetween(a, b int64, ms float64) func(int64) float64 {
	return func(s int64) float64 {
		if s >= a && s < b {
			return ms
		}
		return 100
	}
}

func onset(job string, eng incident.Engine, step int64, before, after float64) incident.Evidence {
	k := incident.KindStageChange
	if eng == incident.EngineGreyhound {
		k = incident.KindGreyhoundChange
	}
	return incident.Evidence{ID: fmt.Sprintf("%s/onset/%d", eng, step), Kind: k, Engine: eng, Job: job, AtNS: atStep(step + 30),
		Window: incident.Span{FromStep: step, ToStep: step, FromNS: atStep(step), ToNS: atStep(step)}, Signal: incident.SignalOnset,
		BeforeMS: before, AfterMS: after, Verified: true, Text: "step time rose"}
}

func relief(job string, eng incident.Engine, step int64, before, after float64) incident.Evidence {
	e := onset(job, eng, step, before, after)
	e.ID, e.Signal = fmt.Sprintf("%s/relief/%d", eng, step), incident.SignalRelief
	return e
}

func late(job string, rank int, host string, from, to int64) incident.Evidence {
	return incident.Evidence{ID: fmt.Sprintf("greyhound/late/%d", from), Kind: incident.KindGreyhoundLate, Engine: incident.EngineGreyhound, Job: job,
		AtNS: atStep(to + 5), Window: incident.Span{FromStep: from, ToStep: to, FromNS: atStep(from), ToNS: atStep(to)}, Signal: incident.SignalFinding,
		Targets: []incident.Target{incident.RankTarget(rank, host)}, Layer: incident.LayerCollective, Category: incident.CategoryCommunication,
		Confidence: incident.ConfidenceHigh, Exclusive: true, Subject: "comm:world", Text: fmt.Sprintf("rank %d enters last", rank)}
}

func check[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// One slowdown's life: an onset opens one incident, a second engine's
// onset and a finding join it (same ID, the cause stated), a relief
// makes it recovering and the hold-down resolves it without new
// evidence. Every state change is told once, after it is stored, and the
// metrics follow.
func TestIncidentLife(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	incs := r.list(t, "j")
	if len(incs) != 1 || incs[0].State != incident.StateOpen || len(incs[0].Cause) != 0 {
		t.Fatalf("after the onset: %+v", incs)
	}
	id := incs[0].ID
	if got := testutil.ToFloat64(r.x.m.open.WithLabelValues("j", causeLabel(incs[0].Category))); got != 1 {
		t.Fatalf("laggard_incidents_open = %v, want 1", got)
	}

	// Join: Greyhound's onset and its late-rank finding, re-sent too.
	join := []incident.Evidence{series("j", 1100, 1300, slowBetween(1000, 9999, 150)), onset("j", incident.EngineGreyhound, 1003, 90, 140), late("j", 3, "h3", 1000, 1290)}
	r.x.Observe("j", join)
	r.x.Observe("j", join)
	r.sync(atStep(1300))
	incs = r.list(t, "j")
	if len(incs) != 1 || incs[0].ID != id || !slices.Equal(incs[0].Cause, []string{"rank:3"}) {
		t.Fatalf("after the join: %d incidents, %+v", len(incs), incs)
	}
	if len(incs[0].Evidence) != 3 { // two onsets and the finding (progress is not listed)
		t.Fatalf("joined incident holds %d pieces of evidence", len(incs[0].Evidence))
	}
	// Opened at step 1000, published at step 1100 (10 s), localized at
	// step 1300 (30 s).
	if n, sum := histo(t, r.x.m.detection); n != 1 || sum != 10 {
		t.Fatalf("detection_seconds: %d observations, sum %v; want 1, 10", n, sum)
	}
	if n, sum := histo(t, r.x.m.localization); n != 1 || sum != 30 {
		t.Fatalf("localization_seconds: %d observations, sum %v; want 1, 30", n, sum)
	}
	lost := incs[0].Lost.Seconds
	if lost <= 0 || testutil.ToFloat64(r.x.m.lost.WithLabelValues("j")) != lost {
		t.Fatalf("lost %v s, counter %v", lost, testutil.ToFloat64(r.x.m.lost.WithLabelValues("j")))
	}

	// Relief, then the hold-down passes with no new evidence.
	r.x.Observe("j", []incident.Evidence{series("j", 1300, 1400, slowBetween(1000, 1300, 150)), relief("j", incident.EngineStageFrontier, 1300, 150, 102)})
	r.sync(atStep(1400))
	if s := r.list(t, "j")[0].State; s != incident.StateRecovering {
		t.Fatalf("after the relief: %s", s)
	}
	r.x.Observe("j", []incident.Evidence{series("j", 1400, 3000, slowBetween(1000, 1300, 150))})
	r.sync(atStep(3000))
	r.x.tick()
	r.sync(atStep(3000) + int64(3*time.Minute))
	final := check(r.x.Get(id))(t)
	if final.State != incident.StateResolved {
		t.Fatalf("after the hold-down: %s", final.State)
	}
	// The join stated the cause: an update (open→open) for the alerts.
	want := []string{id + ":→open", id + ":open→open", id + ":open→recovering", id + ":recovering→resolved"}
	if got := r.changes(); !slices.Equal(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if got := testutil.ToFloat64(r.x.m.open.WithLabelValues("j", causeLabel(final.Category))); got != 0 {
		t.Fatalf("laggard_incidents_open after resolution = %v", got)
	}
	for to, n := range map[string]float64{"open": 1, "recovering": 1, "resolved": 1} {
		if got := testutil.ToFloat64(r.x.m.transitions.WithLabelValues(to)); got != n {
			t.Errorf("transitions_total{to=%s} = %v, want %v", to, got, n)
		}
	}
	if lc := testutil.ToFloat64(r.x.m.lost.WithLabelValues("j")); lc != final.Lost.Seconds {
		t.Fatalf("lost counter %v, incident lost %v", lc, final.Lost.Seconds)
	}
	// The evidence of a closed incident leaves the working set (the stored
	// incident keeps it): the set holds the progress series only.
	n := 0
	if err := st.IncidentWorkingSet("j", func(id string, _ []byte) error {
		if !strings.HasPrefix(id, "sf/progress/") {
			t.Errorf("evidence %s of a closed incident still in the working set", id)
		}
		n++
		return nil
	}, func(store.ActionKey, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(r.x.m.dropped.WithLabelValues("resolved")) == 0 {
		t.Fatal("no evidence counted as dropped for its resolved incident")
	}
}

// A restart re-fuses the same set: a new manager over the same store
// lists the same incidents with the same IDs, and evidence arriving
// after the restart joins the incident it belongs to.
func TestIncidentsRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, "j", "k")
	r := newRig(t, st, IncidentsConfig{})
	for _, job := range []string{"j", "k"} {
		r.x.Observe(job, []incident.Evidence{series(job, 0, 1200, slowBetween(1000, 9999, 150)), onset(job, incident.EngineStageFrontier, 1000, 100, 150),
			onset(job, incident.EngineGreyhound, 1002, 90, 140)})
	}
	r.sync(atStep(1200))
	before := r.list(t, "j")
	if len(before) != 1 {
		t.Fatalf("before the restart: %d incidents", len(before))
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, dir)
	r2 := newRig(t, st2, IncidentsConfig{})
	// Open incidents are back in the metrics before any fusion.
	if got := testutil.ToFloat64(r2.x.m.open.WithLabelValues("j", causeLabel(before[0].Category))); got != 1 {
		t.Fatalf("open gauge after restart = %v", got)
	}
	r2.sync(atStep(1200)) // the restart re-fuses unresolved incidents' jobs
	after := r2.list(t, "j")
	bj, _ := json.Marshal(before)
	aj, _ := json.Marshal(after)
	if string(bj) != string(aj) {
		t.Fatalf("re-fused after a restart:\n%s\nwant\n%s", aj, bj)
	}
	if got := r2.changes(); len(got) != 0 {
		t.Fatalf("a restart told changes: %q", got)
	}
	r2.x.Observe("j", []incident.Evidence{late("j", 5, "h5", 1000, 1190)})
	r2.sync(atStep(1210))
	after = r2.list(t, "j")
	if len(after) != 1 || after[0].ID != before[0].ID || !slices.Equal(after[0].Cause, []string{"rank:5"}) {
		t.Fatalf("evidence after the restart: %+v", after)
	}
	if all := check(r2.x.List(IncidentQuery{}))(t); len(all) != 2 {
		t.Fatalf("List across jobs: %d incidents, want 2", len(all))
	}
}

// A stored record that does not decode is skipped, logged and counted;
// the others are served; the server does not stop.
func TestIncidentsCorruptRecordSkipped(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, "j")
	r := newRig(t, st, IncidentsConfig{})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	good := r.list(t, "j")[0].ID
	for _, bad := range []store.IncidentRecord{
		{ID: "inc-garbage", Value: []byte("{not json"), Summary: []byte("{not json")},
		{ID: "inc-schema", Value: []byte(`{"schema":"laggard.incident/v0","id":"inc-schema","job":"j","state":"open"}`), Summary: []byte(`{"schema":"x"}`)},
		{ID: "inc-other", Value: []byte(`{"schema":"laggard.incident/v1","id":"inc-elsewhere","job":"j","state":"open"}`), Summary: []byte(`[]`)},
	} {
		if err := st.WriteIncidents("j", &store.IncidentWrite{Put: []store.IncidentRecord{bad}, PutEvidence: []store.EvidenceRecord{{ID: "bad/" + bad.ID, Value: []byte("{")}}}); err != nil {
			t.Fatal(err)
		}
	}
	r2 := newRig(t, st, IncidentsConfig{}) // the index scan meets the bad summaries
	if got := testutil.ToFloat64(r2.x.m.skipped); got != 3 {
		t.Fatalf("index scan skipped %v records, want 3", got)
	}
	incs := r2.list(t, "j")
	if len(incs) != 1 || incs[0].ID != good {
		t.Fatalf("List with corrupt records: %+v", incs)
	}
	if _, err := r2.x.Get("inc-garbage"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a corrupt record: %v, want ErrNotFound", err)
	}
	r2.x.Observe("j", []incident.Evidence{late("j", 2, "h2", 1000, 1090)})
	r2.sync(atStep(1110)) // loading the job's state meets the bad incidents and the bad evidence
	if got := testutil.ToFloat64(r2.x.m.skipped); got < 3+3+3 {
		t.Fatalf("skipped %v records, want every bad one counted", got)
	}
	if incs := r2.list(t, "j"); len(incs) != 1 || !slices.Equal(incs[0].Cause, []string{"rank:2"}) {
		t.Fatalf("fusion beside corrupt records: %+v", incs)
	}
}

// Re-sending the same evidence stores nothing and tells nothing.
func TestObserveIdempotent(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	evs := []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)}
	r.x.Observe("j", evs)
	r.sync(atStep(1100))
	first := r.list(t, "j")
	r.x.Observe("j", evs)
	older := evs[1]
	older.AtNS--
	older.Text = "an older report must not replace the newer"
	r.x.Observe("j", []incident.Evidence{older})
	r.sync(atStep(1100))
	again := r.list(t, "j")
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(again)
	if string(a) != string(b) || len(r.changes()) != 1 {
		t.Fatalf("a re-send changed the incident or told again: %q", r.changes())
	}
}

// The working set is bounded per job (oldest first, counted) and the
// fusion queue sheds beyond its bytes (counted); the store holds no more
// than the bound.
func TestWorkingSetBounded(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{MaxJobEvidence: 16})
	var evs []incident.Evidence
	for i := range 100 {
		e := late("j", i%8, "", int64(i*10), int64(i*10+5))
		e.ID = fmt.Sprintf("finding/%03d", i)
		evs = append(evs, e)
	}
	r.x.Observe("j", evs)
	r.sync(atStep(1000))
	n := 0
	oldest := "~"
	if err := st.IncidentWorkingSet("j", func(id string, _ []byte) error {
		n++
		oldest = min(oldest, id)
		return nil
	}, func(store.ActionKey, []byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 16 || oldest != "finding/084" {
		t.Fatalf("stored working set: %d pieces from %s, want the newest 16 (from finding/084)", n, oldest)
	}
	if got := testutil.ToFloat64(r.x.m.dropped.WithLabelValues("job_cap")); got != 84 {
		t.Fatalf("dropped{job_cap} = %v, want 84", got)
	}

	small := newRig(t, openStore(t, t.TempDir(), "j"), IncidentsConfig{MaxPendingBytes: 2 << 10})
	for range 20 {
		small.x.Observe("j", evs[:5])
	}
	if got := testutil.ToFloat64(small.x.m.dropped.WithLabelValues("shed")); got == 0 {
		t.Fatal("a full fusion queue shed nothing")
	}
	if small.x.pendingBytes > 2<<10 {
		t.Fatalf("pending %d bytes over the 2 KiB bound", small.x.pendingBytes)
	}
	// Bad evidence never enters.
	small.x.Observe("j", []incident.Evidence{{ID: "", Kind: incident.KindProgress, Signal: incident.SignalProgress}, {ID: "x", Kind: "k", Signal: "nope"},
		{ID: "y", Job: "other", Kind: "k", Signal: incident.SignalFinding}})
	if got := testutil.ToFloat64(small.x.m.dropped.WithLabelValues("invalid")); got != 3 {
		t.Fatalf("dropped{invalid} = %v, want 3", got)
	}
}

// The manager's cache of job states stays within MaxBytes: idle jobs are
// unloaded and reloaded from the store when evidence arrives.
func TestStateCacheBounded(t *testing.T) {
	jobs := []string{"a", "b", "c", "d"}
	st := openStore(t, t.TempDir(), jobs...)
	r := newRig(t, st, IncidentsConfig{MaxBytes: 64 << 10})
	for _, j := range jobs {
		r.x.Observe(j, []incident.Evidence{series(j, 0, 1100, slowBetween(1000, 9999, 150)), onset(j, incident.EngineStageFrontier, 1000, 100, 150)})
		r.sync(atStep(1100))
	}
	if r.x.bytes > 64<<10+r.x.jobs["d"].bytes {
		t.Fatalf("cache holds %d bytes over the bound", r.x.bytes)
	}
	if len(r.x.jobs) == len(jobs) {
		t.Fatalf("no job state was unloaded (%d bytes cached)", r.x.bytes)
	}
	r.x.Observe("a", []incident.Evidence{late("a", 1, "", 1000, 1090)})
	r.sync(atStep(1100))
	if incs := r.list(t, "a"); len(incs) != 1 || !slices.Equal(incs[0].Cause, []string{"rank:1"}) {
		t.Fatalf("a reloaded job: %+v", incs)
	}
}

// Forget drops a deleted job's queued evidence, cached state, index
// entries and series.
func TestForget(t *testing.T) {
	st := openStore(t, t.TempDir(), "j", "k")
	r := newRig(t, st, IncidentsConfig{})
	for _, j := range []string{"j", "k"} {
		r.x.Observe(j, []incident.Evidence{series(j, 0, 1100, slowBetween(1000, 9999, 150)), onset(j, incident.EngineStageFrontier, 1000, 100, 150)})
	}
	r.sync(atStep(1100))
	r.x.Observe("j", []incident.Evidence{late("j", 1, "", 1000, 1090)}) // queued, not fused
	if err := st.DeleteJob("j"); err != nil {
		t.Fatal(err)
	}
	r.x.Forget("j")
	r.sync(atStep(1100))
	all := check(r.x.List(IncidentQuery{}))(t)
	if len(all) != 1 || all[0].Job != "k" {
		t.Fatalf("after Forget: %+v", all)
	}
	if _, ok := r.x.jobs["j"]; ok {
		t.Fatal("forgotten job still cached")
	}
	if n := testutil.CollectAndCount(r.x.m.open, "laggard_incidents_open"); n != 1 {
		t.Fatalf("open series after Forget: %d, want k's only", n)
	}
	if rows := check(r.x.Hosts(0, 0))(t); len(rows) != 0 {
		t.Fatalf("hosts: %+v", rows)
	}
}

// The fleet view ranks a host blamed in two jobs, and the later
// incident notes the earlier one.
func TestHostsAndRelated(t *testing.T) {
	st := openStore(t, t.TempDir(), "j1", "j2")
	r := newRig(t, st, IncidentsConfig{})
	r.x.Observe("j1", []incident.Evidence{series("j1", 0, 1100, slowBetween(1000, 9999, 150)), onset("j1", incident.EngineStageFrontier, 1000, 100, 150), late("j1", 3, "h7", 1000, 1090)})
	r.sync(atStep(1100))
	r.x.Observe("j2", []incident.Evidence{series("j2", 0, 2100, slowBetween(2000, 9999, 150)), onset("j2", incident.EngineStageFrontier, 2000, 100, 150), late("j2", 0, "h7", 2000, 2090)})
	r.sync(atStep(2100))
	rows := check(r.x.Hosts(0, 0))(t)
	if len(rows) != 1 || rows[0].Host != "h7" || rows[0].Incidents != 2 || !slices.Equal(rows[0].Jobs, []string{"j1", "j2"}) {
		t.Fatalf("hosts: %+v", rows)
	}
	inc2 := r.list(t, "j2")[0]
	if len(inc2.Related) != 1 || inc2.Related[0].Job != "j1" || !strings.Contains(inc2.Related[0].Text, "h7") {
		t.Fatalf("related: %+v", inc2.Related)
	}
}

// Escalation fakes.

type fakeValidator struct {
	mu    sync.Mutex
	calls []string
	busy  bool
}

func (f *fakeValidator) RequestValidation(job string) (analysis.GreyhoundPhase, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, job)
	if f.busy {
		return analysis.PhaseValidation, false, nil
	}
	return analysis.GreyhoundPhase("tracking"), true, nil
}

type fakeCapturer struct {
	mu    sync.Mutex
	calls [][]int
	err   error
}

func (f *fakeCapturer) CreateIncidentCapture(job string, ranks []int, stepMS float64, reason, sig string) (*store.Capture, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, ranks)
	if f.err != nil {
		return nil, f.err
	}
	return &store.Capture{ID: fmt.Sprintf("c%012d", len(f.calls)), Job: job, Trigger: TriggerIncident, Ranks: ranks, Signal: sig, StartStep: 1200}, nil
}

type fakeSysom struct {
	mu   sync.Mutex
	reqs []analysis.SysomRequest
}

func (f *fakeSysom) Report(ctx context.Context, req analysis.SysomRequest) (*analysis.SysomReport, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	return &analysis.SysomReport{Window: analysis.SysomWindow{FromNS: req.Window.FromNS, ToNS: req.Window.ToNS, Ranks: 8}}, nil
}

func allCaps(string) incident.Capabilities {
	return incident.Capabilities{Validation: true, Capture: true, Profile: true, Ranks: 8}
}

func audit(inc *incident.Incident) []string {
	var out []string
	for _, a := range inc.Audit {
		out = append(out, string(a.Kind)+":"+a.Result)
	}
	slices.Sort(out)
	return out
}

// The incident asks each engine once (Greyhound validation, a KAIR
// capture of the suspect, a SysOM profile window of the suspect and a
// healthy peer), records an audit line for each, and asks nothing again
// on later fusions or after a restart.
func TestEscalationAsksOnce(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir, "j")
	r := newRig(t, st, IncidentsConfig{})
	val, capt, sys := &fakeValidator{}, &fakeCapturer{}, &fakeSysom{}
	var sysomFed []string
	r.x.SetDeps(IncidentDeps{Caps: allCaps, Validator: val, Capturer: capt, Sysom: sys, Adapters: Adapters{
		Sysom: func(rep *analysis.SysomReport, _ map[int]string) []incident.Evidence {
			sysomFed = append(sysomFed, "x")
			return nil
		}}})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150),
		func() incident.Evidence {
			e := late("j", 3, "h3", 1000, 1090)
			e.Confidence = incident.ConfidenceLow // suspected: a suspect to capture
			return e
		}()})
	r.sync(atStep(1100))
	inc := r.list(t, "j")[0]
	wantAudit := []string{"greyhound_validation:requested", "kair_capture:requested", "sysom_profile:done", "sysom_profile:requested"}
	if got := audit(&inc); !slices.Equal(got, wantAudit) {
		t.Fatalf("audit %q, want %q (waiting %+v)", got, wantAudit, inc.Waiting)
	}
	if len(val.calls) != 1 || len(capt.calls) != 1 || !slices.Equal(capt.calls[0], []int{3}) || len(sys.reqs) != 1 || len(sysomFed) != 1 {
		t.Fatalf("engines asked: validation %v, capture %v, profile %d, fed %d", val.calls, capt.calls, len(sys.reqs), len(sysomFed))
	}
	if w := sys.reqs[0].Window; w.FromNS != inc.Windows.During.FromNS || w.BaseToNS > w.FromNS || w.BaseFromNS >= w.BaseToNS {
		t.Fatalf("profile window %+v for incident windows %+v", w, inc.Windows)
	}
	for _, w := range inc.Waiting {
		if !w.Asked {
			t.Fatalf("request %+v still unasked after its action", w)
		}
	}
	r.x.pendingFuse("j")
	r.sync(atStep(1200))
	if len(val.calls)+len(capt.calls)+len(sys.reqs) != 3 {
		t.Fatalf("asked again on a later fusion: %v %v %d", val.calls, capt.calls, len(sys.reqs))
	}
	if got := testutil.ToFloat64(r.x.m.escalations.WithLabelValues("kair_capture", "requested")); got != 1 {
		t.Fatalf("escalations_total{kair_capture,requested} = %v", got)
	}
	// A restart does not ask again either (the audit is stored).
	r2 := newRig(t, st, IncidentsConfig{})
	r2.x.SetDeps(IncidentDeps{Caps: allCaps, Validator: val, Capturer: capt, Sysom: sys})
	r2.sync(atStep(1300))
	if len(val.calls)+len(capt.calls)+len(sys.reqs) != 3 {
		t.Fatalf("asked again after a restart: %v %v %d", val.calls, capt.calls, len(sys.reqs))
	}
}

// Cool-downs and the per-job budget skip a request (one audit line, not
// one per fusion) and let it through once they pass; a busy engine is
// skipped and asked again; a failure is recorded.
func TestEscalationCooldownBudget(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	cfg := IncidentsConfig{Escalation: EscalationConfig{ValidationCooldown: 10 * time.Minute, JobBudget: 100}}
	cfg.Fusion = incident.DefaultConfig()
	cfg.Fusion.HoldDown = time.Second
	cfg.Fusion.HoldDownSteps = 1
	r := newRig(t, st, cfg)
	val := &fakeValidator{}
	capt := &fakeCapturer{err: ErrCaptureOpen}
	r.x.SetDeps(IncidentDeps{Caps: func(string) incident.Capabilities {
		return incident.Capabilities{Validation: true, Capture: true, Ranks: 8}
	}, Validator: val, Capturer: capt})
	// Incident 1 asks for a validation; it resolves; incident 2 opens a
	// minute later and its validation waits for the cool-down.
	slow := func(s int64) float64 {
		if (s >= 1000 && s < 1100) || s >= 2000 {
			return 150
		}
		return 100
	}
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slow), onset("j", incident.EngineStageFrontier, 1000, 100, 150), late("j", 2, "", 1000, 1090)})
	r.sync(atStep(1100))
	r.x.Observe("j", []incident.Evidence{series("j", 1100, 2100, slow), relief("j", incident.EngineStageFrontier, 1100, 150, 100),
		onset("j", incident.EngineStageFrontier, 2000, 100, 150), late("j", 4, "", 2000, 2090)})
	r.sync(atStep(2100))
	for range 3 { // more fusions inside the cool-down: no new audit lines
		r.x.pendingFuse("j")
		r.sync(atStep(2200))
	}
	incs := r.list(t, "j")
	if len(incs) != 2 {
		t.Fatalf("%d incidents, want 2", len(incs))
	}
	second := incs[0] // newest first
	if got := audit(&second); !slices.Equal(got, []string{"greyhound_validation:skipped", "kair_capture:skipped"}) {
		t.Fatalf("second incident's audit %q", got)
	}
	if !strings.Contains(second.Audit[0].Text+second.Audit[1].Text, "cool-down") || !strings.Contains(second.Audit[0].Text+second.Audit[1].Text, "busy") {
		t.Fatalf("skip reasons: %+v", second.Audit)
	}
	if len(val.calls) != 1 {
		t.Fatalf("validations asked: %d, want 1 during the cool-down", len(val.calls))
	}
	// The cool-down passes: the second incident's validation goes.
	capt.mu.Lock()
	capt.err = errors.New("boom")
	capt.mu.Unlock()
	r.x.pendingFuse("j")
	r.sync(atStep(1000) + int64(11*time.Minute))
	second = *check(r.x.Get(second.ID))(t)
	if len(val.calls) != 2 || !slices.Contains(audit(&second), "greyhound_validation:requested") || !slices.Contains(audit(&second), "kair_capture:failed") {
		t.Fatalf("after the cool-down: %d validations, audit %q", len(val.calls), audit(&second))
	}

	// The budget: one request per window.
	st2 := openStore(t, t.TempDir(), "j")
	b := newRig(t, st2, IncidentsConfig{Escalation: EscalationConfig{JobBudget: 1}})
	val2, capt2 := &fakeValidator{}, &fakeCapturer{}
	b.x.SetDeps(IncidentDeps{Caps: func(string) incident.Capabilities {
		return incident.Capabilities{Validation: true, Capture: true, Ranks: 8}
	}, Validator: val2, Capturer: capt2})
	b.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150), late("j", 2, "", 1000, 1090)})
	b.sync(atStep(1100))
	inc := b.list(t, "j")[0]
	if len(val2.calls)+len(capt2.calls) != 1 || !slices.ContainsFunc(inc.Audit, func(a incident.Action) bool { return strings.HasPrefix(a.Text, "budget:") }) {
		t.Fatalf("budget 1: %d validations, %d captures, audit %+v", len(val2.calls), len(capt2.calls), inc.Audit)
	}
}

// A KAIR capture that finishes gets its report computed and fed; one
// the incident asked for that expired is recorded as failed.
func TestCaptureFeedsKair(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	kr := &fakeKair{}
	var fed []string
	r.x.SetDeps(IncidentDeps{Kair: kr, Adapters: Adapters{Kair: func(c *store.Capture, rep *analysis.KairReport, _ map[int]string) []incident.Evidence {
		fed = append(fed, c.ID)
		return []incident.Evidence{late("j", 6, "", 1000, 1090)}
	}}})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	id := r.list(t, "j")[0].ID
	r.x.ObserveCapture(&store.Capture{ID: "c000000000001", Job: "j", Trigger: TriggerIncident, Signal: "incident:" + id, State: store.CaptureComplete, Uploaded: []int{0, 6}})
	r.x.ObserveCapture(&store.Capture{ID: "c000000000002", Job: "j", Trigger: "manual", State: store.CapturePartial, Uploaded: []int{6}}) // one trace: no report
	r.x.ObserveCapture(&store.Capture{ID: "c000000000003", Job: "j", Trigger: TriggerIncident, Signal: "incident:" + id, State: store.CaptureExpired})
	r.sync(atStep(1110))
	inc := r.list(t, "j")[0]
	if !slices.Equal(fed, []string{"c000000000001"}) || !slices.Equal(inc.Cause, []string{"rank:6"}) {
		t.Fatalf("fed %v, cause %v", fed, inc.Cause)
	}
	if got := audit(&inc); !slices.Equal(got, []string{"kair_capture:done", "kair_capture:failed"}) {
		t.Fatalf("audit %q", got)
	}
}

type fakeKair struct{}

func (fakeKair) Report(ctx context.Context, job, id string) (*analysis.KairAnswer, error) {
	return &analysis.KairAnswer{Capture: &store.Capture{ID: id, Job: job}, Report: &analysis.KairReport{}}, nil
}

// Observe and Record from many goroutines while fusion runs (-race).
func TestIncidentsConcurrent(t *testing.T) {
	st := openStore(t, t.TempDir(), "a", "b", "c")
	r := newRig(t, st, IncidentsConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.x.Run(ctx) }()
	var wg sync.WaitGroup
	for g, j := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 30 {
				r.x.Observe(j, []incident.Evidence{series(j, 0, int64(1000+i*10), slowBetween(1000, 9999, 150)), onset(j, incident.EngineStageFrontier, 1000, 100, 150)})
				if i%10 == 0 {
					_, _ = r.x.List(IncidentQuery{})
					_, _ = r.x.Hosts(0, 0)
				}
				if g == 2 && i == 15 {
					r.x.Forget(j)
				}
			}
		}()
	}
	wg.Wait()
	r.x.poke()
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	r.x.Sync(context.Background())
	if incs := r.list(t, "a"); len(incs) != 1 {
		t.Fatalf("job a: %d incidents", len(incs))
	}
}

// A job that stops reporting with an incident open: the incident
// resolves (job stopped) instead of staying open for ever, and says so.
func TestStoppedJobResolves(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	var stopped *incident.Point
	r.x.SetDeps(IncidentDeps{Stopped: func(string) *incident.Point { return stopped }})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	id := r.list(t, "j")[0].ID
	stopped = &incident.Point{WallNS: atStep(1099), Step: 1099}
	r.x.tick()
	r.sync(atStep(1100) + int64(20*time.Minute))
	inc := check(r.x.Get(id))(t)
	if inc.State != incident.StateResolved {
		t.Fatalf("incident of a stopped job: %s", inc.State)
	}
	if got := r.changes(); len(got) != 2 || got[1] != id+":open→resolved" {
		t.Fatalf("changes %q", got)
	}
}

type fakeJobs map[string]*signal.Job

func (f fakeJobs) Get(id string) (*signal.Job, error) {
	if j, ok := f[id]; ok {
		return j, nil
	}
	return nil, store.ErrNotFound
}

func (f fakeJobs) List() ([]*signal.Job, error) {
	var out []*signal.Job
	for _, j := range f {
		out = append(out, j)
	}
	return out, nil
}

type fakeProfiles map[string]store.ProfileStats

func (f fakeProfiles) ProfileStats(job string) (store.ProfileStats, error) { return f[job], nil }

// SysOM joins the background loop: a round evaluates jobs whose agents
// shipped stacks since their last round — a job with an unresolved
// incident first, at most SysomJobsPerRound — and feeds the findings
// with the job's hosts; a job without new stacks is not evaluated again.
func TestSysomBackgroundRound(t *testing.T) {
	jobs := fakeJobs{}
	for _, id := range []string{"a", "b", "c", "quiet"} {
		jobs[id] = &signal.Job{ID: id, WorldSize: 2, Ranks: []signal.Rank{{Rank: 0, Host: "h-" + id}, {Rank: 1, Host: "h1"}}}
	}
	st := openStore(t, t.TempDir(), "a", "b", "c", "quiet")
	r := newRig(t, st, IncidentsConfig{Escalation: EscalationConfig{SysomJobsPerRound: 2}})
	prof := fakeProfiles{"a": {StackRecords: 5, LastNS: 10}, "b": {StackRecords: 5, LastNS: 10}, "c": {StackRecords: 5, LastNS: 10}}
	sys := &fakeSysom{}
	var hosts []string
	r.x.SetDeps(IncidentDeps{Jobs: jobs, Sysom: sys, Profiles: prof, Adapters: Adapters{Sysom: func(rep *analysis.SysomReport, h map[int]string) []incident.Evidence {
		hosts = append(hosts, h[0])
		return nil
	}}})
	// c has an unresolved incident: it goes first.
	r.x.Observe("c", []incident.Evidence{series("c", 0, 1100, slowBetween(1000, 9999, 150)), onset("c", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	ctx := context.Background()
	r.x.esc.sysomRound(ctx)
	if !slices.Equal(hosts, []string{"h-c", "h-a"}) {
		t.Fatalf("first round fed %v, want c (incident) then a, two jobs", hosts)
	}
	r.x.esc.sysomRound(ctx)
	if !slices.Equal(hosts, []string{"h-c", "h-a", "h-b"}) {
		t.Fatalf("second round fed %v, want b only (the others have no new stacks)", hosts)
	}
	prof["a"] = store.ProfileStats{StackRecords: 9, LastNS: 20}
	r.x.esc.sysomRound(ctx)
	if len(hosts) != 4 || hosts[3] != "h-a" || len(sys.reqs) != 4 {
		t.Fatalf("after a's agent shipped more: fed %v, %d evaluations", hosts, len(sys.reqs))
	}
	for _, q := range sys.reqs {
		if q.Window.FromNS != 0 || q.Window.NowNS == 0 {
			t.Fatalf("background round asked %+v, want the default window at the server's now", q.Window)
		}
	}
}

// An incident that outlasts the horizon keeps its step series: the time
// it has lost only grows, and the first slow steps stay in the working
// set while it is unresolved.
func TestLongIncidentKeepsItsSeries(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{Horizon: time.Minute})
	slow := slowBetween(1000, 1<<40, 150)
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1000, slow), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	last := 0.0
	for from := int64(1000); from < 5000; from += 500 { // 400 s of slow steps, horizon 60 s
		r.x.Observe("j", []incident.Evidence{series("j", from, from+500, slow)})
		r.sync(atStep(from + 500))
		inc := r.list(t, "j")[0]
		if inc.State != incident.StateOpen || inc.Lost.Seconds < last {
			t.Fatalf("at step %d: %s, lost %v after %v", from+500, inc.State, inc.Lost.Seconds, last)
		}
		last = inc.Lost.Seconds
	}
	if want := 4000 * 0.05; last < want-1 {
		t.Fatalf("lost %v s over 4000 steps 50 ms slower, want ≈ %v", last, want)
	}
	kept := false
	if err := st.IncidentWorkingSet("j", func(id string, _ []byte) error {
		kept = kept || id == "sf/progress/1000"
		return nil
	}, nil); err != nil || !kept {
		t.Fatalf("the first slow steps left the working set (%v)", err)
	}
}

// histo reads a histogram's count and sum.
func histo(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// A slowdown that is over by the time it is published (recovering) asks
// no engine: a validation or capture would measure the healthy job.
func TestRecoveringAsksNothing(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	val, capt := &fakeValidator{}, &fakeCapturer{}
	r.x.SetDeps(IncidentDeps{Caps: allCaps, Validator: val, Capturer: capt})
	// 40 s slow (not a transient), over before it was first published.
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1500, slowBetween(1000, 1400, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150),
		relief("j", incident.EngineStageFrontier, 1400, 150, 101), func() incident.Evidence {
			e := late("j", 3, "", 1000, 1390)
			e.Confidence = incident.ConfidenceLow
			return e
		}()})
	r.sync(atStep(1500))
	inc := r.list(t, "j")[0]
	if inc.State != incident.StateRecovering || len(inc.Waiting) == 0 {
		t.Fatalf("want a recovering incident with requests waiting: %s, %+v", inc.State, inc.Waiting)
	}
	if len(val.calls)+len(capt.calls) != 0 || len(inc.Audit) != 0 {
		t.Fatalf("a recovering incident asked: %v %v, audit %+v", val.calls, capt.calls, inc.Audit)
	}
}

// Record: an action taken for an incident by another actor is found by
// its incident's id and shown in the audit log; an unknown incident is
// an error.
func TestRecordByIncident(t *testing.T) {
	st := openStore(t, t.TempDir(), "j")
	r := newRig(t, st, IncidentsConfig{})
	r.x.Observe("j", []incident.Evidence{series("j", 0, 1100, slowBetween(1000, 9999, 150)), onset("j", incident.EngineStageFrontier, 1000, 100, 150)})
	r.sync(atStep(1100))
	id := r.list(t, "j")[0].ID
	a := incident.Action{Incident: id, AtNS: atStep(1100), Kind: "mitigation_restart", Result: ResultDone, Text: "restarted rank 3"}
	if err := r.x.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := r.x.Record(incident.Action{Incident: "inc-nope", Kind: "mitigation_restart"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Record for an unknown incident: %v", err)
	}
	r.sync(atStep(1101))
	inc := check(r.x.Get(id))(t)
	if len(inc.Audit) != 1 || inc.Audit[0].Text != "restarted rank 3" {
		t.Fatalf("audit %+v", inc.Audit)
	}
}
