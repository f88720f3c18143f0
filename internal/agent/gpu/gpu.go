// Package gpu reads GPU clocks, throttle reasons, temperature,
// utilisation and power for the layered diagnosis's GPU step (SysOM-AI
// §3.1 "GPU diff": a uniform slowdown across kernels points at hardware —
// §5.4 case 1, a GPU throttled to 1,200 MHz while nvidia-smi showed 100%
// utilisation).
//
// NVML needs cgo and aborts the process on calls made after a failed
// init, so it is compiled in only with the build tag `nvml` (which also
// needs github.com/NVIDIA/go-nvml in go.mod); the default, static build
// reports the source absent. Nothing here changes device settings.
package gpu

import (
	"errors"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// Source yields the GPU points of one collection.
type Source interface {
	// Points returns gauges for every GPU (Device = GPU index, Rank −1:
	// the agent maps local ranks to devices), and what is missing.
	Points(now time.Time) ([]osstat.Point, []osstat.Absence)
	Close()
}

// ErrUnavailable wraps why NVML cannot be used. Open returns it together
// with a Source that reports the absence, so callers may log the error
// once and use the Source regardless.
var ErrUnavailable = errors.New("gpu: NVML unavailable")

// absent is the Source of a node without usable NVML.
type absent struct{ why string }

func (a absent) Points(time.Time) ([]osstat.Point, []osstat.Absence) {
	return nil, []osstat.Absence{{Source: osstat.SrcNVML, Reason: a.why}}
}

func (absent) Close() {}
