package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
)

// The Greyhound section renders GET /api/v1/jobs/{id}/greyhound (the
// report of /tmp contracts §5: iteration time by ACF, BOCD+V change
// points, cross-group comparison, entry lateness, the three-phase
// controller, validation and the verdict). Its fixtures are built here,
// deterministically, one per way the section must read: a slow rank
// found by validation, a slow link, tracking with nothing to report, an
// inconclusive verdict, 1,024 ranks, and a pure-NCCL job with no stage
// vectors whose validation is still pending. They attach to the stage
// scenarios' job ids so the page shows both analyses side by side.
// Regenerate with
//
//	go test ./internal/ui -run TestGreyhoundFixtures -update

// ghReport mirrors the report JSON field for field; the contract test
// decodes every fixture into it with unknown fields refused.
type ghReport struct {
	Job          string          `json:"job"`
	GeneratedNS  int64           `json:"generated_ns"`
	Telemetry    ghTelemetry     `json:"telemetry"`
	Iteration    *ghIteration    `json:"iteration"`
	ChangePoints []ghChangePoint `json:"changepoints"`
	Detector     string          `json:"detector"`
	Groups       []ghCluster     `json:"groups"`
	Lateness     *ghLateness     `json:"lateness"`
	Controller   ghController    `json:"controller"`
	Validation   []ghValidation  `json:"validation"`
	Verdict      *ghVerdict      `json:"verdict,omitempty"`
}

type ghTelemetry struct {
	Calls   int64 `json:"calls"`
	Ranks   int   `json:"ranks"`
	Dropped int64 `json:"dropped"`
	Limited bool  `json:"limited"`
}

type ghIteration struct {
	Period        int            `json:"period"`
	ACF           float64        `json:"acf"`
	Method        string         `json:"method"`
	Rank          int            `json:"rank"`
	Ranks         []ghRankPeriod `json:"ranks"`
	Series        []ghIterPoint  `json:"series"`
	MedianMS      float64        `json:"median_ms"`
	TruthErrorPct *float64       `json:"truth_error_pct,omitempty"`
}

type ghRankPeriod struct {
	Rank   int     `json:"rank"`
	Period int     `json:"period"`
	ACF    float64 `json:"acf"`
	OK     bool    `json:"ok"`
}

type ghIterPoint struct {
	Iter  int     `json:"iter"`
	EndNS int64   `json:"end_ns"`
	MS    float64 `json:"ms"`
}

type ghChangePoint struct {
	Index    int     `json:"index"`
	EndNS    int64   `json:"end_ns"`
	BeforeMS float64 `json:"before_ms"`
	AfterMS  float64 `json:"after_ms"`
	Rel      float64 `json:"rel"`
	Kind     string  `json:"kind"`
	Prob     float64 `json:"prob"`
	Verified bool    `json:"verified"`
}

type ghCluster struct {
	Op         string     `json:"op"`
	Bytes      int64      `json:"bytes"`
	Size       int        `json:"size"`
	MedianMS   float64    `json:"median_ms"`
	Members    []ghMember `json:"members"`
	Comparable bool       `json:"comparable"`
}

type ghMember struct {
	Comm      string  `json:"comm"`
	Ranks     []int   `json:"ranks"`
	ExecMS    float64 `json:"exec_ms"`
	Instances int     `json:"instances"`
	Ratio     float64 `json:"ratio"`
	Degraded  bool    `json:"degraded"`
	Device    bool    `json:"device"`
}

type ghLateness struct {
	Ranks     []int        `json:"ranks"`
	Instances []ghInstance `json:"instances"`
}

type ghInstance struct {
	Comm   string    `json:"comm"`
	Seq    int64     `json:"seq"`
	Op     string    `json:"op"`
	EndNS  int64     `json:"end_ns"`
	LateMS []float64 `json:"late_ms"`
}

type ghController struct {
	Phase   string         `json:"phase"`
	SinceNS int64          `json:"since_ns"`
	History []ghTransition `json:"history"`
}

type ghTransition struct {
	From     string         `json:"from"`
	To       string         `json:"to"`
	AtNS     int64          `json:"at_ns"`
	Reason   string         `json:"reason"`
	Evidence map[string]any `json:"evidence"`
}

type ghValidation struct {
	ID      string     `json:"id"`
	State   string     `json:"state"`
	GEMM    []ghGEMM   `json:"gemm"`
	Links   []ghLink   `json:"links"`
	Verdict *ghVerdict `json:"verdict"`
}

type ghGEMM struct {
	Rank  int     `json:"rank"`
	MS    float64 `json:"ms"`
	Ratio float64 `json:"ratio"`
	Slow  bool    `json:"slow"`
}

type ghLink struct {
	Src   int     `json:"src"`
	Dst   int     `json:"dst"`
	MS    float64 `json:"ms"`
	Ratio float64 `json:"ratio"`
	Slow  bool    `json:"slow"`
}

type ghVerdict struct {
	Kind       string       `json:"kind"`
	Ranks      []int        `json:"ranks"`
	Links      []ghLinkPair `json:"links"`
	Text       string       `json:"text"`
	Confidence string       `json:"confidence"`
}

type ghLinkPair struct {
	Src int `json:"src"`
	Dst int `json:"dst"`
}

func ghFile(id string) string { return "greyhound-" + id + ".json" }

// ghT0 is the fixtures' first iteration end: the stage scenarios'
// registration time plus a minute.
var ghT0 = created.Add(60e9).UnixNano()

const ghMS = int64(1e6)

func ghR1(x float64) float64 { return math.Round(x*10) / 10 }
func ghR2(x float64) float64 { return math.Round(x*100) / 100 }

// ghJob describes one fixture; build derives everything else from it.
type ghJob struct {
	id    string
	ranks int
	iters int
	seed  uint64
	base  float64 // ms per iteration before the onset
	// steps: at iteration steps[i].at the iteration time becomes
	// steps[i].ms (an onset when it rises, a relief when it falls).
	steps []struct {
		at int
		ms float64
	}
	late      map[int]float64 // rank → ms late at entry after the first onset
	period    int
	phases    []ghTransition // at_ns filled from iteration indexes in atIter
	atIter    []int
	groups    []ghCluster
	instances int
	comms     func(i int) (comm, op string)
	valid     []ghValidation
	verdict   *ghVerdict
	truth     float64
	limited   bool
	dropped   int64
}

func buildGreyhound(j ghJob) ghReport {
	rng := rand.New(rand.NewPCG(j.seed, 7))
	rep := ghReport{Job: j.id, Detector: "bocd+v", Telemetry: ghTelemetry{Ranks: j.ranks, Dropped: j.dropped, Limited: j.limited}}
	it := &ghIteration{Period: j.period, ACF: 0.98, Method: "acf"}
	cur := j.base
	end := ghT0
	onset := -1
	var vals []float64
	for i := 0; i < j.iters; i++ {
		for _, s := range j.steps {
			if s.at == i {
				before := cur
				cur = s.ms
				kind := "onset"
				if s.ms < before {
					kind = "relief"
				} else if onset < 0 {
					onset = i
				}
				rep.ChangePoints = append(rep.ChangePoints, ghChangePoint{Index: i, BeforeMS: before, AfterMS: cur,
					Rel: ghR2((cur - before) / before), Kind: kind, Prob: ghR2(0.93 + 0.06*rng.Float64()), Verified: true})
			}
		}
		v := ghR1(cur * (1 + 0.012*rng.NormFloat64()))
		if rng.IntN(60) == 0 {
			v = ghR1(v * 1.35) // a GC-like spike: one iteration, no change point
		}
		end += int64(v * float64(ghMS))
		it.Series = append(it.Series, ghIterPoint{Iter: i, EndNS: end, MS: v})
		vals = append(vals, v)
	}
	for k := range rep.ChangePoints {
		rep.ChangePoints[k].EndNS = it.Series[rep.ChangePoints[k].Index].EndNS
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	it.MedianMS = s[len(s)/2]
	for r := 0; r < min(j.ranks, 8); r++ {
		it.Ranks = append(it.Ranks, ghRankPeriod{Rank: r, Period: j.period, ACF: ghR2(0.97 + 0.02*rng.Float64()), OK: true})
	}
	if j.truth > 0 {
		t := j.truth
		it.TruthErrorPct = &t
	}
	rep.Iteration = it
	rep.GeneratedNS = end + 2e9
	rep.Telemetry.Calls = int64(j.iters) * int64(j.period) * int64(j.ranks)

	// Lateness: the most recent instances, one every few iterations.
	lat := &ghLateness{}
	for r := 0; r < j.ranks; r++ {
		lat.Ranks = append(lat.Ranks, r)
	}
	first := max(0, j.iters-j.instances*2)
	for k := 0; k < j.instances; k++ {
		i := first + 2*k
		comm, op := j.comms(k)
		inst := ghInstance{Comm: comm, Seq: int64(i*j.period + k%j.period), Op: op, EndNS: it.Series[i].EndNS - 5*ghMS, LateMS: make([]float64, j.ranks)}
		minv := math.Inf(1)
		for r := range inst.LateMS {
			v := 0.4 * rng.ExpFloat64()
			if onset >= 0 && i >= onset {
				v += j.late[r] * (1 + 0.05*rng.NormFloat64())
			}
			inst.LateMS[r] = v
			minv = min(minv, v)
		}
		for r := range inst.LateMS {
			inst.LateMS[r] = ghR1(inst.LateMS[r] - minv)
		}
		lat.Instances = append(lat.Instances, inst)
	}
	rep.Lateness = lat
	rep.Groups = j.groups

	c := ghController{Phase: "tracking", SinceNS: ghT0, History: []ghTransition{}}
	for k, tr := range j.phases {
		tr.AtNS = it.Series[j.atIter[k]].EndNS + 150*ghMS
		c.History = append(c.History, tr)
		c.Phase, c.SinceNS = tr.To, tr.AtNS
	}
	rep.Controller = c
	rep.Validation = j.valid
	if rep.Validation == nil {
		rep.Validation = []ghValidation{}
	}
	if j.verdict == nil {
		// What the engine says while profiling or validating.
		j.verdict = &ghVerdict{Kind: "inconclusive", Ranks: []int{}, Links: []ghLinkPair{}, Confidence: "low",
			Text: "slowdown detected; " + c.Phase + " in progress"}
	}
	for k := range rep.Validation {
		if rep.Validation[k].State == "done" {
			rep.Validation[k].Verdict = j.verdict
		} else {
			rep.Validation[k].Verdict = &ghVerdict{Kind: "inconclusive", Ranks: []int{}, Links: []ghLinkPair{}, Confidence: "low", Text: "no results yet"}
		}
	}
	if rep.ChangePoints == nil {
		rep.ChangePoints = []ghChangePoint{}
	}
	rep.Verdict = j.verdict
	return rep
}

// pairs are the size-2 groups {0,1}, {2,3}, … of n ranks; slow marks the
// degraded ones with their exec time ratio.
func ghPairs(op string, nb int64, n int, median float64, slow map[int]float64, rng *rand.Rand) ghCluster {
	cl := ghCluster{Op: op, Bytes: nb, Size: 2, MedianMS: median, Comparable: true}
	for r := 0; r+1 < n; r += 2 {
		ratio := ghR2(1 + 0.03*rng.NormFloat64())
		if f, ok := slow[r/2]; ok {
			ratio = f
		}
		cl.Members = append(cl.Members, ghMember{Comm: fmt.Sprintf("tp-%04d", r/2), Ranks: []int{r, r + 1},
			ExecMS: ghR2(median * ratio), Instances: 40, Ratio: ratio, Degraded: ratio > 1.10, Device: true})
	}
	return cl
}

func ghBlocks(op string, nb int64, n, size int, median float64, slow map[int]float64, prefix string, rng *rand.Rand) ghCluster {
	cl := ghCluster{Op: op, Bytes: nb, Size: size, MedianMS: median, Comparable: true}
	for g := 0; g*size < n; g++ {
		ratio := ghR2(1 + 0.02*rng.NormFloat64())
		if f, ok := slow[g]; ok {
			ratio = f
		}
		var rs []int
		for r := g * size; r < (g+1)*size; r++ {
			rs = append(rs, r)
		}
		cl.Members = append(cl.Members, ghMember{Comm: fmt.Sprintf("%s-%d", prefix, g), Ranks: rs,
			ExecMS: ghR2(median * ratio), Instances: 40, Ratio: ratio, Degraded: ratio > 1.10, Device: true})
	}
	return cl
}

func ghGemm(ranks []int, base float64, slow map[int]float64, rng *rand.Rand) []ghGEMM {
	var out []ghGEMM
	for _, r := range ranks {
		f := 1 + 0.02*rng.NormFloat64()
		if s, ok := slow[r]; ok {
			f = s
		}
		out = append(out, ghGEMM{Rank: r, MS: ghR2(base * f)})
	}
	ms := make([]float64, len(out))
	for i, g := range out {
		ms[i] = g.MS
	}
	slices.Sort(ms)
	med := ms[len(ms)/2]
	for i := range out {
		out[i].Ratio = ghR2(out[i].MS / med)
		out[i].Slow = out[i].Ratio > 1.10
	}
	return out
}

// ring is the P2P ring r → r+1 over ranks, with the given slow links.
func ghRing(ranks []int, base float64, slow map[[2]int]float64, rng *rand.Rand) []ghLink {
	var out []ghLink
	for i, r := range ranks {
		d := ranks[(i+1)%len(ranks)]
		f := 1 + 0.02*rng.NormFloat64()
		if s, ok := slow[[2]int{r, d}]; ok {
			f = s
		}
		out = append(out, ghLink{Src: r, Dst: d, MS: ghR2(base * f)})
	}
	ms := make([]float64, len(out))
	for i, l := range out {
		ms[i] = l.MS
	}
	slices.Sort(ms)
	med := ms[len(ms)/2]
	for i := range out {
		out[i].Ratio = ghR2(out[i].MS / med)
		out[i].Slow = out[i].Ratio > 1.10
	}
	return out
}

func ghSeq(a, b int) []int {
	var out []int
	for r := a; r < b; r++ {
		out = append(out, r)
	}
	return out
}

type ghStep = struct {
	at int
	ms float64
}

func ghFixtures() map[string]ghReport {
	rng := rand.New(rand.NewPCG(42, 42))
	dp := func(op string) func(int) (string, string) {
		return func(k int) (string, string) {
			if k%3 == 2 {
				return "tp-0001", "AllGather"
			}
			return "world", op
		}
	}
	tr := func(from, to, reason string, ev map[string]any) ghTransition {
		return ghTransition{From: from, To: to, Reason: reason, Evidence: ev}
	}
	out := map[string]ghReport{}
	add := func(j ghJob) { out[j.id] = buildGreyhound(j) }

	// (a) A slow rank, found by cross-group comparison and confirmed by
	// the GEMM test; every link is normal.
	add(ghJob{id: "data-straggler-8", ranks: 8, iters: 240, seed: 1, base: 133, period: 6, truth: 0.4,
		steps: []ghStep{{140, 220}}, late: map[int]float64{2: 87}, instances: 60, comms: dp("AllReduce"),
		groups: []ghCluster{ghPairs("AllReduce", 26214400, 8, 10.2, map[int]float64{1: 1.64}, rng),
			ghBlocks("AllGather", 8388608, 8, 4, 21.5, map[int]float64{0: 1.38}, "dp", rng)},
		phases: []ghTransition{
			tr("tracking", "profiling", "BOCD+V change point at iteration 140: 133 ms → 220 ms (+65%)",
				map[string]any{"changepoint_index": 140, "prob": 0.97, "rel": 0.65}),
			tr("profiling", "validation", "2 degraded groups share ranks 2, 3: tp-0001 at 1.64× and dp-0 at 1.38× their cluster medians",
				map[string]any{"degraded_groups": []string{"tp-0001", "dp-0"}, "suspects": []int{2, 3}}),
			tr("validation", "verdict", "plan v-1: GEMM on rank 2 took 2.08× the median; every link within 10% of the median",
				map[string]any{"plan": "v-1", "gemm_ratio": 2.08, "slow_links": 0}),
		},
		atIter: []int{143, 150, 156},
		valid: []ghValidation{{ID: "v-1", State: "done", GEMM: ghGemm(ghSeq(0, 8), 3.1, map[int]float64{2: 2.08}, rng),
			Links: ghRing(ghSeq(0, 8), 12.0, nil, rng)}},
		verdict: &ghVerdict{Kind: "slow_rank", Ranks: []int{2}, Links: []ghLinkPair{}, Confidence: "high",
			Text: "Rank 2 is slow: its GEMM took 2.08× the median (6.45 ms against 3.10 ms) while every P2P link ran within 10% of the median. Iteration time rose 65% at iteration 140."},
	})

	// (b) A slow link: 4 → 5 runs 2.6× the median; GEMM is uniform.
	add(ghJob{id: "absorbed-backward", ranks: 8, iters: 160, seed: 2, base: 150, period: 4,
		steps: []ghStep{{80, 268}}, late: map[int]float64{5: 31, 4: 2}, instances: 60, comms: dp("AllReduce"),
		groups: []ghCluster{ghPairs("AllReduce", 26214400, 8, 11.0, map[int]float64{2: 1.81}, rng)},
		phases: []ghTransition{
			tr("tracking", "profiling", "BOCD+V change point at iteration 80: 150 ms → 268 ms (+79%)", map[string]any{"changepoint_index": 80, "prob": 0.99}),
			tr("profiling", "validation", "1 degraded group: tp-0002 (ranks 4, 5) at 1.81× its cluster median", map[string]any{"degraded_groups": []string{"tp-0002"}, "suspects": []int{4, 5}}),
			tr("validation", "verdict", "plan v-1: link 4 → 5 took 2.6× the median at 16–64 MB; GEMM uniform", map[string]any{"plan": "v-1", "slow_links": 1}),
		},
		atIter: []int{83, 90, 95},
		valid: []ghValidation{{ID: "v-1", State: "done", GEMM: ghGemm(ghSeq(0, 8), 3.1, nil, rng),
			Links: ghRing(ghSeq(0, 8), 12.0, map[[2]int]float64{{4, 5}: 2.6}, rng)}},
		verdict: &ghVerdict{Kind: "slow_link", Ranks: []int{}, Links: []ghLinkPair{{4, 5}}, Confidence: "high",
			Text: "The link from rank 4 to rank 5 is slow: P2P transfers over it took 2.6× the median link time while every rank's GEMM ran within 10% of the median."},
	})

	// (c) Tracking only: steady, nothing to report.
	add(ghJob{id: "baseline-8", ranks: 8, iters: 120, seed: 3, base: 133, period: 6, truth: 0.3,
		late: map[int]float64{}, instances: 40, comms: dp("AllReduce"),
		groups: []ghCluster{ghPairs("AllReduce", 26214400, 8, 10.1, nil, rng)},
		verdict: &ghVerdict{Kind: "none", Ranks: []int{}, Links: []ghLinkPair{}, Confidence: "high",
			Text: "No fail-slow: iteration time has been steady at 133 ms over 120 iterations."},
	})

	// (d) Inconclusive: the slowdown is real, ranks 1 and 3 enter late,
	// but validation clears every GPU and link.
	add(ghJob{id: "tie", ranks: 8, iters: 160, seed: 4, base: 133, period: 6,
		steps: []ghStep{{80, 193}}, late: map[int]float64{1: 58, 3: 59}, instances: 60, comms: dp("AllReduce"),
		groups: []ghCluster{ghPairs("AllReduce", 26214400, 8, 10.2, nil, rng)},
		phases: []ghTransition{
			tr("tracking", "profiling", "BOCD+V change point at iteration 80: 133 ms → 193 ms (+45%)", map[string]any{"changepoint_index": 80, "prob": 0.95}),
			tr("profiling", "validation", "no degraded group; ranks 1 and 3 enter collectives ~58 ms late", map[string]any{"degraded_groups": []string{}, "late_ranks": []int{1, 3}}),
			tr("validation", "verdict", "plan v-1: every GEMM and link within 10% of the median", map[string]any{"plan": "v-1", "slow_links": 0, "slow_ranks": 0}),
		},
		atIter: []int{84, 91, 97},
		valid:  []ghValidation{{ID: "v-1", State: "done", GEMM: ghGemm(ghSeq(0, 8), 3.1, nil, rng), Links: ghRing(ghSeq(0, 8), 12.0, nil, rng)}},
		verdict: &ghVerdict{Kind: "inconclusive", Ranks: []int{1, 3}, Links: []ghLinkPair{}, Confidence: "low",
			Text: "Iteration time rose 45% at iteration 80 and ranks 1 and 3 enter collectives about 58 ms late, but validation found no slow GPU or link: the delay is outside the collectives (data loading, CPU or the host)."},
	})

	// (e) 1,024 ranks: rank 641 is slow; lateness is 1,024 × 96.
	add(ghJob{id: "data-straggler-1024", ranks: 1024, iters: 160, seed: 5, base: 212, period: 8,
		steps: []ghStep{{100, 243}}, late: map[int]float64{641: 30}, instances: 64,
		comms: func(k int) (string, string) {
			if k%2 == 1 {
				return "tp-80", "AllGather"
			}
			return "world", "AllReduce"
		},
		groups: []ghCluster{ghBlocks("AllReduce", 52428800, 1024, 8, 14.0, map[int]float64{80: 1.52}, "tp", rng),
			ghBlocks("ReduceScatter", 104857600, 1024, 128, 88.0, map[int]float64{5: 1.17}, "dp", rng)},
		phases: []ghTransition{
			tr("tracking", "profiling", "BOCD+V change point at iteration 100: 212 ms → 243 ms (+15%)", map[string]any{"changepoint_index": 100, "prob": 0.96}),
			tr("profiling", "validation", "2 degraded groups share ranks 640–647", map[string]any{"degraded_groups": []string{"tp-80", "dp-5"}, "suspects": ghSeq(640, 648)}),
			tr("validation", "verdict", "plan v-1: GEMM on rank 641 took 1.9× the median", map[string]any{"plan": "v-1", "gemm_ratio": 1.9}),
		},
		atIter: []int{104, 112, 118},
		valid: []ghValidation{{ID: "v-1", State: "done", GEMM: ghGemm(ghSeq(0, 1024), 3.1, map[int]float64{641: 1.9}, rng),
			Links: ghRing(ghSeq(640, 648), 12.0, nil, rng)}},
		verdict: &ghVerdict{Kind: "slow_rank", Ranks: []int{641}, Links: []ghLinkPair{}, Confidence: "high",
			Text: "Rank 641 is slow: its GEMM took 1.9× the median while the links of its group ran within 10% of the median. Iteration time rose 15% at iteration 100."},
	})

	// (f) A pure-NCCL job (no stage vectors): validation pending, no
	// verdict yet, some records dropped.
	add(ghJob{id: "nccl-only-4", ranks: 4, iters: 90, seed: 6, base: 75, period: 4, dropped: 37, limited: true,
		steps: []ghStep{{60, 150}}, late: map[int]float64{3: 70}, instances: 30, comms: dp("AllReduce"),
		groups: []ghCluster{ghPairs("AllReduce", 16777216, 4, 8.0, map[int]float64{1: 1.9}, rng)},
		phases: []ghTransition{
			tr("tracking", "profiling", "BOCD+V change point at iteration 60: 75 ms → 150 ms (+100%)", map[string]any{"changepoint_index": 60}),
			tr("profiling", "validation", "1 degraded group: tp-0001 (ranks 2, 3)", map[string]any{"suspects": []int{2, 3}}),
		},
		atIter: []int{63, 70},
		valid:  []ghValidation{{ID: "v-1", State: "pending", GEMM: []ghGEMM{}, Links: []ghLink{}}},
	})
	return out
}

func ghFixtureFiles(t testing.TB) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for id, rep := range ghFixtures() {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		files[ghFile(id)] = append(b, '\n')
	}
	return files
}

func TestGreyhoundFixtures(t *testing.T) {
	syncGolden(t, "greyhound-*.json", ghFixtureFiles(t), nil, "fixture", "TestGreyhoundFixtures", "")
}

// Every fixture follows the report contract: no unknown field, lengths
// and indexes consistent, enumerations in range.
func TestGreyhoundFixturesFollowContract(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "greyhound-*.json"))
	if err != nil || len(paths) < 5 {
		t.Fatalf("%d greyhound fixtures (%v), want ≥ 5", len(paths), err)
	}
	phases := []string{"tracking", "profiling", "validation", "verdict"}
	kinds := []string{"slow_rank", "slow_link", "uniform", "none", "inconclusive"}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var r ghReport
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		var eng greyhound.Report
		dec = json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&eng); err != nil {
			t.Errorf("%s does not decode as the engine's greyhound.Report: %v", p, err)
		}
		name := filepath.Base(p)
		if want := strings.TrimSuffix(strings.TrimPrefix(name, "greyhound-"), ".json"); r.Job != want {
			t.Errorf("%s: job %q", name, r.Job)
		}
		if r.Iteration != nil {
			for i, pt := range r.Iteration.Series {
				if pt.Iter != i || (i > 0 && pt.EndNS <= r.Iteration.Series[i-1].EndNS) || !(pt.MS > 0) {
					t.Errorf("%s: series[%d] = %+v", name, i, pt)
				}
			}
			for _, c := range r.ChangePoints {
				if c.Index < 0 || c.Index >= len(r.Iteration.Series) || (c.Kind != "onset" && c.Kind != "relief") || c.EndNS != r.Iteration.Series[c.Index].EndNS {
					t.Errorf("%s: change point %+v", name, c)
				}
			}
		}
		if l := r.Lateness; l != nil {
			for i, in := range l.Instances {
				if len(in.LateMS) != len(l.Ranks) || slices.Min(in.LateMS) != 0 {
					t.Errorf("%s: lateness instance %d has %d values for %d ranks (min %v)", name, i, len(in.LateMS), len(l.Ranks), slices.Min(in.LateMS))
				}
			}
		}
		for _, g := range r.Groups {
			for _, m := range g.Members {
				if len(m.Ranks) != g.Size || m.Degraded != (m.Ratio > 1.10) {
					t.Errorf("%s: group member %+v of cluster size %d", name, m, g.Size)
				}
			}
		}
		if !slices.Contains(phases, r.Controller.Phase) {
			t.Errorf("%s: phase %q", name, r.Controller.Phase)
		}
		for i, h := range r.Controller.History {
			if !slices.Contains(phases, h.From) || !slices.Contains(phases, h.To) || h.Reason == "" ||
				(i > 0 && (h.AtNS < r.Controller.History[i-1].AtNS || h.From != r.Controller.History[i-1].To)) {
				t.Errorf("%s: transition %d %+v", name, i, h)
			}
		}
		if v := r.Verdict; v == nil || (!slices.Contains(kinds, v.Kind) || (v.Confidence != "high" && v.Confidence != "low") || v.Text == "") {
			t.Errorf("%s: verdict %+v", name, v)
		}
	}
}
