// Command frames is the §5.2 frame-accuracy evaluation of SysOM-AI:
// the fraction of expected frames correctly named, for FP-only, hybrid
// and hybrid + central symbols, on a C program with a known call chain
// built -O2 -fomit-frame-pointer and on CPython.
//
// Capture paths (labelled in every result row):
//   - ptrace: the process is stopped at random instants and unwound by the
//     Go reference unwinder (internal/agent/cpuprof/ehframe), which runs
//     the same algorithms as the BPF unwinder; needs gcc and root.
//   - bpf: the always-on profiler (internal/agent/cpuprof) with
//     Config.Mode, samples filtered to the test process.
//
// Naming: "node" is node-side nearest-lower over the stripped binary's
// sparse .dynsym (§5.3's misattribution); "central" is the Build-ID
// symbol index built from the separate full-symbol debug file
// (internal/symbolize, size-checked lookups).
//
// Run from the repository root: go run ./eval/sysom/frames (README.md).
package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof"
	"github.com/laggard-dev/laggard/internal/agent/cpuprof/ehframe"
	"github.com/laggard-dev/laggard/internal/agent/cpuprof/ehframe/ptracesnap"
	"github.com/laggard-dev/laggard/internal/agent/procmaps"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/symbolize"
)

// chainOf: the known chain (leaf first) by leaf function, for chain.c and
// chain.py ("<module>" is CPython's top-level code object name).
var chainOf = map[string][]string{
	"d": {"d", "c", "b", "a"}, "c": {"c", "b", "a"}, "b": {"b", "a"}, "a": {"a"},
}

func expectedC(leaf string) []string {
	if leaf == "main" {
		return []string{"main"}
	}
	if ch, ok := chainOf[leaf]; ok {
		return append(append([]string{}, ch...), "main")
	}
	return nil
}

func expectedPy(leaf string) []string {
	if ch, ok := chainOf[leaf]; ok {
		return append(append([]string{}, ch...), "<module>")
	}
	return nil
}

type result struct {
	Program, Capture, Unwind, Naming string
	Samples, Expected, Correct       int
	Note                             string
}

func (r result) acc() float64 {
	if r.Expected == 0 {
		return 0
	}
	return float64(r.Correct) / float64(r.Expected)
}

func main() {
	var (
		samples  = flag.Int("samples", 200, "ptrace snapshots per program")
		out      = flag.String("out", "eval/sysom/results/frames.tsv", "result rows (TSV)")
		captures = flag.String("capture", "ptrace,bpf", "capture paths to run: ptrace, bpf")
		bpfSecs  = flag.Duration("bpf-duration", 8*time.Second, "BPF profiling time per mode")
		src      = flag.String("src", "internal/agent/cpuprof/ehframe/testdata/chain.c", "chain.c")
		pySrc    = flag.String("py", "eval/sysom/frames/chain.py", "chain.py")
		python   = flag.String("python", "/usr/bin/python3", "CPython interpreter")
		useGDB   = flag.Bool("gdb", true, "CPython ptrace path: score native frames against gdb's backtrace of the same stop")
	)
	flag.Parse()
	work, err := os.MkdirTemp("", "sysom-frames-")
	check(err)
	defer os.RemoveAll(work)

	var rows []result
	want := map[string]bool{}
	for _, c := range strings.Split(*captures, ",") {
		want[strings.TrimSpace(c)] = true
	}
	for _, v := range []struct{ name, def string }{{"c-omit-fp", ""}, {"c-mixed-fp", "-DFP_MIXED"}} {
		prog, err := buildChain(work, *src, v.name, v.def)
		check(err)
		if want["ptrace"] {
			rs, err := ptraceC(prog, *samples)
			rows = append(rows, orSkip(rs, err, v.name, "ptrace")...)
		}
		if want["bpf"] {
			rs, err := bpfRun(prog.bin, nil, *bpfSecs, func(b []*stack.Batch, pid int, mode string) []result {
				return scoreBPFC(prog, b, pid, mode)
			})
			rows = append(rows, orSkip(rs, err, v.name, "bpf")...)
		}
	}
	if want["ptrace"] {
		rs, err := ptracePy(*python, *pySrc, *samples/4, *useGDB)
		rows = append(rows, orSkip(rs, err, "cpython", "ptrace")...)
	}
	if want["bpf"] {
		rs, err := bpfRun(*python, []string{*pySrc}, *bpfSecs, scoreBPFPy)
		rows = append(rows, orSkip(rs, err, "cpython", "bpf")...)
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# SysOM-AI §5.2 frame accuracy; generated %s by go run ./eval/sysom/frames\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintln(&buf, "program\tcapture\tunwind\tnaming\tsamples\texpected_frames\tcorrect_frames\taccuracy\tnote")
	for _, r := range rows {
		fmt.Fprintf(&buf, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%.3f\t%s\n", r.Program, r.Capture, r.Unwind, r.Naming, r.Samples, r.Expected, r.Correct, r.acc(), r.Note)
	}
	os.Stdout.Write(buf.Bytes())
	check(os.MkdirAll(filepath.Dir(*out), 0o755))
	check(os.WriteFile(*out, buf.Bytes(), 0o644))
}

func orSkip(rs []result, err error, prog, capture string) []result {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s/%s: %v\n", prog, capture, err)
		return []result{{Program: prog, Capture: capture, Unwind: "-", Naming: "-", Note: "not run: " + oneLine(err.Error())}}
	}
	return rs
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "frames:", err)
		os.Exit(1)
	}
}

// chainProg is a built chain variant: the stripped binary that runs (sparse
// .dynsym + .gnu_debuglink), the central index from its debug file, and
// the node-side sparse table.
type chainProg struct {
	name, bin string
	central   *symbolize.Index
	node      nearest
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func buildChain(work, src, name, def string) (*chainProg, error) {
	src, _ = filepath.Abs(src)
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "dyn.list"), []byte("{ chain_memcpy; c; a; main; };\n"), 0o644); err != nil {
		return nil, err
	}
	args := []string{"-O2", "-g", "-fomit-frame-pointer", "-fno-toplevel-reorder", "-fno-reorder-functions",
		"-Wl,--build-id", "-Wl,--dynamic-list=dyn.list", "-o", "full", src}
	if def != "" {
		args = append([]string{def}, args...)
	}
	for _, step := range [][]string{
		append([]string{"gcc"}, args...),
		{"objcopy", "--only-keep-debug", "full", name + ".debug"},
		{"objcopy", "--strip-all", "--add-gnu-debuglink=" + name + ".debug", "full", name},
	} {
		if err := run(dir, step[0], step[1:]...); err != nil {
			return nil, err
		}
	}
	p := &chainProg{name: name, bin: filepath.Join(dir, name)}
	var idx bytes.Buffer
	if err := symbolize.BuildIndex(filepath.Join(dir, name+".debug"), &idx); err != nil {
		return nil, fmt.Errorf("central index: %w", err)
	}
	ix, err := symbolize.OpenIndex(bytes.NewReader(idx.Bytes()), int64(idx.Len()))
	if err != nil {
		return nil, err
	}
	p.central = ix
	if p.node, err = dynsymNearest(p.bin); err != nil {
		return nil, err
	}
	return p, nil
}

// nearest is node-side naming: the nearest lower exported function,
// whatever its size (§5.3).
type nearest []elf.Symbol

func dynsymNearest(path string) (nearest, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, err
	}
	var n nearest
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			n = append(n, s)
		}
	}
	sort.Slice(n, func(i, j int) bool { return n[i].Value < n[j].Value })
	return n, nil
}

func (n nearest) name(vaddr uint64) string {
	i := sort.Search(len(n), func(i int) bool { return n[i].Value > vaddr })
	if i == 0 {
		return ""
	}
	return n[i-1].Name
}

func (p *chainProg) centralName(vaddr uint64) string {
	name, _ := p.central.Lookup(vaddr)
	return name
}

func startProc(bin string, args ...string) (*exec.Cmd, int, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, 0, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 2 || f[0] != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, 0, fmt.Errorf("%s: no ready line (%q, %v)", bin, line, err)
	}
	return cmd, cmd.Process.Pid, nil
}

func stopProc(cmd *exec.Cmd) { cmd.Process.Kill(); cmd.Wait() }

// ptraceModes are the unwinders the ptrace path compares.
var ptraceModes = []struct {
	name string
	mode ehframe.Mode
}{
	{"fp-only", ehframe.ModeFPOnly},
	{"hybrid-paper", ehframe.ModeHybridPaper},
	{"hybrid", ehframe.ModeHybrid},
	{"dwarf-only", ehframe.ModeDWARFOnly},
}

// frameRef is one unwound frame: whether it lies in the chain binary and
// its lookup address there (leaf pc, caller return address − 1) as an ELF
// virtual address.
type frameRef struct {
	in    bool
	vaddr uint64
	pc    uint64 // raw runtime pc (return address for callers)
}

func refs(space ehframe.Space, frames []ehframe.Frame, bin string, exe *ehframe.Module) []frameRef {
	out := make([]frameRef, len(frames))
	for i, f := range frames {
		look := f.PC
		if i > 0 {
			look--
		}
		m, ok := space.Module(look)
		out[i] = frameRef{pc: f.PC}
		if ok && m == exe {
			out[i].in, out[i].vaddr = true, look-m.Bias
		}
	}
	return out
}

func ptraceC(p *chainProg, n int) ([]result, error) {
	cmd, pid, err := startProc(p.bin)
	if err != nil {
		return nil, err
	}
	defer stopProc(cmd)
	mem, err := ptracesnap.Mem(pid)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	tables := ehframe.NewTables()
	markers := make([]*ehframe.Markers, len(ptraceModes)) // per mode, kept across samples as in production
	for i := range markers {
		markers[i] = ehframe.NewMarkers()
	}
	res := map[string]*result{}
	get := func(unwind, naming string) *result {
		k := unwind + "/" + naming
		if res[k] == nil {
			res[k] = &result{Program: p.name, Capture: "ptrace", Unwind: unwind, Naming: naming}
		}
		return res[k]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	kept := 0
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(2+rng.IntN(20)) * time.Millisecond)
		regs, err := ptracesnap.Stop(pid)
		if err != nil {
			return nil, err
		}
		maps, err := procmaps.Read(pid)
		if err != nil {
			ptracesnap.Resume(pid)
			return nil, err
		}
		space := tables.Space(maps, mem, "")
		exe, ok := space.Module(regs.PC)
		var want []string
		if ok {
			want = expectedC(p.centralName(regs.PC - exe.Bias))
		}
		if want != nil {
			kept++
			for mi, m := range ptraceModes {
				frames, _ := ehframe.UnwindHybrid(space, regs, m.mode, markers[mi], 64)
				fr := refs(space, frames, p.bin, exe)
				for _, naming := range []string{"node", "central"} {
					r := get(m.name, naming)
					r.Samples++
					r.Expected += len(want)
					for k, w := range want {
						if k < len(fr) && fr[k].in {
							name := p.node.name(fr[k].vaddr)
							if naming == "central" {
								name = p.centralName(fr[k].vaddr)
							}
							if name == w {
								r.Correct++
							}
						}
					}
				}
			}
		}
		if err := ptracesnap.Resume(pid); err != nil {
			return nil, err
		}
	}
	if kept == 0 {
		return nil, errors.New("no snapshot landed in the chain")
	}
	var out []result
	for _, m := range ptraceModes {
		for _, naming := range []string{"node", "central"} {
			out = append(out, *get(m.name, naming))
		}
	}
	return out, nil
}

// ptracePy: native frames of the CPython interpreter, FP-only vs hybrid vs
// DWARF-only, scored by address against gdb's backtrace of the same stop
// (gdb unwinds with the full CFI and is independent of this code).
// Names are not scored: Debian's python3.11 ships only .dynsym and no
// debug file is installed, so node and central naming coincide.
func ptracePy(python, script string, n int, useGDB bool) ([]result, error) {
	if !useGDB {
		return nil, errors.New("CPython ptrace path needs gdb as the oracle (-gdb)")
	}
	if _, err := exec.LookPath("gdb"); err != nil {
		return nil, errors.New("gdb not installed (the oracle of the CPython native frames)")
	}
	cmd, pid, err := startProc(python, script)
	if err != nil {
		return nil, err
	}
	defer stopProc(cmd)
	mem, err := ptracesnap.Mem(pid)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	tables := ehframe.NewTables()
	markers := make([]*ehframe.Markers, len(ptraceModes))
	for i := range markers {
		markers[i] = ehframe.NewMarkers()
	}
	res := make([]result, len(ptraceModes))
	for i, m := range ptraceModes {
		res[i] = result{Program: "cpython", Capture: "ptrace", Unwind: m.name, Naming: "address",
			Note: "native interpreter frames vs gdb bt of the same stop; names not scored (no python3.11 debug file)"}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		regs, err := ptracesnap.Stop(pid)
		if err != nil {
			return nil, err
		}
		maps, err := procmaps.Read(pid)
		if err != nil {
			ptracesnap.Resume(pid)
			return nil, err
		}
		space := tables.Space(maps, mem, "")
		truth, err := gdbPCs(pid)
		if err != nil {
			ptracesnap.Resume(pid)
			return nil, err
		}
		if len(truth) == 0 || truth[0] != regs.PC {
			ptracesnap.Resume(pid)
			return nil, fmt.Errorf("gdb saw pc %#x, ptrace %#x: not the same stop", first(truth), regs.PC)
		}
		for mi, m := range ptraceModes {
			frames, _ := ehframe.UnwindHybrid(space, regs, m.mode, markers[mi], 128)
			res[mi].Samples++
			res[mi].Expected += len(truth)
			for k, pc := range truth {
				if k < len(frames) && frames[k].PC == pc {
					res[mi].Correct++
				}
			}
		}
		if err := ptracesnap.Resume(pid); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func first(s []uint64) uint64 {
	if len(s) == 0 {
		return 0
	}
	return s[0]
}

var gdbValue = regexp.MustCompile(`^\$\d+ = (0x[0-9a-f]+)`)

// gdbPCs runs gdb on the stopped process: each frame's pc (the return
// address for callers, as gdb reports it), leaf first.
func gdbPCs(pid int) ([]uint64, error) {
	cmd := exec.Command("gdb", "-nx", "-batch", "-p", strconv.Itoa(pid),
		"-ex", "set pagination off", "-ex", "frame apply all -q p/x $pc")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("gdb: %v\n%s", err, out)
	}
	var pcs []uint64
	for _, line := range strings.Split(string(out), "\n") {
		if m := gdbValue.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			v, _ := strconv.ParseUint(m[1][2:], 16, 64)
			pcs = append(pcs, v)
		}
	}
	return pcs, nil
}

// bpfModes are the profiler's modes (contracts §1a).
var bpfModes = []struct {
	name string
	mode cpuprof.Mode
}{
	{"fp-only", cpuprof.ModeFPOnly},
	{"hybrid", cpuprof.ModeHybrid},
	{"dwarf-only", cpuprof.ModeDWARFOnly},
}

// bpfRun profiles a fresh process per mode with the BPF profiler and
// scores the batches with score.
func bpfRun(bin string, args []string, d time.Duration, score func([]*stack.Batch, int, string) []result) ([]result, error) {
	var out []result
	for _, m := range bpfModes {
		cmd, pid, err := startProc(bin, args...)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "bpf: %s pid %d mode %s for %v\n", filepath.Base(bin), pid, m.name, d)
		var batches []*stack.Batch
		p, err := cpuprof.New(cpuprof.Config{Hz: 499, Ratio: 1, Interval: time.Second, Mode: m.mode, AllProcesses: true,
			Emit: func(b *stack.Batch) { batches = append(batches, b) }})
		if err != nil {
			stopProc(cmd)
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err = p.Run(ctx)
		cancel()
		st := p.Stats()
		p.Close()
		fmt.Fprintf(os.Stderr, "bpf: done: %d batches, stats %+v\n", len(batches), st)
		stopProc(cmd)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			return nil, err
		}
		out = append(out, score(batches, pid, m.name)...)
	}
	return out, nil
}

func scoreBPFC(p *chainProg, batches []*stack.Batch, pid int, mode string) []result {
	rs := []result{
		{Program: p.name, Capture: "bpf", Unwind: mode, Naming: "node"},
		{Program: p.name, Capture: "bpf", Unwind: mode, Naming: "central"},
	}
	for _, b := range batches {
		for _, s := range b.Samples {
			if s.PID != pid || s.Foreign {
				continue
			}
			var fr []frameRef
			for _, f := range s.Frames {
				if f.Kind == stack.Kernel {
					continue
				}
				in := f.Kind == stack.Native && f.Mapping >= 0 && int(f.Mapping) < len(b.Mappings) &&
					b.Mappings[f.Mapping].Path == p.bin
				fr = append(fr, frameRef{in: in, vaddr: f.Addr})
			}
			if len(fr) == 0 || !fr[0].in {
				continue
			}
			want := expectedC(p.centralName(fr[0].vaddr))
			if want == nil {
				continue
			}
			for i := range rs {
				rs[i].Samples += int(s.Count)
				rs[i].Expected += len(want) * int(s.Count)
				for k, w := range want {
					if k < len(fr) && fr[k].in {
						name := p.node.name(fr[k].vaddr)
						if rs[i].Naming == "central" {
							name = p.centralName(fr[k].vaddr)
						}
						if name == w {
							rs[i].Correct += int(s.Count)
						}
					}
				}
			}
		}
	}
	return rs
}

// scoreBPFPy scores the Python frames the agent names (Kind Python,
// stitched at the native stack pointer) against chain.py's chain.
func scoreBPFPy(batches []*stack.Batch, pid int, mode string) []result {
	r := result{Program: "cpython", Capture: "bpf", Unwind: mode, Naming: "agent-python",
		Note: "Python frames (co_qualname) against <module>→a→b→c→d"}
	noPy := 0
	for _, b := range batches {
		for _, s := range b.Samples {
			if s.PID != pid || s.Foreign {
				continue
			}
			var py []string
			for _, f := range s.Frames {
				if f.Kind == stack.Python {
					py = append(py, f.Func)
				}
			}
			// The leaf Python frame decides the expectation; samples taken
			// outside chain.py's functions (interpreter start-up) are skipped.
			if len(py) == 0 { // the Python walk failed: a full-depth miss
				noPy += int(s.Count)
				r.Samples += int(s.Count)
				r.Expected += len(expectedPy("d")) * int(s.Count)
				continue
			}
			want := expectedPy(py[0])
			if want == nil {
				continue
			}
			r.Samples += int(s.Count)
			r.Expected += len(want) * int(s.Count)
			for k, w := range want {
				if k < len(py) && py[k] == w {
					r.Correct += int(s.Count)
				}
			}
		}
	}
	r.Note += fmt.Sprintf("; %d samples without Python frames counted as misses", noPy)
	return []result{r}
}
