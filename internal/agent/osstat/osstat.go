// Package osstat samples the node's OS counters the layered diagnosis
// compares across ranks once GPU and CPU profiles match (SysOM-AI §3.1
// "OS diff": interrupt counts, scheduler latency, NUMA migrations; §5.4
// case 2, NET_RX softirqs on a training core): /proc/interrupts,
// /proc/softirqs, /proc/stat, each registered rank's threads' schedstat,
// context switches, CPU and NUMA migrations, CPU frequency and RDMA
// congestion counters.
//
// Collect turns two consecutive readings into rates per second over the
// interval (or gauges at its end). Counters that went backwards are
// treated as 32-bit wraps where the kernel keeps them in 32 bits, as
// resets otherwise; a thread whose id was reused (another start time)
// starts afresh. A source the node lacks is listed in Batch.Absent with
// the reason, never reported as zeros. Per-(CPU, IRQ) and per-(CPU,
// softirq) points are emitted only when the count moved: a missing pair
// of a present source means none in the window.
//
// Point shapes: interrupts{CPU, Device "<irq>:<actions>" for numbered
// lines, "LOC"/"RES"/… for the others, CPU −1 for ERR/MIS}; softirqs{CPU,
// Device "NET_RX"/…}; cpu_busy/cpu_irq/cpu_softirq/cpu_steal{CPU} as
// fractions of the CPU's accounted time; per rank rank_cpu and runq_wait
// (s/s summed over the rank's threads: both can exceed 1), ctx switches,
// cpu_migrations, numa_pages_migrated; rank_on_cpu{Rank, CPU} counts the
// rank's threads that ran in the window and were last seen on that CPU
// (join it with the per-CPU points to find IRQs landing on a rank's
// cores, §5.4 case 2); runq_latency_p99/max in ms (sched tracepoints);
// rdma_*{Device "mlx5_0/1"}. Ranks come from Config.Ranks (pid → rank):
// two jobs on one node with the same rank number are summed together.
package osstat

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
)

// Bounds on what one reading keeps.
const (
	MaxCPUs          = 4096
	MaxIRQRows       = 1024
	MaxThreadsPerPID = 1024
	MaxThreads       = 16384
	MaxRDMAPorts     = 64
)

// srcProcSched names /proc/<pid>/task/<tid>/sched (se.nr_migrations,
// numa_pages_migrated) in Absent; signal/osstat has no constant for it.
const srcProcSched = "proc_pid_sched"

// Config configures a Collector (contracts §1c).
type Config struct {
	Interval time.Duration // the agent's collection period, default 5 s (§4)
	// Ranks returns the registered training processes, pid → rank.
	Ranks func() map[int]int
	// Root is prepended to /proc and /sys ("/" by default; tests use a
	// fake tree).
	Root string
	// SchedTracepoints asks for wakeup→run latency from the sched
	// tracepoints (runq_latency_p99/max); reported absent when tracefs or
	// BPF is not available.
	SchedTracepoints bool
	Log              *slog.Logger
}

// Collector reads the counters. Collect is meant for one goroutine; it
// is guarded anyway.
type Collector struct {
	cfg    Config
	log    *slog.Logger
	tp     latencySource // nil unless SchedTracepoints
	tpWhy  string        // why tp is nil when it was asked for
	mu     sync.Mutex
	prev   *reading
	warned map[string]bool
}

// New validates cfg. It reads nothing yet: the first Collect primes.
func New(cfg Config) (*Collector, error) {
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("osstat: interval %v is negative", cfg.Interval)
	}
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Collector{cfg: cfg, log: cfg.Log, warned: map[string]bool{}}
	if cfg.SchedTracepoints {
		c.tp, c.tpWhy = openLatency(cfg.Root, cfg.Log)
	}
	return c, nil
}

// Close releases the tracepoint programs, if any.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tp != nil {
		err := c.tp.Close()
		c.tp = nil
		return err
	}
	return nil
}

func (c *Collector) path(p string) string { return filepath.Join(c.cfg.Root, p) }

// warnOnce logs a parse problem once per key.
func (c *Collector) warnOnce(key string, err error) {
	if c.warned[key] || len(c.warned) > 256 {
		return
	}
	c.warned[key] = true
	c.log.Warn("osstat: "+key, "err", err)
}

type cpuKey struct {
	cpu  int // −1: a node-wide row
	name string
}

type cpuTimes struct{ total, idle, irq, softirq, steal float64 }

type thread struct {
	pid, rank                int
	start                    uint64
	run, wait, vol, invol    uint64
	mig, numa                uint64
	hasSched, hasNUMA, stats bool
	cpu                      int
}

// reading is one pass over the sources.
type reading struct {
	at       time.Time
	irq      map[cpuKey]uint64
	soft     map[cpuKey]uint64
	cpus     map[int]cpuTimes
	threads  map[int]thread // tid →
	vmNUMA   uint64
	vmOK     bool
	freq     map[int]float64 // MHz
	rdma     map[[2]string]uint64
	absent   map[string]string
	pauseAny bool
}

// Collect returns the rates since the previous call; the first call
// primes and returns nil, as does a call whose clock did not advance.
func (c *Collector) Collect(now time.Time) *osstat.Batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ranks map[int]int
	if c.cfg.Ranks != nil {
		ranks = c.cfg.Ranks()
	}
	cur := c.read(now, ranks)
	prev := c.prev
	c.prev = cur
	var lat []osstat.Point
	var latAbs *osstat.Absence
	if c.cfg.SchedTracepoints {
		if c.tp == nil {
			latAbs = &osstat.Absence{Source: osstat.SrcSchedTP, Reason: c.tpWhy}
		} else {
			var err error
			lat, err = c.tp.Drain(ranks)
			if err != nil {
				latAbs = &osstat.Absence{Source: osstat.SrcSchedTP, Reason: clip(err.Error())}
			}
		}
	}
	if prev == nil || !now.After(prev.at) {
		return nil
	}
	b := diff(prev, cur)
	b.Points = append(b.Points, lat...)
	if latAbs != nil {
		b.Absent = append(b.Absent, *latAbs)
	}
	sortBatch(b)
	if len(b.Points) > osstat.MaxPoints {
		c.warnOnce("points", fmt.Errorf("%d points, keeping %d", len(b.Points), osstat.MaxPoints))
		b.Points = b.Points[:osstat.MaxPoints]
	}
	return b
}

func sortBatch(b *osstat.Batch) {
	slices.SortFunc(b.Points, func(x, y osstat.Point) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), cmp.Compare(x.Rank, y.Rank), cmp.Compare(x.CPU, y.CPU),
			strings.Compare(x.Device, y.Device))
	})
	slices.SortFunc(b.Absent, func(x, y osstat.Absence) int {
		return cmp.Or(strings.Compare(x.Source, y.Source), strings.Compare(x.Reason, y.Reason))
	})
}

// absentReason words a read failure.
func absentReason(path string, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no " + path
	case errors.Is(err, fs.ErrPermission):
		return "permission denied reading " + path
	}
	return clip(err.Error())
}

func (c *Collector) read(now time.Time, ranks map[int]int) *reading {
	r := &reading{at: now, absent: map[string]string{}}
	r.irq = c.readTable("/proc/interrupts", osstat.SrcInterrupts, r, true)
	r.soft = c.readTable("/proc/softirqs", osstat.SrcSoftIRQs, r, false)
	c.readStat(r)
	c.readThreads(r, ranks)
	c.readVMStat(r)
	c.readFreq(r)
	c.readRDMA(r)
	return r
}

func (c *Collector) readTable(name, src string, r *reading, irq bool) map[cpuKey]uint64 {
	b, err := os.ReadFile(c.path(name))
	if err != nil {
		r.absent[src] = absentReason(name, err)
		return nil
	}
	t, rowErr, err := parsePerCPU(b, MaxIRQRows, MaxCPUs)
	if err != nil {
		r.absent[src] = clip(name + ": " + err.Error())
		return nil
	}
	if rowErr != nil {
		c.warnOnce(name, rowErr)
	}
	out := make(map[cpuKey]uint64, len(t.Rows)*len(t.CPUs))
	for _, row := range t.Rows {
		dev := row.Key
		if irq {
			dev = irqName(row)
		}
		if row.Total {
			out[cpuKey{-1, dev}] = row.Counts[0]
			continue
		}
		for i, v := range row.Counts {
			out[cpuKey{t.CPUs[i], dev}] = v
		}
	}
	return out
}

// readStat uses procfs: its /proc/stat parser keys CPUs by number and
// converts ticks to seconds.
func (c *Collector) readStat(r *reading) {
	pfs, err := procfs.NewFS(c.path("/proc"))
	if err == nil {
		var st procfs.Stat
		st, err = pfs.Stat()
		if err == nil {
			r.cpus = make(map[int]cpuTimes, len(st.CPU))
			for n, s := range st.CPU {
				if n < 0 || n >= MaxCPUs {
					continue
				}
				// guest time is already inside user/nice.
				total := s.User + s.Nice + s.System + s.Idle + s.Iowait + s.IRQ + s.SoftIRQ + s.Steal
				r.cpus[int(n)] = cpuTimes{total: total, idle: s.Idle + s.Iowait, irq: s.IRQ, softirq: s.SoftIRQ, steal: s.Steal}
			}
			return
		}
	}
	r.absent[osstat.SrcStat] = absentReason("/proc/stat", err)
}

var schedKeys = map[string]bool{"se.nr_migrations": true, "numa_pages_migrated": true,
	"nr_voluntary_switches": true, "nr_involuntary_switches": true}

// readThreads reads every registered process's threads with procfs, one
// procfs.FS rooted at /proc/<pid>/task so that Proc(tid) addresses the
// thread's files. /proc/<pid>/task/<tid>/sched has no procfs parser.
func (c *Collector) readThreads(r *reading, ranks map[int]int) {
	r.threads = map[int]thread{}
	var prevThreads map[int]thread
	if c.prev != nil {
		prevThreads = c.prev.threads
	}
	pids := make([]int, 0, len(ranks))
	for pid := range ranks {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	var schedMissing, statMissing int
	for _, pid := range pids {
		rank := ranks[pid]
		dir := c.path(filepath.Join("/proc", strconv.Itoa(pid), "task"))
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // the process is gone: no points for it
		}
		tfs, err := procfs.NewFS(dir)
		if err != nil {
			continue
		}
		n := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || tid <= 0 {
				continue
			}
			if n >= MaxThreadsPerPID || len(r.threads) >= MaxThreads {
				c.warnOnce("threads", fmt.Errorf("pid %d: thread cap reached (%d per process, %d in all)", pid, MaxThreadsPerPID, MaxThreads))
				break
			}
			n++
			p, err := tfs.Proc(tid)
			if err != nil {
				continue
			}
			ss, ssErr := p.Schedstat()
			if ssErr == nil && prevThreads != nil {
				// A thread that did not run since the last reading made
				// no context switch or migration and sits on the same
				// CPU: keep those, update only its wait (it may have
				// been starved). Most of a trainer's threads idle, and
				// this saves three reads each.
				if pt, ok := prevThreads[tid]; ok && pt.pid == pid && pt.stats && pt.run == ss.RunningNanoseconds {
					pt.rank, pt.wait = rank, ss.WaitingNanoseconds
					r.threads[tid] = pt
					continue
				}
			}
			st, err := p.Stat()
			if err != nil {
				continue // exited between ReadDir and now
			}
			t := thread{pid: pid, rank: rank, start: st.Starttime, cpu: int(st.Processor)}
			if ssErr == nil {
				t.run, t.wait, t.stats = ss.RunningNanoseconds, ss.WaitingNanoseconds, true
			} else {
				statMissing++
			}
			// /proc/<pid>/task/<tid>/sched carries the context switches
			// too; status is read only where sched is missing.
			if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "sched")); err == nil {
				kv := parseKV(b, schedKeys)
				t.mig, t.hasSched = kv["se.nr_migrations"], true
				t.numa, t.hasNUMA = kv["numa_pages_migrated"]
				t.vol, t.invol = kv["nr_voluntary_switches"], kv["nr_involuntary_switches"]
			} else if status, err := p.NewStatus(); err == nil {
				schedMissing++
				t.vol, t.invol = status.VoluntaryCtxtSwitches, status.NonVoluntaryCtxtSwitches
			} else {
				schedMissing++
			}
			r.threads[tid] = t
		}
	}
	if len(r.threads) > 0 && statMissing == len(r.threads) {
		r.absent[osstat.SrcSchedstat] = "no /proc/<pid>/task/<tid>/schedstat (kernel without CONFIG_SCHED_INFO)"
	}
	if len(r.threads) > 0 && schedMissing == len(r.threads) {
		r.absent[srcProcSched] = "no /proc/<pid>/task/<tid>/sched (kernel without CONFIG_SCHED_DEBUG): no cpu_migrations"
	}
}

func (c *Collector) readVMStat(r *reading) {
	b, err := os.ReadFile(c.path("/proc/vmstat"))
	if err != nil {
		r.absent[osstat.SrcVMStat] = absentReason("/proc/vmstat", err)
		return
	}
	v, ok := parseKV(b, map[string]bool{"numa_pages_migrated": true})["numa_pages_migrated"]
	if !ok {
		r.absent[osstat.SrcVMStat] = "no numa_pages_migrated in /proc/vmstat (kernel without CONFIG_NUMA_BALANCING)"
		return
	}
	r.vmNUMA, r.vmOK = v, true
}

// readFreq reads scaling_cur_freq only. procfs's SystemCpufreq reads a
// dozen attributes per CPU including cpuinfo_cur_freq, which the kernel
// deliberately slows down, and fails without cpu/offline.
func (c *Collector) readFreq(r *reading) {
	dirs, _ := filepath.Glob(c.path("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
	for _, f := range dirs {
		cpu, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(f))), "cpu"))
		if err != nil || cpu < 0 || cpu >= MaxCPUs {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		khz, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		if r.freq == nil {
			r.freq = map[int]float64{}
		}
		r.freq[cpu] = float64(khz) / 1000
	}
	if len(r.freq) == 0 {
		r.absent[osstat.SrcCPUFreq] = "no cpufreq scaling_cur_freq in sysfs (no frequency driver, e.g. a VM)"
	}
}

// rdmaCounters maps hw_counters files to metrics. PFC pause counters are
// not standard sysfs attributes; any "*pause*" counter a driver exposes
// is taken by direction.
var rdmaCounters = map[string]string{
	"np_cnp_sent":    osstat.RDMACNPSent,
	"rp_cnp_handled": osstat.RDMACNPHandled,
}

func rdmaMetric(file string) string {
	if m, ok := rdmaCounters[file]; ok {
		return m
	}
	if strings.Contains(file, "pause") {
		switch {
		case strings.Contains(file, "rx"):
			return osstat.RDMAPFCPauseRx
		case strings.Contains(file, "tx"):
			return osstat.RDMAPFCPauseTx
		}
	}
	return ""
}

// readRDMA reads the counters by name. procfs's InfiniBandClass reads
// every attribute of every port on each call and has no pause fields.
func (c *Collector) readRDMA(r *reading) {
	base := c.path("/sys/class/infiniband")
	if _, err := os.Stat(base); err != nil {
		r.absent[osstat.SrcRDMA] = absentReason("/sys/class/infiniband", err) + " (no RDMA devices)"
		return
	}
	ports, _ := filepath.Glob(filepath.Join(base, "*", "ports", "*", "hw_counters"))
	if len(ports) > MaxRDMAPorts {
		ports = ports[:MaxRDMAPorts]
	}
	r.rdma = map[[2]string]uint64{}
	for _, hw := range ports {
		port := filepath.Base(filepath.Dir(hw))
		dev := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(hw))))
		ents, err := os.ReadDir(hw)
		if err != nil {
			continue
		}
		for _, e := range ents {
			m := rdmaMetric(e.Name())
			if m == "" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(hw, e.Name()))
			if err != nil {
				continue
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				continue
			}
			if m == osstat.RDMAPFCPauseRx || m == osstat.RDMAPFCPauseTx {
				r.pauseAny = true
			}
			r.rdma[[2]string{dev + "/" + port, m}] += v
		}
	}
	if len(r.rdma) == 0 {
		r.absent[osstat.SrcRDMA] = "no np_cnp_sent/rp_cnp_handled hw_counters under /sys/class/infiniband"
	} else if !r.pauseAny {
		r.absent[osstat.SrcRDMA] = "PFC pause counters not exposed in sysfs (read them with ethtool -S)"
	}
}

// delta is cur − prev for a monotonic counter. A decrease is a 32-bit
// wrap when wrap32 and prev fits in 32 bits (the kernel keeps per-CPU
// interrupt and softirq counts as unsigned int), else a reset: the
// counter counted cur since.
func delta(prev, cur uint64, wrap32 bool) uint64 {
	if cur >= prev {
		return cur - prev
	}
	if wrap32 && prev <= math.MaxUint32 && cur <= math.MaxUint32 {
		return cur + (1 << 32) - prev
	}
	return cur
}

func diff(prev, cur *reading) *osstat.Batch {
	dt := cur.at.Sub(prev.at).Seconds()
	b := &osstat.Batch{StartNS: prev.at.UnixNano(), EndNS: cur.at.UnixNano(), Points: []osstat.Point{}}
	add := func(name string, rank, cpu int, dev string, v float64) {
		b.Points = append(b.Points, osstat.Point{Name: name, Rank: rank, CPU: cpu, Device: dev, Value: v})
	}
	// Interrupts and softirqs: rates of the pairs that moved.
	for _, tab := range []struct {
		name       string
		prev, cur  map[cpuKey]uint64
		wrapCounts bool
	}{{osstat.Interrupts, prev.irq, cur.irq, true}, {osstat.SoftIRQs, prev.soft, cur.soft, true}} {
		for k, v := range tab.cur {
			p, ok := tab.prev[k]
			if !ok {
				continue
			}
			if d := delta(p, v, tab.wrapCounts); d > 0 {
				add(tab.name, -1, k.cpu, k.name, float64(d)/dt)
			}
		}
	}
	// CPU time fractions, over the CPU's own accounted time.
	for n, c := range cur.cpus {
		p, ok := prev.cpus[n]
		if !ok {
			continue
		}
		tot := c.total - p.total
		if tot <= 0 {
			continue
		}
		frac := func(a, b float64) float64 { return math.Min(1, math.Max(0, (a-b)/tot)) }
		add(osstat.CPUBusy, -1, n, "", 1-frac(c.idle, p.idle))
		add(osstat.CPUIRQTime, -1, n, "", frac(c.irq, p.irq))
		add(osstat.CPUSoftTime, -1, n, "", frac(c.softirq, p.softirq))
		add(osstat.CPUSteal, -1, n, "", frac(c.steal, p.steal))
	}
	// Per rank: sums over the threads seen in both readings.
	type acc struct {
		run, wait, vol, invol, mig, numa uint64
		stats, sched, numaOK             bool
		onCPU                            map[int]int
	}
	ranks := map[int]*acc{}
	for tid, t := range cur.threads {
		p, ok := prev.threads[tid]
		if !ok || p.pid != t.pid || p.start != t.start {
			continue // new (or reused) thread: primes
		}
		a := ranks[t.rank]
		if a == nil {
			a = &acc{onCPU: map[int]int{}}
			ranks[t.rank] = a
		}
		if t.stats && p.stats {
			dr := delta(p.run, t.run, false)
			a.run += dr
			a.wait += delta(p.wait, t.wait, false)
			a.stats = true
			if dr > 0 {
				a.onCPU[t.cpu]++
			}
		}
		a.vol += delta(p.vol, t.vol, false)
		a.invol += delta(p.invol, t.invol, false)
		if t.hasSched && p.hasSched {
			a.mig += delta(p.mig, t.mig, false)
			a.sched = true
		}
		if t.hasNUMA && p.hasNUMA {
			a.numa += delta(p.numa, t.numa, false)
			a.numaOK = true
		}
	}
	dns := dt * 1e9
	for rank, a := range ranks {
		if a.stats {
			add(osstat.RankCPU, rank, -1, "", float64(a.run)/dns)
			add(osstat.RunQueueWait, rank, -1, "", float64(a.wait)/dns)
			for cpu, n := range a.onCPU {
				add(osstat.RankOnCPU, rank, cpu, "", float64(n))
			}
		}
		add(osstat.CtxSwitchVol, rank, -1, "", float64(a.vol)/dt)
		add(osstat.CtxSwitchInvol, rank, -1, "", float64(a.invol)/dt)
		if a.sched {
			add(osstat.CPUMigrations, rank, -1, "", float64(a.mig)/dt)
		}
		if a.numaOK {
			add(osstat.NUMAMigrations, rank, -1, "", float64(a.numa)/dt)
		}
	}
	if cur.vmOK && prev.vmOK {
		add(osstat.NodeNUMAMigrations, -1, -1, "", float64(delta(prev.vmNUMA, cur.vmNUMA, false))/dt)
	}
	for cpu, mhz := range cur.freq {
		add(osstat.CPUFreqMHz, -1, cpu, "", mhz)
	}
	for k, v := range cur.rdma {
		if p, ok := prev.rdma[k]; ok {
			add(k[1], -1, -1, k[0], float64(delta(p, v, false))/dt)
		}
	}
	for src, why := range cur.absent {
		b.Absent = append(b.Absent, osstat.Absence{Source: src, Reason: clip(why)})
	}
	return b
}
