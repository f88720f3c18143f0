package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func incRec(id, body string) IncidentRecord {
	return IncidentRecord{ID: id, Value: []byte(`{"id":"` + id + `","body":"` + body + `"}`), Summary: []byte(`{"id":"` + id + `"}`)}
}

type workingSet struct {
	ev  map[string]string
	act map[ActionKey]string
}

func readWorkingSet(t *testing.T, s *Store, job string) workingSet {
	t.Helper()
	ws := workingSet{ev: map[string]string{}, act: map[ActionKey]string{}}
	var last ActionKey
	err := s.IncidentWorkingSet(job, func(id string, v []byte) error {
		ws.ev[id] = string(v)
		return nil
	}, func(k ActionKey, v []byte) error {
		if k.AtNS < last.AtNS {
			t.Errorf("actions out of time order: %v after %v", k, last)
		}
		last = k
		ws.act[k] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("IncidentWorkingSet(%s): %v", job, err)
	}
	return ws
}

func jobIncidents(t *testing.T, s *Store, job string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := s.JobIncidents(job, func(id string, v []byte) error {
		out[id] = string(v)
		return nil
	}); err != nil {
		t.Fatalf("JobIncidents(%s): %v", job, err)
	}
	return out
}

func indexOf(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	if err := s.IncidentIndex(func(id, job string, sum []byte) error {
		out = append(out, id+"@"+job+"="+string(sum))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// The keyspaces survive a restart, in one batch per write; deletions
// apply before puts; Get by id finds the job.
func TestIncidentsWriteReopen(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, j := range []string{"a", "ab"} { // "a" must not take "ab"'s keys
		if err := s.PutJob(testJob(j)); err != nil {
			t.Fatal(err)
		}
	}
	a1 := NewActionRecord(20, []byte(`{"kind":"kair_capture"}`))
	a0 := NewActionRecord(10, []byte(`{"kind":"greyhound_validation"}`))
	if err := s.WriteIncidents("a", &IncidentWrite{
		Put:         []IncidentRecord{incRec("inc-1", "one"), incRec("inc-2", "two")},
		PutEvidence: []EvidenceRecord{{ID: "sf/onset/1", Value: []byte(`{"id":"sf/onset/1"}`)}, {ID: "gh/x", Value: []byte(`{"id":"gh/x"}`)}},
		PutActions:  []ActionRecord{a1, a0},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIncidents("ab", &IncidentWrite{Put: []IncidentRecord{incRec("inc-9", "other")},
		PutEvidence: []EvidenceRecord{{ID: "z", Value: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	// The same action again is one key; a replaced incident; a dropped
	// piece of evidence.
	if err := s.WriteIncidents("a", &IncidentWrite{Put: []IncidentRecord{incRec("inc-2", "two'")}, PutActions: []ActionRecord{a1},
		DeleteEvidence: []string{"gh/x"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, dir)
	got := jobIncidents(t, s, "a")
	if len(got) != 2 || !strings.Contains(got["inc-2"], "two'") || !strings.Contains(got["inc-1"], `"one"`) {
		t.Fatalf("job a incidents after reopen: %v", got)
	}
	ws := readWorkingSet(t, s, "a")
	if len(ws.ev) != 1 || ws.ev["sf/onset/1"] == "" || len(ws.act) != 2 {
		t.Fatalf("job a working set after reopen: %+v", ws)
	}
	if job, v, err := s.Incident("inc-9"); err != nil || job != "ab" || !strings.Contains(string(v), "other") {
		t.Fatalf("Incident(inc-9) = %q, %q, %v", job, v, err)
	}
	if _, _, err := s.Incident("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Incident(nope): %v, want ErrNotFound", err)
	}
	if _, _, err := s.Incident("bad/id"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Incident(bad/id): %v, want ErrNotFound", err)
	}
	if idx := indexOf(t, s); !slices.Equal(idx, []string{`inc-1@a={"id":"inc-1"}`, `inc-2@a={"id":"inc-2"}`, `inc-9@ab={"id":"inc-9"}`}) {
		t.Fatalf("index: %q", idx)
	}
	// Deleting an incident removes its index entry too.
	if err := s.WriteIncidents("a", &IncidentWrite{Delete: []string{"inc-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Incident("inc-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted incident still found: %v", err)
	}
	if idx := indexOf(t, s); len(idx) != 2 {
		t.Fatalf("index after delete: %q", idx)
	}
}

// DeleteJob (the API's and retention's) takes the incidents, their
// index entries and the working set; another job's stay; a write racing
// the delete stores nothing.
func TestDeleteJobRemovesIncidents(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, j := range []string{"a", "ab"} {
		if err := s.PutJob(testJob(j)); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteIncidents(j, &IncidentWrite{Put: []IncidentRecord{incRec("inc-"+j, j)},
			PutEvidence: []EvidenceRecord{{ID: "e", Value: []byte(`{}`)}}, PutActions: []ActionRecord{NewActionRecord(1, []byte(`{}`))}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.JobDiskBytes("a"); err != nil || n == 0 {
		t.Logf("JobDiskBytes(a) = %d, %v (memtable: may be 0)", n, err)
	}
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Incident("inc-a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("incident of a deleted job: %v", err)
	}
	if err := s.JobIncidents("a", func(string, []byte) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("JobIncidents of a deleted job: %v", err)
	}
	if idx := indexOf(t, s); len(idx) != 1 || !strings.HasPrefix(idx[0], "inc-ab@ab") {
		t.Fatalf("index after deleting a: %q", idx)
	}
	if err := s.WriteIncidents("a", &IncidentWrite{Put: []IncidentRecord{incRec("late", "x")}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("write after delete: %v, want ErrNotFound", err)
	}
	// Registered again under the same id: nothing of the old job's
	// incidents or working set is adopted.
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if got := jobIncidents(t, s, "a"); len(got) != 0 {
		t.Fatalf("re-registered job adopted incidents: %v", got)
	}
	if ws := readWorkingSet(t, s, "a"); len(ws.ev)+len(ws.act) != 0 {
		t.Fatalf("re-registered job adopted a working set: %+v", ws)
	}
	if ws := readWorkingSet(t, s, "ab"); len(ws.ev) != 1 || len(ws.act) != 1 {
		t.Fatalf("job ab lost its working set: %+v", ws)
	}
}

// Retention deletes an idle job's incidents with it.
func TestRetentionRemovesIncidents(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("old")); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIncidents("old", &IncidentWrite{Put: []IncidentRecord{incRec("inc-old", "x")}}); err != nil {
		t.Fatal(err)
	}
	ok, err := s.DeleteIdleJob("old", time.Now().Add(time.Hour))
	if err != nil || !ok {
		t.Fatalf("DeleteIdleJob = %v, %v", ok, err)
	}
	if idx := indexOf(t, s); len(idx) != 0 {
		t.Fatalf("index after retention: %q", idx)
	}
}

func TestWriteIncidentsRefusals(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, MaxEvidenceBytes+1)
	for name, w := range map[string]*IncidentWrite{
		"empty id":         {Put: []IncidentRecord{incRec("", "x")}},
		"slash id":         {Put: []IncidentRecord{incRec("a/b", "x")}},
		"NUL id":           {Put: []IncidentRecord{incRec("a\x00b", "x")}},
		"control char id":  {Put: []IncidentRecord{incRec("a\nb", "x")}},
		"long id":          {Put: []IncidentRecord{incRec(strings.Repeat("x", MaxIncidentIDLen+1), "x")}},
		"empty value":      {Put: []IncidentRecord{{ID: "a", Summary: []byte("{}")}}},
		"empty summary":    {Put: []IncidentRecord{{ID: "a", Value: []byte("{}")}}},
		"evidence NUL id":  {PutEvidence: []EvidenceRecord{{ID: "a\x00", Value: []byte("{}")}}},
		"evidence too big": {PutEvidence: []EvidenceRecord{{ID: "a", Value: big}}},
		"action empty":     {PutActions: []ActionRecord{{Key: ActionKey{AtNS: 1}}}},
	} {
		if err := s.WriteIncidents("j", w); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if got := jobIncidents(t, s, "j"); len(got) != 0 {
		t.Fatalf("a refused write stored %v", got)
	}
	if err := s.WriteIncidents("nojob", &IncidentWrite{Put: []IncidentRecord{incRec("a", "x")}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

// A malformed key in the index or audit range is skipped and counted;
// the well-formed ones are read.
func TestIncidentKeysSkipMalformed(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteIncidents("j", &IncidentWrite{Put: []IncidentRecord{incRec("good", "x")}, PutActions: []ActionRecord{NewActionRecord(5, []byte(`{}`))}}); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{prefixIncidentIndex + "no-separator", "{}"},
		{prefixIncidentIndex + "trailing\x00", "{}"},
		{string(jobRange(prefixAudit, "j", 0)) + "short", "{}"},
	} {
		if err := s.db.Set([]byte(kv[0]), []byte(kv[1]), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := s.SkippedRecords()
	if idx := indexOf(t, s); len(idx) != 1 {
		t.Fatalf("index: %q", idx)
	}
	if ws := readWorkingSet(t, s, "j"); len(ws.act) != 1 {
		t.Fatalf("audit: %+v", ws)
	}
	if got := s.SkippedRecords() - before; got != 3 {
		t.Fatalf("skipped %d malformed keys, want 3", got)
	}
}

func TestActionKeyIdempotent(t *testing.T) {
	a, b := NewActionRecord(7, []byte(`{"x":1}`)), NewActionRecord(7, []byte(`{"x":1}`))
	c := NewActionRecord(7, []byte(`{"x":2}`))
	if a.Key != b.Key || a.Key == c.Key {
		t.Fatalf("keys %v %v %v: the same bytes must share a key, other bytes not", a.Key, b.Key, c.Key)
	}
	if k := NewActionRecord(-5, nil).Key; k.AtNS != 0 {
		t.Fatalf("negative time keyed at %d", k.AtNS)
	}
}
