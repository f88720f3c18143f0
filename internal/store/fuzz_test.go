package store

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
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

// Stored collective values are outside input too: decoding never panics,
// fails only with ErrCorrupt, and what it accepts re-encodes to itself.
func FuzzDecodeCall(f *testing.F) {
	for _, c := range []collective.Call{
		{Rank: 1, Comm: "w", Seq: 3, Op: collective.AllReduce, Bytes: 4096, Peer: -1, Root: -1, Step: -1, EnterNS: 1.7e18, ReturnNS: 1.7e18 + 10},
		{Rank: 2, Comm: "w", Op: collective.Send, Peer: 3, Root: -1, Step: 12, Dtype: "bf16", PID: 9, Stream: 77, Count: 8, Grouped: true,
			EnterNS: 1.7e18, ReturnNS: 1.7e18 + 10, DevStartNS: 1.7e18 - 50, DevEndNS: 1.7e18 + 99},
	} {
		f.Add(appendCall(nil, &c))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0xff, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		const enter = int64(1.7e18)
		got := collective.Call{Rank: 1, Comm: "w", EnterNS: enter}
		var d callReader
		if err := d.decode(b, &got); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		again := collective.Call{Rank: 1, Comm: "w", EnterNS: enter}
		if err := d.decode(appendCall(nil, &got), &again); err != nil || again != got {
			t.Fatalf("re-encode: %v\n%+v\n%+v", err, got, again)
		}
	})
}

func FuzzDecodeComm(f *testing.F) {
	f.Add(appendComm(nil, &commRec{ID: "dp", Size: 3, Parent: "w", Backend: "nccl"}))
	f.Add(appendComm(nil, &commRec{ID: "x"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeComm(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if again, err := decodeComm(appendComm(nil, &m)); err != nil || !reflect.DeepEqual(again, m) {
			t.Fatalf("re-encode: %v", err)
		}
	})
}
