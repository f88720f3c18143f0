package server

import (
	"net/http"
	"testing"
)

// The SysOM-AI posts need ingest for their job; symbol uploads, keyed by
// Build-ID and shared by every job, need an ingest scope for any job.
func TestStackRouteScopes(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{Access: Access{Tokens: testTokens(t)}})
	for _, c := range []struct {
		call
		want int // 401/403, or 0: neither (the handler answered)
	}{
		{call{method: "POST", path: "/api/v1/jobs/j/stacks", ctype: "application/json", body: []byte("{}")}, 401},
		{call{method: "POST", path: "/api/v1/jobs/j/stacks", ctype: "application/json", body: []byte("{}"), token: tokRead}, 403},
		{call{method: "POST", path: "/api/v1/jobs/j/stacks", ctype: "application/json", body: []byte("{}"), token: tokIngestK}, 403},
		{call{method: "POST", path: "/api/v1/jobs/j/stacks", ctype: "application/json", body: []byte("{}"), token: tokIngestJ}, 0},
		{call{method: "POST", path: "/api/v1/jobs/j/osstats", ctype: "application/json", body: []byte("{}"), token: tokIngestK}, 403},
		{call{method: "POST", path: "/api/v1/jobs/j/profiles", ctype: "application/octet-stream", body: []byte("x"), token: tokRead}, 403},
		{call{method: "HEAD", path: "/api/v1/symbols/abcd"}, 401},
		{call{method: "HEAD", path: "/api/v1/symbols/abcd", token: tokRead}, 403},
		{call{method: "HEAD", path: "/api/v1/symbols/abcd", token: tokIngestJ}, 0},
		{call{method: "POST", path: "/api/v1/symbols/abcd?part=0&parts=1", ctype: "application/octet-stream", body: []byte("x"), token: tokIngestK}, 0},
		{call{method: "POST", path: "/api/v1/symbols/abcd?part=0&parts=1", ctype: "application/octet-stream", body: []byte("x"), token: tokAdmin}, 0},
	} {
		r := c.do(t, ts.URL)
		switch {
		case c.want != 0 && r.status != c.want:
			t.Errorf("%s %s with %q: %d, want %d", c.method, c.path, c.token, r.status, c.want)
		case c.want == 0 && (r.status == http.StatusUnauthorized || r.status == http.StatusForbidden):
			t.Errorf("%s %s with %q: %d, want the handler's answer", c.method, c.path, c.token, r.status)
		}
	}
}
