package chaos

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestChaos_UploadMemory (issue 16 item 11): every upload route is sent
// whitespace — the cheapest input a tokenizer may buffer whole — at the
// route's byte limit, and where the route inflates gzip, as a small gzip
// of up to 1000 MiB; two such requests at once, on a fresh server per
// route (the peak RSS of one does not hide another's). Assertions: no
// 5xx and no crash; the server's peak RSS rises by less than a bound set
// by the route's byte limits, never by the inflated size — 256 MiB with
// -max-body 16 MiB; the KAIR trace route, whose limit is 1 GiB of JSON,
// streams under a 4 MiB token bound and must stay under 128 MiB. Before
// the token bound one 1000 MiB run cost the trace route 2.7 GB.
func TestChaos_UploadMemory(t *testing.T) {
	enabled(t)
	const maxBody = 16 << 20
	if !hasFlag(t, "max-body") {
		t.Skip("laggard serve has no -max-body flag")
	}
	ws := func(n int) []byte { return bytes.Repeat([]byte{' '}, n) }
	wrap := func(prefix string, n int, suffix string) []byte {
		return append(append([]byte(prefix), ws(n)...), suffix...)
	}
	// gzWS streams n bytes of whitespace between prefix and suffix through
	// gzip without holding them: 1000 MiB compress to ~1 MB.
	gzWS := func(prefix string, n int, suffix string) []byte {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write([]byte(prefix))
		chunk := ws(1 << 20)
		for left := n; left > 0; left -= len(chunk) {
			zw.Write(chunk[:min(left, len(chunk))])
		}
		zw.Write([]byte(suffix))
		zw.Close()
		return buf.Bytes()
	}
	big := pick(256<<20, 1000<<20) // the inflated whitespace run
	type route struct {
		name, method, path, ctype string
		hdr                       map[string]string
		body                      func() []byte
		bound                     int64 // peak RSS rise allowed, bytes
		capture                   bool  // needs an open capture asking rank 0
	}
	const wsBound, traceBound = 256 << 20, 128 << 20
	jsonWS := func(prefix, suffix string) func() []byte {
		return func() []byte { return wrap(prefix, maxBody-len(prefix)-len(suffix), suffix) }
	}
	routes := []route{
		{name: "PUT job", method: "PUT", path: "/api/v1/jobs/m2", ctype: jsonType, body: jsonWS(`{"id":"m2",`, `"world_size":1}`), bound: wsBound},
		{name: "ranks", method: "POST", path: "/api/v1/jobs/m/ranks", ctype: jsonType, body: jsonWS(`{"rank":0,`, `"host":"h"}`), bound: wsBound},
		{name: "vectors", method: "POST", path: "/api/v1/jobs/m/vectors", ctype: jsonType, body: jsonWS(`{"vectors":[`, `]}`), bound: wsBound},
		{name: "collectives", method: "POST", path: "/api/v1/jobs/m/collectives", ctype: jsonType, body: jsonWS(`{"calls":[`, `]}`), bound: wsBound},
		{name: "stacks gzip", method: "POST", path: "/api/v1/jobs/m/stacks", ctype: jsonType, hdr: map[string]string{"Content-Encoding": "gzip"},
			body: func() []byte { return gzWS(`{"samples":[`, big, `]}`) }, bound: wsBound},
		{name: "osstats gzip", method: "POST", path: "/api/v1/jobs/m/osstats", ctype: jsonType, hdr: map[string]string{"Content-Encoding": "gzip"},
			body: func() []byte { return gzWS(`{"samples":[`, big, `]}`) }, bound: wsBound},
		{name: "profiles pprof gzip", method: "POST", path: "/api/v1/jobs/m/profiles?rank=0", ctype: "application/gzip",
			body: func() []byte { return gzWS("", big, "") }, bound: wsBound},
		{name: "profiles collapsed", method: "POST", path: "/api/v1/jobs/m/profiles?rank=0&start_ns=1700000000000000000&end_ns=1700000001000000000", ctype: "text/x-collapsed",
			body: jsonWS("a;b ", " 1\n"), bound: wsBound},
		{name: "validation result", method: "POST", path: "/api/v1/jobs/m/validation/v-1/results", ctype: jsonType, body: jsonWS(`{"rank":0,`, `}`), bound: wsBound},
		{name: "capture create", method: "POST", path: "/api/v1/jobs/m/captures", ctype: jsonType, body: jsonWS(`{"steps":1,`, `}`), bound: wsBound},
		{name: "symbols", method: "POST", path: "/api/v1/symbols/0123456789abcdef0123456789abcdef01234567?part=0&parts=1", ctype: "application/octet-stream",
			body: func() []byte { return ws(maxBody) }, bound: wsBound},
		{name: "KAIR trace 64 MiB gzip", method: "POST", path: "/api/v1/jobs/m/captures/{cid}/traces?rank=0", ctype: "application/gzip",
			body: func() []byte { return gzWS(`{"traceEvents":[`, 64<<20, `]}`) }, bound: traceBound, capture: true},
		{name: fmt.Sprintf("KAIR trace %d MiB gzip", big>>20), method: "POST", path: "/api/v1/jobs/m/captures/{cid}/traces?rank=0", ctype: "application/gzip",
			body: func() []byte { return gzWS(`{"traceEvents":[`, big, `]}`) }, bound: traceBound, capture: true},
		{name: "KAIR trace plain", method: "POST", path: "/api/v1/jobs/m/captures/{cid}/traces?rank=0", ctype: jsonType,
			body: func() []byte { return wrap(`{"traceEvents":[`, 256<<20, `]}`) }, bound: traceBound, capture: true},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			body := rt.body()
			s := startServer(t, t.TempDir(), "-max-body", fmt.Sprint(maxBody))
			s.register(t, "m", 1)
			path := rt.path
			if rt.capture {
				r := s.do(t, "POST", "/api/v1/jobs/m/captures", jsonType, []byte(`{"ranks":[0],"steps":1}`))
				var c struct {
					ID string `json:"id"`
				}
				if r.status != http.StatusCreated || json.Unmarshal(r.body, &c) != nil {
					t.Fatalf("create capture: %d %s", r.status, clip(string(r.body), 200))
				}
				path = strings.ReplaceAll(path, "{cid}", c.ID)
			}
			time.Sleep(300 * time.Millisecond) // let start-up allocations settle
			rss0, _ := s.procMem()
			stop := s.memSampler()
			var wg sync.WaitGroup
			replies := make([]reply, 2)
			errs := make([]error, 2)
			for i := range replies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					replies[i], errs[i] = call(&http.Client{Timeout: 2 * time.Minute}, rt.method, s.URL()+path, rt.ctype, body, rt.hdr)
				}()
			}
			wg.Wait()
			time.Sleep(200 * time.Millisecond) // one more sample after the answers
			peak, _ := stop()
			rise := peak - rss0
			for i, r := range replies {
				switch {
				case errs[i] != nil && !isReset(errs[i]):
					t.Errorf("request %d: %v", i, errs[i])
				case errs[i] == nil && r.status >= 500:
					t.Errorf("request %d: %d %s", i, r.status, clip(string(r.body), 300))
				}
			}
			bound := rt.bound
			if serverRace {
				// go test -race builds the server with the race detector,
				// whose shadow memory multiplies what every allocation
				// costs (Go documents 5–10×; measured here ~4× for these
				// routes): the bounds above are a normal build's. The
				// defect this guards — RSS growing with the inflated
				// size, GBs — still fails at 3×.
				bound *= 3
			}
			t.Logf("upload memory %s: %.1f MiB sent ×2 → %d/%d %s; RSS %.0f MiB, peak %.0f MiB (+%.0f MiB, bound %.0f MiB)",
				rt.name, mib(int64(len(body))), replies[0].status, replies[1].status, clip(strings.TrimSpace(string(replies[0].body)), 160),
				mib(rss0), mib(peak), mib(rise), mib(bound))
			if !s.alive() {
				t.Fatalf("the server died")
			}
			if rise > bound {
				t.Errorf("%s: two requests raised the server's peak RSS by %.0f MiB, more than %.0f MiB (race-built server: %v)", rt.name, mib(rise), mib(bound), serverRace)
			}
		})
	}
}

// isReset: a server that answers before reading a refused body whole may
// reset the connection under the client's upload (issue 16 item 12 asks
// it to drain a bounded amount; that is not this test's subject).
func isReset(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe") || err == io.ErrUnexpectedEOF
}
