//go:build !(linux || darwin)

package symbolize

import "os"

// mapped reads a symbol file with pread where mmap is not wired up.
type mapped struct{ f *os.File }

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
	return &mapped{f: f}, fi.Size(), nil
}

func (m *mapped) ReadAt(p []byte, off int64) (int, error) { return m.f.ReadAt(p, off) }
func (m *mapped) Close() error                            { return m.f.Close() }
