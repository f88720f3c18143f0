package analysis

import (
	"context"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/sim"
)

// Issue 16 item 6a, StageFrontier: a rank named as the straggler of a
// rise must explain a material part of it. Rank 3 is steadily 10 ms slower
// in data; from step 80 every rank's data stage is 60 ms slower (a shared
// filesystem). Rank 3 still leads the data frontier on every step, but
// the tail it creates did not grow: it is not the cause, and the headline
// must not blame it. The control is the same job where the rise is rank
// 3's own.
func TestStragglerMustExplainTheRise(t *testing.T) {
	for _, c := range []struct {
		name   string
		shared float64 // every rank's extra data time from step 80
		own    float64 // rank 3's extra data time from step 80
		named  bool
		inWhy  string
	}{
		{"shared rise, steady small straggler", 60, 0, false, "does not explain the slowdown"},
		{"the straggler's own rise", 0, 60, true, "leads the frontier"},
		{"both: named with its share", 40, 40, true, "of the stage's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := sim.DDP{Ranks: 8, Steps: 160, Seed: 5, Extra: sim.WithWarmup(func(step, r int) sim.Delays {
				var x sim.Delays
				if r == 3 {
					x[sim.Data] = 10
				}
				if step >= 80 {
					x[sim.Data] += c.shared
					if r == 3 {
						x[sim.Data] += c.own
					}
				}
				return x
			})}
			st := storedJob(t, d.Job("j"), d.Vectors())
			rep, err := New(st, Limits{}).Run(context.Background(), Request{Job: "j"})
			if err != nil {
				t.Fatal(err)
			}
			h := rep.Headline
			if h.Stage != "data.next_wait" || h.Basis != stagefrontier.BasisExcess {
				t.Fatalf("headline on %s by %s: %s", h.Stage, h.Basis, h.Text)
			}
			if (h.Rank == 3) != c.named || (!c.named && h.Withheld != stagefrontier.WithheldNotCause) {
				t.Fatalf("rank %d withheld %q: %s", h.Rank, h.Withheld, h.Text)
			}
			if !strings.Contains(h.Text, c.inWhy) {
				t.Errorf("headline lacks %q: %s", c.inWhy, h.Text)
			}
		})
	}
}
