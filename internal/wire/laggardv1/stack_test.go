package laggardv1

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

func sampleStacks() *stack.Batch {
	return &stack.Batch{Node: "n1", StartNS: enter0, EndNS: enter0 + 5e9, Hz: 99, Ratio: 0.1, Dropped: 3,
		Mappings: []stack.Mapping{{Start: 0x400000, Limit: 0x500000, Offset: 0x1000, BuildID: "abcdef0123", Path: "/usr/bin/python3.11"},
			{Start: 0x7f0000000000, Limit: 0x7f0000100000, Path: "/lib/libc.so.6"}},
		Samples: []stack.Sample{
			{Rank: 0, PID: 10, TID: 11, Comm: "python3", Thread: "pt_main", Count: 7, Frames: []stack.Frame{
				{Kind: stack.Native, Addr: 0x401234, Mapping: 0},
				{Kind: stack.Python, Mapping: -1, Func: "train_step", File: "train.py", Line: 42},
				{Kind: stack.Kernel, Addr: 0xffffffff81000000, Mapping: -1, Func: "do_syscall_64"}}},
			{Rank: 1, PID: 99, TID: 99, Comm: "hog", Foreign: true, Count: 1, Truncated: true, Frames: []stack.Frame{
				{Kind: stack.Native, Addr: 0x10, Mapping: 1}, {Kind: stack.Native, Addr: 0x20, Mapping: -1, Func: "main"}}},
			{Rank: -1, PID: 5, Count: 2, Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "a"}}},
		},
		Unwind: stack.UnwindStats{FPFrames: 10, DWARFFrames: 4, FallbackFrames: 1, PythonFrames: 2, Truncated: 1}}
}

func TestStacksRoundTrip(t *testing.T) {
	want := sampleStacks()
	js, err := MarshalJSONStacks(want)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := UnmarshalJSONStacks(js)
	if err != nil {
		t.Fatal(err)
	}
	pbb, err := MarshalProtoStacks(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	fromProto, err := UnmarshalProtoStacks(pbb)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, want) || !reflect.DeepEqual(fromProto, want) {
		t.Fatalf("round trip changed the batch:\njson  %+v\nproto %+v\nwant  %+v", fromJSON, fromProto, want)
	}
	// Interning: a name repeated across samples is sent once.
	var m pb.StackBatch
	if err := proto.Unmarshal(pbb, &m); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range m.Strings {
		if seen[s] {
			t.Fatalf("string %q interned twice", s)
		}
		seen[s] = true
	}
}

func TestStacksJSONDefaults(t *testing.T) {
	b, err := UnmarshalJSONStacks([]byte(`{"start_ns":1,"end_ns":2,"samples":[{"rank":0,"count":1,"frames":[{"kind":"symbol","func":"f"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if f := b.Samples[0].Frames[0]; f.Mapping != -1 || f.Kind != stack.Symbol {
		t.Fatalf("frame defaults: %+v", f)
	}
}

func TestStacksErrorsNameField(t *testing.T) {
	const frame = `{"kind":"symbol","func":"f"}`
	sample := `{"rank":0,"count":1,"frames":[` + frame + `]}`
	body := func(samples ...string) string {
		return `{"start_ns":1,"end_ns":2,"samples":[` + strings.Join(samples, ",") + `]}`
	}
	for _, c := range []struct{ name, body, field string }{
		{"count", body(sample, strings.Replace(sample, `"count":1`, `"count":0`, 1)), "samples[1].count"},
		{"kind", body(strings.Replace(sample, `"symbol"`, `"bogus"`, 1)), "samples[0].frames[0].kind"},
		{"unknown frame field", body(strings.Replace(sample, `"func":"f"`, `"func":"f","x":1`, 1)), "samples[0].frames[0].x"},
		{"unknown sample field", body(strings.Replace(sample, `"rank":0`, `"rank":0,"y":1`, 1)), "samples[0].y"},
		{"unknown top", `{"start_ns":1,"end_ns":2,"z":[]}`, "z"},
		{"duplicate", `{"start_ns":1,"start_ns":1}`, "start_ns"},
		{"mapping", body(strings.Replace(sample, `"func":"f"`, `"func":"f","mapping":3`, 1)), "samples[0].frames[0].mapping"},
		{"window", `{"start_ns":5,"end_ns":2,"samples":[]}`, "end_ns"},
		{"no frames", body(`{"rank":0,"count":1,"frames":[]}`), "samples[0].frames"},
		{"frames not array", body(`{"rank":0,"count":1,"frames":{}}`), "samples[0].frames"},
		{"mapping build id", `{"start_ns":1,"end_ns":2,"mappings":[{"start":1,"limit":2,"build_id":"XYZ"}]}`, "mappings[0].build_id"},
		{"sample type", body(`{"rank":"0"}`), "samples[0].rank"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := UnmarshalJSONStacks([]byte(c.body))
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, want a FieldError on %q", err, c.field)
			}
		})
	}
}

func TestStacksCaps(t *testing.T) {
	// One sample over MaxFrames: refused before Validate would see it.
	var sb strings.Builder
	sb.WriteString(`{"start_ns":1,"end_ns":2,"samples":[{"rank":0,"count":1,"frames":[`)
	for i := 0; i <= stack.MaxFrames; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"kind":"symbol","func":"f"}`)
	}
	sb.WriteString(`]}]}`)
	if _, err := UnmarshalJSONStacks([]byte(sb.String())); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("JSON frames cap: %v", err)
	}
	// Protobuf: the same, counted on the packed bytes.
	ps := &pb.StackSample{Count: 1, Kind: make([]uint32, stack.MaxFrames+1)}
	b, _ := proto.Marshal(&pb.StackBatch{StartNs: 1, EndNs: 2, Samples: []*pb.StackSample{ps}})
	if _, err := UnmarshalProtoStacks(b); err == nil || !strings.Contains(err.Error(), "frames") {
		t.Fatalf("proto frames cap: %v", err)
	}
	// Batch-wide frames cap.
	ps = &pb.StackSample{Count: 1, Kind: make([]uint32, stack.MaxFrames)}
	n := MaxBatchFrames/stack.MaxFrames + 1
	samples := make([]*pb.StackSample, n)
	for i := range samples {
		samples[i] = ps
	}
	b, _ = proto.Marshal(&pb.StackBatch{StartNs: 1, EndNs: 2, Samples: samples})
	if _, err := UnmarshalProtoStacks(b); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("proto batch frames cap: %v", err)
	}
}

func TestStacksProtoErrors(t *testing.T) {
	base := func() *pb.StackBatch { return StacksToProto(sampleStacks()) }
	for _, c := range []struct {
		name  string
		edit  func(*pb.StackBatch)
		field string
	}{
		{"string index", func(b *pb.StackBatch) { b.Samples[0].Func[1] = 9999 }, "samples[0].frames[1].func"},
		{"mapping index", func(b *pb.StackBatch) { b.Samples[0].Mapping[0] = 9 }, "samples[0].frames[0].mapping"},
		{"ragged arrays", func(b *pb.StackBatch) { b.Samples[0].Line = b.Samples[0].Line[:1] }, "samples[0].line"},
		{"strings[0]", func(b *pb.StackBatch) { b.Strings[0] = "x" }, "strings[0]"},
		{"count", func(b *pb.StackBatch) { b.Samples[2].Count = -1 }, "samples[2].count"},
		{"kind", func(b *pb.StackBatch) { b.Samples[2].Kind[0] = 77 }, "samples[2].frames[0].kind"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := base()
			c.edit(m)
			b, _ := proto.Marshal(m)
			_, err := UnmarshalProtoStacks(b)
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, want a FieldError on %q", err, c.field)
			}
		})
	}
	// An unknown field is refused, naming where.
	b, _ := proto.Marshal(base())
	b = append(b, 0xf8, 0x01, 0x01) // field 31, varint 1
	if _, err := UnmarshalProtoStacks(b); err == nil || !strings.Contains(err.Error(), "unknown protobuf field number 31") {
		t.Fatalf("unknown field: %v", err)
	}
}

func sampleOSStats() *osstat.Batch {
	return &osstat.Batch{Node: "n1", StartNS: enter0, EndNS: enter0 + 5e9,
		Points: []osstat.Point{{Name: osstat.SoftIRQs, Rank: -1, CPU: 3, Device: "NET_RX", Value: 1234.5},
			{Name: osstat.RunQueueWait, Rank: 2, CPU: -1, Value: 0.02}, {Name: osstat.SoftIRQs, Rank: -1, CPU: 4, Device: "NET_RX", Value: 1}},
		Absent: []osstat.Absence{{Source: osstat.SrcNVML, Reason: "built without NVML"}}}
}

func TestOSStatsRoundTrip(t *testing.T) {
	want := sampleOSStats()
	js, err := MarshalJSONOSStats(want)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := UnmarshalJSONOSStats(js)
	if err != nil {
		t.Fatal(err)
	}
	pbb, err := MarshalProtoOSStats(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	fromProto, err := UnmarshalProtoOSStats(pbb)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, want) || !reflect.DeepEqual(fromProto, want) {
		t.Fatalf("round trip changed the batch:\njson  %+v\nproto %+v\nwant  %+v", fromJSON, fromProto, want)
	}
	b, err := UnmarshalJSONOSStats([]byte(`{"start_ns":1,"end_ns":2,"points":[{"name":"cpu_busy","value":0.5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := b.Points[0]; p.Rank != -1 || p.CPU != -1 {
		t.Fatalf("omitted rank/cpu must mean -1: %+v", p)
	}
}

func TestOSStatsErrorsNameField(t *testing.T) {
	for _, c := range []struct{ name, body, field string }{
		{"value", `{"start_ns":1,"end_ns":2,"points":[{"name":"a","value":1},{"name":"b","value":1e300}]}`, "points[1].value"},
		{"name", `{"start_ns":1,"end_ns":2,"points":[{"value":1}]}`, "points[0].name"},
		{"unknown", `{"start_ns":1,"end_ns":2,"points":[{"name":"a","q":1}]}`, "points[0].q"},
		{"absent", `{"start_ns":1,"end_ns":2,"absent":[{"reason":"x"}]}`, "absent[0].source"},
		{"interval", `{"start_ns":2,"end_ns":2}`, "end_ns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := UnmarshalJSONOSStats([]byte(c.body))
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, want a FieldError on %q", err, c.field)
			}
		})
	}
	m := OSStatsToProto(sampleOSStats())
	m.Points[1].Device = 42
	b, _ := proto.Marshal(m)
	_, err := UnmarshalProtoOSStats(b)
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "points[1].device" {
		t.Fatalf("proto string index: %v", err)
	}
}

// Every input is refused with a FieldError or a size error, or decoded to
// a valid batch that survives the other encoding unchanged.
func FuzzStackJSON(f *testing.F) {
	js, _ := MarshalJSONStacks(sampleStacks())
	f.Add(js)
	f.Add([]byte(`{"start_ns":1,"end_ns":2,"samples":[{"rank":0,"count":1,"frames":[{"kind":"symbol","func":"f"}]}]}`))
	f.Add([]byte(`{"samples":null}`))
	f.Add([]byte(`{"start_ns":1,"end_ns":2,"hz":99,"ratio":0.5,"mappings":[{"start":1,"limit":2}],"samples":[{"rank":-1,"count":3,"frames":[{"kind":"native","addr":5,"mapping":0}]}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := UnmarshalJSONStacks(in)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("decoded an invalid batch: %v", err)
		}
		pbb, err := MarshalProtoStacks(b)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalProtoStacks(pbb)
		if err != nil {
			t.Fatalf("protobuf refused what JSON accepted: %v", err)
		}
		if !reflect.DeepEqual(normStacks(b), normStacks(back)) {
			t.Fatalf("JSON and protobuf disagree:\n%+v\n%+v", b, back)
		}
	})
}

func FuzzStackProto(f *testing.F) {
	b, _ := MarshalProtoStacks(sampleStacks())
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x42, 0x03, 0x48, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := UnmarshalProtoStacks(in)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("decoded an invalid batch: %v", err)
		}
		js, err := MarshalJSONStacks(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalJSONStacks(js)
		if err != nil {
			t.Fatalf("JSON refused what protobuf accepted: %v", err)
		}
		if !reflect.DeepEqual(normStacks(got), normStacks(back)) {
			t.Fatalf("protobuf and JSON disagree:\n%+v\n%+v", got, back)
		}
	})
}

// normStacks makes empty and nil slices alike (the encodings do not tell
// them apart).
func normStacks(b *stack.Batch) *stack.Batch {
	c := *b
	if len(c.Mappings) == 0 {
		c.Mappings = nil
	}
	if len(c.Samples) == 0 {
		c.Samples = nil
	}
	return &c
}

func FuzzOSStatJSON(f *testing.F) {
	js, _ := MarshalJSONOSStats(sampleOSStats())
	f.Add(js)
	f.Add([]byte(`{"start_ns":1,"end_ns":2,"points":[{"name":"x","value":-0}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := UnmarshalJSONOSStats(in)
		if err != nil {
			checkErr(t, err)
			return
		}
		pbb, err := MarshalProtoOSStats(b)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalProtoOSStats(pbb)
		if err != nil {
			t.Fatalf("protobuf refused what JSON accepted: %v", err)
		}
		if !reflect.DeepEqual(normOS(b), normOS(back)) {
			t.Fatalf("JSON and protobuf disagree:\n%+v\n%+v", b, back)
		}
	})
}

func FuzzOSStatProto(f *testing.F) {
	b, _ := MarshalProtoOSStats(sampleOSStats())
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := UnmarshalProtoOSStats(in)
		if err != nil {
			checkErr(t, err)
			return
		}
		js, err := MarshalJSONOSStats(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalJSONOSStats(js)
		if err != nil {
			t.Fatalf("JSON refused what protobuf accepted: %v", err)
		}
		if !reflect.DeepEqual(normOS(got), normOS(back)) {
			t.Fatalf("protobuf and JSON disagree:\n%+v\n%+v", got, back)
		}
	})
}

func normOS(b *osstat.Batch) *osstat.Batch {
	c := *b
	if len(c.Points) == 0 {
		c.Points = nil
	}
	if len(c.Absent) == 0 {
		c.Absent = nil
	}
	return &c
}
