package gpu

import (
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// reading is one GPU's values; a metric NVML refused is left out (ok
// false) and its error kept for Absent.
type reading struct {
	index int
	vals  map[string]float64
	errs  []string // "<metric>: <NVML error>"
}

func newReading(index int) *reading { return &reading{index: index, vals: map[string]float64{}} }

// set records a value or the reason it is missing.
func (r *reading) set(metric string, v float64, err error) {
	if err != nil {
		r.errs = append(r.errs, metric+": "+err.Error())
		return
	}
	r.vals[metric] = v
}

// points converts the readings to gauges (Device = GPU index) and one
// Absence per GPU listing the metrics NVML did not give.
func points(rs []*reading) ([]osstat.Point, []osstat.Absence) {
	var pts []osstat.Point
	var abs []osstat.Absence
	for _, r := range rs {
		dev := strconv.Itoa(r.index)
		for _, m := range metricOrder {
			if v, ok := r.vals[m]; ok {
				pts = append(pts, osstat.Point{Name: m, Rank: -1, CPU: -1, Device: dev, Value: v})
			}
		}
		if len(r.errs) > 0 {
			why := "gpu " + dev + ": "
			for i, e := range r.errs {
				if i > 0 {
					why += "; "
				}
				why += e
			}
			if len(why) > osstat.MaxNameLen {
				why = why[:osstat.MaxNameLen]
			}
			abs = append(abs, osstat.Absence{Source: osstat.SrcNVML, Reason: why})
		}
	}
	return pts, abs
}

var metricOrder = []string{osstat.GPUSMClockMHz, osstat.GPUMemClockMHz, osstat.GPUMaxSMMHz, osstat.GPUTempC,
	osstat.GPUUtil, osstat.GPUThrottle, osstat.GPUPowerW}
