package model

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func validJob() *Job {
	return &Job{ID: "job-1", WorldSize: 4, Schema: DefaultSchema()}
}

func TestJobValidate(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Job)
		field string // "" = valid
	}{
		{"valid", func(*Job) {}, ""},
		{"bad id", func(j *Job) { j.ID = "has space" }, "id"},
		{"empty id", func(j *Job) { j.ID = "" }, "id"},
		{"zero world", func(j *Job) { j.WorldSize = 0 }, "world_size"},
		{"huge world", func(j *Job) { j.WorldSize = MaxWorldSize + 1 }, "world_size"},
		{"negative accumulation", func(j *Job) { j.Accumulation = -1 }, "accumulation"},
		{"no version", func(j *Job) { j.Schema.Version = "" }, "schema.version"},
		{"residual not last", func(j *Job) { j.Schema.Stages = []string{StageOther, StageData} }, "schema.stages"},
		{"duplicate stage", func(j *Job) { j.Schema.Stages = []string{StageData, StageData, StageOther} }, "schema.stages"},
		{"comma in stage", func(j *Job) { j.Schema.Stages = []string{"a,b", StageOther} }, "schema.stages"},
		{"probe is a stage", func(j *Job) { j.Schema.Probes = []string{StageData} }, "schema.probes"},
		{"rank outside world", func(j *Job) { j.Ranks = []Rank{{Rank: 4}} }, "rank"},
		{"negative local rank", func(j *Job) { j.Ranks = []Rank{{Rank: 1, LocalRank: -1}} }, "local_rank"},
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
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err = %v, want a FieldError on %q", err, c.field)
			}
		})
	}
}

func TestVectorValidate(t *testing.T) {
	j := validJob()
	j.Accumulation = 2
	ok := func() *StageVector {
		return &StageVector{Step: 3, Rank: 1, Micro: 1, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 16,
			Probes: map[string]Probe{ProbeForwardCUDA: {Value: 1.5, Ready: true}}}
	}
	cases := []struct {
		name  string
		edit  func(*StageVector)
		field string
	}{
		{"valid without residual", func(*StageVector) {}, ""},
		{"valid with residual", func(v *StageVector) { v.Durations = append(v.Durations, 1) }, ""},
		{"negative step", func(v *StageVector) { v.Step = -1 }, "step"},
		{"rank outside world", func(v *StageVector) { v.Rank = 4 }, "rank"},
		{"micro beyond accumulation", func(v *StageVector) { v.Micro = 2 }, "micro"},
		{"too few durations", func(v *StageVector) { v.Durations = v.Durations[:3] }, "durations_ms"},
		{"NaN duration", func(v *StageVector) { v.Durations[2] = math.NaN() }, "durations_ms"},
		{"infinite wall", func(v *StageVector) { v.WallMS = math.Inf(1) }, "wall_ms"},
		{"negative lead", func(v *StageVector) { v.DataLead = -1 }, "data_lead"},
		{"negative drops", func(v *StageVector) { v.Dropped = -1 }, "dropped"},
		{"undeclared probe", func(v *StageVector) { v.Probes = map[string]Probe{"x": {}} }, "probes"},
		{"negative ready probe", func(v *StageVector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: -1, Ready: true}} }, "probes"},
		{"not-ready probe value ignored", func(v *StageVector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: -1}} }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := ok()
			c.edit(v)
			err := v.Validate(j)
			var fe *FieldError
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.field != "" && (!errors.As(err, &fe) || fe.Field != c.field):
				t.Fatalf("err = %v, want a FieldError on %q", err, c.field)
			}
		})
	}
}

func TestClosure(t *testing.T) {
	cases := []struct {
		explicit            []float64
		wall                float64
		e, residual, overla float64
	}{
		{[]float64{1, 2, 3}, 10, 4, 4, 0},
		{[]float64{1, 2, 3}, 6, 0, 0, 0},
		{[]float64{4, 4}, 7, -1, 0, 1}, // nested or double-counted spans
	}
	for _, c := range cases {
		e, r, o := Closure(c.explicit, c.wall)
		if e != c.e || r != c.residual || o != c.overla {
			t.Errorf("Closure(%v, %v) = %v %v %v, want %v %v %v", c.explicit, c.wall, e, r, o, c.e, c.residual, c.overla)
		}
	}
}

func TestOrderHash(t *testing.T) {
	a := DefaultSchema()
	b := DefaultSchema()
	if a.OrderHash() != b.OrderHash() {
		t.Fatal("equal schemas must hash equal")
	}
	b.Stages[0], b.Stages[1] = b.Stages[1], b.Stages[0]
	if a.OrderHash() == b.OrderHash() {
		t.Fatal("reordered stages must change the order hash")
	}
	c := DefaultSchema()
	c.Version = "v2"
	if a.OrderHash() == c.OrderHash() {
		t.Fatal("a new schema version must change the order hash")
	}
	// No ambiguity from concatenation: ["ab","c"] vs ["a","bc"].
	x := Schema{Version: "v", Stages: []string{"ab", "c"}}
	y := Schema{Version: "v", Stages: []string{"a", "bc"}}
	if x.OrderHash() == y.OrderHash() {
		t.Fatal("stage boundaries must be part of the hash")
	}
	if a.Index(StageBackward) != 2 || a.Index("nope") != -1 {
		t.Fatal("Index")
	}
}

func TestWindowLayout(t *testing.T) {
	w := NewWindow("j", DefaultSchema(), make([]Rank, 3), []int64{5, 6}, DefaultStages, []int{0, 1, 2, 3, 4, 5})
	T, R, S := w.Dims()
	if T != 2 || R != 3 || S != 6 || len(w.D) != 36 || len(w.Wall) != 6 {
		t.Fatalf("dims %d %d %d, len %d", T, R, S, len(w.D))
	}
	w.Row(1, 2)[4] = 7
	if w.At(1, 2, 4) != 7 || w.D[(1*3+2)*6+4] != 7 {
		t.Fatal("Row and At disagree with the step-major layout")
	}
	if !strings.Contains((&FieldError{Field: "f", Msg: "m"}).Error(), "f: m") {
		t.Fatal("FieldError text")
	}
}
