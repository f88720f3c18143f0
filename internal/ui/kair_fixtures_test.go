package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/stats"
	"github.com/laggard-dev/laggard/internal/store"
)

// The KAIR read API (contracts §B Capture, §C routes, §A TraceReport) is
// served to the browser tests from hand-built scenarios: the Go values
// below, written to the contract's JSON. The small ones are also kept in
// testdata/kair/<job>.json for review (go test ./internal/ui -run
// TestKairFixtures -update rewrites them); the 300-rank one (half a
// megabyte of D) is built in memory only. Stage 1 numbers are computed
// from the scenario's completion counts with the stats package the engine
// uses (K-S D over per-window ECDFs, S_A, Stephens p-values, the
// exact-vs-approximation agreement), so they are consistent with one
// another; the Stage 2–3 parts are written out as the engine phrases them.
//
//	data-straggler-8     4 of 8 ranks, rank 2 the straggler, 3 analysed steps with two different chains
//	baseline-8           8 ranks, rhythms agree, nothing to blame
//	tie                  6 of 8 ranks uploaded (2 failed), ranks 1 and 3 alike: inconclusive
//	data-straggler-1024  300 ranks (aggregated heatmap), rank 641 the straggler
//	few-steps            a capture recording with 1 upload (409)
//	absorbed-backward    a capture pending, no upload (409)
//	relief               no capture yet

// kfCapture is store.Capture (contract §B) as JSON.
type kfCapture struct {
	ID         string            `json:"id"`
	Job        string            `json:"job"`
	Trigger    string            `json:"trigger"`
	Reason     string            `json:"reason"`
	CreatedNS  int64             `json:"created_ns"`
	DeadlineNS int64             `json:"deadline_ns"`
	StartStep  int64             `json:"start_step"`
	Steps      int               `json:"steps"`
	Every      int               `json:"every"`
	Ranks      []int             `json:"ranks"`
	Fetched    []int             `json:"fetched"`
	Uploaded   []int             `json:"uploaded"`
	Failed     map[string]string `json:"failed,omitempty"`
	State      string            `json:"state"`
}

type kfClock struct {
	Rank       int    `json:"rank"`
	Method     string `json:"method"`
	OffsetNS   int64  `json:"offset_ns"`
	ResidualNS int64  `json:"residual_ns"`
	Samples    int    `json:"samples"`
	Violations int    `json:"violations"`
}

type kfAgreement struct {
	K        int     `json:"k"`
	Overlap  int     `json:"overlap"`
	Top1     bool    `json:"top1"`
	Spearman float64 `json:"spearman"`
	Kendall  float64 `json:"kendall"`
	Defined  bool    `json:"defined"`
}

type kfRhythm struct {
	Frame       string             `json:"frame"` // "step" (ns into each step, steps pooled) or "capture" (aligned clock)
	Categories  []optrace.Category `json:"categories"`
	T0NS        int64              `json:"t0_ns"`
	WindowNS    int64              `json:"window_ns"`
	Windows     int                `json:"windows"`
	Ranks       []int              `json:"ranks"`
	Totals      []int              `json:"totals"`
	Freq        [][]uint32         `json:"freq"`
	D           []float64          `json:"d"`
	Score       []float64          `json:"score"`
	P           []float64          `json:"p"`
	RefD        []float64          `json:"ref_d"`
	RefP        []float64          `json:"ref_p"`
	Order       []int              `json:"order"`
	Agreement   kfAgreement        `json:"agreement"`
	StepLeaders []int              `json:"step_leaders,omitempty"`
	Verdict     string             `json:"verdict"`
	Straggler   int                `json:"straggler"`
	Why         string             `json:"why"`
}

type kfStepSpan struct {
	Step    int64   `json:"step"`
	StartNS []int64 `json:"start_ns"`
	EndNS   []int64 `json:"end_ns"`
}

type kfCause struct {
	kair.RootCause
	Steps int `json:"steps"`
}

type kfRhythmConfig struct {
	Windows    int                `json:"windows"`
	Categories []optrace.Category `json:"categories,omitempty"`
	Alpha      float64            `json:"alpha"`
	Separation float64            `json:"separation"`
	Frame      string             `json:"frame"`
}

type kfRunConfig struct {
	Rhythm   kfRhythmConfig `json:"rhythm"`
	Config   kair.Config    `json:"pinpoint"`
	Align    string         `json:"align"`
	Steps    []int64        `json:"steps,omitempty"`
	MaxSteps int            `json:"max_steps"`
	MinShare float64        `json:"min_share"`
}

// kfReport is kair.TraceReport (contract §A) as JSON.
type kfReport struct {
	Ranks             []int              `json:"ranks"`
	Events            []int              `json:"events"`
	Steps             []kfStepSpan       `json:"steps"`
	Clock             []kfClock          `json:"clock"`
	Rhythm            *kfRhythm          `json:"rhythm"`
	Analysed          []int64            `json:"analysed"`
	StepReports       []*kair.Report     `json:"step_reports"`
	StragglerOutliers []kair.Instance    `json:"straggler_outliers"`
	Causes            []kfCause          `json:"causes"`
	Impact            *kair.Impact       `json:"impact,omitempty"`
	LeftOut           []kair.LeftOutRank `json:"left_out,omitempty"`
	Verdict           string             `json:"verdict"`
	Headline          string             `json:"headline"`
	Config            kfRunConfig        `json:"config"`
}

type kfTLEvent struct {
	Name    string `json:"name"`
	Cat     string `json:"cat"`
	Lane    string `json:"lane"`
	StartNS int64  `json:"start_ns"`
	DurNS   int64  `json:"dur_ns"`
}

type kfTLRank struct {
	Rank     int         `json:"rank"`
	OffsetNS int64       `json:"offset_ns"`
	Events   []kfTLEvent `json:"events"`
}

type kfTimeline struct {
	Step      int64      `json:"step"`
	Ranks     []kfTLRank `json:"ranks"`
	Truncated bool       `json:"truncated"`
}

// kfKair is GET …/kair's body.
type kfKair struct {
	Capture *kfCapture `json:"capture"`
	Report  *kfReport  `json:"report"`
}

// kfJob is everything the KAIR routes answer for one job: its captures
// (newest first), the report of each analysable capture, and the
// timelines by capture and step.
type kfJob struct {
	Captures  []*kfCapture                     `json:"captures"`
	Reports   map[string]*kfReport             `json:"reports"`
	Timelines map[string]map[int64]*kfTimeline `json:"timelines"`
}

const kfNow = int64(1773500400000000000)

// kfEvil is an operator-typed reason: it must show as text.
const kfEvil = `<img src=x onerror="document.body.dataset.pwned=1"> & "quotes"`

func kfRound(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// kfP rounds a p-value to 3 significant digits; NaN → -1 (no sample).
func kfP(p float64) float64 {
	if math.IsNaN(p) || math.IsInf(p, 0) {
		return -1
	}
	if p == 0 {
		return 0
	}
	e := math.Floor(math.Log10(p))
	s := math.Pow(10, 2-e)
	return math.Round(p*s) / s
}

// kfRhythmOf computes Stage 1 from per-window completion counts: each
// rank's ECDF over the windows, D for every pair, S_A, the median
// reference ECDF and the p-values.
func kfRhythmOf(ranks []int, freq [][]uint32, windowNS int64) *kfRhythm {
	n, w := len(ranks), len(freq[0])
	F := make([][]float64, n)
	totals := make([]int, n)
	for i, f := range freq {
		F[i] = make([]float64, w)
		t := 0
		for _, v := range f {
			t += int(v)
		}
		totals[i] = t
		c := 0
		for k, v := range f {
			c += int(v)
			F[i][k] = float64(c) / float64(max(t, 1))
		}
	}
	rh := &kfRhythm{Frame: "step", Categories: []optrace.Category{optrace.GPUKernel, optrace.Memcpy, optrace.Memset, optrace.Collective}, WindowNS: windowNS, Windows: w, Ranks: ranks, Totals: totals, Freq: freq,
		D: make([]float64, n*n), Score: make([]float64, n), P: make([]float64, n), RefD: make([]float64, n), RefP: make([]float64, n), Straggler: -1}
	for i := range n {
		for j := range n {
			rh.D[i*n+j] = kfRound(stats.KSDistance(F[i], F[j]), 4)
		}
	}
	med := make([]float64, w)
	col := make([]float64, n)
	for k := range w {
		for i := range n {
			col[i] = F[i][k]
		}
		slices.Sort(col)
		med[k] = col[n/2]
	}
	mt := slices.Clone(totals)
	slices.Sort(mt)
	for i := range n {
		s := 0.0
		for j := range n {
			if j != i {
				s += rh.D[i*n+j]
			}
		}
		rh.Score[i] = kfRound(s/float64(n-1), 4)
		rh.RefD[i] = kfRound(stats.KSDistance(F[i], med), 4)
		rh.P[i] = kfP(stats.KSPValue(rh.Score[i], totals[i], mt[n/2]))
		rh.RefP[i] = kfP(stats.KSPValue(rh.RefD[i], totals[i], mt[n/2]))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if rh.Score[a] != rh.Score[b] {
			if rh.Score[a] > rh.Score[b] {
				return -1
			}
			return 1
		}
		return ranks[a] - ranks[b]
	})
	for _, i := range idx {
		rh.Order = append(rh.Order, ranks[i])
	}
	ag := stats.CompareRankings(rh.Score, rh.RefD, min(3, n))
	rh.Agreement = kfAgreement{K: ag.K, Overlap: ag.Overlap, Top1: ag.Top1, Spearman: kfRound(ag.Spearman, 3), Kendall: kfRound(ag.Kendall, 3),
		Defined: !math.IsNaN(ag.Spearman) && !math.IsNaN(ag.Kendall)}
	if !rh.Agreement.Defined {
		rh.Agreement.Spearman, rh.Agreement.Kendall = 0, 0
	}
	return rh
}

// kfFreq draws steady completion counts, with the ranks in slow lagging
// in the middle of the span and catching up at its end (Fig. 4).
func kfFreq(seed uint64, n, windows int, slow map[int]bool) [][]uint32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([][]uint32, n)
	for i := range n {
		out[i] = make([]uint32, windows)
		for k := range windows {
			rate := 40.0
			if slow[i] {
				switch {
				case k >= windows/4 && k < 3*windows/4:
					rate = 26
				case k >= 7*windows/8:
					rate = 62
				}
			}
			out[i][k] = uint32(max(0, rate+float64(r.IntN(7)-3)))
		}
	}
	return out
}

func kfRunCfg(windows int) kfRunConfig {
	return kfRunConfig{Rhythm: kfRhythmConfig{Windows: windows, Alpha: 0.01, Separation: 1.5, Frame: "step"},
		Config: kair.DefaultConfig(), Align: "collectives", MaxSteps: 16, MinShare: 0.1}
}

func kfClocks(ranks []int) []kfClock {
	out := make([]kfClock, len(ranks))
	for i, r := range ranks {
		out[i] = kfClock{Rank: r, Method: "collectives", Samples: 24}
		if i > 0 {
			out[i].OffsetNS = int64(1000*((r*7919)%200)) - 100000
			out[i].ResidualNS = int64(2000 + 300*(r%5))
		}
	}
	return out
}

func kfSteps(ranks []int, steps []int64, slow int) []kfStepSpan {
	var out []kfStepSpan
	for si, s := range steps {
		sp := kfStepSpan{Step: s}
		for _, r := range ranks {
			start := kfNow - 30e9 + int64(si)*62e6 + int64(r%4)*10000
			end := start + 61e6
			if r == slow {
				end += 18e6
			}
			sp.StartNS, sp.EndNS = append(sp.StartNS, start), append(sp.EndNS, end)
		}
		out = append(out, sp)
	}
	return out
}

func kfCountEvents(ranks []int, per int) []int {
	out := make([]int, len(ranks))
	for i := range out {
		out[i] = per + (ranks[i]*37)%50
	}
	return out
}

// kfTimelineOf lays one step out per rank: a CPU thread lane and a GPU
// stream lane; slow's index_select (op chain) or its late all-reduce
// start (edge chain) shows in the bands.
func kfTimelineOf(step int64, ranks []int, slow int, edge bool) *kfTimeline {
	tl := &kfTimeline{Step: step}
	for i, r := range ranks {
		sel, ar := int64(2_100_000), int64(41_000_000)
		if r == slow && !edge {
			sel = 38_600_000
			ar = 59_100_000
		}
		if r == slow && edge {
			ar = 50_300_000
		}
		off := int64(0)
		if i > 0 {
			off = int64(1000*((r*7919)%200)) - 100000
		}
		evs := []kfTLEvent{
			{Name: fmt.Sprintf("ProfilerStep#%d", step), Cat: "user_range", Lane: "t1", StartNS: 0, DurNS: ar + 1_400_000},
			{Name: "aten::embedding", Cat: "cpu_op", Lane: "t1", StartNS: 500_000, DurNS: 3_000_000},
			{Name: "aten::index_select", Cat: "cpu_op", Lane: "t1", StartNS: 20_400_000, DurNS: sel},
			{Name: "cudaStreamSynchronize", Cat: "runtime", Lane: "t1", StartNS: 38_100_000 + min(sel, 20_000_000) - 2_100_000, DurNS: 900_000},
			{Name: "ampere_sgemm_128x64_nn", Cat: "gpu_kernel", Lane: "s7", StartNS: 4_000_000, DurNS: 15_000_000},
			{Name: "nccl:all_reduce", Cat: "collective", Lane: "s7", StartNS: ar, DurNS: 1_200_000},
		}
		tl.Ranks = append(tl.Ranks, kfTLRank{Rank: r, OffsetNS: off, Events: evs})
	}
	return tl
}

func kfInts(a, b int) []int {
	var out []int
	for i := a; i < b; i++ {
		out = append(out, i)
	}
	return out
}

// Evidence chains as internal/engine/kair's blame walk writes them.
func kfOpCause(step int64, victim int) kair.RootCause {
	return kair.RootCause{Kind: kair.KindOp, Rank: 2, Name: "aten::index_select", FromRank: -1, Step: step, Symptoms: 4, Score: 14.2, ExcessNS: 17_900_000,
		Explains: []string{"rank 2 nccl:all_reduce#0", fmt.Sprintf("rank %d nccl:all_reduce#0", victim), "rank 2 aten::index_select#3", "rank 2 cudaStreamSynchronize#1"},
		Evidence: []string{
			fmt.Sprintf("rank %d nccl:all_reduce#0 start +41200000ns (z 0.2) dur 1200000ns (z 0.1) wait 17900000ns", victim),
			"waited 17900000ns for rank 2, the last to arrive",
			"rank 2 nccl:all_reduce#0 start +59100000ns (z 11.4) dur 1150000ns (z 0.0)",
			"rank 2 aten::index_select#3 start +20400000ns (z 0.3) dur 38600000ns (z 14.2)",
			"predecessor has abnormal execution time: blame propagates to it (rule 2a)",
		}}
}

func kfEdgeCause(step int64) kair.RootCause {
	return kair.RootCause{Kind: kair.KindEdge, Rank: 2, Name: "nccl:all_reduce", FromRank: 2, From: "cudaStreamSynchronize", Step: step, Symptoms: 2, Score: 8.7,
		Explains: []string{"rank 2 nccl:all_reduce#0", "rank 1 nccl:all_reduce#0"},
		Evidence: []string{
			"rank 1 nccl:all_reduce#0 start +40900000ns (z 0.1) dur 1300000ns (z 0.2) wait 9400000ns",
			"waited 9400000ns for rank 2, the last to arrive",
			"rank 2 nccl:all_reduce#0 start +50300000ns (z 8.7) dur 1200000ns (z 0.0)",
			"rank 2 cudaStreamSynchronize#1 start +38100000ns (z 0.2) dur 900000ns (z 0.3)",
			"predecessor completed on time, op started late: dependency edge (rule 2c)",
		}}
}

func kfOutliers(rc kair.RootCause, edge bool) []kair.Instance {
	if edge {
		return []kair.Instance{{Rank: 2, Name: "nccl:all_reduce", Cat: optrace.Collective, StartNS: 50_300_000, DurNS: 1_200_000, ZStart: 8.7, A: 8.7, AClassic: 8.9, ARobust: 8.7}}
	}
	return []kair.Instance{
		{Rank: 2, Name: "aten::index_select", Cat: optrace.CPUOp, Occurrence: 3, StartNS: 20_400_000, DurNS: 38_600_000, ZStart: 0.3, ZDur: 14.2, A: 14.2, AClassic: 1.7, ARobust: 14.2},
		{Rank: 2, Name: "nccl:all_reduce", Cat: optrace.Collective, StartNS: 59_100_000, DurNS: 1_150_000, ZStart: 11.4, A: 11.4, AClassic: 1.7, ARobust: 11.4},
	}
}

func kfStepReport(step int64, ranks int, rcs []kair.RootCause, out []kair.Instance) *kair.Report {
	if rcs == nil {
		rcs = []kair.RootCause{}
	}
	if out == nil {
		out = []kair.Instance{}
	}
	return &kair.Report{Step: step, Config: kair.DefaultConfig(), Ranks: ranks, Nodes: ranks * 6, Outliers: out, RootCauses: rcs}
}

// kairWorld builds every scenario; big adds the 300-rank one.
func kairWorld(big bool) map[string]*kfJob {
	w := map[string]*kfJob{}

	// data-straggler-8: the auto trigger fired on StageFrontier's rank 2;
	// 4 of the 8 ranks were asked (the suspect and peers).
	{
		ranks := []int{0, 1, 2, 3}
		c := &kfCapture{ID: "c3f1a9e2b4d70", Job: "data-straggler-8", Trigger: "auto",
			Reason:    "StageFrontier named rank 2 (data +89.6 ms/step) " + kfEvil,
			CreatedNS: kfNow - 120e9, DeadlineNS: kfNow - 60e9, StartStep: 241, Steps: 3, Every: 1,
			Ranks: ranks, Fetched: ranks, Uploaded: ranks, State: "complete"}
		old := &kfCapture{ID: "c00aa11bb22cc", Job: "data-straggler-8", Trigger: "manual", Reason: "smoke test",
			CreatedNS: kfNow - 7200e9, DeadlineNS: kfNow - 7000e9, StartStep: 20, Steps: 5, Every: 1,
			Ranks: kfInts(0, 8), Fetched: []int{}, Uploaded: []int{}, State: "expired"}
		rh := kfRhythmOf(ranks, kfFreq(1, 4, 32, map[int]bool{2: true}), 2_000_000)
		rh.Verdict, rh.Straggler = "straggler", 2
		rh.Why = fmt.Sprintf("rank 2 diverges most (S_A %.3f, p %.2g ≤ α 0.01) and scores %.1f× the runner-up (≥ 1.5)", rh.Score[2], rh.P[2], rh.Score[2]/rh.Score[slices.Index(ranks, rh.Order[1])])
		analysed := []int64{241, 242, 243}
		op1, edge, op3 := kfOpCause(241, 0), kfEdgeCause(242), kfOpCause(243, 3)
		rep := &kfReport{Ranks: ranks, Events: kfCountEvents(ranks, 1800), Steps: kfSteps(ranks, analysed, 2), Clock: kfClocks(ranks), Rhythm: rh,
			Analysed: analysed,
			StepReports: []*kair.Report{
				kfStepReport(241, 4, []kair.RootCause{op1}, kfOutliers(op1, false)),
				kfStepReport(242, 4, []kair.RootCause{edge}, kfOutliers(edge, true)),
				kfStepReport(243, 4, []kair.RootCause{op3}, kfOutliers(op3, false)),
			},
			StragglerOutliers: kfOutliers(op1, false),
			Causes:            []kfCause{{RootCause: op1, Steps: 2}, {RootCause: edge, Steps: 1}},
			Impact: &kair.Impact{Rank: 2, Causes: []int{0}, ExcessNS: 14_200_000, HeldNS: 15_100_000, HeldSteps: 2, HeldMaxNS: 16_000_000,
				ExplainedNS: 14_200_000, OtherRank: -1, StepNS: 118_000_000, Checked: true, Material: true},
			LeftOut: []kair.LeftOutRank{{Rank: 7, FirstStep: 250, LastStep: 254, Steps: 5}},
			Verdict: "culprit",
			Headline: "Rank 2 is the straggler (Stage 1). In 2 of 3 analysed steps its aten::index_select#3 runs abnormally long (a_i 14.2) " +
				"and the other ranks wait for it at nccl:all_reduce; in step 242 its all-reduce starts late after cudaStreamSynchronize (a dependency edge).",
			Config: kfRunCfg(32)}
		w["data-straggler-8"] = &kfJob{Captures: []*kfCapture{c, old}, Reports: map[string]*kfReport{c.ID: rep},
			Timelines: map[string]map[int64]*kfTimeline{c.ID: {241: kfTimelineOf(241, ranks, 2, false), 242: kfTimelineOf(242, ranks, 2, true), 243: kfTimelineOf(243, ranks, 2, false)}}}
	}

	// baseline-8: a manual capture of a healthy run.
	{
		ranks := kfInts(0, 8)
		c := &kfCapture{ID: "c5b5b5b5b5b50", Job: "baseline-8", Trigger: "manual", Reason: "weekly check",
			CreatedNS: kfNow - 300e9, DeadlineNS: kfNow - 240e9, StartStep: 120, Steps: 2, Every: 1,
			Ranks: ranks, Fetched: ranks, Uploaded: ranks, State: "complete"}
		rh := kfRhythmOf(ranks, kfFreq(2, 8, 32, nil), 2_000_000)
		top := slices.Index(ranks, rh.Order[0])
		rh.Verdict = "none"
		rh.Why = fmt.Sprintf("the largest S_A (%.3f, rank %d) is not significant (p %.2g > α 0.01): the ranks' rhythms agree", rh.Score[top], rh.Order[0], rh.P[top])
		analysed := []int64{120, 121}
		rep := &kfReport{Ranks: ranks, Events: kfCountEvents(ranks, 1800), Steps: kfSteps(ranks, analysed, -1), Clock: kfClocks(ranks), Rhythm: rh,
			Analysed: analysed, StepReports: []*kair.Report{kfStepReport(120, 8, nil, nil), kfStepReport(121, 8, nil, nil)},
			StragglerOutliers: []kair.Instance{}, Causes: []kfCause{}, Verdict: "none",
			Headline: "No straggler: the 8 ranks complete operators in the same rhythm, and no operator instance is an outlier in the 2 analysed steps.",
			Config:   kfRunCfg(32)}
		w["baseline-8"] = &kfJob{Captures: []*kfCapture{c}, Reports: map[string]*kfReport{c.ID: rep},
			Timelines: map[string]map[int64]*kfTimeline{c.ID: {120: kfTimelineOf(120, ranks, -1, false), 121: kfTimelineOf(121, ranks, -1, false)}}}
	}

	// tie: two ranks lag alike; two ranks could not record.
	{
		asked := kfInts(0, 8)
		ranks := []int{0, 1, 2, 3, 6, 7}
		c := &kfCapture{ID: "c7e7e7e7e7e70", Job: "tie", Trigger: "auto", Reason: "StageFrontier change point (onset) at step 55",
			CreatedNS: kfNow - 900e9, DeadlineNS: kfNow - 800e9, StartStep: 57, Steps: 1, Every: 1,
			Ranks: asked, Fetched: asked, Uploaded: ranks, State: "partial",
			Failed: map[string]string{"4": "torch.profiler export failed: No space left on device", "5": "capture dir over 512 MiB: skipped"}}
		rh := kfRhythmOf(ranks, kfFreq(3, 6, 32, map[int]bool{1: true, 3: true}), 2_000_000)
		rh.Verdict = "inconclusive"
		rh.Why = fmt.Sprintf("ranks %d and %d score alike (S_A %.3f vs %.3f, below the 1.5× separation): no single straggler", rh.Order[0], rh.Order[1],
			rh.Score[slices.Index(ranks, rh.Order[0])], rh.Score[slices.Index(ranks, rh.Order[1])])
		rc := kair.RootCause{Kind: kair.KindInconclusive, Rank: 1, Name: "nccl:all_reduce", FromRank: -1, Step: 57, Symptoms: 1, Score: 6.1,
			Explains: []string{"rank 1 nccl:all_reduce#0"},
			Evidence: []string{"rank 1 nccl:all_reduce#0 start +52000000ns (z 6.1) dur 1200000ns (z 0.0)", "late start with no predecessor in the step DAG"}}
		rep := &kfReport{Ranks: ranks, Events: kfCountEvents(ranks, 1500), Steps: kfSteps(ranks, []int64{57}, 1), Clock: kfClocks(ranks), Rhythm: rh,
			Analysed: []int64{57}, StepReports: []*kair.Report{kfStepReport(57, 6, []kair.RootCause{rc}, nil)},
			StragglerOutliers: []kair.Instance{}, Causes: []kfCause{{RootCause: rc, Steps: 1}}, Verdict: "inconclusive",
			Headline: "Inconclusive: ranks 1 and 3 fall behind alike, so Stage 1 names no straggler, and the one outlier (rank 1's all-reduce) has no predecessor in the step to blame. " +
				"Ranks 4 and 5 did not upload.",
			Config: kfRunCfg(32)}
		w["tie"] = &kfJob{Captures: []*kfCapture{c}, Reports: map[string]*kfReport{c.ID: rep},
			Timelines: map[string]map[int64]*kfTimeline{c.ID: {57: kfTimelineOf(57, ranks, -1, false)}}}
	}

	// few-steps: recording, one upload so far.
	w["few-steps"] = &kfJob{Captures: []*kfCapture{{ID: "c1111aaaa2222", Job: "few-steps", Trigger: "manual", Reason: "",
		CreatedNS: kfNow - 20e9, DeadlineNS: kfNow + 280e9, StartStep: 4, Steps: 5, Every: 1,
		Ranks: kfInts(0, 4), Fetched: kfInts(0, 4), Uploaded: []int{1}, State: "recording"}}}
	// absorbed-backward: pending, nobody fetched the plan yet.
	w["absorbed-backward"] = &kfJob{Captures: []*kfCapture{{ID: "c9999bbbb0000", Job: "absorbed-backward", Trigger: "auto",
		Reason: "Greyhound left tracking (change point at iteration 212)", CreatedNS: kfNow - 5e9, DeadlineNS: kfNow + 295e9, StartStep: 230, Steps: 5, Every: 2,
		Ranks: kfInts(0, 8), Fetched: []int{}, Uploaded: []int{}, State: "pending"}}}
	w["relief"] = &kfJob{Captures: []*kfCapture{}}

	if big {
		// data-straggler-1024: the suspect (641) and 299 peers.
		ranks := []int{}
		for i := 0; len(ranks) < 299; i++ {
			ranks = append(ranks, 3*i)
		}
		ranks = append(ranks, straggler1024)
		slices.Sort(ranks)
		si := slices.Index(ranks, straggler1024)
		rh := kfRhythmOf(ranks, kfFreq(4, len(ranks), 64, map[int]bool{si: true}), 1_000_000)
		rh.Verdict, rh.Straggler = "straggler", straggler1024
		rh.Why = fmt.Sprintf("rank %d diverges most (S_A %.3f) and is significant", straggler1024, rh.Score[si])
		c := &kfCapture{ID: "cabcdefabcdef", Job: "data-straggler-1024", Trigger: "auto", Reason: "StageFrontier named rank 641",
			CreatedNS: kfNow - 100e9, DeadlineNS: kfNow - 40e9, StartStep: 150, Steps: 1, Every: 1,
			Ranks: ranks, Fetched: ranks, Uploaded: ranks, State: "complete"}
		rc := kair.RootCause{Kind: kair.KindOp, Rank: straggler1024, Name: "aten::index_select", FromRank: -1, Step: 150, Symptoms: 300, Score: 22.5,
			Explains: []string{"rank 641 aten::index_select#3"},
			Evidence: []string{"rank 641 aten::index_select#3 start +20400000ns (z 0.3) dur 38600000ns (z 22.5)", "abnormal execution time: culprit (rule 1)"}}
		tl := &kfTimeline{Step: 150}
		for _, r := range ranks {
			d := int64(2_000_000)
			if r == straggler1024 {
				d = 38_600_000
			}
			tl.Ranks = append(tl.Ranks, kfTLRank{Rank: r, Events: []kfTLEvent{
				{Name: "aten::index_select", Cat: "cpu_op", Lane: "t1", StartNS: 20_400_000, DurNS: d},
				{Name: "nccl:all_reduce", Cat: "collective", Lane: "s7", StartNS: 60_000_000, DurNS: 1_000_000}}})
		}
		w["data-straggler-1024"] = &kfJob{Captures: []*kfCapture{c}, Reports: map[string]*kfReport{c.ID: {
			Ranks: ranks, Events: kfCountEvents(ranks, 900), Steps: kfSteps(ranks, []int64{150}, straggler1024), Clock: kfClocks(ranks), Rhythm: rh,
			Analysed: []int64{150}, StepReports: []*kair.Report{kfStepReport(150, 300, []kair.RootCause{rc}, nil)},
			StragglerOutliers: []kair.Instance{}, Causes: []kfCause{{RootCause: rc, Steps: 1}}, Verdict: "culprit",
			Headline: "Rank 641 is the straggler: its aten::index_select#3 runs abnormally long (a_i 22.5).", Config: kfRunCfg(64)}},
			Timelines: map[string]map[int64]*kfTimeline{c.ID: {150: tl}}}
	}
	return w
}

// kairFixtureFiles renders the small scenarios as testdata/kair/<job>.json.
func kairFixtureFiles(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for id, j := range kairWorld(false) {
		b, err := json.MarshalIndent(j, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		out[id+".json"] = append(b, '\n')
	}
	return out
}

// TestKairFixtures keeps testdata/kair/ equal to the scenarios above.
func TestKairFixtures(t *testing.T) {
	files := kairFixtureFiles(t)
	dir := filepath.Join("testdata", "kair")
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range onDisk {
		if _, ok := files[filepath.Base(p)]; !ok {
			if *update {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Errorf("%s is no KAIR scenario's; run go test ./internal/ui -run TestKairFixtures -update", p)
			}
		}
	}
	for name, want := range files {
		p := filepath.Join(dir, name)
		if *update {
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%v (run go test ./internal/ui -run TestKairFixtures -update)", err)
		} else if string(got) != string(want) {
			t.Errorf("%s is stale; run go test ./internal/ui -run TestKairFixtures -update", p)
		}
	}
}

// The scenarios show what they are built for: the straggler's S_A leads
// with a small p, the healthy run's does not stand out, the tie's two
// lagging ranks lead together.
func TestKairScenarios(t *testing.T) {
	w := kairWorld(true)
	rep := func(id string) *kfReport { return w[id].Reports[w[id].Captures[0].ID] }
	for _, tc := range []struct {
		id   string
		lead []int // the ranks that must lead the order, in any order
	}{{"data-straggler-8", []int{2}}, {"tie", []int{1, 3}}, {"data-straggler-1024", []int{straggler1024}}} {
		rh := rep(tc.id).Rhythm
		got := slices.Clone(rh.Order[:len(tc.lead)])
		slices.Sort(got)
		if !slices.Equal(got, tc.lead) {
			t.Errorf("%s: order starts %v, want %v", tc.id, rh.Order[:len(tc.lead)], tc.lead)
		}
	}
	if rh := rep("data-straggler-8").Rhythm; !(rh.P[2] >= 0 && rh.P[2] < 0.01) || rh.Score[2] < 1.5*rh.Score[0] {
		t.Errorf("data-straggler-8: rank 2 S_A %v p %v not a clear straggler (scores %v)", rh.Score[2], rh.P[2], rh.Score)
	}
	if rh := rep("baseline-8").Rhythm; slices.Max(rh.Score) > 0.1 {
		t.Errorf("baseline-8: S_A up to %v; the healthy run should agree", slices.Max(rh.Score))
	}
	if r := rep("data-straggler-1024"); len(r.Ranks) != 300 || len(r.Rhythm.D) != 300*300 {
		t.Errorf("data-straggler-1024: %d ranks, %d D cells", len(r.Ranks), len(r.Rhythm.D))
	}
	for id, j := range w {
		for cid, r := range j.Reports {
			if _, err := json.Marshal(r); err != nil { // NaN/Inf would fail here
				t.Errorf("%s/%s: %v", id, cid, err)
			}
			if len(r.StepReports) != len(r.Analysed) {
				t.Errorf("%s/%s: %d step reports for %d analysed steps", id, cid, len(r.StepReports), len(r.Analysed))
			}
			for _, s := range r.Analysed {
				if j.Timelines[cid][s] == nil {
					t.Errorf("%s/%s: no timeline for analysed step %d", id, cid, s)
				}
			}
		}
	}
}

// The hand-built scenarios use the server's own types (store.Capture,
// analysis.KairReport = kair.TraceReport, analysis.KairTimeline): each
// decodes strictly and re-encodes to the same JSON, so a field renamed,
// added or dropped on either side fails here rather than as a blank view.
func TestKairFixturesMatchAPITypes(t *testing.T) {
	same := func(name string, v any, dst any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(dst); err != nil {
			t.Errorf("%s does not decode into %T: %v", name, dst, err)
			return
		}
		b2, err := json.Marshal(dst)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var x, y any
		if err := json.Unmarshal(b, &x); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b2, &y); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(x, y) {
			t.Errorf("%s: %T re-encodes differently:\n fixture %.400s\n server  %.400s", name, dst, b, b2)
		}
	}
	for id, j := range kairWorld(true) {
		for _, c := range j.Captures {
			same(id+" capture "+c.ID, c, &store.Capture{})
		}
		for cid, r := range j.Reports {
			same(id+" report "+cid, r, &analysis.KairReport{})
			var c *kfCapture
			for _, x := range j.Captures {
				if x.ID == cid {
					c = x
				}
			}
			same(id+" answer "+cid, kfKair{Capture: c, Report: r}, &analysis.KairAnswer{})
		}
		for cid, m := range j.Timelines {
			for s, tl := range m {
				same(fmt.Sprintf("%s timeline %s/%d", id, cid, s), tl, &analysis.KairTimeline{})
			}
		}
	}
}

// kfSimTraces is a small op-level simulation for the engine's own
// report: n ranks run the same program each step (eight forward ops, an
// all-reduce every rank leaves together, the optimizer), rank slow's
// forward op 2 takes ×30 in every step.
func kfSimTraces(n, steps, slow int) []optrace.Trace {
	tr := make([]optrace.Trace, n)
	t := make([]int64, n)
	for r := range tr {
		tr[r].Rank = r
		t[r] = 1_000_000_000
	}
	for s := range int64(steps) {
		for r := range n {
			tr[r].Events = append(tr[r].Events, optrace.Event{Name: fmt.Sprintf("ProfilerStep#%d", s), Cat: optrace.UserRange, TID: 1, Device: -1,
				StartNS: t[r] - 500, Step: s, Seq: -1})
			for i := range 8 {
				d := 20_000 + int64(i%5)*2_000 + int64((r*104729+i)%7)*100
				if r == slow && i == 2 {
					d *= 30
				}
				tr[r].Events = append(tr[r].Events, optrace.Event{Name: fmt.Sprintf("aten::fwd%d", i), Cat: optrace.CPUOp, TID: 1, Device: -1,
					StartNS: t[r] + 1_000, DurNS: d, Step: s, Seq: -1})
				t[r] += 1_000 + d
			}
		}
		last := slices.Max(t)
		for r := range n {
			st := t[r] + 2_000
			end := max(last+2_000, st) + 50_000
			tr[r].Events = append(tr[r].Events, optrace.Event{Name: "nccl:all_reduce", Cat: optrace.Collective, TID: 1, Device: -1,
				StartNS: st, DurNS: end - st, Step: s, Comm: "world", Seq: s})
			tr[r].Events = append(tr[r].Events, optrace.Event{Name: "optimizer.step", Cat: optrace.CPUOp, TID: 1, Device: -1,
				StartNS: end + 2_000, DurNS: 40_000, Step: s, Seq: -1})
			t[r] = end + 2_000 + 40_000 + 10_000
		}
	}
	return tr
}

// kfEngineJob runs the KAIR engine itself (kair.Run) on kfSimTraces and
// serves its report, with timelines cut from the traces the way the
// contract describes (start relative to the step's earliest aligned
// start, lane t<tid>).
//
// noSteps strips the step numbers (a profiler without ProfilerStep#
// ranges): the engine then analyses the capture whole, as step -1.
func kfEngineJob(t testing.TB, id string, noSteps bool) *kfJob {
	t.Helper()
	const n = 6
	traces := kfSimTraces(n, 3, 4)
	if noSteps {
		for r := range traces {
			evs := traces[r].Events[:0]
			for _, e := range traces[r].Events {
				if e.Cat != optrace.UserRange {
					e.Step = -1
					evs = append(evs, e)
				}
			}
			traces[r].Events = evs
		}
	}
	cfg := kair.DefaultRunConfig()
	cfg.Rhythm.Windows = 16
	rep, err := kair.Run(traces, nil, cfg)
	if err != nil {
		t.Fatalf("kair.Run: %v", err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("the engine's report does not encode: %v", err)
	}
	var kr kfReport
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&kr); err != nil {
		t.Fatalf("the engine's report does not decode into the UI fixtures' type: %v", err)
	}
	ranks := kfInts(0, n)
	c := &kfCapture{ID: "ce0e0e0e0e0e0", Job: id, Trigger: "manual", Reason: "engine end-to-end", CreatedNS: kfNow - 60e9, DeadlineNS: kfNow,
		StartStep: 0, Steps: 3, Every: 1, Ranks: ranks, Fetched: ranks, Uploaded: ranks, State: "complete"}
	off := map[int]int64{}
	for _, ce := range rep.Clock {
		off[ce.Rank] = ce.OffsetNS
	}
	tls := map[int64]*kfTimeline{}
	for _, s := range rep.Analysed {
		tl := &kfTimeline{Step: s}
		first := int64(math.MaxInt64)
		for _, tr := range traces {
			for _, e := range tr.Events {
				if e.Step == s {
					first = min(first, e.StartNS+off[tr.Rank])
				}
			}
		}
		for _, tr := range traces {
			tr2 := kfTLRank{Rank: tr.Rank, OffsetNS: off[tr.Rank]}
			for _, e := range tr.Events {
				if e.Step == s {
					tr2.Events = append(tr2.Events, kfTLEvent{Name: e.Name, Cat: e.Cat.String(), Lane: fmt.Sprintf("t%d", e.TID),
						StartNS: e.StartNS + off[tr.Rank] - first, DurNS: e.DurNS})
				}
			}
			tl.Ranks = append(tl.Ranks, tr2)
		}
		tls[s] = tl
	}
	return &kfJob{Captures: []*kfCapture{c}, Reports: map[string]*kfReport{c.ID: &kr}, Timelines: map[string]map[int64]*kfTimeline{c.ID: tls}}
}
