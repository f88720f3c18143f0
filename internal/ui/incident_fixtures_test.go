package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
)

// testdata/incidents/ holds what the incident read API (issue 17 item 2:
// GET /api/v1/incidents/{id}, GET /api/v1/hosts) answers for the scenario
// jobs: one <id>.json per incident, the single view with every piece of
// evidence and its view link, and hosts.json, the fleet rows. They are
// incident.Incident and incident.HostRow values marshalled here, so a
// field renamed or dropped in internal/incident makes them stale
// (TestIncidentFixtures) instead of silently blank in the page. Their
// numbers come from the scenarios: the step times are the stage reports'
// series, the onsets and reliefs their change points, the stragglers
// and hosts what the real analysis names. Regenerate with
//
//	go test ./internal/ui -run TestIncidentFixtures -update
//
// The incidents, one per way the pages must read:
//
//	data-straggler-8  open, a cause stated by four engines that agree
//	tie               open, two hypotheses the engines disagree on: no cause
//	relief            resolved (the relief held past the hold-down)
//	uniform-8         open, every rank slowed alike (no rank, no host)
//	absorbed-backward open, the delay StageFrontier cannot place (absorbed
//	                  in the backward pass) named by Greyhound: a slow link
//	data-straggler-1024 open, a rank of 1,024 whose GPU a benchmark found slow
//
// The fleet rows and each incident's notes on other jobs are
// internal/incident's own (Fleet, RelatedTo) over these incidents.

// incNow is the server clock of the fixtures (the SysOM fake's).
var incNow = time.Unix(0, fakeNow).UTC()

const (
	incDS8      = "inc-ds8-140"
	incDS1024   = "inc-ds1024-100"
	incTie      = "inc-tie-80"
	incRelief   = "inc-relief-40"
	incUniform  = "inc-uniform-80"
	incAbsorbed = "inc-absorbed-80"
	// The KAIR captures of the KAIR fixtures (kairWorld).
	kairCapDS8 = "c3f1a9e2b4d70"
	kairCapTie = "c7e7e7e7e7e70"
)

// incJob is one scenario job on a wall clock: step s ends at wall[s].
type incJob struct {
	id    string
	job   *signal.Job
	rep   *analysis.Report
	ranks int
	steps []int64 // the report's series steps
	ms    []float64
	wall  []int64
}

// newIncJob puts the job's report series on a clock whose first step
// ends at t0.
func newIncJob(t testing.TB, w *world, id string, t0 time.Time) *incJob {
	t.Helper()
	job, err := w.src.Job(id)
	if err != nil {
		t.Fatal(err)
	}
	rep := w.reports[id]
	j := &incJob{id: id, job: job, rep: rep, ranks: job.WorldSize}
	end := t0.UnixNano()
	for _, p := range rep.Timeline.Series {
		end += int64(p.ExposedMS * 1e6)
		j.steps = append(j.steps, p.Step)
		j.ms = append(j.ms, math.Round(p.ExposedMS*100)/100)
		j.wall = append(j.wall, end)
	}
	return j
}

// at is when step s ended (extrapolated past the series at its last pace).
func (j *incJob) at(s int64) int64 {
	i, ok := slices.BinarySearch(j.steps, s)
	if ok {
		return j.wall[i]
	}
	n := len(j.steps) - 1
	return j.wall[n] + (s-j.steps[n])*int64(j.ms[n]*1e6)
}

func (j *incJob) span(from, to int64) incident.Span {
	return incident.Span{FromStep: from, ToStep: to, FromNS: j.at(from-1) + 1, ToNS: j.at(to)}
}

func (j *incJob) point(s int64) incident.Point { return incident.Point{WallNS: j.at(s), Step: s} }

func (j *incJob) host(r int) string {
	for _, x := range j.job.Ranks {
		if x.Rank == r {
			return x.Host
		}
	}
	return ""
}

func (j *incJob) rank(r int) incident.Target { return incident.RankTarget(r, j.host(r)) }

// samples are the step times of steps [from, to].
func (j *incJob) samples(from, to int64) []incident.Sample {
	var out []incident.Sample
	for i, s := range j.steps {
		if s >= from && s <= to {
			out = append(out, incident.Sample{Step: s, WallNS: j.wall[i], MS: j.ms[i]})
		}
	}
	return out
}

// median step time of steps [from, to].
func (j *incJob) median(from, to int64) float64 {
	var v []float64
	for _, s := range j.samples(from, to) {
		v = append(v, s.MS)
	}
	slices.Sort(v)
	return math.Round(v[len(v)/2]*10) / 10
}

// lost is Σ over steps [from, to] of (step time − healthy), Greyhound
// §5.1's accumulated loss, in seconds and rank-seconds.
func (j *incJob) lost(healthy float64, from, to int64, partial bool) incident.Lost {
	var sum float64
	var n int64
	for _, s := range j.samples(from, to) {
		sum += s.MS - healthy
		n++
	}
	sec := math.Round(sum) / 1000
	return incident.Lost{Seconds: sec, RankSeconds: math.Round(sec*float64(j.ranks)*1000) / 1000, Steps: n, Partial: partial}
}

func (j *incJob) onset() analysis.ChangePoint {
	for _, c := range j.rep.Timeline.ChangePoints {
		if c.Kind == analysis.Onset {
			return c
		}
	}
	panic(j.id + ": no onset")
}

// windowReport is the real analysis of steps [from, to] against [rf, rt].
func (j *incJob) windowReport(t testing.TB, w *world, from, to, rf, rt int64) *analysis.Report {
	t.Helper()
	rep, err := w.analyzer.Run(context.Background(), analysis.Request{Job: j.id, From: &from, To: &to, RefFrom: &rf, RefTo: &rt})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// frame is what every onset-only incident starts from: the onset, the
// last step, the windows, the healthy and slow step times, and
// StageFrontier's onset and step-time evidence.
type frame struct {
	cp             analysis.ChangePoint
	last           int64
	win            incident.Windows
	healthy, slow  float64
	onset, samples incident.Evidence
}

func (j *incJob) frame() frame {
	cp := j.onset()
	last := j.steps[len(j.steps)-1]
	win := incident.Windows{Before: j.span(3, cp.Step-1), During: j.span(cp.Step, last)}
	return frame{cp: cp, last: last, win: win, healthy: j.median(3, cp.Step-1), slow: j.median(cp.Step, last),
		onset: j.stageChange(cp, win, j.reportView(win)), samples: j.progress(last, win)}
}

// stageChange is StageFrontier's change point cp as evidence.
func (j *incJob) stageChange(cp analysis.ChangePoint, win incident.Windows, view string) incident.Evidence {
	sig, text := incident.SignalOnset, fmt.Sprintf("Step time rose from %.0f ms to %.0f ms at step %d (+%.0f%%).", cp.BeforeMS, cp.AfterMS, cp.Step, 100*cp.Rel)
	if cp.Kind == analysis.Relief {
		sig, text = incident.SignalRelief, fmt.Sprintf("Step time fell back from %.0f ms to %.0f ms at step %d.", cp.BeforeMS, cp.AfterMS, cp.Step)
	}
	return j.ev(incident.KindStageChange, strconv.FormatInt(cp.Step, 10), sig, j.span(cp.Step, cp.Step), text, func(e *incident.Evidence) {
		e.Layer, e.Confidence, e.BeforeMS, e.AfterMS, e.Verified = incident.LayerStage, incident.ConfidenceHigh, cp.BeforeMS, cp.AfterMS, true
		e.View = view
		e.Detail = detail(cp)
	})
}

// progress is StageFrontier's step times of steps 3–last.
func (j *incJob) progress(last int64, win incident.Windows) incident.Evidence {
	return j.ev(incident.KindProgress, "0", incident.SignalProgress, j.span(3, last), fmt.Sprintf("Step times of steps 3–%d.", last), func(e *incident.Evidence) {
		e.Samples, e.Ranks = j.samples(3, last), j.ranks
		e.View = j.reportView(win)
	})
}

// leader is StageFrontier's named straggler h of the data stage over the
// slow window; rose is the stage's rise per step (0: not said).
func (j *incJob) leader(h stagefrontier.Headline, win incident.Windows, rose float64) incident.Evidence {
	text := fmt.Sprintf("Rank %d on %s finishes data loading last in %.0f%% of the slow steps.", h.Rank, h.Host, 100*h.Confidence)
	if rose > 0 {
		text = strings.TrimSuffix(text, ".") + fmt.Sprintf("; data loading rose %.1f ms per step.", rose)
	}
	return j.ev(incident.KindStageLeader, strconv.FormatInt(win.During.FromStep, 10)+"-data", incident.SignalFinding, win.During, text, func(e *incident.Evidence) {
		e.Targets, e.Subject, e.Exclusive = []incident.Target{j.rank(h.Rank)}, "stage:"+h.Stage, true
		e.Layer, e.Category, e.Confidence = incident.LayerStage, incident.CategoryData, incident.ConfidenceHigh
		e.Reason = fmt.Sprintf("it leads the stage in %.0f%% of the steps where the stage exposes time", 100*h.Confidence)
		e.View = j.reportView(win)
		e.Detail = detail(h)
	})
}

// The view links the API puts on each piece of evidence: an API path
// with the incident's window preset (the UI maps it to its own route).
func (j *incJob) path(view string, q url.Values) string {
	p := "/api/v1/jobs/" + url.PathEscape(j.id) + "/" + view
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p
}

func ns(v int64) string { return strconv.FormatInt(v, 10) }

func (j *incJob) reportView(win incident.Windows) string {
	return j.path("report", url.Values{"from": {ns(win.During.FromStep)}, "to": {ns(win.During.ToStep)},
		"ref_from": {ns(win.Before.FromStep)}, "ref_to": {ns(win.Before.ToStep)}})
}

func (j *incJob) greyhoundView(win incident.Windows) string {
	to := win.During.ToNS
	if win.After.ToNS > 0 {
		to = win.After.ToNS
	}
	return j.path("greyhound", url.Values{"from_ns": {ns(win.Before.FromNS)}, "to_ns": {ns(to)}})
}

func (j *incJob) sysomView(win incident.Windows) string {
	return j.path("sysom", url.Values{"from_ns": {ns(win.During.FromNS)}, "to_ns": {ns(win.During.ToNS)},
		"base_from_ns": {ns(win.Before.FromNS)}, "base_to_ns": {ns(win.Before.ToNS)}})
}

func (j *incJob) diffView(win incident.Windows, a, b int) string {
	return j.path("flamegraph/diff", url.Values{"a_rank": {strconv.Itoa(a)}, "b_rank": {strconv.Itoa(b)},
		"from_ns": {ns(win.During.FromNS)}, "to_ns": {ns(win.During.ToNS)}})
}

func (j *incJob) kairView(capture string) string {
	return j.path("kair", url.Values{"capture": {capture}})
}

// ev is one piece of evidence about window win, produced two seconds
// after it ends; set fills the rest.
func (j *incJob) ev(kind incident.Kind, suffix string, sig incident.Signal, win incident.Span, text string, set func(e *incident.Evidence)) incident.Evidence {
	eng, _, _ := strings.Cut(string(kind), ".")
	e := incident.Evidence{ID: string(kind) + ":" + j.id + ":" + suffix, Kind: kind, Engine: incident.Engine(eng), Job: j.id,
		AtNS: win.ToNS + 2e9, Window: win, Signal: sig, Text: text}
	if set != nil {
		set(&e)
	}
	return e
}

func detail(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func ids(evs ...incident.Evidence) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func link(l incident.Layer, e incident.Evidence, text, reason string) incident.ChainLink {
	return incident.ChainLink{Layer: l, Engine: e.Engine, Evidence: []string{e.ID}, Text: text, Confidence: e.Confidence, Reason: reason}
}

func engines(evs ...incident.Evidence) []incident.Engine {
	var out []incident.Engine
	for _, e := range evs {
		if !slices.Contains(out, e.Engine) {
			out = append(out, e.Engine)
		}
	}
	return out
}

// finish orders the evidence in time, sets the schema and the windows.
func finish(inc incident.Incident) incident.Incident {
	inc.Schema = incident.Schema
	slices.SortStableFunc(inc.Evidence, func(a, b incident.Evidence) int { return cmp.Compare(a.Window.FromNS, b.Window.FromNS) })
	return inc
}

func fmtClock(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05") }

// incidentWorld builds the incidents (newest first, as the API lists
// them) and the fleet rows.
func incidentWorld(t testing.TB) ([]incident.Incident, []incident.HostRow) {
	t.Helper()
	w := loadWorld(t)
	incs := []incident.Incident{ds8Incident(t, w), tieIncident(t, w), absorbedIncident(t, w), uniformIncident(t, w), ds1024Incident(t, w), reliefIncident(t, w)}
	slices.SortStableFunc(incs, func(a, b incident.Incident) int { return cmp.Compare(b.Opened.WallNS, a.Opened.WallNS) })
	for i := range incs {
		incs[i].Related = incident.RelatedTo(&incs[i], incs, 3)
	}
	return incs, incident.Fleet(incs, 0, 0)
}

// ds8Incident: rank 2's data loading starves because another process
// takes its CPU; StageFrontier, Greyhound, SysOM-AI and KAIR agree.
func ds8Incident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "data-straggler-8", incNow.Add(-76*time.Second))
	fr := j.frame()
	cp, last, win, healthy, slow, sfOnset, sfProgress := fr.cp, fr.last, fr.win, fr.healthy, fr.slow, fr.onset, fr.samples
	h := j.rep.Headline
	on := j.span(cp.Step, cp.Step)
	host := j.host(h.Rank)
	r2 := j.rank(h.Rank)
	links := []incident.Target{}
	for r := 0; r < j.ranks; r++ {
		links = append(links, incident.LinkTarget(r, (r+1)%j.ranks))
	}

	sfLeader := j.leader(h, win, cp.Stages[0].DeltaMS)
	ghOnset := j.ev(incident.KindGreyhoundChange, "140", incident.SignalOnset, on,
		fmt.Sprintf("Iteration time rose %.0f%% at iteration %d (%.0f ms → %.0f ms); the change was verified.", 100*cp.Rel, cp.Step, cp.BeforeMS, cp.AfterMS), func(e *incident.Evidence) {
			e.Layer, e.Confidence, e.BeforeMS, e.AfterMS, e.Verified = incident.LayerCollective, incident.ConfidenceHigh, cp.BeforeMS, cp.AfterMS, true
			e.AtNS = on.ToNS + 800e6
			e.View = j.greyhoundView(win)
		})
	phase := func(step int64, to, text string) incident.Evidence {
		return j.ev(incident.KindGreyhoundPhase, to, incident.SignalState, j.span(step, step), text, func(e *incident.Evidence) {
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]string{"to": to})
		})
	}
	ghProfiling := phase(cp.Step+4, "profiling", "The collective analysis started comparing groups of the same collective.")
	ghCross := j.ev(incident.KindGreyhoundCrossGroup, "150", incident.SignalFinding, j.span(cp.Step+4, cp.Step+10),
		"Two groups that share ranks 2 and 3 run 1.64× and 1.38× slower than comparable groups.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2, j.rank(3)}
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCommunication, incident.ConfidenceLow
			e.Reason = "the group comparison narrows the slowdown to two ranks but cannot tell which"
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]any{"degraded_groups": []string{"tp-0001", "dp-0"}, "ratios": []float64{1.64, 1.38}})
		})
	ghValidating := phase(cp.Step+10, "validation", "The collective analysis asked ranks 2 and 3 to benchmark their GPUs and links at a step boundary.")
	ghValidation := j.ev(incident.KindGreyhoundValidation, "v-1", incident.SignalHealthy, j.span(cp.Step+16, cp.Step+17),
		"Validation v-1: every GPU ran its matrix multiply within 5% of the median and every link within 10%: the hardware is healthy.", func(e *incident.Evidence) {
			e.Against = links
			e.Layer, e.Category, e.Confidence = incident.LayerNetwork, incident.CategoryNetwork, incident.ConfidenceHigh
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]any{"plan": "v-1", "gemm_max_ratio": 1.04, "slow_links": 0})
		})
	ghLate := j.ev(incident.KindGreyhoundLate, "dp-0", incident.SignalFinding, j.span(cp.Step+17, last),
		"Rank 2 enters the data-parallel all-reduce last in 96 of 96 instances, 41.7 ms after the others on average.", func(e *incident.Evidence) {
			e.Targets, e.Subject, e.Exclusive = []incident.Target{r2}, "comm:dp-0", true
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCompute, incident.ConfidenceHigh
			e.Reason = "last into the collective in every instance, far beyond the other ranks' spread"
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]any{"comm": "dp-0", "instances": 96, "last": 96, "mean_late_ms": 41.7})
		})
	ghVerdictPhase := phase(cp.Step+18, "verdict", "The collective analysis concluded.")
	ghVerdict := j.ev(incident.KindGreyhoundVerdict, "v-1", incident.SignalFinding, j.span(cp.Step+18, cp.Step+18),
		"Rank 2 is late on the host side: its GPU and every link are healthy, so the delay comes before it enters the collective.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2}
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCompute, incident.ConfidenceHigh
			e.Reason = "the validation cleared the GPU and the links"
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]any{"kind": "late_rank", "ranks": []int{2}, "confidence": "high"})
		})
	syWin := j.span(cp.Step+20, last)
	sySlow := j.ev(incident.KindSysomSlowRank, "dp-0", incident.SignalFinding, syWin,
		"Rank 2 enters collectives 41.7 ms late on average (5.8 standard deviations above its peers).", func(e *incident.Evidence) {
			e.Targets, e.Subject, e.Exclusive = []incident.Target{r2}, "comm:dp-0", true
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCompute, incident.ConfidenceHigh
			e.View = j.sysomView(win)
			e.Detail = detail(map[string]any{"group": "dp-0", "rank": 2, "mean_late_ms": 41.7, "z": 5.8})
		})
	syWater := j.ev(incident.KindSysomWaterline, "hog", incident.SignalFinding, syWin,
		"30% of rank 2's CPU samples are another process (hog); the other ranks average 3.8%.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2}
			e.Layer, e.Category, e.Confidence = incident.LayerCPU, incident.CategoryOS, incident.ConfidenceHigh
			e.Reason = "2.65 standard deviations above the ranks' mean share"
			e.View = j.sysomView(win)
			e.Detail = detail(map[string]any{"func": "[other process] hog", "fraction": 0.3, "mean": 0.0375, "z": 2.65})
		})
	syCPU := j.ev(incident.KindSysomDiagnosis, "2-cpu", incident.SignalFinding, syWin,
		"Another process (hog) takes 30% of rank 2's CPU; its peer, rank 5, has none.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2}
			e.Layer, e.Category, e.Confidence = incident.LayerCPU, incident.CategoryOS, incident.ConfidenceHigh
			e.Reason = "the CPU profile differs from the healthy peer's in one place"
			e.View = j.diffView(win, 2, 5)
			e.Detail = detail(map[string]any{"layer": "cpu", "finding": "differs", "cause": "foreign_process", "peer": 5})
		})
	syOS := j.ev(incident.KindSysomDiagnosis, "2-os", incident.SignalFinding, syWin,
		"Rank 2's threads wait 15.5× longer for a CPU than rank 5's (run-queue wait 0.31 s per second).", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2}
			e.Layer, e.Category, e.Confidence = incident.LayerOS, incident.CategoryOS, incident.ConfidenceHigh
			e.View = j.sysomView(win)
			e.Detail = detail(map[string]any{"layer": "os", "finding": "differs", "cause": "run_queue", "ratio": 15.5})
		})
	kairWin := j.span(last+2, last+4)
	kair := j.ev(incident.KindKairCulprit, kairCapDS8, incident.SignalFinding, kairWin,
		"In 2 of 3 traced steps rank 2's aten::index_select runs abnormally long; ranks 0, 1 and 3 wait for it in the all-reduce.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{r2}
			e.Layer, e.Category, e.Confidence = incident.LayerOperator, incident.CategoryData, incident.ConfidenceHigh
			e.Reason = "the operator's duration is 14 robust deviations from its usual"
			e.View = j.kairView(kairCapDS8)
			e.Detail = detail(map[string]any{"capture": kairCapDS8, "culprit": 2, "victims": []int{0, 1, 3}, "op": "aten::index_select"})
		})

	evs := []incident.Evidence{sfOnset, sfProgress, sfLeader, ghOnset, ghProfiling, ghCross, ghValidating, ghValidation, ghLate,
		ghVerdictPhase, ghVerdict, sySlow, syWater, syCPU, syOS, kair}
	support := []incident.Evidence{sfLeader, ghLate, ghVerdict, kair, sySlow, syWater, syCPU, syOS}
	at := func(s int64, d time.Duration) int64 { return j.at(s) + int64(d) }
	inc := incident.Incident{
		ID: incDS8, Job: j.id, State: incident.StateOpen,
		Opened: j.point(cp.Step), DetectedNS: at(cp.Step, 900*time.Millisecond), Updated: incident.Point{WallNS: kair.AtNS, Step: last + 4},
		Onset: ids(sfOnset, ghOnset), HealthyMS: healthy, SlowMS: slow,
		Scope: incident.Scope{Ranks: []int{h.Rank}, Hosts: []string{host}},
		Cause: []string{r2.Key()}, Category: incident.CategoryOS, Confidence: incident.ConfidenceHigh,
		Headline: fmt.Sprintf("Rank %d on %s has slowed the whole job by %.0f%% since %s: another process takes 30%% of its CPU, so its data loading falls behind and the other ranks wait for it.",
			h.Rank, host, 100*(slow-healthy)/healthy, fmtClock(j.at(cp.Step))),
		Hypotheses: []incident.Hypothesis{{
			Target: r2, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryOS,
			Reason: "four engines name rank 2 and none contradicts: StageFrontier, Greyhound, SysOM-AI and KAIR",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfLeader, sfLeader.Text, sfLeader.Reason),
				{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: ids(ghLate, ghVerdict), Confidence: incident.ConfidenceHigh,
					Text: "Rank 2 is the last into the data-parallel all-reduce every time; its GPU and links are healthy.", Reason: "late in 96 of 96 instances; the validation cleared the hardware"},
				link(incident.LayerOperator, kair, kair.Text, kair.Reason),
				{Layer: incident.LayerCPU, Engine: incident.EngineSysom, Evidence: ids(syWater, syCPU), Confidence: incident.ConfidenceHigh,
					Text: syCPU.Text, Reason: syCPU.Reason},
				link(incident.LayerOS, syOS, syOS.Text, "15.5× the peer's run-queue wait"),
			},
			Support: ids(support...), Engines: engines(support...),
		}, {
			Target: j.rank(3), Confidence: incident.ConfidenceLow, Category: incident.CategoryCommunication,
			Reason:  "only the group comparison points at rank 3, and it cannot tell rank 3 from rank 2; every rank-level measurement names rank 2",
			Chain:   []incident.ChainLink{link(incident.LayerCollective, ghCross, ghCross.Text, ghCross.Reason)},
			Support: ids(ghCross), Against: ids(ghLate, sySlow, kair), Engines: engines(ghCross),
		}},
		Lost: j.lost(healthy, cp.Step, last, true),
		Recommendations: []incident.Recommendation{
			{Text: fmt.Sprintf("Find what runs on %s beside rank 2 (pidstat -t 1) and stop it, or pin it away from rank 2's CPUs.", host), For: r2.Key()},
			{Text: "Give each rank its own CPU set (taskset or the container's cpuset) so a stray process cannot take a rank's cores.", For: r2.Key()},
			{Text: fmt.Sprintf("%s was also the cause of an incident in job relief earlier today: check the host itself if this recurs.", host)},
		},
		Audit: []incident.Action{
			{Incident: incDS8, AtNS: at(cp.Step+1, 0), Kind: incident.RequestValidation, Ranks: []int{2, 3}, Result: "requested", Ref: "v-1",
				Text: "Asked ranks 2 and 3 to benchmark their GPUs and links at the next step boundary."},
			{Incident: incDS8, AtNS: at(cp.Step+17, 0), Kind: incident.RequestValidation, Ranks: []int{2, 3}, Result: "done", Ref: "v-1",
				Text: "Validation v-1 finished: every GPU and link healthy."},
			{Incident: incDS8, AtNS: at(cp.Step+18, 0), Kind: incident.RequestProfile, Ranks: []int{2, 5}, Result: "requested",
				Text: "Asked the node agents for a CPU profile of rank 2 and a healthy peer, rank 5."},
			{Incident: incDS8, AtNS: at(cp.Step+19, 0), Kind: incident.RequestCapture, Ranks: []int{0, 1, 2, 3}, Result: "requested", Ref: kairCapDS8,
				Text: "Asked ranks 0–3 for an operator trace of 3 steps."},
			{Incident: incDS8, AtNS: syWin.ToNS + 1e9, Kind: incident.RequestProfile, Ranks: []int{2, 5}, Result: "done",
				Text: "CPU profiles of ranks 2 and 5 arrived."},
			{Incident: incDS8, AtNS: kair.AtNS, Kind: incident.RequestCapture, Ranks: []int{0, 1, 2, 3}, Result: "done", Ref: kairCapDS8,
				Text: "Operator trace " + kairCapDS8 + " uploaded by all 4 ranks and analysed."},
		},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// tieIncident: ranks 1 and 3 both slow; Greyhound and SysOM-AI each name
// a different one as the rank the all-reduce waits for, so no cause is
// stated and both hypotheses stay.
func tieIncident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "tie", incNow.Add(-3*time.Minute))
	fr := j.frame()
	cp, last, win, healthy, slow, sfOnset, sfProgress := fr.cp, fr.last, fr.win, fr.healthy, fr.slow, fr.onset, fr.samples
	h := j.rep.Headline
	r1, r3 := j.rank(1), j.rank(3)
	on := j.span(cp.Step, cp.Step)
	sfTie := j.ev(incident.KindStageLeader, "80-data", incident.SignalFinding, win.During,
		"No single rank: ranks 1 and 3 tie for the last to finish data loading.", func(e *incident.Evidence) {
			e.Subject, e.Layer, e.Category, e.Confidence, e.Withheld = "stage:"+h.Stage, incident.LayerStage, incident.CategoryData, incident.ConfidenceWithheld, string(h.Withheld)
			e.Reason = "tie set {1, 3}: neither leads often enough to be named"
			e.View = j.reportView(win)
			e.Detail = detail(h)
		})
	ghOnset := j.ev(incident.KindGreyhoundChange, "80", incident.SignalOnset, on,
		fmt.Sprintf("Iteration time rose %.0f%% at iteration %d; the change was verified.", 100*cp.Rel, cp.Step), func(e *incident.Evidence) {
			e.Layer, e.Confidence, e.BeforeMS, e.AfterMS, e.Verified = incident.LayerCollective, incident.ConfidenceHigh, cp.BeforeMS, cp.AfterMS, true
			e.AtNS = on.ToNS + 700e6
			e.View = j.greyhoundView(win)
		})
	ghLate := j.ev(incident.KindGreyhoundLate, "dp-0", incident.SignalFinding, j.span(cp.Step+10, last),
		"Rank 3 enters the data-parallel all-reduce last in 31 of 48 instances, 58 ms after the others.", func(e *incident.Evidence) {
			e.Targets, e.Subject, e.Exclusive = []incident.Target{r3}, "comm:dp-0", true
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryData, incident.ConfidenceLow
			e.Reason = "last in 65% of the instances; rank 1 is last in most of the others"
			e.View = j.greyhoundView(win)
		})
	ghValidation := j.ev(incident.KindGreyhoundValidation, "v-1", incident.SignalHealthy, j.span(cp.Step+20, cp.Step+21),
		"Validation v-1: the GPUs of ranks 1 and 3 and every link run within 10% of the median.", func(e *incident.Evidence) {
			e.Against = []incident.Target{incident.LinkTarget(0, 1), incident.LinkTarget(2, 3)}
			e.Layer, e.Category, e.Confidence = incident.LayerNetwork, incident.CategoryNetwork, incident.ConfidenceHigh
			e.View = j.greyhoundView(win)
		})
	sySlow := j.ev(incident.KindSysomSlowRank, "dp-0", incident.SignalFinding, j.span(cp.Step+30, last),
		"Rank 1 enters collectives 6.1 ms late on average (2.1 standard deviations above its peers).", func(e *incident.Evidence) {
			e.Targets, e.Subject, e.Exclusive = []incident.Target{r1}, "comm:dp-0", true
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryData, incident.ConfidenceLow
			e.Reason = "just above the threshold, over 31 instances"
			e.View = j.sysomView(win)
		})
	kair := j.ev(incident.KindKairRank, kairCapTie, incident.SignalFinding, j.span(last-2, last),
		"The operator trace is incomplete: ranks 1 and 3 stand out together and the capture cannot tell them apart.", func(e *incident.Evidence) {
			e.Layer, e.Category, e.Confidence, e.Withheld = incident.LayerOperator, incident.CategoryData, incident.ConfidenceWithheld, "tie"
			e.Reason = "2 of 8 ranks uploaded only part of their trace"
			e.View = j.kairView(kairCapTie)
		})
	evs := []incident.Evidence{sfOnset, sfProgress, sfTie, ghOnset, ghLate, ghValidation, sySlow, kair}
	contradiction := "Greyhound names rank 3 as the last into the data-parallel all-reduce; SysOM-AI names rank 1 for the same collective."
	inc := incident.Incident{
		ID: incTie, Job: j.id, State: incident.StateOpen,
		Opened: j.point(cp.Step), DetectedNS: j.at(cp.Step) + 700e6, Updated: incident.Point{WallNS: kair.AtNS, Step: last},
		Onset: ids(sfOnset, ghOnset), HealthyMS: healthy, SlowMS: slow,
		Scope:    incident.Scope{Whole: true},
		Cause:    []string{},
		Category: incident.CategoryData, Confidence: incident.ConfidenceLow,
		Headline: fmt.Sprintf("The job has been %.0f%% slower since %s. Ranks 1 and 3 are suspects, but the engines disagree on which one the others wait for, so no cause is stated yet.",
			100*(slow-healthy)/healthy, fmtClock(j.at(cp.Step))),
		Hypotheses: []incident.Hypothesis{{
			Target: r3, Confidence: incident.ConfidenceLow, Category: incident.CategoryData,
			Reason: "Greyhound names rank 3, but SysOM-AI names rank 1 for the same collective",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfTie, sfTie.Text, sfTie.Reason),
				link(incident.LayerCollective, ghLate, ghLate.Text, ghLate.Reason),
			},
			Support: ids(sfTie, ghLate), Against: ids(sySlow), Engines: engines(sfTie, ghLate),
		}, {
			Target: r1, Confidence: incident.ConfidenceLow, Category: incident.CategoryData,
			Reason: "SysOM-AI names rank 1, but Greyhound names rank 3 for the same collective",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfTie, sfTie.Text, sfTie.Reason),
				link(incident.LayerCollective, sySlow, sySlow.Text, sySlow.Reason),
			},
			Support: ids(sfTie, sySlow), Against: ids(ghLate), Engines: engines(sfTie, sySlow),
		}},
		Contradictions: []string{contradiction},
		Lost:           j.lost(healthy, cp.Step, last, false),
		Recommendations: []incident.Recommendation{
			{Text: "Do not restart or move a rank yet: the engines disagree between ranks 1 and 3."},
			{Text: "Both suspects wait on data loading: compare the data-loader workers and dataset shards of ranks 1 and 3."},
		},
		Waiting: []incident.Request{
			{Kind: incident.RequestCapture, Ranks: []int{1, 3}, Reason: "a complete operator trace of ranks 1 and 3 shows which of them the all-reduce waits for", Asked: true},
			{Kind: incident.RequestProfile, Ranks: []int{3, 0}, Reason: "a CPU profile of rank 3 beside a healthy peer (rank 0): SysOM-AI has profiled only rank 1", Asked: false},
		},
		Audit: []incident.Action{
			{Incident: incTie, AtNS: j.at(cp.Step + 2), Kind: incident.RequestValidation, Ranks: []int{1, 3}, Result: "requested", Ref: "v-1",
				Text: "Asked ranks 1 and 3 to benchmark their GPUs and links."},
			{Incident: incTie, AtNS: j.at(cp.Step + 21), Kind: incident.RequestValidation, Ranks: []int{1, 3}, Result: "done", Ref: "v-1",
				Text: "Validation v-1 finished: GPUs and links healthy."},
			{Incident: incTie, AtNS: j.at(last - 3), Kind: incident.RequestCapture, Ranks: []int{1, 3}, Result: "started", Ref: kairCapTie,
				Text: "Asked ranks 1 and 3 for an operator trace; 2 of 8 ranks have uploaded part of theirs."},
			{Incident: incTie, AtNS: j.at(last - 1), Kind: incident.RequestProfile, Ranks: []int{3, 0}, Result: "skipped",
				Text: "Skipped a CPU profile of ranks 3 and 0: the per-job budget of one profile window per 10 minutes is spent."},
		},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// reliefIncident: rank 5's data loading was slow from step 40 until the
// relief at step 120; resolved after the hold-down.
func reliefIncident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "relief", incNow.Add(-5*time.Hour-20*time.Minute))
	var onset, relief analysis.ChangePoint
	for _, c := range j.rep.Timeline.ChangePoints {
		if c.Kind == analysis.Onset {
			onset = c
		} else {
			relief = c
		}
	}
	last := j.steps[len(j.steps)-1]
	win := incident.Windows{Before: j.span(3, onset.Step-1), During: j.span(onset.Step, relief.Step-1), After: j.span(relief.Step, last)}
	healthy, slow := j.median(3, onset.Step-1), j.median(onset.Step, relief.Step-1)
	rep := j.windowReport(t, w, onset.Step, relief.Step-1, 3, onset.Step-1)
	h := rep.Headline
	if h.Rank < 0 {
		t.Fatalf("relief: no straggler named over steps %d–%d: %s", onset.Step, relief.Step-1, h.Text)
	}
	host := j.host(h.Rank)
	rk := j.rank(h.Rank)
	sfOnset := j.stageChange(onset, win, j.reportView(win))
	sfRelief := j.stageChange(relief, win, j.path("report", url.Values{"from": {ns(relief.Step)}, "to": {ns(last)}, "ref_from": {ns(onset.Step)}, "ref_to": {ns(relief.Step - 1)}}))
	sfProgress := j.progress(last, win)
	sfLeader := j.leader(h, win, 0)
	evs := []incident.Evidence{sfOnset, sfLeader, sfRelief, sfProgress}
	resolved := j.point(relief.Step)
	inc := incident.Incident{
		ID: incRelief, Job: j.id, State: incident.StateResolved,
		Opened: j.point(onset.Step), DetectedNS: j.at(onset.Step+6) + 1e9, Updated: incident.Point{WallNS: j.at(last), Step: last},
		Resolved: &resolved, ResolvedBy: incident.ResolvedRelief,
		Onset: ids(sfOnset), Relief: ids(sfRelief), HealthyMS: healthy, SlowMS: slow,
		Scope: incident.Scope{Ranks: []int{h.Rank}, Hosts: []string{host}},
		Cause: []string{rk.Key()}, Category: incident.CategoryData, Confidence: incident.ConfidenceHigh,
		Headline: fmt.Sprintf("Rank %d on %s slowed the job by %.0f%% from step %d to step %d (its data loading fell behind); the job has been healthy since %s.",
			h.Rank, host, 100*(slow-healthy)/healthy, onset.Step, relief.Step, fmtClock(resolved.WallNS)),
		Hypotheses: []incident.Hypothesis{{
			Target: rk, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryData,
			Reason:  "StageFrontier names it with high confidence and no other engine contradicts",
			Chain:   []incident.ChainLink{link(incident.LayerStage, sfLeader, sfLeader.Text, sfLeader.Reason)},
			Support: ids(sfLeader), Engines: engines(sfLeader),
		}},
		Lost: j.lost(healthy, onset.Step, relief.Step-1, false),
		Recommendations: []incident.Recommendation{
			{Text: fmt.Sprintf("Nothing to do now. If it recurs, look at rank %d's data-loader workers and storage reads.", h.Rank), For: rk.Key()},
		},
		Audit: []incident.Action{
			{Incident: incRelief, AtNS: j.at(onset.Step + 7), Kind: incident.RequestValidation, Result: "skipped",
				Text: "Skipped a validation: the job's clients do not run validation benchmarks."},
			{Incident: incRelief, AtNS: j.at(onset.Step + 8), Kind: incident.RequestCapture, Ranks: []int{h.Rank, 0}, Result: "requested", Ref: "c0d0e0f0a0b01",
				Text: fmt.Sprintf("Asked ranks %d and 0 for an operator trace of 3 steps.", h.Rank)},
			{Incident: incRelief, AtNS: j.at(relief.Step + 2), Kind: incident.RequestCapture, Ranks: []int{h.Rank, 0}, Result: "failed", Ref: "c0d0e0f0a0b01",
				Text: "The operator trace expired: no rank uploaded before its deadline."},
		},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// uniformIncident: every rank's backward pass slowed alike.
func uniformIncident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "uniform-8", incNow.Add(-10*time.Minute))
	fr := j.frame()
	cp, last, win, healthy, slow, sfOnset, sfProgress := fr.cp, fr.last, fr.win, fr.healthy, fr.slow, fr.onset, fr.samples
	h := j.rep.Headline
	all := incident.JobTarget()
	sfAlike := j.ev(incident.KindStageLeader, "80-backward", incident.SignalFinding, win.During,
		fmt.Sprintf("No rank stands out: every rank's own backward pass rose alike, by %.0f ms per step.", cp.Stages[0].DeltaMS), func(e *incident.Evidence) {
			e.Targets, e.Subject = []incident.Target{all}, "stage:"+h.Stage
			e.Layer, e.Category, e.Confidence, e.Withheld = incident.LayerStage, incident.CategoryUniform, incident.ConfidenceHigh, string(h.Withheld)
			e.Reason = "the typical rank's time in the stage rose as much as the slowest rank's"
			e.View = j.reportView(win)
			e.Detail = detail(h)
		})
	syTemporal := j.ev(incident.KindSysomTemporal, "80", incident.SignalFinding, j.span(cp.Step+20, last),
		"Compared with the job's own earlier steady window, every rank now spends 31% of its CPU time waiting for the GPU in cudaStreamSynchronize (it was 12%): the GPUs take longer for the same work.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{all}
			e.Layer, e.Category, e.Confidence = incident.LayerGPU, incident.CategoryUniform, incident.ConfidenceHigh
			e.Reason = "the same hot path grew on all 8 ranks against the job's own baseline"
			e.View = j.sysomView(win)
			e.Detail = detail(map[string]any{"func": "cudaStreamSynchronize", "before": 0.12, "after": 0.31, "ranks": 8})
		})
	evs := []incident.Evidence{sfOnset, sfProgress, sfAlike, syTemporal}
	inc := incident.Incident{
		ID: incUniform, Job: j.id, State: incident.StateOpen,
		Opened: j.point(cp.Step), DetectedNS: j.at(cp.Step+5) + 1e9, Updated: incident.Point{WallNS: syTemporal.AtNS, Step: last},
		Onset: ids(sfOnset), HealthyMS: healthy, SlowMS: slow,
		Scope: incident.Scope{Whole: true},
		Cause: []string{all.Key()}, Category: incident.CategoryUniform, Confidence: incident.ConfidenceHigh,
		Headline: fmt.Sprintf("Every rank slowed alike by %.0f%% since %s: the GPUs take longer for the same backward pass. No single rank or host is behind it.",
			100*(slow-healthy)/healthy, fmtClock(j.at(cp.Step))),
		Hypotheses: []incident.Hypothesis{{
			Target: all, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryUniform,
			Reason: "StageFrontier finds every rank slowed alike and SysOM-AI's comparison with the job's own earlier window finds the same change on every rank",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfAlike, sfAlike.Text, sfAlike.Reason),
				link(incident.LayerGPU, syTemporal, syTemporal.Text, syTemporal.Reason),
			},
			Support: ids(sfAlike, syTemporal), Engines: engines(sfAlike, syTemporal),
		}},
		Lost: j.lost(healthy, cp.Step, last, false),
		Recommendations: []incident.Recommendation{
			{Text: "Check the GPUs' clocks and temperatures on every host (nvidia-smi -q -d CLOCK,TEMPERATURE,PERFORMANCE): a slowdown on every rank alike is most often throttling.", For: all.Key()},
			{Text: "Compare with the last change before the slowdown began: a driver, CUDA or library upgrade, or a larger batch or sequence length.", For: all.Key()},
		},
		Waiting: []incident.Request{{Kind: incident.RequestValidation, Ranks: []int{0, 1, 2, 3, 4, 5, 6, 7},
			Reason: "a GPU benchmark on every rank against its earlier result tells throttling from heavier work", Asked: false}},
		Audit: []incident.Action{{Incident: incUniform, AtNS: j.at(cp.Step + 6), Kind: incident.RequestProfile, Ranks: []int{0, 4}, Result: "done",
			Text: "Asked for CPU profiles of ranks 0 and 4 to compare with the job's earlier window."}},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// absorbedIncident: the fusion class of issue 17. StageFrontier rightly
// names no rank (the delay hides inside the backward pass: every rank
// leaves it together); Greyhound finds rank 4 last into the all-reduce
// and its validation the link 4→5 slow, with rank 4's GPU healthy.
func absorbedIncident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "absorbed-backward", incNow.Add(-4*time.Minute))
	fr := j.frame()
	cp, last, win, healthy, slow, sfOnset, sfProgress := fr.cp, fr.last, fr.win, fr.healthy, fr.slow, fr.onset, fr.samples
	h := j.rep.Headline
	// Both ends on one host: the link is that machine's (NVLink or PCIe).
	lk := incident.LinkTarget(absorbedRank, absorbedRank+1)
	lk.Host = j.host(absorbedRank)
	r4 := j.rank(absorbedRank)
	sfAbsorbed := j.ev(incident.KindStageLeader, "80-backward", incident.SignalFinding, win.During,
		"No rank named in the backward pass: every rank leaves it together, because the all-reduce inside it waits for the slowest.", func(e *incident.Evidence) {
			e.Subject, e.Layer, e.Confidence, e.Withheld = "stage:"+h.Stage, incident.LayerStage, incident.ConfidenceWithheld, string(h.Withheld)
			e.Reason = "the delay is absorbed inside the stage; collective timings are needed to place it"
			e.View = j.reportView(win)
			e.Detail = detail(h)
		})
	ghLate := j.ev(incident.KindGreyhoundLate, "world", incident.SignalFinding, j.span(cp.Step+8, last),
		"Rank 4 is the last into the backward all-reduce in every instance, 118 ms after the others.", func(e *incident.Evidence) {
			e.Targets, e.Subject, e.Exclusive = []incident.Target{r4}, "comm:world/allreduce", true
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCommunication, incident.ConfidenceHigh
			e.Reason = "last in 40 of 40 instances"
			e.View = j.greyhoundView(win)
		})
	ghValidation := j.ev(incident.KindGreyhoundValidation, "v-1", incident.SignalFinding, j.span(cp.Step+20, cp.Step+21),
		"Validation v-1: transfers over the link from rank 4 to rank 5 took 2.6× the median link time; every GPU ran within 10% of the median.", func(e *incident.Evidence) {
			e.Targets, e.Against = []incident.Target{lk}, []incident.Target{r4}
			e.Layer, e.Category, e.Confidence = incident.LayerNetwork, incident.CategoryNetwork, incident.ConfidenceHigh
			e.View = j.greyhoundView(win)
			e.Detail = detail(map[string]any{"plan": "v-1", "link": []int{4, 5}, "ratio": 2.6})
		})
	ghVerdict := j.ev(incident.KindGreyhoundVerdict, "v-1", incident.SignalFinding, j.span(cp.Step+22, cp.Step+22),
		"The link from rank 4 to rank 5 is slow.", func(e *incident.Evidence) {
			e.Targets = []incident.Target{lk}
			e.Layer, e.Category, e.Confidence = incident.LayerNetwork, incident.CategoryNetwork, incident.ConfidenceHigh
			e.View = j.greyhoundView(win)
		})
	evs := []incident.Evidence{sfOnset, sfProgress, sfAbsorbed, ghLate, ghValidation, ghVerdict}
	support := []incident.Evidence{sfAbsorbed, ghLate, ghValidation, ghVerdict}
	inc := incident.Incident{
		ID: incAbsorbed, Job: j.id, State: incident.StateOpen,
		Opened: j.point(cp.Step), DetectedNS: j.at(cp.Step) + 900e6, Updated: incident.Point{WallNS: ghVerdict.AtNS, Step: cp.Step + 22},
		Onset: ids(sfOnset), HealthyMS: healthy, SlowMS: slow,
		Scope: incident.Scope{Ranks: []int{absorbedRank, absorbedRank + 1}, Links: []incident.Target{lk}, Hosts: []string{j.host(absorbedRank)}},
		Cause: []string{lk.Key()}, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
		Headline: fmt.Sprintf("The link from rank 4 to rank 5 has slowed the job by %.0f%% since %s: rank 4 is the last into every backward all-reduce, and a benchmark found that link 2.6× slower than the others.",
			100*(slow-healthy)/healthy, fmtClock(j.at(cp.Step))),
		Hypotheses: []incident.Hypothesis{{
			Target: lk, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryNetwork,
			Reason: "Greyhound measured the link directly and no engine contradicts; StageFrontier's silence is explained (the delay is inside the backward pass)",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfAbsorbed, sfAbsorbed.Text, sfAbsorbed.Reason),
				link(incident.LayerCollective, ghLate, ghLate.Text, ghLate.Reason),
				{Layer: incident.LayerNetwork, Engine: incident.EngineGreyhound, Evidence: ids(ghValidation, ghVerdict), Confidence: incident.ConfidenceHigh,
					Text: ghValidation.Text, Reason: "a direct benchmark of every link at a step boundary"},
			},
			Support: ids(support...), Engines: engines(support...),
		}, {
			Target: r4, Confidence: incident.ConfidenceLow, Category: incident.CategoryCompute,
			Reason:  "rank 4 is late into the all-reduce, but the validation found its GPU normal: its lateness follows from the slow link",
			Chain:   []incident.ChainLink{link(incident.LayerCollective, ghLate, ghLate.Text, ghLate.Reason)},
			Support: ids(ghLate), Against: ids(ghValidation), Engines: engines(ghLate),
		}},
		Lost: j.lost(healthy, cp.Step, last, false),
		Recommendations: []incident.Recommendation{
			{Text: "Check the link between ranks 4 and 5 on " + j.host(absorbedRank) + " (nvidia-smi nvlink -s, or the NIC's error and pause counters).", For: lk.Key()},
			{Text: "If the job must keep running, restart it with ranks 4 and 5 on other GPUs.", For: lk.Key()},
		},
		Audit: []incident.Action{
			{Incident: incAbsorbed, AtNS: j.at(cp.Step + 2), Kind: incident.RequestValidation, Ranks: []int{4, 5}, Result: "requested", Ref: "v-1",
				Text: "Asked ranks 4 and 5 to benchmark their GPUs and links."},
			{Incident: incAbsorbed, AtNS: j.at(cp.Step + 21), Kind: incident.RequestValidation, Ranks: []int{4, 5}, Result: "done", Ref: "v-1",
				Text: "Validation v-1 finished: the link from rank 4 to rank 5 is slow."},
		},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// ds1024Incident: one rank of 1,024 lags; StageFrontier names it and a
// Greyhound benchmark finds its GPU slow.
func ds1024Incident(t testing.TB, w *world) incident.Incident {
	j := newIncJob(t, w, "data-straggler-1024", incNow.Add(-14*time.Minute))
	fr := j.frame()
	cp, last, win, healthy, slow, sfOnset, sfProgress := fr.cp, fr.last, fr.win, fr.healthy, fr.slow, fr.onset, fr.samples
	h := j.rep.Headline
	host := j.host(h.Rank)
	rk := j.rank(h.Rank)
	sfLeader := j.leader(h, win, cp.Stages[0].DeltaMS)
	ghValidation := j.ev(incident.KindGreyhoundValidation, "v-1", incident.SignalFinding, j.span(cp.Step+12, cp.Step+13),
		fmt.Sprintf("Validation v-1: rank %d's matrix multiply took 1.9× the median; the links of its group ran within 10%% of the median.", h.Rank), func(e *incident.Evidence) {
			e.Targets = []incident.Target{rk}
			e.Layer, e.Category, e.Confidence = incident.LayerGPU, incident.CategoryCompute, incident.ConfidenceHigh
			e.Reason = "a direct benchmark of every GPU at a step boundary"
			e.View = j.greyhoundView(win)
		})
	evs := []incident.Evidence{sfOnset, sfProgress, sfLeader, ghValidation}
	inc := incident.Incident{
		ID: incDS1024, Job: j.id, State: incident.StateOpen,
		Opened: j.point(cp.Step), DetectedNS: j.at(cp.Step+3) + 1e9, Updated: incident.Point{WallNS: ghValidation.AtNS, Step: cp.Step + 13},
		Onset: ids(sfOnset), HealthyMS: healthy, SlowMS: slow,
		Scope: incident.Scope{Ranks: []int{h.Rank}, Hosts: []string{host}},
		Cause: []string{rk.Key()}, Category: incident.CategoryCompute, Confidence: incident.ConfidenceHigh,
		Headline: fmt.Sprintf("Rank %d on %s has slowed all %d ranks by %.0f%% since %s: it finishes each step's data loading last, and a benchmark found its GPU 1.9× slower than the others.",
			h.Rank, host, j.ranks, 100*(slow-healthy)/healthy, fmtClock(j.at(cp.Step))),
		Hypotheses: []incident.Hypothesis{{
			Target: rk, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryCompute,
			Reason: "StageFrontier and Greyhound name it independently and no engine contradicts",
			Chain: []incident.ChainLink{
				link(incident.LayerStage, sfLeader, sfLeader.Text, sfLeader.Reason),
				link(incident.LayerGPU, ghValidation, ghValidation.Text, ghValidation.Reason),
			},
			Support: ids(sfLeader, ghValidation), Engines: engines(sfLeader, ghValidation),
		}},
		Lost: j.lost(healthy, cp.Step, last, false),
		Recommendations: []incident.Recommendation{
			{Text: fmt.Sprintf("Check the GPU of rank %d on %s (nvidia-smi -q: clocks, temperature, ECC and retired pages); drain the host if it is degraded.", h.Rank, host), For: rk.Key()},
			{Text: fmt.Sprintf("Every step of all %d ranks waits for this one: restarting without %s recovers the job.", j.ranks, host), For: rk.Key()},
		},
		Audit: []incident.Action{
			{Incident: incDS1024, AtNS: j.at(cp.Step + 4), Kind: incident.RequestValidation, Ranks: []int{h.Rank, h.Rank - 1}, Result: "requested", Ref: "v-1",
				Text: fmt.Sprintf("Asked ranks %d and %d to benchmark their GPUs and links.", h.Rank, h.Rank-1)},
			{Incident: incDS1024, AtNS: j.at(cp.Step + 13), Kind: incident.RequestValidation, Ranks: []int{h.Rank, h.Rank - 1}, Result: "done", Ref: "v-1",
				Text: fmt.Sprintf("Validation v-1 finished: rank %d's GPU is slow.", h.Rank)},
		},
		Windows:  win,
		Evidence: evs,
	}
	return finish(inc)
}

// incidentFixtureFiles renders testdata/incidents/: <id>.json per
// incident and hosts.json.
func incidentFixtureFiles(t testing.TB) map[string][]byte {
	t.Helper()
	incs, hosts := incidentWorld(t)
	out := map[string][]byte{}
	put := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		out["incidents/"+name] = append(b, '\n')
	}
	for _, inc := range incs {
		put(inc.ID+".json", inc)
	}
	put("hosts.json", map[string]any{"hosts": hosts})
	return out
}

func TestIncidentFixtures(t *testing.T) {
	syncGolden(t, "incidents/*.json", incidentFixtureFiles(t), nil, "incident scenario", "TestIncidentFixtures", ": internal/incident or a scenario changed")
}

// Each incident fixture shows what it is built for, and refers only to
// evidence it carries, or the page tests built on it test nothing.
func TestIncidentScenarios(t *testing.T) {
	incs, hosts := incidentWorld(t)
	by := map[string]incident.Incident{}
	for _, inc := range incs {
		by[inc.ID] = inc
		have := map[string]bool{}
		for _, e := range inc.Evidence {
			if have[e.ID] {
				t.Errorf("%s: evidence %s twice", inc.ID, e.ID)
			}
			have[e.ID] = true
			if e.View == "" || !strings.HasPrefix(e.View, "/api/v1/jobs/"+inc.Job+"/") {
				t.Errorf("%s: evidence %s has no view link on its job: %q", inc.ID, e.ID, e.View)
			}
		}
		refs := slices.Concat(inc.Onset, inc.Relief)
		for _, h := range inc.Hypotheses {
			refs = slices.Concat(refs, h.Support, h.Against)
			for _, l := range h.Chain {
				refs = slices.Concat(refs, l.Evidence)
			}
		}
		for _, id := range refs {
			if !have[id] {
				t.Errorf("%s refers to evidence %s it does not carry", inc.ID, id)
			}
		}
		if inc.Windows.Before.ToNS >= inc.Windows.During.FromNS || inc.Opened.WallNS < inc.Windows.During.FromNS || inc.Opened.WallNS > incNow.UnixNano() {
			t.Errorf("%s: windows %+v and opening %+v out of order", inc.ID, inc.Windows, inc.Opened)
		}
		if !(inc.Lost.Seconds > 0 && inc.SlowMS > inc.HealthyMS) {
			t.Errorf("%s: lost %+v, healthy %v slow %v", inc.ID, inc.Lost, inc.HealthyMS, inc.SlowMS)
		}
	}
	stated := func(id string) []incident.Hypothesis {
		var out []incident.Hypothesis
		for _, h := range by[id].Hypotheses {
			if h.Stated {
				out = append(out, h)
			}
		}
		return out
	}
	if s := stated(incDS8); len(s) != 1 || s[0].Target.Key() != "rank:2" || s[0].Target.Host != "node-000" || len(s[0].Engines) != 4 || len(s[0].Chain) != 5 {
		t.Errorf("%s: want rank 2 on node-000 stated by 4 engines over 5 layers, got %+v", incDS8, s)
	}
	if tie := by[incTie]; len(stated(incTie)) != 0 || len(tie.Cause) != 0 || len(tie.Hypotheses) != 2 || len(tie.Contradictions) == 0 {
		t.Errorf("%s: want no cause, two hypotheses and a contradiction, got %+v", incTie, tie.Hypotheses)
	}
	if r := by[incRelief]; r.State != incident.StateResolved || r.Resolved == nil || len(r.Relief) != 1 || r.Windows.After.FromStep != 120 {
		t.Errorf("%s: want resolved at the relief, got %s %+v", incRelief, r.State, r.Resolved)
	}
	if s := stated(incUniform); len(s) != 1 || s[0].Target.Kind != incident.TargetJob || by[incUniform].Category != incident.CategoryUniform {
		t.Errorf("%s: want the whole job stated as a uniform slowdown, got %+v", incUniform, s)
	}
	if s := stated(incAbsorbed); len(s) != 1 || s[0].Target.Key() != "link:4-5" || s[0].Chain[0].Confidence != incident.ConfidenceWithheld {
		t.Errorf("%s: want the link stated with StageFrontier's withheld stage on top, got %+v", incAbsorbed, s)
	}
	if len(hosts) != 2 || hosts[0].Target != "host:node-000" || hosts[0].Incidents != 3 || hosts[1].Target != "host:node-080" || len(by[incDS8].Related) != 2 {
		t.Errorf("fleet rows %+v, related %+v", hosts, by[incDS8].Related)
	}
	for _, inc := range incs {
		if err := inc.Check(); err != nil {
			t.Error(err)
		}
	}
}
