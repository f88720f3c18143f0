package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

func TestPoints(t *testing.T) {
	r0 := newReading(0)
	r0.set(osstat.GPUSMClockMHz, 1200, nil)
	r0.set(osstat.GPUMaxSMMHz, 1410, nil)
	r0.set(osstat.GPUPowerW, 0, errors.New("Not Supported"))
	r1 := newReading(1)
	r1.set(osstat.GPUUtil, 1, nil)
	pts, abs := points([]*reading{r0, r1})
	if len(pts) != 3 || pts[0].Name != osstat.GPUSMClockMHz || pts[0].Device != "0" || pts[0].Value != 1200 || pts[2].Device != "1" {
		t.Fatalf("points %+v", pts)
	}
	if len(abs) != 1 || !strings.Contains(abs[0].Reason, "gpu 0: gpu_power_w: Not Supported") {
		t.Fatalf("absent %+v", abs)
	}
	b := osstat.Batch{StartNS: 1, EndNS: 2, Points: pts, Absent: abs}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}
