package store

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

func TestJobsRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, id := range []string{"zeta", "alpha", "mid-1"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatalf("PutJob(%s): %v", id, err)
		}
	}
	// Replace: a rank joining.
	j := testJob("alpha")
	j.Ranks = []signal.Rank{{Rank: 0, Host: "h0", Role: signal.Role{DP: 0, TP: 1}}}
	if err := s.PutJob(j); err != nil {
		t.Fatal(err)
	}
	got, err := s.Job("alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, j) {
		t.Fatalf("Job = %+v, want %+v", got, j)
	}
	got.Name = "mutated" // callers get copies
	if again, _ := s.Job("alpha"); again.Name != j.Name {
		t.Fatalf("mutating a returned job changed the store: %q", again.Name)
	}
	jobs, err := s.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	if want := []string{"alpha", "mid-1", "zeta"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("Jobs ids = %v, want %v", ids, want)
	}
	st, err := s.Stats("zeta")
	if err != nil || st != (JobStats{FirstStep: -1, LastStep: -1}) {
		t.Fatalf("Stats of empty job = %+v, %v", st, err)
	}
}

func TestPutJobRejectsBadID(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, id := range []string{"", "a\x00b"} {
		if err := s.PutJob(&signal.Job{ID: id}); err == nil {
			t.Errorf("PutJob(%q) succeeded", id)
		}
	}
}

func TestVectorsRoundTrip(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	var in []stagevec.Vector
	for step := int64(5); step >= 0; step-- { // deliberately unsorted
		for rank := 3; rank >= 0; rank-- {
			for micro := range 2 {
				in = append(in, mkVec(step, rank, micro))
			}
		}
	}
	in[0].Probes = map[string]stagevec.Probe{stagevec.ProbeForwardCUDA: {Value: 3.5, Ready: true}}
	in[1].Durations = in[1].Durations[:5] // residual omitted
	in[2].DataLead, in[2].Dropped, in[2].Nested = 2, 7, 1
	if err := s.Append("j", in); err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, "j", 0, math.MaxInt64)
	if len(got) != len(in) {
		t.Fatalf("scanned %d vectors, want %d", len(got), len(in))
	}
	byKey := map[[3]int64]stagevec.Vector{}
	for _, v := range in {
		byKey[[3]int64{v.Step, int64(v.Rank), int64(v.Micro)}] = v
	}
	for i, v := range got {
		if i > 0 {
			p := got[i-1]
			if [3]int64{p.Step, int64(p.Rank), int64(p.Micro)} == [3]int64{v.Step, int64(v.Rank), int64(v.Micro)} ||
				p.Step > v.Step || (p.Step == v.Step && (p.Rank > v.Rank || (p.Rank == v.Rank && p.Micro > v.Micro))) {
				t.Fatalf("scan order broken at %d: %+v after %+v", i, v, p)
			}
		}
		want := byKey[[3]int64{v.Step, int64(v.Rank), int64(v.Micro)}]
		if !reflect.DeepEqual(v, want) {
			t.Fatalf("vector %d:\n got %+v\nwant %+v", i, v, want)
		}
	}
	if st, _ := s.Stats("j"); st != (JobStats{FirstStep: 0, LastStep: 5, Vectors: int64(len(in))}) {
		t.Fatalf("Stats = %+v", st)
	}
}

// Issue 16 item 1: a re-posted (step, rank, micro) with different values
// was accepted and replaced the stored vector. An identical re-send is
// idempotent (a duplicate, counted once); a conflicting one is refused
// with ErrConflict naming the vector and the cell, and nothing of its
// batch is stored — for a recent step (the tail index), an old one (read
// back from disk), after a restart (the tail rebuilt), and across the
// batches of one AppendMany. One cell twice in a batch with different
// values is a bad batch (a FieldError).
func TestResentVectors(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	var first []stagevec.Vector
	for step := range int64(200) {
		first = append(first, mkVec(step, 1, 0), mkVec(step, 2, 0))
	}
	if err := s.Append("j", first); err != nil {
		t.Fatal(err)
	}
	want := JobStats{FirstStep: 0, LastStep: 199, Vectors: 400}
	check := func(when string) {
		t.Helper()
		if st, _ := s.Stats("j"); st != want {
			t.Fatalf("%s: Stats = %+v, want %+v", when, st, want)
		}
		got := collect(t, s, "j", 0, math.MaxInt64)
		for i, v := range got {
			if w := mkVec(v.Step, v.Rank, v.Micro); !reflect.DeepEqual(v, w) {
				t.Fatalf("%s: vector %d is %+v, want the first write %+v", when, i, v, w)
			}
		}
	}
	changed := func(step int64, rank int) stagevec.Vector {
		v := mkVec(step, rank, 0)
		v.Durations = slices.Clone(v.Durations)
		v.Durations[2]++
		return v
	}
	for round, reopen := range []bool{false, true} {
		if reopen {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dir)
		}
		// Identical re-sends of recent and old steps: accepted, stored once.
		if err := s.Append("j", []stagevec.Vector{mkVec(199, 1, 0), mkVec(5, 2, 0), mkVec(150, 1, 0)}); err != nil {
			t.Fatalf("round %d: identical re-send: %v", round, err)
		}
		check("after identical re-sends")
		for _, c := range []struct {
			name string
			vs   []stagevec.Vector
			idx  int
		}{
			{"recent step", []stagevec.Vector{mkVec(200, 1, 0), changed(199, 2)}, 1},
			{"old step", []stagevec.Vector{mkVec(201, 1, 0), mkVec(3, 1, 0), changed(3, 2)}, 2},
		} {
			err := s.Append("j", c.vs)
			var ce *signal.ConflictError
			if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) || ce.Field != fmt.Sprintf("vectors[%d]", c.idx) ||
				!strings.Contains(ce.Msg, "durations_ms[2]") || !strings.Contains(ce.Msg, fmt.Sprintf("step %d, rank 2", c.vs[c.idx].Step)) {
				t.Fatalf("round %d, %s: %v, want ErrConflict naming vectors[%d], the cell and durations_ms[2]", round, c.name, err, c.idx)
			}
			check("after a refused " + c.name) // the new vectors beside it were not stored either
		}
		// Across the batches of one AppendMany.
		err := s.AppendMany([]Batch{{"j", []stagevec.Vector{mkVec(300, 1, 0)}}, {"j", []stagevec.Vector{changed(300, 1)}}})
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("round %d: conflicting batches of one call: %v", round, err)
		}
		check("after conflicting batches")
	}
	// One cell twice in a batch: identical is stored once, different is
	// refused naming the later one.
	if err := s.Append("j", []stagevec.Vector{mkVec(400, 1, 0), mkVec(400, 1, 0)}); err != nil {
		t.Fatal(err)
	}
	want = JobStats{FirstStep: 0, LastStep: 400, Vectors: 401}
	err := s.Append("j", []stagevec.Vector{mkVec(401, 1, 0), mkVec(402, 1, 0), changed(401, 1)})
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "vectors[2]" || !strings.Contains(fe.Msg, "vectors[0]") {
		t.Fatalf("one cell twice with different values: %v", err)
	}
	check("at the end")
}

func TestRestartDurability(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	jobs := []string{"a", "b"}
	for _, id := range jobs {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int{}
	for step := int64(0); step < 20; step++ {
		var batches []Batch
		for _, id := range jobs {
			var vs []stagevec.Vector
			for rank := range 16 {
				vs = append(vs, mkVec(step, rank, 0))
			}
			batches = append(batches, Batch{id, vs})
			want[id] += len(vs)
		}
		var err error
		if step%2 == 0 {
			err = s.AppendMany(batches)
		} else {
			err = s.Append(batches[0].JobID, batches[0].Vectors)
			if err == nil {
				err = s.Append(batches[1].JobID, batches[1].Vectors)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	before := collect(t, s, "a", 0, math.MaxInt64)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	for _, id := range jobs {
		j, err := s.Job(id)
		if err != nil || j.ID != id || j.WorldSize != 1024 {
			t.Fatalf("after reopen Job(%s) = %+v, %v", id, j, err)
		}
		st, err := s.Stats(id)
		if err != nil || st != (JobStats{FirstStep: 0, LastStep: 19, Vectors: int64(want[id])}) {
			t.Fatalf("after reopen Stats(%s) = %+v, %v", id, st, err)
		}
		if n := len(collect(t, s, id, 0, math.MaxInt64)); n != want[id] {
			t.Fatalf("after reopen job %s has %d vectors, want %d", id, n, want[id])
		}
	}
	if after := collect(t, s, "a", 0, math.MaxInt64); !reflect.DeepEqual(after, before) {
		t.Fatal("vectors differ after reopen")
	}
	// Stats keep counting correctly after a restart: a duplicate is not new.
	if err := s.Append("a", []stagevec.Vector{mkVec(19, 0, 0), mkVec(20, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats("a"); st.Vectors != int64(want["a"]+1) || st.LastStep != 20 {
		t.Fatalf("Stats after restart+append = %+v", st)
	}
}

func TestScanBounds(t *testing.T) {
	s := openTest(t, t.TempDir())
	// Neighbouring ids must not leak into each other's ranges.
	for _, id := range []string{"j", "j1", "i"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	steps := []int64{0, 1, 2, 5, 6, 10, 1 << 40}
	for _, id := range []string{"j", "j1", "i"} {
		var vs []stagevec.Vector
		for _, st := range steps {
			vs = append(vs, mkVec(st, 0, 0), mkVec(st, 1023, 1))
		}
		if err := s.Append(id, vs); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		from, to int64
		want     []int64
	}{
		{0, math.MaxInt64, steps},
		{math.MinInt64, math.MaxInt64, steps},
		{-5, 1, []int64{0, 1}},
		{2, 2, []int64{2}},
		{3, 4, nil},
		{3, 6, []int64{5, 6}},
		{6, 5, nil},
		{10, 1<<40 - 1, []int64{10}},
		{1 << 40, 1 << 40, []int64{1 << 40}},
		{11, math.MaxInt64, []int64{1 << 40}},
		{math.MaxInt64, math.MaxInt64, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d..%d", tc.from, tc.to), func(t *testing.T) {
			var got []int64
			for _, v := range collect(t, s, "j", tc.from, tc.to) {
				if v.Rank == 0 {
					got = append(got, v.Step)
				} else if v.Rank != 1023 || v.Micro != 1 {
					t.Fatalf("unexpected vector %+v", v)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("steps = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("fn error stops the scan", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		err := s.Scan("j", 0, math.MaxInt64, func(*stagevec.Vector) error { n++; return stop })
		if err != stop || n != 1 {
			t.Fatalf("err = %v after %d calls, want the callback's error after 1", err, n)
		}
	})
}

func TestLastSteps(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, id := range []string{"j", "empty", "j2"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	var vs []stagevec.Vector
	for _, st := range []int64{3, 4, 7, 8, 9, 20} {
		vs = append(vs, mkVec(st, 0, 0), mkVec(st, 5, 1))
	}
	if err := s.Append("j", vs); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("j2", []stagevec.Vector{mkVec(100, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		job      string
		n        int
		from, to int64
		ok       bool
	}{
		{"j", 1, 20, 20, true},
		{"j", 2, 9, 20, true},
		{"j", 4, 7, 20, true},
		{"j", 6, 3, 20, true},
		{"j", 200, 3, 20, true},
		{"j", 0, 0, 0, false},
		{"empty", 10, 0, 0, false},
		{"j2", 5, 100, 100, true},
	}
	for _, tc := range tests {
		from, to, ok, err := s.LastSteps(tc.job, tc.n)
		if err != nil || from != tc.from || to != tc.to || ok != tc.ok {
			t.Errorf("LastSteps(%s, %d) = %d, %d, %v, %v; want %d, %d, %v", tc.job, tc.n, from, to, ok, err, tc.from, tc.to, tc.ok)
		}
	}
}

func TestNotFound(t *testing.T) {
	s := openTest(t, t.TempDir())
	checks := map[string]error{}
	_, checks["Job"] = s.Job("nope")
	_, checks["Stats"] = s.Stats("nope")
	checks["Append"] = s.Append("nope", []stagevec.Vector{mkVec(0, 0, 0)})
	checks["AppendMany"] = s.AppendMany([]Batch{{"nope", nil}})
	checks["Scan"] = s.Scan("nope", 0, 10, func(*stagevec.Vector) error { return nil })
	_, _, _, checks["LastSteps"] = s.LastSteps("nope", 3)
	for name, err := range checks {
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("%s: err = %v, want ErrNotFound naming the job", name, err)
		}
	}
}

func TestAppendRejectsAtomically(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, id := range []string{"a", "b"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	bad := mkVec(1, 0, 0)
	bad.Micro = 1 << 16
	err := s.AppendMany([]Batch{{"a", []stagevec.Vector{mkVec(0, 0, 0)}}, {"b", []stagevec.Vector{mkVec(0, 0, 0), bad}}})
	var fe *signal.FieldError
	if !errors.As(err, &fe) || fe.Field != "vectors[1].micro" {
		t.Fatalf("err = %v, want FieldError on vectors[1].micro", err)
	}
	err = s.AppendMany([]Batch{{"a", []stagevec.Vector{mkVec(0, 0, 0)}}, {"missing", nil}})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	for _, id := range []string{"a", "b"} {
		if got := collect(t, s, id, 0, math.MaxInt64); len(got) != 0 {
			t.Fatalf("job %s has %d vectors after rejected appends", id, len(got))
		}
		if st, _ := s.Stats(id); st.Vectors != 0 {
			t.Fatalf("job %s stats %+v after rejected appends", id, st)
		}
	}
}

func TestCorruptValue(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("j", []stagevec.Vector{mkVec(1, 0, 0), mkVec(2, 0, 0)}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(vecKey("j", 2, 7, 1), []byte{1, 3, 0, 0}, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := s.Scan("j", 0, 10, func(*stagevec.Vector) error { n++; return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "v/j[step=2 rank=7 micro=1]") {
		t.Fatalf("err = %v, want ErrCorrupt naming v/j[step=2 rank=7 micro=1]", err)
	}
	if n != 2 {
		t.Fatalf("callback ran %d times before the corrupt key, want 2", n)
	}
	// Corrupt stats are caught at Open, naming the key.
	if err := s.db.Set(statsKey("j"), []byte{1, 2, 3}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(dir, Options{Logger: quiet}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"s/j"`) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("Open with corrupt stats: err = %v, want ErrCorrupt naming \"s/j\"", err)
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Jobs(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Jobs after Close: %v", err)
	}
	if err := s.Append("j", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

// Writers on overlapping and disjoint keys race readers; run with -race.
// Every acknowledged vector must be there and Stats must count distinct keys.
func TestConcurrentAppend(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, id := range []string{"a", "b"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	const writers, steps, ranksPer = 6, 25, 8
	var writersWG, readersWG sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := range writers {
		writersWG.Go(func() {
			job := []string{"a", "b"}[w%2]
			for step := range int64(steps) {
				var vs []stagevec.Vector
				for r := range ranksPer {
					vs = append(vs, mkVec(step, (w/2)*ranksPer+r, 0))
				}
				// Every writer also rewrites rank 1000 of the step: a
				// contended duplicate that must be counted once.
				vs = append(vs, mkVec(step, 1000, 0))
				var err error
				if w == 0 {
					err = s.AppendMany([]Batch{{job, vs}, {"b", vs[:1]}})
				} else {
					err = s.Append(job, vs)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	for range 2 {
		readersWG.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.Stats("a"); err != nil {
					errs <- err
					return
				}
				if err := s.Scan("a", 0, steps, func(v *stagevec.Vector) error {
					if v.WallMS != mkVec(v.Step, v.Rank, v.Micro).WallMS {
						return fmt.Errorf("vector %d/%d has wall %v", v.Step, v.Rank, v.WallMS)
					}
					return nil
				}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	writersWG.Wait()
	close(done)
	readersWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		// 3 writers per job × 8 own ranks, plus the shared rank 1000, per step.
		want := int64(3*steps*ranksPer + steps)
		st, _ := s.Stats(id)
		got := collect(t, s, id, 0, math.MaxInt64)
		if st.Vectors != want || int64(len(got)) != want || st.FirstStep != 0 || st.LastStep != steps-1 {
			t.Fatalf("job %s: stats %+v, scanned %d, want %d vectors over steps 0..%d", id, st, len(got), want, steps-1)
		}
	}
}

// Random writes — in and out of the tail window, outside the job's declared
// world size, repeated within and across calls, across restarts — must
// leave Stats equal to a model of distinct keys and the scan equal to the
// first write of each key: a call re-sending a key with its stored value
// succeeds (a duplicate), one re-sending it with another value (against
// the store, an earlier batch of the call or its own batch) fails and
// changes nothing.
func TestStatsMatchModel(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, id := range []string{"a", "b"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	type key struct {
		job               string
		step, rank, micro int
	}
	stored := map[key]float64{}
	head := int64(0)
	refused := 0
	for round := range 300 {
		var batches []Batch
		pending := map[key]float64{}
		conflicts := false
		for range 1 + rng.IntN(3) {
			job := []string{"a", "b"}[rng.IntN(2)]
			var vs []stagevec.Vector
			for range 1 + rng.IntN(40) {
				step := head - int64(rng.IntN(8)) // mostly recent
				if rng.IntN(10) == 0 {
					step = int64(rng.IntN(int(head) + 1)) // late, often outside the window
				}
				step = max(step, 0)
				v := mkVec(step, rng.IntN(1100), rng.IntN(3)) // ranks ≥ 1024 and micro 2 exceed the job's shape
				if rng.IntN(3) == 0 {
					v = mkVec(step, rng.IntN(4), 0) // a few cells, so keys are re-sent often
				}
				k := key{job, int(v.Step), v.Rank, v.Micro}
				old, ok := pending[k]
				if !ok {
					old, ok = stored[k]
				}
				v.WallMS = float64(round)
				if ok && rng.IntN(40) != 0 {
					v.WallMS = old // mostly a faithful re-send
				}
				if ok && v.WallMS != old {
					conflicts = true
				}
				pending[k] = v.WallMS
				vs = append(vs, v)
			}
			batches = append(batches, Batch{job, vs})
		}
		err := s.AppendMany(batches)
		var fe *signal.FieldError
		switch {
		case conflicts && (errors.Is(err, ErrConflict) || errors.As(err, &fe)):
			refused++
		case conflicts || err != nil:
			t.Fatalf("round %d: AppendMany: %v, model says conflict %v", round, err, conflicts)
		default:
			maps.Copy(stored, pending)
		}
		head += int64(rng.IntN(3))
		if round%100 == 99 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTest(t, dir)
		}
	}
	t.Logf("%d of 300 calls refused for a conflicting re-send", refused)
	if refused == 0 || refused > 250 {
		t.Fatalf("%d of 300 calls refused: the model exercises too little", refused)
	}
	for _, id := range []string{"a", "b"} {
		var want JobStats = emptyStats
		for k := range stored {
			if k.job == id {
				want.add(int64(k.step))
			}
		}
		if st, _ := s.Stats(id); st != want {
			t.Fatalf("job %s: Stats = %+v, model says %+v", id, st, want)
		}
		got := collect(t, s, id, 0, math.MaxInt64)
		if int64(len(got)) != want.Vectors {
			t.Fatalf("job %s: scanned %d, want %d", id, len(got), want.Vectors)
		}
		for _, v := range got {
			if w := stored[key{id, int(v.Step), v.Rank, v.Micro}]; v.WallMS != w {
				t.Fatalf("job %s %d/%d/%d: wall %v, the stored write was %v", id, v.Step, v.Rank, v.Micro, v.WallMS, w)
			}
		}
	}
}
