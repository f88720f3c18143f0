package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// wantConflict fails t unless err is ErrConflict naming field (and, when
// set, holding every part of msg).
func wantConflict(t *testing.T, what string, err error, field string, msg ...string) {
	t.Helper()
	var ce *signal.ConflictError
	if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Field != field {
		t.Fatalf("%s: %v, want ErrConflict naming %s", what, err, field)
	}
	for _, m := range msg {
		if !strings.Contains(ce.Msg, m) {
			t.Fatalf("%s: %q does not say %q", what, ce.Msg, m)
		}
	}
}

// Issue 16 item 1, the class: every keyspace a record can be re-sent to.
// Collective calls: an identical re-send is a duplicate; a call of the
// same key with other values (another size, another duration) is refused
// with nothing of its batch stored — below the high-water mark (read
// back) and across the batches of one group commit.
func TestCollectiveResentConflict(t *testing.T) {
	s, b := storedCalls(t)
	changed := mkCall(1, "w", 4)
	changed.Bytes *= 2
	_, err := s.AppendCollectives("j", &collective.Batch{Calls: []collective.Call{mkCall(0, "w", 10), changed}})
	wantConflict(t, "a stored call re-sent with another size", err, "calls[1]", "rank 1's call seq 4", `"w"`)
	grouped := mkCall(2, "w", 0)
	other := grouped
	other.ReturnNS++
	_, err = s.AppendCollectivesMany([]CollectiveBatch{{"j", &collective.Batch{Calls: []collective.Call{grouped}}}, {"j", &collective.Batch{Calls: []collective.Call{other}}}})
	wantConflict(t, "two batches of one commit disagreeing", err, "calls[0]")
	// One call twice in a batch with other values: a bad batch.
	_, err = s.AppendCollectives("j", &collective.Batch{Calls: []collective.Call{mkCall(3, "w", 0), other, grouped}})
	var fe *signal.FieldError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "calls[") {
		t.Fatalf("one call twice with other values: %v", err)
	}
	st, _ := s.CollectiveStats("j")
	if n := len(collectCalls(t, s, "j", CallQuery{Rank: -1})); st.Calls != 20 || n != 20 {
		t.Fatalf("after refused re-sends: stats %d calls, scan %d, want the 20 first stored", st.Calls, n)
	}
	for _, c := range collectCalls(t, s, "j", CallQuery{Rank: 1}) {
		if c.Bytes != mkCall(1, "w", c.Seq).Bytes {
			t.Fatalf("call %+v was overwritten", c)
		}
	}
	// The identical re-send still passes.
	if res, err := s.AppendCollectives("j", &b); err != nil || res.Duplicates != 20 {
		t.Fatalf("identical re-send: %+v %v", res, err)
	}
}

// Stack windows: before, a window re-sent with other counts had another
// key (a content hash) and was stored beside the first, counting the
// window twice. A window's cell is (start, rank, node); a part of it with
// disjoint stacks (an agent halving a batch) is stored, a re-sent part is
// a duplicate, another count for a stored stack is a conflict.
func TestStacksResentConflict(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	const start = t0
	whole := stackBatch("n1", start)
	if _, err := s.AppendStacks("j", whole); err != nil {
		t.Fatal(err)
	}
	total := func() int64 {
		var n int64
		for _, b := range scanStacks(t, s, "j", StackQuery{Rank: -1}) {
			for _, x := range b.Samples {
				n += x.Count
			}
		}
		return n
	}
	want := total()
	// The same window with rank 1's stack counted again differently.
	again := stackBatch("n1", start)
	again.Samples[0].Count++
	_, err := s.AppendStacks("j", again)
	wantConflict(t, "a stack re-sent with another count", err, "samples[0]", "rank 1's stack window", `"n1"`)
	if got := total(); got != want {
		t.Fatalf("after the refused re-send the window holds %d samples' worth, want %d", got, want)
	}
	// Another window end for the same start: a conflict too.
	longer := stackBatch("n1", start)
	longer.EndNS += 1e9
	_, err = s.AppendStacks("j", longer)
	wantConflict(t, "a window re-sent with another end", err, "end_ns")
	// A re-sent half (rank 1's first stack only) of the stored window is
	// a duplicate; another node's window at the same start is its own.
	half := stackBatch("n1", start)
	half.Samples, half.Dropped = half.Samples[:1], 0
	if res, err := s.AppendStacks("j", half); err != nil || res.Duplicates != 1 || res.Records != 0 {
		t.Fatalf("a re-sent half: %+v %v", res, err)
	}
	if res, err := s.AppendStacks("j", withNode(again, "n2")); err != nil || res.Records == 0 {
		t.Fatalf("another node's window: %+v %v", res, err)
	}
	// A window sent in two disjoint halves (the agent's split) keeps both;
	// the halves re-sent are duplicates; a half overlapping only in part
	// is refused.
	a, b := stackBatch("n3", start), stackBatch("n3", start)
	a.Samples, b.Samples = a.Samples[:2], b.Samples[2:]
	b.Dropped = 0
	for _, h := range []*stack.Batch{a, b} {
		if res, err := s.AppendStacks("j", h); err != nil || res.Records == 0 {
			t.Fatalf("a disjoint half: %+v %v", res, err)
		}
	}
	if res, err := s.AppendStacks("j", stackBatch("n3", start)); err != nil || res.Records != 0 {
		t.Fatalf("the whole window after its halves: %+v %v, want duplicates only", res, err)
	}
	mixed := stackBatch("n4", start)
	if _, err := s.AppendStacks("j", &stack.Batch{Node: "n4", StartNS: start, EndNS: start + 5e9, Hz: 99, Ratio: 0.1, Mappings: mixed.Mappings, Samples: mixed.Samples[:1]}); err != nil {
		t.Fatal(err)
	}
	extra := *mixed
	extra.Samples = append(mixed.Samples[:1:1], stack.Sample{Rank: 1, PID: 20, TID: 22, Count: 1, Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "new"}}})
	_, err = s.AppendStacks("j", &extra)
	wantConflict(t, "a re-send overlapping the stored window in part", err, "samples[1]")
}

// withNode is b from another node.
func withNode(b *stack.Batch, node string) *stack.Batch { c := *b; c.Node = node; return &c }

// OS windows: the cell is (start, node); a point re-sent with another
// value is a conflict, an identical window a duplicate.
func TestOSStatsResentConflict(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	mk := func(v float64) *osstat.Batch {
		return &osstat.Batch{Node: "n1", StartNS: t0, EndNS: t0 + 5e9,
			Points: []osstat.Point{{Name: osstat.RunQueueWait, Rank: 1, CPU: -1, Value: 0.5}, {Name: osstat.SoftIRQs, Rank: -1, CPU: 2, Device: "NET_RX", Value: v}}}
	}
	if err := s.AppendOSStats("j", mk(10)); err != nil {
		t.Fatal(err)
	}
	if res, err := s.AppendOSStatsMany([]OSStatBatch{{"j", mk(10)}}); err != nil || res[0].Duplicates != 1 {
		t.Fatalf("identical re-send: %+v %v", res, err)
	}
	err := s.AppendOSStats("j", mk(11))
	wantConflict(t, "a point re-sent with another value", err, "points[1]", "OS window", `"n1"`)
	st, _ := s.ProfileStats("j")
	if st.OSRecords != 1 {
		t.Fatalf("%d OS records stored, want 1", st.OSRecords)
	}
}

// Issue 16 item 1: a restart's calls (communicator ids stored as "incN:…",
// collective.Batch.Namespace) never meet the first launch's, even with the
// same rank, seq, communicator and enter time; within one incarnation a
// call re-sent with other values is refused naming the communicator as
// sent and the incarnation, never the stored "inc1:" id.
func TestCollectiveResendAcrossIncarnations(t *testing.T) {
	s, b := storedCalls(t) // incarnation 0
	restart := collective.Batch{}
	for _, c := range b.Calls {
		c.Bytes *= 2 // other values for the same (rank, enter time, comm, seq)
		restart.Calls = append(restart.Calls, c)
	}
	restart.Namespace(1)
	res, err := s.AppendCollectives("j", &restart)
	if err != nil || res.Calls != len(restart.Calls) {
		t.Fatalf("incarnation 1's calls on incarnation 0's cells: %+v %v, want every call stored apart", res, err)
	}
	changed := collective.Batch{Calls: []collective.Call{restart.Calls[3]}}
	changed.Calls[0].Bytes++
	_, err = s.AppendCollectives("j", &changed)
	wantConflict(t, "a call of incarnation 1 re-sent with another size", err, "calls[0]", `"w" of incarnation 1`)
	if strings.Contains(err.Error(), "inc1:") {
		t.Errorf("the 409 names the stored communicator id: %v", err)
	}
	// A communicator of incarnation 1 reported with another size: its 409
	// names the communicator as sent too.
	join := collective.Batch{Comms: []collective.Comm{{ID: "w", Size: 2, Rank: 0, CommRank: 0}}}
	join.Namespace(1)
	if _, err := s.AppendCollectives("j", &join); err != nil {
		t.Fatal(err)
	}
	resize := collective.Batch{Comms: []collective.Comm{{ID: "w", Size: 3, Rank: 1, CommRank: 1}}}
	resize.Namespace(1)
	_, err = s.AppendCollectives("j", &resize)
	var ce *signal.ConflictError
	if !errors.As(err, &ce) || ce.Field != "comms[0].size" || !strings.Contains(ce.Msg, `"w" of incarnation 1`) || strings.Contains(ce.Msg, "inc1:") {
		t.Errorf("a communicator of incarnation 1 re-sized: %v, want a conflict naming comms[0].size and the communicator as sent", err)
	}
}
