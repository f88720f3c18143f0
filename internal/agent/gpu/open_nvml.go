//go:build nvml

package gpu

// Built with -tags nvml (cgo; github.com/NVIDIA/go-nvml v0.13.x must be in
// go.mod). Every NVML call is gated on a successful nvml.Init: after a
// failed init the library aborts the process. Read-only: no setter is
// ever called.

import (
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// maxGPUs bounds the devices read per collection.
const maxGPUs = 64

type nvmlSource struct {
	mu      sync.Mutex
	devs    []nvml.Device
	idx     []int
	closed  bool
	initErr string
}

// Open initialises NVML. On failure the returned Source reports the
// absence and never calls NVML.
func Open() (Source, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		why := "NVML init failed: " + nvml.ErrorString(ret)
		return absent{why}, fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		why := "NVML device count: " + nvml.ErrorString(ret)
		return absent{why}, fmt.Errorf("%w: %s", ErrUnavailable, why)
	}
	if n == 0 {
		nvml.Shutdown()
		return absent{"no NVIDIA GPU"}, fmt.Errorf("%w: no NVIDIA GPU", ErrUnavailable)
	}
	s := &nvmlSource{}
	for i := range min(n, maxGPUs) {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		s.devs = append(s.devs, d)
		s.idx = append(s.idx, i)
	}
	return s, nil
}

type nvmlErr nvml.Return

func (e nvmlErr) Error() string { return nvml.ErrorString(nvml.Return(e)) }

func check(ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	return nvmlErr(ret)
}

func (s *nvmlSource) Points(time.Time) ([]osstat.Point, []osstat.Absence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, []osstat.Absence{{Source: osstat.SrcNVML, Reason: "NVML closed"}}
	}
	rs := make([]*reading, 0, len(s.devs))
	for k, d := range s.devs {
		r := newReading(s.idx[k])
		sm, ret := d.GetClockInfo(nvml.CLOCK_SM)
		r.set(osstat.GPUSMClockMHz, float64(sm), check(ret))
		mem, ret := d.GetClockInfo(nvml.CLOCK_MEM)
		r.set(osstat.GPUMemClockMHz, float64(mem), check(ret))
		maxSM, ret := d.GetMaxClockInfo(nvml.CLOCK_SM)
		r.set(osstat.GPUMaxSMMHz, float64(maxSM), check(ret))
		temp, ret := d.GetTemperature(nvml.TEMPERATURE_GPU)
		r.set(osstat.GPUTempC, float64(temp), check(ret))
		u, ret := d.GetUtilizationRates()
		r.set(osstat.GPUUtil, float64(u.Gpu)/100, check(ret))
		reasons, ret := d.GetCurrentClocksEventReasons()
		r.set(osstat.GPUThrottle, float64(reasons), check(ret))
		mw, ret := d.GetPowerUsage()
		r.set(osstat.GPUPowerW, float64(mw)/1000, check(ret))
		rs = append(rs, r)
	}
	return points(rs)
}

func (s *nvmlSource) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		nvml.Shutdown()
	}
}
