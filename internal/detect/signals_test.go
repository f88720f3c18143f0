package detect

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/analysis"
)

// A job not seen advancing (finished, or not yet since a restart) is not
// advancing; once its steps advance it is, until ActiveFor passes (what
// KAIR's auto trigger asks, control.Kair).
func TestAdvancing(t *testing.T) {
	det, err := New(Config{Interval: -1}, nil, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	det.now = func() time.Time { return now }
	if det.Advancing("j") {
		t.Fatal("never evaluated: advancing")
	}
	det.mu.Lock()
	det.state["j"] = &jobState{lastStep: 10, vectors: 40} // seen, not advancing
	det.mu.Unlock()
	if det.Advancing("j") {
		t.Fatal("seen, not advancing: advancing")
	}
	det.mu.Lock()
	det.state["j"].advancedAt = now.Add(-time.Minute)
	det.mu.Unlock()
	if !det.Advancing("j") {
		t.Fatal("advanced a minute ago: not advancing")
	}
	det.mu.Lock()
	det.state["j"].advancedAt = now.Add(-time.Hour) // stopped 1h ago (ActiveFor 15m)
	det.mu.Unlock()
	if det.Advancing("j") {
		t.Fatal("stopped an hour ago: advancing")
	}
}

// Suspects are the latest diagnosis's named rank and tie set with its
// exposed step time; an absurd step time (a day or more) is unknown.
func TestSuspects(t *testing.T) {
	det, err := New(Config{Interval: -1}, nil, nil, nil, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ns, r := det.Suspects("j"); ns != 0 || r != nil {
		t.Fatalf("no diagnosis: %d %v", ns, r)
	}
	det.mu.Lock()
	det.latest["j"] = &Summary{ExposedMS: 120, Headline: analysis.Headline{Rank: 3, TieSet: []int{5, 6}}}
	det.mu.Unlock()
	if ns, r := det.Suspects("j"); ns != 120e6 || !slices.Equal(r, []int{3, 5, 6}) {
		t.Fatalf("suspects %d %v", ns, r)
	}
	det.mu.Lock()
	det.latest["j"] = &Summary{ExposedMS: 86_400_000, Headline: analysis.Headline{Rank: -1}}
	det.mu.Unlock()
	if ns, r := det.Suspects("j"); ns != 0 || len(r) != 0 {
		t.Fatalf("a day a step, no rank: %d %v", ns, r)
	}
}
