package collective

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

const t0 = int64(1_790_000_000) * 1e9 // 2026-09

func goodCall() Call {
	return Call{Rank: 1, Comm: "a1b2c3d4e5f60718", Seq: 7, Op: AllReduce, Bytes: 4096, Count: 1024, Dtype: "float32",
		Peer: -1, Root: -1, EnterNS: t0, ReturnNS: t0 + 5e5, Step: -1}
}

func TestParseOp(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Op
	}{
		{"AllReduce", AllReduce}, {"all_reduce", AllReduce}, {"ncclAllReduce", AllReduce}, {"ALLREDUCE", AllReduce},
		{"reduce_scatter", ReduceScatter}, {"all_gather_into_tensor", AllGather}, {"_all_gather_base", AllGather},
		{"all_to_all_single", AllToAll}, {"isend", Send}, {"irecv", Recv}, {"barrier", Barrier}, {"Broadcast", Broadcast},
	} {
		got, err := ParseOp(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseOp(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "AllReduceX", "scatter", strings.Repeat("x", 500)} {
		if _, err := ParseOp(bad); err == nil {
			t.Errorf("ParseOp(%q) accepted", bad)
		}
	}
}

// Every valid op survives a text round trip under its canonical name.
func TestOpTextRoundTrip(t *testing.T) {
	if len(Ops()) != 9 {
		t.Fatalf("Ops() = %v, want the 9 operations of the issue", Ops())
	}
	for _, o := range Ops() {
		b, err := o.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Op
		if err := back.UnmarshalText(b); err != nil || back != o {
			t.Errorf("%v → %s → %v, %v", o, b, back, err)
		}
	}
	if _, err := OpInvalid.MarshalText(); err == nil {
		t.Error("the invalid op marshalled")
	}
}

func TestCallJSON(t *testing.T) {
	c := goodCall()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"op":"AllReduce"`) {
		t.Errorf("op not spelled by name: %s", b)
	}
	var back Call
	if err := json.Unmarshal(b, &back); err != nil || back != c {
		t.Errorf("round trip: %+v, %v", back, err)
	}
}

func TestCallValidate(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mut         func(*Call)
		world       int
	}{
		{"rank beyond world", "rank", func(c *Call) { c.Rank = 4 }, 4},
		{"negative rank", "rank", func(c *Call) { c.Rank = -1 }, 0},
		{"no comm", "comm", func(c *Call) { c.Comm = "" }, 4},
		{"comm with space", "comm", func(c *Call) { c.Comm = "a b" }, 4},
		{"long comm", "comm", func(c *Call) { c.Comm = strings.Repeat("a", MaxIDLen+1) }, 4},
		{"negative seq", "seq", func(c *Call) { c.Seq = -1 }, 4},
		{"pid above 2^31-1", "pid", func(c *Call) { c.PID = MaxPID + 1 }, 4}, // review2 #11: caught at decode, not at commit
		{"huge seq", "seq", func(c *Call) { c.Seq = MaxSeq + 1 }, 4},
		{"no op", "op", func(c *Call) { c.Op = OpInvalid }, 4},
		{"unknown op", "op", func(c *Call) { c.Op = numOps }, 4},
		{"negative bytes", "bytes", func(c *Call) { c.Bytes = -1 }, 4},
		{"huge bytes", "bytes", func(c *Call) { c.Bytes = MaxBytes + 1 }, 4},
		{"peer below -1", "peer", func(c *Call) { c.Peer = -2 }, 4},
		{"root below -1", "root", func(c *Call) { c.Root = -2 }, 4},
		{"enter zero", "enter_ns", func(c *Call) { c.EnterNS, c.ReturnNS = 0, 0 }, 4},
		{"enter in 1970", "enter_ns", func(c *Call) { c.EnterNS = 5 }, 4},
		{"return before enter", "return_ns", func(c *Call) { c.ReturnNS = c.EnterNS - 1 }, 4},
		{"two-day call", "return_ns", func(c *Call) { c.ReturnNS = c.EnterNS + 2*MaxDurationNS }, 4},
		{"device end before start", "dev_end_ns", func(c *Call) { c.DevStartNS, c.DevEndNS = t0+10, t0 }, 4},
		{"device start only", "dev_end_ns", func(c *Call) { c.DevStartNS = t0 }, 4},
		{"step below -1", "step", func(c *Call) { c.Step = -2 }, 4},
		{"dtype not printable", "dtype", func(c *Call) { c.Dtype = "f\x00" }, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := goodCall()
			tc.mut(&c)
			err := c.Validate(tc.world)
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate = %v; want a FieldError on %q", err, tc.field)
			}
		})
	}
	c := goodCall()
	if err := c.Validate(4); err != nil {
		t.Fatalf("a good call refused: %v", err)
	}
	c.DevStartNS, c.DevEndNS = t0+100, t0+900
	if err := c.Validate(0); err != nil || !c.HasDevice() || c.ExecNS() != 800 || c.HostNS() != 5e5 {
		t.Fatalf("device bracket: err %v, exec %d", err, c.ExecNS())
	}
}

func TestCommValidate(t *testing.T) {
	good := Comm{ID: "pg0-world", Size: 4, Rank: 2, CommRank: 2, Ranks: []int{0, 1, 2, 3}, Backend: "gloo"}
	if err := good.Validate(4); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, field string
		mut         func(*Comm)
	}{
		{"no id", "id", func(m *Comm) { m.ID = "" }},
		{"size zero", "size", func(m *Comm) { m.Size = 0 }},
		{"size beyond world", "size", func(m *Comm) { m.Size = 5; m.Ranks = nil }},
		{"comm rank beyond size", "comm_rank", func(m *Comm) { m.CommRank = 4 }},
		{"ranks short", "ranks", func(m *Comm) { m.Ranks = []int{0, 1} }},
		{"ranks repeated", "ranks", func(m *Comm) { m.Ranks = []int{0, 1, 2, 2} }},
		{"reporter not at its comm rank", "ranks", func(m *Comm) { m.Ranks = []int{0, 1, 3, 2} }},
		{"member beyond world", "ranks", func(m *Comm) { m.Ranks = []int{0, 1, 2, 9} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good
			m.Ranks = append([]int(nil), good.Ranks...)
			tc.mut(&m)
			var fe *signal.FieldError
			if err := m.Validate(4); !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("Validate = %v; want a FieldError on %q", err, tc.field)
			}
		})
	}
}

// A batch error names the record, so a client can find it.
func TestBatchValidateNamesRecord(t *testing.T) {
	b := Batch{Calls: []Call{goodCall(), goodCall()}}
	b.Calls[1].Bytes = -5
	err := b.Validate(4)
	if err == nil || !strings.HasPrefix(err.Error(), "calls[1].bytes:") {
		t.Fatalf("error %v does not name calls[1].bytes", err)
	}
	var fe *signal.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("the FieldError is lost in %v", err)
	}
	b = Batch{Dropped: -1}
	if err := b.Validate(4); err == nil {
		t.Fatal("negative drop count accepted")
	}
}
