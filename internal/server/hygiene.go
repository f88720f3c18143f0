package server

import (
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/laggard-dev/laggard/internal/signal"
)

// guard runs in front of the mux on every request, in this order:
//
//   - body deadlines (slow-body and slow-reader protection, listen.go);
//   - the Host check (DNS rebinding: 421);
//   - the cross-origin check on state-changing requests (CSRF: 403);
//   - authentication and the route's scope (401/403, auth.go);
//   - the body's content type on state-changing requests (415).
//
// It sets r.Pattern to the route the mux will match, so refused requests
// are still counted under their route.
func (s *Server) guard(mux *http.ServeMux) http.Handler {
	// The standard library's CSRF check: a state-changing request from a
	// browser must be same-origin, judged by Sec-Fetch-Site or else by
	// Origin against Host. Non-browser clients send neither and pass.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hyg.rejected.WithLabelValues("origin").Inc()
		s.refuse(w, r, http.StatusForbidden, "cross-origin request refused (Origin "+quote(r.Header.Get("Origin"))+
			", Sec-Fetch-Site "+quote(r.Header.Get("Sec-Fetch-Site"))+"): laggard serves no other site's pages", "reason", "origin")
	}))
	hosts := newHostPolicy(s.cfg.Access, s.cfg.Addr)
	csrf := cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorize(w, r, r.Pattern) {
			return
		}
		if msg, ok := bodyTypeOK(r); !ok {
			s.hyg.rejected.WithLabelValues("content_type").Inc()
			s.refuse(w, r, http.StatusUnsupportedMediaType, msg, "reason", "content_type")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = s.deadlines(w, r)
		_, r.Pattern = mux.Handler(r)
		if !hosts.allowed(r.Host) {
			s.hyg.rejected.WithLabelValues("host").Inc()
			s.refuse(w, r, http.StatusMisdirectedRequest, "host "+quote(r.Host)+
				" is not served here (a guard against DNS rebinding); list it in -allowed-hosts", "reason", "host")
			return
		}
		csrf.ServeHTTP(w, r)
	})
}

func quote(s string) string { return `"` + signal.Clip(s) + `"` }

// hygieneMetrics counts requests refused by the request hygiene checks.
type hygieneMetrics struct {
	rejected *prometheus.CounterVec
}

func newHygieneMetrics(reg prometheus.Registerer) (*hygieneMetrics, error) {
	c, err := newReasonCounter(reg, "http", "rejected_total",
		"Requests refused by request hygiene: host (Host not allowed), origin (cross-origin), content_type.",
		"host", "origin", "content_type")
	return &hygieneMetrics{rejected: c}, err
}

// bodyTypes are the media types a request body may have.
var bodyTypes = map[string]bool{
	"application/json":                true,
	"application/x-protobuf":          true,
	"application/protobuf":            true,
	"application/vnd.google.protobuf": true,
	// Symbol file parts and outside profiles (SysOM-AI): neither is a
	// CORS-safelisted type, so a cross-site page cannot send them
	// without a preflight this server never answers.
	"application/octet-stream": true,
	"text/x-collapsed":         true,
	"application/x-pprof":      true,
	"application/gzip":         true,
}

// bodyTypeOK checks a state-changing request's body type. Only JSON and
// protobuf are accepted: the types an HTML form or a no-CORS fetch can
// send (form, multipart, text/plain) are refused, so a cross-site page
// cannot post even where the Origin check could not see it. A request
// without a body (a DELETE) needs no type.
func bodyTypeOK(r *http.Request) (string, bool) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return "", true
	}
	if r.ContentLength == 0 {
		return "", true
	}
	const want = "send application/json or application/x-protobuf (symbol parts: application/octet-stream; imported profiles: application/x-pprof, application/gzip or text/x-collapsed — text/plain is refused: any web page may send it)"
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "a request body needs a Content-Type: " + want, false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || !bodyTypes[mt] {
		return "unsupported Content-Type " + quote(ct) + ": " + want, false
	}
	return "", true
}

// hostPolicy decides which Host headers are served.
//
// DNS rebinding lets a web page the user visits point its own host name
// at 127.0.0.1 and then read and write a server there as if same-origin:
// the browser sends Host: attacker.example. An unauthenticated server
// must therefore refuse host names it does not know. IP literals are safe
// (rebinding needs a name the attacker controls), as are localhost and
// this machine's names. A server that requires tokens accepts any host:
// the rebinding page has no token to send, browsers never attach one by
// themselves, and proxies in front may use any name.
type hostPolicy struct {
	any   bool
	names map[string]bool
	ips   bool // any IP literal
}

func newHostPolicy(a Access, listenAddr string) hostPolicy {
	hp := hostPolicy{names: map[string]bool{}}
	if len(a.AllowedHosts) > 0 {
		for _, h := range a.AllowedHosts {
			if h == "*" {
				hp.any = true
			}
			hp.names[canonicalHost(h)] = true
		}
		return hp
	}
	if a.Tokens != nil {
		hp.any = true
		return hp
	}
	hp.ips = true
	hp.names["localhost"] = true
	if h, _, err := net.SplitHostPort(listenAddr); err == nil && h != "" {
		hp.names[canonicalHost(h)] = true
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		hp.names[canonicalHost(h)] = true
	}
	return hp
}

// canonicalHost lowercases a host name and drops a port, IPv6 brackets
// and a trailing dot.
func canonicalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

func (hp hostPolicy) allowed(host string) bool {
	if hp.any || host == "" { // HTTP/1.0 without Host: not a browser
		return true
	}
	h := canonicalHost(host)
	if hp.names[h] {
		return true
	}
	return hp.ips && net.ParseIP(h) != nil
}

// deadlines bounds the time to read r's body and to write the response.
// Each gets a fixed allowance plus one second per MinRate bytes moved, so
// a large body or export at a reasonable rate completes while a client
// that trickles bytes (or stops reading) is cut off. http.Server's
// ReadTimeout and WriteTimeout are fixed whatever the size: one value
// either cuts a 64 MiB batch on a slow link or lets a trickle hold a
// connection for as long, and WriteTimeout would cut long exports.
func (s *Server) deadlines(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	o := s.cfg.HTTP
	rc := http.NewResponseController(w)
	now := time.Now()
	dw := &deadlineWriter{ResponseWriter: w, rc: rc, start: now, allowance: o.WriteTimeout, rate: o.MinRate}
	wok := dw.extend()
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		b := &deadlineBody{ReadCloser: r.Body, rc: rc, start: now, allowance: o.BodyTimeout, rate: o.MinRate}
		if wok {
			b.w = dw
		}
		if b.extend() {
			r.Body = b
		}
	}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		// Last, so the drain reads through the deadlines above.
		d := &drainBody{ReadCloser: r.Body}
		r.Body = d
		out := w
		if wok {
			out = dw
		}
		return &drainWriter{ResponseWriter: out, r: r, body: d, limit: max(maxDrain, s.cfg.MaxBodyBytes)}
	}
	if !wok {
		return w // not supported by this connection (a test recorder)
	}
	return dw
}

// maxDrain is how much of an unread body the server reads and discards
// before an early answer (see drainWriter), at least: -max-body when it
// is larger.
const maxDrain = int64(64) << 20

// drainBody counts what the handler read of a body and whether it saw
// the end.
type drainBody struct {
	io.ReadCloser
	n   int64
	eof bool
}

func (b *drainBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// drainWriter reads the rest of an unread request body, up to limit
// bytes, before the response's header goes out. Why: a handler that
// answers early — 413 past the size limit, 429 before the body is read,
// 401/403/404/415 — left the body unread, and net/http then closes the
// connection with the client still sending. A client that sends its
// whole body before it reads the answer (Python's http.client, so the
// laggard client) got ConnectionResetError instead of the status and its
// message (issue 16 item 12). The drain reads through the body deadline,
// so a trickling client is still cut off; a body whose remaining
// declared length exceeds limit (1 MiB for a 429 or 503: load shedding
// must stay cheap) is not read (the connection is closed, as before), and
// nor is one whose client waits for "100 Continue" before sending it.
type drainWriter struct {
	http.ResponseWriter
	r       *http.Request
	body    *drainBody
	limit   int64
	drained bool
	shed    bool // the answer is 429 or 503
}

func (w *drainWriter) drain() {
	if w.drained {
		return
	}
	w.drained = true
	b := w.body
	if b.eof {
		return
	}
	if b.n == 0 && strings.EqualFold(w.r.Header.Get("Expect"), "100-continue") {
		return // the client has not sent the body and will not
	}
	limit := w.limit
	if w.shed {
		// Load shed before the body was read (429, 503): its point is
		// to spend a header on the refusal, not a read. A small body
		// (a client's usual batch) is still read, so its client gets
		// the 429 and its Retry-After; a large one is not.
		limit = maxShedDrain
	}
	if w.r.ContentLength > 0 && w.r.ContentLength-b.n > limit {
		return // too much to read: the connection closes
	}
	_, _ = io.CopyN(io.Discard, b, limit+1)
}

// maxShedDrain bounds the drain of a shed request's body (see drain).
const maxShedDrain = int64(1) << 20

func (w *drainWriter) WriteHeader(code int) {
	w.shed = code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
	w.drain()
	w.ResponseWriter.WriteHeader(code)
}

func (w *drainWriter) Write(p []byte) (int, error) {
	w.drain()
	return w.ResponseWriter.Write(p)
}

func (w *drainWriter) Flush() {
	w.drain()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *drainWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// allowance returns the deadline after n bytes.
func allowance(start time.Time, fixed time.Duration, n, rate int64) time.Time {
	return start.Add(fixed + time.Duration(float64(n)/float64(rate)*float64(time.Second)))
}

// step is how many bytes pass between deadline updates: an eighth of a
// second's worth at the minimum rate, so an export of many small writes
// does not reset a deadline per write.
func step(rate int64) int64 { return max(rate/8, 1) }

// deadlineBody moves the connection's read deadline as the body arrives.
type deadlineBody struct {
	io.ReadCloser
	rc        *http.ResponseController
	start     time.Time
	allowance time.Duration
	rate      int64
	n, next   int64 // bytes read; the count at which to move the deadline
	done      bool  // EOF seen
	// w, if set, is the response's writer: its allowance starts again
	// whenever the body makes progress, so a body that arrives at an
	// acceptable rate but for longer than WriteTimeout can still be
	// answered.
	w *deadlineWriter
}

func (b *deadlineBody) extend() bool {
	b.next = b.n + step(b.rate)
	b.restartWrite()
	return b.rc.SetReadDeadline(allowance(b.start, b.allowance, b.n, b.rate)) == nil
}

func (b *deadlineBody) restartWrite() {
	if b.w != nil && b.w.n == 0 {
		b.w.start = time.Now()
		b.w.extend()
	}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF && !b.done:
		// The body is complete and the server has cleared the deadline
		// for its background read of the connection; it must not be set
		// again (a timeout there cancels the request's context while the
		// handler works). On any other error, a timeout included, the
		// deadline stays and the connection is closed.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
		b.restartWrite() // the response's allowance runs from here
	case b.n >= b.next && !b.done:
		b.extend()
	}
	return n, err
}

// deadlineWriter moves the connection's write deadline as the response
// is written. It forwards Flush and Unwrap like statusWriter.
type deadlineWriter struct {
	http.ResponseWriter
	rc        *http.ResponseController
	start     time.Time
	allowance time.Duration
	rate      int64
	n, next   int64 // bytes written; the count at which to move the deadline
}

func (w *deadlineWriter) extend() bool {
	w.next = w.n + step(w.rate)
	return w.rc.SetWriteDeadline(allowance(w.start, w.allowance, w.n, w.rate)) == nil
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	if w.n >= w.next {
		w.extend()
	}
	return n, err
}

func (w *deadlineWriter) Flush() {
	_ = w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
