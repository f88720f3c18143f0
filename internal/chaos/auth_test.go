package chaos

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Plain tokens (the token file also takes sha256: hashes).
const (
	tokRead   = "chaos-read-0123456789abcdef"
	tokIngest = "chaos-ingest-0123456789abcdef" // ingest:auth-*
	tokOther  = "chaos-other-0123456789abcdef"  // ingest:other
	tokAdmin  = "chaos-admin-0123456789abcdef"
	tokNew    = "chaos-new-0123456789abcdef"
	tokBogus  = "chaos-bogus-0123456789abcdef" // in no file
)

// tokensFlag returns the serve flag that loads a token file.
func tokensFlag(t *testing.T, path string) []string {
	t.Helper()
	if !hasFlag(t, "tokens") {
		t.Fatal("laggard serve has no -tokens flag: no authentication (docs/security.md)")
	}
	return []string{"-tokens", path}
}

// TestChaos_D3_Auth (D3): with a token file, every endpoint answers 401
// with no token or an unknown one, 403 with a valid token of the wrong
// scope, and succeeds with the right one; /healthz and the UI stay public;
// a rewritten token file applies after SIGHUP. Also: serving a
// non-loopback address without tokens is refused unless -insecure.
func TestChaos_D3_Auth(t *testing.T) {
	enabled(t)
	// No tokens on a non-loopback address: refused unless -insecure.
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "serve", "-addr", "0.0.0.0:0", "-data", filepath.Join(t.TempDir(), "exposed")).CombinedOutput()
	t.Logf("D3: serve -addr 0.0.0.0:0 without tokens → %v in %v: %s", err, time.Since(start).Round(time.Millisecond), clip(strings.TrimSpace(string(out)), 200))
	if ctx.Err() != nil {
		t.Errorf("laggard serve -addr 0.0.0.0:0 without tokens kept serving; want a refusal naming -insecure")
	} else if err == nil || !strings.Contains(strings.ToLower(string(out)), "insecure") {
		t.Errorf("laggard serve -addr 0.0.0.0:0 without tokens: %v %s; want a non-zero exit naming -insecure", err, clip(string(out), 300))
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	write := func(lines ...string) {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# chaos suite tokens",
		tokRead+"   read           reader",
		tokIngest+" ingest:auth-*  trainer",
		tokOther+"  ingest:other   other trainer",
		tokAdmin+"  admin          admin")
	s := startServer(t, filepath.Join(dir, "data"), tokensFlag(t, file)...)

	as := func(token, method, path, ctype string, body []byte) reply {
		t.Helper()
		hdr := map[string]string{}
		if token != "" {
			hdr["Authorization"] = "Bearer " + token
		}
		r, err := call(quick, method, s.URL()+path, ctype, body, hdr)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return r
	}
	for _, id := range []string{"auth-1", "auth-del", "auth-probe"} {
		if r := as(tokAdmin, "PUT", "/api/v1/jobs/"+id, jsonType, jobJSON(id, 2)); r.status != http.StatusCreated {
			t.Fatalf("admin registers %s: %d %s", id, r.status, clip(string(r.body), 200))
		}
	}
	if r := as(tokAdmin, "POST", "/api/v1/jobs/auth-1/vectors", jsonType, jsonBatch(grid(0, 10, 0, 1))); r.status != http.StatusOK {
		t.Fatalf("admin ingests: %d %s", r.status, clip(string(r.body), 200))
	}
	// Job deletion (admin scope) is checked only where this build has it.
	canDelete := as(tokAdmin, "DELETE", "/api/v1/jobs/auth-probe", "", nil).status < 300
	if !canDelete {
		t.Log("DELETE /api/v1/jobs/{id} is not implemented in this build; not checked")
	}
	rank := []byte(`{"rank":1,"host":"n1","local_rank":1,"role":{"dp":1,"tp":0,"pp":0,"ep":0}}`)
	for _, c := range []struct {
		method, path, ctype string
		body                []byte
		right, wrongScope   string
	}{
		{"PUT", "/api/v1/jobs/auth-2", jsonType, jobJSON("auth-2", 2), tokIngest, tokRead},
		{"PUT", "/api/v1/jobs/auth-3", jsonType, jobJSON("auth-3", 2), tokAdmin, tokOther},
		{"POST", "/api/v1/jobs/auth-1/ranks", jsonType, rank, tokIngest, tokOther},
		{"POST", "/api/v1/jobs/auth-1/vectors", jsonType, jsonBatch(grid(10, 5, 0, 1)), tokIngest, tokRead},
		{"POST", "/api/v1/jobs/auth-1/vectors", protoType, protoBatch(grid(15, 5, 0, 1)), tokIngest, tokOther},
		{"GET", "/api/v1/jobs", "", nil, tokRead, tokIngest},
		{"GET", "/api/v1/jobs/auth-1", "", nil, tokRead, tokIngest},
		{"GET", "/api/v1/jobs/auth-1/report?last=10", "", nil, tokRead, tokIngest},
		{"GET", "/api/v1/jobs/auth-1/export", "", nil, tokRead, tokOther},
		{"GET", "/api/v1/vocabulary", "", nil, tokRead, tokIngest},
		{"GET", "/metrics", "", nil, tokRead, tokIngest},
		{"DELETE", "/api/v1/jobs/auth-del", "", nil, tokAdmin, tokIngest},
	} {
		name := c.method + " " + c.path
		if c.method == "DELETE" && !canDelete {
			continue
		}
		for _, bad := range []struct{ token, what string }{{"", "no token"}, {tokBogus, "an unknown token"}} {
			if r := as(bad.token, c.method, c.path, c.ctype, c.body); r.status != http.StatusUnauthorized {
				t.Errorf("%s with %s: %d, want 401", name, bad.what, r.status)
			}
		}
		if r := as(c.wrongScope, c.method, c.path, c.ctype, c.body); r.status != http.StatusForbidden {
			t.Errorf("%s with a wrong-scope token: %d, want 403", name, r.status)
		}
		if r := as(c.right, c.method, c.path, c.ctype, c.body); r.status < 200 || r.status >= 300 {
			t.Errorf("%s with the right token: %d %s", name, r.status, clip(string(r.body), 200))
		}
	}
	for _, path := range []string{"/healthz", "/"} {
		if r := as("", "GET", path, "", nil); r.status != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (public)", path, r.status)
		}
	}

	// Reload: the reader's token is replaced by a new one.
	write(tokNew+" read new-reader", tokAdmin+" admin admin")
	syscall.Kill(s.pid(), syscall.SIGHUP)
	reload := time.Now()
	deadline := reload.Add(10 * time.Second)
	for as(tokNew, "GET", "/api/v1/jobs", "", nil).status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("a token added to the file is not accepted 10s after SIGHUP")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("D3: the rewritten token file applied %v after SIGHUP", time.Since(reload).Round(time.Millisecond))
	if r := as(tokRead, "GET", "/api/v1/jobs", "", nil); r.status != http.StatusUnauthorized {
		t.Errorf("a token removed from the file still answers %d after reload, want 401", r.status)
	}
	if !s.alive() {
		t.Fatalf("the server exited on SIGHUP")
	}
}
