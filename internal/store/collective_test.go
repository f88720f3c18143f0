package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
)

const t0 = int64(1_700_000_000) * 1e9

// mkCall is a deterministic call of rank on comm, seq-th on it.
func mkCall(rank int, comm string, seq int64) collective.Call {
	enter := t0 + seq*1e6 + int64(rank)*1000
	return collective.Call{Rank: rank, PID: 100 + rank, Comm: comm, Seq: seq, Op: collective.AllReduce,
		Bytes: 1 << 20, Count: 1 << 18, Dtype: "float32", Peer: -1, Root: -1, Stream: 7,
		EnterNS: enter, ReturnNS: enter + 5000, DevStartNS: enter + 2000, DevEndNS: enter + 900_000, Step: seq / 4}
}

func collectCalls(t *testing.T, s *Store, job string, q CallQuery) []collective.Call {
	t.Helper()
	var out []collective.Call
	if err := s.ScanCalls(job, q, func(c *collective.Call) error { out = append(out, *c); return nil }); err != nil {
		t.Fatalf("ScanCalls: %v", err)
	}
	return out
}

func TestCollectiveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	b := &collective.Batch{Dropped: 3}
	for seq := int64(0); seq < 5; seq++ {
		for r := 3; r >= 0; r-- { // out of order on purpose
			c := mkCall(r, "world", seq)
			if r == 2 {
				c.DevStartNS, c.DevEndNS, c.Grouped, c.Dtype, c.PID, c.Stream, c.Count = 0, 0, true, "", 0, 0, 0
				c.Op, c.Peer, c.Step = collective.Send, 3, -1
			}
			b.Calls = append(b.Calls, c)
		}
		b.Calls = append(b.Calls, mkCall(1, "tp0", seq))
	}
	res, err := s.AppendCollectives("j", b)
	if err != nil {
		t.Fatal(err)
	}
	if res != (CollectiveAppend{Calls: 25}) {
		t.Fatalf("append = %+v", res)
	}
	check := func(s *Store) {
		got := collectCalls(t, s, "j", CallQuery{Rank: -1})
		if len(got) != 25 {
			t.Fatalf("scanned %d calls, want 25", len(got))
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.Rank > b.Rank || (a.Rank == b.Rank && a.EnterNS > b.EnterNS) {
				t.Fatalf("order broken at %d: %+v then %+v", i, a, b)
			}
		}
		want := map[[3]any]collective.Call{}
		for _, c := range b.Calls {
			want[[3]any{c.Rank, c.Comm, c.Seq}] = c
		}
		for _, c := range got {
			if w := want[[3]any{c.Rank, c.Comm, c.Seq}]; !reflect.DeepEqual(w, c) {
				t.Fatalf("stored %+v\nwant   %+v", c, w)
			}
		}
		st, err := s.CollectiveStats("j")
		if err != nil {
			t.Fatal(err)
		}
		if st.Calls != 25 || st.Dropped != 3 || st.Ranks != 4 || st.FirstNS != mkCall(0, "world", 0).EnterNS || st.LastNS != mkCall(3, "world", 4).EnterNS {
			t.Fatalf("stats %+v", st)
		}
	}
	check(s)
	s.Close()
	s = openTest(t, dir) // the index reloads from disk
	check(s)

	// Queries: one rank, a time window.
	got := collectCalls(t, s, "j", CallQuery{Rank: 1, FromNS: t0 + 1e6, ToNS: t0 + 3e6 + 1000})
	if len(got) != 6 { // world and tp0, seqs 1..3
		t.Fatalf("rank 1 window: %d calls: %+v", len(got), got)
	}
	got = collectCalls(t, s, "j", CallQuery{Rank: -1, FromNS: t0 + 4e6})
	if len(got) != 5 {
		t.Fatalf("from seq 4: %d calls", len(got))
	}
	if got := collectCalls(t, s, "j", CallQuery{Rank: 9}); len(got) != 0 {
		t.Fatalf("rank 9: %d calls", len(got))
	}
}

// storedCalls is a store holding job "j" with calls seq 0–9 of ranks 0
// and 1 on communicator "w", and that batch.
func storedCalls(t *testing.T) (*Store, collective.Batch) {
	t.Helper()
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	var b collective.Batch
	for seq := range int64(10) {
		b.Calls = append(b.Calls, mkCall(0, "w", seq), mkCall(1, "w", seq))
	}
	if _, err := s.AppendCollectives("j", &b); err != nil {
		t.Fatal(err)
	}
	return s, b
}

func TestCollectiveDuplicatesIdempotent(t *testing.T) {
	s, b := storedCalls(t)
	res, err := s.AppendCollectives("j", &b) // a retried batch
	if err != nil {
		t.Fatal(err)
	}
	if res != (CollectiveAppend{Duplicates: 20}) {
		t.Fatalf("resend = %+v", res)
	}
	// A batch overlapping the stored one, with a duplicate inside itself.
	over := collective.Batch{Calls: []collective.Call{mkCall(0, "w", 9), mkCall(0, "w", 10), mkCall(0, "w", 10), mkCall(0, "w", 3)}}
	if res, err = s.AppendCollectives("j", &over); err != nil {
		t.Fatal(err)
	}
	if res != (CollectiveAppend{Calls: 1, Duplicates: 2}) {
		t.Fatalf("overlap = %+v", res)
	}
	// Two batches of one job in one group commit, the second resending the first.
	more := collective.Batch{Calls: []collective.Call{mkCall(2, "w", 0)}}
	rs, err := s.AppendCollectivesMany([]CollectiveBatch{{"j", &more}, {"j", &more}})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0] != (CollectiveAppend{Calls: 1}) || rs[1] != (CollectiveAppend{Duplicates: 1}) {
		t.Fatalf("group = %+v", rs)
	}
	st, _ := s.CollectiveStats("j")
	if n := len(collectCalls(t, s, "j", CallQuery{Rank: -1})); st.Calls != 22 || n != 22 {
		t.Fatalf("stats %d calls, scan %d, want 22", st.Calls, n)
	}
}

func TestCollectiveCommMerge(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	report := func(id string, size, rank, cr int) collective.Comm {
		return collective.Comm{ID: id, Size: size, Rank: rank, CommRank: cr, Backend: "nccl", Host: "h"}
	}
	// Members report one by one (NCCL: each rank knows only itself).
	for _, c := range []collective.Comm{report("dp", 3, 4, 1), report("dp", 3, 0, 0)} {
		if _, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{c}}); err != nil {
			t.Fatal(err)
		}
	}
	comms, err := s.Comms("j")
	if err != nil {
		t.Fatal(err)
	}
	if len(comms) != 1 || comms[0].Ranks != nil || comms[0].Size != 3 {
		t.Fatalf("partial: %+v", comms)
	}
	res, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{report("dp", 3, 8, 2), report("dp", 3, 8, 2)},
		Calls: []collective.Call{mkCall(0, "seen-only-in-calls", 0)}})
	if err != nil || res.Comms != 1 { // the repeated report adds nothing
		t.Fatalf("res %+v err %v", res, err)
	}
	// torch knows the whole group.
	pg := collective.Comm{ID: "pg", Size: 2, Rank: 5, CommRank: 1, Ranks: []int{2, 5}, Parent: "dp", Backend: "gloo"}
	if _, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{pg}}); err != nil {
		t.Fatal(err)
	}
	comms, _ = s.Comms("j")
	want := []collective.Comm{{ID: "dp", Size: 3, Ranks: []int{0, 4, 8}, Backend: "nccl"}, {ID: "pg", Size: 2, Ranks: []int{2, 5}, Parent: "dp", Backend: "gloo"}}
	if !reflect.DeepEqual(comms, want) {
		t.Fatalf("comms\n%+v\nwant\n%+v", comms, want)
	}
	for _, c := range []struct {
		name  string
		comm  collective.Comm
		field string
	}{
		{"size", report("dp", 4, 0, 0), "comms[0].size"},
		{"taken comm rank", report("dp", 3, 7, 1), "comms[0].comm_rank"},
		{"rank moved", report("dp", 3, 4, 2), "comms[0].comm_rank"},
		{"backend", collective.Comm{ID: "dp", Size: 3, Rank: 4, CommRank: 1, Backend: "gloo"}, "comms[0].backend"},
		{"ranks", collective.Comm{ID: "pg", Size: 2, Rank: 5, CommRank: 1, Ranks: []int{3, 5}}, "comms[0].ranks"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := collectCalls(t, s, "j", CallQuery{Rank: -1})
			b := &collective.Batch{Comms: []collective.Comm{c.comm}, Calls: []collective.Call{mkCall(9, "dp", 0)}}
			_, err := s.AppendCollectives("j", b)
			var ce *signal.ConflictError
			if !errors.As(err, &ce) || ce.Field != c.field {
				t.Fatalf("err = %v, want a conflict on %s", err, c.field)
			}
			if after := collectCalls(t, s, "j", CallQuery{Rank: -1}); len(after) != len(before) {
				t.Fatal("a refused batch stored calls")
			}
		})
	}
	comms2, _ := s.Comms("j")
	if !reflect.DeepEqual(comms2, want) {
		t.Fatalf("conflicts changed the table: %+v", comms2)
	}
}

func TestCollectiveCheckNamesField(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mut   func(*collective.Call)
		field string
	}{
		{func(c *collective.Call) { c.EnterNS = 5 }, "calls[1].enter_ns"},
		{func(c *collective.Call) { c.ReturnNS = c.EnterNS - 1 }, "calls[1].return_ns"},
		{func(c *collective.Call) { c.Comm = "" }, "calls[1].comm"},
		{func(c *collective.Call) { c.Op = 0 }, "calls[1].op"},
		{func(c *collective.Call) { c.Seq = -1 }, "calls[1].seq"},
		{func(c *collective.Call) { c.DevEndNS = c.DevStartNS - 1 }, "calls[1].dev_end_ns"},
	} {
		b := collective.Batch{Calls: []collective.Call{mkCall(0, "w", 0), mkCall(0, "w", 1)}}
		c.mut(&b.Calls[1])
		_, err := s.AppendCollectives("j", &b)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("err = %v, want field %s", err, c.field)
		}
	}
	if _, err := s.AppendCollectives("nope", &collective.Batch{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

func TestCollectiveDeleteJob(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, id := range []string{"a", "b"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
		b := collective.Batch{Comms: []collective.Comm{{ID: "w", Size: 1}}, Calls: []collective.Call{mkCall(0, "w", 0), mkCall(0, "w", 1)}}
		if _, err := s.AppendCollectives(id, &b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reclaim(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{prefixCall, prefixComm, prefixHighWater} {
		n := 0
		if err := s.scanRange(jobRange(p, "a", 0), func(k, v []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s keys of the deleted job remain: %d", p, n)
		}
	}
	if _, closer, err := s.db.Get(collStatsKey("a")); err == nil {
		closer.Close()
		t.Error("x/ key of the deleted job remains")
	}
	// Re-registering the id starts empty; the other job is untouched.
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.CollectiveStats("a"); st != (CollectiveStats{}) {
		t.Fatalf("re-registered job has stats %+v", st)
	}
	if comms, _ := s.Comms("a"); len(comms) != 0 {
		t.Fatalf("re-registered job has comms %+v", comms)
	}
	if n := len(collectCalls(t, s, "b", CallQuery{Rank: -1})); n != 2 {
		t.Fatalf("job b has %d calls", n)
	}
	// Retention sees collective writes.
	ages, _ := s.JobAges()
	for _, a := range ages {
		if a.ID == "b" && a.LastWrite.IsZero() {
			t.Fatal("collective writes do not count as activity for retention")
		}
	}
}

func TestCollectiveCorruptValue(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendCollectives("j", &collective.Batch{Calls: []collective.Call{mkCall(0, "w", 0)}}); err != nil {
		t.Fatal(err)
	}
	key := appendCallSuffix(jobRange(prefixCall, "j", callSuffixLen), 0, mkCall(0, "w", 0).EnterNS, 0, 0)
	if err := s.db.Set(key, []byte{1, 0xff}, nil); err != nil {
		t.Fatal(err)
	}
	err := s.ScanCalls("j", CallQuery{Rank: -1}, func(*collective.Call) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "c/j[rank=0") {
		t.Fatalf("err = %v", err)
	}
}

func TestCallCodecRoundTrip(t *testing.T) {
	for i, c := range []collective.Call{
		mkCall(0, "w", 0),
		{Rank: 1, Comm: "x", Op: collective.Barrier, EnterNS: collective.MinNS, ReturnNS: collective.MinNS, Peer: -1, Root: -1, Step: -1},
		{Rank: maxRank, Comm: "x", Seq: collective.MaxSeq, Op: collective.Recv, Bytes: collective.MaxBytes, Count: collective.MaxBytes,
			Dtype: strings.Repeat("d", maxDtypeLen), PID: maxPID, Stream: ^uint64(0), Peer: collective.MaxCommSize - 1, Root: collective.MaxCommSize - 1,
			EnterNS: collective.MaxNS, ReturnNS: collective.MaxNS + collective.MaxDurationNS, DevStartNS: collective.MinNS, DevEndNS: collective.MinNS + 1,
			Step: collective.MaxSeq, Grouped: true},
	} {
		if err := checkCall(&c); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		got := collective.Call{Rank: c.Rank, Comm: c.Comm, Seq: c.Seq, EnterNS: c.EnterNS}
		var d callReader
		if err := d.decode(appendCall(nil, &c), &got); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%d: got %+v\nwant %+v", i, got, c)
		}
	}
}

func TestCommCodecRoundTrip(t *testing.T) {
	for _, m := range []commRec{{ID: "x"}, {ID: "dp", Size: 3, Parent: "w", Backend: "nccl"}} {
		got, err := decodeComm(appendComm(nil, &m))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("got %+v want %+v", got, m)
		}
	}
	if _, err := decodeComm([]byte{commVersion, 1, 'x', 0, 0, 2, 1, 1}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing members: %v", err)
	}
	// A member value is a rank below MaxCommSize: never a negative one
	// (review2 #10: the old decoder wrapped 2^32-1 to -2).
	for _, v := range []uint64{collective.MaxCommSize, 1<<32 - 1, 1 << 40} {
		if _, err := decodeMember(binary.AppendUvarint(nil, v)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("member %d: %v", v, err)
		}
	}
	if r, err := decodeMember(appendMember(nil, 7)); err != nil || r != 7 {
		t.Fatalf("member 7: %d %v", r, err)
	}
}

// review2 #1: a batch of huge communicator reports must be refused, not
// allocate 4·size bytes each; members are held sparsely until complete.
func TestCollectiveCommBounds(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	big := func(id string, rank int) collective.Comm {
		return collective.Comm{ID: id, Size: collective.MaxCommSize, Rank: rank, CommRank: rank}
	}
	fieldErr := func(err error, field string) {
		t.Helper()
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Fatalf("err = %v, want a field error on %s", err, field)
		}
	}
	// Two new size-2^20 communicators in one batch: over MaxBatchCommSizes.
	_, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{big("a", 0), big("b", 0)}})
	fieldErr(err, "comms[1].size")
	// One per batch is fine, up to MaxJobCommSizes for the job.
	for i := range MaxJobCommSizes / collective.MaxCommSize {
		if _, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{big(fmt.Sprint("w", i), 3)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{big("one-more", 0)}})
	fieldErr(err, "comms[0].size")
	// A further member of a known communicator is not a new size.
	if res, err := s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{big("w0", 5)}}); err != nil || res.Comms != 1 {
		t.Fatalf("res %+v err %v", res, err)
	}
	s.coll.mu.Lock()
	cj := s.coll.jobs["j"]
	m := cj.comms[cj.ids["w0"]]
	s.coll.mu.Unlock()
	if m.dense != nil || len(m.members) != 2 {
		t.Fatalf("w0 members held as %d dense, %d sparse; want 2 sparse", len(m.dense), len(m.members))
	}
	s.Close()
	s = openTest(t, dir) // members reload from their keys
	comms, err := s.Comms("j")
	if err != nil || len(comms) != MaxJobCommSizes/collective.MaxCommSize || comms[0].Ranks != nil {
		t.Fatalf("comms after reopen: %d, %v", len(comms), err)
	}
	s.coll.mu.Lock()
	cj = s.coll.jobs["j"]
	m = cj.comms[cj.ids["w0"]]
	s.coll.mu.Unlock()
	if r, ok := m.rankAt(5); !ok || r != 5 || len(m.members) != 2 {
		t.Fatalf("w0 after reopen: %+v", m.members)
	}
}

// review2 #1: distinct communicator ids per job are capped.
func TestCollectiveCommIDCap(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	calls := make([]collective.Call, MaxJobComms)
	for i := range calls {
		calls[i] = mkCall(0, fmt.Sprint("c", i), 0)
	}
	if _, err := s.AppendCollectives("j", &collective.Batch{Calls: calls}); err != nil {
		t.Fatal(err)
	}
	_, err := s.AppendCollectives("j", &collective.Batch{Calls: []collective.Call{mkCall(0, "c1", 1), mkCall(0, "new", 0)}})
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "calls[1].comm" {
		t.Fatalf("err = %v, want a field error on calls[1].comm", err)
	}
	_, err = s.AppendCollectives("j", &collective.Batch{Comms: []collective.Comm{{ID: "new", Size: 1}}})
	if !errors.As(err, &fe) || fe.Field != "comms[0].id" {
		t.Fatalf("err = %v, want a field error on comms[0].id", err)
	}
}

// review2 #8: a resent batch counts neither its drops nor its
// communicator reports again.
func TestCollectiveResendCountsOnce(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	b := &collective.Batch{Dropped: 5, Calls: []collective.Call{mkCall(0, "w", 0), mkCall(0, "w", 1)},
		Comms: []collective.Comm{{ID: "w", Size: 2, Rank: 0, CommRank: 0}}}
	for i, want := range []CollectiveAppend{{Calls: 2, Comms: 1}, {Duplicates: 2}} {
		res, err := s.AppendCollectives("j", b)
		if err != nil || res != want {
			t.Fatalf("send %d: %+v %v, want %+v", i, res, err, want)
		}
	}
	// A drop-only report counts; a comm-only resend does not.
	for _, b := range []*collective.Batch{{Dropped: 2}, {Dropped: 7, Comms: []collective.Comm{{ID: "w", Size: 2, Rank: 0, CommRank: 0}}}} {
		if _, err := s.AppendCollectives("j", b); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := s.CollectiveStats("j"); st.Dropped != 7 {
		t.Fatalf("dropped %d, want 5 + 2", st.Dropped)
	}
}

// The dtype flag marks a non-empty dtype: a zero length is corrupt, as
// docs/format/collective.md says (review2 #10).
func TestDecodeCallEmptyDtype(t *testing.T) {
	c := mkCall(0, "w", 0)
	c.Dtype = "f"
	v := appendCall(nil, &c)
	i := bytes.IndexByte(v, 'f')
	bad := append(append(slices.Clone(v[:i-1]), 0), v[i+1:]...)
	got := collective.Call{Rank: c.Rank, Comm: c.Comm, EnterNS: c.EnterNS, Seq: c.Seq}
	var d callReader
	if err := d.decode(bad, &got); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "empty dtype") {
		t.Fatalf("empty dtype with the flag: %v", err)
	}
}
