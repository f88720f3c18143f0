package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// GPU diff (§3.1 step 1): compare the ranks' GPU kernel times. A
// slowdown spread over (nearly) all kernels points at the hardware — a
// lower clock from thermal or power limits, memory errors (§5.4 case 1:
// every kernel type ~8% slower at 1,200 of 1,410 MHz); one confined to
// some kernels points at an operator change. NVML points (SM clock vs
// max, clocks-event reasons, temperature) back the kernel comparison or,
// without kernel timings, stand in for it.

type kernelTime struct {
	count int64
	ms    float64
}

// kernelsOf sums a rank's compute kernels. Communication kernels
// (NCCL's) are left out: their device time is mostly waiting for the
// straggler, so they are shortest on the slow rank and would read as a
// kernel-specific speed-up.
func kernelsOf(ks []GPUKernel, rank int) map[string]kernelTime {
	out := map[string]kernelTime{}
	for _, k := range ks {
		if k.Rank == rank && !commKernel(k.Name) {
			t := out[k.Name]
			t.count += k.Count
			t.ms += k.TotalMs
			out[k.Name] = t
		}
	}
	return out
}

// NVML clocks-event (throttle) reason bits (nvmlClocksEventReason*).
var throttleBits = []struct {
	bit  uint64
	name string
	slow bool // a reason that lowers clocks under load
}{
	{0x1, "gpu_idle", false}, {0x2, "applications_clocks_setting", false}, {0x4, "sw_power_cap", true},
	{0x8, "hw_slowdown", true}, {0x10, "sync_boost", false}, {0x20, "sw_thermal_slowdown", true},
	{0x40, "hw_thermal_slowdown", true}, {0x80, "hw_power_brake_slowdown", true}, {0x100, "display_clock_setting", false},
}

func throttleNames(mask uint64) (names []string, slow bool) {
	for _, b := range throttleBits {
		if mask&b.bit != 0 {
			names = append(names, b.name)
			slow = slow || b.slow
		}
	}
	return names, slow
}

// nvml is one rank's NVML view (means over the window).
type nvml struct {
	sm, max, temp float64
	hasSM, hasMax bool
	hasTemp       bool
	throttle      uint64
	hasThrottle   bool
}

func nvmlOf(ix *osIndex, rank int) (nvml, bool) {
	var v nvml
	avg := func(name string) (float64, bool) {
		sum, n := 0.0, 0
		for k, x := range ix.val[name] {
			if k.rank == rank {
				sum += x
				n++
			}
		}
		if n == 0 {
			return 0, false
		}
		return sum / float64(n), true
	}
	v.sm, v.hasSM = avg(osstat.GPUSMClockMHz)
	v.max, v.hasMax = avg(osstat.GPUMaxSMMHz)
	v.temp, v.hasTemp = avg(osstat.GPUTempC)
	for k, m := range ix.throttle {
		if k.rank == rank {
			v.throttle |= m
			v.hasThrottle = true
		}
	}
	return v, v.hasSM || v.hasTemp || v.hasThrottle
}

func gpuLayer(in *Input, ix *osIndex, s, p int, cfg Config) Layer {
	l := Layer{Layer: LayerGPU, Finding: FindingNotObserved, Evidence: []string{}}
	ks, kp := kernelsOf(in.GPU, s), kernelsOf(in.GPU, p)
	kernelFinding := FindingNotObserved
	uniform := false
	if len(ks) > 0 && len(kp) > 0 {
		kernelFinding, uniform = compareKernels(&l, ks, kp, s, p, cfg)
	} else {
		l.Evidence = append(l.Evidence, fmt.Sprintf("no GPU kernel timings for rank %d and rank %d (CUDA-event tracing not collected)", s, p))
	}
	// NVML: the clock evidence.
	ns, okS := nvmlOf(ix, s)
	np, okP := nvmlOf(ix, p)
	clockSlow := false
	if okS {
		var parts []string
		if ns.hasSM {
			ref := ""
			switch {
			case ns.hasMax && ns.max > 0:
				ref = fmt.Sprintf(" of %.0f MHz max (%.0f%%)", ns.max, 100*ns.sm/ns.max)
				clockSlow = ns.sm < (1-cfg.GPURel)*ns.max
			}
			peer := ""
			if okP && np.hasSM {
				peer = fmt.Sprintf("; rank %d: %.0f MHz", p, np.sm)
				clockSlow = clockSlow || ns.sm < (1-cfg.GPURel)*np.sm
			}
			parts = append(parts, fmt.Sprintf("rank %d's GPU SM clock %.0f MHz%s%s", s, ns.sm, ref, peer))
		}
		if ns.hasThrottle {
			names, slow := throttleNames(ns.throttle)
			if len(names) > 0 {
				parts = append(parts, "clocks-event reasons: "+strings.Join(names, ", "))
			}
			clockSlow = clockSlow || slow
		}
		if ns.hasTemp {
			t := fmt.Sprintf("temperature %.0f °C", ns.temp)
			if okP && np.hasTemp {
				t += fmt.Sprintf(" vs %.0f °C", np.temp)
			}
			parts = append(parts, t)
		}
		if len(parts) > 0 {
			l.Evidence = append(l.Evidence, "NVML: "+strings.Join(parts, "; "))
		}
	}
	switch {
	case kernelFinding == FindingDiffers:
		l.Finding = FindingDiffers
		l.Cause = CauseGPUKernel
		if uniform {
			l.Cause = CauseGPUUniform
		}
		if uniform && okS && !clockSlow {
			l.Evidence = append(l.Evidence, "NVML shows no clock reduction: consider memory errors (ECC/XID) or a degraded PCIe/NVLink link")
		}
	case kernelFinding == FindingMatches:
		l.Finding = FindingMatches
		if clockSlow {
			l.Evidence = append(l.Evidence, "NVML reports a reduced clock, but kernel times match: not the cause of the lateness")
		}
	case clockSlow:
		// No kernel timings: the clocks alone say the GPU runs slower.
		l.Finding, l.Cause = FindingDiffers, CauseGPUUniform
	case okS && okP:
		l.Finding = FindingMatches
		l.Evidence = append(l.Evidence, "NVML clocks show no throttling (kernel times not compared)")
	}
	if l.Finding == FindingNotObserved {
		l.Evidence = append(l.Evidence, "GPU layer not observed: a GPU cause is not ruled out")
	}
	if l.Finding == FindingDiffers {
		l.Next = nextCheck(l.Cause, nil)
	}
	return l
}

// compareKernels fills the kernel evidence and returns the finding and
// whether a slowdown is uniform.
func compareKernels(l *Layer, ks, kp map[string]kernelTime, s, p int, cfg Config) (Finding, bool) {
	type kr struct {
		name  string
		ratio float64 // per-call time ratio, straggler / peer
		peer  float64 // peer ms
		extra float64 // straggler ms − peer ms at the peer's call count
	}
	var rs []kr
	var newMs, totS, totP, weighted float64
	var newNames []string
	names := make([]string, 0, len(ks))
	for name := range ks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		a := ks[name]
		totS += a.ms
		b, ok := kp[name]
		if !ok || b.ms == 0 {
			newMs += a.ms
			newNames = append(newNames, name)
			continue
		}
		r := a.ms / b.ms
		if a.count > 0 && b.count > 0 {
			r = (a.ms / float64(a.count)) / (b.ms / float64(b.count))
		}
		rs = append(rs, kr{name, r, b.ms, b.ms * (r - 1)})
		weighted += r * b.ms
	}
	pn := make([]string, 0, len(kp))
	for name := range kp {
		pn = append(pn, name)
	}
	slices.Sort(pn)
	for _, name := range pn {
		totP += kp[name].ms
	}
	slices.Sort(newNames)
	matchedP := 0.0
	for _, x := range rs {
		matchedP += x.peer
	}
	if matchedP == 0 {
		l.Evidence = append(l.Evidence, fmt.Sprintf("no kernel in common between rank %d and rank %d", s, p))
		return FindingNotObserved, false
	}
	R := weighted / matchedP // peer-time-weighted per-call ratio
	l.Evidence = append(l.Evidence, fmt.Sprintf("GPU kernel time: rank %d %.1f ms vs rank %d %.1f ms over the window; per call %+.1f%% across %d common kernels",
		s, totS, p, totP, 100*(R-1), len(rs)))
	newShare := 0.0
	if totS > 0 {
		newShare = newMs / totS
	}
	if newShare >= cfg.GPURel {
		l.Evidence = append(l.Evidence, fmt.Sprintf("kernels only on rank %d: %s (%.1f%% of its GPU time)", s, strings.Join(first(newNames, 4), ", "), 100*newShare))
	}
	if R-1 < cfg.GPURel && newShare < cfg.GPURel {
		return FindingMatches, false
	}
	slowP := 0.0
	for _, x := range rs {
		if x.ratio-1 >= 0.5*(R-1) && R > 1 {
			slowP += x.peer
		}
	}
	share := slowP / matchedP
	slices.SortFunc(rs, func(a, b kr) int { return cmp.Or(cmp.Compare(b.extra, a.extra), cmp.Compare(a.name, b.name)) })
	var tops []string
	for _, x := range first(rs, 4) {
		tops = append(tops, fmt.Sprintf("%s %+.1f%%", x.name, 100*(x.ratio-1)))
	}
	uniform := R-1 >= cfg.GPURel && share >= cfg.GPUUniform && newShare < cfg.GPURel
	if uniform {
		l.Evidence = append(l.Evidence, fmt.Sprintf("uniform: kernels holding %.0f%% of the peer's GPU time are ≥ %.1f%% slower (%s)", 100*share, 50*(R-1), strings.Join(tops, ", ")))
	} else {
		l.Evidence = append(l.Evidence, fmt.Sprintf("kernel-specific: only %.0f%% of the peer's GPU time is in kernels slowed by ≥ half the average; largest: %s", 100*share, strings.Join(tops, ", ")))
	}
	if math.IsNaN(R) {
		return FindingNotObserved, false
	}
	return FindingDiffers, uniform
}

func first[T any](xs []T, n int) []T {
	if len(xs) > n {
		return xs[:n]
	}
	return xs
}

func commKernel(name string) bool {
	l := strings.ToLower(name)
	return strings.Contains(l, "nccl") || strings.Contains(l, "rccl")
}
