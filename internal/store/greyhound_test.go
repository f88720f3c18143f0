package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"

	"github.com/cockroachdb/pebble"
)

func TestGreyhoundPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(testJob("ab")); err != nil { // a longer id sharing the prefix
		t.Fatal(err)
	}
	if st, err := s.GreyhoundState("a"); err != nil || st != nil {
		t.Fatalf("fresh job: state %q, %v; want nil, nil", st, err)
	}
	if err := s.SaveGreyhound("a", []byte(`{"phase":"tracking"}`), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGreyhound("a", []byte(`{"phase":"validation"}`), &ValidationRecord{Seq: 1, Plan: []byte(`{"id":"v-1"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGreyhound("ab", []byte(`{"phase":"verdict"}`), &ValidationRecord{Seq: 1, Plan: []byte(`{"id":"other"}`)}); err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		dup, err := s.PutValidationResult("a", 1, r, fmt.Appendf(nil, `{"rank":%d}`, r))
		if err != nil || dup {
			t.Fatalf("result rank %d: dup %v, %v", r, dup, err)
		}
	}
	// A retry is a duplicate and does not overwrite; a different result
	// for a rank that answered is a conflict naming rank (review2 #7).
	if dup, err := s.PutValidationResult("a", 1, 2, []byte(`{"rank":2}`)); err != nil || !dup {
		t.Fatalf("retried result: dup %v, %v; want true, nil", dup, err)
	}
	var ce *signal.ConflictError
	if _, err := s.PutValidationResult("a", 1, 2, []byte(`{"rank":2,"retry":true}`)); !errors.As(err, &ce) || ce.Field != "rank" {
		t.Fatalf("different result: %v, want a conflict on rank", err)
	}
	if ok, err := s.HasValidationResult("a", 1, 2); err != nil || !ok {
		t.Fatalf("HasValidationResult(2) = %v, %v", ok, err)
	}
	if ok, err := s.HasValidationResult("a", 1, 3); err != nil || ok {
		t.Fatalf("HasValidationResult(3) = %v, %v", ok, err)
	}
	if res, err := s.ValidationResults("a", 1); err != nil || len(res) != 3 || string(res[1]) != `{"rank":1}` {
		t.Fatalf("ValidationResults = %v, %v", res, err)
	}
	if p, err := s.ValidationPlan("a", 1); err != nil || string(p) != `{"id":"v-1"}` {
		t.Fatalf("ValidationPlan = %q, %v", p, err)
	}
	if _, err := s.ValidationPlan("a", 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ValidationPlan(2): %v", err)
	}
	if _, err := s.PutValidationResult("a", 9, 0, []byte(`{}`)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("result for an unknown plan: %v, want ErrNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, dir)
	st, err := s.GreyhoundState("a")
	if err != nil || string(st) != `{"phase":"validation"}` {
		t.Fatalf("after restart: state %q, %v", st, err)
	}
	recs, err := s.ValidationRecords("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Seq != 1 || string(recs[0].Plan) != `{"id":"v-1"}` || len(recs[0].Results) != 3 {
		t.Fatalf("records after restart: %+v", recs)
	}
	if got := string(recs[0].Results[2]); got != `{"rank":2}` {
		t.Fatalf("rank 2's result %q: the first post must win", got)
	}
	if recs, _ := s.ValidationRecords("a", 2); len(recs) != 0 {
		t.Fatalf("since=2 returned %d records", len(recs))
	}
	// DeleteJob takes the keyspace with the job, in its batch; the other
	// job's (a longer id with the same prefix) is untouched.
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GreyhoundState("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("state of a deleted job: %v, want ErrNotFound", err)
	}
	if n := ghKeys(t, s, "a"); n != 0 {
		t.Fatalf("%d greyhound keys of the deleted job remain", n)
	}
	if n, err := s.Reclaim(); err != nil || n != 2 {
		t.Fatalf("Reclaim: %d ranges, %v; want 2 (vectors, greyhound)", n, err)
	}
	if recs, _ := s.ValidationRecords("ab", 0); len(recs) != 1 || string(recs[0].Plan) != `{"id":"other"}` {
		t.Fatalf("job ab's records after deleting a: %+v", recs)
	}
	// A job registered again under the id starts with no state.
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if st, err := s.GreyhoundState("a"); err != nil || st != nil {
		t.Fatalf("re-registered job: state %q, %v; want nil, nil", st, err)
	}
	if recs, err := s.ValidationRecords("a", 0); err != nil || len(recs) != 0 {
		t.Fatalf("re-registered job: records %+v, %v", recs, err)
	}
}

// Retention deletes through DeleteIdleJob: the keyspace goes too.
func TestGreyhoundDeletedByRetention(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("old")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGreyhound("old", []byte(`{"phase":"validation"}`), &ValidationRecord{Seq: 3, Plan: []byte(`{"id":"v-3"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutValidationResult("old", 3, 0, []byte(`{"rank":0}`)); err != nil {
		t.Fatal(err)
	}
	deleted, err := s.DeleteIdleJob("old", time.Now().Add(time.Second))
	if err != nil || !deleted {
		t.Fatalf("DeleteIdleJob: deleted=%v, %v", deleted, err)
	}
	if n := ghKeys(t, s, "old"); n != 0 {
		t.Fatalf("%d greyhound keys remain after retention", n)
	}
}

// ghKeys counts job's stored greyhound keys, whatever its registration.
func ghKeys(t *testing.T, s *Store, job string) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: ghPrefix(job), UpperBound: ghPrefixEnd(job)})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGreyhoundRefusesUnknownJobAndBadValues(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.SaveGreyhound("nope", []byte(`{}`), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("save for an unknown job: %v", err)
	}
	if _, err := s.GreyhoundState("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("state of an unknown job: %v", err)
	}
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGreyhound("a", nil, nil); err == nil {
		t.Fatal("empty state accepted")
	}
	if err := s.SaveGreyhound("a", make([]byte, MaxGreyhoundValue+1), nil); err == nil {
		t.Fatal("oversized state accepted")
	}
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveGreyhound("a", []byte(`{}`), nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("save after DeleteJob: %v", err)
	}
}

// review2 #5: only the newest KeepValidations plans and their results are
// kept, so the every-round read stays bounded.
func TestGreyhoundPrunesOldPlans(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	const n = KeepValidations + 5
	for seq := uint32(1); seq <= n; seq++ {
		if err := s.SaveGreyhound("a", []byte(`{}`), &ValidationRecord{Seq: seq, Plan: fmt.Appendf(nil, `{"id":"v-%d"}`, seq)}); err != nil {
			t.Fatal(err)
		}
		for r := range 2 {
			if _, err := s.PutValidationResult("a", seq, r, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
	}
	recs, err := s.ValidationRecords("a", 0)
	if err != nil || len(recs) != KeepValidations || recs[0].Seq != n-KeepValidations+1 {
		t.Fatalf("%d records from seq %d, %v; want %d from %d", len(recs), recs[0].Seq, err, KeepValidations, n-KeepValidations+1)
	}
	for _, r := range recs {
		if len(r.Results) != 2 {
			t.Fatalf("plan %d has %d results", r.Seq, len(r.Results))
		}
	}
	if res, _ := s.ValidationResults("a", 1); len(res) != 0 {
		t.Fatalf("pruned plan 1 still has %d results", len(res))
	}
}
