package server

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// The SysOM-AI read routes need the read scope; with a data directory the
// server opens <data>/symbols and serves them (and the symbol upload
// routes) from it; the handlers answer 404 naming the missing data.
func TestSysomRoutesScopesAndWiring(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	t.Cleanup(func() { st.Close() })
	srv, ts := start(t, st, Config{DataDir: dir, Access: Access{Tokens: testTokens(t)}, Greyhound: greyhoundOff})
	if srv.Sysom() == nil {
		t.Fatal("SysOM-AI analysis not wired with a data directory")
	}
	if fi, err := os.Stat(filepath.Join(dir, "symbols")); err != nil || !fi.IsDir() {
		t.Fatalf("symbol store not opened under the data dir: %v", err)
	}
	if r := (call{method: "PUT", path: "/api/v1/jobs/j", ctype: jsonType, body: mustJSON(t, testJob("j", 4)), token: tokAdmin}).do(t, ts.URL); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("PUT job: %d %s", r.status, r.body)
	}
	b := &stack.Batch{StartNS: 1_751_371_200_000_000_000, EndNS: 1_751_371_205_000_000_000, Hz: 99, Ratio: 0.1, Samples: []stack.Sample{
		{Rank: 1, PID: 7, TID: 7, Frames: []stack.Frame{{Kind: stack.Symbol, Func: "main", Mapping: -1}}, Count: 3}}}
	if _, err := st.AppendStacks("j", b); err != nil {
		t.Fatal(err)
	}
	paths := []string{
		"/api/v1/jobs/j/sysom",
		"/api/v1/jobs/j/flamegraph?rank=1",
		"/api/v1/jobs/j/flamegraph/diff?a_rank=1&b_rank=1",
		"/api/v1/jobs/j/profile?rank=1",
		"/api/v1/jobs/j/osstats",
	}
	for _, p := range paths {
		for _, tc := range []struct {
			token string
			want  int
		}{{"", 401}, {tokIngestJ, 403}, {tokRead, 200}, {tokAdmin, 200}} {
			// allowed: one rank's stacks, no calls → a report with notes
			if r := (call{method: "GET", path: p, token: tc.token}).do(t, ts.URL); r.status != tc.want {
				t.Errorf("GET %s with %q: %d %s, want %d", p, tc.token, r.status, r.body, tc.want)
			}
		}
	}
	if r := (call{method: "GET", path: "/api/v1/jobs/j/flamegraph?rank=1", token: tokRead}).do(t, ts.URL); !grepOK(r.body, `"total":3`) {
		t.Errorf("flame graph: %s", r.body)
	}
	// Without a data directory or a symbol store the routes say so.
	st2 := openStore(t, t.TempDir())
	t.Cleanup(func() { st2.Close() })
	srv2, ts2 := start(t, st2, Config{Greyhound: greyhoundOff})
	if srv2.Sysom() != nil {
		t.Error("SysOM-AI wired without a symbol store")
	}
	if r := (call{method: "GET", path: "/api/v1/jobs/j/sysom"}).do(t, ts2.URL); r.status != 404 {
		t.Errorf("off: %d %s", r.status, r.body)
	}
}

func grepOK(b []byte, s string) bool { return grep(b, s) != "" }
