package render

import (
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// The incident fixtures: realistic incidents as the fusion publishes them
// (internal/incident), one per situation the text must read well in. Their
// JSON is written to testdata/incidents/ by the golden test, and the CLI's
// and the demo's tests serve and grade those files.

// fixtureNow is the reader's clock of the golden files.
var fixtureNow = time.Date(2026, 3, 10, 14, 20, 0, 0, time.UTC)

func at(h, m, s int) int64 { return time.Date(2026, 3, 10, h, m, s, 0, time.UTC).UnixNano() }

func yesterday(h, m, s int) int64 { return time.Date(2026, 3, 9, h, m, s, 0, time.UTC).UnixNano() }

func fspan(fromStep, toStep, fromNS, toNS int64) incident.Span {
	return incident.Span{FromStep: fromStep, ToStep: toStep, FromNS: fromNS, ToNS: toNS}
}

func rankRange(lo, hi int) []int {
	var rs []int
	for r := lo; r <= hi; r++ {
		rs = append(rs, r)
	}
	return rs
}

func progress(job string, n int, from, to int64, fromNS, toNS int64, ms float64) incident.Evidence {
	return incident.Evidence{ID: "sf/progress/0", Kind: incident.KindProgress, Engine: incident.EngineStageFrontier, Job: job,
		AtNS: toNS, Window: fspan(from, to, fromNS, toNS), Signal: incident.SignalProgress, Ranks: n,
		Samples: []incident.Sample{{Step: from, WallNS: fromNS, MS: ms}, {Step: to, WallNS: toNS, MS: ms}},
		Text:    "step times of the job"}
}

// fixtureOpen: a data-loader stall on one rank, stated by two engines that
// agree, with a CPU profile below them; a capture is still outstanding.
func fixtureOpen() incident.Incident {
	const job = "gpt-ft-7b"
	r5 := incident.RankTarget(5, "gpu-node-02")
	during := fspan(1210, 3276, at(14, 1, 37), at(14, 19, 58))
	ev := []incident.Evidence{
		{ID: "sf/cp/0/1210", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 1, 49),
			Window: fspan(1210, 1210, at(14, 1, 37), at(14, 1, 37)), Signal: incident.SignalOnset, BeforeMS: 412, AfterMS: 534, Verified: true, Ranks: 8,
			Text: "the step time rose from 412 to 534 ms at step 1,210",
			View: "/api/v1/jobs/gpt-ft-7b/report?from=1210&to=3276&ref_from=1150&ref_to=1209"},
		{ID: "gh/cp/0/1209", Kind: incident.KindGreyhoundChange, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 1, 51),
			Window: fspan(1209, 1209, at(14, 1, 37), at(14, 1, 37)), Signal: incident.SignalOnset, BeforeMS: 411, AfterMS: 531, Verified: true, Ranks: 8,
			Text: "the iteration time (from the collective calls) rose from 411 to 531 ms at iteration 1,209",
			View: "/api/v1/jobs/gpt-ft-7b/greyhound?incident=inc-7d1c0a"},
		{ID: "sf/lead/0/1210", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 1, 49),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{r5}, Subject: "stage:data.next_wait", Exclusive: true,
			Layer: incident.LayerStage, Category: incident.CategoryData, Confidence: incident.ConfidenceHigh,
			Text:   "rank 5 is the last to finish data.next_wait on 40 of 40 steps where the stage costs time",
			Reason: "no other rank is ever last there; 4 of 4 sub-windows agree",
			View:   "/api/v1/jobs/gpt-ft-7b/report?from=1210&to=3276&ref_from=1150&ref_to=1209"},
		{ID: "gh/late/0/1209", Kind: incident.KindGreyhoundLate, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 1, 51),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{r5}, Subject: "comm:pg0-world/allreduce", Exclusive: true,
			Layer: incident.LayerCollective, Confidence: incident.ConfidenceHigh,
			Text: "rank 5 enters AllReduce on pg0-world last on 20 of 20 calls since the onset, a median 118 ms after the next rank; the others wait 116 ms per step for it",
			View: "/api/v1/jobs/gpt-ft-7b/greyhound?incident=inc-7d1c0a"},
		{ID: "gh/val/v-17", Kind: incident.KindGreyhoundValidation, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 1, 58),
			Window: fspan(1236, 1236, at(14, 1, 50), at(14, 1, 58)), Signal: incident.SignalHealthy,
			Against: []incident.Target{incident.LinkTarget(4, 5), incident.LinkTarget(5, 6)}, Layer: incident.LayerNetwork, Confidence: incident.ConfidenceHigh,
			Text: "validation v-17: every rank's matrix-multiply benchmark within 4% of the median, all 8 links within 6%",
			View: "/api/v1/jobs/gpt-ft-7b/greyhound?incident=inc-7d1c0a"},
		{ID: "sysom/diag/0/5", Kind: incident.KindSysomDiagnosis, Engine: incident.EngineSysom, Job: job, AtNS: at(14, 2, 45),
			Window: fspan(1251, 1307, at(14, 2, 11), at(14, 2, 41)), Signal: incident.SignalFinding, Targets: []incident.Target{r5},
			Layer: incident.LayerCPU, Category: incident.CategoryData, Confidence: incident.ConfidenceLow,
			Text:   "rank 5 spends 58% of its CPU samples waiting on its DataLoader queue (queue.get in _next_data), rank 1 6%",
			Reason: "one 30 s profile window",
			View:   "/api/v1/jobs/gpt-ft-7b/sysom?from=14:02:11&to=14:02:41&peer=1"},
		progress(job, 8, 1150, 3276, at(14, 1, 12), at(14, 19, 58), 534),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-7d1c0a", Job: job, State: incident.StateOpen,
		Opened: incident.Point{WallNS: at(14, 1, 37), Step: 1210}, DetectedNS: at(14, 1, 49), Updated: incident.Point{WallNS: at(14, 19, 58), Step: 3276},
		Onset: []string{"sf/cp/0/1210", "gh/cp/0/1209"}, HealthyMS: 412, SlowMS: 534,
		Scope: incident.Scope{Ranks: []int{5}, Hosts: []string{"gpu-node-02"}},
		Cause: []string{"rank:5"}, Category: incident.CategoryData, Confidence: incident.ConfidenceHigh,
		Headline: "Rank 5 on gpu-node-02 has been slow to load its data since 14:01:37 UTC: the other 7 ranks wait for it at every gradient all-reduce, and each step takes 534 ms instead of 412 ms (+30%).",
		Hypotheses: []incident.Hypothesis{{
			Target: r5, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryData,
			Reason: "StageFrontier and Greyhound name rank 5 independently, and no engine contradicts them",
			Chain: []incident.ChainLink{
				{Layer: incident.LayerCPU, Engine: incident.EngineSysom, Evidence: []string{"sysom/diag/0/5"}, Confidence: incident.ConfidenceLow, Reason: "one 30 s profile window",
					Text: "rank 5's main thread waits on its DataLoader queue for 58% of its CPU samples (healthy rank 1: 6%)"},
				{Layer: incident.LayerStage, Engine: incident.EngineStageFrontier, Evidence: []string{"sf/cp/0/1210", "sf/lead/0/1210"}, Confidence: incident.ConfidenceHigh,
					Text: "the data-loading stage takes 122 ms more per step, and rank 5 is the last to finish it on 40 of 40 steps"},
				{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/late/0/1209", "gh/val/v-17"}, Confidence: incident.ConfidenceHigh,
					Text: "rank 5 enters the gradient all-reduce last, 118 ms after the next rank, on 20 of 20 calls; its compute and links benchmark normal"},
			},
			Support: []string{"sf/cp/0/1210", "sf/lead/0/1210", "gh/late/0/1209", "gh/val/v-17", "sysom/diag/0/5"},
			Engines: []incident.Engine{incident.EngineStageFrontier, incident.EngineGreyhound, incident.EngineSysom},
		}},
		Lost: incident.Lost{Seconds: 252, RankSeconds: 2016, Steps: 2066},
		Recommendations: []incident.Recommendation{
			{Text: "Look at rank 5's input pipeline on gpu-node-02: its DataLoader workers (alive? how many?), the storage or network filesystem it reads from, and other processes competing for its CPU.", For: "rank:5"},
			{Text: "If gpu-node-02 keeps showing up (it did in another job, above), drain it and restart the job on a spare node; otherwise raise num_workers or prefetch_factor for that rank's loader.", For: "rank:5"},
		},
		Waiting: []incident.Request{{Kind: incident.RequestCapture, Ranks: []int{1, 5}, Reason: "operator timings show what rank 5 does while the others wait", Asked: true}},
		Audit: []incident.Action{
			{Incident: "inc-7d1c0a", AtNS: at(14, 1, 50), Kind: incident.RequestCapture, Ranks: []int{5}, Result: "skipped", Text: "a capture of this job ran 4 min ago (cool-down 10 min)"},
			{Incident: "inc-7d1c0a", AtNS: at(14, 1, 50), Kind: incident.RequestValidation, Ranks: rankRange(0, 7), Result: "requested", Ref: "v-17", Text: "benchmark compute per rank and every link, to tell a slow rank from a slow link"},
			{Incident: "inc-7d1c0a", AtNS: at(14, 1, 58), Kind: incident.RequestValidation, Ranks: rankRange(0, 7), Result: "done", Ref: "v-17", Text: "every rank's compute and all 8 links measured normal"},
			{Incident: "inc-7d1c0a", AtNS: at(14, 2, 11), Kind: incident.RequestProfile, Ranks: []int{1, 5}, Result: "started", Ref: "window 14:02:11+30s", Text: "CPU profile of suspect rank 5 and healthy rank 1"},
			{Incident: "inc-7d1c0a", AtNS: at(14, 2, 45), Kind: incident.RequestProfile, Ranks: []int{1, 5}, Result: "done", Ref: "window 14:02:11+30s"},
			{Incident: "inc-7d1c0a", AtNS: at(14, 19, 41), Kind: incident.RequestCapture, Ranks: []int{1, 5}, Result: "requested", Ref: "cap-0043", Text: "5 steps of torch.profiler on rank 5 and healthy rank 1"},
		},
		Windows:  incident.Windows{Before: fspan(1150, 1209, at(14, 1, 12), at(14, 1, 37)), During: during},
		Evidence: ev,
		Related: []incident.Related{{Incident: "inc-51aa90", Job: "bert-large-eval", Target: "host:gpu-node-02", AtNS: at(12, 6, 0),
			Text: "rank 2 on gpu-node-02 slow loading data", Lost: 95}},
	}
}

// fixtureRecovering: a slow link between two hosts that came back; the
// hold-down has not passed.
func fixtureRecovering() incident.Incident {
	const job = "vit-h-14"
	link := incident.LinkTarget(7, 8)
	during := fspan(12410, 17049, at(13, 48, 5), at(14, 18, 5))
	view := "/api/v1/jobs/vit-h-14/greyhound?incident=inc-2b94e1"
	ev := []incident.Evidence{
		{ID: "sf/cp/0/12410", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(13, 48, 21),
			Window: fspan(12410, 12410, at(13, 48, 5), at(13, 48, 5)), Signal: incident.SignalOnset, BeforeMS: 290, AfterMS: 388, Verified: true, Ranks: 16,
			Text: "the step time rose from 290 to 388 ms at step 12,410", View: "/api/v1/jobs/vit-h-14/report?from=12410&to=17049"},
		{ID: "sf/lead/0/12410", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(13, 48, 21),
			Window: during, Signal: incident.SignalFinding, Subject: "stage:model.backward_cpu_wall", Layer: incident.LayerStage,
			Confidence: incident.ConfidenceWithheld, Withheld: "absorbed_in_stage",
			Text:   "the backward stage takes 98 ms more per step, but every rank leaves it together: the delay is inside a collective in it",
			Reason: "a collective inside the stage hides which rank or link the others wait for",
			View:   "/api/v1/jobs/vit-h-14/report?from=12410&to=17049"},
		{ID: "gh/cross/0/12411", Kind: incident.KindGreyhoundCrossGroup, Engine: incident.EngineGreyhound, Job: job, AtNS: at(13, 48, 28),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{{Kind: incident.TargetGroup, Name: "dp1"}},
			Layer: incident.LayerCollective, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
			Text: "communicator group dp1 (ranks 4–11) runs its all-reduce at 2.8× the time of the comparable groups dp0 and dp2", View: view},
		{ID: "gh/val/v-9", Kind: incident.KindGreyhoundValidation, Engine: incident.EngineGreyhound, Job: job, AtNS: at(13, 48, 41),
			Window: fspan(12500, 12500, at(13, 48, 30), at(13, 48, 41)), Signal: incident.SignalFinding, Targets: []incident.Target{link},
			Layer: incident.LayerNetwork, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
			Text: "validation v-9: transfers from rank 7 to rank 8 take 41.0 ms, 3.1× the median link (13.2 ms); every rank's compute and every other link normal",
			View: view},
		{ID: "sf/cp/0/17050", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 18, 23),
			Window: fspan(17050, 17050, at(14, 18, 5), at(14, 18, 5)), Signal: incident.SignalRelief, BeforeMS: 388, AfterMS: 296, Verified: true, Ranks: 16,
			Text: "the step time fell from 388 to 296 ms at step 17,050", View: "/api/v1/jobs/vit-h-14/report?from=17050&to=17110"},
		progress(job, 16, 12350, 17110, at(13, 47, 48), at(14, 18, 23), 388),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-2b94e1", Job: job, Incarnation: 2, State: incident.StateRecovering,
		Opened: incident.Point{WallNS: at(13, 48, 5), Step: 12410}, DetectedNS: at(13, 48, 21), Updated: incident.Point{WallNS: at(14, 18, 23), Step: 17110},
		Onset: []string{"sf/cp/0/12410"}, Relief: []string{"sf/cp/0/17050"}, HealthyMS: 290, SlowMS: 388,
		Scope: incident.Scope{Links: []incident.Target{link}, Hosts: []string{"node-b", "node-c"}, Groups: []string{"dp1"}},
		Cause: []string{"link:7-8"}, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
		Headline: "The link from rank 7 (node-b) to rank 8 (node-c) was slow from 13:48 to 14:18 UTC and made each step take 388 ms instead of 290 ms; the step time is back to 296 ms and laggard is watching for a relapse.",
		Hypotheses: []incident.Hypothesis{{
			Target: link, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryNetwork,
			Reason: "Greyhound measured it directly, and no engine contradicts it",
			Chain: []incident.ChainLink{
				{Layer: incident.LayerStage, Engine: incident.EngineStageFrontier, Evidence: []string{"sf/cp/0/12410", "sf/lead/0/12410"}, Confidence: incident.ConfidenceWithheld,
					Reason: "every rank leaves the stage together",
					Text:   "the backward stage takes 98 ms more per step on every rank: the delay sits in the gradient all-reduce inside it"},
				{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/cross/0/12411"}, Confidence: incident.ConfidenceHigh,
					Text: "group dp1's all-reduce runs at 2.8× the comparable groups' time"},
				{Layer: incident.LayerNetwork, Engine: incident.EngineGreyhound, Evidence: []string{"gh/val/v-9"}, Confidence: incident.ConfidenceHigh,
					Text: "transfers from rank 7 to rank 8 take 3.1× the median link; every rank's compute and every other link measured normal"},
			},
			Support: []string{"sf/lead/0/12410", "gh/cross/0/12411", "gh/val/v-9"},
			Engines: []incident.Engine{incident.EngineStageFrontier, incident.EngineGreyhound},
		}},
		Lost: incident.Lost{Seconds: 454.7, RankSeconds: 7275.2, Steps: 4640},
		Recommendations: []incident.Recommendation{
			{Text: "Check the path from node-b to node-c (rank 7 → rank 8): NIC error and link-speed counters (ethtool -S, ibstat), the cable, and the switch ports between them.", For: "link:7-8"},
			{Text: "It recovered on its own at 14:18; if it degrades again this incident re-opens — then take node-b or node-c out of the job.", For: "link:7-8"},
		},
		Audit: []incident.Action{
			{Incident: "inc-2b94e1", AtNS: at(13, 48, 30), Kind: incident.RequestValidation, Ranks: rankRange(0, 15), Result: "requested", Ref: "v-9", Text: "benchmark compute per rank and every link"},
			{Incident: "inc-2b94e1", AtNS: at(13, 48, 41), Kind: incident.RequestValidation, Ranks: rankRange(0, 15), Result: "done", Ref: "v-9", Text: "link 7→8 slow (3.1× the median link)"},
		},
		Windows: incident.Windows{Before: fspan(12350, 12409, at(13, 47, 48), at(13, 48, 5)), During: during,
			After: fspan(17050, 17110, at(14, 18, 5), at(14, 18, 23))},
		Evidence: ev,
	}
}

// fixtureResolved: a slow GPU on one rank, found by KAIR's capture and
// Greyhound's validation, that recovered yesterday.
func fixtureResolved() incident.Incident {
	const job = "resnet152-dp"
	r2 := incident.RankTarget(2, "dgx-07")
	during := fspan(88120, 90669, yesterday(22, 40, 12), yesterday(22, 51, 15))
	ev := []incident.Evidence{
		{ID: "gh/cp/0/88118", Kind: incident.KindGreyhoundChange, Engine: incident.EngineGreyhound, Job: job, AtNS: yesterday(22, 40, 25),
			Window: fspan(88118, 88118, yesterday(22, 40, 12), yesterday(22, 40, 12)), Signal: incident.SignalOnset, BeforeMS: 181, AfterMS: 262, Verified: true, Ranks: 4,
			Text: "the iteration time rose from 181 to 262 ms at iteration 88,118", View: "/api/v1/jobs/resnet152-dp/greyhound?incident=inc-c0f3a7"},
		{ID: "sf/lead/0/88120", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: yesterday(22, 40, 28),
			Window: during, Signal: incident.SignalFinding, Subject: "stage:model.backward_cpu_wall", Layer: incident.LayerStage,
			Confidence: incident.ConfidenceWithheld, Withheld: "absorbed_in_stage",
			Text: "the backward stage takes 80 ms more per step; every rank leaves it together", View: "/api/v1/jobs/resnet152-dp/report?from=88120&to=90669"},
		{ID: "kair/culprit/cap-0031", Kind: incident.KindKairCulprit, Engine: incident.EngineKair, Job: job, AtNS: yesterday(22, 40, 52),
			Window: fspan(88190, 88194, yesterday(22, 40, 30), yesterday(22, 40, 32)), Signal: incident.SignalFinding,
			Targets: []incident.Target{r2, {Kind: incident.TargetOperator, Name: "aten::convolution_backward", Rank: 2}}, Subject: "comm:world/allreduce", Exclusive: true,
			Layer: incident.LayerOperator, Category: incident.CategoryCompute, Confidence: incident.ConfidenceHigh,
			Text: "aten::convolution_backward on rank 2 runs 2.4× its peers' time in 5 of 5 captured steps; the all-reduce on ranks 0, 1, 3 only waited for it",
			View: "/api/v1/jobs/resnet152-dp/kair?capture=cap-0031"},
		{ID: "gh/val/v-4", Kind: incident.KindGreyhoundValidation, Engine: incident.EngineGreyhound, Job: job, AtNS: yesterday(22, 41, 9),
			Window: fspan(88230, 88230, yesterday(22, 41, 2), yesterday(22, 41, 9)), Signal: incident.SignalFinding, Targets: []incident.Target{r2},
			Layer: incident.LayerGPU, Category: incident.CategoryCompute, Confidence: incident.ConfidenceHigh,
			Text: "validation v-4: rank 2's matrix-multiply benchmark takes 1.8× the median rank's time; every link normal", View: "/api/v1/jobs/resnet152-dp/greyhound?incident=inc-c0f3a7"},
		{ID: "gh/cp/0/90668", Kind: incident.KindGreyhoundChange, Engine: incident.EngineGreyhound, Job: job, AtNS: yesterday(22, 51, 30),
			Window: fspan(90668, 90668, yesterday(22, 51, 15), yesterday(22, 51, 15)), Signal: incident.SignalRelief, BeforeMS: 262, AfterMS: 183, Verified: true, Ranks: 4,
			Text: "the iteration time fell from 262 to 183 ms at iteration 90,668", View: "/api/v1/jobs/resnet152-dp/greyhound?incident=inc-c0f3a7"},
		progress(job, 4, 88060, 91330, yesterday(22, 40, 1), yesterday(22, 53, 16), 262),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-c0f3a7", Job: job, State: incident.StateResolved,
		Opened: incident.Point{WallNS: yesterday(22, 40, 12), Step: 88120}, DetectedNS: yesterday(22, 40, 25),
		Updated: incident.Point{WallNS: yesterday(22, 53, 16), Step: 91330}, Resolved: &incident.Point{WallNS: yesterday(22, 51, 15), Step: 90670},
		Onset: []string{"gh/cp/0/88118"}, Relief: []string{"gh/cp/0/90668"}, HealthyMS: 181, SlowMS: 262,
		Scope: incident.Scope{Ranks: []int{2}, Hosts: []string{"dgx-07"}, Operators: []string{"aten::convolution_backward"}},
		Cause: []string{"rank:2"}, Category: incident.CategoryCompute, Confidence: incident.ConfidenceHigh,
		Headline: "Rank 2's GPU on dgx-07 computed slowly for 11 minutes (its convolution backward took 2.4× its peers' time), making each step 262 ms instead of 181 ms; it recovered at 22:51 UTC.",
		Hypotheses: []incident.Hypothesis{{
			Target: r2, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryCompute,
			Reason: "KAIR and Greyhound name rank 2 independently",
			Chain: []incident.ChainLink{
				{Layer: incident.LayerStage, Engine: incident.EngineStageFrontier, Evidence: []string{"sf/lead/0/88120"}, Confidence: incident.ConfidenceWithheld,
					Reason: "every rank leaves the stage together",
					Text:   "the backward stage takes 80 ms more per step; the stage alone cannot tell which rank the all-reduce inside it waits for"},
				{Layer: incident.LayerOperator, Engine: incident.EngineKair, Evidence: []string{"kair/culprit/cap-0031"}, Confidence: incident.ConfidenceHigh,
					Text: "aten::convolution_backward on rank 2 runs 2.4× its peers' time in 5 of 5 captured steps; the others only waited for it"},
				{Layer: incident.LayerGPU, Engine: incident.EngineGreyhound, Evidence: []string{"gh/val/v-4"}, Confidence: incident.ConfidenceHigh,
					Text: "rank 2's matrix-multiply benchmark takes 1.8× the median rank's time"},
			},
			Support: []string{"kair/culprit/cap-0031", "gh/val/v-4", "sf/lead/0/88120"},
			Engines: []incident.Engine{incident.EngineKair, incident.EngineGreyhound, incident.EngineStageFrontier},
		}},
		Lost: incident.Lost{Seconds: 204, RankSeconds: 816, Steps: 2550},
		Recommendations: []incident.Recommendation{
			{Text: "Check rank 2's GPU on dgx-07 for throttling: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE (a thermal or power slowdown, clocks below the other GPUs').", For: "rank:2"},
			{Text: "It recovered on its own; if it recurs, have the GPU or its cooling looked at before the next long run.", For: "rank:2"},
		},
		Audit: []incident.Action{
			{Incident: "inc-c0f3a7", AtNS: yesterday(22, 40, 30), Kind: incident.RequestCapture, Ranks: rankRange(0, 3), Result: "requested", Ref: "cap-0031", Text: "5 steps of torch.profiler on every rank"},
			{Incident: "inc-c0f3a7", AtNS: yesterday(22, 40, 52), Kind: incident.RequestCapture, Ranks: rankRange(0, 3), Result: "done", Ref: "cap-0031", Text: "4 of 4 traces uploaded"},
			{Incident: "inc-c0f3a7", AtNS: yesterday(22, 41, 2), Kind: incident.RequestValidation, Ranks: rankRange(0, 3), Result: "requested", Ref: "v-4"},
			{Incident: "inc-c0f3a7", AtNS: yesterday(22, 41, 9), Kind: incident.RequestValidation, Ranks: rankRange(0, 3), Result: "done", Ref: "v-4", Text: "rank 2's compute slow (1.8× the median)"},
		},
		Windows: incident.Windows{Before: fspan(88060, 88119, yesterday(22, 40, 1), yesterday(22, 40, 12)), During: during,
			After: fspan(90670, 91330, yesterday(22, 51, 15), yesterday(22, 53, 16))},
		Evidence: ev,
	}
}

// fixtureWithheld: no cause stated: Greyhound and KAIR name different
// ranks for the same wait, and StageFrontier withholds; a CPU profile of
// both is under way.
func fixtureWithheld() incident.Incident {
	const job = "moe-32e"
	r3, r6 := incident.RankTarget(3, "node-01"), incident.RankTarget(6, "node-02")
	during := fspan(5530, 6058, at(14, 11, 2), at(14, 19, 50))
	ev := []incident.Evidence{
		{ID: "gh/cp/0/5529", Kind: incident.KindGreyhoundChange, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 11, 20),
			Window: fspan(5529, 5529, at(14, 11, 2), at(14, 11, 2)), Signal: incident.SignalOnset, BeforeMS: 720, AfterMS: 1010, Verified: true, Ranks: 8,
			Text: "the iteration time rose from 720 ms to 1.01 s at iteration 5,529", View: "/api/v1/jobs/moe-32e/greyhound?incident=inc-5e6d22"},
		{ID: "sf/lead/0/5530", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 11, 25),
			Window: during, Signal: incident.SignalFinding, Subject: "stage:model.fwd_loss_cpu_wall", Layer: incident.LayerStage,
			Confidence: incident.ConfidenceWithheld, Withheld: "absorbed_in_stage",
			Text: "the forward stage takes 290 ms more per step; every rank leaves it together (an all-to-all inside it)", View: "/api/v1/jobs/moe-32e/report?from=5530&to=6058"},
		{ID: "gh/late/0/5529", Kind: incident.KindGreyhoundLate, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 11, 20),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{r3}, Subject: "comm:pg2-ep/alltoall", Exclusive: true,
			Layer: incident.LayerCollective, Confidence: incident.ConfidenceHigh,
			Text: "rank 3 enters the all-to-all on pg2-ep last on 18 of 20 calls since the onset, a median 260 ms after the next rank",
			View: "/api/v1/jobs/moe-32e/greyhound?incident=inc-5e6d22"},
		{ID: "kair/culprit/cap-0051", Kind: incident.KindKairCulprit, Engine: incident.EngineKair, Job: job, AtNS: at(14, 11, 40),
			Window: fspan(5545, 5547, at(14, 11, 22), at(14, 11, 25)), Signal: incident.SignalFinding, Targets: []incident.Target{r6},
			Subject: "comm:pg2-ep/alltoall", Exclusive: true, Layer: incident.LayerOperator, Confidence: incident.ConfidenceLow,
			Text:   "a 240 ms gap on rank 6 between aten::index_select and all_to_all (host work the profiler does not see, or a wait) in 3 of 3 captured steps",
			Reason: "one capture of 3 steps",
			View:   "/api/v1/jobs/moe-32e/kair?capture=cap-0051"},
		progress(job, 8, 5470, 6058, at(14, 10, 19), at(14, 19, 50), 1010),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-5e6d22", Job: job, State: incident.StateOpen,
		Opened: incident.Point{WallNS: at(14, 11, 2), Step: 5530}, DetectedNS: at(14, 11, 20), Updated: incident.Point{WallNS: at(14, 19, 50), Step: 6058},
		Onset: []string{"gh/cp/0/5529"}, HealthyMS: 720, SlowMS: 1010,
		Scope: incident.Scope{Whole: true}, Category: incident.CategoryUnknown, Confidence: incident.ConfidenceWithheld,
		Headline: "The step time rose 40% at 14:11:02 UTC (720 ms → 1.01 s). Greyhound and KAIR name different ranks (3 and 6) for the same wait, so no cause is stated yet; a CPU profile of both is under way.",
		Hypotheses: []incident.Hypothesis{
			{Target: r3, Confidence: incident.ConfidenceLow, Category: incident.CategoryUnknown,
				Reason: "Greyhound alone names it, and KAIR blames rank 6 for the same wait",
				Chain: []incident.ChainLink{{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/late/0/5529"}, Confidence: incident.ConfidenceHigh,
					Text: "rank 3 enters the all-to-all last on 18 of 20 calls, a median 260 ms after the next rank"}},
				Support: []string{"gh/late/0/5529"}, Against: []string{"kair/culprit/cap-0051"}, Engines: []incident.Engine{incident.EngineGreyhound}},
			{Target: r6, Confidence: incident.ConfidenceLow, Category: incident.CategoryUnknown,
				Reason: "KAIR alone names it, from one capture of 3 steps; Greyhound names rank 3 for the same wait",
				Chain: []incident.ChainLink{{Layer: incident.LayerOperator, Engine: incident.EngineKair, Evidence: []string{"kair/culprit/cap-0051"}, Confidence: incident.ConfidenceLow,
					Text: "a 240 ms gap on rank 6 before its all-to-all, in 3 of 3 captured steps"}},
				Support: []string{"kair/culprit/cap-0051"}, Against: []string{"gh/late/0/5529"}, Engines: []incident.Engine{incident.EngineKair}},
		},
		Contradictions: []string{"Greyhound says rank 3 is the last into the all-to-all on 18 of 20 calls; KAIR's capture cap-0051 blames a gap on rank 6 before the same all-to-all. They cannot both be the rank the others wait for."},
		Lost:           incident.Lost{Seconds: 153, RankSeconds: 1225, Steps: 528},
		Recommendations: []incident.Recommendation{
			{Text: "Do not act on either rank yet. The CPU profile below compares ranks 3 and 6 with healthy rank 0; for more operator detail now, run: laggard capture -ranks 3,6 -steps 8 moe-32e"},
		},
		Waiting: []incident.Request{
			{Kind: incident.RequestProfile, Ranks: []int{0, 3, 6}, Reason: "tells which of ranks 3 and 6 the others wait for (healthy peer: rank 0)", Asked: true},
			{Kind: incident.RequestValidation, Ranks: rankRange(0, 7), Reason: "benchmarks the compute of ranks 3 and 6 and their links; after the profile (one pause at a time)"},
		},
		Audit: []incident.Action{
			{Incident: "inc-5e6d22", AtNS: at(14, 11, 22), Kind: incident.RequestCapture, Ranks: rankRange(0, 7), Result: "requested", Ref: "cap-0051", Text: "3 steps of torch.profiler on every rank"},
			{Incident: "inc-5e6d22", AtNS: at(14, 11, 40), Kind: incident.RequestCapture, Ranks: rankRange(0, 7), Result: "done", Ref: "cap-0051", Text: "8 of 8 traces uploaded"},
			{Incident: "inc-5e6d22", AtNS: at(14, 12, 40), Kind: incident.RequestProfile, Ranks: []int{0, 3, 6}, Result: "started", Ref: "window 14:12:40+60s", Text: "waiting for the node agents of node-01 and node-02"},
		},
		Windows:  incident.Windows{Before: fspan(5470, 5529, at(14, 10, 19), at(14, 11, 2)), During: during},
		Evidence: ev,
	}
}

// fixtureUniform: every rank slowed alike; the explanation is the CPU
// profile against the job's own earlier window.
func fixtureUniform() incident.Incident {
	const job = "llama-70b-sft"
	during := fspan(22000, 24533, at(11, 58, 30), at(14, 19, 55))
	ev := []incident.Evidence{
		{ID: "sf/cp/0/22000", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(12, 0, 2),
			Window: fspan(22000, 22000, at(11, 58, 30), at(11, 58, 30)), Signal: incident.SignalOnset, BeforeMS: 2840, AfterMS: 3350, Verified: true, Ranks: 64,
			Text: "the step time rose from 2.84 s to 3.35 s at step 22,000", View: "/api/v1/jobs/llama-70b-sft/report?from=22000&to=24533"},
		{ID: "sf/lead/0/22000", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(12, 0, 2),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{incident.JobTarget()}, Layer: incident.LayerStage,
			Category: incident.CategoryUniform, Confidence: incident.ConfidenceHigh, Withheld: "uniform",
			Text: "every stage grew alike on every rank (forward +9%, backward +11%, optimizer +60%); no rank is last more often than chance", View: "/api/v1/jobs/llama-70b-sft/report?from=22000&to=24533"},
		{ID: "gh/verdict/0/21999", Kind: incident.KindGreyhoundVerdict, Engine: incident.EngineGreyhound, Job: job, AtNS: at(12, 1, 30),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{incident.JobTarget()}, Layer: incident.LayerCollective,
			Category: incident.CategoryUniform, Confidence: incident.ConfidenceHigh,
			Text: "uniform slowdown: all 64 ranks enter their collectives within 3 ms of each other, and every group is slower alike", View: "/api/v1/jobs/llama-70b-sft/greyhound?incident=inc-91aa07"},
		{ID: "sysom/temporal/0", Kind: incident.KindSysomTemporal, Engine: incident.EngineSysom, Job: job, AtNS: at(12, 1, 15),
			Window: fspan(22020, 22037, at(12, 0, 10), at(12, 1, 10)), Signal: incident.SignalFinding, Targets: []incident.Target{incident.JobTarget()},
			Layer: incident.LayerCPU, Category: incident.CategoryUniform, Confidence: incident.ConfidenceLow,
			Text:   "against the job's own window 11:40–11:55 UTC, Python's garbage collector (gc.collect) grew from 2% to 19% of CPU samples on every rank",
			Reason: "a comparison with the past, not with a healthy peer: it shows what changed, not that it caused the whole rise",
			View:   "/api/v1/jobs/llama-70b-sft/sysom?incident=inc-91aa07"},
		progress(job, 64, 21940, 24533, at(11, 55, 40), at(14, 19, 55), 3350),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-91aa07", Job: job, State: incident.StateOpen,
		Opened: incident.Point{WallNS: at(11, 58, 30), Step: 22000}, DetectedNS: at(12, 0, 2), Updated: incident.Point{WallNS: at(14, 19, 55), Step: 24533},
		Onset: []string{"sf/cp/0/22000"}, HealthyMS: 2840, SlowMS: 3350,
		Scope: incident.Scope{Whole: true}, Cause: []string{"job"}, Category: incident.CategoryUniform, Confidence: incident.ConfidenceLow,
		Headline: "Every rank slowed alike at 11:58:30 UTC (2.84 s → 3.35 s per step, +18%); no rank, link or host stands out. The CPU profiles point at Python's garbage collector, which grew from 2% to 19% of CPU time on every rank.",
		Hypotheses: []incident.Hypothesis{{
			Target: incident.JobTarget(), Stated: true, Confidence: incident.ConfidenceLow, Category: incident.CategoryUniform,
			Reason: "StageFrontier and Greyhound agree that every rank slowed alike; why rests on one comparison with the job's past",
			Chain: []incident.ChainLink{
				{Layer: incident.LayerStage, Engine: incident.EngineStageFrontier, Evidence: []string{"sf/cp/0/22000", "sf/lead/0/22000"}, Confidence: incident.ConfidenceHigh,
					Text: "every stage grew alike on every rank (optimizer +60%, backward +11%, forward +9%)"},
				{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/verdict/0/21999"}, Confidence: incident.ConfidenceHigh,
					Text: "all 64 ranks enter their collectives within 3 ms of each other"},
				{Layer: incident.LayerCPU, Engine: incident.EngineSysom, Evidence: []string{"sysom/temporal/0"}, Confidence: incident.ConfidenceLow,
					Text: "Python's garbage collector grew from 2% to 19% of CPU samples on every rank, against the job's own window 11:40–11:55"},
			},
			Support: []string{"sf/lead/0/22000", "gh/verdict/0/21999", "sysom/temporal/0"},
			Engines: []incident.Engine{incident.EngineStageFrontier, incident.EngineGreyhound, incident.EngineSysom},
		}},
		Lost: incident.Lost{Seconds: 1291.8, RankSeconds: 82675.2, Steps: 2533},
		Recommendations: []incident.Recommendation{
			{Text: "Every rank slowed at once, so look at what changed for the whole job at 11:58 (a config push, a new data shard, a dependency update), not at one machine."},
			{Text: "The CPU profile points at Python's garbage collector: call gc.freeze() once the model is built, or raise the collection thresholds (gc.set_threshold)."},
		},
		Audit: []incident.Action{
			{Incident: "inc-91aa07", AtNS: at(12, 0, 10), Kind: incident.RequestProfile, Ranks: []int{0, 17, 42}, Result: "started", Ref: "window 12:00:10+60s", Text: "CPU profile of three ranks, to compare with the job's own window before the onset"},
			{Incident: "inc-91aa07", AtNS: at(12, 1, 15), Kind: incident.RequestProfile, Ranks: []int{0, 17, 42}, Result: "done", Ref: "window 12:00:10+60s"},
		},
		Windows:  incident.Windows{Before: fspan(21940, 21999, at(11, 55, 40), at(11, 58, 30)), During: during},
		Evidence: ev,
	}
}

// fixtureTwoFaults: two causes at once — a data-loader stall on rank 4
// and a slow link 11→12 — stated side by side, never merged.
func fixtureTwoFaults() incident.Incident {
	const job = "gpt-ft-13b"
	r4, link := incident.RankTarget(4, "node-01"), incident.LinkTarget(11, 12)
	during := fspan(3100, 4174, at(14, 5, 10), at(14, 19, 40))
	view := "/api/v1/jobs/gpt-ft-13b/greyhound?incident=inc-4f20b8"
	ev := []incident.Evidence{
		{ID: "sf/cp/0/3100", Kind: incident.KindStageChange, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 5, 22),
			Window: fspan(3100, 3100, at(14, 5, 10), at(14, 5, 10)), Signal: incident.SignalOnset, BeforeMS: 560, AfterMS: 810, Verified: true, Ranks: 16,
			Text: "the step time rose from 560 to 810 ms at step 3,100", View: "/api/v1/jobs/gpt-ft-13b/report?from=3100&to=4174"},
		{ID: "sf/lead/0/3100", Kind: incident.KindStageLeader, Engine: incident.EngineStageFrontier, Job: job, AtNS: at(14, 5, 22),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{r4}, Subject: "stage:data.next_wait", Exclusive: true,
			Layer: incident.LayerStage, Category: incident.CategoryData, Confidence: incident.ConfidenceHigh,
			Text: "rank 4 is the last to finish data.next_wait on 38 of 40 steps where the stage costs time", View: "/api/v1/jobs/gpt-ft-13b/report?from=3100&to=4174"},
		{ID: "gh/late/0/3099", Kind: incident.KindGreyhoundLate, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 5, 30),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{r4}, Subject: "comm:pg0-world/allreduce", Exclusive: true,
			Layer: incident.LayerCollective, Confidence: incident.ConfidenceHigh,
			Text: "rank 4 enters AllReduce on pg0-world last on 19 of 20 calls, a median 121 ms after the next rank", View: view},
		{ID: "gh/cross/0/3101", Kind: incident.KindGreyhoundCrossGroup, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 5, 30),
			Window: during, Signal: incident.SignalFinding, Targets: []incident.Target{{Kind: incident.TargetGroup, Name: "dp-b"}},
			Layer: incident.LayerCollective, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
			Text: "group dp-b (ranks 8–15) runs its reduce-scatter at 2.2× the time of group dp-a", View: view},
		{ID: "gh/val/v-21", Kind: incident.KindGreyhoundValidation, Engine: incident.EngineGreyhound, Job: job, AtNS: at(14, 5, 58),
			Window: fspan(3160, 3160, at(14, 5, 50), at(14, 5, 58)), Signal: incident.SignalFinding, Targets: []incident.Target{link},
			Layer: incident.LayerNetwork, Category: incident.CategoryNetwork, Confidence: incident.ConfidenceHigh,
			Text: "validation v-21: transfers from rank 11 to rank 12 take 2.9× the median link; rank 4's compute and links normal", View: view},
		progress(job, 16, 3040, 4174, at(14, 4, 36), at(14, 19, 40), 810),
	}
	return incident.Incident{
		Schema: incident.Schema, ID: "inc-4f20b8", Job: job, State: incident.StateOpen,
		Opened: incident.Point{WallNS: at(14, 5, 10), Step: 3100}, DetectedNS: at(14, 5, 22), Updated: incident.Point{WallNS: at(14, 19, 40), Step: 4174},
		Onset: []string{"sf/cp/0/3100"}, HealthyMS: 560, SlowMS: 810,
		Scope: incident.Scope{Ranks: []int{4}, Links: []incident.Target{link}, Hosts: []string{"node-01", "node-02"}, Groups: []string{"dp-b"}},
		Cause: []string{"rank:4", "link:11-12"}, Category: incident.CategoryData, Confidence: incident.ConfidenceHigh,
		Headline: "Two causes at once since 14:05:10 UTC: rank 4 on node-01 is slow loading its data, and the link from rank 11 to rank 12 on node-02 is slow; each step takes 810 ms instead of 560 ms (+45%).",
		Hypotheses: []incident.Hypothesis{
			{Target: r4, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryData,
				Reason: "StageFrontier and Greyhound name rank 4 independently",
				Chain: []incident.ChainLink{
					{Layer: incident.LayerStage, Engine: incident.EngineStageFrontier, Evidence: []string{"sf/lead/0/3100"}, Confidence: incident.ConfidenceHigh,
						Text: "the data-loading stage takes 120 ms more per step, and rank 4 is the last to finish it on 38 of 40 steps"},
					{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/late/0/3099"}, Confidence: incident.ConfidenceHigh,
						Text: "rank 4 enters the gradient all-reduce last on 19 of 20 calls, a median 121 ms after the next rank"},
				},
				Support: []string{"sf/lead/0/3100", "gh/late/0/3099"}, Engines: []incident.Engine{incident.EngineStageFrontier, incident.EngineGreyhound}},
			{Target: link, Stated: true, Confidence: incident.ConfidenceHigh, Category: incident.CategoryNetwork,
				Reason: "Greyhound measured it directly, and no engine contradicts it",
				Chain: []incident.ChainLink{
					{Layer: incident.LayerCollective, Engine: incident.EngineGreyhound, Evidence: []string{"gh/cross/0/3101"}, Confidence: incident.ConfidenceHigh,
						Text: "group dp-b's reduce-scatter runs at 2.2× group dp-a's time"},
					{Layer: incident.LayerNetwork, Engine: incident.EngineGreyhound, Evidence: []string{"gh/val/v-21"}, Confidence: incident.ConfidenceHigh,
						Text: "transfers from rank 11 to rank 12 take 2.9× the median link"},
				},
				Support: []string{"gh/cross/0/3101", "gh/val/v-21"}, Engines: []incident.Engine{incident.EngineGreyhound}},
		},
		Lost: incident.Lost{Seconds: 268.5, RankSeconds: 4296, Steps: 1074},
		Recommendations: []incident.Recommendation{
			{Text: "Look at rank 4's input pipeline on node-01 (DataLoader workers, the storage it reads from).", For: "rank:4"},
			{Text: "Check the path from rank 11 to rank 12 on node-02: NIC and switch-port error counters (ethtool -S, ibstat), NVLink state (nvidia-smi nvlink -s).", For: "link:11-12"},
		},
		Audit: []incident.Action{
			{Incident: "inc-4f20b8", AtNS: at(14, 5, 50), Kind: incident.RequestValidation, Ranks: rankRange(0, 15), Result: "requested", Ref: "v-21"},
			{Incident: "inc-4f20b8", AtNS: at(14, 5, 58), Kind: incident.RequestValidation, Ranks: rankRange(0, 15), Result: "done", Ref: "v-21", Text: "link 11→12 slow (2.9× the median link); rank 4's compute normal"},
		},
		Windows:  incident.Windows{Before: fspan(3040, 3099, at(14, 4, 36), at(14, 5, 10)), During: during},
		Evidence: ev,
	}
}

// incidentFixtures are every fixture by name (the golden file names).
func incidentFixtures() []struct {
	name string
	inc  incident.Incident
} {
	return []struct {
		name string
		inc  incident.Incident
	}{
		{"open", fixtureOpen()},
		{"recovering", fixtureRecovering()},
		{"resolved", fixtureResolved()},
		{"withheld", fixtureWithheld()},
		{"uniform", fixtureUniform()},
		{"two-faults", fixtureTwoFaults()},
	}
}
