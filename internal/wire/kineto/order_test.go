package kineto

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// Issue 16 item 7d: the Chrome trace format requires no order, so
// ReadTrace must give the same trace for any order of traceEvents.

// orderInputs are traces in Kineto's own order: the golden file, a
// synthetic GPU trace (launches, flows, NCCL kernels inheriting their
// instance) and the real captures of cmd/laggard (torch 1.13 CPU, legacy
// export).
func orderInputs(t testing.TB) map[string][]byte {
	golden, err := os.ReadFile("testdata/rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	in := map[string][]byte{"golden": golden, "synthetic": synthetic(t, 256<<10)}
	files, _ := filepath.Glob("../../../cmd/laggard/testdata/kair/real/*/rank0.json.gz")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		in["real/"+filepath.Base(filepath.Dir(f))] = raw
	}
	if len(files) == 0 {
		t.Fatal("no real captures found")
	}
	return in
}

// splitTrace returns the traceEvents elements and a function that writes
// the trace back with the elements in a given order (a bare array stays a
// bare array; other top-level fields are kept).
func splitTrace(t testing.TB, data []byte) ([]json.RawMessage, func([]json.RawMessage) []byte) {
	var arr []json.RawMessage
	if err := json.Unmarshal(data, &arr); err == nil {
		return arr, func(ev []json.RawMessage) []byte { b, _ := json.Marshal(ev); return b }
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(obj["traceEvents"], &arr); err != nil {
		t.Fatal(err)
	}
	return arr, func(ev []json.RawMessage) []byte {
		o := map[string]json.RawMessage{}
		for k, v := range obj {
			o[k] = v
		}
		o["traceEvents"], _ = json.Marshal(ev)
		b, _ := json.Marshal(o)
		return b
	}
}

// canonical sorts events by optrace.Compare: a trace as a set.
func canonical(ev []optrace.Event) []optrace.Event {
	out := slices.Clone(ev)
	slices.SortFunc(out, func(a, b optrace.Event) int { return optrace.Compare(&a, &b) })
	return out
}

func readAllEvents(t testing.TB, data []byte) ([]optrace.Event, Meta) {
	t.Helper()
	tr, meta, err := ReadTrace(bytes.NewReader(data), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Events, meta
}

// In file order ReadTrace (linking after the whole file, then sorting by
// optrace.Compare) gives exactly the events the streaming Decode gives.
func TestReadTraceInOrderMatchesDecode(t *testing.T) {
	for name, data := range orderInputs(t) {
		t.Run(name, func(t *testing.T) {
			want, dm, err := decodeAll(t, data, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, meta := readAllEvents(t, data)
			for i := range want {
				want[i].Args = nil
				if dm.HasBaseTime {
					want[i].StartNS += dm.BaseTimeNS
				}
			}
			want = canonical(want)
			if !reflect.DeepEqual(got, want) {
				for i := range min(len(got), len(want)) {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Fatalf("event %d: ReadTrace %+v, Decode %+v", i, got[i], want[i])
					}
				}
				t.Fatalf("%d events, Decode %d", len(got), len(want))
			}
			if meta.Reordered != 0 {
				t.Errorf("a file in Kineto's order reported %d reordered events", meta.Reordered)
			}
			steps := 0
			for _, e := range got {
				if e.Step >= 0 {
					steps++
				}
			}
			if steps < len(got)/2 {
				t.Fatalf("only %d of %d events have a step: the input lost its point", steps, len(got))
			}
		})
	}
}

// Any permutation of traceEvents — reversed, the ProfilerStep ranges
// moved after their operators, random shuffles — reads as the same trace;
// Meta.Reordered says the file was out of order.
func TestReadTraceAnyOrder(t *testing.T) {
	for name, data := range orderInputs(t) {
		t.Run(name, func(t *testing.T) {
			want, _ := readAllEvents(t, data)
			want = canonical(want)
			elems, write := splitTrace(t, data)
			rangesLast := slices.Clone(elems)
			slices.SortStableFunc(rangesLast, func(a, b json.RawMessage) int {
				ra, rb := bytes.Contains(a, []byte(stepPrefix)), bytes.Contains(b, []byte(stepPrefix))
				switch {
				case ra == rb:
					return 0
				case ra:
					return 1
				}
				return -1
			})
			perms := map[string][]json.RawMessage{"ranges last": rangesLast, "reversed": slices.Clone(elems)}
			slices.Reverse(perms["reversed"])
			for s := range uint64(3) {
				p := slices.Clone(elems)
				r := rand.New(rand.NewPCG(s, 7))
				r.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
				perms[fmt.Sprintf("shuffle %d", s)] = p
			}
			for pn, p := range perms {
				got, meta := readAllEvents(t, write(p))
				if g := canonical(got); !reflect.DeepEqual(g, want) {
					for i := range min(len(g), len(want)) {
						if !reflect.DeepEqual(g[i], want[i]) {
							t.Fatalf("%s: event %d (by content): %+v, in order %+v", pn, i, g[i], want[i])
						}
					}
					t.Fatalf("%s: %d events, in order %d", pn, len(g), len(want))
				}
				if meta.Reordered == 0 {
					t.Errorf("%s: Meta.Reordered 0 for a file out of order", pn)
				}
			}
		})
	}
}

// FuzzReadTraceOrder: whatever trace decodes, a shuffle of its elements
// decodes to the same events (as a set).
func FuzzReadTraceOrder(f *testing.F) {
	golden, err := os.ReadFile("testdata/rank1.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden, uint64(1))
	f.Add(synthetic(f, 8<<10), uint64(2))
	f.Add([]byte(`[{"ph":"X","name":"a","ts":1,"dur":1,"args":{"correlation":3}},{"ph":"s","id":3,"ts":1},{"ph":"X","name":"ProfilerStep#9","ts":0,"dur":10},{"ph":"X","cat":"kernel","name":"ncclKernel","pid":0,"tid":7,"ts":4,"dur":2,"args":{"correlation":3}},{"ph":"X","cat":"cpu_op","name":"record_param_comms","ts":0,"dur":3,"args":{"Process Group Name":"0","Seq":5}}]`), uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		var arr []json.RawMessage
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &arr) != nil && (json.Unmarshal(data, &obj) != nil || json.Unmarshal(obj["traceEvents"], &arr) != nil) {
			return
		}
		write := func() []byte {
			if obj == nil {
				b, _ := json.Marshal(arr)
				return b
			}
			obj["traceEvents"], _ = json.Marshal(arr)
			b, _ := json.Marshal(obj)
			return b
		}
		// The trace as encoding/json writes it back (it reads duplicate
		// names and escapes differently from the decoder), in its order.
		tr, _, err := ReadTrace(bytes.NewReader(write()), ReadOptions{MaxEvents: 1 << 14})
		if err != nil {
			return
		}
		r := rand.New(rand.NewPCG(seed, 1))
		r.Shuffle(len(arr), func(i, j int) { arr[i], arr[j] = arr[j], arr[i] })
		tr2, _, err := ReadTrace(bytes.NewReader(write()), ReadOptions{MaxEvents: 1 << 14})
		if err != nil {
			t.Fatalf("the shuffled trace fails: %v", err)
		}
		if a, b := canonical(tr.Events), canonical(tr2.Events); !reflect.DeepEqual(a, b) {
			t.Fatalf("shuffle changed the trace:\n%+v\n%+v", a, b)
		}
	})
}
