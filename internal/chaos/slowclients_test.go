package chaos

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChaos_D8_SlowClients (D8): 500 (short) / 2,000 (full) connections
// each start an ingest POST that promises a 1 MiB body and then send it
// one byte every 500 ms, never finishing. The server runs with a small
// body-read timeout (the flag as the binary names it). Assertions:
//   - every slow connection is closed by the server within the timeout
//     plus a margin (none still held);
//   - normal requests during the attack (GET /healthz, a 1-vector ingest
//     of another job) succeed, each within 2 s (short) / 1 s (full);
//   - a 1-vector ingest of the attacked job itself is answered within the
//     same bound, 200 or 429 with Retry-After: the bodies its slow
//     connections promise hold their estimated cost against the job's
//     share until they are read (issue 16 item 13, Queue.Hold), so the
//     job may be over its share until the body timeout closes them — a
//     refusal that says when to retry, never a hang, and never another
//     job's refusal.
func TestChaos_D8_SlowClients(t *testing.T) {
	enabled(t)
	conns := pick(500, 2000)
	timeout := pick(2*time.Second, 5*time.Second)
	var flags []string
	flags = append(flags, firstFlag(t, timeout.String(), "read-timeout", "body-timeout", "read-body-timeout")...)
	flags = append(flags, firstFlag(t, "1s", "read-header-timeout", "header-timeout")...)
	if len(flags) == 0 {
		t.Logf("this laggard serve has no read-timeout flag; the server's own default applies")
	}
	margin := pick(8*time.Second, 15*time.Second)
	okBound := pick(2*time.Second, time.Second)

	s := startServer(t, t.TempDir(), flags...)
	s.register(t, "slow", 1)
	s.register(t, "normal", 1)
	host := strings.TrimPrefix(s.URL(), "http://")

	var (
		closed    atomic.Int64
		dialFails atomic.Int64
		mu        sync.Mutex
		open      []net.Conn
		wg        sync.WaitGroup
		lastClose atomic.Int64 // unix nanos
	)
	head := fmt.Sprintf("POST /api/v1/jobs/slow/vectors HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{", host)
	attack := time.Now()
	for range conns {
		c, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err == nil {
			_, err = c.Write([]byte(head))
		}
		if err != nil {
			dialFails.Add(1)
			if c != nil {
				c.Close()
			}
			continue
		}
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Any answer, EOF or reset means the server let go.
			buf := make([]byte, 512)
			for {
				if _, err := c.Read(buf); err != nil {
					break
				}
			}
			closed.Add(1)
			lastClose.Store(time.Now().UnixNano())
		}()
	}
	dialed := time.Since(attack)
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	stopTrickle := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopTrickle:
				return
			case <-tk.C:
			}
			mu.Lock()
			cs := open
			mu.Unlock()
			for _, c := range cs {
				c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
				c.Write([]byte(" "))
			}
		}
	}()

	// Normal traffic during the attack.
	time.Sleep(time.Second)
	var worst time.Duration
	normal := newClient(1, 10*time.Second)
	for i := range 5 {
		for _, req := range []struct{ method, path, ctype string }{
			{"GET", "/healthz", ""}, {"POST", "/api/v1/jobs/normal/vectors", jsonType}, {"POST", "/api/v1/jobs/slow/vectors", jsonType},
		} {
			var body []byte
			if req.method == "POST" {
				body = jsonBatch([]key{{int64(i), 0}})
			}
			r, err := call(normal, req.method, s.URL()+req.path, req.ctype, body, nil)
			worst = max(worst, r.took)
			attacked := req.path == "/api/v1/jobs/slow/vectors"
			if attacked && err == nil && r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") != "" {
				r.status = http.StatusOK // over its share while its slow bodies are held: a valid answer
			}
			if err != nil || r.status != http.StatusOK {
				t.Errorf("%s %s during the slow-client attack: %d %v %s", req.method, req.path, r.status, err, clip(string(r.body), 200))
			} else if r.took > okBound {
				t.Errorf("%s %s during the slow-client attack took %v, want < %v", req.method, req.path, r.took, okBound)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}

	deadline := attack.Add(dialed + timeout + margin)
	for closed.Load() < int64(len(open)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stopTrickle)
	<-trickled
	held := int64(len(open)) - closed.Load()
	allClosed := "—"
	if held == 0 {
		allClosed = time.Unix(0, lastClose.Load()).Sub(attack).Round(time.Millisecond).String()
	}
	t.Logf("slow clients (%s mode, server flags %v): %d connections opened in %v (%d dial failures); %d closed by the server, %d still held after %v; all closed at %v; normal requests during the attack: worst %v",
		modeName(), flags, len(open), dialed.Round(time.Millisecond), dialFails.Load(), closed.Load(), held,
		time.Since(attack).Round(time.Millisecond), allClosed, worst.Round(time.Millisecond))
	if held > 0 {
		t.Errorf("%d of %d slow-body connections still held %v after the attack began (server flags %v)", held, len(open), time.Since(attack).Round(time.Second), flags)
	}
}
