package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sendAllThenRead sends a whole request — headers, then every byte of the
// body — before reading the answer, as Python's http.client does (and so
// the laggard client). A server that answers early and closes with the
// body unread resets the connection: the write or the read fails.
func sendAllThenRead(t *testing.T, base, method, path string, hdr map[string]string, body []byte) (*http.Response, []byte, error) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	var h strings.Builder
	fmt.Fprintf(&h, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n", method, path, len(body))
	for k, v := range hdr {
		fmt.Fprintf(&h, "%s: %s\r\n", k, v)
	}
	h.WriteString("\r\n")
	if _, err := io.Copy(conn, io.MultiReader(strings.NewReader(h.String()), bytes.NewReader(body))); err != nil {
		return nil, nil, fmt.Errorf("sending the body: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, b, err
}

// Issue 16 item 12: early 400/413 answers on big uploads reached Python's
// http.client as ConnectionResetError: the server answered before reading
// the body and closed the connection with the client still sending. Every
// route now reads (and discards) a bounded remainder of the body before
// its early answer, so the client gets the status and the message.
func TestEarlyAnswerReadsTheBodyFirst(t *testing.T) {
	st := openStore(t, t.TempDir())
	t.Cleanup(func() { st.Close() })
	_, ts := start(t, st, Config{MaxBodyBytes: 1 << 20})
	register(t, ts.URL, testJob("j", 2), http.StatusCreated)
	_, tsAuth := start(t, newMemStore(), Config{MaxBodyBytes: 1 << 20, Access: Access{Tokens: testTokens(t)}})
	big := bytes.Repeat([]byte(" "), 24<<20) // past the 1 MiB limit and the kernel's socket buffers
	js := map[string]string{"Content-Type": "application/json"}
	cases := []struct {
		name, base, method, path string
		hdr                      map[string]string
		status                   int
	}{
		{"413 vectors past the limit", ts.URL, "POST", "/api/v1/jobs/j/vectors", js, http.StatusRequestEntityTooLarge},
		{"413 collectives past the limit", ts.URL, "POST", "/api/v1/jobs/j/collectives", js, http.StatusRequestEntityTooLarge},
		{"413 stacks past the limit", ts.URL, "POST", "/api/v1/jobs/j/stacks", js, http.StatusRequestEntityTooLarge},
		{"404 unknown job", ts.URL, "POST", "/api/v1/jobs/nope/vectors", js, http.StatusNotFound},
		{"415 content type", ts.URL, "POST", "/api/v1/jobs/j/vectors", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"413 registration past the limit", ts.URL, "PUT", "/api/v1/jobs/k", js, http.StatusRequestEntityTooLarge},
		{"400 profile import with a bad query", ts.URL, "POST", "/api/v1/jobs/j/profiles?format=nope", map[string]string{"Content-Type": "application/octet-stream"}, http.StatusBadRequest},
		{"401 no token", tsAuth.URL, "POST", "/api/v1/jobs/j/vectors", js, http.StatusUnauthorized},
		{"403 wrong scope", tsAuth.URL, "POST", "/api/v1/jobs/j/vectors", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tokRead}, http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, b, err := sendAllThenRead(t, c.base, c.method, c.path, c.hdr, big)
			if err != nil {
				t.Fatalf("%v (the server answered early and reset the connection)", err)
			}
			if res.StatusCode != c.status || !bytes.Contains(b, []byte(`"error"`)) {
				t.Fatalf("%d %.200s, want %d with an error message", res.StatusCode, b, c.status)
			}
		})
	}
}
