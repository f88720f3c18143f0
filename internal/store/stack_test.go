package store

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// stackBatch is a node window with samples of ranks 0 and 1, a foreign
// sample on rank 1 and an unregistered process (rank -1).
func stackBatch(node string, start int64) *stack.Batch {
	return &stack.Batch{Node: node, StartNS: start, EndNS: start + 5e9, Hz: 99, Ratio: 0.1, Dropped: 4,
		Unwind: stack.UnwindStats{FPFrames: 9, DWARFFrames: 3, PythonFrames: 1},
		Mappings: []stack.Mapping{{Start: 0x400000, Limit: 0x500000, BuildID: "aa11", Path: "/bin/app"},
			{Start: 0x7f00, Limit: 0x8f00, Offset: 0x100, BuildID: "bb22", Path: "/lib/libc.so.6"},
			{Start: 1, Limit: 2, Path: "/unused"}},
		Samples: []stack.Sample{
			{Rank: 1, PID: 20, TID: 21, Comm: "python3", Thread: "main", Count: 5, Frames: []stack.Frame{
				{Kind: stack.Native, Addr: 0x7f10, Mapping: 1},
				{Kind: stack.Native, Addr: 0x401000, Mapping: 0},
				{Kind: stack.Python, Mapping: -1, Func: "step", File: "train.py", Line: 7}}},
			{Rank: 0, PID: 10, TID: 10, Comm: "python3", Count: 3, Truncated: true, Frames: []stack.Frame{
				{Kind: stack.Kernel, Addr: 0xffffffff81000010, Mapping: -1, Func: "do_syscall_64"},
				{Kind: stack.Native, Addr: 0x400ff0, Mapping: 0}}},
			{Rank: 1, PID: 99, TID: 99, Comm: "hog", Foreign: true, Count: 2, Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "[other process] hog"}}},
			{Rank: -1, PID: 7, Count: 1, Frames: []stack.Frame{{Kind: stack.Native, Addr: 0x10, Mapping: -1, Func: "exported_sym"}}},
		}}
}

func scanStacks(t testing.TB, s *Store, job string, q StackQuery) []*stack.Batch {
	t.Helper()
	var out []*stack.Batch
	if err := s.ScanStacks(job, q, func(b *stack.Batch) error { out = append(out, b); return nil }); err != nil {
		t.Fatalf("ScanStacks: %v", err)
	}
	return out
}

// flatten maps each stored sample back to batch terms (mapping by
// content) so records can be compared with the batch they came from.
type flatSample struct {
	stack.Sample
	Maps []stack.Mapping
}

func flatten(bs ...*stack.Batch) []flatSample {
	var out []flatSample
	for _, b := range bs {
		for _, s := range b.Samples {
			f := flatSample{Sample: s}
			f.Frames = slices.Clone(s.Frames)
			for j := range f.Frames {
				var m stack.Mapping
				if i := f.Frames[j].Mapping; i >= 0 {
					m = b.Mappings[i]
				}
				f.Maps = append(f.Maps, m)
				f.Frames[j].Mapping = 0
			}
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b flatSample) int { return a.Rank - b.Rank })
	return out
}

func TestStacksRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	in := stackBatch("node-1", t0)
	res, err := s.AppendStacks("a", in)
	if err != nil {
		t.Fatal(err)
	}
	if res != (StackAppend{Records: 3, Samples: 4}) {
		t.Fatalf("append: %+v", res)
	}
	got := scanStacks(t, s, "a", StackQuery{Rank: -1})
	if len(got) != 3 {
		t.Fatalf("%d records, want one per rank (3)", len(got))
	}
	for i, r := range []int{-1, 0, 1} { // time, then rank order
		b := got[i]
		if b.Node != "node-1" || b.StartNS != t0 || b.EndNS != t0+5e9 || b.Hz != 99 || b.Ratio != 0.1 {
			t.Fatalf("record %d header: %+v", i, b)
		}
		for _, smp := range b.Samples {
			if smp.Rank != r {
				t.Fatalf("record %d holds rank %d", i, smp.Rank)
			}
		}
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		if (b.Dropped != 0) != (i == 0) {
			t.Fatalf("dropped/unwind belong on the first record only: %d: %+v", i, b)
		}
	}
	if got[0].Unwind != in.Unwind || got[0].Dropped != in.Dropped {
		t.Fatalf("meta: %+v", got[0])
	}
	if len(got[2].Mappings) != 2 || len(got[1].Mappings) != 1 {
		t.Fatalf("per-record mapping tables keep only the used mappings: %+v / %+v", got[1].Mappings, got[2].Mappings)
	}
	if want, have := flatten(in), flatten(got...); !reflect.DeepEqual(want, have) {
		t.Fatalf("samples changed:\nwant %+v\nhave %+v", want, have)
	}
	// One rank.
	one := scanStacks(t, s, "a", StackQuery{Rank: 1})
	if len(one) != 1 || len(one[0].Samples) != 2 {
		t.Fatalf("rank 1: %+v", one)
	}
	// A resend is all duplicates and changes nothing.
	res, err = s.AppendStacks("a", stackBatch("node-1", t0))
	if err != nil || res != (StackAppend{Duplicates: 3}) {
		t.Fatalf("resend: %+v %v", res, err)
	}
	st, err := s.ProfileStats("a")
	if err != nil || st.StackRecords != 3 || st.Samples != 4 || st.FirstNS != t0 || st.LastNS != t0+5e9 {
		t.Fatalf("stats: %+v %v", st, err)
	}
	// A window split in two posts with rank 1 in both (an agent halving
	// a batch refused as too large) keeps both parts.
	half := stackBatch("node-2", t0)
	x, y := *half, *half
	x.Samples, y.Samples = half.Samples[:1], half.Samples[1:]
	y.Dropped, y.Unwind = 0, stack.UnwindStats{}
	for _, p := range []*stack.Batch{&x, &y} {
		if _, err := s.AppendStacks("a", p); err != nil {
			t.Fatal(err)
		}
	}
	var r1 int
	for _, b := range scanStacks(t, s, "a", StackQuery{Rank: 1}) {
		if b.Node == "node-2" {
			r1 += len(b.Samples)
		}
	}
	if r1 != 2 {
		t.Fatalf("split window: %d rank-1 samples stored, want 2", r1)
	}
}

func TestStacksWindowsAndRanks(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	// Three nodes × 10 windows of 5 s, written out of order.
	for w := 9; w >= 0; w-- {
		var bs []StackBatch
		for n := range 3 {
			b := &stack.Batch{Node: fmt.Sprintf("n%d", n), StartNS: t0 + int64(w)*5e9 + int64(n), EndNS: t0 + int64(w+1)*5e9 + int64(n), Hz: 99, Ratio: 1}
			for r := n * 4; r < n*4+4; r++ {
				b.Samples = append(b.Samples, stack.Sample{Rank: r, PID: r, Count: int64(w + 1), Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "f"}}})
			}
			bs = append(bs, StackBatch{JobID: "a", Batch: b})
		}
		if _, err := s.AppendStacksMany(bs); err != nil {
			t.Fatal(err)
		}
	}
	all := scanStacks(t, s, "a", StackQuery{Rank: -1})
	if len(all) != 120 {
		t.Fatalf("%d records", len(all))
	}
	if !slices.IsSortedFunc(all, func(a, b *stack.Batch) int { return int(a.StartNS - b.StartNS) }) {
		t.Fatal("not in time order")
	}
	// Rank 5 lives on node 1: one record per window.
	r5 := scanStacks(t, s, "a", StackQuery{Rank: 5})
	if len(r5) != 10 {
		t.Fatalf("rank 5: %d records", len(r5))
	}
	// A window from the middle of window 3 to the middle of window 5
	// overlaps windows 3, 4, 5.
	mid := scanStacks(t, s, "a", StackQuery{FromNS: t0 + 3*5e9 + 2e9, ToNS: t0 + 5*5e9 + 2e9, Rank: 5})
	if len(mid) != 3 || mid[0].Samples[0].Count != 4 || mid[2].Samples[0].Count != 6 {
		t.Fatalf("window: %+v", mid)
	}
	if got := scanStacks(t, s, "a", StackQuery{Rank: 999}); len(got) != 0 {
		t.Fatalf("absent rank: %d", len(got))
	}
	// fn's error stops the scan unchanged.
	stop := errors.New("stop")
	if err := s.ScanStacks("a", StackQuery{Rank: -1}, func(*stack.Batch) error { return stop }); err != stop {
		t.Fatalf("stop: %v", err)
	}
	if err := s.ScanStacks("nope", StackQuery{Rank: -1}, func(*stack.Batch) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestOSStatsRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	var want []*osstat.Batch
	for w := range 4 {
		b := &osstat.Batch{Node: "n1", StartNS: t0 + int64(w)*5e9, EndNS: t0 + int64(w+1)*5e9,
			Points: []osstat.Point{{Name: osstat.SoftIRQs, Rank: -1, CPU: 3, Device: "NET_RX", Value: float64(w)},
				{Name: osstat.RunQueueWait, Rank: 2, CPU: -1, Value: math.SmallestNonzeroFloat64}},
			Absent: []osstat.Absence{{Source: osstat.SrcNVML, Reason: "built without NVML"}}}
		if err := s.AppendOSStats("a", b); err != nil {
			t.Fatal(err)
		}
		want = append(want, b)
	}
	if res, err := s.AppendOSStatsMany([]OSStatBatch{{JobID: "a", Batch: want[0]}}); err != nil || res[0].Duplicates != 1 {
		t.Fatalf("resend: %+v %v", res, err)
	}
	var got []*osstat.Batch
	if err := s.ScanOSStats("a", t0+5e9+1, t0+2*5e9, func(b *osstat.Batch) error { got = append(got, b); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[1:3]) {
		t.Fatalf("scan:\n%+v\nwant\n%+v", got, want[1:3])
	}
	st, _ := s.ProfileStats("a")
	if st.OSRecords != 4 || st.StackRecords != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// DeleteJob and retention take both keyspaces with the job; a job
// registered again under the id starts empty.
func TestStacksDeletedWithJob(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendStacks("a", stackBatch("n", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendOSStats("a", &osstat.Batch{StartNS: t0, EndNS: t0 + 1, Points: []osstat.Point{{Name: "x", Rank: -1, CPU: -1}}}); err != nil {
		t.Fatal(err)
	}
	ages, _ := s.JobAges()
	if len(ages) != 1 || ages[0].LastWrite.IsZero() {
		t.Fatalf("a stack write must count as activity for retention: %+v", ages)
	}
	if ok, err := s.DeleteIdleJob("a", time.Now().Add(-time.Hour)); ok || err != nil {
		t.Fatalf("a job written just now is not idle: %v %v", ok, err)
	}
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendStacks("a", stackBatch("n", t0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("append to a deleted job: %v", err)
	}
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if got := scanStacks(t, s, "a", StackQuery{Rank: -1}); len(got) != 0 {
		t.Fatalf("%d records survived the delete", len(got))
	}
	n := 0
	_ = s.ScanOSStats("a", 0, 0, func(*osstat.Batch) error { n++; return nil })
	st, _ := s.ProfileStats("a")
	if n != 0 || st != (ProfileStats{}) {
		t.Fatalf("os records %d, stats %+v", n, st)
	}
	if k, err := s.Reclaim(); err != nil || k == 0 {
		t.Fatalf("reclaim: %d %v", k, err)
	}
}

func TestStacksQuotaAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quiet, MaxJobProfileBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	var qerr error
	for w := range 100 {
		if _, qerr = s.AppendStacks("a", stackBatch("n", t0+int64(w)*5e9)); qerr != nil {
			break
		}
	}
	if !errors.Is(qerr, ErrQuota) {
		t.Fatalf("quota: %v", qerr)
	}
	before, _ := s.ProfileStats("a")
	if before.StackBytes > 2000 {
		t.Fatalf("over quota: %+v", before)
	}
	s.Close()
	s, err = Open(dir, Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := s.ProfileStats("a")
	if err != nil || after != before {
		t.Fatalf("stats after reopen %+v, before %+v (%v)", after, before, err)
	}
	if got := scanStacks(t, s, "a", StackQuery{Rank: -1}); int64(len(got)) != after.StackRecords {
		t.Fatalf("%d records, stats say %d", len(got), after.StackRecords)
	}
}

func TestStacksRefused(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	b := stackBatch("n", t0)
	b.Samples[2].Count = 0
	_, err := s.AppendStacks("a", b)
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "samples[2].count" {
		t.Fatalf("invalid sample: %v", err)
	}
	b = stackBatch("n", t0)
	b.EndNS = b.StartNS + MaxStackSpanNS + 1
	if _, err := s.AppendStacks("a", b); !errors.As(err, &fe) || fe.Field != "end_ns" {
		t.Fatalf("span: %v", err)
	}
	if _, err := s.AppendStacks("zz", stackBatch("n", t0)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

// The decoders never panic and accept only what validates.
func FuzzStackRecord(f *testing.F) {
	var e stackEnc
	b := stackBatch("n", t0)
	f.Add(e.appendStackRecord(nil, b, []int32{0, 2}, true), 1)
	f.Add(e.appendStackRecord(nil, b, []int32{3}, false), -1)
	f.Add(appendOSStatRecord(nil, &e, &osstat.Batch{Node: "x", StartNS: t0, EndNS: t0 + 1, Points: []osstat.Point{{Name: "a", Rank: 1, CPU: -1}}}), -2)
	f.Add([]byte{1, 0, 0}, 0)
	f.Fuzz(func(t *testing.T, v []byte, rank int) {
		if rank < -2 || rank > 100 {
			return
		}
		if rank == -2 {
			var ob osstat.Batch
			if err := decodeOSStatRecord(v, t0, &ob); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error not ErrCorrupt: %v", err)
				}
				return
			}
			if err := ob.Validate(); err != nil {
				t.Fatal(err)
			}
			return
		}
		var sb stack.Batch
		if err := decodeStackRecord(v, t0, rank, &sb); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if err := sb.Validate(); err != nil {
			t.Fatal(err)
		}
		// Re-encoding a decoded record decodes to the same batch.
		idx := make([]int32, len(sb.Samples))
		for i := range idx {
			idx[i] = int32(i)
		}
		meta := len(v) > 1 && v[1]&stackFlagMeta != 0
		var back stack.Batch
		if err := decodeStackRecord(e.appendStackRecord(nil, &sb, idx, meta), t0, rank, &back); err != nil {
			t.Fatalf("re-encoded record: %v", err)
		}
		if !reflect.DeepEqual(flatten(&sb), flatten(&back)) {
			t.Fatalf("re-encoding changed the record")
		}
	})
}
