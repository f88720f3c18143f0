package signal_test

import (
	"errors"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func validJob() *signal.Job {
	return &signal.Job{ID: "job-1", WorldSize: 4, Schema: stagevec.DefaultSchema()}
}

func TestJobValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*signal.Job)
		field string // "" = valid
	}{
		{"valid", func(*signal.Job) {}, ""},
		{"bad id", func(j *signal.Job) { j.ID = "has space" }, "id"},
		{"empty id", func(j *signal.Job) { j.ID = "" }, "id"},
		{"zero world", func(j *signal.Job) { j.WorldSize = 0 }, "world_size"},
		{"huge world", func(j *signal.Job) { j.WorldSize = signal.MaxWorldSize + 1 }, "world_size"},
		{"negative accumulation", func(j *signal.Job) { j.Accumulation = -1 }, "accumulation"},
		{"no version", func(j *signal.Job) { j.Schema.Version = "" }, "schema.version"},
		{"residual not last", func(j *signal.Job) { j.Schema.Stages = []string{stagevec.StageOther, stagevec.StageData} }, "schema.stages"},
		{"duplicate stage", func(j *signal.Job) {
			j.Schema.Stages = []string{stagevec.StageData, stagevec.StageData, stagevec.StageOther}
		}, "schema.stages"},
		{"comma in stage", func(j *signal.Job) { j.Schema.Stages = []string{"a,b", stagevec.StageOther} }, "schema.stages"},
		{"probe is a stage", func(j *signal.Job) { j.Schema.Probes = []string{stagevec.StageData} }, "schema.probes"},
		{"rank outside world", func(j *signal.Job) { j.Ranks = []signal.Rank{{Rank: 4}} }, "rank"},
		{"negative local rank", func(j *signal.Job) { j.Ranks = []signal.Rank{{Rank: 1, LocalRank: -1}} }, "local_rank"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := validJob()
			c.edit(j)
			err := j.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err = %v, want a FieldError on %q", err, c.field)
			}
		})
	}
}

func TestOrderHash(t *testing.T) {
	a := stagevec.DefaultSchema()
	b := stagevec.DefaultSchema()
	if a.OrderHash() != b.OrderHash() {
		t.Fatal("equal schemas must hash equal")
	}
	b.Stages[0], b.Stages[1] = b.Stages[1], b.Stages[0]
	if a.OrderHash() == b.OrderHash() {
		t.Fatal("reordered stages must change the order hash")
	}
	c := stagevec.DefaultSchema()
	c.Version = "v2"
	if a.OrderHash() == c.OrderHash() {
		t.Fatal("a new schema version must change the order hash")
	}
	// No ambiguity from concatenation: ["ab","c"] vs ["a","bc"].
	x := signal.Schema{Version: "v", Stages: []string{"ab", "c"}}
	y := signal.Schema{Version: "v", Stages: []string{"a", "bc"}}
	if x.OrderHash() == y.OrderHash() {
		t.Fatal("stage boundaries must be part of the hash")
	}
	if a.Index(stagevec.StageBackward) != 2 || a.Index("nope") != -1 {
		t.Fatal("Index")
	}
}
