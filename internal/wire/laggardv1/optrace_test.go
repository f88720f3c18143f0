package laggardv1

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/wire/kineto"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1/pb"
)

// randTrace builds a valid trace exercising every column, including the
// extremes Validate allows.
func randTrace(r *rand.Rand, n int) *optrace.Trace {
	names := []string{"aten::mm", "aten::add", "cudaLaunchKernel", "ncclKernel_AllReduce_RING_LL_Sum_float", "ProfilerStep#7", "void gemm<128>()"}
	t := &optrace.Trace{Rank: r.IntN(1024), ClockOffsetNS: r.Int64N(optrace.MaxAbsNS) - r.Int64N(optrace.MaxAbsNS)}
	start := int64(1_700_000_000_000_000_000)
	step := int64(-1)
	for i := 0; i < n; i++ {
		e := optrace.Event{Name: names[r.IntN(len(names))], Cat: optrace.Category(1 + r.IntN(9)), Device: -1, Step: step, Seq: -1}
		switch r.IntN(20) {
		case 0:
			e.StartNS = optrace.MaxAbsNS
		case 1:
			e.StartNS = -optrace.MaxAbsNS
		default:
			start += r.Int64N(50_000) - 1000
			e.StartNS = start
		}
		e.DurNS = r.Int64N(optrace.MaxDurNS + 1)
		if r.IntN(10) == 0 {
			e.DurNS = optrace.MaxDurNS
		}
		if r.IntN(3) == 0 {
			e.Device, e.Stream = r.IntN(optrace.MaxDevice), r.Int64()-r.Int64()
		} else {
			e.TID, e.PID = r.Int64N(1<<20), int64(r.Uint64())
		}
		if r.IntN(50) == 0 {
			step++
			e.Step = step
		}
		if r.IntN(7) == 0 {
			e.Step = r.Int64N(optrace.MaxStep+2) - 1
		}
		if r.IntN(2) == 0 {
			e.Correlation, e.ExternalID, e.FlowID = r.Int64(), -r.Int64(), r.Int64N(100)
		}
		if r.IntN(4) == 0 {
			e.Comm = "comm-" + strconv.Itoa(r.IntN(3))
			if r.IntN(2) == 0 {
				e.Seq = r.Int64N(optrace.MaxSeq + 1)
			}
		}
		if r.IntN(5) == 0 {
			for k := r.IntN(optrace.MaxArgs + 1); k > 0; k-- {
				e.Args = append(e.Args, optrace.Arg{Key: "k" + strconv.Itoa(r.IntN(5)), Value: strings.Repeat("v", r.IntN(optrace.MaxArgLen+1))})
			}
		}
		t.Events = append(t.Events, e)
	}
	return t
}

// normalizeOp maps an empty Args slice to nil (the encoding cannot tell them
// apart) so reflect.DeepEqual compares content.
func normalizeOp(t *optrace.Trace) *optrace.Trace {
	for i := range t.Events {
		if len(t.Events[i].Args) == 0 {
			t.Events[i].Args = nil
		}
	}
	return t
}

func TestOpTraceRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 60; trial++ {
		in := normalizeOp(randTrace(r, r.IntN(300)))
		b, err := EncodeOpTrace(in)
		if err != nil {
			t.Fatalf("trial %d: encode: %v", trial, err)
		}
		out, err := DecodeOpTrace(b)
		if err != nil {
			t.Fatalf("trial %d: decode: %v", trial, err)
		}
		if len(in.Events) == 0 && out.Events == nil {
			out.Events = in.Events
		}
		if !reflect.DeepEqual(in, normalizeOp(out)) {
			for i := range in.Events {
				if i < len(out.Events) && !reflect.DeepEqual(in.Events[i], out.Events[i]) {
					t.Fatalf("trial %d: event %d: got %+v, want %+v", trial, i, out.Events[i], in.Events[i])
				}
			}
			t.Fatalf("trial %d: trace differs (rank %d/%d offset %d/%d events %d/%d)", trial, out.Rank, in.Rank,
				out.ClockOffsetNS, in.ClockOffsetNS, len(out.Events), len(in.Events))
		}
		// The generated message reads the same bytes (it is the proto).
		var m pb.OpTrace
		if err := proto.Unmarshal(b, &m); err != nil || len(m.Cat) != len(in.Events) {
			t.Fatalf("trial %d: pb.OpTrace: %v, %d events", trial, err, len(m.Cat))
		}
	}
}

func TestOpTraceDefaultsLeaveColumnsEmpty(t *testing.T) {
	in := &optrace.Trace{Rank: 3, Events: []optrace.Event{
		{Name: "aten::mm", Cat: optrace.CPUOp, Device: -1, StartNS: 100, DurNS: 5, Step: -1, Seq: -1},
		{Name: "aten::mm", Cat: optrace.CPUOp, Device: -1, StartNS: 110, DurNS: 5, Step: -1, Seq: -1},
	}}
	b, err := EncodeOpTrace(in)
	if err != nil {
		t.Fatal(err)
	}
	var m pb.OpTrace
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Pid != nil || m.Tid != nil || m.Stream != nil || m.Device != nil || m.StepDelta != nil || m.Corr != nil || m.Seq != nil || m.Comm != nil || m.ArgCount != nil {
		t.Fatalf("default columns written: %+v", &m)
	}
	if len(m.Strings) != 2 || m.Name[0] != 1 || m.Name[1] != 1 {
		t.Fatalf("names not interned once: strings %q names %v", m.Strings, m.Name)
	}
	if m.StartDelta[1] != 10 {
		t.Fatalf("start not delta-coded: %v", m.StartDelta)
	}
}

func TestDecodeOpTraceErrors(t *testing.T) {
	good := &pb.OpTrace{Strings: []string{"", "aten::mm"}, Cat: []uint32{1, 1}, Name: []uint32{1, 1}, StartDelta: []int64{10, 10}, DurNs: []uint64{1, 1}}
	for _, tc := range []struct {
		name  string
		mod   func(m *pb.OpTrace)
		field string
		large bool
	}{
		{"short name column", func(m *pb.OpTrace) { m.Name = m.Name[:1] }, "name", false},
		{"short optional column", func(m *pb.OpTrace) { m.Tid = []int64{1} }, "tid", false},
		{"missing start", func(m *pb.OpTrace) { m.StartDelta = nil }, "start_delta", false},
		{"name index outside", func(m *pb.OpTrace) { m.Name[1] = 9 }, "name[1]", false},
		{"empty name", func(m *pb.OpTrace) { m.Name[1] = 0 }, "events[1].name", false},
		{"bad category", func(m *pb.OpTrace) { m.Cat[0] = 300 }, "events[0].cat", false},
		{"strings[0]", func(m *pb.OpTrace) { m.Strings[0] = "x" }, "strings[0]", false},
		{"dur", func(m *pb.OpTrace) { m.DurNs[0] = 1 << 63 }, "events[0].dur_ns", false},
		{"start", func(m *pb.OpTrace) { m.StartDelta[1] = -1 << 63 }, "events[1].start_ns", false},
		{"device", func(m *pb.OpTrace) { m.Device = []uint32{0, 1 << 20} }, "events[1].device", false},
		{"seq without comm", func(m *pb.OpTrace) { m.Seq = []uint64{0, 5} }, "events[1].comm", false},
		{"args sum", func(m *pb.OpTrace) { m.ArgCount = []uint32{0, 2}; m.ArgKey = []uint32{1}; m.ArgValue = []uint32{1} }, "arg_key", false},
		{"args unpaired", func(m *pb.OpTrace) { m.ArgCount = []uint32{0, 1}; m.ArgKey = []uint32{1} }, "arg_value", false},
		{"too many args", func(m *pb.OpTrace) { m.ArgCount = []uint32{0, 33} }, "arg_count", false},
		{"negative rank", func(m *pb.OpTrace) { m.Rank = -1 }, "rank", false},
		{"too many events", func(m *pb.OpTrace) {
			m.Cat = make([]uint32, MaxOpTraceEvents+1)
		}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := proto.Clone(good).(*pb.OpTrace)
			tc.mod(m)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = DecodeOpTrace(b)
			if tc.large {
				if !errors.Is(err, ErrTooLarge) {
					t.Fatalf("err = %v, want ErrTooLarge", err)
				}
				return
			}
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("err = %v, want a FieldError on %q", err, tc.field)
			}
		})
	}
	// An unknown field is refused.
	b, _ := proto.Marshal(good)
	b = append(b, 0xf8, 0x07, 0x01) // field 127, varint 1
	if _, err := DecodeOpTrace(b); err == nil || !strings.Contains(err.Error(), "unknown protobuf field") {
		t.Fatalf("unknown field: err = %v", err)
	}
}

// TestOpTraceSizeKineto measures the compact encoding against the Kineto
// JSON it was imported from (reported, and bounded so a regression that
// bloats the format fails).
func TestOpTraceSizeKineto(t *testing.T) {
	js, err := os.ReadFile("../kineto/testdata/rank1.json")
	if err != nil {
		t.Fatal(err)
	}
	tr := &optrace.Trace{Rank: 1}
	if _, err := kineto.Decode(bytes.NewReader(js), kineto.Options{}, func(e *optrace.Event) error {
		tr.Events = append(tr.Events, *e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := EncodeOpTrace(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rank1.json: %d events, JSON %d bytes, OpTrace %d bytes (%.1f%%, %.1f B/event)", len(tr.Events), len(js), len(b),
		100*float64(len(b))/float64(len(js)), float64(len(b))/float64(max(len(tr.Events), 1)))
	if len(b)*3 > len(js) {
		t.Fatalf("OpTrace %d bytes is more than a third of the JSON's %d", len(b), len(js))
	}
	back, err := DecodeOpTrace(b)
	if err != nil || len(back.Events) != len(tr.Events) {
		t.Fatalf("decode: %v (%d events)", err, len(back.Events))
	}
}

// synthTrace is a realistic training-step trace: CPU ops launching
// kernels with correlation ids, on a few threads and streams.
func synthTrace(n int) *optrace.Trace {
	names := make([]string, 400)
	for i := range names {
		names[i] = "aten::op_" + strconv.Itoa(i)
	}
	t := &optrace.Trace{Rank: 5, Events: make([]optrace.Event, 0, n)}
	r := rand.New(rand.NewPCG(7, 7))
	ts := int64(1_700_000_000_000_000_000)
	for i := 0; len(t.Events) < n; i++ {
		step := int64(1000 + i/5000)
		ts += 2000 + r.Int64N(3000)
		name := names[r.IntN(len(names))]
		corr := int64(i + 1)
		t.Events = append(t.Events,
			optrace.Event{Name: name, Cat: optrace.CPUOp, PID: 4242, TID: 4242, Device: -1, StartNS: ts, DurNS: 1500 + r.Int64N(5000), Step: step, ExternalID: corr, Seq: -1},
			optrace.Event{Name: "cudaLaunchKernel", Cat: optrace.Runtime, PID: 4242, TID: 4242, Device: -1, StartNS: ts + 300, DurNS: 400 + r.Int64N(300), Step: step, Correlation: corr, ExternalID: corr, Seq: -1},
			optrace.Event{Name: "void kernel_" + name, Cat: optrace.GPUKernel, PID: 0, Stream: 7, Device: 0, StartNS: ts + 5000, DurNS: 10000 + r.Int64N(90000), Step: step, Correlation: corr, Seq: -1},
		)
	}
	t.Events = t.Events[:n]
	return t
}

func TestOpTraceSizeSynthetic(t *testing.T) {
	n := 200_000 // BenchmarkOpTraceSize1M measures 1M; B/event does not depend on n here
	tr := synthTrace(n)
	b, err := EncodeOpTrace(tr)
	if err != nil {
		t.Fatal(err)
	}
	per := float64(len(b)) / float64(n)
	t.Logf("synthetic: %d events, OpTrace %d bytes, %.2f B/event", n, len(b), per)
	if per > 24 {
		t.Fatalf("%.2f bytes/event, want ≤ 24", per)
	}
}

// BenchmarkOpTraceSize1M reports the encoded size of a 1M-event trace
// (B/event) and the encode rate.
func BenchmarkOpTraceSize1M(b *testing.B) {
	tr := synthTrace(1_000_000)
	var n int
	for b.Loop() {
		enc, err := EncodeOpTrace(tr)
		if err != nil {
			b.Fatal(err)
		}
		n = len(enc)
	}
	b.ReportMetric(float64(n)/1e6, "B/event")
	b.ReportMetric(float64(n), "bytes")
}

func BenchmarkEncodeOpTrace(b *testing.B) {
	tr := synthTrace(100_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeOpTrace(tr); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeOpTrace(b *testing.B) {
	enc, err := EncodeOpTrace(synthTrace(100_000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeOpTrace(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzDecodeOpTrace(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 5, 12} {
		tr := randTrace(r, n)
		// Small seeds: the minimizer's cost grows with the input.
		for i := range tr.Events {
			if len(tr.Events[i].Args) > 0 {
				tr.Events[i].Args = []optrace.Arg{{Key: "k", Value: "v"}}
			}
		}
		b, err := EncodeOpTrace(tr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x22, 0x02, 0x01, 0x01}) // cat only
	f.Add([]byte{0x1a, 0x00, 0x22, 0x01, 0x01, 0x2a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := DecodeOpTrace(b)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("decoded an invalid trace: %v", err)
		}
		// What decodes re-encodes to a trace that decodes the same.
		enc, err := EncodeOpTrace(tr)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := DecodeOpTrace(enc)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(normalizeOp(tr), normalizeOp(back)) && len(tr.Events)+len(back.Events) > 0 {
			t.Fatalf("re-decoded trace differs")
		}
	})
}
