package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// OS diff (§3.1 step 3): interrupts and softirqs on the CPUs the rank's
// threads ran on (rank_on_cpu names them, per node), run-queue waits,
// involuntary context switches, CPU and NUMA migrations, hypervisor
// steal — the brief, high-frequency events sampled flame graphs miss.

type cpuKey struct {
	node string
	cpu  int
}

type seriesKey struct {
	node, name, dev string
	rank, cpu       int
}

// osIndex holds each series' duration-weighted mean over a window's
// batches, and which CPUs each rank ran on.
type osIndex struct {
	val      map[string]map[seriesKey]float64 // by metric name
	rankCPUs map[int][]cpuKey
	// rankCPUW: the rank's rank_on_cpu value per CPU, duration-weighted
	// (how much of the rank's threads' time ran there).
	rankCPUW map[int]map[cpuKey]float64
	// rankNode: the node a rank's own points came from.
	rankNode map[int]string
	absent   map[string][]osstat.Absence
	// throttle ORs the GPU clocks-event bitmask per (rank, device).
	throttle map[seriesKey]uint64
}

func indexOS(bs []osstat.Batch) *osIndex {
	ix := &osIndex{val: map[string]map[seriesKey]float64{}, rankCPUs: map[int][]cpuKey{}, rankCPUW: map[int]map[cpuKey]float64{}, rankNode: map[int]string{},
		absent: map[string][]osstat.Absence{}, throttle: map[seriesKey]uint64{}}
	w := map[seriesKey]float64{}
	seenCPU := map[int]map[cpuKey]bool{}
	for i := range bs {
		b := &bs[i]
		d := float64(b.EndNS - b.StartNS)
		for _, a := range b.Absent {
			if !slices.Contains(ix.absent[b.Node], a) {
				ix.absent[b.Node] = append(ix.absent[b.Node], a)
			}
		}
		for _, p := range b.Points {
			k := seriesKey{node: b.Node, name: p.Name, dev: p.Device, rank: p.Rank, cpu: p.CPU}
			if p.Rank >= 0 {
				ix.rankNode[p.Rank] = b.Node
			}
			switch p.Name {
			case osstat.RankOnCPU:
				if p.Rank >= 0 && p.CPU >= 0 && p.Value > 0 {
					if seenCPU[p.Rank] == nil {
						seenCPU[p.Rank] = map[cpuKey]bool{}
					}
					ck := cpuKey{b.Node, p.CPU}
					if ix.rankCPUW[p.Rank] == nil {
						ix.rankCPUW[p.Rank] = map[cpuKey]float64{}
					}
					ix.rankCPUW[p.Rank][ck] += p.Value * max(d, 1)
					if !seenCPU[p.Rank][ck] {
						seenCPU[p.Rank][ck] = true
						ix.rankCPUs[p.Rank] = append(ix.rankCPUs[p.Rank], ck)
					}
				}
				continue
			case osstat.GPUThrottle:
				if p.Value >= 0 && p.Value < 1<<53 {
					ix.throttle[k] |= uint64(p.Value)
				}
			}
			if ix.val[p.Name] == nil {
				ix.val[p.Name] = map[seriesKey]float64{}
			}
			ix.val[p.Name][k] += p.Value * d
			w[k] += d
		}
	}
	for k, d := range w {
		if d > 0 {
			ix.val[k.name][k] /= d
		}
	}
	for r := range ix.rankCPUs {
		slices.SortFunc(ix.rankCPUs[r], func(a, b cpuKey) int { return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.cpu, b.cpu)) })
	}
	return ix
}

// rankValue sums a per-rank metric over devices (a rank's points live
// on one node); ok=false when the rank has none.
func (ix *osIndex) rankValue(name string, rank int) (float64, bool) {
	v, ok := 0.0, false
	for k, x := range ix.val[name] {
		if k.rank == rank && k.cpu < 0 {
			v += x
			ok = true
		}
	}
	return v, ok
}

// cpuValues is a per-CPU metric on the CPUs the rank ran on, per
// device: the mean over those CPUs weighted by the rank's rank_on_cpu
// share of each. A rank whose threads touched four CPUs must not see
// four CPUs' timer softirqs summed against a peer's one (§3.1 OS diff
// compares what hit the rank, per CPU).
func (ix *osIndex) cpuValues(name string, rank int) (map[string]float64, bool) {
	ws := ix.rankCPUW[rank]
	if len(ws) == 0 {
		return nil, false
	}
	var tot float64
	for _, w := range ws {
		tot += w
	}
	out := map[string]float64{}
	for k, x := range ix.val[name] {
		if k.cpu < 0 {
			continue
		}
		if w := ws[cpuKey{k.node, k.cpu}]; w > 0 {
			out[k.dev] += x * w / tot
		}
	}
	return out, true
}

// osSignal is one compared OS metric with its absolute floor (below it
// a difference is within normal background: a CPU takes ~250–1000 timer
// interrupts a second; 2% of a CPU is noise in /proc/stat ticks).
type osSignal struct {
	name   string
	perCPU bool
	floor  float64
	unit   string
	label  string
	cause  Cause
}

var osSignals = []osSignal{
	{osstat.SoftIRQs, true, 1000, "/s", "softirqs per CPU", CauseIRQ},
	{osstat.Interrupts, true, 1000, "/s", "interrupts per CPU", CauseIRQ},
	{osstat.CPUSoftTime, true, 0.02, "", "CPU time in softirq", CauseIRQ},
	{osstat.CPUIRQTime, true, 0.02, "", "CPU time in hard IRQ", CauseIRQ},
	{osstat.CPUSteal, true, 0.02, "", "CPU steal", CauseSteal},
	{osstat.RunQueueWait, false, 0.02, " s/s", "run-queue wait", CauseRunQueue},
	{osstat.RunQueueP99Ms, false, 1, " ms", "wakeup→run latency p99", CauseRunQueue},
	{osstat.CtxSwitchInvol, false, 100, "/s", "involuntary context switches", CauseRunQueue},
	{osstat.CPUMigrations, false, 20, "/s", "CPU migrations", CauseMigration},
	{osstat.NUMAMigrations, false, 100, "/s", "NUMA page migrations", CauseMigration},
}

// nicDevice reports whether an interrupt/softirq device is network
// receive work (NET_RX softirq, a NIC queue's IRQ).
func nicDevice(dev string) bool {
	d := strings.ToLower(dev)
	if d == "net_rx" {
		return true
	}
	for _, s := range []string{"mlx5_comp", "virtio", "eth", "ens", "enp", "ixgbe", "i40e", "ice-", "bnxt", "ena-", "-rx-", "-txrx-"} {
		if strings.Contains(d, s) && d != "net_tx" {
			return true
		}
	}
	return false
}

type osDelta struct {
	sig      osSignal
	dev      string
	s, p     float64
	score    float64
	cpusText string
}

// osLayer compares the OS signals of the flagged rank s with the peer p.
func osLayer(ix *osIndex, s, p int, cfg Config) Layer {
	l := Layer{Layer: LayerOS, Finding: FindingNotObserved, Evidence: []string{}}
	observed := 0
	var diffs []osDelta
	for _, sig := range osSignals {
		if sig.perCPU {
			sv, okS := ix.cpuValues(sig.name, s)
			pv, okP := ix.cpuValues(sig.name, p)
			if !okS || !okP || (len(sv) == 0 && len(pv) == 0) {
				continue
			}
			observed++
			devs := map[string]bool{}
			for d := range sv {
				devs[d] = true
			}
			for d := range pv {
				devs[d] = true
			}
			for d := range devs {
				if x := compareOS(sig, d, sv[d], pv[d], cfg); x != nil {
					diffs = append(diffs, *x)
				}
			}
			continue
		}
		sv, okS := ix.rankValue(sig.name, s)
		pv, okP := ix.rankValue(sig.name, p)
		if !okS || !okP {
			continue
		}
		observed++
		if x := compareOS(sig, "", sv, pv, cfg); x != nil {
			diffs = append(diffs, *x)
		}
	}
	if observed == 0 {
		l.Evidence = append(l.Evidence, fmt.Sprintf("no OS signal observed for both rank %d and rank %d in this window", s, p))
		l.Evidence = append(l.Evidence, absenceText(ix, s)...)
		return l
	}
	if len(ix.rankCPUs[s]) == 0 || len(ix.rankCPUs[p]) == 0 {
		l.Evidence = append(l.Evidence, "per-CPU interrupts/softirqs not compared: the agent did not report which CPUs the ranks ran on (rank_on_cpu)")
	}
	slices.SortFunc(diffs, func(a, b osDelta) int {
		return cmp.Or(cmp.Compare(b.score, a.score), cmp.Compare(a.sig.name, b.sig.name), cmp.Compare(a.dev, b.dev))
	})
	if len(diffs) == 0 {
		l.Finding = FindingMatches
		l.Evidence = append(l.Evidence, fmt.Sprintf("%d OS signals of rank %d are within %g× of rank %d's (or below their noise floors)", observed, s, cfg.OSRatio, p))
		return l
	}
	l.Finding = FindingDiffers
	cpus := cpuText(ix.rankCPUs[s])
	for i, d := range diffs {
		if i == 4 {
			l.Evidence = append(l.Evidence, fmt.Sprintf("%d more OS signals differ", len(diffs)-4))
			break
		}
		what := d.sig.label
		if d.dev != "" {
			what = d.dev + " " + what
		}
		where := fmt.Sprintf("rank %d", s)
		if d.sig.perCPU {
			where = fmt.Sprintf("rank %d's CPUs (%s)", s, cpus)
		}
		l.Evidence = append(l.Evidence, fmt.Sprintf("%s on %s: %s vs %s on rank %d's", what, where, num(d.s, d.sig.unit), num(d.p, d.sig.unit), p))
	}
	top := diffs[0]
	l.Cause = top.sig.cause
	if (top.sig.name == osstat.SoftIRQs || top.sig.name == osstat.Interrupts) && nicDevice(top.dev) {
		l.Cause = CauseNetRX
	}
	l.Next = nextCheck(l.Cause, nil)
	return l
}

func compareOS(sig osSignal, dev string, s, p float64, cfg Config) *osDelta {
	if s-p < sig.floor || s < cfg.OSRatio*p {
		return nil
	}
	// Score: the excess in floors, so unlike units rank together.
	return &osDelta{sig: sig, dev: dev, s: s, p: p, score: (s - p) / sig.floor}
}

func cpuText(cs []cpuKey) string {
	var b strings.Builder
	for i, c := range cs {
		if i == 6 {
			fmt.Fprintf(&b, ", +%d", len(cs)-6)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if c.node != "" {
			b.WriteString(c.node + " ")
		}
		fmt.Fprintf(&b, "cpu %d", c.cpu)
	}
	return b.String()
}

func num(x float64, unit string) string {
	switch {
	case unit == "":
		return fmt.Sprintf("%.1f%%", 100*x)
	case math.Abs(x) >= 100:
		return fmt.Sprintf("%s%s", commas(int64(math.Round(x))), unit)
	}
	return fmt.Sprintf("%.3g%s", x, unit)
}

func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func absenceText(ix *osIndex, rank int) []string {
	node, ok := ix.rankNode[rank]
	if !ok {
		return nil
	}
	var out []string
	for _, a := range ix.absent[node] {
		out = append(out, fmt.Sprintf("%s absent on %s: %s", a.Source, node, a.Reason))
	}
	return out
}
