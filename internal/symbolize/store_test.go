package symbolize

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func chunks(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(size, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func openTestStore(t *testing.T, opts StoreOptions) *Store {
	t.Helper()
	if opts.DebugDirs == nil {
		opts.DebugDirs = []string{}
	}
	s, err := OpenStoreWith(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func stagingEmpty(t *testing.T, s *Store) {
	t.Helper()
	ents, _ := os.ReadDir(s.stagingDir())
	tmp, _ := os.ReadDir(s.tmpDir())
	if len(ents) != 0 || len(tmp) != 0 {
		t.Errorf("staging left %d uploads, tmp %d files", len(ents), len(tmp))
	}
}

func symBytes(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".sym" {
			fi, _ := e.Info()
			n += fi.Size()
		}
	}
	return n
}

// TestChunkedUpload uploads the debug file in small parts out of order
// with a resent part, as an agent on a flaky link would (§4 64 MB chunks).
func TestChunkedUpload(t *testing.T) {
	l := buildSparseLib(t)
	raw, _ := os.ReadFile(l.debug)
	s := openTestStore(t, StoreOptions{MaxChunk: 4096})
	parts := chunks(raw, 4096)
	order := rand.New(rand.NewPCG(1, 2)).Perm(len(parts))
	order = append(order[:1], order...) // resend the first
	for i, p := range order {
		done, err := s.PutChunk(l.buildID, p, len(parts), bytes.NewReader(parts[p]))
		if err != nil {
			t.Fatal(err)
		}
		if want := i == len(order)-1; done != want {
			t.Fatalf("part %d (#%d): done %v", p, i, done)
		}
	}
	if !s.Has(l.buildID) {
		t.Fatal("not stored")
	}
	stagingEmpty(t, s)
	if s.Used() != symBytes(t, s) {
		t.Errorf("accounted %d bytes, files hold %d", s.Used(), symBytes(t, s))
	}
	ix, c, err := s.Open(l.buildID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, r := range l.statics {
		if n, ok := ix.Lookup(r[0]); !ok || n != name {
			t.Errorf("%s: %q %v", name, n, ok)
		}
	}
	// Already stored: done at once.
	if done, err := s.PutChunk(l.buildID, 0, 9, bytes.NewReader([]byte("x"))); !done || err != nil {
		t.Errorf("re-upload: %v %v", done, err)
	}
	// Reopen: accounting survives.
	s2, err := OpenStoreWith(s.dir, StoreOptions{DebugDirs: []string{}})
	if err != nil || s2.Used() != s.Used() {
		t.Fatalf("reopen: used %d vs %d, %v", s2.Used(), s.Used(), err)
	}
}

func TestUploadRejects(t *testing.T) {
	l := buildSparseLib(t)
	raw, _ := os.ReadFile(l.debug)
	wrongID := "00112233445566778899aabbccddeeff00112233"

	t.Run("build-id mismatch", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{})
		_, err := s.PutChunk(wrongID, 0, 1, bytes.NewReader(raw))
		if !errors.Is(err, ErrBadUpload) || s.Has(wrongID) {
			t.Fatalf("err %v", err)
		}
		stagingEmpty(t, s)
		if s.Used() != 0 {
			t.Errorf("used %d after a discarded upload", s.Used())
		}
	})
	t.Run("not elf", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{})
		_, err := s.PutChunk(wrongID, 0, 1, bytes.NewReader([]byte("hello world")))
		if !errors.Is(err, ErrBadUpload) {
			t.Fatalf("err %v", err)
		}
		stagingEmpty(t, s)
	})
	t.Run("chunk too big", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{MaxChunk: 100})
		_, err := s.PutChunk(l.buildID, 0, 2, bytes.NewReader(raw[:101]))
		if !errors.Is(err, ErrBadUpload) {
			t.Fatalf("err %v", err)
		}
		stagingEmpty(t, s)
	})
	t.Run("upload cap", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{MaxChunk: 100, MaxUpload: 150})
		if _, err := s.PutChunk(l.buildID, 0, 3, bytes.NewReader(raw[:100])); err != nil {
			t.Fatal(err)
		}
		_, err := s.PutChunk(l.buildID, 1, 3, bytes.NewReader(raw[100:200]))
		if !errors.Is(err, ErrBadUpload) {
			t.Fatalf("err %v", err)
		}
		stagingEmpty(t, s)
	})
	t.Run("quota", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{Quota: 1000, MaxChunk: 800})
		if _, err := s.PutChunk(l.buildID, 0, 9, bytes.NewReader(raw[:800])); err != nil {
			t.Fatal(err)
		}
		_, err := s.PutChunk(l.buildID, 1, 9, bytes.NewReader(raw[800:1600]))
		if !errors.Is(err, ErrQuota) || s.Used() != 800 {
			t.Fatalf("err %v used %d", err, s.Used())
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{})
		for _, c := range []struct {
			id          string
			part, parts int
		}{{"XYZ", 0, 1}, {"abc", 0, 1}, {"../etc", 0, 1}, {l.buildID, 1, 1}, {l.buildID, -1, 1}, {l.buildID, 0, 0}, {l.buildID, 0, 1 << 20}} {
			if _, err := s.PutChunk(c.id, c.part, c.parts, bytes.NewReader([]byte("x"))); !errors.Is(err, ErrBadUpload) {
				t.Errorf("%+v: %v", c, err)
			}
		}
	})
	t.Run("restart with other chunking", func(t *testing.T) {
		s := openTestStore(t, StoreOptions{MaxChunk: 1 << 20})
		s.PutChunk(l.buildID, 0, 3, bytes.NewReader(raw[:100]))
		done, err := s.PutChunk(l.buildID, 0, 1, bytes.NewReader(raw))
		if !done || err != nil {
			t.Fatalf("%v %v", done, err)
		}
		stagingEmpty(t, s)
		if s.Used() != symBytes(t, s) {
			t.Errorf("used %d, files %d", s.Used(), symBytes(t, s))
		}
	})
	t.Run("stale staging expires", func(t *testing.T) {
		now := time.Unix(1e9, 0)
		s := openTestStore(t, StoreOptions{StagingTTL: time.Minute, Now: func() time.Time { return now }})
		s.PutChunk(l.buildID, 0, 2, bytes.NewReader(raw[:100]))
		now = time.Now().Add(time.Hour)
		s.gcStaging(false)
		stagingEmpty(t, s)
		if s.Used() != 0 {
			t.Errorf("used %d", s.Used())
		}
	})
}

// TestConcurrentUploads: several agents upload the same Build-ID at once
// (the HEAD→404→upload race) while another Build-ID uploads beside them.
func TestConcurrentUploads(t *testing.T) {
	l := buildSparseLib(t)
	raw, _ := os.ReadFile(l.debug)
	full, _ := os.ReadFile(l.full)
	s := openTestStore(t, StoreOptions{MaxChunk: 8192})
	type up struct {
		id  string
		raw []byte
	}
	// The full library carries the same build-id: same key, other bytes.
	ups := []up{{l.buildID, raw}, {l.buildID, raw}, {l.buildID, full}, {l.buildID, raw}}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g, u := range ups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts := chunks(u.raw, 8192)
			for _, p := range rand.New(rand.NewPCG(uint64(g), 9)).Perm(len(parts)) {
				done, err := s.PutChunk(u.id, p, len(parts), bytes.NewReader(parts[p]))
				if err != nil {
					// Mixing two different files' parts under one key
					// with the same chunk count is the one way to fail:
					// a clear ErrBadUpload, never a corrupt file.
					if !errors.Is(err, ErrBadUpload) {
						errs <- err
					}
					return
				}
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if !s.Has(l.buildID) {
		// Possible only if every uploader hit a mixed assembly; retry once.
		parts := chunks(raw, 8192)
		for p := range parts {
			if _, err := s.PutChunk(l.buildID, p, len(parts), bytes.NewReader(parts[p])); err != nil {
				t.Fatal(err)
			}
		}
	}
	ix, c, err := s.Open(l.buildID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := ix.Verify(); err != nil {
		t.Fatal(err)
	}
	stagingEmpty(t, s)
	if s.Used() != symBytes(t, s) {
		t.Errorf("used %d, files %d", s.Used(), symBytes(t, s))
	}
}

func TestAddFileAndDebugDirs(t *testing.T) {
	l := buildSparseLib(t)
	debugRoot := t.TempDir()
	p := filepath.Join(debugRoot, ".build-id", l.buildID[:2], l.buildID[2:]+".debug")
	os.MkdirAll(filepath.Dir(p), 0o755)
	raw, _ := os.ReadFile(l.debug)
	os.WriteFile(p, raw, 0o644)

	// The stripped library alone, with the debug dir configured: joined.
	s := openTestStore(t, StoreOptions{DebugDirs: []string{debugRoot}})
	id, err := s.AddFile(l.stripped)
	if err != nil || id != l.buildID {
		t.Fatalf("AddFile: %s %v", id, err)
	}
	checkStatics(t, s, l)

	// By Build-ID only (the server finds the node's debug file).
	s = openTestStore(t, StoreOptions{DebugDirs: []string{debugRoot}})
	if ok, err := s.FromDebugDirs(l.buildID); !ok || err != nil {
		t.Fatalf("FromDebugDirs: %v %v", ok, err)
	}
	checkStatics(t, s, l)
	if ok, err := s.FromDebugDirs("00ff"); ok || err != nil {
		t.Fatalf("absent: %v %v", ok, err)
	}

	// .gnu_debuglink next to the binary.
	s = openTestStore(t, StoreOptions{DebugDirs: []string{}})
	if _, err := s.AddFile(l.stripped); err != nil {
		t.Fatal(err)
	}
	checkStatics(t, s, l)

	// A file without a build-id is refused with the reason.
	needTool(t, "gcc")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "n.c"), []byte("int f(void){return 1;}"), 0o644)
	run(t, dir, "gcc", "-shared", "-fPIC", "-Wl,--build-id=none", "-o", "n.so", "n.c")
	if _, err := s.AddFile(filepath.Join(dir, "n.so")); err == nil {
		t.Fatal("no error for a file without build-id")
	}
}

func checkStatics(t *testing.T, s *Store, l *sparseLib) {
	t.Helper()
	ix, c, err := s.Open(l.buildID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, r := range l.statics {
		if n, ok := ix.Lookup(r[0]); !ok || n != name {
			t.Fatalf("%s: %q %v", name, n, ok)
		}
	}
}
