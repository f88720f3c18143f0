package signal

import (
	"errors"
	"strings"
	"testing"
)

// D9: job metadata is bounded, and the error names the field and limit.
func TestD9_JobMetadataLimits(t *testing.T) {
	base := func() *Job {
		return &Job{ID: "j", WorldSize: 4, Schema: Schema{Version: "v1", Stages: []string{"a", ResidualStage}}}
	}
	manyLabels := map[string]string{}
	for i := range MaxLabels + 1 {
		manyLabels[strings.Repeat("k", i+1)] = "v"
	}
	cases := []struct {
		name  string
		edit  func(j *Job)
		field string
	}{
		{"id too long", func(j *Job) { j.ID = strings.Repeat("a", 129) }, "id"},
		{"name too long", func(j *Job) { j.Name = strings.Repeat("n", 257) }, "name"},
		{"1 MiB label", func(j *Job) { j.Labels = map[string]string{"big": strings.Repeat("x", 1<<20)} }, "labels.big"},
		{"too many labels", func(j *Job) { j.Labels = manyLabels }, "labels"},
		{"empty label name", func(j *Job) { j.Labels = map[string]string{"": "v"} }, "labels"},
		{"world too large", func(j *Job) { j.WorldSize = MaxWorldSize + 1 }, "world_size"},
		{"more ranks than world", func(j *Job) { j.Ranks = make([]Rank, 5) }, "ranks"},
		{"too many groups", func(j *Job) { j.Groups = make([]GroupSchema, MaxGroupSchemas+1) }, "groups"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := base()
			if err := j.Validate(); err != nil {
				t.Fatalf("base job invalid: %v", err)
			}
			c.edit(j)
			err := j.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, want a field error on %q", err, c.field)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error echoes the value: %d bytes", len(err.Error()))
			}
		})
	}
	ok := base()
	ok.Labels = map[string]string{"team": strings.Repeat("x", MaxLabelValueBytes)}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a label at the limit: %v", err)
	}
}
