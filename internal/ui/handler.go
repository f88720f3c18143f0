package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var staticFS embed.FS

// asset is one embedded file, prepared once so serving is a map lookup.
type asset struct {
	name  string
	ctype string
	etag  string
	body  []byte
}

// contentTypes is explicit so responses do not depend on the host's
// /etc/mime.types (module scripts fail to load under any non-JavaScript
// type).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// csp keeps the page same-origin only: the UI needs no third-party script,
// style, font or connection. script-src 'self' admits the ES modules under
// /ui/js/ (and nothing inline). Inline styles are allowed because the
// style attributes the views set count as inline style.
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler returns the UI handler. Mount it at "/": it serves index.html at
// "/" and "/index.html", the assets under "/ui/" (the stylesheet, and the
// ES modules under "/ui/js/", which import each other by relative path so
// a path prefix in front of the UI needs no rewriting), redirects "/ui/" to the
// index, and answers 404 for everything else so API typos are not masked by
// an HTML page.
func Handler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embed directive guarantees "static" exists
	}
	assets := map[string]*asset{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		assets[p] = &asset{name: p, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, body: body}
		return nil
	})
	if err != nil {
		panic(err) // embedded files are always readable
	}
	return &handler{assets: assets}
}

type handler struct {
	assets map[string]*asset
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/" || p == "/index.html":
		h.serve(w, r, h.assets["index.html"])
	case p == "/ui" || p == "/ui/":
		// Relative target so the redirect also works behind a path prefix.
		target := "../"
		if p == "/ui" {
			target = "./"
		}
		// http.Redirect would make the target absolute; keep it relative.
		w.Header().Set("Location", target)
		w.WriteHeader(http.StatusFound)
	case strings.HasPrefix(p, "/ui/"):
		name := strings.TrimPrefix(p, "/ui/")
		a, ok := h.assets[name]
		if !ok || name == "index.html" {
			http.NotFound(w, r)
			return
		}
		h.serve(w, r, a)
	default:
		http.NotFound(w, r)
	}
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request, a *asset) {
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	hd.Set("ETag", a.etag)
	// Revalidate every load: assets are tiny and must match the binary's API.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	if a.name == "index.html" {
		hd.Set("Content-Security-Policy", csp)
		hd.Set("Referrer-Policy", "no-referrer")
	}
	// ServeContent handles If-None-Match (via the ETag above), HEAD and Range.
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.body))
}
