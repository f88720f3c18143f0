package auth

import (
	"bytes"
	"context"

	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const (
	plainRead   = "plain-read-token-0123456789"
	hashedAdmin = "hashed-admin-token-0123456789"
)

func TestParse(t *testing.T) {
	file := "# comment\n\n" +
		plainRead + "   read   dashboards  # trailing comment\n" +
		Hash(hashedAdmin) + " admin\n" +
		"ingest-team-a-token-0123 ingest:team-a-*,read team a\n" +
		"ingest-one-job-token-0123 ingest:job-1\n" +
		"ingest-any-token-01234567 ingest\n"
	set, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 5 || set.Plain != 4 {
		t.Fatalf("%d tokens, %d plain", set.Len(), set.Plain)
	}
	cases := []struct {
		token string
		need  Need
		want  bool
	}{
		{plainRead, Need{Kind: Read}, true},
		{plainRead, Need{Kind: Ingest, Job: "x"}, false},
		{plainRead, Need{Kind: Admin}, false},
		{hashedAdmin, Need{Kind: Admin}, true},
		{hashedAdmin, Need{Kind: Ingest, Job: "anything"}, true},
		{hashedAdmin, Need{Kind: Read}, true},
		{"ingest-team-a-token-0123", Need{Kind: Ingest, Job: "team-a-7"}, true},
		{"ingest-team-a-token-0123", Need{Kind: Ingest, Job: "team-b-7"}, false},
		{"ingest-team-a-token-0123", Need{Kind: Read}, true},
		{"ingest-one-job-token-0123", Need{Kind: Ingest, Job: "job-1"}, true},
		{"ingest-one-job-token-0123", Need{Kind: Ingest, Job: "job-10"}, false},
		{"ingest-any-token-01234567", Need{Kind: Ingest, Job: "z"}, true},
		{"ingest-any-token-01234567", Need{Kind: Read}, false},
	}
	for _, c := range cases {
		p, ok := set.Lookup(c.token)
		if !ok {
			t.Fatalf("%s not found", c.token)
		}
		if got := p.Allows(c.need); got != c.want {
			t.Errorf("%s (%s) allows %s: %v", c.token, p.ScopeList(), c.need, got)
		}
	}
	if p, _ := set.Lookup(plainRead); p.Name != "dashboards" {
		t.Errorf("name %q", p.Name)
	}
	if p, _ := set.Lookup(hashedAdmin); p.Name != "line 4" {
		t.Errorf("unnamed token: %q", p.Name)
	}
	for _, bad := range []string{"", "nope-not-a-token-0123", Hash(hashedAdmin), plainRead + "x"} {
		if _, ok := set.Lookup(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"\n" + plainRead + "\n", "line 2: want TOKEN SCOPES"},
		{"short read\n", "line 1: plain token shorter than 16"},
		{"sha256:abcd read\n", "line 1: sha256: wants 64 hex digits"},
		// A mistyped prefix must not make the printed hash a working token.
		{"SHA-256:" + strings.TrimPrefix(Hash(plainRead), "sha256:") + " admin\n", "line 1: this looks like a SHA-256 hash"},
		{"sha256=" + strings.TrimPrefix(Hash(plainRead), "sha256:") + " admin\n", "line 1: this looks like a SHA-256 hash"},
		{plainRead + " write\n", `line 1: unknown scope "write"`},
		{plainRead + " ingest:team/a\n", `line 1: scope "ingest:team/a"`},
		{plainRead + " ingest:\n", `line 1: scope "ingest:"`},
		{plainRead + " read,\n", `line 1: unknown scope ""`},
		{plainRead + " read\n" + Hash(plainRead) + " admin\n", "line 2: the same token as line 1"},
		{plainRead + " read " + strings.Repeat("x", 70<<10) + "\n", "line 1: longer than"},
	} {
		_, err := Parse(strings.NewReader(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.40q: %v, want %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), plainRead) {
			t.Errorf("error quotes the secret: %v", err)
		}
	}
}

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	// Write then rename, as editors and config managers do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestReload: a good file swaps the tokens in; a bad one keeps the old
// tokens and logs the line.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, plainRead+" read\n")
	var logs logBuf
	f, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := f.Register(reg); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup(plainRead); !ok {
		t.Fatal("token not loaded")
	}
	writeFile(t, path, Hash(hashedAdmin)+" admin\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Lookup(plainRead); ok {
		t.Fatal("removed token still accepted")
	}
	if _, ok := f.Lookup(hashedAdmin); !ok {
		t.Fatal("new token not accepted")
	}
	writeFile(t, path, Hash(hashedAdmin)+" admin\n"+plainRead+" reed\n")
	if err := f.Reload(); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad reload: %v", err)
	}
	if _, ok := f.Lookup(hashedAdmin); !ok {
		t.Fatal("a bad reload dropped the old tokens")
	}
	// A file caught empty (an editor's truncate before its write) is not
	// installed: it would lock every client out.
	writeFile(t, path, "")
	if err := f.Reload(); err == nil || !strings.Contains(err.Error(), "no tokens") {
		t.Fatalf("empty reload: %v", err)
	}
	if _, ok := f.Lookup(hashedAdmin); !ok {
		t.Fatal("an empty reload dropped the old tokens")
	}
	writeFile(t, path, Hash(hashedAdmin)+" admin\n")
	if !strings.Contains(logs.String(), "line 2") || !strings.Contains(logs.String(), "keeping the previous tokens") {
		t.Errorf("log lacks the line and the outcome:\n%s", logs.String())
	}
	if got := testutil.ToFloat64(f.reloads.WithLabelValues("error")); got != 2 {
		t.Errorf("reload errors %v", got)
	}
	if got := testutil.ToFloat64(f.tokens); got != 1 {
		t.Errorf("tokens gauge %v", got)
	}
}

// TestWatch: a changed file is picked up without a signal; a bad one is
// reported once and the old tokens stay.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, plainRead+" read\n")
	var logs logBuf
	f, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Watch(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s\n%s", what, logs.String())
			}
		}
	}
	writeFile(t, path, plainRead+" read\n"+hashedAdmin+" admin\n")
	waitFor("the new token", func() bool { _, ok := f.Lookup(hashedAdmin); return ok })
	writeFile(t, path, "garbage\n")
	waitFor("the error", func() bool { return strings.Contains(logs.String(), "line 1") })
	time.Sleep(100 * time.Millisecond) // ten more polls of the same bad file
	if n := strings.Count(logs.String(), "reload failed"); n != 1 {
		t.Errorf("a bad file was reported %d times, want once", n)
	}
	if _, ok := f.Lookup(hashedAdmin); !ok {
		t.Fatal("the bad file dropped the tokens")
	}
	os.Remove(path)
	time.Sleep(100 * time.Millisecond)
	if _, ok := f.Lookup(plainRead); !ok {
		t.Fatal("a removed file dropped the tokens")
	}
	writeFile(t, path, hashedAdmin+" admin\n")
	waitFor("the fixed file", func() bool { _, ok := f.Lookup(plainRead); return !ok })
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing"), nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	writeFile(t, bad, "\n\nx read\n")
	if _, err := Load(bad, nil); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("bad file: %v", err)
	}
}

// The warning for a readable file of plain tokens.
func TestPlainTokensWarning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, plainRead+" read\n")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	if _, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "plain tokens") {
		t.Errorf("no warning for a world-readable file of plain tokens:\n%s", logs.String())
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(plainRead + " read,ingest:a-* name\n# c\n" + Hash("x") + " admin"))
	f.Add([]byte("sha256:zz read\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, e := range set.entries {
			if len(e.p.Scopes) == 0 || e.p.Name == "" {
				t.Fatalf("entry without scopes or name: %+v", e.p)
			}
			for _, s := range e.p.Scopes {
				if _, err := ParseScopes(s.String()); err != nil {
					t.Fatalf("scope %v does not round-trip: %v", s, err)
				}
			}
		}
		_, _ = set.Lookup(string(b))
	})
}

func BenchmarkLookup(b *testing.B) {
	var sb strings.Builder
	for i := range 100 {
		sb.WriteString(Hash("token-number-"+strings.Repeat("x", i)) + " read\n")
	}
	set, err := Parse(strings.NewReader(sb.String()))
	if err != nil {
		b.Fatal(err)
	}
	tok := "token-number-" + strings.Repeat("x", 50)
	for b.Loop() {
		if _, ok := set.Lookup(tok); !ok {
			b.Fatal("not found")
		}
	}
}

// The prefix is matched in any case, and a bare 64-hex-digit plain token
// (openssl rand -hex 32) is still a plain token.
func TestParseHashPrefixCase(t *testing.T) {
	upper := "SHA256:" + strings.TrimPrefix(Hash(plainRead), "sha256:")
	set, err := Parse(strings.NewReader(upper + " read\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Lookup(plainRead); !ok {
		t.Error("SHA256: line does not accept its token")
	}
	if _, ok := set.Lookup(upper); ok {
		t.Error("the hash itself works as a token")
	}
	hexTok := strings.Repeat("0123456789abcdef", 4)
	set, err = Parse(strings.NewReader(hexTok + " read\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := set.Lookup(hexTok); !ok || set.Plain != 1 {
		t.Error("a 64-hex-digit plain token is refused")
	}
}
