// Package cpuprof is the node agent's always-on CPU stack sampler
// (SysOM-AI §3.3, §4): a perf_event BPF program on a software cpu-clock
// timer per online CPU samples every process at Hz with a sampling ratio,
// takes the kernel stack with the kernel's own unwinder and unwinds the
// user stack in BPF with the paper's adaptive hybrid FP/DWARF method
// (Algorithm 1), collects CPython 3.11 frames from the thread's
// PyThreadState, and aggregates in-kernel into one of two map generations
// that the agent swaps and drains every Interval.
//
// User space keeps the samples of registered ranks, plus Foreign samples:
// other processes sampled on a CPU where a rank's thread ran in the same
// window (the interference a rank's own stacks cannot show). It names
// kernel frames from /proc/kallsyms and Python frames from the code
// objects, and ships native frames raw: an ELF virtual address in a
// Build-ID'd mapping, named centrally (§3.4).
//
// The BPF object is generated with bpf2go and committed, so builds need no
// clang. After editing bpf/cpuprof.c regenerate it (clang ≥ 14 and the
// libbpf headers in /usr/include/bpf are needed) with
//
//	go generate ./internal/agent/cpuprof/
//
// x86-64 only: the register layouts, the unwind rows and the CPython
// offsets are those of x86-64 Linux.
package cpuprof
