package nccl

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

func sampleRecord() Record {
	return Record{Ticket: 7, Op: 1, Dtype: 7, Flags: FlagGrouped | FlagDevice, CommRank: 2, CommID: 0xdeadbeef01, NRanks: 4,
		Peer: -1, Seq: 41, Count: 1000, Bytes: 4000, Stream: 0x1234, EnterNS: 1_700_000_000_000_000_000,
		ReturnNS: 1_700_000_000_000_010_000, DevStartNS: 1_700_000_000_000_011_000, DevEndNS: 1_700_000_000_000_091_000,
		Root: -1, RedOp: 0, Aux: 9, Result: 0, Color: -3, Key: 5, TID: 4242}
}

func TestRecordRoundTrip(t *testing.T) {
	r := sampleRecord()
	var b [RecordSize]byte
	EncodeRecord(b[:], &r)
	got, err := DecodeRecord(b[:])
	if err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// byte positions from record.h
	if b[8] != 1 || b[10] != 7 || b[11] != 3 || b[16] != 0x01 || b[17] != 0xef || b[32] != 41 || b[124] != 0x92 {
		t.Fatalf("layout differs from record.h: % x", b[:])
	}
	if _, err := DecodeRecord(b[:100]); err == nil {
		t.Fatal("short record accepted")
	}
}

func TestHeaderRoundTripAndErrors(t *testing.T) {
	h := Header{Capacity: 64, PID: 99, WriteIndex: 5, ReadIndex: 3, Dropped: 2, Pause: 1, PauseExpired: 0x0503, PauseTimeoutMS: 100, StartNS: 1, ProcStart: 77,
		Rank: 3, World: 8, LocalRank: 1, Flags: HdrCUDAEvent, Job: "run42", Host: "node7"}
	b := make([]byte, HeaderSize)
	EncodeHeader(b, &h)
	size := int64(HeaderSize + 64*RecordSize)
	got, err := DecodeHeader(b, size)
	if err != nil || got != h {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if string(b[112:117]) != "run42" || b[96] != 3 || b[56] != 1 || b[304] != 3 || b[305] != 5 || b[8] != 2 {
		t.Fatalf("layout differs from record.h")
	}
	for _, tc := range []struct {
		name string
		mut  func(b []byte)
		size int64
		want string
	}{
		{"size", func([]byte) {}, size + 1, "capacity 64 needs"},
		{"magic", func(b []byte) { b[0] = 'x' }, size, "magic"},
		{"version", func(b []byte) { b[8] = 9 }, size, "version 9"},
		{"record size", func(b []byte) { b[12] = 64 }, size, "record_size 64"},
		{"capacity", func(b []byte) { b[16] = 63 }, size, "power of two"},
		{"header size", func(b []byte) { b[25] = 0x20 }, size, "header_size"},
	} {
		c := bytes.Clone(b)
		tc.mut(c)
		if _, err := DecodeHeader(c, tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	zero := make([]byte, HeaderSize)
	if _, err := DecodeHeader(zero, size); err != ErrNotReady {
		t.Errorf("zero header: %v, want ErrNotReady", err)
	}
}

func TestTranslate(t *testing.T) {
	o := Origin{PID: 10, Rank: 5, Host: "h"}
	r := sampleRecord()
	c, err := o.Call(&r)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rank != 5 || c.Comm != "000000deadbeef01" || c.Seq != 41 || c.Op.String() != "AllReduce" || c.Bytes != 4000 ||
		c.Dtype != "float32" || !c.Grouped || c.DevEndNS-c.DevStartNS != 80_000 || c.Step != -1 || c.Peer != -1 {
		t.Fatalf("call %+v", c)
	}
	r.Flags = 0
	if c, _ = o.Call(&r); c.DevStartNS != 0 || c.Grouped {
		t.Fatalf("device times without the flag: %+v", c)
	}
	// no $RANK: the communicator rank stands in
	if c, _ = (Origin{Rank: -1}).Call(&r); c.Rank != 2 {
		t.Fatalf("rank fallback %d", c.Rank)
	}
	for name, mut := range map[string]func(*Record){
		"table full":  func(r *Record) { r.Seq = -1 },
		"no comm":     func(r *Record) { r.CommID = 0 },
		"not a call":  func(r *Record) { r.Op = OpCommInit },
		"bad times":   func(r *Record) { r.ReturnNS = r.EnterNS - 1 },
		"bad op zero": func(r *Record) { r.Op = 0 },
	} {
		x := sampleRecord()
		mut(&x)
		if _, err := o.Call(&x); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := Record{Op: OpCommSplit, CommID: 1, CommRank: 1, NRanks: 2, Aux: 0xab}
	m, err := o.Comm(&s)
	if err != nil || m.Parent != "00000000000000ab" || m.Size != 2 || m.CommRank != 1 || m.Backend != "nccl" || m.Host != "h" {
		t.Fatalf("comm %+v %v", m, err)
	}
	s.NRanks = 0
	if _, err := o.Comm(&s); err == nil {
		t.Fatal("size 0 accepted")
	}
	if DtypeName(255) != "" || DtypeName(11) != "float8e5m2" || DtypeName(40) != "dtype40" {
		t.Fatal("dtype names")
	}
}

// FuzzDecodeRecord: any 128 bytes decode, re-encode to the same bytes, and
// translate without panicking into a call or comm that validates.
func FuzzDecodeRecord(f *testing.F) {
	r := sampleRecord()
	var b [RecordSize]byte
	EncodeRecord(b[:], &r)
	f.Add(b[:])
	r.Op = OpCommSplit
	EncodeRecord(b[:], &r)
	f.Add(b[:])
	f.Add(make([]byte, RecordSize))
	f.Add(bytes.Repeat([]byte{0xff}, RecordSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		rec, err := DecodeRecord(in)
		if err != nil {
			if len(in) == RecordSize {
				t.Fatalf("128 bytes rejected: %v", err)
			}
			return
		}
		var out [RecordSize]byte
		EncodeRecord(out[:], &rec)
		if !bytes.Equal(out[:], in) {
			t.Fatalf("re-encode differs")
		}
		for _, o := range []Origin{{Rank: -1}, {Rank: 3, PID: 1}} {
			if c, err := o.Call(&rec); err == nil {
				if err := c.Validate(0); err != nil {
					t.Fatalf("translated call invalid: %v", err)
				}
			}
			if m, err := o.Comm(&rec); err == nil {
				if err := m.Validate(0); err != nil {
					t.Fatalf("translated comm invalid: %v", err)
				}
			}
		}
	})
}

// FuzzDecodeHeader: headers from the shared directory are outside input.
func FuzzDecodeHeader(f *testing.F) {
	b := make([]byte, HeaderSize)
	EncodeHeader(b, &Header{Capacity: 8, Job: "j", Rank: -1, World: -1})
	f.Add(b, int64(HeaderSize+8*RecordSize))
	f.Add(make([]byte, HeaderSize), int64(0))
	f.Fuzz(func(t *testing.T, in []byte, size int64) {
		h, err := DecodeHeader(in, size)
		if err != nil {
			return
		}
		if h.Capacity&(h.Capacity-1) != 0 || size != HeaderSize+int64(h.Capacity)*RecordSize {
			t.Fatalf("accepted inconsistent header %+v size %d", h, size)
		}
	})
}

// FuzzPIDFromName: ring file names in the shared directory are outside
// input; a name yields a positive pid only in the shim's exact form.
func FuzzPIDFromName(f *testing.F) {
	for _, s := range []string{"laggard-nccl.12.17f3a", "laggard-nccl.12", "laggard-nccl.0.1", "laggard-nccl.-3.1", "laggard-nccl.7.", "x", "laggard-nccl.9.zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		pid := PIDFromName(name)
		if pid < 0 {
			t.Fatalf("%q: negative pid %d", name, pid)
		}
		if pid > 0 {
			head, _, _ := strings.Cut(strings.TrimPrefix(name, FilePrefix), ".")
			if n, err := strconv.Atoi(head); err != nil || n != pid || !strings.HasPrefix(name, FilePrefix) {
				t.Fatalf("%q: pid %d not in the name", name, pid)
			}
		}
	})
}

func TestPIDFromName(t *testing.T) {
	for name, want := range map[string]int{"laggard-nccl.12.17f3a": 12, "laggard-nccl.12": 0, "laggard-nccl.0.1": 0, "laggard-nccl.7.": 0, "laggard-nccl.9.zz": 0, "other.3.1": 0} {
		if got := PIDFromName(name); got != want {
			t.Errorf("PIDFromName(%q) = %d, want %d", name, got, want)
		}
	}
}
