package symbolize

import (
	"debug/elf"
	"path/filepath"
	"testing"
	"time"
)

// TestLibcSeparateDebug measures §5.3 on a real stripped library: libc
// as a node maps it (.dynsym only) against its separate debug file
// (libc6-dbg). Skips where the debug file is not installed (CI).
func TestLibcSeparateDebug(t *testing.T) {
	lib, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		t.Skip("no /lib/x86_64-linux-gnu/libc.so.6")
	}
	lf, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	id, _ := ELFBuildID(lf)
	if id == "" {
		t.Skip("libc has no build-id")
	}
	dbg := filepath.Join("/usr/lib/debug/.build-id", id[:2], id[2:]+".debug")
	if !fileExists(dbg) {
		t.Skipf("libc6-dbg not installed (%s missing)", dbg)
	}
	start := time.Now()
	full, st := indexFile(t, lib+","+dbg)
	buildTime := time.Since(start)
	sparse, sst := indexFile(t, lib)
	naive := NewNaiveNearest(NaiveTable(lf))

	df, _ := elf.Open(dbg)
	defer df.Close()
	syms, _ := df.Symbols()
	var probes, naiveWrong, sparseWrong, sparseUnknown, fullMiss int
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 {
			continue
		}
		// Right means the function starting at s.Value (whichever of
		// its aliases names it).
		a := s.Value + s.Size/2
		if _, ok := full.Lookup(a); !ok {
			fullMiss++
			continue
		}
		probes++
		if n, _ := naive.Find(a); n.Addr != s.Value {
			naiveWrong++
		}
		if got, ok, _ := sparse.Find(a); !ok {
			sparseUnknown++
		} else if got.Start != s.Value {
			sparseWrong++
		}
	}
	t.Logf("libc %s: full table %d entries (symtab %d, dynsym %d, DWARF gaps %d, approx %d) built in %v; .dynsym-only %d entries",
		id[:12], st.Entries, st.Symtab, st.Dynsym, st.FromDWARF, st.Approx, buildTime.Round(time.Millisecond), sst.Entries)
	t.Logf("%d function midpoints: naive nearest-lower over .dynsym misnames %d (%.1f%%); sized .dynsym index: %d unknown, %d wrong",
		probes, naiveWrong, 100*float64(naiveWrong)/float64(probes), sparseUnknown, sparseWrong)
	if fullMiss != 0 {
		t.Errorf("%d symtab functions not found in the full index", fullMiss)
	}
	if naiveWrong == 0 || sparseWrong > naiveWrong/10 {
		t.Errorf("naive wrong %d, sized sparse wrong %d", naiveWrong, sparseWrong)
	}
}
