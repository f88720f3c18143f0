// Package tmpfs gives tests a small real file system to fill up (disk-full
// tests of the store and of the server binary).
package tmpfs

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size (as mount's size= option, e.g. "8m") at a
// fresh directory, unmounted when the test ends. It skips the test, saying
// why, where mounting is refused (not root, no CAP_SYS_ADMIN).
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("skipped: mounting a %s tmpfs needs root (euid %d)", size, os.Geteuid())
	}
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("skipped: mount -t tmpfs refused (needs CAP_SYS_ADMIN): %v %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes path until its file system is full and returns the bytes
// written.
func Fill(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Fatalf("filling %s: %v", path, err)
		}
	}
}
