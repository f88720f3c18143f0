//go:build !nvml

package gpu

import (
	"errors"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

func TestDefaultBuildIsAbsent(t *testing.T) {
	s, err := Open()
	if !errors.Is(err, ErrUnavailable) || s == nil {
		t.Fatalf("Open() = %v, %v", s, err)
	}
	defer s.Close()
	pts, abs := s.Points(time.Now())
	if len(pts) != 0 || len(abs) != 1 || abs[0].Source != osstat.SrcNVML || abs[0].Reason != builtWithout {
		t.Fatalf("Points = %v, %v", pts, abs)
	}
}
