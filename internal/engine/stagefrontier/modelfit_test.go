package stagefrontier

import (
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

func TestModelFitFromJob(t *testing.T) {
	cases := []struct {
		labels map[string]string
		want   bool
	}{
		{nil, false},
		{map[string]string{"sync_model": "ddp"}, true},
		{map[string]string{"sync_model": "fsdp"}, true},
		{map[string]string{"sync_model": "zero1"}, true},
		{map[string]string{"sync_model": "moe"}, false},
		{map[string]string{"sync_model": "DDP"}, false}, // exact tokens only
	}
	for _, c := range cases {
		if got := ModelFitFromJob(&signal.Job{Labels: c.labels}); got != c.want {
			t.Errorf("labels %v: model fit %v, want %v", c.labels, got, c.want)
		}
	}
	if ModelFitFromJob(nil) {
		t.Error("nil job must not assert model fit")
	}
}
