package main

import (
	"bufio"
	"context"
	"debug/elf"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/demo"
)

// nobody is the unprivileged user the test registers as.
const nobody = 65534

// hiddenFrame is stack.HiddenFrame, spelled out so the test also builds
// against the release before it (where it must fail).
const hiddenFrame = "[other process] (hidden)"

// TestAgentUnprivilegedRegistrantSeesNoOtherUsers (issue 16 item 10): a
// local user (here nobody) registers its own process on the root agent's
// socket, while a root-only process burns the same CPU. The job's
// collapsed profile must not name the root process nor show its stacks
// (only "[other process] (hidden)" with its share of the core), the
// root-only binary must not reach the symbol store, and the user may not
// register a pid it does not own. The user's own binary, which it can
// read, is still uploaded (the check is not "upload nothing").
func TestAgentUnprivilegedRegistrantSeesNoOtherUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("profiles for ~15 s")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent samples every process and the test starts one as nobody")
	}
	if err := demo.ProbeProfiler(); err != nil {
		t.Skipf("the eBPF profiler cannot run here: %s", demo.SkipReason(err))
	}
	// The system interpreter, not a shim: nobody must run it, and its
	// Build-ID is the upload the test expects.
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3 for the unprivileged registrant")
	}
	pyID := buildIDOf(t, py)
	yes, err := exec.LookPath("yes")
	if err != nil {
		t.Skip("no yes(1) to stand in for a root-only process")
	}

	// A root-only binary and a root process running it on CPU 0.
	secretDir := t.TempDir() // 0700, root's
	secretBin := filepath.Join(secretDir, "rootsecretyes")
	copyFile(t, yes, secretBin, 0o700)
	secretID := buildIDOf(t, secretBin)
	secret := exec.Command(secretBin)
	secret.Stdout = io.Discard
	if err := secret.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { secret.Process.Kill(); secret.Wait() })
	pin0(t, secret.Process.Pid)

	// The server and the agent as root; the socket where nobody reaches it.
	pub := t.TempDir()
	for d := pub; d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()) && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	sock := filepath.Join(pub, "agent.sock")
	url, stop := inProcessServer(t)
	defer stop()
	// The user's trainer registers its job (as laggard.init does).
	req, _ := http.NewRequest(http.MethodPut, url+"/api/v1/jobs/privjob", strings.NewReader(`{"world_size":1}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("registering the job: %v %v", resp, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	var agentLog syncBuffer
	go func() {
		agentDone <- runAgent(ctx, []string{"-server", url, "-socket", sock, "-shm-dir", t.TempDir(), "-no-osstat",
			"-profile-hz", "199", "-profile-ratio", "1", "-log-level", "debug"}, io.Discard, &agentLog)
	}()
	defer func() { cancel(); <-agentDone }()
	waitPath(t, sock)

	// The unprivileged registrant: tries root's pid 1, then registers
	// itself and burns CPU 0 next to the secret process.
	script := `import json, os, socket, sys, time
def ask(pid):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
    s.sendall((json.dumps({"v": 1, "pid": pid, "job": "privjob", "rank": 0, "world": 1}) + "\n").encode())
    return s, json.loads(s.makefile().readline())
_, a = ask(1)
print("other", json.dumps(a), flush=True)
keep, a = ask(os.getpid())
print("own", json.dumps(a), flush=True)
os.sched_setaffinity(0, {0})
end = time.time() + float(sys.argv[2])
while time.time() < end:
    pass
`
	helper := exec.Command(py, "-c", script, sock, "14")
	helper.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { helper.Process.Kill(); helper.Wait() })
	sc := bufio.NewScanner(out)
	answers := map[string]string{}
	for len(answers) < 2 && sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		answers[k] = v
	}
	if !strings.Contains(answers["other"], `"ok": false`) {
		t.Errorf("nobody registering root's pid 1: %s, want a refusal", answers["other"])
	}
	if !strings.Contains(answers["own"], `"ok": true`) {
		t.Fatalf("nobody registering itself: %s", answers["own"])
	}

	// Wait for the job's profile (drained every 5 s) and the upload of
	// the registrant's own binary.
	var collapsed string
	deadline := time.Now().Add(40 * time.Second)
	for {
		collapsed = httpGet(t, url+"/api/v1/jobs/privjob/profile?format=collapsed&rank=0")
		uploaded := httpHead(t, url+"/api/v1/symbols/"+pyID) == http.StatusOK
		if strings.Contains(collapsed, "<module>") && uploaded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no samples of the registrant or no upload of its python3 (%s) in time; profile:\n%.2000s\nagent log:\n%.4000s",
				pyID, collapsed, agentLog.String())
		}
		time.Sleep(time.Second)
	}
	time.Sleep(6 * time.Second) // one more window with both processes on CPU 0
	collapsed = httpGet(t, url+"/api/v1/jobs/privjob/profile?format=collapsed&rank=0")
	for _, leak := range []string{"rootsecret", "yes"} {
		for _, line := range strings.Split(collapsed, "\n") {
			if strings.Contains(line, leak) {
				t.Errorf("the root-only process leaks into nobody's profile: %q", line)
			}
		}
	}
	// Its interference is still measured, as one anonymous frame.
	if !strings.Contains(collapsed, hiddenFrame) {
		t.Errorf("no %q in the profile: the root process's share of the core is lost:\n%.2000s", hiddenFrame, collapsed)
	}
	if code := httpHead(t, url+"/api/v1/symbols/"+secretID); code != http.StatusNotFound {
		t.Errorf("the root-only binary's Build-ID %s: HEAD %d, want 404 (never uploaded)", secretID, code)
	}
	if strings.Contains(agentLog.String(), secretBin) {
		t.Errorf("the agent touched the root-only binary for nobody's job:\n%s", agentLog.String())
	}
}

// inProcessServer serves a fresh store on a loopback port.
func inProcessServer(t *testing.T) (string, func()) {
	t.Helper()
	fs := newFlagSet("serve", "", io.Discard)
	var so serveOptions
	so.register(fs, "")
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	so.dataDir = t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log, _ := newLogger(io.Discard, "warn", false)
	ctx, cancel := context.WithCancel(context.Background())
	urlc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, so, ln, log, func(u string) { urlc <- u }) }()
	select {
	case u := <-urlc:
		return u, func() { cancel(); <-errc }
	case err := <-errc:
		cancel()
		t.Fatal(err)
	}
	return "", nil
}

func buildIDOf(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Skipf("%s is not an ELF file here: %v", path, err)
	}
	defer f.Close()
	id, err := elfinfo.BuildID(f)
	if err != nil || id == "" {
		t.Skipf("%s has no GNU Build-ID", path)
	}
	return id
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		t.Fatal(err)
	}
}

func pin0(t *testing.T, pid int) {
	t.Helper()
	var set unix.CPUSet
	set.Set(0)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		t.Logf("could not pin pid %d to CPU 0 (%v): the processes may not share a core", pid, err)
	}
}

func waitPath(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func httpHead(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
