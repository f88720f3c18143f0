package detect

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
)

// growing is a job whose stored steps can be extended, like a running one.
type growing struct {
	mu   sync.Mutex
	d    sim.DDP
	all  []stagevec.Vector
	upTo int64 // steps [0, upTo) are "stored"
	job  *signal.Job
}

func newGrowing(id string, d sim.DDP) *growing {
	return &growing{d: d, all: d.Vectors(), job: d.Job(id)}
}

func (g *growing) advance(to int64) { g.mu.Lock(); g.upTo = to; g.mu.Unlock() }

func (g *growing) mem() *analysis.MemSource {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := analysis.NewMemSource(g.job)
	for i := range g.all {
		if g.all[i].Step < g.upTo {
			_ = m.Add(&g.all[i])
		}
	}
	m.Seal()
	return m
}

func (g *growing) List() ([]*signal.Job, error)               { return []*signal.Job{g.job}, nil }
func (g *growing) Stats(id string) (analysis.JobStats, error) { return g.mem().Stats(id) }
func (g *growing) Run(ctx context.Context, req analysis.Request) (*analysis.Report, error) {
	return analysis.New(g.mem(), analysis.Limits{}).Run(ctx, req)
}

func newDetector(t *testing.T, g *growing, now *time.Time) (*Detector, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d, err := New(Config{Interval: -1, ActiveFor: 10 * time.Minute}, g, g, g, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return *now }
	return d, reg
}

// Metrics appear for an active job without anyone asking for a report,
// carry its diagnosis, and disappear once it goes idle.
func TestActiveJobMetrics(t *testing.T) {
	g := newGrowing("train", sim.DDP{Ranks: 8, Steps: 120, Seed: 1, Extra: sim.After(60, 5, sim.Data, 100)})
	now := time.Unix(1_800_000_000, 0)
	d, reg := newDetector(t, g, &now)
	ctx := context.Background()

	g.advance(40)
	d.EvaluateOnce(ctx) // first sighting: a diagnosis for the list, no series yet
	if n := testutil.CollectAndCount(reg, "laggard_job_exposed_step_ms"); n != 0 {
		t.Fatalf("%d exposed series before the job was seen advancing", n)
	}
	if s, ok := d.Latest("train"); !ok || s.(*Summary).Headline.Text == "" {
		t.Fatalf("no summary after the first round: %v", s)
	}

	g.advance(120)
	now = now.Add(30 * time.Second)
	d.EvaluateOnce(ctx)
	if v := testutil.ToFloat64(d.m.straggler.WithLabelValues("train", "default")); v != 5 {
		t.Errorf("straggler_rank = %v, want 5", v)
	}
	if v := testutil.ToFloat64(d.m.ratio.WithLabelValues("train")); v < 1.4 {
		t.Errorf("step_time_change_ratio = %v, want the onset's ≈ 1.7", v)
	}
	if v := testutil.ToFloat64(d.m.excess.WithLabelValues("train", "default", stagevec.StageData)); v < 80 {
		t.Errorf("data excess = %v ms/step, want ≈ 100", v)
	}
	if v := testutil.ToFloat64(d.m.changes.WithLabelValues("train", "onset")); v != 1 {
		t.Errorf("onset change points = %v", v)
	}
	if v := testutil.ToFloat64(d.m.active); v != 1 {
		t.Errorf("active_jobs = %v", v)
	}
	sum, _ := d.Latest("train")
	if s := sum.(*Summary); !s.Active || s.Headline.Rank != 5 || s.LastChange == nil || s.ExposedMS < 150 {
		t.Errorf("summary %+v", s)
	}
	if testutil.ToFloat64(d.m.evaluations.WithLabelValues("ok")) != 2 {
		t.Errorf("evaluations ok = %v", testutil.ToFloat64(d.m.evaluations.WithLabelValues("ok")))
	}

	// Nothing new: not re-evaluated. Idle past ActiveFor: series dropped.
	now = now.Add(5 * time.Minute)
	d.EvaluateOnce(ctx)
	if testutil.ToFloat64(d.m.evaluations.WithLabelValues("ok")) != 2 {
		t.Error("a job without new steps was re-evaluated")
	}
	now = now.Add(10 * time.Minute)
	d.EvaluateOnce(ctx)
	if n := testutil.CollectAndCount(reg, "laggard_job_straggler_rank"); n != 0 {
		t.Errorf("%d straggler series left for an idle job", n)
	}
	if s, _ := d.Latest("train"); s.(*Summary).Active {
		t.Error("an idle job's summary still says active")
	}
}

type failingReporter struct{ *growing }

func (f failingReporter) Run(context.Context, analysis.Request) (*analysis.Report, error) {
	return nil, errors.New("boom")
}

func TestEvaluationErrorsAreCounted(t *testing.T) {
	g := newGrowing("j", sim.DDP{Ranks: 2, Steps: 10, Seed: 2})
	g.advance(10)
	reg := prometheus.NewRegistry()
	d, err := New(Config{Interval: -1}, g, g, failingReporter{g}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.EvaluateOnce(context.Background())
	if v := testutil.ToFloat64(d.m.evaluations.WithLabelValues("error")); v != 1 {
		t.Errorf("error evaluations = %v", v)
	}
	if s, ok := d.Latest("j"); !ok || !strings.Contains(s.(*Summary).Error, "boom") {
		t.Errorf("summary %+v", s)
	}
}

func TestRoundBudget(t *testing.T) {
	g := newGrowing("j", sim.DDP{Ranks: 2, Steps: 10, Seed: 3})
	g.advance(10)
	reg := prometheus.NewRegistry()
	many := &manyJobs{g: g, n: 5}
	d, err := New(Config{Interval: -1, MaxJobsPerRound: 2}, many, many, g, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.EvaluateOnce(context.Background())
	if v := testutil.ToFloat64(d.m.evaluations.WithLabelValues("skipped")); v != 3 {
		t.Errorf("skipped = %v, want 3 of 5 over a budget of 2", v)
	}
}

// manyJobs lists n copies of one job under different ids.
type manyJobs struct {
	g *growing
	n int
}

func (m *manyJobs) List() ([]*signal.Job, error) {
	var out []*signal.Job
	for i := range m.n {
		j := *m.g.job
		j.ID = string(rune('a' + i))
		out = append(out, &j)
	}
	return out, nil
}

func (m *manyJobs) Stats(string) (analysis.JobStats, error) { return m.g.Stats(m.g.job.ID) }

// restarted stores its steps as the store does after one restart:
// ordinals of incarnation 1 (stagevec.Ordinal).
type restarted struct{ *growing }

func (r restarted) Stats(id string) (analysis.JobStats, error) {
	st, err := r.growing.Stats(id)
	if err == nil && st.Vectors > 0 {
		st.FirstStep, st.LastStep = stagevec.Ordinal(1, st.FirstStep), stagevec.Ordinal(1, st.LastStep)
	}
	return st, err
}

// After a restart laggard_job_last_step and the summary show the training
// step, never the stored ordinal (2^48 + step): a dashboard compares it
// with the step the job's own logs print.
func TestLastStepMetricIsTheTrainingStep(t *testing.T) {
	g := newGrowing("train", sim.DDP{Ranks: 4, Steps: 120, Seed: 1})
	r := restarted{g}
	now := time.Unix(1_800_000_000, 0)
	d, err := New(Config{Interval: -1, ActiveFor: 10 * time.Minute}, r, r, r, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return now }
	g.advance(40)
	d.EvaluateOnce(context.Background())
	g.advance(120)
	now = now.Add(30 * time.Second)
	d.EvaluateOnce(context.Background())
	if v := testutil.ToFloat64(d.m.lastStep.WithLabelValues("train")); v != 119 {
		t.Errorf("laggard_job_last_step = %v, want 119 (the training step of incarnation 1)", v)
	}
	if s, _ := d.Latest("train"); s.(*Summary).LastStep != 119 || s.(*Summary).Incarnation != 1 {
		t.Errorf("summary last step %d of incarnation %d, want 119 of 1", s.(*Summary).LastStep, s.(*Summary).Incarnation)
	}
}

// A hot job is evaluated again every FastInterval while its data
// advances, not at the next round; unchanged data, a mark that expired
// or one beyond MaxHot evaluate nothing.
func TestHotJobsEvaluatedPromptly(t *testing.T) {
	g := newGrowing("train", sim.DDP{Ranks: 4, Steps: 200, Seed: 1})
	now := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	d, err := New(Config{Interval: time.Hour, FastInterval: 5 * time.Second, MaxHot: 1, HotFor: time.Minute}, g, g, g, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return now }
	ctx := context.Background()
	evaluated := func() time.Time {
		s, ok := d.Latest("train")
		if !ok {
			return time.Time{}
		}
		return s.(*Summary).EvaluatedAt
	}
	g.advance(40)
	d.EvaluateOnce(ctx)
	first := evaluated()

	now = now.Add(10 * time.Second)
	g.advance(60)
	d.EvaluateHot(ctx) // not hot: the hour-long round decides
	if !evaluated().Equal(first) {
		t.Fatal("a job that is not hot was evaluated by EvaluateHot")
	}
	d.Hot("train")
	d.Hot("other") // beyond MaxHot: ignored
	d.EvaluateHot(ctx)
	if !evaluated().Equal(now) {
		t.Fatalf("hot job with new data evaluated at %v, want %v", evaluated(), now)
	}
	if got := testutil.ToFloat64(d.m.evaluations.WithLabelValues("prompt")); got != 1 {
		t.Fatalf("prompt evaluations = %v, want 1", got)
	}
	now = now.Add(2 * time.Second)
	g.advance(70)
	d.EvaluateHot(ctx) // within FastInterval
	now = now.Add(5 * time.Second)
	d.EvaluateHot(ctx) // due, new data since
	if !evaluated().Equal(now) {
		t.Fatalf("second prompt evaluation at %v, want %v", evaluated(), now)
	}
	now = now.Add(10 * time.Second)
	d.EvaluateHot(ctx) // due, nothing new
	if got := testutil.ToFloat64(d.m.evaluations.WithLabelValues("prompt")); got != 2 {
		t.Fatalf("prompt evaluations = %v, want 2 (unchanged data is not evaluated)", got)
	}
	d.mu.Lock()
	_, otherHot := d.hot["other"]
	d.mu.Unlock()
	if otherHot {
		t.Fatal("a mark beyond MaxHot was kept")
	}
	now = now.Add(2 * time.Minute)
	g.advance(90)
	d.EvaluateHot(ctx) // the mark expired
	if got := testutil.ToFloat64(d.m.evaluations.WithLabelValues("prompt")); got != 2 {
		t.Fatalf("an expired mark still evaluated: %v", got)
	}
}

// Stopped: a job whose newest step has not moved for ActiveFor (since it
// last advanced, or since it was first seen) has stopped, at its newest
// step; an advancing one has not.
func TestStopped(t *testing.T) {
	g := newGrowing("train", sim.DDP{Ranks: 4, Steps: 120, Seed: 1})
	now := time.Unix(1_800_000_000, 0)
	d, _ := newDetector(t, g, &now)
	ctx := context.Background()
	if _, _, ok := d.Stopped("train"); ok {
		t.Fatal("an unseen job stopped")
	}
	g.advance(40)
	d.EvaluateOnce(ctx)
	first := now
	now = now.Add(5 * time.Minute)
	if _, _, ok := d.Stopped("train"); ok {
		t.Fatal("stopped within ActiveFor of its first sighting")
	}
	now = now.Add(6 * time.Minute) // 11m since first seen, never advancing: stopped at (or before) then
	if at, step, ok := d.Stopped("train"); !ok || !at.Equal(first) || step != 39 {
		t.Fatalf("Stopped = %v, %d, %v; want first sighting, step 39", at, step, ok)
	}
	g.advance(60)
	d.EvaluateOnce(ctx)
	advanced := now
	if _, _, ok := d.Stopped("train"); ok {
		t.Fatal("an advancing job stopped")
	}
	now = now.Add(11 * time.Minute)
	if at, step, ok := d.Stopped("train"); !ok || !at.Equal(advanced) || step != 59 {
		t.Fatalf("Stopped = %v, %d, %v; want the last advance, step 59", at, step, ok)
	}
}

// A hot job the rounds have not seen yet (it began after the last one)
// is evaluated at once, and counts as advancing from its next step on.
func TestHotJobNotYetSeen(t *testing.T) {
	g := newGrowing("train", sim.DDP{Ranks: 4, Steps: 200, Seed: 1})
	now := time.Unix(1_800_000_000, 0)
	d, err := New(Config{Interval: time.Hour, FastInterval: 5 * time.Second}, g, g, g, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.now = func() time.Time { return now }
	ctx := context.Background()
	g.advance(40)
	d.Hot("train")
	d.EvaluateHot(ctx)
	if _, ok := d.Latest("train"); !ok {
		t.Fatal("a hot job not yet seen by a round was not evaluated")
	}
	if d.Advancing("train") {
		t.Fatal("advancing on its first sighting")
	}
	now = now.Add(5 * time.Second)
	g.advance(50)
	d.EvaluateHot(ctx)
	if !d.Advancing("train") {
		t.Fatal("not advancing after its steps moved")
	}
}
