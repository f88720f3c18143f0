package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

func testCapture(job string, created int64) *Capture {
	return &Capture{ID: NewCaptureID(), Job: job, Trigger: "manual", Reason: "test", CreatedNS: created, DeadlineNS: created + 1e9,
		StartStep: 100, Steps: 5, Every: 1, Ranks: []int{0, 1}, State: CapturePending}
}

// testOpTrace is a small valid trace of rank whose events encode their
// index, so a trace returned under the wrong rank or out of order fails.
func testOpTrace(rank, n int) *optrace.Trace {
	t := &optrace.Trace{Rank: rank, ClockOffsetNS: int64(rank) * 7}
	for i := 0; i < n; i++ {
		t.Events = append(t.Events, optrace.Event{Name: "aten::op_" + strconv.Itoa(i%17), Cat: optrace.CPUOp, TID: int64(rank), Device: -1,
			StartNS: 1_700_000_000_000_000_000 + int64(i)*1000, DurNS: int64(i % 900), Step: int64(10 + i/100), Correlation: int64(i), Seq: -1})
	}
	return t
}

func TestCaptureIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := NewCaptureID()
		if !ValidCaptureID(id) || seen[id] {
			t.Fatalf("NewCaptureID() = %q: invalid or repeated", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "c", "c0123456789ab0", "x0123456789ab", "c0123456789AB", "c0123456789a\x00"} {
		if ValidCaptureID(bad) {
			t.Errorf("ValidCaptureID(%q) = true", bad)
		}
	}
}

func TestCaptureValidate(t *testing.T) {
	for _, tc := range []struct {
		field string
		mod   func(c *Capture)
	}{
		{"id", func(c *Capture) { c.ID = "x" }},
		{"job", func(c *Capture) { c.Job = "" }},
		{"trigger", func(c *Capture) { c.Trigger = "cron" }},
		{"state", func(c *Capture) { c.State = "done" }},
		{"steps", func(c *Capture) { c.Steps = 0 }},
		{"steps", func(c *Capture) { c.Steps = MaxCaptureSteps + 1 }},
		{"every", func(c *Capture) { c.Every = 0 }},
		{"start_step", func(c *Capture) { c.StartStep = -1 }},
		{"uploaded[1]", func(c *Capture) { c.Uploaded = []int{0, -2} }},
	} {
		c := testCapture("j", 1)
		tc.mod(c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
			t.Errorf("%s: Validate() = %v, want an error naming %q", tc.field, err, tc.field)
		}
	}
}

func TestCapturesPutGetOrderReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("j1")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutCapture(testCapture("nojob", 1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("capture of an unknown job: err = %v, want ErrNotFound", err)
	}
	var ids []string
	for i, created := range []int64{300, 100, 200} {
		c := testCapture("j1", created)
		c.Reason = "r" + strconv.Itoa(i)
		if err := s.PutCapture(c); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	// Update one: state and lists change, still one record.
	c, err := s.Capture("j1", ids[1])
	if err != nil {
		t.Fatal(err)
	}
	c.State, c.Fetched, c.Uploaded, c.Failed = CaptureComplete, []int{0, 1}, []int{0}, map[string]string{"1": "no profiler"}
	if err := s.PutCapture(c); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		list, err := s.Captures("j1")
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, c := range list {
			got = append(got, c.CreatedNS)
		}
		if !reflect.DeepEqual(got, []int64{300, 200, 100}) {
			t.Fatalf("Captures order by created_ns = %v, want newest first [300 200 100]", got)
		}
		c, err := s.Capture("j1", ids[1])
		if err != nil {
			t.Fatal(err)
		}
		if c.State != CaptureComplete || !reflect.DeepEqual(c.Uploaded, []int{0}) || c.Failed["1"] != "no profiler" || c.Reason != "r1" {
			t.Fatalf("capture after update: %+v", c)
		}
		if _, err := s.Capture("j1", NewCaptureID()); !errors.Is(err, ErrNotFound) {
			t.Fatalf("absent capture: err = %v, want ErrNotFound", err)
		}
		if _, err := s.Capture("j1", "bogus"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("malformed capture id: err = %v, want ErrNotFound", err)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir))
}

func TestCapturesKeepNewest(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	var first *Capture
	for i := 0; i < KeepCaptures+3; i++ {
		c := testCapture("j", int64(1000+i))
		if err := s.PutCapture(c); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = c
			if err := s.PutOpTrace("j", c.ID, testOpTrace(0, 10), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	list, err := s.Captures("j")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != KeepCaptures || list[0].CreatedNS != int64(1000+KeepCaptures+2) || list[len(list)-1].CreatedNS != 1003 {
		t.Fatalf("kept %d captures, newest %d oldest %d; want %d, %d, 1003", len(list), list[0].CreatedNS, list[len(list)-1].CreatedNS,
			KeepCaptures, 1000+KeepCaptures+2)
	}
	if _, _, err := s.OpTraces("j", first.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pruned capture's traces: err = %v, want ErrNotFound", err)
	}
	if n := countKeys(t, s, opTracePrefix("j", first.ID)); n != 0 {
		t.Fatalf("pruned capture left %d trace keys", n)
	}
}

func countKeys(t *testing.T, s *Store, prefix []byte) int {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.SeekGE(prefix); ok && strings.HasPrefix(string(it.Key()), string(prefix)); ok = it.Next() {
		n++
	}
	return n
}

func TestOpTracesRoundTripChunkedReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("job")); err != nil {
		t.Fatal(err)
	}
	c := testCapture("job", 5)
	if err := s.PutOpTrace("job", c.ID, testOpTrace(0, 3), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("trace of an absent capture: err = %v, want ErrNotFound", err)
	}
	if err := s.PutCapture(c); err != nil {
		t.Fatal(err)
	}
	// Rank 2's trace spans several parts: random names defeat interning.
	r := rand.New(rand.NewPCG(1, 1))
	big := testOpTrace(2, 120_000)
	for i := range big.Events {
		big.Events[i].Name = fmt.Sprintf("k%016x%016x%016x%016x", r.Uint64(), r.Uint64(), r.Uint64(), r.Uint64())
	}
	small := testOpTrace(0, 50)
	hb := []OpHeartbeat{{1, 2, 3, 4}, {-5, 6, 7, 8}}
	if err := s.PutOpTrace("job", c.ID, big, nil); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, s, opTracePrefix("job", c.ID)); n < 3 {
		t.Fatalf("big trace stored in %d keys, want a header and ≥ 2 parts", n)
	}
	// Overwrite rank 0: the second version wins whole.
	if err := s.PutOpTrace("job", c.ID, testOpTrace(0, 500), []OpHeartbeat{{9, 9, 9, 9}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutOpTrace("job", c.ID, small, hb); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		traces, hbs, err := s.OpTraces("job", c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(traces) != 2 || traces[0].Rank != 0 || traces[1].Rank != 2 {
			t.Fatalf("got %d traces, want ranks [0 2] in order", len(traces))
		}
		if !reflect.DeepEqual(&traces[0], small) || !reflect.DeepEqual(&traces[1], big) {
			t.Fatal("stored traces differ from what was put")
		}
		if !reflect.DeepEqual(hbs[0], hb) || hbs[2] != nil {
			t.Fatalf("heartbeats = %v, want rank 0 %v and none for rank 2", hbs, hb)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openTest(t, dir))
}

func TestPutOpTraceRefusals(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("job")); err != nil {
		t.Fatal(err)
	}
	c := testCapture("job", 5)
	if err := s.PutCapture(c); err != nil {
		t.Fatal(err)
	}
	bad := testOpTrace(0, 2)
	bad.Events[1].DurNS = -1
	if err := s.PutOpTrace("job", c.ID, bad, nil); err == nil || !strings.Contains(err.Error(), "events[1].dur_ns") {
		t.Fatalf("invalid trace: err = %v, want one naming events[1].dur_ns", err)
	}
	if err := s.PutOpTrace("job", c.ID, testOpTrace(0, 1), make([]OpHeartbeat, MaxOpHeartbeats+1)); err == nil {
		t.Fatal("too many heartbeats accepted")
	}
	if err := s.PutOpTrace("job", "nope", testOpTrace(0, 1), nil); err == nil {
		t.Fatal("malformed capture id accepted")
	}
	// > 64 MiB encoded: long distinct names (4 KiB each) make it quick.
	huge := &optrace.Trace{Rank: 1}
	name := strings.Repeat("x", optrace.MaxNameLen-16)
	for i := 0; i < 17_000; i++ {
		huge.Events = append(huge.Events, optrace.Event{Name: fmt.Sprintf("%s%016d", name, i), Cat: optrace.GPUKernel, Device: 0, StartNS: int64(i), Step: -1, Seq: -1})
	}
	err := s.PutOpTrace("job", c.ID, huge, nil)
	if !errors.Is(err, ErrTraceTooLarge) || !strings.Contains(err.Error(), "64 MiB") {
		t.Fatalf("huge trace: err = %v, want ErrTraceTooLarge naming the 64 MiB limit", err)
	}
	if traces, _, err := s.OpTraces("job", c.ID); err != nil || len(traces) != 0 {
		t.Fatalf("after refusals: %d traces, err %v; want none stored", len(traces), err)
	}
}

func TestOpTracesSkipCorrupt(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("job")); err != nil {
		t.Fatal(err)
	}
	c := testCapture("job", 5)
	if err := s.PutCapture(c); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 4; r++ {
		if err := s.PutOpTrace("job", c.ID, testOpTrace(r, 100), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Damage: rank 1's part flipped (checksum), rank 2's header garbage,
	// rank 3's part gone, a stray part of rank 7 with no header.
	v, closer, err := s.db.Get(opTraceKey("job", c.ID, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), v...)
	closer.Close()
	flipped[len(flipped)/2] ^= 0x55
	for _, op := range []error{
		s.db.Set(opTraceKey("job", c.ID, 1, 1), flipped, nil),
		s.db.Set(opTraceKey("job", c.ID, 2, 0), []byte{1, 0xff}, nil),
		s.db.Delete(opTraceKey("job", c.ID, 3, 1), nil),
		s.db.Set(opTraceKey("job", c.ID, 7, 1), []byte("x"), nil),
		s.db.Set(captureKey("job", NewCaptureID()), []byte("{not json"), nil),
	} {
		if op != nil {
			t.Fatal(op)
		}
	}
	var skipped []string
	traces, _, err := s.OpTracesSkipping("job", c.ID, func(key string, err error) {
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("skip of %s: %v does not wrap ErrCorrupt", key, err)
		}
		skipped = append(skipped, key)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 1 || traces[0].Rank != 0 {
		t.Fatalf("got %d traces, want rank 0 only", len(traces))
	}
	if len(skipped) != 4 || !strings.Contains(skipped[0], "rank=1 part=0") || !strings.Contains(skipped[3], "rank=7 part=1") {
		t.Fatalf("skipped %q, want ranks 1, 2, 3, 7 named by key", skipped)
	}
	list, err := s.Captures("job")
	if err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("Captures with a corrupt record: %d, %v; want the good one only", len(list), err)
	}
	if s.SkippedRecords() < 5 {
		t.Fatalf("SkippedRecords = %d, want ≥ 5", s.SkippedRecords())
	}
}

func TestDeleteJobRemovesCaptures(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, j := range []string{"a", "ab"} { // "a" must not take "ab"'s keys
		if err := s.PutJob(testJob(j)); err != nil {
			t.Fatal(err)
		}
	}
	ca, cb := testCapture("a", 1), testCapture("ab", 1)
	for _, c := range []*Capture{ca, cb} {
		if err := s.PutCapture(c); err != nil {
			t.Fatal(err)
		}
		if err := s.PutOpTrace(c.Job, c.ID, testOpTrace(0, 20), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, s, jobRange(prefixCapture, "a", 0)) + countKeys(t, s, jobRange(prefixOpTrace, "a", 0)); n != 0 {
		t.Fatalf("deleted job left %d capture/trace keys", n)
	}
	if _, err := s.Reclaim(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	if err := s.PutJob(testJob("a")); err != nil { // registered again: starts empty
		t.Fatal(err)
	}
	if list, err := s.Captures("a"); err != nil || len(list) != 0 {
		t.Fatalf("re-registered job sees %d captures (err %v)", len(list), err)
	}
	traces, _, err := s.OpTraces("ab", cb.ID)
	if err != nil || len(traces) != 1 {
		t.Fatalf("other job's traces: %d, %v", len(traces), err)
	}
}

// A stored trace header is outside input after a disk fault: decoding
// never panics, fails only with ErrCorrupt, and what it accepts
// re-encodes to the same bytes.
func FuzzDecodeOpTraceHeader(f *testing.F) {
	f.Add(appendOpTraceHeader(nil, &opTraceHeader{size: 10, parts: 1, crc: 7, events: 3, hb: []OpHeartbeat{{1, 2, 3, 4}}}))
	f.Add(appendOpTraceHeader(nil, &opTraceHeader{}))
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeOpTraceHeader(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if h.size > MaxOpTraceBytes || len(h.hb) > MaxOpHeartbeats {
			t.Fatalf("accepted an out-of-range header %+v", h)
		}
		if again := appendOpTraceHeader(nil, h); string(again) != string(b) && len(again) > len(b) {
			t.Fatalf("re-encoded header is longer than the input")
		}
	})
}

// Eviction beyond KeepCaptures drops the least valuable capture: auto
// ones without traces first, then auto ones with traces, oldest first;
// an auto capture never evicts a manual one (it is refused instead),
// while a manual one may.
func TestCapturesEvictAutoFirst(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	put := func(trigger string, created int64, state CaptureState, uploaded []int) *Capture {
		t.Helper()
		c := testCapture("j", created)
		c.Trigger, c.State, c.Uploaded = trigger, state, uploaded
		if err := s.PutCapture(c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ids := func() map[string]bool {
		t.Helper()
		list, err := s.Captures("j")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > KeepCaptures {
			t.Fatalf("%d captures kept, over %d", len(list), KeepCaptures)
		}
		out := map[string]bool{}
		for _, c := range list {
			out[c.ID] = true
		}
		return out
	}
	manual := put("manual", 1, CaptureComplete, []int{0, 1}) // the oldest of all
	traced := put("auto", 2, CapturePartial, []int{0})
	if err := s.PutOpTrace("j", traced.ID, testOpTrace(0, 5), nil); err != nil {
		t.Fatal(err)
	}
	var empty []*Capture
	for i := range KeepCaptures - 2 {
		empty = append(empty, put("auto", int64(10+i), CaptureExpired, nil))
	}
	next := put("auto", 100, CapturePending, nil)
	got := ids()
	if !got[manual.ID] || !got[traced.ID] || got[empty[0].ID] || !got[next.ID] {
		t.Fatalf("first eviction: manual %v traced %v oldest empty auto %v", got[manual.ID], got[traced.ID], got[empty[0].ID])
	}
	// Fill with manual captures: the empty auto ones go, then the traced
	// auto one (with its traces), never the manual ones.
	next.State = CaptureExpired
	if err := s.PutCapture(next); err != nil {
		t.Fatal(err)
	}
	var manuals []*Capture
	for i := range KeepCaptures - 1 {
		manuals = append(manuals, put("manual", int64(200+i), CaptureComplete, []int{0}))
	}
	got = ids()
	if got[traced.ID] || !got[manual.ID] || !got[manuals[0].ID] {
		t.Fatalf("second eviction: traced auto %v, manual %v", got[traced.ID], got[manual.ID])
	}
	if n := countKeys(t, s, opTracePrefix("j", traced.ID)); n != 0 {
		t.Fatalf("evicted capture left %d trace keys", n)
	}
	// All manual now: an auto capture is refused, a manual one evicts the
	// oldest manual.
	if err := s.PutCapture(testCaptureTrigger("j", 500, "auto")); !errors.Is(err, ErrCaptureLimit) {
		t.Fatalf("auto over manual-only: %v", err)
	}
	put("manual", 501, CapturePending, nil)
	if got = ids(); got[manual.ID] {
		t.Fatal("the oldest manual capture was kept past the bound")
	}
}

func testCaptureTrigger(job string, created int64, trigger string) *Capture {
	c := testCapture(job, created)
	c.Trigger = trigger
	return c
}

// OpTraceEvents reads the stored event counts from the trace headers.
func TestOpTraceEvents(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	c := testCapture("j", 1)
	if err := s.PutCapture(c); err != nil {
		t.Fatal(err)
	}
	for r, n := range []int{10, 250} {
		if err := s.PutOpTrace("j", c.ID, testOpTrace(r, n), nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.OpTraceEvents("j", c.ID, []int{0, 1, 2, -1})
	if err != nil || len(got) != 2 || got[0] != 10 || got[1] != 250 {
		t.Fatalf("events %v %v", got, err)
	}
	if _, err := s.OpTraceEvents("nope", c.ID, []int{0}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}
