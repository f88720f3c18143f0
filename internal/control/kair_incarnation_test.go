package control

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Issue 16 item 1, KAIR: a capture belongs to one launch of the job. A
// restart closes an earlier launch's open capture (its processes are
// gone), a process of another launch is never handed it nor may upload to
// it, and a new capture starts at a step of its own launch, not at an
// ordinal or at the old launch's last step.
func TestKairIncarnations(t *testing.T) {
	st := kairStore(t, 2)
	k := NewKairLifecycle(st, KairLifecycleConfig{})
	now := int64(1_800_000_000) * sec
	var vs []stagevec.Vector
	for s := int64(0); s < 500; s++ {
		for r := range 2 {
			vs = append(vs, stagevec.Vector{Step: s, Rank: r, Durations: []float64{1, 2, 3, 4, 5, 0}, WallMS: 15})
		}
	}
	if err := st.Append("j", vs); err != nil {
		t.Fatal(err)
	}
	c0, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{StepNS: sec}, now)
	if err != nil || c0.Incarnation != 0 || c0.StartStep != 499+10 {
		t.Fatalf("capture of the first launch: %+v %v", c0, err)
	}
	if p, err := k.Pending("j", 0, 499, 0, now+sec); err != nil || p == nil || p.ID != c0.ID {
		t.Fatalf("a first-launch poll gets it: %+v %v", p, err)
	}

	// The job restarts from its checkpoint at step 40.
	j, _ := st.Job("j")
	j.Incarnations = []signal.Incarnation{{N: 0, Reason: signal.IncFirst}, {N: 1, Reason: signal.IncRestart, Opened: time.Unix(0, now+2*sec)}}
	if err := st.PutJob(j); err != nil {
		t.Fatal(err)
	}
	var again []stagevec.Vector
	for s := int64(40); s < 60; s++ {
		for r := range 2 {
			again = append(again, stagevec.Vector{Step: stagevec.Ordinal(1, s), Rank: r, Durations: []float64{1, 2, 3, 4, 5, 0}, WallMS: 15})
		}
	}
	if err := st.Append("j", again); err != nil {
		t.Fatal(err)
	}
	if p, err := k.Pending("j", 1, 59, 1, now+3*sec); err != nil || p != nil {
		t.Fatalf("a second-launch poll must not get the first launch's capture: %+v %v", p, err)
	}
	old, err := k.Capture("j", c0.ID, now+3*sec)
	if err != nil || old.State != store.CaptureExpired || !strings.Contains(old.Note, "restarted") {
		t.Fatalf("the first launch's capture must close, saying why: %+v %v", old, err)
	}
	var ce *signal.ConflictError
	if _, err := k.CheckUpload("j", c0.ID, 0, 1, now+4*sec); !errors.As(err, &ce) || ce.Field != "incarnation" {
		t.Errorf("an upload from another launch: %v", err)
	}
	if _, err := k.CheckUpload("j", c0.ID, 0, 0, now+4*sec); err != nil {
		t.Errorf("a late upload of the first launch's own process is still taken: %v", err)
	}

	c1, err := k.Create("j", analysis.CaptureRequest{}, CaptureHints{StepNS: sec}, now+5*sec)
	if err != nil || c1.Incarnation != 1 || c1.StartStep < 59 || c1.StartStep > 59+100 {
		t.Fatalf("capture of the restart: start %d (want a step after 59 of its own launch) %+v %v", c1.StartStep, c1, err)
	}
	if p, _ := k.Pending("j", 0, 500, 0, now+6*sec); p != nil {
		t.Errorf("a straggler of the first launch got the restart's capture: %+v", p)
	}
	if p, err := k.Pending("j", 0, 60, 1, now+6*sec); err != nil || p == nil || p.ID != c1.ID {
		t.Errorf("the restart's own process: %+v %v", p, err)
	}
}
