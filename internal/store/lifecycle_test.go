package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/testutil/tmpfs"
)

// fakeFree is an injectable free-space reading.
type fakeFree struct{ free atomic.Int64 }

func (f *fakeFree) fn(string) (uint64, error) { return uint64(f.free.Load()), nil }

func vecs(job string, from, n int64, ranks int) []stagevec.Vector {
	var out []stagevec.Vector
	for s := from; s < from+n; s++ {
		for r := range ranks {
			out = append(out, mkVec(s, r, 0))
		}
	}
	return out
}

// D7 (unit): below the free-space reserve writes fail with ErrDiskFull —
// not a Pebble panic — reads keep working, and writes resume by
// themselves once space returns (within the 1 s reading cache).
func TestD7_ReserveRefusesWrites(t *testing.T) {
	ff := &fakeFree{}
	ff.free.Store(1 << 30)
	s, err := Open(t.TempDir(), Options{Logger: quiet, MemTableSize: 1 << 20, MinFreeBytes: 64 << 20, FreeSpace: ff.fn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	s.space.now = func() time.Time { return now }
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("a", vecs("a", 0, 4, 2)); err != nil {
		t.Fatal(err)
	}
	ff.free.Store(10 << 20)
	now = now.Add(2 * time.Second)
	err = s.Append("a", vecs("a", 4, 4, 2))
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append below the reserve: %v, want ErrDiskFull", err)
	}
	if err := s.PutJob(testJob("b")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("register below the reserve: %v, want ErrDiskFull", err)
	}
	if u, _ := s.Usage(); !u.DiskFull || u.FreeBytes != 10<<20 {
		t.Fatalf("usage %+v, want disk full with 10 MiB free", u)
	}
	if got := collect(t, s, "a", 0, 100); len(got) != 8 {
		t.Fatalf("read %d vectors while the disk is full, want 8", len(got))
	}
	ff.free.Store(1 << 30)
	if err := s.Append("a", vecs("a", 4, 4, 2)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("within the reading's cache: %v", err) // the reading is 1 s old at most
	}
	now = now.Add(2 * time.Second)
	if err := s.Append("a", vecs("a", 4, 4, 2)); err != nil {
		t.Fatalf("after space returned: %v", err)
	}
	if st, _ := s.Stats("a"); st.Vectors != 16 {
		t.Fatalf("stats %+v", st)
	}
}

// A burst of writes within one reading is charged against it, so the
// writes between two readings cannot overshoot the reserve.
func TestReserveChargesWritesBetweenReadings(t *testing.T) {
	ff := &fakeFree{}
	ff.free.Store(4 << 20)
	g := newSpaceGuard("x", 1<<20, ff.fn, quiet)
	now := time.Now()
	g.now = func() time.Time { return now }
	admitted := 0
	for range 10 {
		if g.check(1<<20) == nil {
			admitted++
			ff.free.Add(-1 << 20) // the filesystem sees the write
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d writes of 1 MiB with 4 MiB free and a 1 MiB reserve, want 3", admitted)
	}
}

// A store opened on a full disk opens read-only (a writable open would
// replay the WAL and write a MANIFEST, which Pebble treats as fatal on
// ENOSPC), serves reads, refuses writes with ErrDiskFull, and reopens
// writable by itself once space returns.
func TestD7_OpenOnFullDiskReadOnly(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append("a", vecs("a", 0, 3, 2)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	ff := &fakeFree{}
	ff.free.Store(1 << 20)
	s2, err := Open(dir, Options{Logger: quiet, MinFreeBytes: 64 << 20, FreeSpace: ff.fn})
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	defer s2.Close()
	if u, _ := s2.Usage(); !u.ReadOnly {
		t.Fatalf("usage %+v, want read-only", u)
	}
	if got := collect(t, s2, "a", 0, 10); len(got) != 6 {
		t.Fatalf("read %d vectors, want 6", len(got))
	}
	if err := s2.Append("a", vecs("a", 3, 1, 2)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append on a read-only store: %v", err)
	}
	ff.free.Store(1 << 30)
	s2.space.now = func() time.Time { return time.Now().Add(time.Hour) } // the reading is stale
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s2.Append("a", vecs("a", 3, 1, 2))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrDiskFull) || time.Now().After(deadline) {
			t.Fatalf("append after space returned: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := collect(t, s2, "a", 0, 10); len(got) != 8 {
		t.Fatalf("read %d vectors after reopening, want 8", len(got))
	}
}

// D7: on a real full filesystem (an 8 MiB tmpfs) ingest fails with
// ErrDiskFull instead of crashing the process (the old store panicked in
// pebbleLogger.Fatalf after three failed commits), reads keep working, the
// store reopens on the full disk, and ingest works again once space is
// freed.
func TestD7_DiskFull(t *testing.T) {
	mnt := tmpfs.Mount(t, "8m")
	dir := filepath.Join(mnt, "data")
	// The reserve leaves Pebble room to flush and compact what fits
	// above it.
	opt := Options{Logger: quiet, CacheSize: 1 << 20, MemTableSize: 256 << 10, MinFreeBytes: 4 << 20}
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	var stored int64
	for i := int64(0); ; i++ {
		err := s.Append("a", vecs("a", i*8, 8, 16))
		if errors.Is(err, ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		stored += 8 * 16
		if i > 10000 {
			t.Fatal("the disk never filled")
		}
	}
	// Let Pebble finish its flushes and compactions, then fill what the
	// reserve kept, as another process would.
	waitQuiet(t, s)
	tmpfs.Fill(t, filepath.Join(mnt, "filler"))
	time.Sleep(1100 * time.Millisecond) // let the free-space reading expire
	for i := range 5 {
		if err := s.Append("a", vecs("a", 1<<20+int64(i)*8, 8, 16)); !errors.Is(err, ErrDiskFull) {
			t.Fatalf("append %d on a full disk: %v, want ErrDiskFull", i, err)
		}
	}
	if st, err := s.Stats("a"); err != nil || st.Vectors != stored {
		t.Fatalf("stats %+v %v, want %d vectors", st, err, stored)
	}
	if got := collect(t, s, "a", 0, 1<<30); int64(len(got)) != stored {
		t.Fatalf("read %d vectors on a full disk, want %d", len(got), stored)
	}
	if err := s.Close(); err != nil {
		t.Logf("close on a full disk: %v", err) // the WAL's trailer may not fit
	}
	closed = true

	// Restart while the disk is full: opens read-only, reads work.
	s, err = Open(dir, opt)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	closed = false
	if got := collect(t, s, "a", 0, 1<<30); int64(len(got)) != stored {
		t.Fatalf("after restart read %d vectors, want %d", len(got), stored)
	}
	if err := s.Append("a", vecs("a", 1<<21, 1, 16)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append after restart on a full disk: %v", err)
	}

	// Free space: ingest works again by itself.
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Append("a", vecs("a", 1<<21, 1, 16))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrDiskFull) || time.Now().After(deadline) {
			t.Fatalf("append after freeing space: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, _ := s.Stats("a"); st.Vectors != stored+16 {
		t.Fatalf("stats %+v, want %d vectors", st, stored+16)
	}
}

// waitQuiet waits until Pebble has no flush or compaction running.
func waitQuiet(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for quiet := 0; quiet < 5; {
		m := s.db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Flush.NumInProgress == 0 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatal("Pebble did not settle")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DeleteJob removes the job, its stats and every vector durably, lets
// the id be registered afresh, and Reclaim gives the space back.
func TestDeleteJob(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir)
	for _, id := range []string{"a", "b"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
		if err := s.Append(id, vecs(id, 0, 200, 64)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	before, _ := s.JobDiskBytes("a")
	if err := s.DeleteJob("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteJob("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Job("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Job after delete: %v", err)
	}
	if n, err := s.Reclaim(); err != nil || n != 1 {
		t.Fatalf("Reclaim: %d %v", n, err)
	}
	after, _ := s.JobDiskBytes("a")
	if before == 0 || after > before/10 {
		t.Errorf("job a's range: %d bytes before delete, %d after Reclaim", before, after)
	}
	s.Close()
	s = openTest(t, dir)
	if _, err := s.Job("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted job back after restart: %v", err)
	}
	if got := collect(t, s, "b", 0, 1<<30); len(got) != 200*64 {
		t.Fatalf("job b has %d vectors after a's delete, want %d", len(got), 200*64)
	}
	// Re-registered, the id starts empty.
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats("a"); st.Vectors != 0 {
		t.Fatalf("re-registered job has stats %+v", st)
	}
	if got := collect(t, s, "a", 0, 1<<30); len(got) != 0 {
		t.Fatalf("re-registered job has %d old vectors", len(got))
	}
}

// A delete racing appends of the same job never leaves vectors or stats
// of a job that is gone.
func TestDeleteJobRacesAppend(t *testing.T) {
	s := openTest(t, t.TempDir())
	for round := range 20 {
		if err := s.PutJob(testJob("a")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					err := s.Append("a", vecs("a", int64(round*1000+w*10+i), 1, 4))
					if err != nil && !errors.Is(err, ErrNotFound) {
						t.Errorf("append: %v", err)
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%3) * time.Millisecond)
		if err := s.DeleteJob("a"); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: vecPrefix("a"), UpperBound: vecPrefixEnd("a")})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		it.Close()
		if _, closer, err := s.db.Get(statsKey("a")); err == nil {
			closer.Close()
			t.Fatalf("round %d: stats key of a deleted job", round)
		}
		if n != 0 {
			t.Fatalf("round %d: %d vectors of a deleted job", round, n)
		}
	}
}

// D9: the job count and the size of job metadata are bounded with errors
// naming the limit.
func TestD9_JobLimits(t *testing.T) {
	s, err := Open(t.TempDir(), Options{Logger: quiet, MaxJobs: 3, MaxJobBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if err := s.PutJob(testJob(fmt.Sprint("j", i))); err != nil {
			t.Fatal(err)
		}
	}
	err = s.PutJob(testJob("j3"))
	if !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("4th job: %v, want ErrTooManyJobs", err)
	}
	t.Log(err)
	if err := s.PutJob(testJob("j0")); err != nil { // an update is not a new job
		t.Fatalf("update at the limit: %v", err)
	}
	big := testJob("j1")
	big.Labels = map[string]string{"x": string(make([]byte, 8<<10))}
	if err := s.PutJob(big); err == nil {
		t.Fatal("a job over MaxJobBytes was stored")
	}
	if err := s.DeleteJob("j2"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutJob(testJob("j3")); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

// JobsPage pages in id order and decodes only the page.
func TestJobsPage(t *testing.T) {
	s := openTest(t, t.TempDir())
	for i := range 7 {
		if err := s.PutJob(testJob(fmt.Sprintf("j%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		js, next, err := s.JobsPage(after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range js {
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		after = next
	}
	if fmt.Sprint(got) != "[j00 j01 j02 j03 j04 j05 j06]" {
		t.Fatalf("pages %v", got)
	}
}

// Stats written before the last-write time was kept (24 bytes) still
// load; new ones carry it, and JobAges orders by it.
func TestStatsLastWrite(t *testing.T) {
	st := JobStats{FirstStep: 1, LastStep: 5, Vectors: 9}
	old := encodeStats(st, 0)[:24]
	got, lw, err := decodeStats(statsKey("x"), old)
	if err != nil || got != st || lw != 0 {
		t.Fatalf("24-byte stats: %+v %d %v", got, lw, err)
	}
	got, lw, err = decodeStats(statsKey("x"), encodeStats(st, 1234))
	if err != nil || got != st || lw != 1234 {
		t.Fatalf("32-byte stats: %+v %d %v", got, lw, err)
	}
	s := openTest(t, t.TempDir())
	for _, id := range []string{"old", "new"} {
		if err := s.PutJob(testJob(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Append("old", vecs("old", 0, 1, 1)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := s.Append("new", vecs("new", 0, 1, 1)); err != nil {
		t.Fatal(err)
	}
	ages, err := s.JobAges()
	if err != nil || len(ages) != 2 || ages[0].ID != "old" || ages[1].LastWrite.IsZero() {
		t.Fatalf("JobAges %+v %v", ages, err)
	}
}

// Retention reads job ages, then deletes: a job written after its age was
// read is kept (DeleteIdleJob checks again under the write lock).
func TestDeleteIdleJobKeepsResumedJob(t *testing.T) {
	s := openTest(t, t.TempDir())
	if err := s.PutJob(testJob("a")); err != nil {
		t.Fatal(err)
	}
	readAt := time.Now().Add(-time.Second) // the age was read before this write
	if err := s.Append("a", vecs("a", 0, 10, 2)); err != nil {
		t.Fatal(err)
	}
	deleted, err := s.DeleteIdleJob("a", readAt)
	if err != nil || deleted {
		t.Fatalf("DeleteIdleJob of a job written since: deleted=%v err=%v, want kept", deleted, err)
	}
	if got := collect(t, s, "a", 0, 100); len(got) != 20 {
		t.Fatalf("kept job has %d vectors, want 20", len(got))
	}
	deleted, err = s.DeleteIdleJob("a", time.Now().Add(time.Second))
	if err != nil || !deleted {
		t.Fatalf("DeleteIdleJob of an idle job: deleted=%v err=%v", deleted, err)
	}
	if _, err := s.Job("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("idle job still there: %v", err)
	}
}
