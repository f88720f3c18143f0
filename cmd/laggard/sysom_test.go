package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/server"
	"github.com/laggard-dev/laggard/internal/store"
)

// sysomTestServer is a real server over a temporary data directory (its
// symbol store under DATA/symbols) with job "sj" of 4 ranks.
func sysomTestServer(t *testing.T) (url, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(dir, store.Options{Logger: quiet, NoSync: true, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{DataDir: dir, Logger: quiet, Greyhound: server.Config{}.Greyhound}, st)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { ts.Close(); srv.Close(); st.Close() })
	req, _ := http.NewRequest(http.MethodPut, ts.URL+"/api/v1/jobs/sj", strings.NewReader(`{"world_size":4}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("PUT job: %v %v", err, res)
	}
	res.Body.Close()
	return ts.URL, dir
}

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

func TestProfileImportExportAndSysom(t *testing.T) {
	url, _ := sysomTestServer(t)
	dir := t.TempDir()
	folded := filepath.Join(dir, "pyspy.txt")
	os.WriteFile(folded, []byte("main;train_step;forward 40\nmain;train_step;backward 40\nmain;dataloader;read 20\n"), 0o644)
	const from, to = "2025-07-01T12:00:00Z", "2025-07-01T12:01:00Z"
	for r := range 4 {
		out, errOut, code := runCmd(t, "profile", "import", "-server", url, "-job", "sj", "-rank", string(rune('0'+r)), "-from", from, "-to", to, folded)
		if code != 0 || !strings.Contains(out, "imported") {
			t.Fatalf("import rank %d: %d %s %s", r, code, out, errOut)
		}
	}
	out, errOut, code := runCmd(t, "profile", "export", "-server", url, "-job", "sj", "-rank", "2", "-format", "collapsed", "-from", from, "-to", "2025-07-01T12:02:00Z")
	if code != 0 || !strings.Contains(out, "main;train_step;forward 40") {
		t.Fatalf("export: %d %q %s", code, out, errOut)
	}
	pb := filepath.Join(dir, "r.pb.gz")
	if _, errOut, code := runCmd(t, "profile", "export", "-server", url, "-job", "sj", "-group", "all", "-o", pb); code != 0 {
		t.Fatalf("export pprof: %d %s", code, errOut)
	}
	if b, _ := os.ReadFile(pb); len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("pprof export is not gzip: % x", b[:min(len(b), 4)])
	}
	out, errOut, code = runCmd(t, "sysom", "-server", url, "-job", "sj", "-from", from, "-to", "2025-07-01T12:02:00Z")
	if code != 0 || !strings.Contains(out, "job sj · SysOM-AI · window 2025-07-01 12:00:00 → 12:02:00 UTC") || !strings.Contains(out, "4 ranks with stacks") {
		t.Fatalf("sysom: %d\n%s\n%s", code, out, errOut)
	}
	out, _, code = runCmd(t, "sysom", "--json", "-server", url, "sj", "-from", from, "-to", to)
	var rep map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep["window"] == nil || rep["slow_ranks"] == nil {
		t.Fatalf("sysom --json: %d %s", code, out)
	}
	// -incarnation reaches the server's rule: "all" is read, a launch the
	// job does not have is the server's 400 naming the parameter, and a
	// value that is no launch is refused before any request.
	if out, errOut, code := runCmd(t, "sysom", "--json", "-server", url, "-job", "sj", "-incarnation", "all", "-from", from, "-to", to); code != 0 || !strings.Contains(out, `"window"`) {
		t.Errorf("-incarnation all: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := runCmd(t, "sysom", "-server", url, "-job", "sj", "-incarnation", "3"); code != 1 || !strings.Contains(errOut, "no incarnation 3") {
		t.Errorf("-incarnation 3 of a job with one launch: %d %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "sysom", "-server", url, "-job", "sj", "-incarnation", "latest"); code != 1 || !strings.Contains(errOut, "-incarnation") {
		t.Errorf("-incarnation latest: %d %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "sysom", "-server", url, "-job", "nope"); code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("unknown job: %d %s", code, errOut)
	}
	if _, _, code := runCmd(t, "profile", "export", "-server", url, "-job", "sj"); code != 1 {
		t.Errorf("export without a rank: %d", code)
	}
}

func TestSymbolsAdd(t *testing.T) {
	lib := ""
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib64/libc.so.6"} {
		if f, err := elf.Open(p); err == nil {
			id, _ := elfinfo.BuildID(f)
			f.Close()
			if id != "" {
				lib = p
				break
			}
		}
	}
	if lib == "" {
		t.Skip("no libc with a GNU Build-ID to upload")
	}
	url, _ := sysomTestServer(t)
	out, errOut, code := runCmd(t, "symbols", "add", "-server", url, lib)
	if code != 0 || !strings.Contains(out, "uploaded") {
		t.Fatalf("upload: %d %s %s", code, out, errOut)
	}
	if out, _, code := runCmd(t, "symbols", "add", "-server", url, lib); code != 0 || !strings.Contains(out, "already on the server") {
		t.Errorf("second upload: %d %s", code, out)
	}
	data := t.TempDir()
	if out, errOut, code := runCmd(t, "symbols", "add", "-data", data, lib); code != 0 || !strings.Contains(out, "added") {
		t.Errorf("local add: %d %s %s", code, out, errOut)
	}
	notELF := filepath.Join(t.TempDir(), "x")
	os.WriteFile(notELF, []byte("hello"), 0o644)
	if _, errOut, code := runCmd(t, "symbols", "add", "-server", url, notELF); code != 1 || !strings.Contains(errOut, notELF) {
		t.Errorf("not an ELF: %d %s", code, errOut)
	}
	if _, _, code := runCmd(t, "symbols", "list"); code != 2 {
		t.Errorf("unknown subcommand: %d", code)
	}
}
