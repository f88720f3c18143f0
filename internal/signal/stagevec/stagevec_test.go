package stagevec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

func validJob() *signal.Job {
	return &signal.Job{ID: "job-1", WorldSize: 4, Schema: DefaultSchema()}
}

// TestVectorValidate includes the D5 regression cases (huge finite values
// and counters are refused, naming the field).
func TestVectorValidate(t *testing.T) {
	j := validJob()
	j.Accumulation = 2
	ok := func() *Vector {
		return &Vector{Step: 3, Rank: 1, Micro: 1, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 16,
			Probes: map[string]Probe{ProbeForwardCUDA: {Value: 1.5, Ready: true}}}
	}
	cases := []struct {
		name  string
		edit  func(*Vector)
		field string
	}{
		{"valid without residual", func(*Vector) {}, ""},
		{"valid with residual", func(v *Vector) { v.Durations = append(v.Durations, 1) }, ""},
		{"negative step", func(v *Vector) { v.Step = -1 }, "step"},
		{"rank outside world", func(v *Vector) { v.Rank = 4 }, "rank"},
		{"micro beyond accumulation", func(v *Vector) { v.Micro = 2 }, "micro"},
		{"too few durations", func(v *Vector) { v.Durations = v.Durations[:3] }, "durations_ms"},
		{"NaN duration", func(v *Vector) { v.Durations[2] = math.NaN() }, "durations_ms"},
		{"infinite wall", func(v *Vector) { v.WallMS = math.Inf(1) }, "wall_ms"},
		{"negative lead", func(v *Vector) { v.DataLead = -1 }, "data_lead"},
		{"negative drops", func(v *Vector) { v.Dropped = -1 }, "dropped"},
		{"undeclared probe", func(v *Vector) { v.Probes = map[string]Probe{"x": {}} }, "probes"},
		{"negative ready probe", func(v *Vector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: -1, Ready: true}} }, "probes"},
		{"not-ready probe value ignored", func(v *Vector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: -1}} }, ""},
		// D5: huge finite values and out-of-range counters.
		{"huge duration", func(v *Vector) { v.Durations[0] = 1e308 }, "durations_ms"},
		{"duration just over a day", func(v *Vector) { v.Durations[0] = MaxDurationMS + 1 }, "durations_ms"},
		{"duration of exactly a day", func(v *Vector) { v.Durations[0] = MaxDurationMS; v.WallMS = MaxDurationMS }, ""},
		{"huge wall", func(v *Vector) { v.WallMS = 1e308 }, "wall_ms"},
		{"step beyond MaxStep", func(v *Vector) { v.Step = MaxStep + 1 }, "step"},
		{"step 2^62", func(v *Vector) { v.Step = 1 << 62 }, "step"},
		{"step at MaxStep", func(v *Vector) { v.Step = MaxStep }, ""},
		{"huge drops", func(v *Vector) { v.Dropped = math.MaxInt64 }, "dropped"},
		{"huge nested", func(v *Vector) { v.Nested = math.MaxInt }, "nested"},
		{"huge ready probe", func(v *Vector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: 1e308, Ready: true}} }, "probes"},
		{"NaN not-ready probe", func(v *Vector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: math.NaN()}} }, "probes"},
		{"huge not-ready probe", func(v *Vector) { v.Probes = map[string]Probe{ProbeForwardCUDA: {Value: -1e308}} }, "probes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := ok()
			c.edit(v)
			err := v.Validate(j)
			var fe *signal.FieldError
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

func TestWindowLayout(t *testing.T) {
	w := NewWindow("j", DefaultSchema(), make([]signal.Rank, 3), []int64{5, 6}, DefaultStages, []int{0, 1, 2, 3, 4, 5})
	T, R, S := w.Dims()
	if T != 2 || R != 3 || S != 6 || len(w.D) != 36 || len(w.Wall) != 6 {
		t.Fatalf("dims %d %d %d, len %d", T, R, S, len(w.D))
	}
	w.Row(1, 2)[4] = 7
	if w.At(1, 2, 4) != 7 || w.D[(1*3+2)*6+4] != 7 {
		t.Fatal("Row and At disagree with the step-major layout")
	}
	if !strings.Contains((&signal.FieldError{Field: "f", Msg: "m"}).Error(), "f: m") {
		t.Fatal("FieldError text")
	}
}

// TestD5_HugeValuesRejected: 1e308 passed Validate before value bounds.
func TestD5_HugeValuesRejected(t *testing.T) {
	v := &Vector{Step: 1, Rank: 0, Durations: []float64{1e308, 2, 3, 4, 5}, WallMS: 1e308}
	err := v.Validate(validJob())
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "durations_ms" || !strings.Contains(fe.Msg, "86400000") {
		t.Fatalf("err = %v, want a durations_ms error naming the one-day bound", err)
	}
	long := &Vector{Step: 1, Rank: 0, Durations: []float64{1, 2, 3, 4, 5}, WallMS: 15, Probes: map[string]Probe{strings.Repeat("p", 1<<20): {}}}
	if err := long.Validate(validJob()); err == nil || len(err.Error()) > 200 {
		t.Fatalf("undeclared 1 MiB probe name: error of %d bytes, want a short one", len(err.Error()))
	}
}

func TestStepRange(t *testing.T) {
	cases := []struct {
		first, last, lo, hi int64
	}{
		{0, 0, 0, MinStepSlack},           // a fresh job
		{0, 1000, 0, 1000 + MinStepSlack}, // short history: the absolute allowance
		{1 << 30, 1<<30 + 1<<26 - 1, 1<<30 - 8<<26, 1<<30 + 1<<26 - 1 + 8<<26}, // long history: 8× its span
		{MaxStep - 5, MaxStep, MaxStep - 5 - MinStepSlack, MaxStep},            // capped at MaxStep
		{1 << 62, 1<<63 - 1, MaxStep - MinStepSlack, MaxStep},                  // a store from before MaxStep: clamped, no overflow
		{-5, -1, 0, MinStepSlack},                                              // never below 0
	}
	for _, c := range cases {
		lo, hi := StepRange(c.first, c.last)
		if lo != c.lo || hi != c.hi {
			t.Errorf("StepRange(%d, %d) = [%d, %d], want [%d, %d]", c.first, c.last, lo, hi, c.lo, c.hi)
		}
	}
}
