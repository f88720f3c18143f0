package agent

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
)

// TestSymbolLocateConfined (review finding 1/2): a process whose root
// holds a Build-ID debug path (or whose mapped path) is a symlink to a
// host file, or a FIFO, never makes the uploader open that host file or
// block; the genuine binary is still found and verified.
func TestSymbolLocateConfined(t *testing.T) {
	libPath, libID := libWithBuildID(t)
	lib, err := os.ReadFile(libPath)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := os.ReadFile("/etc/hostname")
	if err != nil || len(secret) == 0 {
		t.Skip("no /etc/hostname to stand in for a host secret")
	}
	tmp := t.TempDir()
	proot := filepath.Join(tmp, "proc", "4242", "root")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(proot, "usr/lib"), 0o755))
	must(os.WriteFile(filepath.Join(proot, "usr/lib/libx.so"), lib, 0o755))
	bp, _ := elfinfo.BuildIDPath("/usr/lib/debug", libID)
	must(os.MkdirAll(filepath.Join(proot, filepath.Dir(bp)), 0o755))
	must(os.Symlink("/etc/hostname", filepath.Join(proot, bp)))
	must(os.Symlink("/etc/hostname", filepath.Join(proot, "usr/lib/evil.so")))
	must(syscall.Mkfifo(filepath.Join(proot, "usr/lib/fifo.so"), 0o644))

	u := &symUploader{root: tmp, debugDir: "/usr/lib/debug"}
	read := func(path string) ([]byte, error) {
		type res struct {
			b   []byte
			err error
		}
		ch := make(chan res, 1)
		go func() {
			fh, err := u.locate(symReq{id: libID, path: path, pid: 4242})
			if err != nil {
				ch <- res{nil, err}
				return
			}
			defer fh.Close()
			b, err := io.ReadAll(fh)
			ch <- res{b, err}
		}()
		select {
		case r := <-ch:
			return r.b, r.err
		case <-time.After(5 * time.Second):
			t.Fatalf("locate(%s) blocked", path)
			return nil, nil
		}
	}
	got, err := read("/usr/lib/libx.so")
	if err != nil {
		t.Fatalf("genuine binary: %v", err)
	}
	if !bytes.Equal(got, lib) {
		t.Fatalf("uploaded %d bytes (secret? %v), want the binary's %d", len(got), bytes.Equal(got, secret), len(lib))
	}
	for _, p := range []string{"/usr/lib/evil.so", "/usr/lib/fifo.so", "/../../../../etc/hostname"} {
		if got, err := read(p); err == nil && !bytes.Equal(got, lib) {
			t.Errorf("%s: uploaded %d bytes that are not the binary", p, len(got))
		}
	}
}
