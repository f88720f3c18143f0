package elfinfo

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	p, err := DebugFile(libc, f, "/usr/lib/debug")
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
	if got, _ := FileCRC(dbg); got != crc {
		t.Fatalf("crc %#x, file %#x", crc, got)
	}
	empty := t.TempDir() // no build-id tree: found through the link
	if p, err := DebugFile(bin, f, empty); err != nil || p != dbg {
		t.Fatalf("DebugFile = %q, %v", p, err)
	}
	os.Mkdir(filepath.Join(dir, ".debug"), 0o755)
	os.Rename(dbg, filepath.Join(dir, ".debug", "chain.debug"))
	if p, _ := DebugFile(bin, f, empty); p != filepath.Join(dir, ".debug", "chain.debug") {
		t.Fatalf(".debug/ lookup: %q", p)
	}
	os.WriteFile(filepath.Join(dir, ".debug", "chain.debug"), []byte("not it"), 0o644)
	if p, _ := DebugFile(bin, f, empty); p != "" {
		t.Fatalf("CRC mismatch accepted: %q", p)
	}
	// Build-id tree wins.
	id, _ := BuildID(f)
	bp, _ := BuildIDPath(empty, id)
	os.MkdirAll(filepath.Dir(bp), 0o755)
	os.WriteFile(bp, data, 0o644)
	if p, _ := DebugFile(bin, f, empty); p != bp {
		t.Fatalf("build-id lookup: %q", p)
	}
}
