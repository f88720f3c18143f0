package catalog

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

// deletingStore is memStore with DeleteJob.
type deletingStore struct{ *memStore }

func (s deletingStore) DeleteJob(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[id]; !ok {
		return errNotFound
	}
	delete(s.m, id)
	return nil
}

// Delete removes the job from the store and from the cache; a store that
// cannot delete answers ErrNoDelete for a known job and not-found for an
// unknown one.
func TestDelete(t *testing.T) {
	c, st := newCatalog()
	if _, _, _, err := c.Register(job("a", 2, ""), signal.Process{}, isNotFound); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete("a"); !errors.Is(err, ErrNoDelete) {
		t.Fatalf("store without DeleteJob: %v", err)
	}
	if err := c.Delete("zz"); !isNotFound(err) {
		t.Fatalf("unknown job on a store without DeleteJob: %v", err)
	}
	c2 := New(deletingStore{st})
	if _, err := c2.Get("a"); err != nil { // cached
		t.Fatal(err)
	}
	if err := c2.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Get("a"); !isNotFound(err) {
		t.Fatalf("Get after Delete: %v (served from the cache?)", err)
	}
	if err := c2.Delete("a"); !isNotFound(err) {
		t.Fatalf("second Delete: %v", err)
	}
}

// Page pages in id order with a cursor, also over a store without
// JobsPage.
func TestPage(t *testing.T) {
	c, _ := newCatalog()
	for i := range 5 {
		if _, _, _, err := c.Register(job(fmt.Sprintf("j%d", i), 2, ""), signal.Process{}, isNotFound); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for range 10 {
		js, next, err := c.Page(after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(got, []string{"j0", "j1", "j2", "j3", "j4"}) {
		t.Fatalf("pages %v", got)
	}
}
