package server

import (
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// Collective ingest has the scope of vector ingest (ingest for that job),
// including the implicit registration of an unknown job; reads need read.
func TestCollectivesScope(t *testing.T) {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	_, ts := start(t, st, Config{Access: Access{Tokens: testTokens(t)}})
	e := int64(1_700_000_000) * 1e9
	body, err := laggardv1.MarshalJSONCollectives(&collective.Batch{
		Comms: []collective.Comm{{ID: "w", Size: 2, Rank: 0, CommRank: 0}},
		Calls: []collective.Call{{Rank: 0, Comm: "w", Op: collective.AllReduce, Peer: -1, Root: -1, Step: -1, EnterNS: e, ReturnNS: e + 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		c      call
		status int
	}{
		{"other job's ingest token", call{method: "POST", path: "/api/v1/jobs/k-1/collectives?world=2", ctype: jsonType, body: body, token: tokIngestJ}, 403},
		{"read token posts", call{method: "POST", path: "/api/v1/jobs/j/collectives?world=2", ctype: jsonType, body: body, token: tokRead}, 403},
		{"no token", call{method: "POST", path: "/api/v1/jobs/j/collectives?world=2", ctype: jsonType, body: body}, 401},
		{"own job registers it", call{method: "POST", path: "/api/v1/jobs/j/collectives?world=2", ctype: jsonType, body: body, token: tokIngestJ}, 200},
		{"prefix scope", call{method: "POST", path: "/api/v1/jobs/k-7/collectives?world=2", ctype: jsonType, body: body, token: tokIngestK}, 200},
		{"ingest token reads", call{method: "GET", path: "/api/v1/jobs/j/collectives", token: tokIngestJ}, 403},
		{"read calls", call{method: "GET", path: "/api/v1/jobs/j/collectives", token: tokRead}, 200},
		{"read comms", call{method: "GET", path: "/api/v1/jobs/j/comms", token: tokRead}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.c.do(t, ts.URL)
			if r.status != c.status {
				t.Fatalf("%d %s, want %d", r.status, r.body, c.status)
			}
			if c.status == 403 && !strings.Contains(r.errBody(t).Error, "lacks scope") {
				t.Fatalf("403 does not name the scope: %s", r.body)
			}
		})
	}
	r := (call{method: "GET", path: "/api/v1/jobs/j/comms", token: tokRead}).do(t, ts.URL)
	if !strings.Contains(string(r.body), `"id":"w"`) {
		t.Fatalf("comms: %s", r.body)
	}
}
