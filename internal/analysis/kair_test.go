package analysis

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// A timeline keeps each rank's MaxTimelineEvents longest events, in start
// order, relative to the step's earliest aligned start.
func TestBuildTimelineTruncates(t *testing.T) {
	tr := optrace.Trace{Rank: 0}
	for i := range MaxTimelineEvents + 10 {
		tr.Events = append(tr.Events, optrace.Event{Name: "k", Cat: optrace.GPUKernel, Stream: 7, Device: 0, StartNS: int64(1000 + i*10), DurNS: int64(i), Step: 3, Seq: -1})
	}
	other := optrace.Trace{Rank: 1, Events: []optrace.Event{{Name: "x", Cat: optrace.CPUOp, TID: 2, Device: -1, StartNS: 900, DurNS: 5, Step: 3, Seq: -1}}}
	tl, err := buildTimeline([]optrace.Trace{tr, other}, []int{0, 1}, map[int]int64{1: 50}, 3)
	if err != nil {
		t.Fatal(err)
	}
	r0 := tl.Ranks[0]
	if !tl.Truncated || len(r0.Events) != MaxTimelineEvents || r0.Events[0].DurNS != 10 || r0.Events[0].Lane != "s7" {
		t.Fatalf("truncated %v, %d events, first %+v", tl.Truncated, len(r0.Events), r0.Events[0])
	}
	// Rank 1's event at 900+50 is the earliest aligned start.
	if got := tl.Ranks[1].Events[0]; got.StartNS != 0 || got.Lane != "t2" || tl.Ranks[1].OffsetNS != 50 {
		t.Errorf("rank 1 %+v", tl.Ranks[1])
	}
	if r0.Events[0].StartNS != 1000+10*10-950 {
		t.Errorf("rank 0 first start %d", r0.Events[0].StartNS)
	}
}
