package cpuprof

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Mode selects the user-space unwinder (§5.2 frame-accuracy evaluation).
type Mode uint8

const (
	// ModeHybrid is Algorithm 1: frame pointers where a marker says they
	// are valid, DWARF CFI otherwise (the default).
	ModeHybrid Mode = iota
	// ModeFPOnly follows the frame-pointer chain only (the baseline).
	ModeFPOnly
	// ModeDWARFOnly uses the CFI tables for every frame.
	ModeDWARFOnly
)

func (m Mode) String() string {
	switch m {
	case ModeHybrid:
		return "hybrid"
	case ModeFPOnly:
		return "fp"
	case ModeDWARFOnly:
		return "dwarf"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ErrUnsupported wraps every refusal by the kernel (no BPF, no perf
// events, verifier rejection); the error text says which.
var ErrUnsupported = errors.New("cpuprof: unsupported here")

// Config configures a Profiler (contracts §1a).
type Config struct {
	Hz       int           // 10..999, default 99 (§4)
	Ratio    float64       // fraction of ticks that collect a stack, (0,1], default 0.1 (§5.1)
	Interval time.Duration // drain period, default 5 s (§4)
	Mode     Mode
	// RankOf maps a pid to its registered rank; ok=false: not a training
	// process. Other processes' samples are kept only as Foreign samples
	// of a rank whose threads ran on the same CPU in the window.
	RankOf func(pid int) (rank int, ok bool)
	// AllProcesses keeps every process's samples (Rank -1 unless Foreign).
	AllProcesses bool
	// Reveal says whether another process's samples on rank's CPUs may
	// be shown to rank's job with their name and stacks (the rank's
	// registrant could read that process itself). When it says no, or is
	// nil, they become one opaque sample per rank and window: Foreign,
	// PID 0, the single frame HiddenFrame — interference measured,
	// nothing of the other process disclosed (docs/security.md).
	Reveal func(rank, pid int) bool
	// SampleSelf samples the agent's own process too (its samples on a
	// rank's CPUs are shown as SelfFrame): the agent's cost is part of
	// what a rank's core does. Off, the program skips the agent.
	SampleSelf bool
	// MaxStacks sizes the in-kernel aggregation maps (default 16384);
	// overflow is counted in Batch.Dropped.
	MaxStacks int
	// Emit receives each window's batch on the profiler's goroutine.
	Emit func(*stack.Batch)
	Log  *slog.Logger
}

const (
	defaultHz        = 99
	defaultRatio     = 0.1
	defaultInterval  = 5 * time.Second
	defaultMaxStacks = 16384
	// rowCapacity bounds the unwind rows held in BPF (16 bytes each).
	rowCapacity   = 1 << 22
	maxFiles      = 4096
	maxProcs      = 1024
	maxMaps       = 1024
	maxPyFrames   = 32
	maxUserFrames = 64
	// Table compilation per scan (§4: ~200 ms per binary at startup):
	// bounded so a node with many binaries (AllProcesses) keeps draining
	// on time; the rest is compiled by later scans.
	initialScanBudget = 2 * time.Second
	scanBudget        = 500 * time.Millisecond
	kstackDepth       = 48
)

func (c *Config) fill() error {
	if c.Hz == 0 {
		c.Hz = defaultHz
	}
	if c.Hz < stack.MinHz || c.Hz > stack.MaxHz {
		return fmt.Errorf("cpuprof: hz %d outside [%d, %d]", c.Hz, stack.MinHz, stack.MaxHz)
	}
	if c.Ratio == 0 {
		c.Ratio = defaultRatio
	}
	if !(c.Ratio > 0 && c.Ratio <= 1) {
		return fmt.Errorf("cpuprof: ratio %v outside (0, 1]", c.Ratio)
	}
	if c.Interval == 0 {
		c.Interval = defaultInterval
	}
	if c.Interval < 10*time.Millisecond {
		return fmt.Errorf("cpuprof: interval %v below 10ms", c.Interval)
	}
	if c.MaxStacks == 0 {
		c.MaxStacks = defaultMaxStacks
	}
	if c.MaxStacks < 16 || c.MaxStacks > 1<<22 {
		return fmt.Errorf("cpuprof: max stacks %d outside [16, %d]", c.MaxStacks, 1<<22)
	}
	if c.Mode > ModeDWARFOnly {
		return fmt.Errorf("cpuprof: unknown mode %d", c.Mode)
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.RankOf == nil {
		c.RankOf = func(int) (int, bool) { return 0, false }
	}
	return nil
}

// Stats are counters since New.
type Stats struct {
	Ticks             uint64 // timer ticks seen (before the ratio)
	Samples           uint64 // ticks that collected a stack
	Dropped           uint64 // samples lost: aggregation map full
	DroppedUserStacks uint64 // user stacks lost: stack map full (sample kept without it)
	KernelStackErrors uint64
	FPFrames          uint64
	DWARFFrames       uint64
	FallbackFrames    uint64 // complex CFI rows bridged by a validated FP step
	PythonFrames      uint64
	Truncated         uint64 // user stacks that did not reach their root
	MarkersFP         uint64 // markers set to fp
	MarkersDWARF      uint64 // markers set to dwarf
	BPFNanos          uint64 // time spent in the program on sampled ticks (ktime)
	Files             int    // ELF files seen
	FilesWithTable    int    // files whose unwind rows are loaded
	RowsLoaded        int
	RowsCapacity      int
	TablesSkipped     int // files whose rows did not fit or did not compile
	Procs             int // tracked processes (mapping tables in BPF)
	PyProcs           int // of them, CPython 3.11
	Windows           int // drains done
	MapBytes          uint64
}

// Profiler samples CPU stacks. Create with New, start with Run.
type Profiler struct {
	cfg  Config
	objs cpuprofObjects

	mu       sync.Mutex // guards stats, links
	links    []link.Link
	perfFDs  []int
	stats    Stats
	closed   bool
	gen      uint32
	base     [numStats]uint64 // BPF stats at the previous drain
	state    *tracker
	ksyms    *kallsyms
	winStart time.Time
	self     int         // the agent's pid
	selfExe  os.FileInfo // its executable (nil: unknown)
}

// Stats slots (bpf/cpuprof.c enum).
const (
	stTicks = iota
	stSamples
	stDropCount
	stDropUstack
	stKstackErr
	stFPFrames
	stDWARFFrames
	stFallbackFrames
	stTruncated
	stMarkFP
	stMarkDWARF
	stPyFrames
	stPyNoThread
	stNS
	numStats
)

// New loads the BPF program and its maps. It does not attach: Run does.
func New(cfg Config) (*Profiler, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	spec, err := loadCpuprof()
	if err != nil {
		return nil, fmt.Errorf("cpuprof: embedded object: %w", err)
	}
	n := uint32(cfg.MaxStacks)
	for _, name := range []string{"counts0", "counts1", "ustacks0", "ustacks1", "kstacks0", "kstacks1"} {
		spec.Maps[name].MaxEntries = n
	}
	spec.Maps["rows"].MaxEntries = rowCapacity
	p := &Profiler{cfg: cfg}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: verifier rejected the sampler: %w", ErrUnsupported, ve)
		}
		return nil, fmt.Errorf("%w: loading the sampler: %w", ErrUnsupported, err)
	}
	thr := uint32(math.MaxUint32)
	if cfg.Ratio < 1 {
		thr = uint32(cfg.Ratio * math.MaxUint32)
	}
	self := uint32(os.Getpid())
	if cfg.SampleSelf {
		self = 0 // pid 0 (idle) is skipped anyway
	}
	c := cpuprofConfig{Threshold: thr, Mode: uint32(cfg.Mode), SelfTgid: self}
	if err := p.objs.Cfg.Put(uint32(0), c); err != nil {
		p.objs.Close()
		return nil, fmt.Errorf("cpuprof: writing config: %w", err)
	}
	p.self = os.Getpid()
	if fi, err := os.Stat("/proc/self/exe"); err == nil {
		p.selfExe = fi
	}
	p.ksyms = loadKallsyms(cfg.Log)
	p.state = newTracker(p)
	return p, nil
}

// Run attaches the sampler to every online CPU and drains every Interval
// until ctx ends. It drains once more before returning.
func (p *Profiler) Run(ctx context.Context) error {
	// Load the tracked processes' tables before the first tick so their
	// first samples are unwound with them.
	p.state.scan(initialScanBudget)
	if err := p.attach(); err != nil {
		return err
	}
	defer p.detach()
	p.winStart = time.Now()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Detach first so the last drain sees every sample taken.
			p.detach()
			p.emit(p.drain(time.Now()))
			return nil
		case now := <-t.C:
			p.emit(p.drain(now))
			p.state.scan(min(scanBudget, p.cfg.Interval/2))
		}
	}
}

func (p *Profiler) emit(b *stack.Batch) {
	// An empty window is not shipped unless it lost samples.
	if b != nil && (len(b.Samples) > 0 || b.Dropped > 0) && p.cfg.Emit != nil {
		p.cfg.Emit(b)
	}
}

// Stats returns counters since New.
func (p *Profiler) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.refreshStatsLocked()
	}
	return p.stats
}

func (p *Profiler) refreshStatsLocked() {
	v := p.readBPFStats()
	s := &p.stats
	s.Ticks, s.Samples, s.Dropped, s.DroppedUserStacks = v[stTicks], v[stSamples], v[stDropCount], v[stDropUstack]
	s.KernelStackErrors, s.FPFrames, s.DWARFFrames = v[stKstackErr], v[stFPFrames], v[stDWARFFrames]
	s.FallbackFrames, s.Truncated, s.PythonFrames = v[stFallbackFrames], v[stTruncated], v[stPyFrames]
	s.MarkersFP, s.MarkersDWARF, s.BPFNanos = v[stMarkFP], v[stMarkDWARF], v[stNS]
	s.RowsCapacity = rowCapacity
	p.state.fillStats(s)
	s.MapBytes = p.mapBytes()
}

func (p *Profiler) readBPFStats() [numStats]uint64 {
	var out [numStats]uint64
	for i := range out {
		var per []uint64
		if err := p.objs.Stats.Lookup(uint32(i), &per); err != nil {
			continue
		}
		for _, x := range per {
			out[i] += x
		}
	}
	return out
}

// mapBytes sums the kernel's memory accounting of every map.
func (p *Profiler) mapBytes() uint64 {
	var total uint64
	for _, m := range []*ebpf.Map{p.objs.Cfg, p.objs.Stats, p.objs.Counts0, p.objs.Counts1, p.objs.Ustacks0,
		p.objs.Ustacks1, p.objs.Kstacks0, p.objs.Kstacks1, p.objs.Procs, p.objs.Files, p.objs.Rows,
		p.objs.Markers, p.objs.Pyprocs, p.objs.Pythreads, p.objs.Scratch} {
		if info, err := m.Info(); err == nil {
			if b, ok := info.Memlock(); ok {
				total += b
			}
		}
	}
	return total
}

// Close detaches and frees the maps.
func (p *Profiler) Close() error {
	p.detach()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.refreshStatsLocked()
	p.closed = true
	return p.objs.Close()
}
