package analysis

import (
	"math"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Merging many maximal imported counts saturates instead of wrapping to a
// negative total (review finding 9).
func TestProfileBuilderSaturates(t *testing.T) {
	b := newProfileBuilder(0, 1, 2)
	q := &stack.Profile{Funcs: []stack.Func{{Name: "f"}}, Stacks: []stack.Stack{{Frames: []int32{0}, Count: math.MaxInt64 / 3}}}
	for range 5 {
		b.add(q)
	}
	p := b.profile()
	if p.Total != math.MaxInt64 || p.Stacks[0].Count != math.MaxInt64 {
		t.Fatalf("total %d, count %d: want saturation at MaxInt64", p.Total, p.Stacks[0].Count)
	}
}
