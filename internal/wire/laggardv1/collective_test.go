package laggardv1

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

const enter0 = int64(1_700_000_000) * 1e9

func sampleCollectives() *collective.Batch {
	b := &collective.Batch{Dropped: 2, Comms: []collective.Comm{
		{ID: "world", Size: 4, Rank: 1, CommRank: 1, Backend: "nccl", Host: "n1"},
		{ID: "pg1", Size: 2, Rank: 1, CommRank: 0, Ranks: []int{1, 3}, Parent: "world", Backend: "gloo"},
	}}
	for seq := range int64(3) {
		e := enter0 + seq*1e6
		b.Calls = append(b.Calls,
			collective.Call{Rank: 1, PID: 42, Comm: "world", Seq: seq, Op: collective.AllReduce, Bytes: 4096, Count: 1024, Dtype: "float32",
				Peer: -1, Root: -1, Stream: 9, EnterNS: e, ReturnNS: e + 10, DevStartNS: e + 20, DevEndNS: e + 500, Step: seq},
			collective.Call{Rank: 1, Comm: "pg1", Seq: seq, Op: collective.Send, Bytes: 8, Peer: 3, Root: -1, EnterNS: e + 600, ReturnNS: e + 700, Step: -1, Grouped: true})
	}
	return b
}

// JSON and protobuf carry the same batch: encode either way, decode, compare.
func TestCollectivesRoundTrip(t *testing.T) {
	want := sampleCollectives()
	js, err := MarshalJSONCollectives(want)
	if err != nil {
		t.Fatal(err)
	}
	fromJSON, err := UnmarshalJSONCollectives(js, 4)
	if err != nil {
		t.Fatal(err)
	}
	pbb, err := MarshalProtoCollectives(fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	fromProto, err := UnmarshalProtoCollectives(pbb, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, want) || !reflect.DeepEqual(fromProto, want) {
		t.Fatalf("round trip changed the batch:\njson  %+v\nproto %+v\nwant  %+v", fromJSON, fromProto, want)
	}
}

func TestCollectivesJSONDefaults(t *testing.T) {
	b, err := UnmarshalJSONCollectives([]byte(`{"calls":[{"rank":0,"comm":"w","seq":0,"op":"all_reduce","bytes":8,"enter_ns":1700000000000000000,"return_ns":1700000000000000001}]}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := b.Calls[0]; c.Peer != -1 || c.Root != -1 || c.Step != -1 || c.Op != collective.AllReduce {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestCollectivesErrorsNameField(t *testing.T) {
	call := `{"rank":0,"comm":"w","seq":0,"op":"AllReduce","bytes":8,"enter_ns":1700000000000000000,"return_ns":1700000000000000001}`
	for _, c := range []struct {
		name, body, field string
		world             int
	}{
		{"enter", `{"calls":[` + call + `,` + strings.Replace(call, `"enter_ns":1700000000000000000`, `"enter_ns":5`, 1) + `]}`, "calls[1].enter_ns", 0},
		{"return before enter", `{"calls":[` + strings.Replace(call, `"return_ns":1700000000000000001`, `"return_ns":1`, 1) + `]}`, "calls[0].return_ns", 0},
		{"rank vs world", `{"calls":[` + strings.Replace(call, `"rank":0`, `"rank":8`, 1) + `]}`, "calls[0].rank", 4},
		{"op", `{"calls":[` + strings.Replace(call, `"AllReduce"`, `"AllShuffle"`, 1) + `]}`, "calls[0].op", 0},
		{"unknown call field", `{"calls":[` + strings.Replace(call, `"rank":0`, `"rank":0,"bogus":1`, 1) + `]}`, "calls[0].bogus", 0},
		{"unknown top field", `{"calls":[],"nope":1}`, "nope", 0},
		{"duplicate key", `{"calls":[],"calls":[]}`, "calls", 0},
		{"comm size", `{"comms":[{"id":"w","size":0,"rank":0,"comm_rank":0}]}`, "comms[0].size", 0},
		{"comm ranks", `{"comms":[{"id":"w","size":2,"rank":0,"comm_rank":0,"ranks":[0,0]}]}`, "comms[0].ranks", 0},
		{"calls not array", `{"calls":{}}`, "calls", 0},
		{"call not object", `{"calls":[1]}`, "calls[0]", 0},
		{"trailing", `{"calls":[]} x`, "body", 0},
		{"dropped", `{"dropped":-1}`, "dropped", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := UnmarshalJSONCollectives([]byte(c.body), c.world)
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err = %v, want field %q", err, c.field)
			}
		})
	}
	// Protobuf names the same fields.
	b := sampleCollectives()
	b.Calls[3].EnterNS = 7
	raw, _ := MarshalProtoCollectives(b)
	_, err := UnmarshalProtoCollectives(raw, 4)
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "calls[3].enter_ns" {
		t.Fatalf("proto: %v", err)
	}
	pbb := CollectivesToProto(sampleCollectives())
	pbb.Calls[1].Op = "Shuffle"
	raw, _ = protoMarshal(pbb)
	if _, err := UnmarshalProtoCollectives(raw, 4); !errors.As(err, &fe) || fe.Field != "calls[1].op" {
		t.Fatalf("proto op: %v", err)
	}
	if _, err := UnmarshalProtoCollectives([]byte{0x0a, 0x05}, 0); !errors.As(err, &fe) || fe.Field != "body" {
		t.Fatalf("truncated proto: %v", err)
	}
}

func TestCollectivesCaps(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"calls":[`)
	for i := range MaxBatchCalls + 1 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString("{}")
	}
	sb.WriteString("]}")
	if _, err := UnmarshalJSONCollectives([]byte(sb.String()), 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("json: %v", err)
	}
	raw := make([]byte, 0, 2*(MaxBatchCalls+1))
	for range MaxBatchCalls + 1 {
		raw = append(raw, 0x12, 0x00) // field 2 (calls), empty message
	}
	if _, err := UnmarshalProtoCollectives(raw, 0); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("proto: %v", err)
	}
}

// A decoded batch is always valid, and re-encoding it decodes to itself.
func FuzzCollectiveJSON(f *testing.F) {
	js, _ := MarshalJSONCollectives(sampleCollectives())
	f.Add(js)
	f.Add([]byte(`{"calls":null,"comms":[],"dropped":0}`))
	f.Add([]byte(`{"calls":[{"op":"isend"}]}`))
	f.Add([]byte(`{"incarnation":3,"calls":[],"incarnation":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := UnmarshalJSONCollectives(b, 0)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := got.Validate(0); err != nil {
			t.Fatalf("decoded an invalid batch: %v", err)
		}
		again, _ := MarshalJSONCollectives(got)
		got2, err := UnmarshalJSONCollectives(again, 0)
		if err != nil || !reflect.DeepEqual(normalize(got), normalize(got2)) {
			t.Fatalf("re-encode: %v\n%+v\n%+v", err, got, got2)
		}
	})
}

func FuzzCollectiveProto(f *testing.F) {
	raw, _ := MarshalProtoCollectives(sampleCollectives())
	f.Add(raw)
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x00})
	f.Add([]byte{0x20, 0xff, 0xff, 0x04}) // incarnation 65535
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := UnmarshalProtoCollectives(b, 0)
		if err != nil {
			checkErr(t, err)
			return
		}
		if err := got.Validate(0); err != nil {
			t.Fatalf("decoded an invalid batch: %v", err)
		}
		again, _ := MarshalProtoCollectives(got)
		got2, err := UnmarshalProtoCollectives(again, 0)
		if err != nil || !reflect.DeepEqual(normalize(got), normalize(got2)) {
			t.Fatalf("re-encode: %v\n%+v\n%+v", err, got, got2)
		}
	})
}

// normalize maps empty slices to nil, which the encodings do not tell apart.
func normalize(b *collective.Batch) *collective.Batch {
	c := *b
	if len(c.Calls) == 0 {
		c.Calls = nil
	}
	if len(c.Comms) == 0 {
		c.Comms = nil
	}
	// "ranks": [] and no "ranks" both mean the members are not listed
	// (the encoder omits an empty list).
	c.Comms = slices.Clone(c.Comms)
	for i := range c.Comms {
		if len(c.Comms[i].Ranks) == 0 {
			c.Comms[i].Ranks = nil
		}
	}
	return &c
}

func protoMarshal(m interface{ ProtoReflect() protoreflect.Message }) ([]byte, error) {
	return proto.Marshal(m)
}

// Issue 16 item 1: a collective batch may name its incarnation, anywhere
// in the object (JSON) or as field 4 (protobuf); its records are
// validated against that incarnation's world.
func TestCollectivesIncarnation(t *testing.T) {
	at := func(inc int) (int, error) {
		switch inc {
		case -1, 1:
			return 2, nil
		case 0:
			return 8, nil
		}
		return 0, &signal.FieldError{Field: "incarnation", Msg: "no such incarnation"}
	}
	call := `{"rank":5,"comm":"w","seq":0,"op":"AllReduce","bytes":8,"enter_ns":1700000000000000000,"return_ns":1700000000000000010}`
	for _, c := range []struct {
		name, body string
		inc        int
		field      string
	}{
		{"absent: the newest", `{"calls":[]}`, -1, ""},
		{"first, older world", `{"incarnation":0,"calls":[` + call + `]}`, 0, ""},
		{"after the calls", `{"calls":[` + call + `],"incarnation":0}`, 0, ""},
		{"newest world refuses rank 5", `{"calls":[` + call + `],"incarnation":1}`, 0, "calls[0].rank"},
		{"null", `{"incarnation":null}`, -1, ""},
		{"unknown", `{"incarnation":7}`, 0, "incarnation"},
		{"string", `{"incarnation":"0"}`, 0, "incarnation"},
		{"twice", `{"incarnation":0,"incarnation":0}`, 0, "incarnation"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := UnmarshalJSONCollectivesAt([]byte(c.body), at)
			if c.field != "" {
				var fe *signal.FieldError
				if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
					t.Fatalf("err %v; want a field error on %s", err, c.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := -1
			if b.Incarnation != nil {
				got = *b.Incarnation
			}
			if got != c.inc {
				t.Fatalf("incarnation %d, want %d", got, c.inc)
			}
			if got >= 0 {
				raw, err := MarshalProtoCollectives(b)
				if err != nil {
					t.Fatal(err)
				}
				pb, err := UnmarshalProtoCollectivesAt(raw, at)
				if err != nil || pb.Incarnation == nil || *pb.Incarnation != got {
					t.Fatalf("protobuf round trip: %+v %v", pb, err)
				}
			}
		})
	}
}
