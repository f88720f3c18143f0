package catalog

import (
	"errors"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// review2 #12: the implicit-registration label is reserved. An explicit
// registration carrying it is refused naming the label, rather than taken
// for an implicit one (200, its schema silently ignored).
func TestImplicitLabelReserved(t *testing.T) {
	c, _ := newCatalog()
	if _, created, err := c.RegisterImplicit("a", 2, stagevec.DefaultSchema(), isNotFound); err != nil || !created {
		t.Fatalf("implicit registration: created %v, %v", created, err)
	}
	j := job("a", 2, "")
	j.Labels = map[string]string{ImplicitLabel: "collectives"}
	var fe *signal.FieldError
	if _, _, _, err := c.Register(j, signal.Process{}, isNotFound); !errors.As(err, &fe) || fe.Field != "labels."+ImplicitLabel {
		t.Fatalf("explicit registration with the reserved label: %v", err)
	}
	// The same registration without it adopts the implicit job.
	j.Labels = nil
	got, _, _, err := c.Register(j, signal.Process{}, isNotFound)
	if err != nil || got.Labels[ImplicitLabel] != "" {
		t.Fatalf("adopting: %+v, %v", got, err)
	}
	// An implicit registration of a known job changes nothing.
	if got, created, err := c.RegisterImplicit("a", 2, stagevec.DefaultSchema(), isNotFound); err != nil || created || got.Labels[ImplicitLabel] != "" {
		t.Fatalf("implicit again: %+v created %v, %v", got, created, err)
	}
}
