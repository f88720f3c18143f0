package elfinfo

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

// chainBin is the committed test program of the unwinder (built by
// ../cpuprof/ehframe/testdata/build.sh, with a GNU build-id).
const chainBin = "../cpuprof/ehframe/testdata/chain"

func open(t *testing.T, p string) *elf.File {
	t.Helper()
	f, err := elf.Open(p)
	if err != nil {
		t.Skipf("%s: %v", p, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestBuildIDSectionAndPTNote(t *testing.T) {
	f := open(t, chainBin)
	id, err := BuildID(f)
	if err != nil || len(id) != 40 || strings.ToLower(id) != id {
		t.Fatalf("BuildID = %q, %v", id, err)
	}
	// Stripped of section headers: the PT_NOTE segment still has it.
	f.Sections = nil
	id2, err := BuildID(f)
	if err != nil || id2 != id {
		t.Fatalf("PT_NOTE BuildID = %q, %v; want %q", id2, err, id)
	}
}

func TestParseNotes(t *testing.T) {
	note := func(name string, typ uint32, desc []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)+1))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = append(b, name...)
		b = append(b, 0)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	abi := note("GNU", 1, []byte{0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	bid := note("GNU", 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})
	other := note("Go", 3, []byte{1, 2, 3, 4})
	for _, tc := range []struct {
		name, want string
		b          []byte
		err        bool
	}{
		{"second note", "deadbeef01", append(append(abi, other...), bid...), false},
		{"none", "", abi, false},
		{"truncated", "", bid[:len(bid)-4], true},
		{"empty", "", nil, false},
	} {
		got, err := parseNotes(tc.b, binary.LittleEndian)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %q %v", tc.name, got, err)
		}
	}
}

func FuzzParseNotes(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 1, 2, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := parseNotes(b, binary.LittleEndian)
		if err != nil && id != "" {
			t.Fatal("id with error")
		}
	})
}

func TestNormalize(t *testing.T) {
	f := open(t, libc)
	var text elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p.ProgHeader
		}
	}
	// The kernel maps the text segment page-aligned: offset rounded down.
	off := text.Off &^ 0xfff
	m := procmaps.Mapping{Start: 0x7f0000000000 + off, Limit: 0x7f0000000000 + off + text.Filesz + 0x1000, Offset: off, Perms: "r-xp", Path: libc}
	addr := m.Start + (text.Off - off) + 0x123
	got, err := Normalize(f, m, addr)
	if err != nil || got != text.Vaddr+0x123 {
		t.Fatalf("Normalize = %#x, %v; want %#x", got, err, text.Vaddr+0x123)
	}
	if _, err := Normalize(f, m, m.Limit); err == nil {
		t.Fatal("address outside the mapping accepted")
	}
	m.Offset = 1 << 40
	if _, err := Normalize(f, m, m.Start); err == nil || !strings.Contains(err.Error(), "PT_LOAD") {
		t.Fatalf("offset outside every segment: %v", err)
	}
}

func TestBuildIDPath(t *testing.T) {
	p, err := BuildIDPath("/usr/lib/debug", "ab12cd")
	if err != nil || p != "/usr/lib/debug/.build-id/ab/12cd.debug" {
		t.Fatalf("%q %v", p, err)
	}
	for _, bad := range []string{"", "ab", "abc", "zz12", "../../x"} {
		if _, err := BuildIDPath("/d", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestDebugFileDistro: libc6-dbg installs libc's debug file by build-id.
func TestDebugFileDistro(t *testing.T) {
	f := open(t, libc)
	p, err := debugName("/", libc, f, "/usr/lib/debug")
	if err != nil {
		t.Fatal(err)
	}
	if p == "" {
		t.Skip("no libc debug file installed (libc6-dbg)")
	}
	id, _ := BuildID(f)
	if want, _ := BuildIDPath("/usr/lib/debug", id); p != want {
		t.Fatalf("got %s want %s", p, want)
	}
}

// TestDebugLink builds a stripped copy with a .gnu_debuglink (objcopy)
// and checks the lookup next to it, in .debug/, and the CRC check.
func TestDebugLink(t *testing.T) {
	if _, err := exec.LookPath("objcopy"); err != nil {
		t.Skip("objcopy not installed")
	}
	dir := t.TempDir()
	full := filepath.Join(dir, "chain.full")
	dbg := filepath.Join(dir, "chain.debug")
	bin := filepath.Join(dir, "chain")
	data, err := os.ReadFile(chainBin)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(full, data, 0o755)
	for _, args := range [][]string{
		{"--only-keep-debug", full, dbg},
		{"--strip-all", "--add-gnu-debuglink=" + dbg, full, bin},
	} {
		if out, err := exec.Command("objcopy", args...).CombinedOutput(); err != nil {
			t.Fatalf("objcopy %v: %v\n%s", args, err, out)
		}
	}
	f := open(t, bin)
	name, crc, ok, err := DebugLink(f)
	if err != nil || !ok || name != "chain.debug" {
		t.Fatalf("DebugLink = %q %v %v", name, ok, err)
	}
	dh, _ := os.Open(dbg)
	got, _ := ReaderCRC(dh)
	dh.Close()
	if got != crc {
		t.Fatalf("crc %#x, file %#x", crc, got)
	}
	empty := t.TempDir() // no build-id tree: found through the link
	if p, err := debugName("/", bin, f, empty); err != nil || p != dbg {
		t.Fatalf("OpenDebugFile = %q, %v", p, err)
	}
	os.Mkdir(filepath.Join(dir, ".debug"), 0o755)
	os.Rename(dbg, filepath.Join(dir, ".debug", "chain.debug"))
	if p, _ := debugName("/", bin, f, empty); p != filepath.Join(dir, ".debug", "chain.debug") {
		t.Fatalf(".debug/ lookup: %q", p)
	}
	os.WriteFile(filepath.Join(dir, ".debug", "chain.debug"), []byte("not it"), 0o644)
	if p, _ := debugName("/", bin, f, empty); p != "" {
		t.Fatalf("CRC mismatch accepted: %q", p)
	}
	// Build-id tree wins.
	id, _ := BuildID(f)
	bp, _ := BuildIDPath(empty, id)
	os.MkdirAll(filepath.Dir(bp), 0o755)
	os.WriteFile(bp, data, 0o644)
	if p, _ := debugName("/", bin, f, empty); p != bp {
		t.Fatalf("build-id lookup: %q", p)
	}
}

// debugName is OpenDebugFile's in-root name (the file closed).
func debugName(root, path string, f *elf.File, dir string) (string, error) {
	fh, name, err := OpenDebugFile(root, path, f, dir)
	if fh != nil {
		fh.Close()
	}
	return name, err
}

// TestOpenInRootConfined: a process that makes a path a symlink (absolute
// or with "..") or a FIFO never gets the agent to open a file outside its
// root, nor to block (review finding 1/2).
func TestOpenInRootConfined(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/lib/ok.so"), []byte("inside"), 0o644)
	os.Symlink("/etc/hostname", filepath.Join(root, "usr/lib/abs.so"))
	os.Symlink("../../../../../../../../etc/hostname", filepath.Join(root, "usr/lib/rel.so"))
	os.Symlink("ok.so", filepath.Join(root, "usr/lib/inroot.so"))
	if err := unix.Mkfifo(filepath.Join(root, "usr/lib/fifo.so"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fh, err := OpenInRoot(root, "/usr/lib/ok.so", false); err != nil {
		t.Fatalf("regular file refused: %v", err)
	} else {
		fh.Close()
	}
	for _, follow := range []bool{false, true} {
		for _, name := range []string{"/usr/lib/abs.so", "/usr/lib/rel.so", "/../../../etc/hostname", "/usr/lib/fifo.so", "/usr/lib"} {
			done := make(chan error, 1)
			go func() {
				fh, err := OpenInRoot(root, name, follow)
				if fh != nil {
					fh.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("follow=%v: %s opened; want refused (outside root, or not a regular file)", follow, name)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("follow=%v: opening %s blocked", follow, name)
			}
		}
	}
	// A symlink that stays in root: only when symlinks are allowed.
	if fh, err := OpenInRoot(root, "/usr/lib/inroot.so", false); err == nil {
		fh.Close()
		t.Error("symlink followed with followSymlinks=false")
	}
	if fh, err := OpenInRoot(root, "/usr/lib/inroot.so", true); err != nil {
		t.Errorf("in-root symlink refused: %v", err)
	} else {
		fh.Close()
	}
}

// TestOpenDebugFileChecksBuildID: a file planted at the Build-ID path or
// as a symlink to a secret is not taken as the debug file.
func TestOpenDebugFileChecksBuildID(t *testing.T) {
	f := open(t, chainBin)
	id, _ := BuildID(f)
	root := t.TempDir()
	bp, _ := BuildIDPath("/usr/lib/debug", id)
	os.MkdirAll(filepath.Join(root, filepath.Dir(bp)), 0o755)
	os.WriteFile(filepath.Join(root, "secret"), []byte("root:x:0:0"), 0o600)
	other, err := os.ReadFile(libc)
	if err != nil {
		t.Skip(err)
	}
	for _, plant := range []func(p string) error{
		func(p string) error { return os.Symlink("/etc/hostname", p) },
		func(p string) error { return os.Symlink("/secret", p) },
		func(p string) error { return os.WriteFile(p, other, 0o644) }, // an ELF with another Build-ID
		func(p string) error { return unix.Mkfifo(p, 0o644) },
	} {
		p := filepath.Join(root, bp)
		os.Remove(p)
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		if name, err := debugName(root, "/usr/bin/chain", f, "/usr/lib/debug"); name != "" {
			t.Errorf("planted %s accepted (err %v)", name, err)
		}
	}
	os.Remove(filepath.Join(root, bp))
	data, _ := os.ReadFile(chainBin)
	os.WriteFile(filepath.Join(root, bp), data, 0o644)
	if name, err := debugName(root, "/usr/bin/chain", f, "/usr/lib/debug"); name != bp {
		t.Errorf("genuine debug file: got %q, %v; want %s", name, err, bp)
	}
}

// TestLoadBiasLLDLayout (review finding 3): lld's default layout puts a
// read-only segment first (Off 0/Vaddr 0) and the code at Off
// 0x650/Vaddr 0x1650; the kernel maps the code page-aligned, so the
// executable mapping starts at file offset 0, inside the R segment. The
// bias must come from the executable segment.
func TestLoadBiasLLDLayout(t *testing.T) {
	const base = 0x5555_5555_4000
	ph := func(off, vaddr, size uint64, fl elf.ProgFlag) *elf.Prog {
		return &elf.Prog{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: fl, Off: off, Vaddr: vaddr, Filesz: size, Memsz: size}}
	}
	for _, tc := range []struct {
		name  string
		progs []*elf.Prog
		m     procmaps.Mapping
	}{
		{"lld", []*elf.Prog{ph(0, 0, 0x650, elf.PF_R), ph(0x650, 0x1650, 0x2000, elf.PF_R|elf.PF_X), ph(0x2650, 0x4650, 0x100, elf.PF_R|elf.PF_W)},
			procmaps.Mapping{Start: base + 0x1000, Limit: base + 0x3000, Offset: 0, Perms: "r-xp"}},
		{"gnu-separate-code", []*elf.Prog{ph(0, 0, 0x600, elf.PF_R), ph(0x1000, 0x1000, 0x1f0, elf.PF_R|elf.PF_X), ph(0x2000, 0x2000, 0x100, elf.PF_R)},
			procmaps.Mapping{Start: base + 0x1000, Limit: base + 0x2000, Offset: 0x1000, Perms: "r-xp"}},
		{"one-rx-segment", []*elf.Prog{ph(0, 0, 0x5000, elf.PF_R|elf.PF_X)},
			procmaps.Mapping{Start: base, Limit: base + 0x5000, Offset: 0, Perms: "r-xp"}},
		{"pie-shifted-vaddr", []*elf.Prog{ph(0, 0x400000, 0x600, elf.PF_R), ph(0x650, 0x401650, 0x2000, elf.PF_R|elf.PF_X)},
			procmaps.Mapping{Start: 0x401000, Limit: 0x403000, Offset: 0, Perms: "r-xp"}},
	} {
		want := uint64(base)
		if tc.name == "pie-shifted-vaddr" {
			want = 0
		}
		got, err := LoadBias(tc.progs, tc.m)
		if err != nil || got != want {
			t.Errorf("%s: LoadBias = %#x, %v; want %#x", tc.name, got, err, want)
		}
	}
	if _, err := LoadBias([]*elf.Prog{ph(0, 0, 0x100, elf.PF_R)}, procmaps.Mapping{Start: base, Limit: base + 0x1000, Offset: 0x10000}); err == nil {
		t.Error("mapping in no segment accepted")
	}
}

// TestLoadBiasSeparateCode runs a gcc -z separate-code binary (its first
// mapping is the read-only headers segment) and checks that main's
// runtime address minus LoadBias of its executable mapping is main's
// symbol value.
func TestLoadBiasSeparateCode(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed")
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "p.c"), filepath.Join(dir, "p")
	os.WriteFile(src, []byte("#include <stdio.h>\n#include <unistd.h>\nint main(void){printf(\"%lx\\n\",(unsigned long)&main);fflush(stdout);pause();return 0;}\n"), 0o644)
	if out, err := exec.Command("gcc", "-O1", "-fPIE", "-pie", "-Wl,-z,separate-code", "-o", bin, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var addr uint64
	if _, err := fmt.Fscanf(stdout, "%x\n", &addr); err != nil {
		t.Fatal(err)
	}
	maps, err := procmaps.Read(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var mine []procmaps.Mapping
	for _, m := range maps {
		if m.Path == bin {
			mine = append(mine, m)
		}
	}
	if len(mine) == 0 || mine[0].Exec() {
		t.Skipf("layout is not separate-code (first mapping %+v)", mine)
	}
	f := open(t, bin)
	syms, _ := f.Symbols()
	var mainVal uint64
	for _, s := range syms {
		if s.Name == "main" {
			mainVal = s.Value
		}
	}
	for _, m := range mine {
		if !m.Contains(addr) {
			continue
		}
		if !m.Exec() {
			t.Fatalf("main in a non-executable mapping %+v", m)
		}
		bias, err := LoadBias(f.Progs, m)
		if err != nil || addr-bias != mainVal {
			t.Fatalf("LoadBias = %#x, %v: main at %#x normalizes to %#x, want %#x", bias, err, addr, addr-bias, mainVal)
		}
		return
	}
	t.Fatalf("main %#x in no mapping of %s", addr, bin)
}
