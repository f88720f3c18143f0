package store

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func TestValueRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		v    stagevec.Vector
	}{
		{"empty", stagevec.Vector{}},
		{"six stages", mkVec(7, 3, 1)},
		{"residual omitted", stagevec.Vector{Durations: []float64{1, 2, 3, 4, 5}, WallMS: 16}},
		{"counters", stagevec.Vector{Durations: []float64{0}, DataLead: 3, Dropped: 1 << 40, Nested: 2}},
		{"negative counters survive", stagevec.Vector{DataLead: -1, Dropped: -5, Nested: -7}},
		{"specials", stagevec.Vector{Durations: []float64{math.Inf(1), math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64}, WallMS: math.Inf(-1)}},
		{"one probe", stagevec.Vector{Durations: []float64{1}, Probes: map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 12.5, Ready: true}}}},
		{"many probes", stagevec.Vector{Probes: map[string]stagevec.Probe{"b": {Value: 1}, "a": {Value: 2, Ready: true}, "c": {}}}},
		{"max stages", stagevec.Vector{Durations: make([]float64, signal.MaxStages)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkEncodable(&tc.v); err != nil {
				t.Fatalf("checkEncodable: %v", err)
			}
			b := appendValue(nil, &tc.v)
			var d valueDecoder
			got := stagevec.Vector{Durations: []float64{99, 99, 99, 99, 99, 99, 99, 99}} // stale contents must not leak
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
	v := stagevec.Vector{Durations: []float64{nan}, WallMS: nan}
	var got stagevec.Vector
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
	v.Probes = map[string]stagevec.Probe{"p": {Value: 1, Ready: true}}
	v.Dropped = 300
	b := appendValue(nil, &v)
	var d valueDecoder
	for n := 0; n < len(b); n++ {
		var got stagevec.Vector
		if err := d.decode(b[:n], &got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d/%d bytes: err = %v, want ErrCorrupt", n, len(b), err)
		}
	}
}

func TestValueCorrupt(t *testing.T) {
	valid := appendValue(nil, &stagevec.Vector{Durations: []float64{1}})
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
			var v stagevec.Vector
			if err := d.decode(tc.b, &v); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestCheckEncodable(t *testing.T) {
	tests := []struct {
		name  string
		v     stagevec.Vector
		field string
	}{
		{"negative step", stagevec.Vector{Step: -1}, "step"},
		{"negative rank", stagevec.Vector{Rank: -1}, "rank"},
		{"rank too large", stagevec.Vector{Rank: maxRank + 1}, "rank"},
		{"micro too large", stagevec.Vector{Micro: maxMicro + 1}, "micro"},
		{"too many stages", stagevec.Vector{Durations: make([]float64, signal.MaxStages+1)}, "durations_ms"},
		{"empty probe name", stagevec.Vector{Probes: map[string]stagevec.Probe{"": {}}}, "probes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fe *signal.FieldError
			if err := checkEncodable(&tc.v); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want FieldError on %q", err, tc.field)
			}
		})
	}
}

func TestDecodeReusesNoAlloc(t *testing.T) {
	v := mkVec(1, 2, 0)
	v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 1, Ready: true}}
	b := appendValue(nil, &v)
	var d valueDecoder
	var got stagevec.Vector
	allocs := testing.AllocsPerRun(100, func() {
		if err := d.decode(b, &got); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("steady-state decode allocates %.1f times", allocs)
	}
}

func cloneProbes(m map[string]stagevec.Probe) map[string]stagevec.Probe {
	if m == nil {
		return nil
	}
	c := make(map[string]stagevec.Probe, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
