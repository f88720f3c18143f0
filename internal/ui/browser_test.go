package ui

import (
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var shotsDir = flag.String("shots", "", "directory to keep browser screenshots in (default: a temp dir)")

// chromium runs headless Chromium with the flags that keep it offline and
// deterministic, skipping the test when no browser is installed.
func chromium(t *testing.T, args ...string) string {
	t.Helper()
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no headless Chromium installed (apt-get install -y chromium)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

func TestBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a browser")
	}
	srv := httptest.NewServer(testServerMux(t, false))
	defer srv.Close()
	// Chromium exits at its virtual-time budget without waiting for slow
	// (live-computed 1,024-rank) responses; drop those connections.
	defer srv.CloseClientConnections()
	dir := *shotsDir
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	// The DOM after scripts ran proves the page rendered the fixture, not
	// just that the browser loaded something.
	cases := []struct {
		name, hash string
		want       []string
	}{
		{"job list", "#/", []string{"llama3-8b-ddp-8", "llama3-8b-ddp-1024", "resnet50-smoke", "14,300"}},
		{"job view", "#/jobs/llama3-8b-ddp-8?last=200", []string{
			"Routed to", "leader rank 2", "gpu-a001", "routing set", "frontier_accounting",
			"Per-stage max", "Rank × stage", "Telemetry quality"}},
		{"degraded report", "#/jobs/edge-case", []string{
			"raw advances", "no confident leader rank", "Co-critical stages", "No labels emitted"}},
		{"unknown job", "#/jobs/nope", []string{"API error 404", "unknown job", "/api/v1/jobs/nope/report"}},
		{"bad window", "#/jobs/llama3-8b-ddp-8?last=abc", []string{"API error 400", "field: last"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dom := chromium(t, "--window-size=1400,1000", "--dump-dom", srv.URL+"/"+tc.hash)
			for _, w := range tc.want {
				if !strings.Contains(dom, w) {
					t.Errorf("rendered DOM lacks %q", w)
				}
			}
		})
	}

	shots := []struct{ file, hash, size string }{
		{"job.png", "#/jobs/llama3-8b-ddp-8?last=200", "1400,1000"},
		{"job-full.png", "#/jobs/llama3-8b-ddp-8?last=200", "1400,1500"},
		{"jobs.png", "#/", "1400,600"},
		{"job-1024.png", "#/jobs/llama3-8b-ddp-1024?last=200", "1400,1500"},
		{"edge.png", "#/jobs/edge-case", "1400,1000"},
		{"error.png", "#/jobs/nope", "1400,400"},
	}
	for _, s := range shots {
		p := filepath.Join(dir, s.file)
		chromium(t, "--window-size="+s.size, "--screenshot="+p, srv.URL+"/"+s.hash)
		st, err := os.Stat(p)
		if err != nil || st.Size() < 5000 {
			t.Fatalf("screenshot %s missing or blank: %v", p, err)
		}
		t.Logf("screenshot %s", p)
	}
}
