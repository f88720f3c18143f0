package chaos

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/testutil/tmpfs"
)

// TestChaos_D7_DiskFull (D7): the data directory lives on a 16 MiB tmpfs
// (the server's free-space reserve set small with its flag; without such a
// flag, 512 MiB so a default reserve of 256 MiB fits); a filler file and
// ingest fill it. Assertions:
//   - ingest on the full disk answers 507 with Retry-After (never 500, never
//     a crash), so does a job registration, and the process stays up;
//   - reads keep working: /healthz, GET job, report, export;
//   - a SIGKILL with the disk still full, then a restart, serves reads;
//   - once the filler is removed, ingest succeeds again by itself (no
//     restart), and every acknowledged vector is stored.
//
// It needs root to mount the tmpfs and skips, saying why, otherwise.
func TestChaos_D7_DiskFull(t *testing.T) {
	enabled(t)
	// A store may keep a free-space reserve; make it fit a small disk.
	flags := firstFlag(t, strconv.Itoa(2<<20), "min-free", "min-free-bytes", "disk-reserve", "reserve-bytes", "free-reserve")
	size := "16m"
	if flags == nil {
		size = "512m"
	}
	mnt := tmpfs.Mount(t, size)
	data := filepath.Join(mnt, "data")
	s := startServer(t, data, flags...)
	s.register(t, "disk", 4)

	var acked []key
	step := int64(0)
	post := func() reply {
		t.Helper()
		ks := grid(step, 64, 0, 1, 2, 3) // 256 vectors, ~25 KB of JSON
		r, err := call(quick, "POST", s.URL()+"/api/v1/jobs/disk/vectors", jsonType, jsonBatch(ks), nil)
		if err != nil {
			t.Fatalf("ingest on the full disk: %v (server alive: %v)", err, s.alive())
		}
		if r.status == http.StatusOK {
			acked = append(acked, ks...)
			step += 64
		}
		return r
	}
	for range 10 {
		if r := post(); r.status != http.StatusOK {
			t.Fatalf("ingest before the disk is full: %d %s", r.status, clip(string(r.body), 300))
		}
	}

	used := dirSize(data)
	filler := filepath.Join(mnt, "filler")
	fillerBytes := tmpfs.Fill(t, filler)
	var (
		statuses statusCounts
		first    reply
	)
	start := time.Now()
	for i := 0; i < 2000 && first.status == 0; i++ {
		if r := post(); r.status != http.StatusOK {
			first = r
		}
		statuses.add(200)
	}
	if first.status == 0 {
		t.Fatalf("2000 batches (~50 MB) stored on a full 16 MiB disk? filler %d bytes", fillerBytes)
	}
	toFull := time.Since(start)
	// A few more attempts: every one must be a clean 507.
	statuses = statusCounts{}
	statuses.add(first.status)
	for range 5 {
		statuses.add(post().status)
	}
	reg := s.do(t, "PUT", "/api/v1/jobs/disk-2", jsonType, jobJSON("disk-2", 2))
	if reg.status != http.StatusInsufficientStorage {
		t.Errorf("job registration on a full disk: %d %s, want 507", reg.status, clip(string(reg.body), 200))
	}
	t.Logf("disk full (%s tmpfs, server flags %v): store %.1f MiB, filler %.1f MiB; first refusal after %v: %d %s (Retry-After %q); then %v",
		size, flags, mib(used), mib(fillerBytes), toFull.Round(time.Millisecond), first.status, clip(string(first.body), 200), first.header.Get("Retry-After"), &statuses)
	if first.status != http.StatusInsufficientStorage {
		t.Errorf("ingest on a full disk answered %d, want 507", first.status)
	}
	if first.header.Get("Retry-After") == "" {
		t.Errorf("the 507 has no Retry-After header")
	}
	if n := statuses.other(http.StatusInsufficientStorage); n > 0 {
		t.Errorf("%d answers other than 507 on the full disk: %v", n, &statuses)
	}
	// "A metric and a log line say so": show them (names are the store's).
	if m, err := call(quick, "GET", s.URL()+"/metrics", "", nil, nil); err == nil {
		var lines []string
		for _, l := range strings.Split(string(m.body), "\n") {
			name, _, _ := strings.Cut(l, "{")
			name, _, _ = strings.Cut(name, " ")
			if strings.HasPrefix(name, "laggard_") && (strings.Contains(name, "disk") || strings.Contains(name, "space") || strings.Contains(name, "free")) {
				lines = append(lines, l)
			}
		}
		t.Logf("disk full: metrics %q", lines)
	}
	time.Sleep(200 * time.Millisecond) // a crash after the answer shows now
	if !s.alive() {
		t.Fatalf("the server exited on a full disk (%v)", s.exitError())
	}
	checkReads(t, s, "on the full disk", len(acked))

	// D7: "it cannot restart while the disk is full".
	s.kill()
	if err := s.start(); err != nil {
		t.Errorf("restart with the disk still full failed: %v", err)
		os.Remove(filler)
		if err := s.start(); err != nil {
			t.Fatalf("restart after freeing the disk: %v", err)
		}
	} else {
		checkReads(t, s, "after a restart on the full disk", len(acked))
		if r := post(); r.status != http.StatusInsufficientStorage {
			t.Errorf("ingest after a restart on the full disk: %d, want 507", r.status)
		}
	}

	// Space returns: ingest recovers by itself.
	if err := os.Remove(filler); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	start = time.Now()
	var last reply
	for {
		if last = post(); last.status == http.StatusOK {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("ingest did not recover within 30s of freeing space: last %d %s", last.status, clip(string(last.body), 300))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("disk full: ingest recovered %v after the filler was removed", time.Since(start).Round(time.Millisecond))
	for range 5 {
		if r := post(); r.status != http.StatusOK {
			t.Errorf("ingest after recovery: %d %s", r.status, clip(string(r.body), 300))
		}
	}
	want := map[key]bool{}
	for _, k := range acked {
		want[k] = true
	}
	s.exported(t, "disk", func(k key) { delete(want, k) })
	if len(want) > 0 {
		t.Errorf("%d of %d acknowledged vectors missing after the disk-full episode", len(want), len(acked))
	}
}

// checkReads asserts the read side answers while ingest cannot write.
func checkReads(t *testing.T, s *server, when string, acked int) {
	t.Helper()
	for _, path := range []string{"/healthz", "/api/v1/jobs", "/api/v1/jobs/disk", "/api/v1/jobs/disk/report?last=20", "/api/v1/jobs/disk/export"} {
		r, err := call(quick, "GET", s.URL()+path, "", nil, nil)
		if err != nil || r.status != http.StatusOK {
			t.Errorf("GET %s %s: %d %v %s", path, when, r.status, err, clip(string(r.body), 200))
		}
	}
	if n := s.storedVectors(t, "disk"); n < int64(acked) {
		t.Errorf("%s: the job reports %d vectors, %d were acknowledged", when, n, acked)
	}
}

// dirSize is the bytes of the files under dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
