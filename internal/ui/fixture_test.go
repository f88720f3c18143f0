package ui

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// The fixtures in testdata/ are produced by simJob/simReport below, a small
// self-contained re-implementation of frontier accounting over a simulated
// DDP job. It exists only to give the UI realistic data while the real
// engine (internal/frontier) is being written; it is not the engine.
//
//	go test ./internal/ui -run TestFixtures -update

var update = flag.Bool("update", false, "rewrite testdata/ fixtures")

// sim describes one simulated job: ranksPerHost ranks per host, and a data
// straggler that spikes data.next_wait on straggler's steps.
type sim struct {
	job          signal.Job
	ranksPerHost int
	straggler    int
	seed         uint64
}

func demoSim(world int) sim {
	id := fmt.Sprintf("llama3-8b-ddp-%d", world)
	name := fmt.Sprintf("llama3 8B pretrain, DDP ×%d", world)
	j := signal.Job{ID: id, Name: name, WorldSize: world, Schema: stagevec.DefaultSchema(),
		Labels:  map[string]string{"team": "pretrain", "cluster": "h100-east"},
		Created: time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)}
	rph := 4
	if world > 64 {
		rph = 8
	}
	for r := range world {
		j.Ranks = append(j.Ranks, signal.Rank{Rank: r, Host: fmt.Sprintf("gpu-a%03d", r/rph+1), LocalRank: r % rph,
			Role: signal.Role{DP: r, TP: 0, PP: 0, EP: 0, Name: "dense"}})
	}
	s := sim{job: j, ranksPerHost: rph, straggler: 2, seed: 0x1a66a4d}
	if world > 64 {
		s.straggler = world*5/8 + 3
	}
	return s
}

// durations returns d[r][s] for one step, deterministic in (seed, step) so
// any window of the same job is consistent.
func (s sim) durations(step int64) [][]float64 {
	rng := rand.New(rand.NewPCG(s.seed, uint64(step)))
	R, S := s.job.WorldSize, len(s.job.Schema.Stages)
	d := make([][]float64, R)
	// Productive work per rank; one shared all-reduce at the end of backward
	// makes every rank wait for the slowest prefix (the displacement of §2).
	fwdEnd := make([]float64, R)
	bwdWork := make([]float64, R)
	spike := rng.Float64() < 0.8
	for r := range R {
		d[r] = make([]float64, S)
		d[r][0] = 1.5 + rng.Float64()*1.5 // data.next_wait
		if r == s.straggler && spike {
			d[r][0] += 150 + rng.NormFloat64()*30 // slow shard / remote read
		}
		d[r][1] = 48 + rng.NormFloat64()*2 // forward
		fwdEnd[r] = d[r][0] + d[r][1]
		bwdWork[r] = 95 + rng.NormFloat64()*3
	}
	var sync float64
	for r := range R {
		sync = max(sync, fwdEnd[r]+bwdWork[r])
	}
	for r := range R {
		d[r][2] = sync - fwdEnd[r] + 6 + rng.Float64() // wait + all-reduce tail
		d[r][3] = 2.2 + rng.ExpFloat64()*0.6           // callbacks
		d[r][4] = 17.5 + rng.NormFloat64()*0.8         // optimizer
		d[r][5] = 0.8 + rng.Float64()*0.6              // residual
		if step%50 == 0 {
			d[r][3] += 38 // checkpoint callback every 50 steps
		}
		for i := range d[r] {
			d[r][i] = math.Max(0, round3(d[r][i]))
		}
	}
	return d
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// simReport computes a stagefrontier.Report for steps [from, to] (StageFrontier
// §3 eq.1–3, §4 eq.4) with the default gates.
func (s sim) simReport(from, to int64) *stagefrontier.Report {
	cfg := stagefrontier.DefaultConfig()
	R, S := s.job.WorldSize, len(s.job.Schema.Stages)
	T := int(to - from + 1)
	rep := &stagefrontier.Report{JobID: s.job.ID, FirstStep: from, LastStep: to, NumSteps: T, NumRanks: R,
		Stages: s.job.Schema.Stages, OrderHash: s.job.Schema.OrderHash(), Config: cfg,
		AdvanceMS: make([]float64, S), GainMS: map[string][]float64{}, LeaderRank: -1}
	window := make([][][]float64, T)
	for t := range T {
		window[t] = s.durations(from + int64(t))
	}
	ranks := make([]stagefrontier.RankStat, R)
	for r := range R {
		ranks[r] = stagefrontier.RankStat{Rank: r, Host: s.job.Ranks[r].Host, LagMS: make([]float64, S),
			DeltaLagMS: make([]float64, S), LeadCount: make([]int, S), MeanStageMS: make([]float64, S)}
	}
	for t, d := range window {
		P := prefixes(d)
		F := frontierOf(P)
		pt := stagefrontier.StepPoint{Step: from + int64(t), ExposedMS: round3(F[S-1]), AdvanceMS: make([]float64, S)}
		prev := 0.0
		for si := range S {
			a := F[si] - prev // §3 eq.1: a[t,s] = F[t,s] − F[t,s−1]
			prev = F[si]
			pt.AdvanceMS[si] = round3(a)
			rep.AdvanceMS[si] += a
		}
		rep.ExposedMS += F[S-1]
		for r := range R {
			for si := range S {
				ranks[r].LagMS[si] += F[si] - P[r][si] // slack, §3 eq.3
				ranks[r].MeanStageMS[si] += d[r][si] / float64(T)
				if P[r][si] == F[si] {
					ranks[r].LeadCount[si]++
				}
			}
			ranks[r].TotalMS += P[r][S-1]
		}
		pt.LeaderRank, pt.TieSize, pt.GapMS = leaderAt(P, S-1)
		pt.GapMS = round3(pt.GapMS)
		rep.StepSeries = append(rep.StepSeries, pt)
	}
	var sum float64
	for si := range S {
		sum += rep.AdvanceMS[si]
	}
	rep.TelescopeErrMS = math.Abs(sum - rep.ExposedMS) // Theorem 1
	rep.Share = make([]float64, S)
	for si := range S {
		rep.Share[si] = round6(rep.AdvanceMS[si] / rep.ExposedMS) // §3 eq.2
		rep.AdvanceMS[si] = round3(rep.AdvanceMS[si])
	}
	rep.ExposedMS = round3(rep.ExposedMS)
	rep.Routing, rep.Top1, rep.Top2 = routing(rep.Share, rep.Stages, cfg.CandidateThreshold)
	lead := rep.Share[slices.Index(rep.Stages, rep.Top1)]
	for si, sh := range rep.Share {
		if lead-sh <= cfg.TieTolerance && rep.Stages[si] != rep.Top1 {
			rep.CoCriticalStages = append(rep.CoCriticalStages, rep.Stages[si])
		}
	}
	if len(rep.CoCriticalStages) > 0 {
		rep.CoCriticalStages = append([]string{rep.Top1}, rep.CoCriticalStages...)
	}
	for r := range R {
		for si := range S {
			ranks[r].LagMS[si] = round3(ranks[r].LagMS[si])
			ranks[r].MeanStageMS[si] = round3(ranks[r].MeanStageMS[si])
		}
		for si := range S {
			prev := 0.0
			if si > 0 {
				prev = ranks[r].LagMS[si-1]
			}
			ranks[r].DeltaLagMS[si] = round3(ranks[r].LagMS[si] - prev)
		}
		ranks[r].TotalMS = round3(ranks[r].TotalMS)
	}
	rep.Ranks = ranks
	s.leaders(rep, window, cfg)
	rep.GainMS["rank_median"] = gains(window, false)
	rep.GainMS["cohort_median"] = gains(window, true)
	rep.Baselines = baselines(window, rep.Stages, cfg.CandidateThreshold)
	rep.Quality = stagefrontier.Quality{MissingCells: 0, MaxClosureShare: 0.0061, MaxOverlapShare: 0,
		EventSamples: T / 8, EventReadyRatio: 0.94, RoleGroups: 1}
	rep.Labels = s.labels(rep)
	rep.Contract = []stagevec.Finding{{Check: "schema", Detail: "schema stagefrontier/v1 order hash " + rep.OrderHash + " common to all ranks"},
		{Check: "note", Detail: fmt.Sprintf("callbacks.cpu_wall spikes every 50 steps (checkpoint) — %d steps in window", T/50)}}
	return rep
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

func prefixes(d [][]float64) [][]float64 {
	P := make([][]float64, len(d))
	for r, row := range d {
		P[r] = make([]float64, len(row))
		acc := 0.0
		for s, v := range row {
			acc += v
			P[r][s] = acc
		}
	}
	return P
}

func frontierOf(P [][]float64) []float64 {
	F := slices.Clone(P[0])
	for _, row := range P[1:] {
		for s, v := range row {
			F[s] = max(F[s], v)
		}
	}
	return F
}

// leaderAt returns the latest rank at boundary s, its tie-set size and the
// max-minus-second-max gap (§4).
func leaderAt(P [][]float64, s int) (leader, tie int, gap float64) {
	best, second := math.Inf(-1), math.Inf(-1)
	for r, row := range P {
		switch v := row[s]; {
		case v > best:
			second, best, leader, tie = best, v, r, 1
		case v == best:
			tie++
			second = v
		case v > second:
			second = v
		}
	}
	if len(P) == 1 {
		second = best
	}
	return leader, tie, best - second
}

func (s sim) leaders(rep *stagefrontier.Report, window [][][]float64, cfg stagefrontier.Config) {
	si := slices.Index(rep.Stages, rep.Top1)
	counts := map[int]int{}
	last := -1
	for t, d := range window {
		P := prefixes(d)
		l, tie, gap := leaderAt(P, si)
		if tie != 1 || gap < cfg.LeaderGapMS || gap < cfg.LeaderGapRel*rep.StepSeries[t].ExposedMS {
			continue // not a confident unique leader
		}
		counts[l]++
		if last >= 0 && l != last {
			rep.LeaderSwitches++
		}
		last = l
	}
	bestN := 0
	for r, n := range counts {
		if n > bestN || (n == bestN && r < rep.LeaderRank) {
			rep.LeaderRank, bestN = r, n
		}
	}
	rep.LeaderSwitchRate = round6(float64(rep.LeaderSwitches) / float64(max(1, len(window)-1)))
}

func routing(share []float64, stages []string, tau float64) (set []string, top1 string, top2 []string) {
	idx := make([]int, len(share))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return share[idx[a]] > share[idx[b]] })
	cum := 0.0
	for _, i := range idx {
		set = append(set, stages[i])
		cum += share[i]
		if cum >= tau {
			break
		}
	}
	return set, stages[idx[0]], []string{stages[idx[0]], stages[idx[1]]}
}

// gains is the clipped direct-exposure gain G_s (§4 eq.4) against a
// per-rank or cohort median baseline.
func gains(window [][][]float64, cohort bool) []float64 {
	R, S := len(window[0]), len(window[0][0])
	med := make([][]float64, R)
	for r := range R {
		med[r] = make([]float64, S)
		for s := range S {
			col := make([]float64, len(window))
			for t := range window {
				col[t] = window[t][r][s]
			}
			med[r][s] = median(col)
		}
	}
	if cohort {
		for s := range S {
			col := make([]float64, R)
			for r := range R {
				col[r] = med[r][s]
			}
			m := median(col)
			for r := range R {
				med[r][s] = m
			}
		}
	}
	// The frontier's last boundary is the largest rank total, so replacing
	// one cell only shifts that rank's total.
	g := make([]float64, S)
	tot := make([]float64, R)
	for _, d := range window {
		base := 0.0
		for r := range R {
			tot[r] = 0
			for _, v := range d[r] {
				tot[r] += v
			}
			base = max(base, tot[r])
		}
		for s := range S {
			alt := 0.0
			for r := range R {
				alt = max(alt, tot[r]-d[r][s]+min(d[r][s], med[r][s]))
			}
			g[s] += base - alt
		}
	}
	for s := range S {
		g[s] = round3(g[s])
	}
	return g
}

func median(x []float64) float64 {
	x = slices.Clone(x)
	slices.Sort(x)
	return x[len(x)/2]
}

// baselines are the five §6.2 comparison summaries.
func baselines(window [][][]float64, stages []string, tau float64) []stagefrontier.BaselineSummary {
	R, S := len(window[0]), len(stages)
	T := float64(len(window))
	score := map[string][]float64{}
	for _, m := range []string{"per_stage_max", "per_stage_avg", "rank_spread", "slowest_rank_breakdown", "rank0_local"} {
		score[m] = make([]float64, S)
	}
	for _, d := range window {
		slow, slowT := 0, -1.0
		for r := range R {
			tot := 0.0
			for _, v := range d[r] {
				tot += v
			}
			if tot > slowT {
				slow, slowT = r, tot
			}
		}
		for s := range S {
			mx, mn, sum := math.Inf(-1), math.Inf(1), 0.0
			for r := range R {
				mx, mn, sum = max(mx, d[r][s]), min(mn, d[r][s]), sum+d[r][s]
			}
			score["per_stage_max"][s] += mx / T
			score["per_stage_avg"][s] += sum / float64(R) / T
			score["rank_spread"][s] += (mx - mn) / T
			score["slowest_rank_breakdown"][s] += d[slow][s] / T
			score["rank0_local"][s] += d[0][s] / T
		}
	}
	var out []stagefrontier.BaselineSummary
	for _, m := range []string{"per_stage_max", "per_stage_avg", "rank_spread", "slowest_rank_breakdown", "rank0_local"} {
		sc := score[m]
		tot := 0.0
		for _, v := range sc {
			tot += v
		}
		b := stagefrontier.BaselineSummary{Method: m, Score: make([]float64, S), Share: make([]float64, S), TotalMS: round3(tot * T)}
		for s := range S {
			b.Score[s] = round3(sc[s])
			b.Share[s] = round6(sc[s] / tot)
		}
		b.Routing, b.Top1, b.Top2 = routing(b.Share, stages, tau)
		out = append(out, b)
	}
	return out
}

func (s sim) labels(rep *stagefrontier.Report) []stagefrontier.Label {
	ls := []stagefrontier.Label{{Name: stagefrontier.LabelFrontierAccounting, Axis: "accounting",
		Reason: fmt.Sprintf("Σ advances = exposed makespan %.1f ms over %d steps (telescope error %.2g ms)", rep.ExposedMS, rep.NumSteps, rep.TelescopeErrMS)}}
	si := slices.Index(rep.Stages, rep.Top1)
	g := rep.GainMS["cohort_median"][si]
	ratio := g / rep.AdvanceMS[si]
	if ratio >= rep.Config.StaticGainThreshold {
		ls = append(ls, stagefrontier.Label{Name: stagefrontier.LabelDirectExposure, Axis: "direct_gain", Stage: rep.Top1,
			Reason: fmt.Sprintf("clipped cohort-median gain %.0f ms is %.0f%% of the stage's %.0f ms frontier advance (≥ %.0f%%); leader rank %d leads %s",
				g, 100*ratio, rep.AdvanceMS[si], 100*rep.Config.StaticGainThreshold, rep.LeaderRank, rep.Top1)})
	} else {
		ls = append(ls, stagefrontier.Label{Name: stagefrontier.LabelSyncWaitDependent, Axis: "model_fit", Stage: rep.Top1,
			Reason: fmt.Sprintf("frontier share %.0f%% but the clipped cohort-median gain is only %.1f%% of the advance: the exposed time is wait the other ranks spend in later stages", 100*rep.Share[si], 100*ratio)})
	}
	if len(rep.CoCriticalStages) > 0 {
		ls = append(ls, stagefrontier.Label{Name: stagefrontier.LabelCoCritical, Axis: "ambiguity", Stage: rep.CoCriticalStages[1],
			Reason: fmt.Sprintf("shares of %v within tie tolerance %.2f", rep.CoCriticalStages, rep.Config.TieTolerance)})
	}
	ls = append(ls, stagefrontier.Label{Name: stagefrontier.LabelForwardSpillover, Axis: "device_evidence", Stage: stagevec.StageForward,
		Reason: fmt.Sprintf("%d/%d CUDA-event samples ready (%.0f%%); event forward 45 ms vs CPU-wall forward 48 ms, exposed cost appears in backward",
			int(float64(rep.Quality.EventSamples)*rep.Quality.EventReadyRatio), rep.Quality.EventSamples, 100*rep.Quality.EventReadyRatio)})
	return ls
}

// jobsList is the GET /api/v1/jobs body for the simulated jobs.
type jobEntry struct {
	signal.Job
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	Vectors   int64 `json:"vectors"`
}

const fixtureLastStep = 14300

func fixtureJobs() []jobEntry {
	small, big := demoSim(8), demoSim(1024)
	bigJob := big.job
	bigJob.Ranks = nil // keep the fixture small; the list view does not need ranks
	return []jobEntry{
		{Job: small.job, FirstStep: 1, LastStep: fixtureLastStep, Vectors: fixtureLastStep * 8},
		{Job: bigJob, FirstStep: 9001, LastStep: 9600, Vectors: 600 * 1024},
		{Job: signal.Job{ID: "resnet50-smoke", Name: "resnet50 smoke test", WorldSize: 2, Schema: stagevec.DefaultSchema(),
			Created: time.Date(2026, 3, 15, 7, 0, 0, 0, time.UTC)}, FirstStep: 0, LastStep: 0, Vectors: 0},
	}
}

func marshalIndent(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// TestFixtures keeps testdata/ in sync with the generator and checks the
// invariants the UI relies on (Theorem 1 telescoping, the straggler shows).
func TestFixtures(t *testing.T) {
	rep := demoSim(8).simReport(fixtureLastStep-99, fixtureLastStep)
	files := map[string][]byte{
		"report.json": marshalIndent(rep),
		"jobs.json":   marshalIndent(map[string]any{"jobs": fixtureJobs()}),
	}
	for name, want := range files {
		p := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run go test ./internal/ui -run TestFixtures -update", p)
		}
	}
	if rep.NumSteps != 100 || rep.NumRanks != 8 || len(rep.Stages) != 6 {
		t.Fatalf("shape = %d steps × %d ranks × %d stages, want 100×8×6", rep.NumSteps, rep.NumRanks, len(rep.Stages))
	}
	if rep.TelescopeErrMS > 1e-6 {
		t.Errorf("telescope error %g ms, want round-off (Theorem 1)", rep.TelescopeErrMS)
	}
	if rep.Top1 != stagevec.StageData || rep.LeaderRank != 2 {
		t.Errorf("routed to %s leader %d, want the data straggler on rank 2", rep.Top1, rep.LeaderRank)
	}
	for _, p := range rep.StepSeries {
		var sum float64
		for _, a := range p.AdvanceMS {
			sum += a
		}
		if math.Abs(sum-p.ExposedMS) > 0.01 {
			t.Fatalf("step %d: Σ advances %.3f ≠ exposed %.3f", p.Step, sum, p.ExposedMS)
		}
	}
}
