//go:build linux && amd64

// Package ptracesnap stops a process and takes the register snapshot the
// reference unwinder starts from: the ground-truth capture path of the
// unwinding tests and of the §5.2 frame-accuracy evaluation (SysOM-AI),
// independent of the BPF profiler.
package ptracesnap

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof/ehframe"
)

// ErrNotPermitted: ptrace was refused (no CAP_SYS_PTRACE, Yama scope, …).
var ErrNotPermitted = errors.New("ptrace not permitted")

// Stop attaches to pid, reads the registers of its main thread and
// detaches leaving it in group-stop (SIGSTOP), so /proc/<pid>/mem stays
// consistent with the registers until Resume.
func Stop(pid int) (ehframe.Regs, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		if errors.Is(err, unix.EPERM) {
			return ehframe.Regs{}, fmt.Errorf("%w: PTRACE_ATTACH %d: %v", ErrNotPermitted, pid, err)
		}
		return ehframe.Regs{}, fmt.Errorf("PTRACE_ATTACH %d: %w", pid, err)
	}
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return ehframe.Regs{}, fmt.Errorf("wait4 %d: %w", pid, err)
		}
		if ws.Stopped() {
			break
		}
		if ws.Exited() || ws.Signaled() {
			return ehframe.Regs{}, fmt.Errorf("pid %d exited", pid)
		}
	}
	var r unix.PtraceRegs
	err := unix.PtraceGetRegs(pid, &r)
	// Detach delivering SIGSTOP: the process stays stopped for the reads.
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(pid), 0, uintptr(syscall.SIGSTOP), 0, 0); e != 0 && err == nil {
		err = e
	}
	if err != nil {
		return ehframe.Regs{}, fmt.Errorf("PTRACE_GETREGS %d: %w", pid, err)
	}
	return ehframe.Regs{PC: r.Rip, SP: r.Rsp, BP: r.Rbp}, nil
}

// Resume continues a process Stop left stopped.
func Resume(pid int) error { return unix.Kill(pid, unix.SIGCONT) }

// Mem opens /proc/<pid>/mem for ReadAt.
func Mem(pid int) (*os.File, error) { return os.Open(fmt.Sprintf("/proc/%d/mem", pid)) }
