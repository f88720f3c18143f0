package laggardv1

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// partialStackBatch: three samples over two mappings; tests break one
// record of it.
func partialStackBatch() *stack.Batch {
	return &stack.Batch{Node: "n1", StartNS: 1e18, EndNS: 1e18 + 5e9, Hz: 99, Ratio: 0.1,
		Mappings: []stack.Mapping{
			{Start: 0x1000, Limit: 0x2000, BuildID: "aa", Path: "/usr/bin/a"},
			{Start: 0x3000, Limit: 0x4000, BuildID: "bb", Path: "/usr/lib/b.so"},
		},
		Samples: []stack.Sample{
			{Rank: 0, PID: 10, TID: 10, Comm: "train", Count: 3, Frames: []stack.Frame{{Kind: stack.Native, Addr: 0x1010, Mapping: 0}}},
			{Rank: 0, PID: 11, TID: 11, Comm: "worker", Count: 2, Frames: []stack.Frame{{Kind: stack.Native, Addr: 0x3010, Mapping: 1}, {Kind: stack.Python, Mapping: -1, Func: "step", File: "t.py", Line: 3}}},
			{Rank: 1, PID: 12, TID: 12, Comm: "train", Count: 4, Frames: []stack.Frame{{Kind: stack.Kernel, Mapping: -1, Func: "schedule"}, {Kind: stack.Native, Addr: 0x3020, Mapping: 1}}},
		}}
}

// protoWithString marshals b after replacing the string-table entry
// equal to old with raw bytes (proto.Marshal would refuse invalid UTF-8,
// so it is patched in the encoding).
func protoWithString(t *testing.T, b *stack.Batch, old, raw string) []byte {
	t.Helper()
	if len(old) != len(raw) {
		t.Fatal("same length only")
	}
	enc, err := MarshalProtoStacks(b)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(enc), old)
	if i < 0 {
		t.Fatalf("%q not in the encoding", old)
	}
	copy(enc[i:], raw)
	return enc
}

func TestPartialStacksInvalidUTF8RefusesOnlyItsSample(t *testing.T) {
	b := partialStackBatch()
	b.Samples[1].Frames[1].Func = "stepXX" // only sample 1 uses it
	enc := protoWithString(t, b, "stepXX", "step\xff\xfe")
	// The strict decoder refuses the whole batch (what the agent saw).
	if _, err := UnmarshalProtoStacks(enc); err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("strict decode: err %v, want an invalid UTF-8 error", err)
	}
	got, refused, err := UnmarshalProtoStacksPartial(enc, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 1 || refused[0].Record != "samples[1]" || refused[0].Field != "samples[1].frames[1].func" {
		t.Fatalf("refused %+v, want samples[1] naming frames[1].func", refused)
	}
	if len(got.Samples) != 2 || got.Samples[0].PID != 10 || got.Samples[1].PID != 12 {
		t.Fatalf("kept %+v, want the samples of pid 10 and 12", got.Samples)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("kept batch does not validate: %v", err)
	}
}

func TestPartialStacksRefusedMappingTakesItsSamples(t *testing.T) {
	b := partialStackBatch()
	b.Mappings[0].Path = "/usr/bin/aX"
	enc := protoWithString(t, b, "/usr/bin/aX", "/usr/bin/a\x80")
	got, refused, err := UnmarshalProtoStacksPartial(enc, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	var recs []string
	for _, r := range refused {
		recs = append(recs, r.Record)
	}
	if !slices.Equal(recs, []string{"mappings[0]", "samples[0]"}) {
		t.Fatalf("refused %v, want mappings[0] and the sample using it", recs)
	}
	// The kept mapping is renumbered and its samples follow it.
	if len(got.Mappings) != 1 || got.Mappings[0].BuildID != "bb" {
		t.Fatalf("mappings %+v", got.Mappings)
	}
	for _, s := range got.Samples {
		for _, f := range s.Frames {
			if f.Kind == stack.Native && f.Mapping != 0 {
				t.Fatalf("frame %+v not renumbered", f)
			}
		}
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestPartialStacksBatchErrorsRefuseTheBatch(t *testing.T) {
	b := partialStackBatch()
	b.Node = "nodeX"
	if _, _, err := UnmarshalProtoStacksPartial(protoWithString(t, b, "nodeX", "node\xff"), Rules{}); err == nil || !strings.Contains(err.Error(), "node") {
		t.Fatalf("invalid node: err %v, want the batch refused naming node", err)
	}
	b = partialStackBatch()
	b.EndNS = b.StartNS - 1
	enc, _ := MarshalProtoStacks(b)
	if _, _, err := UnmarshalProtoStacksPartial(enc, Rules{}); err == nil {
		t.Fatal("reversed window accepted")
	}
}

func TestPartialStacksJSONValidation(t *testing.T) {
	b := partialStackBatch()
	b.Samples[2].Count = 0
	b.Samples[0].Frames[0].Mapping = 7
	enc, err := MarshalJSONStacks(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := UnmarshalJSONStacks(enc); err == nil {
		t.Fatal("strict JSON decode accepted a bad sample")
	}
	got, refused, err := UnmarshalJSONStacksPartial(enc, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 2 || refused[0].Record != "samples[0]" || refused[1].Record != "samples[2]" {
		t.Fatalf("refused %+v", refused)
	}
	if len(got.Samples) != 1 || got.Samples[0].PID != 11 {
		t.Fatalf("kept %+v", got.Samples)
	}
}

func TestPartialOSStats(t *testing.T) {
	b := &osstat.Batch{Node: "n", StartNS: 1e18, EndNS: 1e18 + 5e9,
		Points: []osstat.Point{
			{Name: "cpu_softirq", Rank: -1, CPU: 0, Value: 1},
			{Name: "irq", Rank: -1, CPU: 1, Device: "eth0XX", Value: 2},
			{Name: "runq_wait", Rank: 2, CPU: -1, Value: 3},
		},
		Absent: []osstat.Absence{{Source: "nvml", Reason: "nodrvX"}, {Source: "rdma_sysfs", Reason: "none"}}}
	enc, err := MarshalProtoOSStats(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"eth0XX", "eth0\xc3\x28"}, {"nodrvX", "nodrv\xff"}} {
		i := strings.Index(string(enc), p[0])
		copy(enc[i:], p[1])
	}
	if _, err := UnmarshalProtoOSStats(enc); err == nil {
		t.Fatal("strict decode accepted invalid UTF-8")
	}
	got, refused, err := UnmarshalProtoOSStatsPartial(enc, Rules{})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 2 || refused[0].Record != "absent[0]" || refused[1].Record != "points[1]" {
		t.Fatalf("refused %+v", refused)
	}
	if len(got.Points) != 2 || got.Points[1].Name != "runq_wait" || len(got.Absent) != 1 {
		t.Fatalf("kept %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

// FuzzPartialStacks: whatever the bytes, a partial decode never panics,
// and what it keeps validates (the store re-validates every record).
func FuzzPartialStacks(f *testing.F) {
	enc, _ := MarshalProtoStacks(partialStackBatch())
	f.Add(enc)
	bad := slices.Clone(enc)
	if i := strings.Index(string(bad), "train"); i >= 0 {
		bad[i] = 0xff
	}
	f.Add(bad)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, refused, err := UnmarshalProtoStacksPartial(data, Rules{})
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("kept an invalid batch: %v (refused %d)", err, len(refused))
		}
		// Nothing that proto3 refuses survives in the kept records.
		if _, err := proto.Marshal(StacksToProto(b)); err != nil {
			t.Fatalf("kept records do not re-encode: %v", err)
		}
	})
}

// TestPartialWorldRuleKeepsOriginalIndexes: a sample refused by the
// decoder and one outside the job's world are both named by their index
// in the batch as sent (not in what is left after the first refusal).
func TestPartialWorldRuleKeepsOriginalIndexes(t *testing.T) {
	b := partialStackBatch()
	b.Samples[0].Count = 0 // invalid
	b.Samples[2].Rank = 5  // outside a world of 2
	enc, _ := MarshalProtoStacks(b)
	got, refused, err := UnmarshalProtoStacksPartial(enc, Rules{World: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) != 2 || refused[0].Record != "samples[0]" || refused[1].Record != "samples[2]" || refused[1].Field != "samples[2].rank" {
		t.Fatalf("refused %+v", refused)
	}
	if len(got.Samples) != 1 || got.Samples[0].PID != 11 {
		t.Fatalf("kept %+v", got.Samples)
	}
}
