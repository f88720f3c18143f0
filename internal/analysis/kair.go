package analysis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/store"
)

// KAIR's read path (§III-A Feature 2, triggered capture): the report
// (kair.Run over a capture's stored traces) and the per-rank timeline
// built from them. The capture life cycle — what ranks should record,
// which did, when a capture settles — acts, so it lives in
// internal/control (docs/design/control.md).

// Aliases so layers above analysis name the KAIR engine's types without
// importing it (only analysis joins the store and the engines).
type (
	// KairReport is the KAIR pipeline's report over one capture.
	KairReport = kair.TraceReport
	// KairRunConfig configures kair.Run.
	KairRunConfig = kair.RunConfig
	// KairHeartbeat is one client↔server clock sample.
	KairHeartbeat = kair.Heartbeat
	// KairClockMethod says how ranks' clocks were aligned.
	KairClockMethod = kair.ClockMethod
)

// KAIR verdicts (kair.TraceVerdict), for callers above analysis.
const (
	KairVerdictCulprit      = kair.VerdictCulprit
	KairVerdictRank         = kair.VerdictRank
	KairVerdictNone         = kair.VerdictNone
	KairVerdictInconclusive = kair.VerdictInconclusive
)

// Clock methods (kair.ClockMethod), for callers that pick one.
const (
	KairClockNone        = kair.ClockNone
	KairClockGiven       = kair.ClockGiven
	KairClockHeartbeat   = kair.ClockHeartbeat
	KairClockCollectives = kair.ClockCollectives
)

// DefaultKairRunConfig is kair.DefaultRunConfig.
func DefaultKairRunConfig() KairRunConfig { return kair.DefaultRunConfig() }

// RunKair runs the KAIR pipeline over traces already in memory (the
// CLI's files): layers above analysis call it instead of the engine.
func RunKair(traces []optrace.Trace, hb map[int][]KairHeartbeat, cfg KairRunConfig) (*KairReport, error) {
	return kair.Run(traces, hb, cfg)
}

// CaptureOpen reports whether ranks are still asked to record c.
func CaptureOpen(c *store.Capture) bool { return c.State.Open() }

// ErrTooFewTraces: a KAIR report needs traces of at least two ranks (the
// HTTP layer maps it to 409).
var ErrTooFewTraces = errors.New("too few ranks uploaded a trace")

// KairTraceSource is what a KAIR report reads (store/optrace.go);
// *store.Store implements it.
type KairTraceSource interface {
	OpTraces(job, capture string) ([]optrace.Trace, map[int][]store.OpHeartbeat, error)
}

// CaptureRequest is the body of a manual capture (POST …/captures); zero
// or absent fields take defaults.
type CaptureRequest struct {
	Ranks     []int  `json:"ranks,omitempty"`
	Steps     int    `json:"steps,omitempty"`
	Every     int    `json:"every,omitempty"`
	Reason    string `json:"reason,omitempty"`
	StartStep *int64 `json:"start_step,omitempty"`
}

// KairAnswer is GET …/kair: the capture and its KAIR report.
type KairAnswer struct {
	Capture *store.Capture `json:"capture"`
	Report  *KairReport    `json:"report"`
}

// RunKairCapture loads capture c's stored traces (only the ranks it lists
// as uploaded) with their clock samples and runs the pipeline (kair.Run:
// clock alignment, Stage 1 rhythm, Stages 2–3) under cfg. It needs
// traces of two ranks (ErrTooFewTraces).
func RunKairCapture(ctx context.Context, src KairTraceSource, c *store.Capture, cfg KairRunConfig) (*KairReport, error) {
	traces, hbs, err := src.OpTraces(c.Job, c.ID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Only the ranks the capture lists (a trace stored by an upload that
	// raced a cancel is not one).
	traces = slices.DeleteFunc(traces, func(t optrace.Trace) bool { return !slices.Contains(c.Uploaded, t.Rank) })
	slices.SortFunc(traces, func(a, b optrace.Trace) int { return cmp.Compare(a.Rank, b.Rank) })
	if len(traces) < 2 {
		return nil, fmt.Errorf("job %q, capture %s: %d stored traces: %w", signal.Clip(c.Job), c.ID, len(traces), ErrTooFewTraces)
	}
	hb := make(map[int][]kair.Heartbeat, len(hbs))
	for r, xs := range hbs {
		out := make([]kair.Heartbeat, len(xs))
		for i, x := range xs {
			out[i] = kair.Heartbeat{ClientSendNS: x.ClientSendNS, ServerRecvNS: x.ServerRecvNS, ServerSendNS: x.ServerSendNS, ClientRecvNS: x.ClientRecvNS}
		}
		hb[r] = out
	}
	rep, err := kair.Run(traces, hb, cfg)
	if err != nil {
		return nil, fmt.Errorf("job %q, capture %s: %w", signal.Clip(c.Job), c.ID, err)
	}
	return rep, nil
}

// KairTimeline is GET …/kair/timeline: one step's events per rank on the
// aligned clock, for the per-rank lanes view.
type KairTimeline struct {
	Step      int64              `json:"step"`
	Ranks     []KairTimelineRank `json:"ranks"`
	Truncated bool               `json:"truncated"`
}

// KairTimelineRank is one rank's lane events; OffsetNS is the clock offset
// applied (the report's estimate).
type KairTimelineRank struct {
	Rank     int                 `json:"rank"`
	OffsetNS int64               `json:"offset_ns"`
	Events   []KairTimelineEvent `json:"events"`
}

// KairTimelineEvent is one event; StartNS is relative to the step's earliest
// aligned start over all ranks; Lane is "t<tid>" (host thread) or
// "s<stream>" (device stream).
type KairTimelineEvent struct {
	Name    string           `json:"name"`
	Cat     optrace.Category `json:"cat"`
	Lane    string           `json:"lane"`
	StartNS int64            `json:"start_ns"`
	DurNS   int64            `json:"dur_ns"`
}

// MaxTimelineEvents bounds one rank's events in a timeline: the longest
// are kept.
const MaxTimelineEvents = 5000

// KairTimelines builds the timeline of each of steps over a capture's
// traces of ranks, on the report's aligned clock (rep.Clock's offsets;
// a rank it does not list keeps its trace's own offset); a step no
// listed rank recorded has none in the map.
func KairTimelines(traces []optrace.Trace, ranks []int, rep *KairReport, steps []int64) map[int64]*KairTimeline {
	offsets := map[int]int64{}
	for _, t := range traces {
		offsets[t.Rank] = t.ClockOffsetNS
	}
	for _, e := range rep.Clock {
		offsets[e.Rank] = e.OffsetNS
	}
	return buildTimelines(traces, ranks, offsets, steps)
}

// Events counts the timeline's events over all ranks.
func (tl *KairTimeline) Events() int {
	n := 0
	for _, r := range tl.Ranks {
		n += len(r.Events)
	}
	return n
}

// buildTimeline is one step's timeline (a field error on step when no
// rank recorded it).
func buildTimeline(traces []optrace.Trace, ranks []int, offsets map[int]int64, step int64) (*KairTimeline, error) {
	tl := buildTimelines(traces, ranks, offsets, []int64{step})[step]
	if tl == nil {
		return nil, signal.FieldErrorf("step", "no rank recorded step %d in this capture", step)
	}
	return tl, nil
}

// buildTimelines builds the timeline of each of steps in one pass over
// the traces; a step no listed rank recorded has none in the map.
func buildTimelines(traces []optrace.Trace, ranks []int, offsets map[int]int64, steps []int64) map[int64]*KairTimeline {
	slices.SortFunc(traces, func(a, b optrace.Trace) int { return cmp.Compare(a.Rank, b.Rank) })
	type acc struct {
		per   [][]*optrace.Event // per trace
		first int64              // earliest aligned start
		found bool
	}
	accs := make(map[int64]*acc, len(steps))
	for _, s := range steps {
		accs[s] = &acc{per: make([][]*optrace.Event, len(traces))}
	}
	for i := range traces {
		t := &traces[i]
		if !slices.Contains(ranks, t.Rank) {
			continue
		}
		for j := range t.Events {
			e := &t.Events[j]
			a := accs[e.Step]
			if a == nil {
				continue
			}
			a.per[i] = append(a.per[i], e)
			s := e.StartNS + offsets[t.Rank]
			if !a.found || s < a.first {
				a.first, a.found = s, true
			}
		}
	}
	out := make(map[int64]*KairTimeline, len(steps))
	for step, a := range accs {
		if !a.found {
			continue
		}
		tl := &KairTimeline{Step: step, Ranks: []KairTimelineRank{}}
		for i := range traces {
			t := &traces[i]
			if !slices.Contains(ranks, t.Rank) {
				continue
			}
			evs := a.per[i]
			if len(evs) > MaxTimelineEvents {
				// Keep the longest: a timeline is read for what took time.
				slices.SortStableFunc(evs, func(a, b *optrace.Event) int { return cmp.Compare(b.DurNS, a.DurNS) })
				evs = evs[:MaxTimelineEvents]
				tl.Truncated = true
			}
			slices.SortStableFunc(evs, func(a, b *optrace.Event) int { return cmp.Compare(a.StartNS, b.StartNS) })
			off := offsets[t.Rank]
			tr := KairTimelineRank{Rank: t.Rank, OffsetNS: off, Events: make([]KairTimelineEvent, len(evs))}
			for j, e := range evs {
				lane := "t" + strconv.FormatInt(int64(e.TID), 10)
				if e.Cat.OnDevice() || (e.Cat == optrace.Collective && e.Stream != 0) {
					lane = "s" + strconv.FormatInt(int64(e.Stream), 10)
				}
				tr.Events[j] = KairTimelineEvent{Name: e.Name, Cat: e.Cat, Lane: lane, StartNS: e.StartNS + off - a.first, DurNS: e.DurNS}
			}
			tl.Ranks = append(tl.Ranks, tr)
		}
		out[step] = tl
	}
	return out
}
