package ui

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/detect"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/store"
)

// The UI's fixtures are what the real analysis layer says about simulated
// jobs (internal/sim): each scenario below is one job whose default report
// exercises one way the page must read — a named straggler, a withheld
// rank with its reason, a tie, role groups, a relief, limited telemetry,
// too few steps. TestFixtures keeps testdata/ equal to them; the fake API
// serves testdata/ for default reports and runs the same analysis for any
// other query.

// scenario is one simulated job.
type scenario struct {
	id, name string
	// build returns the job registration and its stage vectors.
	build func() (*signal.Job, []stagevec.Vector)
}

// created is a fixed registration time so fixtures do not churn.
var created = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

// ddpJob registers a sim.DDP job under id with a readable name.
func ddpJob(id, name string, d sim.DDP, labels map[string]string) func() (*signal.Job, []stagevec.Vector) {
	return func() (*signal.Job, []stagevec.Vector) {
		j := d.Job(id)
		j.Name, j.Created = name, created
		for k, v := range labels {
			j.Labels[k] = v
		}
		return j, d.Vectors()
	}
}

// Fault placements, shared with the assertions in TestFixtures.
const (
	straggler8      = 2   // data straggler of data-straggler-8
	straggler1024   = 641 // data straggler of data-straggler-1024
	onset8          = 140
	onset1024       = 100
	absorbedRank    = 4
	limitedMissing  = 6 // the rank that misses steps in telemetry-limited
	limitedResidual = 3 // the rank whose spans do not close
	limitedSilent   = 7 // the rank that never reports in telemetry-limited
	pp1Late         = 6 // the rank that sends late in role-groups' pp1
	restartOnset    = 50
	restartRank     = 2 // restarted's first-launch straggler
	uniformOnset    = 80
)

var scenarios = []scenario{
	{id: "data-straggler-8", name: "llama3-8b pretrain, DDP ×8",
		build: ddpJob("data-straggler-8", "llama3-8b pretrain, DDP ×8",
			sim.DDP{Ranks: 8, Steps: 240, Seed: 1, RanksPerHost: 4, Extra: sim.WithWarmup(sim.After(onset8, straggler8, sim.Data, 90))},
			map[string]string{"team": "pretrain", "cluster": "h100-east"})},
	{id: "baseline-8", name: "llama3-8b pretrain, DDP ×8 (healthy run)",
		build: ddpJob("baseline-8", "llama3-8b pretrain, DDP ×8 (healthy run)",
			sim.DDP{Ranks: 8, Steps: 120, Seed: 21, RanksPerHost: 4, Extra: sim.WithWarmup(nil)},
			map[string]string{"team": "pretrain", "cluster": "h100-east"})},
	{id: "data-straggler-1024", name: "llama3-70b pretrain, DDP ×1024",
		build: ddpJob("data-straggler-1024", "llama3-70b pretrain, DDP ×1024",
			sim.DDP{Ranks: 1024, Steps: 160, Seed: 3, RanksPerHost: 8, BackwardMS: 100, Extra: sim.WithWarmup(sim.After(onset1024, straggler1024, sim.Data, 30))},
			map[string]string{"team": "pretrain", "cluster": "h100-west"})},
	{id: "absorbed-backward", name: "vit-l finetune, backward fault in the allreduce",
		build: ddpJob("absorbed-backward", "vit-l finetune, backward fault in the allreduce",
			sim.DDP{Ranks: 8, Steps: 160, Seed: 7, Extra: sim.WithWarmup(sim.After(80, absorbedRank, sim.Backward, 120))}, nil)},
	{id: "tie", name: "bert-large, two slow data shards",
		build: ddpJob("tie", "bert-large, two slow data shards",
			sim.DDP{Ranks: 8, Steps: 160, Seed: 11, RanksPerHost: 4, Extra: sim.WithWarmup(func(t, r int) sim.Delays {
				var d sim.Delays
				if t >= 80 && (r == 1 || r == 3) {
					d[sim.Data] = 60
				}
				return d
			})}, nil)},
	{id: "relief", name: "gpt2 pretrain, straggler fixed at step 120",
		build: ddpJob("relief", "gpt2 pretrain, straggler fixed at step 120",
			sim.DDP{Ranks: 8, Steps: 200, Seed: 2, Extra: sim.WithWarmup(func(t, r int) sim.Delays {
				var d sim.Delays
				if t >= 40 && t < 120 && r == 5 {
					d[sim.Data] = 100
				}
				return d
			})}, nil)},
	// Every rank slows alike (issue 17: uniform slowdowns are incidents
	// too): no rank may be named.
	{id: "uniform-8", name: "llama3-8b, every GPU throttled from step 80",
		build: ddpJob("uniform-8", "llama3-8b, every GPU throttled from step 80",
			sim.DDP{Ranks: 8, Steps: 160, Seed: 17, RanksPerHost: 4, Extra: sim.WithWarmup(func(t, r int) sim.Delays {
				var d sim.Delays
				if t >= uniformOnset {
					d[sim.Backward] = 40
				}
				return d
			})}, nil)},
	{id: "role-groups", name: "pipeline-parallel ×8 (two stages)", build: roleGroupsJob},
	{id: "telemetry-limited", name: "resnet50, lossy telemetry", build: telemetryLimitedJob},
	{id: "restarted", name: "llama3-8b, restarted from a checkpoint", build: restartedJob},
	{id: "few-steps", name: "smoke test, 4 steps",
		build: ddpJob("few-steps", "smoke test, 4 steps", sim.DDP{Ranks: 4, Steps: 4, Seed: 9, Extra: sim.After(0, 2, sim.Data, 80)}, nil)},
}

// roleGroupsJob is a two-stage pipeline: ranks 0–3 (pp0) report the
// default stages with a data straggler on rank 1 from step 60; ranks 4–7
// (pp1) declare their own stage list, and rank 6 sends late throughout.
func roleGroupsJob() (*signal.Job, []stagevec.Vector) {
	job := &signal.Job{ID: "role-groups", Name: "pipeline-parallel ×8 (two stages)", WorldSize: 8, Schema: stagevec.DefaultSchema(),
		Labels: map[string]string{"sync_model": "ddp", "team": "research"}, Created: created}
	pp1 := signal.Schema{Version: "pp/v1", Stages: []string{"recv.wait", stagevec.StageForward, "send.wait", stagevec.StageOther}}
	for r := 0; r < 8; r++ {
		job.Ranks = append(job.Ranks, signal.Rank{Rank: r, Host: fmt.Sprintf("node-%03d", r/4), LocalRank: r % 4,
			Role: signal.Role{DP: r % 4, TP: -1, PP: r / 4, EP: -1}})
	}
	job.Groups = []signal.GroupSchema{{Group: "pp1", Schema: pp1, DeclaredBy: 4}}
	d := sim.DDP{Ranks: 4, Steps: 140, Seed: 6, Extra: sim.WithWarmup(sim.After(60, 1, sim.Data, 70))}
	var out []stagevec.Vector
	for i, v := range d.Vectors() {
		out = append(out, v)
		// pp1 receives, computes its half of forward, sends; rank 6's send
		// is slow, with a little jitter so the frontier is not a tie.
		jit := float64(i%7) * 0.1
		w := stagevec.Vector{Step: v.Step, Rank: v.Rank + 4, Durations: []float64{3 + jit, 30, 1 + jit, 0}}
		if v.Rank+4 == pp1Late {
			w.Durations[2] = 50 + jit
		}
		if v.Step < 3 {
			w.Durations[1] += float64(600 - 200*v.Step)
		}
		for _, x := range w.Durations {
			w.WallMS += x
		}
		out = append(out, w)
	}
	return job, out
}

// restartedJob was launched twice: the first launch (steps 0–99) had a
// data straggler on rank 2 from step 50 and was killed; the restart
// resumed from the checkpoint at step 60 and runs healthy to step 159.
// Its vectors are stored as the store keeps them, at ordinal steps
// (stagevec.Ordinal), and its registration describes both launches.
func restartedJob() (*signal.Job, []stagevec.Vector) {
	first := sim.DDP{Ranks: 4, Steps: 100, Seed: 31, Extra: sim.WithWarmup(sim.After(restartOnset, restartRank, sim.Data, 80))}
	again := sim.DDP{Ranks: 4, Steps: 160, Seed: 32, Extra: sim.WithWarmup(nil)}
	j := first.Job("restarted")
	j.Name, j.Created = "llama3-8b, restarted from a checkpoint", created
	j.Incarnations = []signal.Incarnation{
		{N: 0, Opened: created, Reason: signal.IncFirst},
		{N: 1, Opened: created.Add(time.Hour), Reason: signal.IncRestart, Detail: "rank 0 registered from a new process (node-000/4711/1)"},
	}
	out := first.Vectors()
	for _, v := range again.Vectors() {
		if v.Step >= 60 {
			v.Step = stagevec.Ordinal(1, v.Step)
			out = append(out, v)
		}
	}
	return j, out
}

// telemetryLimitedJob has a clear data straggler, but one rank misses
// every fifth step, one never reports, and another rank's spans leave a
// fifth of its wall time unaccounted: the report must cap its confidence
// (telemetry_limited).
func telemetryLimitedJob() (*signal.Job, []stagevec.Vector) {
	d := sim.DDP{Ranks: 8, Steps: 120, Seed: 13, Extra: sim.WithWarmup(sim.After(0, 1, sim.Data, 60))}
	j := d.Job("telemetry-limited")
	j.Name, j.Created = "resnet50, lossy telemetry", created
	var out []stagevec.Vector
	for _, v := range d.Vectors() {
		if v.Rank == limitedSilent || v.Rank == limitedMissing && v.Step%5 == 4 {
			continue
		}
		if v.Rank == limitedResidual {
			// The residual is derived from wall time, so a longer wall is
			// time no explicit stage covers.
			v.Durations = slices.Clone(v.Durations[:len(v.Durations)-1])
			v.WallMS *= 1.25
		}
		out = append(out, v)
	}
	return j, out
}

// multiSource serves several in-memory jobs by id, as the store does.
type multiSource struct {
	ids  []string
	jobs map[string]*analysis.MemSource
}

func (m *multiSource) pick(id string) (*analysis.MemSource, error) {
	s, ok := m.jobs[id]
	if !ok {
		return nil, fmt.Errorf("unknown job %q: %w", signal.Clip(id), analysis.ErrNotFound)
	}
	return s, nil
}

func (m *multiSource) Job(id string) (*signal.Job, error) {
	s, err := m.pick(id)
	if err != nil {
		return nil, err
	}
	return s.Job(id)
}

func (m *multiSource) Stats(id string) (store.JobStats, error) {
	s, err := m.pick(id)
	if err != nil {
		return store.JobStats{}, err
	}
	return s.Stats(id)
}

func (m *multiSource) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	s, err := m.pick(id)
	if err != nil {
		return err
	}
	return s.Scan(id, from, to, fn)
}

func (m *multiSource) LastSteps(id string, n int) (int64, int64, bool, error) {
	s, err := m.pick(id)
	if err != nil {
		return 0, 0, false, err
	}
	return s.LastSteps(id, n)
}

// StepSpan and LastStepsIn make multiSource an analysis.OrdinalSource,
// as the store is: reports read one incarnation through a view.
func (m *multiSource) StepSpan(id string, lo, hi int64) (first, last int64, ok bool, err error) {
	return analysis.ScanStepSpan(m, id, lo, hi)
}

func (m *multiSource) LastStepsIn(id string, lo, hi int64, n int) (from, to int64, got int, err error) {
	return analysis.ScanLastStepsIn(m, id, lo, hi, n)
}

// List implements detect.Jobs.
func (m *multiSource) List() ([]*signal.Job, error) {
	out := make([]*signal.Job, 0, len(m.ids))
	for _, id := range m.ids {
		j, _ := m.Job(id)
		out = append(out, j)
	}
	return out, nil
}

// world is every scenario loaded, the analyzer over them, and what the
// API would answer: the job list with background diagnoses and each job's
// default report.
type world struct {
	src      *multiSource
	analyzer *analysis.Analyzer
	list     []api.JobView
	reports  map[string]*analysis.Report
}

var (
	worldOnce sync.Once
	theWorld  *world
	worldErr  error
)

// loadWorld builds the scenarios once per test binary: the 1,024-rank job
// is the expensive one, and the fixtures test, the fake API and the
// browser tests all read the same world.
func loadWorld(t testing.TB) *world {
	t.Helper()
	worldOnce.Do(func() { theWorld, worldErr = buildWorld() })
	if worldErr != nil {
		t.Fatal(worldErr)
	}
	return theWorld
}

func buildWorld() (*world, error) {
	w := &world{src: &multiSource{jobs: map[string]*analysis.MemSource{}}, reports: map[string]*analysis.Report{}}
	for _, sc := range scenarios {
		job, vecs := sc.build()
		m := analysis.NewMemSource(job)
		for i := range vecs {
			if err := m.Add(&vecs[i]); err != nil {
				return nil, fmt.Errorf("%s: %w", sc.id, err)
			}
		}
		m.Seal()
		w.src.ids = append(w.src.ids, sc.id)
		w.src.jobs[sc.id] = m
	}
	slices.Sort(w.src.ids) // the API lists jobs in id order
	w.analyzer = analysis.New(w.src, analysis.Limits{})
	ctx := context.Background()
	for _, id := range w.src.ids {
		rep, err := w.analyzer.Run(ctx, analysis.Request{Job: id})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		w.reports[id] = rep
	}
	// The job list's diagnoses come from the real background evaluator;
	// only its clock is pinned so the fixture is stable.
	det, err := detect.New(detect.Config{Interval: -1}, w.src, w.src, w.analyzer, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	det.EvaluateOnce(ctx)
	for _, id := range w.src.ids {
		job, _ := w.src.Job(id)
		// The newest launch's steps, as the API's job view shows them.
		newest, _, err := analysis.View(w.src, job, analysis.IncNewest)
		if err != nil {
			return nil, err
		}
		st, _ := newest.Stats(id)
		v := api.JobView{Job: job.Public(), Incarnation: job.Current(), FirstStep: st.FirstStep, LastStep: st.LastStep, Vectors: st.Vectors}
		if d, ok := det.Latest(id); ok {
			s := d.(*detect.Summary)
			s.EvaluatedAt = created.Add(6 * time.Hour)
			v.Diagnosis = s
		}
		w.list = append(w.list, v)
	}
	return w, nil
}
