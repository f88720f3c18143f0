package register

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPythonClient runs the real Python client (clients/python/laggard/
// agent_socket.py) in a child process: its pid differs from the test's,
// so the SO_PEERCRED check is exercised across processes, and its exit is
// the EOF that starts the grace period.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	s, path := start(t)
	client, _ := filepath.Abs("../../../clients/python")
	script := `
import sys, time
sys.path.insert(0, sys.argv[1])
from laggard import agent_socket
agent_socket.announce("py-job", 5, 8, local_rank=1, comms=[{"id": "g", "size": 2, "ranks": [4, 5]}], host="n1", path=sys.argv[2]).join(5)
ok = agent_socket.last_answer()
print(ok, flush=True)
sys.stdin.read()  # stay alive (connection open) until the test closes stdin
`
	cmd := exec.Command(py, "-c", script, client, path)
	stdin, _ := cmd.StdinPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	var reg Registration
	for {
		var ok bool
		if reg, ok = s.Lookup(pid); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("python client pid %d never registered; all: %+v", pid, s.All())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if reg.Job != "py-job" || reg.Rank != 5 || reg.World != 8 || reg.LocalRank != 1 || reg.Host != "n1" ||
		len(reg.Comms) != 1 || reg.Comms[0].CommRank != 1 {
		t.Fatalf("registration %+v", reg)
	}
	stdin.Close()
	cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		e := s.regs[pid]
		gone := e != nil && !e.goneAt.IsZero()
		s.mu.Unlock()
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("client exit not seen as EOF")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
