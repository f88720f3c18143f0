package ehframe

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

func openELF(t testing.TB, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkRows asserts the table invariants every consumer relies on.
func checkRows(t testing.TB, name string, rows []Row) {
	t.Helper()
	for i, r := range rows {
		if i > 0 && r.PC <= rows[i-1].PC {
			t.Fatalf("%s: row %d pc %#x not above row %d pc %#x", name, i, r.PC, i-1, rows[i-1].PC)
		}
		if r.CFAReg > RegComplex {
			t.Fatalf("%s: row %d: cfa reg %d", name, i, r.CFAReg)
		}
		if r.RBPOff < -1<<15 || r.RBPOff >= 1<<15 {
			t.Fatalf("%s: row %d: rbp off %d", name, i, r.RBPOff)
		}
		if r.CFAReg >= RegUndefined && (r.CFAOff != 0 || r.RBPOff != 0) {
			t.Fatalf("%s: row %d: %+v carries offsets", name, i, r)
		}
	}
	if len(rows) > 0 && rows[len(rows)-1].CFAReg != RegUndefined {
		t.Fatalf("%s: last row %+v is not RegUndefined", name, rows[len(rows)-1])
	}
}

func TestCompileLibc(t *testing.T) {
	f := openELF(t, libc)
	t0 := time.Now()
	rows, st, err := CompileStats(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libc: %d FDEs, %d rows (%d complex), %d skipped, %v", st.FDEs, st.Rows, st.ComplexRows, st.Skipped, time.Since(t0))
	checkRows(t, "libc", rows)
	if st.FDEs < 1000 || st.ComplexRows*10 > st.Rows {
		t.Fatalf("implausible: %+v", st)
	}
}

// TestCompileAllLibs: every shared library that parses yields sorted,
// non-overlapping rows (property over real inputs).
func TestCompileAllLibs(t *testing.T) {
	if testing.Short() {
		t.Skip("walks /usr/lib/x86_64-linux-gnu")
	}
	paths, _ := filepath.Glob("/usr/lib/x86_64-linux-gnu/*.so*")
	n, failed := 0, 0
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Size() > 64<<20 {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		rows, err := Compile(f)
		f.Close()
		if err != nil {
			failed++
			t.Logf("%s: %v", p, err)
			continue
		}
		checkRows(t, p, rows)
		n++
	}
	t.Logf("%d libraries compiled, %d refused", n, failed)
	if n == 0 {
		t.Skip("no libraries found")
	}
}

func benchCompile(b *testing.B, path string) {
	f := openELF(b, path)
	var st Stats
	for b.Loop() {
		var err error
		if _, st, err = CompileStats(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.Rows), "rows")
	b.ReportMetric(float64(st.FDEs), "fdes")
}

// BenchmarkCompileLibc: §4 "pre-processing adds ~200 ms per binary".
func BenchmarkCompileLibc(b *testing.B) { benchCompile(b, libc) }

// BenchmarkCompileLibtorchCPU: the paper's large-binary case.
func BenchmarkCompileLibtorchCPU(b *testing.B) {
	benchCompile(b, "/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so")
}
