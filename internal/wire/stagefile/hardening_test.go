package stagefile

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Regression tests for issue 6 on the readers behind `laggard analyze`.

const hardHead = `{"job":{"id":"j","world_size":2,"schema":{"version":"v","stages":["a","b","step.other_cpu_wall"]}}}` + "\n"

// TestD5_StagefileHugeValuesRejected: a stage matrix with 1e308 used to
// be read, then `laggard analyze` panicked (strings: negative Repeat
// count). The readers now refuse it with an error naming the line and
// field, in JSONL and CSV alike.
func TestD5_StagefileHugeValuesRejected(t *testing.T) {
	cases := []struct {
		name, in, line, field string
		csv                   bool
	}{
		{"jsonl duration", hardHead + `{"step":1,"rank":0,"durations_ms":[1,2],"wall_ms":3}` + "\n" + `{"step":1,"rank":1,"durations_ms":[1e308,2],"wall_ms":3}`, "line 3", "durations_ms", false},
		{"jsonl wall", hardHead + `{"step":1,"rank":1,"durations_ms":[1,2],"wall_ms":1e308}`, "line 2", "wall_ms", false},
		{"jsonl step 2^62", hardHead + `{"step":4611686018427387904,"rank":1,"durations_ms":[1,2],"wall_ms":3}`, "line 2", "step", false},
		{"jsonl step 2^63-1", hardHead + `{"step":9223372036854775807,"rank":1,"durations_ms":[1,2],"wall_ms":3}`, "line 2", "step", false},
		{"jsonl dropped", hardHead + `{"step":1,"rank":1,"durations_ms":[1,2],"wall_ms":3,"dropped":9223372036854775807}`, "line 2", "dropped", false},
		{"csv duration", "step,rank,a,b,wall_ms\n1,0,1,2,3\n2,0,1e308,2,3\n", "line 3", "durations_ms", true},
		{"csv wall", "step,rank,a,b,wall_ms\n1,0,1,2,1e308\n", "line 2", "wall_ms", true},
		{"csv overflowing float", "step,rank,a,b,wall_ms\n1,0,1e400,2,3\n", "line 2", "a", true},
		{"csv step 2^63-1", "step,rank,a,b,wall_ms\n9223372036854775807,0,1,2,3\n", "line 2", "step", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panic: %v", p)
					}
				}()
				if c.csv {
					_, err = ReadCSV(strings.NewReader(c.in), "j", Sink{})
				} else {
					_, err = ReadJSONL(strings.NewReader(c.in), Sink{})
				}
			}()
			var fe *signal.FieldError
			if err == nil || !strings.Contains(err.Error(), c.line) || !errors.As(err, &fe) || !strings.HasSuffix(fe.Field, c.field) {
				t.Fatalf("err = %v, want %s naming %s", err, c.line, c.field)
			}
		})
	}
}

// TestD13_StagefileDuplicateKeysAndShortErrors: duplicate keys in a
// stage-matrix line are errors (they were last-wins), and a 10 MB bad
// value is not echoed back.
func TestD13_StagefileDuplicateKeysAndShortErrors(t *testing.T) {
	big := strings.Repeat("x", 10<<20)
	cases := []struct {
		name, in, want string
		csv            bool
	}{
		{"duplicate step", hardHead + `{"step":1,"step":2,"rank":0,"durations_ms":[1,2],"wall_ms":3}`, "step: duplicate key", false},
		{"duplicate header field", `{"job":{"id":"j","id":"k","world_size":2}}`, "job.id: duplicate key", false},
		{"long unknown field", hardHead + `{"` + big + `":1}`, "unknown field", false},
		{"long string step", hardHead + `{"step":"` + big + `"}`, "step", false},
		{"long csv cell", "step,rank,a,b,wall_ms\n" + big + ",0,1,2,3\n", "not an integer", true},
		{"long csv float cell", "step,rank,a,b,wall_ms\n1,0," + big + ",2,3\n", "not a number", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.csv {
				_, err = ReadCSV(strings.NewReader(c.in), "j", Sink{})
			} else {
				_, err = ReadJSONL(strings.NewReader(c.in), Sink{})
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %.300v, want one containing %q", err, c.want)
			}
			if n := len(err.Error()); n >= 1024 {
				t.Fatalf("error of %d bytes, want < 1 KiB", n)
			}
		})
	}
}

// FuzzReadJSONLValues feeds the JSONL reader vectors whose numbers range
// over every float64 and int64 (bit patterns, not bytes 0–255), so huge,
// tiny, negative, NaN-adjacent and boundary values are all reached. The
// reader must not panic, and whatever it accepts must satisfy the value
// bounds.
func FuzzReadJSONLValues(f *testing.F) {
	f.Add(math.Float64bits(1), math.Float64bits(2), math.Float64bits(3), uint64(1), uint64(0))
	f.Add(math.Float64bits(1e308), math.Float64bits(-0.0), math.Float64bits(stagevec.MaxDurationMS), uint64(1)<<62, uint64(math.MaxInt64))
	f.Add(math.Float64bits(math.SmallestNonzeroFloat64), math.Float64bits(stagevec.MaxDurationMS+1), math.Float64bits(math.MaxFloat64), uint64(stagevec.MaxStep), uint64(1)<<63)
	f.Fuzz(func(t *testing.T, a, b, wall, step, dropped uint64) {
		num := func(bits uint64) string {
			x := math.Float64frombits(bits)
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "1e999" // JSON has no NaN/Inf: the closest a file can get
			}
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
		line := `{"step":` + strconv.FormatInt(int64(step), 10) + `,"rank":1,"durations_ms":[` + num(a) + `,` + num(b) + `],"wall_ms":` + num(wall) +
			`,"dropped":` + strconv.FormatInt(int64(dropped), 10) + `}`
		_, err := ReadJSONL(strings.NewReader(hardHead+line), Sink{Vector: func(v *stagevec.Vector) error {
			for _, d := range append(v.Durations, v.WallMS) {
				if !stagevec.ValidDuration(d) {
					t.Fatalf("accepted duration %v", d)
				}
			}
			if v.Step < 0 || v.Step > stagevec.MaxStep || v.Dropped < 0 || v.Dropped > stagevec.MaxCount {
				t.Fatalf("accepted step %d dropped %d", v.Step, v.Dropped)
			}
			return nil
		}})
		if err != nil && len(err.Error()) > 1024 {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}

// FuzzReadCSVValues is FuzzReadJSONLValues for the CSV reader.
func FuzzReadCSVValues(f *testing.F) {
	f.Add(math.Float64bits(1), math.Float64bits(2), math.Float64bits(3), uint64(1))
	f.Add(math.Float64bits(1e308), math.Float64bits(math.Inf(1)), math.Float64bits(math.NaN()), uint64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, a, b, wall, step uint64) {
		num := func(bits uint64) string { return strconv.FormatFloat(math.Float64frombits(bits), 'g', -1, 64) } // NaN, +Inf too
		in := "step,rank,a,b,wall_ms\n" + strconv.FormatInt(int64(step), 10) + ",1," + num(a) + "," + num(b) + "," + num(wall) + "\n"
		_, err := ReadCSV(strings.NewReader(in), "j", Sink{Vector: func(v *stagevec.Vector) error {
			for _, d := range append(v.Durations, v.WallMS) {
				if !stagevec.ValidDuration(d) {
					t.Fatalf("accepted duration %v", d)
				}
			}
			if v.Step < 0 || v.Step > stagevec.MaxStep {
				t.Fatalf("accepted step %d", v.Step)
			}
			return nil
		}})
		_ = err // rejection is fine; a panic or a bad vector is not
	})
}
