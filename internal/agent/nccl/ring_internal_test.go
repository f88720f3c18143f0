package nccl

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// R3: a read of a mapping whose file was truncated faults (SIGBUS); guard
// turns that into ErrShrunk instead of killing the agent.
func TestGuardRecoversFaultOnTruncatedMapping(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 2*HeaderSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, 2*HeaderSize, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	var b byte
	err = guard(func() error { b = m[HeaderSize+5]; return nil })
	if !errors.Is(err, ErrShrunk) {
		t.Fatalf("guard: %v (read %d)", err, b)
	}
}
