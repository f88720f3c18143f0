package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/detect"
)

// TestD4_FormContentTypeOnVectors: a cross-site HTML form can post
// application/x-www-form-urlencoded; vector posts accepted it as JSON.
func TestD4_FormContentTypeOnVectors(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	register(t, ts.URL, testJob("j", 2), 201)
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", "", "application/json; garbage"} {
		r := call{method: "POST", path: "/api/v1/jobs/j/vectors", ctype: ct, body: jsonBatch(t, vectors(2, 0, 1))}.do(t, ts.URL)
		if r.status != http.StatusUnsupportedMediaType || !strings.Contains(r.errBody(t).Error, "application/json") {
			t.Errorf("vectors with Content-Type %q: %d %s, want 415", ct, r.status, r.body)
		}
	}
	for _, ct := range []string{jsonType, "application/json; charset=utf-8", protoType} {
		body := jsonBatch(t, vectors(2, 0, 1))
		if ct == protoType {
			body = protoBatch(t, vectors(2, 0, 1))
		}
		if r := (call{method: "POST", path: "/api/v1/jobs/j/vectors", ctype: ct, body: body}).do(t, ts.URL); r.status != 200 {
			t.Errorf("vectors with Content-Type %q: %d %s", ct, r.status, r.body)
		}
	}
}

// TestD4_RanksIgnoreContentType: rank joins and registrations ignored the
// content type (text/plain is what a no-CORS fetch sends).
func TestD4_RanksIgnoreContentType(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	register(t, ts.URL, testJob("j", 2), 201)
	if r := (call{method: "POST", path: "/api/v1/jobs/j/ranks", ctype: "text/plain", body: []byte(`{"rank":1,"host":"h1"}`)}).do(t, ts.URL); r.status != 415 {
		t.Errorf("ranks with text/plain: %d %s", r.status, r.body)
	}
	if r := (call{method: "PUT", path: "/api/v1/jobs/k", ctype: "text/plain", body: mustJSON(t, testJob("k", 2))}).do(t, ts.URL); r.status != 415 {
		t.Errorf("register with text/plain: %d %s", r.status, r.body)
	}
	if r := (call{method: "POST", path: "/api/v1/jobs/j/ranks", ctype: jsonType, body: []byte(`{"rank":1,"host":"h1"}`)}).do(t, ts.URL); r.status != 200 {
		t.Errorf("ranks with JSON: %d %s", r.status, r.body)
	}
	// A request without a body needs no type.
	if r := (call{method: "DELETE", path: "/api/v1/jobs/zz"}).do(t, ts.URL); r.status == 415 {
		t.Errorf("DELETE without body: 415")
	}
	if v := metric(t, ts.URL, `laggard_http_rejected_total{reason="content_type"}`); v != "2" {
		t.Errorf("content_type rejections %s, want 2", v)
	}
}

// TestD4_HostChecked: DNS rebinding sends the attacker's host name to a
// loopback server; it was served.
func TestD4_HostChecked(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	for host, want := range map[string]int{
		"rebind.attacker.example": 421, "rebind.attacker.example:7070": 421, "LOCALHOST:1": 200, "localhost.": 200,
		"127.0.0.1:7070": 200, "[::1]:7070": 200, "10.1.2.3": 200,
	} {
		r := call{method: "GET", path: "/api/v1/jobs", host: host}.do(t, ts.URL)
		if r.status != want {
			t.Errorf("Host %q: %d %s, want %d", host, r.status, r.body, want)
		}
		if want == 421 && !strings.Contains(r.errBody(t).Error, "-allowed-hosts") {
			t.Errorf("Host %q: error %s does not say how to allow it", host, r.body)
		}
	}
	// Configured hosts are exactly those; with tokens any host is served.
	_, ts2 := start(t, newMemStore(), Config{Access: Access{AllowedHosts: []string{"laggard.internal"}}})
	if r := (call{method: "GET", path: "/healthz", host: "laggard.internal:443"}).do(t, ts2.URL); r.status != 200 {
		t.Errorf("allowed host: %d", r.status)
	}
	if r := (call{method: "GET", path: "/healthz", host: "other.internal"}).do(t, ts2.URL); r.status != 421 {
		t.Errorf("host not in -allowed-hosts: %d", r.status)
	}
	_, ts3 := start(t, newMemStore(), Config{Access: Access{Tokens: testTokens(t)}})
	if r := (call{method: "GET", path: "/api/v1/jobs", host: "any.example", token: tokRead}).do(t, ts3.URL); r.status != 200 {
		t.Errorf("any host with tokens: %d", r.status)
	}
}

// TestD4_CrossSiteOrigin: a page on another site posting to the server
// (CSRF) was served.
func TestD4_CrossSiteOrigin(t *testing.T) {
	_, ts := start(t, newMemStore(), Config{})
	job := mustJSON(t, testJob("j", 2))
	for _, c := range []struct {
		header map[string]string
		want   int
	}{
		{map[string]string{"Origin": "https://evil.example"}, 403},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{map[string]string{"Origin": "null"}, 403},
		{map[string]string{"Origin": ts.URL, "Sec-Fetch-Site": "same-origin"}, 201},
		{map[string]string{"Origin": ts.URL}, 200}, // re-registering the same job
		{nil, 200}, // not a browser
	} {
		r := call{method: "PUT", path: "/api/v1/jobs/j", ctype: jsonType, body: job, header: c.header}.do(t, ts.URL)
		if r.status != c.want {
			t.Errorf("PUT with %v: %d %s, want %d", c.header, r.status, r.body, c.want)
		}
	}
	// Cross-origin reads are the browser's business (no CORS headers, so
	// the page cannot read the answer), but nothing invites them.
	r := call{method: "GET", path: "/api/v1/jobs", header: map[string]string{"Origin": "https://evil.example"}}.do(t, ts.URL)
	for k := range r.header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("CORS header %s: %s", k, r.header.Get(k))
		}
	}
}

// serveReal runs a server with cfg on a loopback listener through Serve
// (so HTTPOptions apply) and returns its address.
func serveReal(t *testing.T, cfg Config) string {
	t.Helper()
	cfg.Logger = quiet
	cfg.Detect = detect.Config{Interval: -1}
	s, err := New(cfg, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// slowBody opens a connection and sends a POST whose 1 MB body then
// trickles one byte per interval. It returns when the server closes the
// connection (or answers), or after limit.
func slowBody(addr string, interval, limit time.Duration) (time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /api/v1/jobs/j/vectors HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{", addr)
	closed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, conn) // returns when the server closes
		close(closed)
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-closed:
			return time.Since(start), nil
		case <-t.C:
			if time.Since(start) > limit {
				return 0, fmt.Errorf("still open after %v", limit)
			}
			_, _ = conn.Write([]byte(" "))
		}
	}
}

// TestD8_SlowBodyClosed: a client trickling a body held its connection
// (and a handler) for as long as it liked.
func TestD8_SlowBodyClosed(t *testing.T) {
	addr := serveReal(t, Config{HTTP: HTTPOptions{BodyTimeout: 300 * time.Millisecond, MinRate: 64 << 10}})
	register(t, "http://"+addr, testJob("j", 2), 201) // so the handler reads the body
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			d, err := slowBody(addr, 20*time.Millisecond, 5*time.Second)
			if err == nil && d > 3*time.Second {
				err = fmt.Errorf("closed after %v", d)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A body sent at a good rate is not cut by the body timeout, and a
// handler still working after the body is read (a commit, a report) keeps
// its context: the lifted deadline must not cancel it.
func TestD8_BodyAtRateAndLongHandler(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		time.Sleep(1500 * time.Millisecond) // past the body deadline (0.3s + 2s for 200 KB)
		if err := r.Context().Err(); err != nil {
			http.Error(w, "context: "+err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "read %d", n)
	})
	addr := serveReal(t, Config{UI: ui, HTTP: HTTPOptions{BodyTimeout: 300 * time.Millisecond, MinRate: 100 << 10}})
	if err := steadyUpload(addr); err != nil {
		t.Fatal(err)
	}
}

// steadyUpload posts 200 KB in 20 pieces over ~1 s to a server whose
// handler answers "read N" once it has the body: longer than the tests'
// 300 ms allowances, but at 200 KB/s, above their minimum rate.
func steadyUpload(addr string) error {
	pr, pw := io.Pipe()
	go func() {
		chunk := make([]byte, 10<<10)
		for range 20 {
			time.Sleep(50 * time.Millisecond)
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", "http://"+addr+"/upload", pr)
	req.Header.Set("Content-Type", jsonType)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != fmt.Sprint("read ", 200<<10) {
		return fmt.Errorf("%d %s", res.StatusCode, b)
	}
	return nil
}

// TestD8_ConnectionLimit: connections were unlimited.
func TestD8_ConnectionLimit(t *testing.T) {
	addr := serveReal(t, Config{HTTP: HTTPOptions{MaxConns: 2}})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	get := func() (int, error) {
		cl := &http.Client{Timeout: 400 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		res, err := cl.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	if code, err := get(); err == nil {
		t.Fatalf("a third connection was served (%d) while two are held", code)
	}
	held[0].Close()
	deadline := time.Now().Add(3 * time.Second)
	for {
		code, err := get()
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not served after a slot freed: %v", err)
		}
	}
}

// The defaults bound every connection.
func TestD8_Defaults(t *testing.T) {
	s, err := New(Config{Logger: quiet, Detect: detect.Config{Interval: -1}}, newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hs, _ := s.httpServer(ln)
	o := s.cfg.HTTP
	if hs.ReadHeaderTimeout != 10*time.Second || hs.IdleTimeout != 2*time.Minute || hs.MaxHeaderBytes != 64<<10 ||
		o.BodyTimeout != 30*time.Second || o.WriteTimeout != 2*time.Minute || o.MinRate != 64<<10 || o.MaxConns != 4096 {
		t.Fatalf("defaults: server %+v options %+v", hs, o)
	}
}

// TestD8_HeaderLimit: headers above MaxHeaderBytes are refused.
func TestD8_HeaderLimit(t *testing.T) {
	addr := serveReal(t, Config{HTTP: HTTPOptions{MaxHeaderBytes: 8 << 10}})
	req, _ := http.NewRequest("GET", "http://"+addr+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB header: %d", res.StatusCode)
	}
}

// TestD8_SlowReaderCut: a client that stops reading a response is cut
// off after the write allowance instead of holding the handler.
func TestD8_SlowReaderCut(t *testing.T) {
	done := make(chan error, 1)
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 1 << 12 { // 256 MiB: far beyond the socket buffers
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	})
	addr := serveReal(t, Config{UI: ui, HTTP: HTTPOptions{WriteTimeout: 300 * time.Millisecond, MinRate: 16 << 20}})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	br := bufio.NewReader(conn)
	if _, err := br.ReadString('\n'); err != nil { // the status line, then stop reading
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the handler wrote 256 MiB to a client that does not read")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler still blocked on a client that does not read after 10s")
	}
}

// TLS: -tls-cert/-tls-key serve HTTPS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	tcfg, err := LoadTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveReal(t, Config{HTTP: HTTPOptions{TLS: tcfg}})
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	res, err := cl.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil {
		t.Fatalf("HTTPS healthz: %d (TLS %v)", res.StatusCode, res.TLS != nil)
	}
	if _, err := LoadTLS(certFile, certFile); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("a bad key pair: %v", err)
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "laggard test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// A body that arrives at an acceptable rate but for longer than the write
// allowance is still answered: the response's allowance runs from when
// the body last made progress, not from the request's start.
func TestD8_SlowButSteadyBodyGetsItsAnswer(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "read %d", n)
	})
	addr := serveReal(t, Config{UI: ui, HTTP: HTTPOptions{BodyTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MinRate: 100 << 10}})
	if err := steadyUpload(addr); err != nil {
		t.Fatalf("no answer after a steady 1 s upload with a 300 ms write allowance: %v", err)
	}
}

// The documented import types pass hygiene (the route answers, not 415);
// text/plain stays refused and the message names what to send.
func TestImportContentTypes(t *testing.T) {
	for ct, ok := range map[string]bool{"application/x-pprof": true, "application/gzip": true, "text/x-collapsed": true, "application/octet-stream": true, "text/plain": false} {
		r := &http.Request{Method: http.MethodPost, ContentLength: 3, Header: http.Header{"Content-Type": {ct}}}
		msg, got := bodyTypeOK(r)
		if got != ok {
			t.Errorf("%s: accepted=%v, want %v (%s)", ct, got, ok, msg)
		}
		if !ok && !strings.Contains(msg, "text/x-collapsed") {
			t.Errorf("%s: message %q does not name the import types", ct, msg)
		}
	}
}
