package ingest

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Every signal kind is charged its decoded size through *Item, so one
// queue bounds them all by what they hold.
func TestItemCost(t *testing.T) {
	calls := make([]collective.Call, 100)
	for i := range calls {
		calls[i] = collective.Call{Comm: "world", Dtype: "float32"}
	}
	b := &collective.Batch{Calls: calls, Comms: []collective.Comm{{ID: "world", Ranks: []int{0, 1}}}}
	it := &Item{Collectives: b}
	if got, min := Cost(it), 100*callSize; got < min {
		t.Fatalf("collective cost %d below the structs' %d", got, min)
	}
	if it.Records() != 101 {
		t.Fatalf("records %d", it.Records())
	}
	vs := []stagevec.Vector{{Durations: make([]float64, 6)}}
	if Cost(&Item{Vectors: vs}) != VectorsCost(vs) {
		t.Fatal("a vector item is not charged as its vectors")
	}
	if Cost((*Item)(nil)) != 0 {
		t.Fatal("nil item")
	}
}
