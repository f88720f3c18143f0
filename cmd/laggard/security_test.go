package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/auth"
)

// TestD3_ServeRefusesNonLoopbackWithoutTokens: `laggard serve -addr
// 0.0.0.0:7070` served every job to anyone who could reach the port.
func TestD3_ServeRefusesNonLoopbackWithoutTokens(t *testing.T) {
	t.Chdir(t.TempDir())
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(auth.Hash("a-long-enough-token")+" read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"serve", "-addr", "0.0.0.0:0", "d"}, 1, []string{"refusing to listen on", "without authentication", "-tokens FILE", "-insecure"}},
		{[]string{"serve", "-addr", "[::]:0", "d"}, 1, []string{"refusing to listen on"}},
		{[]string{"serve", "-addr", "0.0.0.0:0", "-insecure", "d"}, 0, nil},
		{[]string{"serve", "-addr", "0.0.0.0:0", "-tokens", tokens, "d"}, 0, []string{"authentication on"}},
		{[]string{"serve", "-addr", "127.0.0.1:0", "d"}, 0, nil},
		// The demo has no tokens, so it stays on loopback and says how to expose a server.
		{[]string{"demo", "-addr", "0.0.0.0:0"}, 1, []string{"loopback only", "serve -tokens FILE"}},
	}
	for _, c := range cases {
		code, _, errs := runDone(t, c.args...)
		if code != c.code {
			t.Errorf("laggard %v: exit %d, want %d\n%s", c.args, code, c.code, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("laggard %v: stderr lacks %q:\n%s", c.args, w, errs)
			}
		}
	}
}

func TestServeSecurityFlagErrors(t *testing.T) {
	t.Chdir(t.TempDir())
	bad := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(bad, []byte("# ok\nshort read\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls-cert", "c.pem"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tls-cert", "c.pem", "-tls-key", "k.pem"}, "loading TLS certificate c.pem"},
		{[]string{"-metrics-auth", "public"}, `-metrics-auth must be read or none, got "public"`},
		{[]string{"-healthz-auth", "x"}, "-healthz-auth must be none or read"},
		{[]string{"-tokens", bad}, "line 2: plain token shorter than 16"},
		{[]string{"-tokens", "/does/not/exist"}, "no such file"},
		{[]string{"-body-timeout", "1ms"}, "-body-timeout must be in [1s, 24h0m0s], got 1ms"},
		{[]string{"-max-conns", "0"}, "-max-conns must be in [1, 1048576], got 0"},
		{[]string{"-min-rate", "0"}, "-min-rate must be in"},
	} {
		args := append([]string{"serve", "-addr", "127.0.0.1:0"}, c.args...)
		code, _, errs := runDone(t, args...)
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("laggard %v: exit %d, stderr lacks %q:\n%s", args, code, c.want, errs)
		}
	}
}

func TestTokenCommand(t *testing.T) {
	code, out, errs := runCLI(t, "token", "-scopes", "ingest:team-a-*,read", "team", "a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// stdout is exactly the file line (so >> tokens appends it); the
	// token is on stderr, after its explanation.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	elines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) != 1 || len(elines) != 3 {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", out, errs)
	}
	line, tok := lines[0], elines[1]
	set, err := auth.Parse(strings.NewReader(line))
	if err != nil {
		t.Fatalf("the printed line does not parse: %v\n%s", err, line)
	}
	p, ok := set.Lookup(tok)
	if !ok || p.Name != "team a" || !p.Allows(auth.Need{Kind: auth.Ingest, Job: "team-a-1"}) || strings.Contains(line, tok) {
		t.Fatalf("token %q, line %q: principal %+v", tok, line, p)
	}
	if code, _, errs := runCLI(t, "token", "-scopes", "write"); code != 1 || !strings.Contains(errs, `unknown scope "write"`) {
		t.Fatalf("bad scope: %d %s", code, errs)
	}
}

// syncBuf is a log sink the server writes while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe runs `laggard serve` with args until the test ends and
// returns its base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuf
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve", "-addr", "127.0.0.1:0", t.TempDir()}, args...), io.Discard, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errb.String())
		}
	})
	re := regexp.MustCompile(`ui=(https?://127\.0\.0\.1:\d+)/`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(errb.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errb.String())
		}
	}
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// The Python client sends LAGGARD_TOKEN as a bearer token: against the
// real `laggard serve -tokens`, its vectors land with an ingest token for
// its job and are refused with one for another prefix. The token file is
// reloaded when it changes.
func TestServeTokensPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	const read, teamA, teamB = "read-token-for-the-test", "ingest-team-a-token-xyz", "ingest-team-b-token-xyz"
	tokens := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		tmp := tokens + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, tokens); err != nil {
			t.Fatal(err)
		}
	}
	write(auth.Hash(read) + " read\n" + auth.Hash(teamA) + " ingest:team-a-* team a\n" + teamB + " ingest:team-b-*\n")
	old := tokenPoll
	tokenPoll = 20 * time.Millisecond
	t.Cleanup(func() { tokenPoll = old })
	base := startServe(t, "-tokens", tokens)

	if c := get(t, base+"/api/v1/jobs", ""); c != 401 {
		t.Fatalf("no token: %d", c)
	}
	if c := get(t, base+"/api/v1/jobs", read); c != 200 {
		t.Fatalf("read token: %d", c)
	}
	if c := get(t, base+"/healthz", ""); c != 200 {
		t.Fatalf("healthz: %d", c)
	}

	script := `
import json, sys
sys.path.insert(0, sys.argv[1])
from laggard.perf import Perf
p = Perf(server=sys.argv[2], job=sys.argv[3], rank=0, world_size=1, flush_interval=0.05)
for s in range(20):
    with p.step():
        pass
p.close(timeout=5)
print(json.dumps(p.stats()))
`
	pydir, err := filepath.Abs("../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	ship := func(job, token string) map[string]any {
		t.Helper()
		cmd := exec.Command(python, "-c", script, pydir, base, job)
		cmd.Env = append(os.Environ(), "LAGGARD_TOKEN="+token, "LAGGARD_LOG_LEVEL=error")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python client: %v\n%s", err, stderr.String())
		}
		var st map[string]any
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
			t.Fatalf("python client output %q: %v", out, err)
		}
		return st
	}
	if st := ship("team-a-1", teamA); st["sent"].(float64) < 1 || st["errors"].(float64) != 0 {
		t.Fatalf("right token: %v", st)
	}
	if c := get(t, base+"/api/v1/jobs/team-a-1", read); c != 200 {
		t.Fatalf("job team-a-1 after shipping: %d", c)
	}
	if st := ship("team-a-2", teamB); st["sent"].(float64) != 0 || !strings.Contains(st["last_error"].(string), "403") {
		t.Fatalf("wrong-scope token: %v", st)
	}
	if c := get(t, base+"/api/v1/jobs/team-a-2", read); c != 404 {
		t.Fatalf("job team-a-2 registered with a wrong-scope token: %d", c)
	}

	// Revoke the read token by editing the file; no restart, no signal.
	write(auth.Hash(teamA) + " ingest:team-a-*\n")
	for deadline := time.Now().Add(5 * time.Second); get(t, base+"/api/v1/jobs", read) != 401; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the revoked token still works after 5s")
		}
	}
}
