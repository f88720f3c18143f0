package store

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/testutil/tmpfs"
)

// walFiles counts the write-ahead log files in dir.
func walFiles(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if strings.HasSuffix(e.Name(), ".log") {
			n++
		}
	}
	return n
}

// fillJob appends batches to job from *step until the store refuses one
// (ErrDiskFull) or max batches went in; it returns how many did.
func fillJob(t *testing.T, s *Store, job string, step *int64, max int) int {
	t.Helper()
	for i := range max {
		vs := make([]stagevec.Vector, 0, 512)
		for r := range 512 {
			vs = append(vs, mkVec(*step, r, 0))
		}
		if err := s.Append(job, vs); err != nil {
			if errors.Is(err, ErrDiskFull) {
				return i
			}
			t.Fatalf("append: %v", err)
		}
		*step++
	}
	return max
}

// eventually retries an append of one vector for up to 10 s.
func eventually(t *testing.T, s *Store, job string, step int64, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Append(job, []stagevec.Vector{mkVec(step, 0, 0)})
		if err == nil {
			return
		}
		if !errors.Is(err, ErrDiskFull) || time.Now().After(deadline) {
			free, _ := statfsFree(s.dir)
			t.Fatalf("%s: ingest did not resume within 10 s: %v (free %d KiB, %d WAL files)", when, err, free>>10, walFiles(t, s.dir))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Issue 16 item 12: Pebble kept up to five obsolete WAL files, each
// preallocated to 1.1 memtables, to reuse — their space came back only
// when a new WAL was made, which needs writes. Obsolete logs are deleted
// now: after a flush only the live WAL is left.
func TestObsoleteWALsAreDeleted(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quiet, MemTableSize: 1 << 20, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutJob(testJob("j")); err != nil {
		t.Fatal(err)
	}
	step := int64(0)
	fillJob(t, s, "j", &step, 200) // ~6 MB of WAL: several memtables
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // obsolete files go in the background
	if n := walFiles(t, dir); n > 2 {
		t.Fatalf("%d WAL files after a flush, want the live one (obsolete logs kept for reuse hold their space)", n)
	}
}

// Issue 16 item 12: on a small volume the store's defaults (64 MiB
// memtables, each WAL preallocated to 70 MiB; a 256 MiB reserve) left
// less free space than the reserve with the store's own logs, so ingest
// never resumed after a disk-full episode (here: never started). Its
// defaults now scale with the volume. On a 64 MiB tmpfs with default
// options: ingest works, fills the volume to its reserve and is refused,
// resumes once the data is deleted, is refused while another file fills
// the disk and resumes once it is removed — by itself, no restart.
func TestSmallVolumeIngestResumes(t *testing.T) {
	mnt := tmpfs.Mount(t, "64m")
	dir := filepath.Join(mnt, "data")
	s, err := Open(dir, Options{Logger: testLog})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	t.Logf("64 MiB volume: memtable %d MiB, reserve %d MiB", s.po.MemTableSize>>20, s.opt.MinFreeBytes>>20)
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatalf("registering on an empty 64 MiB volume: %v", err)
	}
	step := int64(0)
	if n := fillJob(t, s, "a", &step, 1); n != 1 {
		t.Fatal("the first append on an empty 64 MiB volume was refused for lack of space")
	}
	n := fillJob(t, s, "a", &step, 20_000)
	if n == 20_000 {
		t.Fatal("the store never reached its reserve")
	}
	free, _ := statfsFree(dir)
	t.Logf("refused after %d more batches of 512 vectors; %d KiB free, %d WAL files", n, free>>10, walFiles(t, dir))
	// Retention deletes the job: its space comes back and so does ingest.
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reclaim(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := s.PutJob(testJob("b"))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrDiskFull) || time.Now().After(deadline) {
			t.Fatalf("registering a job after the data was deleted: %v", err)
		}
	}
	eventually(t, s, "b", 0, "after the data was deleted")
	// Another file fills the disk, then goes.
	filler := filepath.Join(mnt, "filler")
	tmpfs.Fill(t, filler)
	time.Sleep(1100 * time.Millisecond) // the free-space reading is cached for 1 s
	if err := s.Append("b", []stagevec.Vector{mkVec(1, 0, 0)}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append with the disk filled by another file: %v, want ErrDiskFull", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, s, "b", 2, "after the filler was removed")
	// And a restart still opens writable.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("b", []stagevec.Vector{mkVec(3, 0, 0)}); err != nil {
		t.Fatalf("append after a restart: %v", err)
	}
}

var testLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
