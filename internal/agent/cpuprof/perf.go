package cpuprof

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// attach opens a software cpu-clock event per online CPU (§4: a timer,
// not a hardware counter, so it works in VMs) and links the program.
func (p *Profiler) attach() error {
	cpus, err := onlineCPUs()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("cpuprof: closed")
	}
	for _, cpu := range cpus {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			// cpu-clock counts nanoseconds: a period of 1e9/Hz fires at Hz.
			Sample: uint64(1e9 / p.cfg.Hz),
			Bits:   unix.PerfBitDisabled,
		}
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			p.detachLocked()
			return fmt.Errorf("%w: perf_event_open(cpu-clock, cpu %d): %w", ErrUnsupported, cpu, err)
		}
		p.perfFDs = append(p.perfFDs, fd)
		l, err := link.AttachRawLink(link.RawLinkOptions{Target: fd, Program: p.objs.Sample, Attach: ebpf.AttachPerfEvent})
		if err != nil {
			p.detachLocked()
			return fmt.Errorf("%w: attaching to cpu %d: %w", ErrUnsupported, cpu, err)
		}
		p.links = append(p.links, l)
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			p.detachLocked()
			return fmt.Errorf("%w: enabling the event on cpu %d: %w", ErrUnsupported, cpu, err)
		}
	}
	return nil
}

func (p *Profiler) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.detachLocked()
}

func (p *Profiler) detachLocked() {
	for _, l := range p.links {
		l.Close()
	}
	p.links = nil
	for _, fd := range p.perfFDs {
		unix.Close(fd)
	}
	p.perfFDs = nil
}

// onlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, err
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

func parseCPUList(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("cpu list %q: bad cpu %q", s, lo)
		}
		b := a
		if found {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("cpu list %q: bad range %q", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("cpu list %q: empty", s)
	}
	return out, nil
}
