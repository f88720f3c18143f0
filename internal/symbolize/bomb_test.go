package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// bombLib is the sparse library with .debug_info replaced by 32 MiB of
// zeros, zlib-compressed (SHF_COMPRESSED): ~32 KiB on disk.
func bombLib(t *testing.T) (string, *sparseLib) {
	l := buildSparseLib(t)
	zeros := filepath.Join(l.dir, "zeros")
	if err := os.WriteFile(zeros, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(l.dir, "bomb.so")
	run(t, l.dir, "objcopy", "--update-section", ".debug_info="+zeros, "full.so", "big.so")
	run(t, l.dir, "objcopy", "--compress-debug-sections=zlib", "big.so", out)
	fi, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 4<<20 {
		t.Fatalf("bomb.so is %d bytes: objcopy did not compress .debug_info", fi.Size())
	}
	return out, l
}

func allocDuring(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestBuildCapsCompressedDWARF: a small upload whose compressed debug
// sections inflate far past the cap never gets inflated; the symbol
// tables are still indexed and the skip is reported (review finding 1).
func TestBuildCapsCompressedDWARF(t *testing.T) {
	path, _ := bombLib(t)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if s := f.Section(".debug_info"); s == nil || s.Flags&elf.SHF_COMPRESSED == 0 || s.Size != 32<<20 {
		t.Fatalf(".debug_info not a compressed 32 MiB section: %+v", s)
	}
	var st BuildStats
	var buf bytes.Buffer
	alloc := allocDuring(func() {
		st, err = BuildWith(&buf, BuildOptions{MaxSectionBytes: 4 << 20}, f)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(st.DWARFErr, "DWARF skipped") || st.Entries == 0 || st.Symtab == 0 {
		t.Fatalf("stats %+v: want DWARF skipped and the symbol tables indexed", st)
	}
	if alloc > 16<<20 {
		t.Fatalf("Build allocated %d bytes: the compressed section was inflated", alloc)
	}
}

// TestBuildRefusesHugeDeclaredSize: a compression header declaring 1 TiB
// is refused from its header (debug/elf would read until the stream ends).
func TestBuildRefusesHugeDeclaredSize(t *testing.T) {
	path, _ := bombLib(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	di := f.Section(".debug_info")
	binary.LittleEndian.PutUint64(b[di.Offset+8:], 1<<40) // Elf64_Chdr.ch_size
	f, err = elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var st BuildStats
	alloc := allocDuring(func() { st, err = Build(&bytes.Buffer{}, f) })
	if err != nil || !strings.Contains(st.DWARFErr, "DWARF skipped") {
		t.Fatalf("err %v stats %+v: want DWARF skipped", err, st)
	}
	if alloc > 16<<20 {
		t.Fatalf("Build allocated %d bytes", alloc)
	}
}

// TestUploadBombBounded: through the store (the upload path), the cap is
// derived from the quota and the upload still installs its symbol tables.
func TestUploadBombBounded(t *testing.T) {
	path, l := bombLib(t)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, StoreOptions{Quota: 256 << 20, MaxSectionBytes: 4 << 20})
	var done bool
	alloc := allocDuring(func() { done, err = s.PutChunk(l.buildID, 0, 1, bytes.NewReader(b)) })
	if err != nil || !done {
		t.Fatalf("PutChunk: done=%v err=%v", done, err)
	}
	if alloc > 24<<20 {
		t.Fatalf("upload allocated %d bytes", alloc)
	}
	checkStatics(t, s, l)
}

// TestStagingBounded: junk uploads under fake Build-IDs are refused
// before a byte is written once the staging bounds are reached, so they
// cannot fill the quota that real symbol files need (review finding 4).
func TestStagingBounded(t *testing.T) {
	const mib = 1 << 20
	s := openTestStore(t, StoreOptions{Quota: 64 * mib, MaxChunk: mib, MaxStaged: 3 * mib, MaxStagedPerID: 2 * mib})
	part := func(id string, p, parts int) error {
		_, err := s.PutChunk(id, p, parts, bytes.NewReader(make([]byte, mib)))
		return err
	}
	for _, c := range []struct {
		id       string
		p, parts int
		quota    bool
	}{
		{"aa01", 0, 10, false},
		{"aa01", 1, 10, false},
		{"aa01", 0, 20, true}, // a second staging of one id: per-id bound
		{"aa02", 0, 10, false},
		{"aa03", 0, 10, true}, // total staging bound
	} {
		err := part(c.id, c.p, c.parts)
		if got := err != nil && errors.Is(err, ErrQuota); got != c.quota {
			t.Fatalf("%s part %d/%d: err %v, want quota refusal %v", c.id, c.p, c.parts, err, c.quota)
		}
	}
	if u := s.Used(); u != 3*mib {
		t.Fatalf("Used %d, want %d (staged parts only)", u, 3*mib)
	}
	if tmp, _ := os.ReadDir(s.tmpDir()); len(tmp) != 0 {
		t.Fatalf("refused chunks left %d temp files", len(tmp))
	}
}

// TestRemoveAndLocalDebugWins: an admin removes a squatted Build-ID and
// the resolver stops using it; a local debug file beats an upload.
func TestRemoveAndLocalDebugWins(t *testing.T) {
	l := buildSparseLib(t)
	dbg := t.TempDir()
	p := filepath.Join(dbg, ".build-id", l.buildID[:2], l.buildID[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(l.debug)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := openTestStore(t, StoreOptions{DebugDirs: []string{dbg}})
	r := NewResolver(s, ResolverOptions{})
	// The upload's bytes are garbage: the local debug file is used instead.
	done, err := s.PutChunk(l.buildID, 0, 1, strings.NewReader("not an ELF"))
	if err != nil || !done {
		t.Fatalf("PutChunk with a local debug file: done=%v err=%v", done, err)
	}
	checkStatics(t, s, l)
	if o := r.acquire(l.buildID); o == nil {
		t.Fatal("resolver cannot open the installed file")
	} else {
		r.release(o)
	}
	if err := s.Remove(l.buildID); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	_, open := r.open[l.buildID]
	r.mu.Unlock()
	if open || s.Has(l.buildID) {
		t.Fatalf("after Remove: resolver open=%v store has=%v", open, s.Has(l.buildID))
	}
	if err := s.Remove(l.buildID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove: %v, want ErrNotFound", err)
	}
}
