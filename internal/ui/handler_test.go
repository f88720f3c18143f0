package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	cases := []struct {
		method, path string
		code         int
		ctype        string
		body         string // substring the body must contain
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", `<script src="ui/app.js">`},
		{"GET", "/index.html", 200, "text/html; charset=utf-8", "<title>laggard</title>"},
		{"HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", "api/v1/"},
		{"GET", "/ui/app.css", 200, "text/css; charset=utf-8", ".topbar"},
		{"GET", "/ui/", 302, "", ""},
		{"GET", "/ui", 302, "", ""},
		{"GET", "/ui/nope.js", 404, "", ""},
		{"GET", "/ui/index.html", 404, "", ""},
		{"GET", "/ui/static/app.js", 404, "", ""},
		{"GET", "/ui/../handler.go", 404, "", ""},
		{"GET", "/favicon.ico", 404, "", ""},
		{"GET", "/jobs/x", 404, "", ""},
		{"POST", "/", 405, "", ""},
		{"DELETE", "/ui/app.js", 405, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("status = %d, want %d", rec.Code, tc.code)
			}
			if tc.ctype != "" {
				if got := rec.Header().Get("Content-Type"); got != tc.ctype {
					t.Errorf("Content-Type = %q, want %q", got, tc.ctype)
				}
				if rec.Header().Get("X-Content-Type-Options") != "nosniff" {
					t.Error("missing X-Content-Type-Options: nosniff")
				}
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if tc.method == "HEAD" && rec.Body.Len() != 0 {
				t.Errorf("HEAD returned %d body bytes", rec.Body.Len())
			}
		})
	}
}

// The redirect must be relative so it survives a reverse-proxy prefix.
func TestHandlerRedirectRelative(t *testing.T) {
	for path, want := range map[string]string{"/ui/": "../", "/ui": "./"} {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if got := rec.Header().Get("Location"); got != want {
			t.Errorf("%s: Location = %q, want %q", path, got, want)
		}
	}
}

func TestHandlerIndexCSP(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	csp := rec.Header().Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "connect-src 'self'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
}

func TestHandlerETag(t *testing.T) {
	h := Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/app.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q: want a validator and no-cache", etag, rec.Header().Get("Cache-Control"))
	}
	req := httptest.NewRequest("GET", "/ui/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Errorf("conditional GET = %d, want 304", rec.Code)
	}
}

// The page must not reach outside the origin: no CDN, no absolute URLs in
// asset references.
func TestStaticSelfContained(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := staticFS.ReadFile("static/" + name)
		if err != nil {
			t.Fatal(err)
		}
		// The SVG namespace is an identifier, not a fetch.
		text := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "")
		for _, bad := range []string{"https://", "http://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("static/%s references %q", name, bad)
			}
		}
	}
}

// Served through a real server as the binary mounts it, next to /api/.
func TestHandlerMounted(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"jobs":[]}`) })
	mux.Handle("/", Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{"/": "text/html; charset=utf-8", "/api/v1/jobs": "text/plain; charset=utf-8", "/ui/app.js": "text/javascript; charset=utf-8"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != want {
			t.Errorf("%s: %d %q, want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), want)
		}
	}
}

// FuzzHandlerPath: any request path yields a well-formed response, and only
// the known routes answer 200.
func FuzzHandlerPath(f *testing.F) {
	for _, s := range []string{"/", "/ui/app.js", "/ui/", "/ui/%2e%2e/x", "/ui//app.js", "/index.html", "/api/v1/jobs"} {
		f.Add(s)
	}
	h := Handler()
	ok := map[string]bool{"/": true, "/index.html": true, "/ui/app.js": true, "/ui/app.css": true}
	f.Fuzz(func(t *testing.T, p string) {
		req, err := http.NewRequest("GET", "http://x/", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.Path = p
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200:
			if !ok[p] {
				t.Fatalf("path %q served 200", p)
			}
		case 302, 404:
		default:
			t.Fatalf("path %q: unexpected status %d", p, rec.Code)
		}
	})
}

func BenchmarkHandlerAppJS(b *testing.B) {
	h := Handler()
	req := httptest.NewRequest("GET", "/ui/app.js", nil)
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
