package cpuprof

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/agent/procmaps"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

const kallsymsSample = `0000000000000000 A fixed_percpu_data
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 T entry_SYSCALL_64
ffffffffc0000000 t nft_do_chain	[nf_tables]
`

func TestKallsyms(t *testing.T) {
	k, err := parseKallsyms(strings.NewReader(kallsymsSample))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr uint64
		want string
	}{
		{0xffffffff80ffffff, unknownKernel},
		{0xffffffff81000000, "startup_64"}, // aliases: either name is right; the sort keeps input order
		{0xffffffff81001010, "do_one_initcall"},
		{0xffffffff81002010, "do_one_initcall"}, // data symbols are skipped
		{0xffffffff81003005, "entry_SYSCALL_64"},
		{0xffffffffc0000040, "nft_do_chain [nf_tables]"},
	} {
		got := k.name(tc.addr)
		if tc.addr == 0xffffffff81000000 && got == "_stext" {
			got = "startup_64"
		}
		if got != tc.want {
			t.Errorf("%#x: %q, want %q", tc.addr, got, tc.want)
		}
	}
	hidden, err := parseKallsyms(strings.NewReader("0000000000000000 T a\n0000000000000000 t b\n"))
	if err != nil || !hidden.hidden || hidden.name(0xffffffff81000000) != unknownKernel {
		t.Errorf("zeroed kallsyms: %+v %v", hidden, err)
	}
}

func FuzzParseKallsyms(f *testing.F) {
	f.Add(kallsymsSample)
	f.Add("ffff T\n")
	f.Add("zz T x\n")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseKallsyms(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, a := range []uint64{0, 1, 0xffffffff81000000, ^uint64(0)} {
			_ = k.name(a)
		}
		if !slices.IsSorted(k.addrs) {
			t.Fatal("addresses not sorted")
		}
	})
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-3", "0-1,4,6-7", "", "3-1", "1,", "-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := parseCPUList(s)
		if err == nil && (len(cpus) == 0 || len(cpus) > 1<<20) {
			t.Fatalf("%q: %d cpus", s, len(cpus))
		}
	})
}

// memFile is a fake process memory: a file read at "addresses".
func memFile(t testing.TB, b []byte) *procMem {
	p := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &procMem{f}
}

// pyStr lays out a compact 3.11 str at off.
func pyStr(mem []byte, off int, s []rune, kind uint32) {
	le := binary.LittleEndian
	ascii := kind == 1
	for _, r := range s {
		if r > 127 {
			ascii = false
		}
	}
	le.PutUint64(mem[off+16:], uint64(len(s)))
	state := kind<<2 | 1<<5
	if ascii {
		state |= 1 << 6
	}
	le.PutUint32(mem[off+32:], state)
	data := off + 72
	if ascii {
		data = off + 48
	}
	for i, r := range s {
		switch kind {
		case 1:
			mem[data+i] = byte(r)
		case 2:
			le.PutUint16(mem[data+2*i:], uint16(r))
		case 4:
			le.PutUint32(mem[data+4*i:], uint32(r))
		}
	}
}

func TestReadCodeLayouts(t *testing.T) {
	mem := make([]byte, 4096)
	le := binary.LittleEndian
	code := 256
	le.PutUint32(mem[code+int(py311.codeFirstLine):], 42)
	le.PutUint64(mem[code+int(py311.codeQualname):], 1024)
	le.PutUint64(mem[code+int(py311.codeName):], 1536)
	le.PutUint64(mem[code+int(py311.codeFilename):], 2048)
	pyStr(mem, 1024, []rune("Outer.größe"), 1)
	pyStr(mem, 1536, []rune("größe"), 1)
	pyStr(mem, 2048, []rune("/src/模型.py"), 2)
	m := memFile(t, mem)
	n, err := readCode(m, uint64(code))
	if err != nil {
		t.Fatal(err)
	}
	if n.fn != "Outer.größe" || n.file != "/src/模型.py" || n.line != 42 {
		t.Errorf("got %+v", n)
	}
	pyStr(mem, 2048, []rune("/src/😀.py"), 4)
	n, err = readCode(memFile(t, mem), uint64(code))
	if err != nil || n.file != "/src/😀.py" {
		t.Errorf("ucs4: %+v %v", n, err)
	}
}

func FuzzReadCode(f *testing.F) {
	seed := make([]byte, 512)
	binary.LittleEndian.PutUint64(seed[py311.codeQualname:], 256)
	pyStr(seed, 256, []rune("f"), 1)
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := memFile(t, b)
		n, err := readCode(m, 0)
		if err == nil && (n.fn == "" || len(n.fn) > 4*1024) {
			t.Fatalf("bad name %q", n.fn)
		}
	})
}

// TestStitch: Python frames replace each native eval-loop frame, one
// eval call per run of frames ending at an entry frame; leftover frames
// go to the root end (§4 stitching).
func TestStitch(t *testing.T) {
	p := &Profiler{cfg: Config{Hz: 99, Ratio: 0.1}, ksyms: &kallsyms{hidden: true}}
	p.cfg.fill()
	p.cfg.RankOf = func(pid int) (int, bool) { return 1, pid == 100 }
	p.state = newTracker(p)
	py := &fileInfo{path: "/usr/bin/python3.11", buildID: "ab", py: &pyFile{evalLo: 0x5000, evalHi: 0x6000}}
	p.state.procs[100] = &procState{pid: 100, tracked: true, maps: []resolvedMap{
		{m: procmaps.Mapping{Start: 0x400000, Limit: 0x800000, Offset: 0, Path: py.path}, f: py, bias: 0x400000},
	}}
	// Native leaf first: helper, eval, caller, eval, main.
	us := &cpuprofUstack{N: 5, Npy: 4}
	us.Pcs = [64]uint64{0x401000, 0x405100, 0x402001, 0x405201, 0x403001}
	us.Py = [32]uint64{0x10, 0x20 | 1, 0x30 | 1, 0x40}
	bd := &builder{p: p, b: &stack.Batch{}, mapIdx: map[mapKey]int32{}, procs: map[int]*procState{},
		pyNames: map[[2]uint64]pyName{}, rankOf: map[int]rankAns{}, ustacks: map[uint64]*cpuprofUstack{7: us}}
	for i, c := range []uint64{0x10, 0x20, 0x30, 0x40} {
		bd.pyNames[[2]uint64{100, c}] = pyName{fn: []string{"inner", "outer", "cb", "orphan"}[i], file: "x.py"}
	}
	s := stack.Sample{PID: 100}
	bd.frames(&s, cpuprofCountKey{Pid: 100, Kstack: -14, Uhash: 7})
	var got []string
	for _, f := range s.Frames {
		if f.Kind == stack.Python {
			got = append(got, f.Func)
		} else {
			got = append(got, fmt.Sprintf("%s:%x", f.Kind, f.Addr>>12))
		}
	}
	want := []string{"native:1", "inner", "outer", "native:2", "cb", "native:3", "orphan"}
	if !slices.Equal(got, want) {
		t.Errorf("stitched %v, want %v", got, want)
	}
	// Caller frames carry return address − 1, the leaf its exact pc.
	if s.Frames[0].Addr != 0x1000 || s.Frames[3].Addr != 0x2000 {
		t.Errorf("addresses %#x %#x", s.Frames[0].Addr, s.Frames[3].Addr)
	}
}

// TestLostStacksTruncated (review finding 11): a kernel stack the stack
// map could not keep, or a user stack the ustacks map dropped (uhash 2),
// makes the sample truncated instead of looking complete.
func TestLostStacksTruncated(t *testing.T) {
	p := &Profiler{cfg: Config{Hz: 99, Ratio: 0.1}, ksyms: &kallsyms{hidden: true}}
	p.cfg.fill()
	p.state = newTracker(p)
	bd := &builder{p: p, b: &stack.Batch{}, mapIdx: map[mapKey]int32{}, procs: map[int]*procState{},
		pyNames: map[[2]uint64]pyName{}, rankOf: map[int]rankAns{}, ustacks: map[uint64]*cpuprofUstack{},
		kstacks: map[int32][]uint64{5: {0xffffffff81000010}}}
	for _, tc := range []struct {
		name  string
		k     cpuprofCountKey
		trunc bool
	}{
		{"kernel stack kept, no user stack", cpuprofCountKey{Pid: 1 << 30, Kstack: 5}, false},
		{"user mode, no kernel stack", cpuprofCountKey{Pid: 1 << 30, Kstack: -14}, false},
		{"kernel stack lost (-EEXIST)", cpuprofCountKey{Pid: 1 << 30, Kstack: -17}, true},
		{"kernel stack lost (-ENOMEM)", cpuprofCountKey{Pid: 1 << 30, Kstack: -12}, true},
		{"user stack dropped", cpuprofCountKey{Pid: 1 << 30, Kstack: 5, Uhash: 2}, true},
	} {
		s := stack.Sample{PID: 1 << 30}
		bd.frames(&s, tc.k)
		if s.Truncated != tc.trunc {
			t.Errorf("%s: truncated %v, want %v", tc.name, s.Truncated, tc.trunc)
		}
	}
}
