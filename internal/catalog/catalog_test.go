package catalog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

var errNotFound = errors.New("not found")

func isNotFound(err error) bool { return errors.Is(err, errNotFound) }

// memStore is an in-memory Store that counts writes.
type memStore struct {
	mu     sync.Mutex
	m      map[string]*signal.Job
	writes int
}

func (s *memStore) PutJob(j *signal.Job) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[j.ID] = j
	s.writes++
	return nil
}

func (s *memStore) Job(id string) (*signal.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.m[id]; j != nil {
		return j, nil
	}
	return nil, fmt.Errorf("job %q: %w", id, errNotFound)
}

func (s *memStore) Jobs() ([]*signal.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.m)), nil
}

func newCatalog() (*Catalog, *memStore) {
	st := &memStore{m: map[string]*signal.Job{}}
	return New(st), st
}

func job(id string, world int, run string) *signal.Job {
	return &signal.Job{ID: id, WorldSize: world, Schema: stagevec.DefaultSchema(), RunID: run}
}

func conflictField(err error) string {
	var ce *signal.ConflictError
	if errors.As(err, &ce) {
		return ce.Field
	}
	return ""
}

func TestRegister(t *testing.T) {
	c, st := newCatalog()
	if _, _, created, err := c.Register(job("a", 4, "run-1"), signal.Process{}, isNotFound); err != nil || !created {
		t.Fatalf("first registration: created=%v %v", created, err)
	}
	if _, _, created, err := c.Register(job("a", 4, "run-1"), signal.Process{}, isNotFound); err != nil || created || st.writes != 1 {
		t.Fatalf("identical re-registration: created=%v err=%v writes=%d", created, err, st.writes)
	}
	other := stagevec.DefaultSchema()
	other.Stages = []string{"x", stagevec.StageOther}
	cases := []struct {
		name  string
		j     *signal.Job
		field string
	}{
		{"world size", job("a", 8, "run-1"), "world_size"},
		{"stage list", &signal.Job{ID: "a", WorldSize: 4, Schema: other}, "schema.stages"},
		{"accumulation", &signal.Job{ID: "a", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 4}, "accumulation"},
	}
	// An older client (no process information) that contradicts its
	// incarnation's layout is still refused: nothing says it is a new launch.
	for _, tc := range cases {
		_, _, _, err := c.Register(tc.j, signal.Process{}, isNotFound)
		if conflictField(err) != tc.field {
			t.Errorf("%s: %v, want a conflict on %q", tc.name, err, tc.field)
		}
	}
	// Another run id is a resubmission: a new incarnation, never a 409.
	j, inc, _, err := c.Register(job("a", 4, "run-2"), signal.Process{}, isNotFound)
	if err != nil || inc != 1 || j.RunID != "run-2" || j.Incarnations[1].Reason != signal.IncRunID {
		t.Errorf("a new run under the same id: inc=%d err=%v job=%+v", inc, err, j)
	}
	// No run id on either side: an older client, accepted.
	if _, _, _, err := c.Register(job("a", 4, ""), signal.Process{}, isNotFound); err != nil {
		t.Errorf("registration without run id: %v", err)
	}
	// A job registered without a run id adopts the first one it is given.
	if _, _, _, err := c.Register(job("b", 2, ""), signal.Process{}, isNotFound); err != nil {
		t.Fatal(err)
	}
	if j, _, _, err := c.Register(job("b", 2, "r"), signal.Process{}, isNotFound); err != nil || j.RunID != "r" {
		t.Errorf("run id adoption: %+v %v", j, err)
	}
}

func TestJoinDeclaresRoleGroupSchemas(t *testing.T) {
	c, _ := newCatalog()
	if _, _, _, err := c.Register(job("pp", 8, ""), signal.Process{}, isNotFound); err != nil {
		t.Fatal(err)
	}
	def := stagevec.DefaultSchema()
	pp1 := signal.Schema{Version: "pp/v1", Stages: []string{"recv.wait", stagevec.StageForward, "send.wait", stagevec.StageOther}}
	other := signal.Schema{Version: "pp/v1", Stages: []string{"send.wait", stagevec.StageOther}}
	rank := func(r, pp int, s *signal.Schema) signal.Rank {
		return signal.Rank{Rank: r, Role: signal.Role{DP: r, TP: -1, PP: pp, EP: -1}, Schema: s}
	}
	for _, rk := range []signal.Rank{rank(0, 0, &def), rank(4, 1, &pp1), rank(5, 1, &pp1), rank(1, 0, nil)} {
		if _, _, err := c.Join("pp", rk, signal.Process{}); err != nil {
			t.Fatalf("join %d: %v", rk.Rank, err)
		}
	}
	j, _ := c.Get("pp")
	if len(j.Groups) != 1 || j.Groups[0].Group != "pp1" || j.Groups[0].DeclaredBy != 4 {
		t.Fatalf("groups %+v", j.Groups)
	}
	if j.SchemaFor(5).OrderHash() != pp1.OrderHash() || j.SchemaFor(0).OrderHash() != def.OrderHash() {
		t.Errorf("SchemaFor disagrees with the declarations")
	}
	for _, rk := range j.Ranks {
		if rk.Schema != nil {
			t.Errorf("rank %d stored with its schema", rk.Rank)
		}
	}
	// Another list for pp1, and a new list for a group whose rank already
	// reports the default: both 409, naming the rank and the hashes.
	for _, rk := range []signal.Rank{rank(6, 1, &other), rank(2, 0, &pp1)} {
		_, _, err := c.Join("pp", rk, signal.Process{})
		if conflictField(err) != "schema" || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", rk.Rank)) || !strings.Contains(err.Error(), rk.Schema.OrderHash()) {
			t.Errorf("join %d: %v", rk.Rank, err)
		}
	}
	if _, _, err := c.Join("nope", rank(0, 0, nil), signal.Process{}); !isNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}
}

// Ranks joining concurrently are all kept, in rank order.
func TestConcurrentJoins(t *testing.T) {
	c, _ := newCatalog()
	if _, _, _, err := c.Register(job("a", 64, ""), signal.Process{}, isNotFound); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for r := 63; r >= 0; r-- {
		wg.Go(func() {
			if _, _, err := c.Join("a", signal.Rank{Rank: r, Host: fmt.Sprint("h", r)}, signal.Process{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	j, _ := c.Get("a")
	if len(j.Ranks) != 64 {
		t.Fatalf("%d ranks", len(j.Ranks))
	}
	for i, rk := range j.Ranks {
		if rk.Rank != i || rk.Host != fmt.Sprint("h", i) {
			t.Fatalf("ranks[%d] = %+v", i, rk)
		}
	}
}

func TestMergeRanks(t *testing.T) {
	in := []signal.Rank{{Rank: 1, Host: "a"}, {Rank: 3}}
	got := mergeRanks(in, []signal.Rank{{Rank: 2}, {Rank: 0}, {Rank: 1, Host: "b"}, {Rank: 5}})
	want := []int{0, 1, 2, 3, 5}
	for i, rk := range got {
		if rk.Rank != want[i] {
			t.Fatalf("order %v", got)
		}
	}
	if got[1].Host != "b" || in[0].Host != "a" || len(in) != 2 {
		t.Fatalf("replace or aliasing wrong: got %v in %v", got, in)
	}
}
