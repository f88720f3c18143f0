package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// requireToken answers /api/ requests the way `laggard serve -tokens`
// does: 401 with a Bearer challenge without a valid token, 403 for a
// token without the read scope. ok counts requests that carried the read
// token.
func requireToken(next http.Handler, ok *atomic.Int64) http.Handler {
	const read, ingest = "Bearer read-token-0123456789", "Bearer ingest-token-0123456789"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			next.ServeHTTP(w, r) // the UI's files are public
			return
		}
		switch r.Header.Get("Authorization") {
		case read:
			ok.Add(1)
			next.ServeHTTP(w, r)
		case ingest:
			writeJSON(w, http.StatusForbidden, map[string]string{"error": `token "trainer" lacks scope read (it has ingest:j)`})
		case "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="laggard"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "authentication required: send Authorization: Bearer <token>"})
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="laggard", error="invalid_token"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid bearer token"})
		}
	})
}

// The UI signs in with a read token when the server requires one: it asks
// on the first 401, says when a token was refused, sends the token on
// every request, and shows a 403 (a token without read) as an error.
func TestBrowserSignIn(t *testing.T) {
	bctx := startBrowser(t)
	f := newFakeAPI(t)
	var ok atomic.Int64
	srv := httptest.NewServer(requireToken(f.mux(), &ok))
	t.Cleanup(srv.Close)
	tab := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}.open

	p := tab(t, "#/")
	p.wait(`document.querySelector('dialog#signin[open]')`, "the sign-in dialog")
	if got := p.text("#signin-why"); !strings.Contains(got, "requires a token") {
		t.Errorf("first prompt says %q", got)
	}
	submit := func(tok string) {
		p.eval(`(() => { document.getElementById('signin-token').value = `+jsString(tok)+`;
			document.querySelector('#signin form').requestSubmit(); return true; })()`, nil)
	}
	submit("wrong-token-0123456789")
	p.wait(`document.querySelector('dialog#signin[open]') && document.getElementById('signin-why').textContent.includes('refused')`, "the refused-token prompt")
	if got := p.text("#signin-why"); !strings.Contains(got, "invalid bearer token") {
		t.Errorf("refused prompt says %q", got)
	}
	p.shot("signin.png")
	submit("read-token-0123456789")
	p.wait(`document.querySelectorAll('tr[data-job]').length === 11`, "the job list after signing in")
	if ok.Load() == 0 {
		t.Fatal("no API request carried the token")
	}
	if got := p.str(`sessionStorage.getItem('laggard.token')`); got != "read-token-0123456789" {
		t.Errorf("session token %q", got)
	}
	if got := p.str(`localStorage.getItem('laggard.token')`); got != "null" {
		t.Errorf("token remembered without asking: %q", got)
	}
	if p.count("#signout") != 1 {
		t.Error("no sign-out button")
	}
	// A job page's reports carry the token too.
	before := ok.Load()
	p.click(`tr[data-job="tie"] a`)
	p.wait(`document.querySelector('.headline-text')`, "the tie job's headline")
	if ok.Load() == before {
		t.Error("the report request did not carry the token")
	}

	// A token without the read scope: 403 is an error, not a prompt.
	p2 := tab(t, "#/") // a new tab: sessionStorage is per tab
	p2.wait(`document.querySelector('dialog#signin[open]')`, "the sign-in dialog in a new tab")
	p2.eval(`(() => { document.getElementById('signin-token').value = 'ingest-token-0123456789';
		document.querySelector('#signin form').requestSubmit(); return true; })()`, nil)
	p2.wait(`!document.getElementById('banner').hidden && document.getElementById('banner').textContent.includes('lacks scope read')`, "the 403 banner")
	if p2.count("dialog#signin[open]") != 0 {
		t.Error("a 403 opened the sign-in dialog")
	}
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
