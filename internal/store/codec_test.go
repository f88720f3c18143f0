package store

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/laggard-dev/laggard/internal/model"
)

func TestValueRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		v    model.StageVector
	}{
		{"empty", model.StageVector{}},
		{"six stages", mkVec(7, 3, 1)},
		{"residual omitted", model.StageVector{Durations: []float64{1, 2, 3, 4, 5}, WallMS: 16}},
		{"counters", model.StageVector{Durations: []float64{0}, DataLead: 3, Dropped: 1 << 40, Nested: 2}},
		{"negative counters survive", model.StageVector{DataLead: -1, Dropped: -5, Nested: -7}},
		{"specials", model.StageVector{Durations: []float64{math.Inf(1), math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64}, WallMS: math.Inf(-1)}},
		{"one probe", model.StageVector{Durations: []float64{1}, Probes: map[string]model.Probe{model.ProbeForwardCUDA: {Value: 12.5, Ready: true}}}},
		{"many probes", model.StageVector{Probes: map[string]model.Probe{"b": {Value: 1}, "a": {Value: 2, Ready: true}, "c": {}}}},
		{"max stages", model.StageVector{Durations: make([]float64, model.MaxStages)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkEncodable(&tc.v); err != nil {
				t.Fatalf("checkEncodable: %v", err)
			}
			b := appendValue(nil, &tc.v)
			var d valueDecoder
			got := model.StageVector{Durations: []float64{99, 99, 99, 99, 99, 99, 99, 99}} // stale contents must not leak
			if err := d.decode(b, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			want := tc.v
			want.Step, want.Rank, want.Micro = 0, 0, 0 // coordinates live in the key
			if want.Durations == nil {
				want.Durations = []float64{}
			}
			got.Probes = cloneProbes(got.Probes)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
			if again := appendValue(nil, &got); string(again) != string(b) {
				t.Fatalf("re-encoding differs: %x vs %x", again, b)
			}
		})
	}
}

func TestValueNaNBitExact(t *testing.T) {
	nan := math.Float64frombits(0x7ff8_0000_dead_beef)
	v := model.StageVector{Durations: []float64{nan}, WallMS: nan}
	var got model.StageVector
	var d valueDecoder
	if err := d.decode(appendValue(nil, &v), &got); err != nil {
		t.Fatal(err)
	}
	if math.Float64bits(got.Durations[0]) != 0x7ff8_0000_dead_beef || math.Float64bits(got.WallMS) != 0x7ff8_0000_dead_beef {
		t.Fatalf("NaN payload not preserved: %x %x", math.Float64bits(got.Durations[0]), math.Float64bits(got.WallMS))
	}
}

// Every strict prefix of a valid value is truncated and must be rejected.
func TestValueTruncated(t *testing.T) {
	v := mkVec(1, 2, 0)
	v.Probes = map[string]model.Probe{"p": {Value: 1, Ready: true}}
	v.Dropped = 300
	b := appendValue(nil, &v)
	var d valueDecoder
	for n := 0; n < len(b); n++ {
		var got model.StageVector
		if err := d.decode(b[:n], &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d/%d bytes: err = %v, want ErrCorrupt", n, len(b), err)
		}
	}
}

func TestValueCorrupt(t *testing.T) {
	valid := appendValue(nil, &model.StageVector{Durations: []float64{1}})
	tests := []struct {
		name string
		b    []byte
	}{
		{"bad version", append([]byte{9}, valid[1:]...)},
		{"too many durations", []byte{1, 65}},
		{"huge durations count", []byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"trailing byte", append(append([]byte(nil), valid...), 0)},
		{"too many probes", append(append([]byte(nil), valid[:len(valid)-1]...), 65)},
		{"empty probe name", append(append([]byte(nil), valid[:len(valid)-1]...), 1, 0, 0)},
		{"bad ready byte", append(append([]byte(nil), valid[:len(valid)-1]...), 1, 1, 'p', 2, 0, 0, 0, 0, 0, 0, 0, 0)},
		{"duplicate probe", append(append([]byte(nil), valid[:len(valid)-1]...), 2, 1, 'p', 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'p', 1, 0, 0, 0, 0, 0, 0, 0, 0)},
		{"data_lead overflows int32", func() []byte {
			b := []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
			b = append(b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01) // varint 2^35
			return append(b, 0, 0, 0)
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d valueDecoder
			var v model.StageVector
			if err := d.decode(tc.b, &v); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestCheckEncodable(t *testing.T) {
	tests := []struct {
		name  string
		v     model.StageVector
		field string
	}{
		{"negative step", model.StageVector{Step: -1}, "step"},
		{"negative rank", model.StageVector{Rank: -1}, "rank"},
		{"rank too large", model.StageVector{Rank: maxRank + 1}, "rank"},
		{"micro too large", model.StageVector{Micro: maxMicro + 1}, "micro"},
		{"too many stages", model.StageVector{Durations: make([]float64, model.MaxStages+1)}, "durations_ms"},
		{"empty probe name", model.StageVector{Probes: map[string]model.Probe{"": {}}}, "probes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fe *model.FieldError
			if err := checkEncodable(&tc.v); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want FieldError on %q", err, tc.field)
			}
		})
	}
}

func TestDecodeReusesNoAlloc(t *testing.T) {
	v := mkVec(1, 2, 0)
	v.Probes = map[string]model.Probe{model.ProbeForwardCUDA: {Value: 1, Ready: true}}
	b := appendValue(nil, &v)
	var d valueDecoder
	var got model.StageVector
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.decode(b, &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("steady-state decode allocates %.1f times", allocs)
	}
}

func cloneProbes(m map[string]model.Probe) map[string]model.Probe {
	if m == nil {
		return nil
	}
	c := make(map[string]model.Probe, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
