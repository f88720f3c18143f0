package cpuprof

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// TestFileOpenFailureRetried (review finding 5): a file whose first open
// failed (a short-lived process exited before map_files was read) is
// opened again after a backoff, not poisoned for the agent's life.
func TestFileOpenFailureRetried(t *testing.T) {
	maps, err := procmaps.Read(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	var m procmaps.Mapping
	for _, x := range maps {
		if x.Exec() && x.File() && filepath.Base(x.Path) != "" {
			m = x
			break
		}
	}
	if m.Path == "" {
		t.Skip("no file-backed executable mapping in this process")
	}
	tr := newTracker(nil)
	const gone = 1 << 30 // no such pid
	f := tr.file(gone, m)
	if f.err == nil {
		t.Fatal("opening through a missing pid succeeded")
	}
	if g := tr.file(os.Getpid(), m); g.err == nil {
		t.Fatal("retried before the backoff")
	}
	f.retryAt = time.Now().Add(-time.Second)
	g := tr.file(os.Getpid(), m)
	if g.err != nil || len(g.loads) == 0 {
		t.Fatalf("after the backoff: err %v, %d PT_LOADs", g.err, len(g.loads))
	}
	if openBackoff(1) != time.Second || openBackoff(30) != 5*time.Minute {
		t.Errorf("backoff 1: %v, 30: %v", openBackoff(1), openBackoff(30))
	}
}

// TestOpenMappedFIFO (review finding 2): a mapping path the process
// turned into a FIFO is refused without blocking.
func TestOpenMappedFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "lib.so")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// No such mapping in map_files: the root fallback meets the FIFO.
		_, c, err := openMapped(os.Getpid(), procmaps.Mapping{Start: 0x1000, Limit: 0x2000, Path: p})
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("FIFO opened as an ELF")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("openMapped blocked on a FIFO")
	}
}
