package store

import (
	"errors"
	"math"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Stored values are outside input after a crash or disk fault: decode must
// never panic, must fail only with ErrCorrupt, and whatever it accepts must
// re-encode to a value that decodes to the same vector.
func FuzzDecodeValue(f *testing.F) {
	v := mkVec(3, 4, 1)
	f.Add(appendValue(nil, &v))
	v.Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 2, Ready: true}, "x": {}}
	v.DataLead, v.Dropped, v.Nested = 2, 9, 1
	f.Add(appendValue(nil, &v))
	f.Add([]byte{})
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d valueDecoder
		var got stagevec.Vector
		err := d.decode(b, &got)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if err := checkEncodable(&got); err != nil {
			t.Fatalf("decoded a vector the encoder rejects: %v", err)
		}
		var again stagevec.Vector
		var d2 valueDecoder
		if err := d2.decode(appendValue(nil, &got), &again); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		if !sameVector(&got, &again) {
			t.Fatalf("re-encode changed the vector:\n%+v\n%+v", got, again)
		}
	})
}

// sameVector compares bit-exactly, so NaNs compare equal to themselves.
func sameVector(a, b *stagevec.Vector) bool {
	if len(a.Durations) != len(b.Durations) || math.Float64bits(a.WallMS) != math.Float64bits(b.WallMS) ||
		a.DataLead != b.DataLead || a.Dropped != b.Dropped || a.Nested != b.Nested || len(a.Probes) != len(b.Probes) {
		return false
	}
	for i := range a.Durations {
		if math.Float64bits(a.Durations[i]) != math.Float64bits(b.Durations[i]) {
			return false
		}
	}
	for k, p := range a.Probes {
		q, ok := b.Probes[k]
		if !ok || q.Ready != p.Ready || math.Float64bits(q.Value) != math.Float64bits(p.Value) {
			return false
		}
	}
	return true
}
