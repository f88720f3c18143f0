package ui

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
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
		{"GET", "/", 200, "text/html; charset=utf-8", `<script type="module" src="ui/js/main.js">`},
		{"GET", "/index.html", 200, "text/html; charset=utf-8", "<title>laggard</title>"},
		{"HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"GET", "/ui/js/main.js", 200, "text/javascript; charset=utf-8", "import"},
		{"GET", "/ui/js/api.js", 200, "text/javascript; charset=utf-8", "api/v1/"},
		{"GET", "/ui/js/vocab.js", 200, "text/javascript; charset=utf-8", "DEFAULT_STAGES"},
		{"HEAD", "/ui/js/heatmap.js", 200, "text/javascript; charset=utf-8", ""},
		{"GET", "/ui/app.css", 200, "text/css; charset=utf-8", ".topbar"},
		{"GET", "/ui/app.js", 404, "", ""}, // split into modules
		{"GET", "/ui/js/", 404, "", ""},
		{"GET", "/ui/js", 404, "", ""},
		{"GET", "/ui/js/nope.js", 404, "", ""},
		{"GET", "/ui/js/../js/main.js", 404, "", ""},
		{"GET", "/ui/", 302, "", ""},
		{"GET", "/ui", 302, "", ""},
		{"GET", "/ui/nope.js", 404, "", ""},
		{"GET", "/ui/index.html", 404, "", ""},
		{"GET", "/ui/static/app.js", 404, "", ""},
		{"GET", "/ui/../handler.go", 404, "", ""},
		{"GET", "/favicon.ico", 404, "", ""},
		{"GET", "/jobs/x", 404, "", ""},
		{"POST", "/", 405, "", ""},
		{"DELETE", "/ui/js/main.js", 405, "", ""},
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
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/js/main.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q: want a validator and no-cache", etag, rec.Header().Get("Cache-Control"))
	}
	req := httptest.NewRequest("GET", "/ui/js/main.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Errorf("conditional GET = %d, want 304", rec.Code)
	}
	// Every asset has its own validator: a module that changes must not
	// be answered 304 on another module's ETag.
	seen := map[string]string{}
	for _, name := range assetNames(t) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/"+name, nil))
		e := rec.Header().Get("ETag")
		if other, dup := seen[e]; dup || e == "" {
			t.Errorf("%s: ETag %q (also %s)", name, e, other)
		}
		seen[e] = name
	}
}

// assetNames lists every embedded asset served under /ui/.
func assetNames(t testing.TB) []string {
	t.Helper()
	var out []string
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if name := strings.TrimPrefix(p, "static/"); name != "index.html" {
			out = append(out, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The modules import each other by relative path; every import must name
// an embedded module (a typo would only show as a blank page), and every
// module must be reachable from the entry point (no dead views).
func TestModuleGraph(t *testing.T) {
	importRe := regexp.MustCompile(`(?m)^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]|^\s*import\s+['"]([^'"]+)['"]`)
	names := assetNames(t)
	reached := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		if reached[name] {
			return
		}
		reached[name] = true
		b, err := staticFS.ReadFile("static/" + name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, m := range importRe.FindAllStringSubmatch(string(b), -1) {
			spec := m[1] + m[2]
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: only relative same-origin modules", name, spec)
				continue
			}
			target := path.Join(path.Dir(name), spec)
			if !slices.Contains(names, target) {
				t.Errorf("%s imports %q: no embedded static/%s", name, spec, target)
				continue
			}
			visit(target)
		}
	}
	visit("js/main.js")
	for _, n := range names {
		if strings.HasSuffix(n, ".js") && !reached[n] {
			t.Errorf("static/%s is not imported by any module reachable from js/main.js", n)
		}
	}
	if len(reached) < 10 {
		t.Errorf("only %d modules reachable from js/main.js: %v", len(reached), reached)
	}
}

// The page must not reach outside the origin: no CDN, no absolute URLs in
// asset references.
func TestStaticSelfContained(t *testing.T) {
	for _, name := range append(assetNames(t), "index.html") {
		// Vendored files (static/vendor/) are checked by
		// TestSysomVendoredAssets: pinned by hash, their only URLs are
		// XML namespace identifiers and license texts.
		if strings.HasPrefix(name, "vendor/") {
			continue
		}
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
	for path, want := range map[string]string{"/": "text/html; charset=utf-8", "/api/v1/jobs": "text/plain; charset=utf-8", "/ui/js/main.js": "text/javascript; charset=utf-8"} {
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
	for _, s := range []string{"/", "/ui/js/main.js", "/ui/", "/ui/%2e%2e/x", "/ui//js/main.js", "/ui/js//main.js", "/index.html", "/api/v1/jobs"} {
		f.Add(s)
	}
	h := Handler()
	ok := map[string]bool{"/": true, "/index.html": true}
	for _, name := range assetNames(f) {
		ok["/ui/"+name] = true
	}
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

func BenchmarkHandlerMainJS(b *testing.B) {
	h := Handler()
	req := httptest.NewRequest("GET", "/ui/js/main.js", nil)
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
