package ui

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"path"
	"regexp"
	"strings"
	"testing"
)

// The vendored flame-graph files (static/vendor/, scripts/vendor-ui.sh) are
// served exactly as npm published them: every file is pinned by SHA256SUMS,
// every package directory carries its LICENSE, and the only absolute URLs
// in the vendored scripts are XML namespace identifiers (nothing the page
// could fetch; the CSP forbids it anyway). TestStaticSelfContained skips
// static/vendor/ in favour of this test.
func TestSysomVendoredAssets(t *testing.T) {
	sums, err := staticFS.ReadFile("static/vendor/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for line := 1; sc.Scan(); line++ {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %d: %q is not \"<sha256>  <path>\"", line, sc.Text())
		}
		pinned[name] = sum
	}
	onDisk := map[string]bool{}
	dirs := map[string]bool{}
	err = fs.WalkDir(staticFS, "static/vendor", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := strings.TrimPrefix(p, "static/vendor/")
		if name == "SHA256SUMS" || name == "README.md" {
			return nil
		}
		onDisk[name] = true
		dirs[path.Dir(name)] = true
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if want, ok := pinned[name]; !ok {
			t.Errorf("static/vendor/%s is not in SHA256SUMS (run scripts/vendor-ui.sh)", name)
		} else if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("static/vendor/%s: sha256 %s, SHA256SUMS says %s: vendored files are not edited by hand", name, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range pinned {
		if !onDisk[name] {
			t.Errorf("SHA256SUMS lists %s, which is not embedded", name)
		}
	}
	for d := range dirs {
		if !onDisk[d+"/LICENSE"] {
			t.Errorf("static/vendor/%s has no LICENSE beside its files", d)
		}
	}
	for _, want := range []string{"d3-flame-graph-4.1.3/d3-flamegraph.min.js", "d3-selection-3.0.0/d3-selection.min.js"} {
		if !onDisk[want] {
			t.Errorf("static/vendor/%s missing", want)
		}
	}

	urlRe := regexp.MustCompile(`https?://[^"'\s)]*`)
	namespaces := map[string]bool{
		"http://www.w3.org/1999/xhtml": true, "http://www.w3.org/2000/svg": true, "http://www.w3.org/1999/xlink": true,
		"http://www.w3.org/XML/1998/namespace": true, "http://www.w3.org/2000/xmlns/": true,
	}
	for name := range onDisk {
		if !strings.HasSuffix(name, ".js") && !strings.HasSuffix(name, ".css") {
			continue
		}
		b, _ := staticFS.ReadFile("static/vendor/" + name)
		text := string(b)
		// The one-line banner comment d3 puts first names its home page.
		if strings.HasPrefix(text, "// ") {
			_, text, _ = strings.Cut(text, "\n")
		}
		for _, u := range urlRe.FindAllString(text, -1) {
			if !namespaces[u] {
				t.Errorf("static/vendor/%s references %q", name, u)
			}
		}
		for _, bad := range []string{"//cdn", "@import", "XMLHttpRequest", "fetch("} {
			if strings.Contains(text, bad) {
				t.Errorf("static/vendor/%s contains %q", name, bad)
			}
		}
	}
}
