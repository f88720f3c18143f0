package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/laggard-dev/laggard/internal/agent"
	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	aosstat "github.com/laggard-dev/laggard/internal/agent/osstat"
	"github.com/laggard-dev/laggard/internal/agent/register"
	"github.com/laggard-dev/laggard/internal/analysis"
)

// SysOM-AI act defaults. The profiler samples every tick here so a
// ~35 s window holds enough stacks to diagnose; production samples 10%
// of them (SysOM-AI §5.1).
const (
	SysomHz        = 99
	SysomRatio     = 1.0
	SysomProdRatio = 0.1
	sysomWarmup    = 10
	sysomHogProcs  = 2  // per rank sharing each other core (HogProcs)
	sysomDeviceMS  = 30 // a GPU stand-in: ranks sleep, so they are not CPU-bound and the hog shows
	sysomLogEvery  = 10
)

// SysomOptions configures the SysOM-AI act: a second short DDP job with
// the node agent profiling it, and a CPU hog on the hidden rank's core.
type SysomOptions struct {
	ServerURL string
	Python    string // "" → FindPython
	Files     fs.FS  // the embedded Python client and examples
	World     int
	Rank      int // the hidden rank: pinned alone on the last core, then hogged
	Seed      int64
	JobID     string
	// Hz and Ratio are the profiler's (default SysomHz, SysomRatio).
	Hz    int
	Ratio float64
	// HogFrom is the first hogged step (default 10 warm-up + 350: about
	// 30 s at this machine's ~85 ms steps); Hog how long the hog runs
	// before the report is fetched (default 35 s). The baseline is the
	// equally long stretch before the hog (after the warm-up).
	HogFrom int
	Hog     time.Duration
	// StartTimeout bounds the wait for the hog to start (default 180 s).
	StartTimeout time.Duration
	Stderr       io.Writer
	Log          *slog.Logger // the agent's; nil discards
	// Probe says whether the eBPF profiler can run here (nil:
	// ProbeProfiler); tests inject a refusal.
	Probe func() error
	// CPUs the act may pin to (nil: this process's affinity).
	CPUs []int
}

// SysomResult is the act's outcome (`laggard demo --json` "sysom").
type SysomResult struct {
	// Skipped says why the act did not run (the profiler cannot run
	// here); the other fields are then empty.
	Skipped string `json:"skipped,omitempty"`
	// Err says why the act failed (`laggard demo -sysom auto` goes on).
	Err    string  `json:"error,omitempty"`
	Job    string  `json:"job,omitempty"`
	Rank   int     `json:"rank"`
	PinMap string  `json:"pin_map,omitempty"`
	Hz     int     `json:"hz,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"`
	// HogProcs busy processes pinned to the hidden rank's core.
	HogProcs int `json:"hog_procs,omitempty"`
	// The hog window and its baseline (Unix ns) asked of the server.
	FromNS     int64                 `json:"from_ns,omitempty"`
	ToNS       int64                 `json:"to_ns,omitempty"`
	BaseFromNS int64                 `json:"base_from_ns,omitempty"`
	BaseToNS   int64                 `json:"base_to_ns,omitempty"`
	Seconds    float64               `json:"seconds,omitempty"`
	Report     *analysis.SysomReport `json:"report,omitempty"`
	Verdict    *SysomVerdict         `json:"verdict,omitempty"`
}

// ErrSysomSkipped wraps the reason the act cannot run here.
var ErrSysomSkipped = errors.New("SysOM-AI act skipped")

// ProbeProfiler loads the eBPF sampler and opens one system-wide
// cpu-clock perf event — what the agent's profiler needs — and releases
// both. Its error says why the profiler cannot run.
func ProbeProfiler() error {
	p, err := cpuprof.New(cpuprof.Config{Hz: SysomHz, Ratio: SysomRatio})
	if err != nil {
		return err
	}
	p.Close()
	// cpuprof.New only loads the program; Run attaches one perf event
	// per CPU, which perf_event_paranoid or a missing CAP_PERFMON refuses.
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Sample: SysomHz, Bits: unix.PerfBitFreq | unix.PerfBitDisabled}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open(cpu-clock, all processes, cpu 0): %w", err)
	}
	unix.Close(fd)
	return nil
}

// SkipReason turns a probe error into one line: why the act cannot run.
// cpuprof wraps the kernel's errno as text, so a refusal is read from the
// message too.
func SkipReason(err error) string {
	msg := err.Error()
	perm := errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) ||
		strings.Contains(msg, "operation not permitted") || strings.Contains(msg, "permission denied")
	switch {
	case perm && os.Geteuid() != 0:
		return fmt.Sprintf("the eBPF profiler needs root with CAP_BPF and CAP_PERFMON; this is uid %d (%v)", os.Geteuid(), err)
	case perm:
		return fmt.Sprintf("the eBPF profiler is not permitted: this process lacks CAP_BPF/CAP_PERFMON (%v)", err)
	case errors.Is(err, cpuprof.ErrUnsupported):
		return fmt.Sprintf("the kernel refuses the eBPF profiler (%v)", err)
	}
	return fmt.Sprintf("the eBPF profiler cannot start (%v)", err)
}

// HogProcs is how many busy processes the hog needs so the hidden rank,
// alone on its core, gets a smaller CPU share than the ranks sharing the
// other cores: 2 per rank on the most crowded other core (2 when every
// rank has a core of its own; 6 for 4 ranks on 2 CPUs, where 3 ranks
// share one core and a 2-process hog would leave rank 2 no slower).
func HogProcs(world int, cpus []int) int {
	n := len(slices.Compact(slices.Sorted(slices.Values(cpus)))) - 1
	if n < 1 {
		return sysomHogProcs
	}
	return sysomHogProcs * ((world - 1 + n - 1) / n)
}

// PinMap puts rank alone on the last CPU and the other ranks round-robin
// on the rest (ddp_demo.py --pin-map "r:cpu,…"), so a hog on that CPU
// slows only the hidden rank. It needs two CPUs.
func PinMap(world, rank int, cpus []int) (string, error) {
	cpus = slices.Sorted(slices.Values(cpus))
	cpus = slices.Compact(cpus)
	if len(cpus) < 2 {
		return "", fmt.Errorf("%w: needs at least 2 CPUs to give the hidden rank a core of its own (this process may use %d)", ErrSysomSkipped, len(cpus))
	}
	last, rest := cpus[len(cpus)-1], cpus[:len(cpus)-1]
	parts := make([]string, 0, world)
	i := 0
	for r := range world {
		c := last
		if r != rank {
			c = rest[i%len(rest)]
			i++
		}
		parts = append(parts, fmt.Sprintf("%d:%d", r, c))
	}
	return strings.Join(parts, ","), nil
}

func affinity() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// progressRE reads the trainer's "[demo] phase 0 none@… step N …" lines:
// step N means N steps are done, so the hog (from step S) starts right
// after the line with N = S.
var progressRE = regexp.MustCompile(`\[demo\] phase \d+ \S+ step (\d+) `)

// RunSysom runs the SysOM-AI act. A probe refusal or too few CPUs is not
// an error: the result says why it was skipped.
func RunSysom(ctx context.Context, o SysomOptions) (*SysomResult, error) {
	if o.Hz == 0 {
		o.Hz = SysomHz
	}
	if o.Ratio == 0 {
		o.Ratio = SysomRatio
	}
	if o.HogFrom == 0 {
		o.HogFrom = sysomWarmup + 350
	}
	if o.Hog == 0 {
		o.Hog = 35 * time.Second
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 180 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	probe := o.Probe
	if probe == nil {
		probe = ProbeProfiler
	}
	res := &SysomResult{Rank: o.Rank, Job: o.JobID, Hz: o.Hz, Ratio: o.Ratio}
	if err := probe(); err != nil {
		return &SysomResult{Rank: o.Rank, Skipped: SkipReason(err)}, nil
	}
	cpus := o.CPUs
	if cpus == nil {
		cpus = affinity()
	}
	pin, err := PinMap(o.World, o.Rank, cpus)
	if err != nil {
		return &SysomResult{Rank: o.Rank, Skipped: strings.TrimPrefix(err.Error(), ErrSysomSkipped.Error()+": ")}, nil
	}
	res.PinMap = pin
	res.HogProcs = HogProcs(o.World, cpus)
	fmt.Fprintf(o.Stderr, "\nlaggard demo: SysOM-AI act: a node agent profiles a second %d-rank job (pin map %s); a CPU hog joins rank %d's core later (~90 s)\n",
		o.World, pin, o.Rank)
	py, err := FindPython(ctx, o.Python)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "laggard-demo-sysom-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(filepath.Join(dir, "py"), o.Files); err != nil {
		return nil, fmt.Errorf("unpacking the Python client: %w", err)
	}
	shm := filepath.Join(dir, "shm") // no NCCL rings here: keep the agent off /dev/shm
	if err := os.Mkdir(shm, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "agent.sock")
	start := time.Now()

	// The node agent, as `laggard agent` runs it, against the demo's server.
	ag, err := agent.New(agent.Config{Server: o.ServerURL, ShmDir: shm, Interval: time.Second, ValidationInterval: -1,
		Log: o.Log, Socket: sock, ProfileOn: true, OSOn: true,
		Profile: cpuprof.Config{Hz: o.Hz, Ratio: o.Ratio, Interval: 2 * time.Second},
		OS:      aosstat.Config{SchedTracepoints: true, Interval: 2 * time.Second}})
	if err != nil {
		return nil, err
	}
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = ag.Run(actx) }()
	defer func() { stopAgent(); <-agentDone }()
	if err := waitSocket(ctx, sock, 10*time.Second); err != nil {
		return nil, err
	}

	pydir := filepath.Join(dir, "py")
	args := []string{filepath.Join(pydir, "examples", "ddp_demo.py"),
		"--server", o.ServerURL, "--job", o.JobID, "--world", fmt.Sprint(o.World),
		"--steps", "1000000", "--warmup", fmt.Sprint(sysomWarmup), "--fault", "none", "--fault-rank", fmt.Sprint(o.Rank),
		"--seed", fmt.Sprint(o.Seed), "--collectives", "on", "--validation", "off",
		"--device-ms", fmt.Sprint(sysomDeviceMS), "--pin-map", pin,
		"--hog-rank", fmt.Sprint(o.Rank), "--hog-from", fmt.Sprint(o.HogFrom), "--hog-procs", fmt.Sprint(res.HogProcs),
		"--log-every", fmt.Sprint(sysomLogEvery)}
	tctx, stopTrainer := context.WithCancel(ctx)
	defer stopTrainer()
	cmd := exec.CommandContext(tctx, py, args...)
	cmd.Dir = pydir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pydir, "PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1", register.EnvVar+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The whole group: DDP workers and the hog's busy processes.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stdout = io.Discard // phase lines: this act reads no StageFrontier window
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", py, err)
	}
	type mark struct {
		step int
		at   time.Time
	}
	marks := make(chan mark, 64)
	var tail tailLines
	var stopping atomic.Bool // after our SIGTERM the trainer's "failed: 143" is ours
	go func() {
		defer close(marks)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if m := progressRE.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				select {
				case marks <- mark{n, time.Now()}:
				default:
				}
				if n%100 != 0 {
					continue // every 10th step is for timing, not for people
				}
			}
			tail.add(line)
			if !stopping.Load() {
				fmt.Fprintf(o.Stderr, "  sysom trainer │ %s\n", line)
			}
		}
	}()
	exited := make(chan error, 1)
	// waitOnce waits for the reader (Wait closes the pipe) and the trainer;
	// a group still holding the pipe 15 s after SIGTERM gets SIGKILL.
	waitOnce := sync.OnceFunc(func() {
		kill := time.AfterFunc(15*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		for range marks {
		}
		kill.Stop()
		exited <- cmd.Wait()
	})
	fail := func(err error) (*SysomResult, error) {
		stopTrainer()
		go waitOnce()
		<-exited
		return nil, fmt.Errorf("%w (trainer: %s)", err, tail.last())
	}

	// Wait for the hog: baseline from the first step after the warm-up to
	// the hog's first step.
	var warmEnd, hogStart time.Time
	deadline := time.After(o.StartTimeout)
	for hogStart.IsZero() {
		select {
		case m, ok := <-marks:
			if !ok {
				return fail(errors.New("the SysOM-AI trainer stopped before the hog started"))
			}
			if warmEnd.IsZero() && m.step >= sysomWarmup {
				warmEnd = m.at
			}
			if m.step >= o.HogFrom {
				hogStart = m.at
			}
		case <-deadline:
			return fail(fmt.Errorf("the SysOM-AI trainer did not reach step %d in %s", o.HogFrom, o.StartTimeout))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	fmt.Fprintf(o.Stderr, "laggard demo: SysOM-AI: CPU hog (%d busy processes) on rank %d's core from step %d; profiling for %s …\n",
		res.HogProcs, o.Rank, o.HogFrom, o.Hog)
	hogEnd := time.After(o.Hog)
waitHog:
	for {
		select {
		case _, ok := <-marks:
			if !ok {
				return fail(errors.New("the SysOM-AI trainer stopped while the hog ran"))
			}
		case <-hogEnd:
			break waitHog
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	to := time.Now()
	// Let the last collective calls (shipped every 0.5 s) arrive, then
	// stop the trainer and the agent; the agent drains and ships its
	// last stacks as it stops.
	time.Sleep(2 * time.Second)
	stopping.Store(true)
	stopTrainer()
	go waitOnce()
	<-exited
	stopAgent()
	<-agentDone

	d := to.Sub(hogStart)
	base := hogStart.Add(-d)
	if base.Before(warmEnd) {
		base = warmEnd
	}
	res.FromNS, res.ToNS = hogStart.UnixNano(), to.UnixNano()
	res.BaseFromNS, res.BaseToNS = base.UnixNano(), hogStart.UnixNano()
	fctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	rep, err := FetchSysom(fctx, o.ServerURL, o.JobID, res.FromNS, res.ToNS, res.BaseFromNS, res.BaseToNS)
	if err != nil {
		return nil, err
	}
	res.Report = rep
	res.Verdict = JudgeSysom(rep, o.Rank)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// FetchSysom asks the server for the job's SysOM-AI report over
// [from, to) against the baseline [baseFrom, baseTo).
func FetchSysom(ctx context.Context, base, job string, from, to, baseFrom, baseTo int64) (*analysis.SysomReport, error) {
	return getJSON[analysis.SysomReport](ctx, fmt.Sprintf("%s/api/v1/jobs/%s/sysom?from_ns=%d&to_ns=%d&base_from_ns=%d&base_to_ns=%d",
		base, job, from, to, baseFrom, baseTo), "the SysOM-AI report")
}

// waitSocket waits for the agent's registration socket: a trainer that
// starts first would announce to nobody.
func waitSocket(ctx context.Context, path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the node agent's registration socket %s did not appear in %s", path, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// tailLines keeps the trainer's last lines for error messages.
type tailLines struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailLines) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > 5 {
		t.lines = t.lines[1:]
	}
}

func (t *tailLines) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "no output"
	}
	return strings.Join(t.lines, " | ")
}
