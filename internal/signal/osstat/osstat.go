// Package osstat is the OS/GPU/NIC counter signal a node agent samples
// beside the CPU stacks: interrupts and softirqs per CPU, run-queue wait
// and context switches per rank, CPU and NUMA migrations, CPU frequency,
// GPU clocks/throttle/temperature (NVML), RDMA congestion counters
// (SysOM-AI §3.1 "OS diff", §5.4 cases 1–3).
//
// The agent ships rates, not raw counters: each Point is the counter's
// increase over the batch's interval divided by its length (per second),
// or a gauge's value at its end, so the server never handles counter
// resets. A source the node does not have is listed in Absent with the
// reason, never reported as zeros.
package osstat

import (
	"fmt"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Metric names (the vocabulary is closed so the engine can rely on it;
// a new metric is added here first). Unit in the comment; "/s" marks a
// rate.
const (
	// Per CPU (CPU ≥ 0, Rank −1).
	Interrupts  = "interrupts"   // /s, Device = IRQ name or number (/proc/interrupts)
	SoftIRQs    = "softirqs"     // /s, Device = NET_RX, TIMER, … (/proc/softirqs)
	CPUIRQTime  = "cpu_irq"      // fraction of the CPU in hard IRQ (/proc/stat)
	CPUSoftTime = "cpu_softirq"  // fraction of the CPU in softirq (/proc/stat)
	CPUSteal    = "cpu_steal"    // fraction stolen by the hypervisor (/proc/stat)
	CPUBusy     = "cpu_busy"     // fraction not idle (/proc/stat)
	CPUFreqMHz  = "cpu_freq_mhz" // gauge (cpufreq scaling_cur_freq)

	// Per rank (Rank ≥ 0, CPU −1 unless stated).
	RankCPU        = "rank_cpu"            // fraction of one CPU the rank's threads used (schedstat)
	RunQueueWait   = "runq_wait"           // s/s its threads waited runnable (schedstat field 2)
	RunQueueP99Ms  = "runq_latency_p99"    // ms, wakeup→run latency p99 (sched tracepoints)
	RunQueueMaxMs  = "runq_latency_max"    // ms, the worst wakeup→run latency (sched tracepoints)
	CtxSwitchVol   = "ctx_switches_vol"    // /s voluntary context switches
	CtxSwitchInvol = "ctx_switches_inv"    // /s involuntary (preempted) context switches
	CPUMigrations  = "cpu_migrations"      // /s (se.nr_migrations)
	NUMAMigrations = "numa_pages_migrated" // /s (per rank when /proc/<pid>/sched shows it, else node-level)
	RankOnCPU      = "rank_on_cpu"         // gauge: CPU ≥ 0 set, the rank's threads seen last on that CPU (count)

	// Node level (Rank −1, CPU −1).
	NodeNUMAMigrations = "node_numa_pages_migrated" // /s (/proc/vmstat)

	// GPU (Device = GPU index, Rank when the agent knows which rank
	// drives it).
	GPUSMClockMHz  = "gpu_sm_clock_mhz"
	GPUMemClockMHz = "gpu_mem_clock_mhz"
	GPUMaxSMMHz    = "gpu_max_sm_clock_mhz"
	GPUTempC       = "gpu_temp_c"
	GPUUtil        = "gpu_util"     // fraction
	GPUThrottle    = "gpu_throttle" // NVML clocks-event reasons bitmask
	GPUPowerW      = "gpu_power_w"

	// RDMA NIC port (Device = "mlx5_0/1").
	RDMACNPSent    = "rdma_cnp_sent"     // /s (np_cnp_sent)
	RDMACNPHandled = "rdma_cnp_handled"  // /s (rp_cnp_handled)
	RDMAPFCPauseRx = "rdma_pfc_pause_rx" // /s when the driver exposes it
	RDMAPFCPauseTx = "rdma_pfc_pause_tx"
)

// Sources name where points come from, for Absent.
const (
	SrcInterrupts = "proc_interrupts"
	SrcSoftIRQs   = "proc_softirqs"
	SrcStat       = "proc_stat"
	SrcSchedstat  = "schedstat"
	SrcSchedTP    = "sched_tracepoints"
	SrcVMStat     = "proc_vmstat"
	SrcCPUFreq    = "cpufreq"
	SrcNVML       = "nvml"
	SrcRDMA       = "rdma_sysfs"
)

// Point is one metric value.
type Point struct {
	Name   string  `json:"name"`
	Rank   int     `json:"rank"` // −1: not a rank's
	CPU    int     `json:"cpu"`  // −1: not a CPU's
	Device string  `json:"device,omitempty"`
	Value  float64 `json:"value"`
}

// Absence says a source is missing on this node and why ("no NVIDIA
// driver", "tracefs not mounted", "no /sys/class/infiniband").
type Absence struct {
	Source string `json:"source"`
	Reason string `json:"reason"`
}

// Batch is one node's points over [StartNS, EndNS).
type Batch struct {
	Node    string    `json:"node,omitempty"`
	StartNS int64     `json:"start_ns"`
	EndNS   int64     `json:"end_ns"`
	Points  []Point   `json:"points"`
	Absent  []Absence `json:"absent,omitempty"`
}

// Bounds.
const (
	MaxPoints  = 1 << 18
	MaxNameLen = 256
	MaxCPU     = 1 << 16
	MaxRank    = 1 << 20
)

// Validate checks a batch and names the offending field.
func (b *Batch) Validate() error {
	if err := b.ValidateHeader(); err != nil {
		return err
	}
	for i := range b.Points {
		if err := b.ValidatePoint(i); err != nil {
			return err
		}
	}
	for i := range b.Absent {
		if err := b.ValidateAbsence(i); err != nil {
			return err
		}
	}
	return nil
}

// ValidateHeader checks what belongs to the whole batch (interval, point
// count, node), not its points and absences: the parts of Validate a
// partial decode cannot keep a batch without.
func (b *Batch) ValidateHeader() error {
	if b.StartNS <= 0 || b.EndNS <= b.StartNS {
		return signal.FieldErrorf("end_ns", "interval [%d, %d] is empty or reversed", b.StartNS, b.EndNS)
	}
	if len(b.Points) > MaxPoints {
		return signal.FieldErrorf("points", "%d points exceed %d", len(b.Points), MaxPoints)
	}
	if len(b.Node) > MaxNameLen {
		return signal.FieldErrorf("node", "longer than %d bytes", MaxNameLen)
	}
	return nil
}

// ValidatePoint checks points[i]; the error names points[i].field.
func (b *Batch) ValidatePoint(i int) error {
	p := &b.Points[i]
	f := func(name string) string { return fmt.Sprintf("points[%d].%s", i, name) }
	if p.Name == "" || len(p.Name) > MaxNameLen {
		return signal.FieldErrorf(f("name"), "empty or longer than %d bytes", MaxNameLen)
	}
	if p.Rank < -1 || p.Rank > MaxRank {
		return signal.FieldErrorf(f("rank"), "%d outside [-1, %d]", p.Rank, MaxRank)
	}
	if p.CPU < -1 || p.CPU > MaxCPU {
		return signal.FieldErrorf(f("cpu"), "%d outside [-1, %d]", p.CPU, MaxCPU)
	}
	if len(p.Device) > MaxNameLen {
		return signal.FieldErrorf(f("device"), "longer than %d bytes", MaxNameLen)
	}
	if p.Value != p.Value || p.Value > 1e18 || p.Value < -1e18 {
		return signal.FieldErrorf(f("value"), "not a finite number within ±1e18")
	}
	return nil
}

// ValidateAbsence checks absent[i].
func (b *Batch) ValidateAbsence(i int) error {
	a := &b.Absent[i]
	if a.Source == "" || len(a.Source) > MaxNameLen || len(a.Reason) > MaxNameLen {
		return signal.FieldErrorf(fmt.Sprintf("absent[%d].source", i), "empty or longer than %d bytes", MaxNameLen)
	}
	return nil
}
