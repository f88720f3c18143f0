package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nStatic static functions sit between two exported ones, so a stripped
// library's .dynsym has a ~nStatic-function hole (§5.3's sparse table).
const nStatic = 48

// sparseLib is a shared library built by gcc in the test: full (with
// .symtab and DWARF), its separate debug file, and the stripped library a
// node actually maps (only .dynsym, with a .gnu_debuglink).
type sparseLib struct {
	dir, full, debug, stripped string
	buildID                    string
	// static function name → [start, end) from the unstripped .symtab:
	// the ground truth.
	statics map[string][2]uint64
}

func sparseSource() string {
	var b strings.Builder
	b.WriteString("#define N __attribute__((noinline, noclone, used))\n")
	b.WriteString("volatile long sink;\n")
	// The exported function whose name the naive resolver smears over the
	// statics: named after Fig. 4's fictitious hot spot.
	b.WriteString("__attribute__((visibility(\"default\"))) N void pangu_memcpy_avx512(char *d, const char *s, long n) { for (long i = 0; i < n; i++) d[i] = s[i]; sink += n; }\n")
	for i := range nStatic {
		fmt.Fprintf(&b, "static N long work_%02d(long x) { long a = x; for (int i = 0; i < %d; i++) a = a * %d + i; sink += a; return a; }\n", i, 3+i%5, 7+i)
	}
	b.WriteString("__attribute__((visibility(\"default\"))) N long run_all(long x) { long t = 0;\n")
	for i := range nStatic {
		fmt.Fprintf(&b, "  t += work_%02d(x + %d);\n", i, i)
	}
	b.WriteString("  return t; }\n")
	// Hand-written assembly without .size: a zero-size symbol.
	b.WriteString(`__asm__(".text\n.globl asm_nosize\n.type asm_nosize,@function\nasm_nosize:\n ret\n nop\n nop\n nop\n");` + "\n")
	return b.String()
}

func needTool(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s not installed: cannot build the test binary", n)
		}
	}
}

func run(t testing.TB, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func buildSparseLib(t testing.TB) *sparseLib {
	t.Helper()
	needTool(t, "gcc", "objcopy", "strip")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.c"), []byte(sparseSource()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "gcc", "-O2", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-fno-reorder-functions",
		"-fomit-frame-pointer", "-Wl,--build-id=sha1", "-o", "full.so", "t.c")
	run(t, dir, "objcopy", "--only-keep-debug", "full.so", "full.debug")
	run(t, dir, "strip", "--strip-all", "-o", "stripped.so", "full.so")
	run(t, dir, "objcopy", "--add-gnu-debuglink=full.debug", "stripped.so")
	l := &sparseLib{dir: dir, full: filepath.Join(dir, "full.so"), debug: filepath.Join(dir, "full.debug"),
		stripped: filepath.Join(dir, "stripped.so"), statics: map[string][2]uint64{}}
	f, err := elf.Open(l.full)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if l.buildID, err = ELFBuildID(f); err != nil || l.buildID == "" {
		t.Fatalf("build-id: %q %v", l.buildID, err)
	}
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "work_") && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			l.statics[s.Name] = [2]uint64{s.Value, s.Value + s.Size}
		}
	}
	if len(l.statics) != nStatic {
		t.Fatalf("found %d static functions in .symtab, want %d", len(l.statics), nStatic)
	}
	return l
}

func indexFile(t testing.TB, path string) (*Index, BuildStats) {
	t.Helper()
	var files []*elf.File
	for _, p := range strings.Split(path, ",") {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files = append(files, f)
	}
	var buf bytes.Buffer
	st, err := Build(&buf, files...)
	if err != nil {
		t.Fatalf("Build(%s): %v", path, err)
	}
	ix, err := OpenIndex(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	return ix, st
}

// TestSparseMisattribution reproduces §5.3 / Fig. 4: over the stripped
// library's sparse .dynsym, the node-side nearest-lower resolver charges
// the samples of every static function to pangu_memcpy_avx512; the
// central index built from the full table names each one, and even an
// index of the stripped library alone refuses to misattribute.
func TestSparseMisattribution(t *testing.T) {
	l := buildSparseLib(t)
	sf, err := elf.Open(l.stripped)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if _, err := sf.Symbols(); err == nil {
		t.Fatal("stripped library still has .symtab")
	}
	naive := NewNaiveNearest(NaiveTable(sf))
	full, st := indexFile(t, l.debug)
	sparse, _ := indexFile(t, l.stripped)
	if st.Symtab == 0 {
		t.Fatalf("debug file contributed no .symtab symbols: %+v", st)
	}

	var naiveHot, fullRight, sparseWrong, sparseUnknown int
	distinctNaive := map[string]bool{}
	for name, r := range l.statics {
		for _, a := range []uint64{r[0], (r[0] + r[1]) / 2, r[1] - 1} {
			if n, _ := naive.Lookup(a); n == "pangu_memcpy_avx512" {
				naiveHot++
			} else {
				distinctNaive[n] = true
			}
			if n, ok := full.Lookup(a); ok && n == name {
				fullRight++
			} else {
				t.Errorf("full index: %#x in %s named %q, %v", a, name, n, ok)
			}
			if n, ok := sparse.Lookup(a); ok {
				sparseWrong++
				t.Errorf("stripped index named %#x (in %s) %q: must be unknown", a, name, n)
			} else {
				sparseUnknown++
			}
		}
	}
	want := 3 * nStatic
	t.Logf("naive: %d/%d static-function addresses charged to pangu_memcpy_avx512 (others: %v); full index: %d/%d right",
		naiveHot, want, distinctNaive, fullRight, want)
	// The statics follow pangu_memcpy_avx512 in the text, so the naive
	// resolver charges them all to it: the fictitious hot spot.
	if naiveHot != want {
		t.Errorf("naive resolver charged %d of %d addresses to the hot spot, want all", naiveHot, want)
	}
	if fullRight != want || sparseWrong != 0 || sparseUnknown != want {
		t.Errorf("full right %d, sparse wrong %d, sparse unknown %d; want %d, 0, %d", fullRight, sparseWrong, sparseUnknown, want, want)
	}
	// The exported functions themselves stay right everywhere.
	for _, ix := range []*Index{full, sparse} {
		for _, fn := range []string{"pangu_memcpy_avx512", "run_all"} {
			if !hasName(t, ix, sf, fn) {
				t.Errorf("%s not found by its own address", fn)
			}
		}
	}
}

func hasName(t *testing.T, ix *Index, f *elf.File, name string) bool {
	syms, _ := f.DynamicSymbols()
	for _, s := range syms {
		if s.Name == name {
			n, ok := ix.Lookup(s.Value + s.Size/2)
			return ok && n == name
		}
	}
	return false
}

func TestBuildSources(t *testing.T) {
	l := buildSparseLib(t)
	// Full binary: .symtab + DWARF, DWARF adds nothing the symtab lacks.
	ix, st := indexFile(t, l.full)
	if st.Symtab == 0 || st.DWARF == 0 || st.BuildID != l.buildID || ix.BuildID() != l.buildID {
		t.Fatalf("stats %+v, index build-id %s", st, ix.BuildID())
	}
	// The zero-size assembly symbol is extended and marked approximate.
	f, _ := elf.Open(l.full)
	defer f.Close()
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == "asm_nosize" {
			got, ok, err := ix.Find(s.Value + 1)
			if err != nil || !ok || got.Name != "asm_nosize" || !got.Approx || got.Size == 0 || got.Size > MaxApproxSize {
				t.Errorf("asm_nosize: %+v %v %v", got, ok, err)
			}
		}
	}
	if st.Approx == 0 {
		t.Errorf("no approximate entries: %+v", st)
	}
	// Stripped library + its debug file: the debug file's table wins.
	ix2, st2 := indexFile(t, l.stripped+","+l.debug)
	if st2.Dynsym == 0 || st2.Symtab == 0 {
		t.Fatalf("stats %+v", st2)
	}
	for name, r := range l.statics {
		if n, ok := ix2.Lookup(r[0]); !ok || n != name {
			t.Errorf("%s: got %q %v", name, n, ok)
		}
	}
}

// TestDWARFFillsGaps: a debug file whose .symtab lost the static
// functions still names them from DWARF subprograms.
func TestDWARFFillsGaps(t *testing.T) {
	l := buildSparseLib(t)
	out := filepath.Join(l.dir, "dwarfonly.debug")
	args := []string{}
	for name := range l.statics {
		args = append(args, "--strip-symbol="+name)
	}
	args = append(args, l.debug, out)
	run(t, l.dir, "objcopy", args...)
	ix, st := indexFile(t, out)
	if st.FromDWARF < nStatic {
		t.Errorf("DWARF filled %d gaps, want ≥ %d (%+v)", st.FromDWARF, nStatic, st)
	}
	if !ix.HasDWARF() {
		t.Error("header flag for DWARF not set")
	}
	for name, r := range l.statics {
		if n, ok := ix.Lookup((r[0] + r[1]) / 2); !ok || n != name {
			t.Errorf("%s: got %q %v", name, n, ok)
		}
	}
}

func TestDemangleCXX(t *testing.T) {
	needTool(t, "g++")
	dir := t.TempDir()
	src := `namespace ns { template <typename T> struct Box { __attribute__((noinline)) T get(T x) const { return x * 3; } };
struct Foo { __attribute__((noinline)) long bar(int x); }; long Foo::bar(int x) { return Box<long>().get(x); } }
long use(int x) { ns::Foo f; return f.bar(x); }`
	os.WriteFile(filepath.Join(dir, "t.cc"), []byte(src), 0o644)
	run(t, dir, "g++", "-O2", "-fPIC", "-shared", "-Wl,--build-id", "-o", "t.so", "t.cc")
	ix, _ := indexFile(t, filepath.Join(dir, "t.so"))
	f, _ := elf.Open(filepath.Join(dir, "t.so"))
	defer f.Close()
	syms, _ := f.Symbols()
	want := map[string]string{"_ZN2ns3Foo3barEi": "ns::Foo::bar(int)", "_ZNK2ns3BoxIlE3getEl": "ns::Box<long>::get(long) const"}
	found := 0
	for _, s := range syms {
		if w, ok := want[s.Name]; ok {
			found++
			if n, ok := ix.Lookup(s.Value); !ok || n != w {
				t.Errorf("%s: got %q, want %q", s.Name, n, w)
			}
		}
	}
	if found == 0 {
		t.Fatal("no expected C++ symbols in the test library")
	}
}

func TestPretty(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"_ZN2ns3Foo3barEi", "ns::Foo::bar(int)"},
		{"_RNvCs1234_7mycrate3foo", "mycrate::foo"},             // Rust v0
		{"_ZN7mycrate3foo17h0123456789abcdefE", "mycrate::foo"}, // legacy Rust, hash dropped
		{"memcpy@@GLIBC_2.14", "memcpy"},                        // symbol version
		{"_Znot_mangled", "_Znot_mangled"},                      // demangling fails: raw kept
		{"plain_c", "plain_c"},
		{strings.Repeat("x", 5000), strings.Repeat("x", MaxName-3) + "…"}, // bounded
	} {
		if got := pretty(map[string]string{}, c.raw); got != c.want {
			t.Errorf("pretty(%.40q) = %.60q, want %.60q", c.raw, got, c.want)
		}
	}
}
