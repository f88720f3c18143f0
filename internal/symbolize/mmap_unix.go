//go:build linux || darwin

package symbolize

import (
	"io"
	"os"
	"syscall"
)

// mapped is a read-only mapping of a symbol file: lookups slice it without
// a system call, and the kernel pages in only what lookups touch — the
// file is never read whole (§4 "without loading the entire file").
type mapped struct {
	b []byte
	f *os.File
}

func openMapped(path string) (*mapped, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	size := fi.Size()
	if size == 0 || int64(int(size)) != size {
		return &mapped{f: f}, size, nil // OpenIndex rejects it; ReadAt falls back to the file
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return &mapped{f: f}, size, nil // fall back to pread
	}
	f.Close()
	return &mapped{b: b}, size, nil
}

func (m *mapped) ReadAt(p []byte, off int64) (int, error) {
	if m.b == nil {
		return m.f.ReadAt(p, off)
	}
	if off < 0 || off > int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *mapped) slice(off, n int64) ([]byte, bool) {
	if m.b == nil {
		return nil, false
	}
	if off < 0 || n < 0 || off > int64(len(m.b)) || n > int64(len(m.b))-off {
		return nil, false
	}
	return m.b[off : off+n], true
}

func (m *mapped) Close() error {
	if m.b != nil {
		b := m.b
		m.b = nil
		return syscall.Munmap(b)
	}
	if m.f != nil {
		return m.f.Close()
	}
	return nil
}
