package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/signal"
)

// testdata/sysom/ holds what the SysOM read API (contracts §6) answers for
// a few of the scenario jobs: the report (sysom-<job>.json), flame graphs
// (rank 2, any other rank, a group), differential trees (straggler vs peer,
// now vs baseline) and OS signals. They are written by hand to the
// contract, small enough to check by eye: rank 2 of data-straggler-8 spends
// 30% of its samples in another process ("[other process] hog") its peer
// rank 5 does not have. The directory is apart from testdata/*.json, which
// TestFixtures owns.

// sysomJobs maps a job to its report and OS-signal fixtures; other jobs
// have no CPU profiles (404, the "how to enable" state).
var sysomJobs = map[string][2]string{
	"data-straggler-8": {"sysom-data-straggler-8.json", "osstats-data-straggler-8.json"},
	"tie":              {"sysom-tie.json", "osstats-data-straggler-8.json"},
	"baseline-8":       {"sysom-baseline-8.json", "osstats-data-straggler-8.json"},
	"relief":           {"sysom-data-straggler-8.json", "osstats-data-straggler-8.json"},
	"nccl-only-4":      {"sysom-tie.json", "osstats-data-straggler-8.json"},
}

// brokenFlame: a job whose flame graph fails with a server error.
const brokenFlame = "relief"

// sysomFake serves the SysOM endpoints from testdata/sysom/ in front of
// the stage/Greyhound fake API, checking queries as the server would.
type sysomFake struct {
	f     *fakeAPI
	files map[string][]byte
	mu    sync.Mutex
	reqs  []string // request URIs of the SysOM endpoints, in order
	// noGreyhound hides a job's collective analysis (404), leaving only
	// its profiles.
	noGreyhound map[string]bool
}

func newSysomFake(t testing.TB) *sysomFake {
	t.Helper()
	s := &sysomFake{f: newFakeAPI(t), files: map[string][]byte{}, noGreyhound: map[string]bool{}}
	paths, err := filepath.Glob(filepath.Join("testdata", "sysom", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("%s is not JSON", p)
		}
		s.files[filepath.Base(p)] = b
	}
	if len(s.files) < 9 {
		t.Fatalf("%d files in testdata/sysom, want 9", len(s.files))
	}
	return s
}

func (s *sysomFake) requests(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.reqs {
		if strings.HasPrefix(r, prefix) {
			out = append(out, r)
		}
	}
	return out
}

// fakeNow is the clock the fake hands the server's parsers: just after the
// fixtures' window.
const fakeNow = 1773500400000000000

func (s *sysomFake) mux() *http.ServeMux {
	mux := http.NewServeMux()
	job := func(w http.ResponseWriter, r *http.Request) ([2]string, bool) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.URL.RequestURI())
		s.mu.Unlock()
		id := r.PathValue("id")
		files, ok := sysomJobs[id]
		if !ok {
			if _, known := s.f.job(id); !known {
				fail(w, unknownJob(id))
			} else {
				fail(w, fmt.Errorf("job %q has no CPU stacks: %w", signal.Clip(id), analysis.ErrNoData))
			}
		}
		return files, ok
	}
	mux.HandleFunc("GET /api/v1/jobs/{id}/sysom", func(w http.ResponseWriter, r *http.Request) {
		if files, ok := job(w, r); ok {
			if _, err := analysis.ParseSysomRequest(r.PathValue("id"), r.URL.Query(), fakeNow); err != nil {
				fail(w, err)
				return
			}
			writeRaw(w, s.files[files[0]])
		}
	})
	// Queries are parsed by the server's own parsers (internal/analysis),
	// so a query the UI builds is one the server accepts.
	mux.HandleFunc("GET /api/v1/jobs/{id}/flamegraph", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := job(w, r); !ok {
			return
		}
		req, err := analysis.ParseFlameRequest(r.PathValue("id"), r.URL.Query(), fakeNow, false)
		if err != nil {
			fail(w, err)
			return
		}
		if r.PathValue("id") == brokenFlame {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "symbol store unavailable"})
			return
		}
		name := "flame-peer.json"
		switch {
		case req.Sel.Group != "":
			name = "flame-group.json"
		case req.Sel.Rank == 2:
			name = "flame-rank2.json"
		}
		var body map[string]any
		if err := json.Unmarshal(s.files[name], &body); err != nil {
			fail(w, err)
			return
		}
		if req.Sel.Group == "" {
			body["rank"] = req.Sel.Rank
		} else {
			body["group"] = req.Sel.Group
		}
		if req.Window.FromNS != 0 {
			body["from_ns"] = req.Window.FromNS
		}
		if req.Window.ToNS != 0 {
			body["to_ns"] = req.Window.ToNS
		}
		writeJSON(w, http.StatusOK, body)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/flamegraph/diff", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := job(w, r); !ok {
			return
		}
		req, err := analysis.ParseDiffRequest(r.PathValue("id"), r.URL.Query(), fakeNow)
		if err != nil {
			fail(w, err)
			return
		}
		if req.Baseline {
			writeRaw(w, s.files["diff-baseline.json"])
		} else {
			writeRaw(w, s.files["diff-peer.json"])
		}
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/osstats", func(w http.ResponseWriter, r *http.Request) {
		if files, ok := job(w, r); ok {
			if _, err := analysis.ParseOSRequest(r.PathValue("id"), r.URL.Query(), fakeNow); err != nil {
				fail(w, err)
				return
			}
			writeRaw(w, s.files[files[1]])
		}
	})
	api := s.f.handler()
	mux.HandleFunc("GET /api/v1/jobs/{id}/greyhound", func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("id"); s.noGreyhound[id] {
			fail(w, fmt.Errorf("job %q has no collective calls: %w", signal.Clip(id), analysis.ErrNoData))
			return
		}
		api.ServeHTTP(w, r)
	})
	mux.Handle("/api/", api)
	mux.Handle("/", Handler())
	return mux
}

// The fake answers the SysOM routes with the fixtures, 404 for a job
// without profiles, and 400 naming the field for a bad query.
func TestSysomFakeAPI(t *testing.T) {
	h := newSysomFake(t).mux()
	for path, want := range map[string]int{
		"/api/v1/jobs/data-straggler-8/sysom":                                              200,
		"/api/v1/jobs/data-straggler-8/flamegraph?rank=2":                                  200,
		"/api/v1/jobs/data-straggler-8/flamegraph?group=dp-0":                              200,
		"/api/v1/jobs/data-straggler-8/flamegraph":                                         400,
		"/api/v1/jobs/data-straggler-8/flamegraph?rank=x":                                  400,
		"/api/v1/jobs/data-straggler-8/flamegraph/diff?a_rank=2&b_rank=5":                  200,
		"/api/v1/jobs/data-straggler-8/flamegraph/diff?rank=2&base_from_ns=1&base_to_ns=2": 200,
		"/api/v1/jobs/data-straggler-8/flamegraph/diff?rank=2":                             200,
		"/api/v1/jobs/data-straggler-8/flamegraph/diff?a_rank=2&b_rank=5&base_from_ns=1":   400,
		"/api/v1/jobs/data-straggler-8/flamegraph/diff?a_rank=2":                           400,
		"/api/v1/jobs/data-straggler-8/osstats":                                            200,
		"/api/v1/jobs/few-steps/sysom":                                                     404,
		"/api/v1/jobs/nope/flamegraph?rank=0":                                              404,
		"/api/v1/jobs/data-straggler-8/report":                                             200,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want || !json.Valid(rec.Body.Bytes()) {
			t.Errorf("%s: %d %s, want %d", path, rec.Code, rec.Body.String(), want)
		}
	}
}

// The fixtures keep the contract's invariants the UI relies on: a node's
// value covers its children, totals match the root, diff counts are
// inclusive on both sides.
func TestSysomFixtures(t *testing.T) {
	s := newSysomFake(t)
	type node struct {
		Name     string  `json:"name"`
		Kind     string  `json:"kind"`
		Value    int64   `json:"value"`
		Self     int64   `json:"self"`
		A        int64   `json:"a"`
		B        int64   `json:"b"`
		Children []*node `json:"children"`
	}
	var check func(file string, n *node, diff bool)
	check = func(file string, n *node, diff bool) {
		var v, a, b int64
		for _, c := range n.Children {
			check(file, c, diff)
			v, a, b = v+c.Value, a+c.A, b+c.B
		}
		if !diff && n.Value != v+n.Self {
			t.Errorf("%s: %s value %d ≠ self %d + children %d", file, n.Name, n.Value, n.Self, v)
		}
		if diff && (n.A < a || n.B < b) {
			t.Errorf("%s: %s a/b %d/%d below children %d/%d", file, n.Name, n.A, n.B, a, b)
		}
		if !slicesContains([]string{"native", "kernel", "python", "symbol"}, n.Kind) {
			t.Errorf("%s: %s kind %q", file, n.Name, n.Kind)
		}
	}
	for _, name := range []string{"flame-rank2.json", "flame-peer.json", "flame-group.json"} {
		var f struct {
			Total int64 `json:"total"`
			Root  *node `json:"root"`
		}
		if err := json.Unmarshal(s.files[name], &f); err != nil || f.Root == nil || f.Root.Value != f.Total {
			t.Fatalf("%s: %v, total %d", name, err, f.Total)
		}
		check(name, f.Root, false)
	}
	for _, name := range []string{"diff-peer.json", "diff-baseline.json"} {
		var d struct {
			A, B struct {
				Total int64 `json:"total"`
			}
			Root *node `json:"root"`
		}
		if err := json.Unmarshal(s.files[name], &d); err != nil || d.Root == nil || d.Root.A != d.A.Total || d.Root.B != d.B.Total {
			t.Fatalf("%s: %v", name, err)
		}
		check(name, d.Root, true)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// frameBox is a flame-graph frame's rect as drawn: its width, the chart's
// width and its fill.
type frameBox struct {
	W, Total float64
	Fill     string
	N        int
}

func (p *page) frame(host, name string) frameBox {
	p.t.Helper()
	var b frameBox
	p.eval(fmt.Sprintf(`(() => {
		const svg = document.querySelector(%q + ' svg.d3-flame-graph');
		const gs = svg ? [...svg.querySelectorAll('g.frame')].filter((g) => g.getAttribute('name') === %q) : [];
		const r = gs.length ? gs[0].querySelector('rect') : null;
		return { W: r ? +r.getAttribute('width') : -1, Total: svg ? +svg.getAttribute('width') : 0, Fill: r ? r.getAttribute('fill') : '', N: gs.length };
	})()`, host, name), &b)
	return b
}

// waitShare waits until frame name in host spans share of the chart's
// width (within a pixel), past the component's transition.
func (p *page) waitShare(host, name string, share float64) {
	p.t.Helper()
	p.wait(fmt.Sprintf(`(() => {
		const svg = document.querySelector(%q + ' svg.d3-flame-graph');
		const g = svg && [...svg.querySelectorAll('g.frame')].find((g) => g.getAttribute('name') === %q);
		const r = g && g.querySelector('rect');
		return r && Math.abs(+r.getAttribute('width') - %g * +svg.getAttribute('width')) <= 1;
	})()`, host, name, share), fmt.Sprintf("%s at %.1f%% of the width in %s", name, 100*share, host))
}

var rgbRe = regexp.MustCompile(`^rgb\((\d+), (\d+), (\d+)\)$`)

func rgbOf(t *testing.T, fill string) (r, g, b int) {
	t.Helper()
	m := rgbRe.FindStringSubmatch(fill)
	if m == nil {
		t.Fatalf("fill %q is not rgb()", fill)
	}
	r, _ = strconv.Atoi(m[1])
	g, _ = strconv.Atoi(m[2])
	b, _ = strconv.Atoi(m[3])
	return
}

var hslRe = regexp.MustCompile(`^hsl\((-?\d+), `)

func hueOf(t *testing.T, fill string) int {
	t.Helper()
	m := hslRe.FindStringSubmatch(fill)
	if m == nil {
		t.Fatalf("fill %q is not hsl()", fill)
	}
	h, _ := strconv.Atoi(m[1])
	return h
}

func (p *page) hover(sel string) {
	p.t.Helper()
	x, y, w, h := p.box(sel)
	if err := chromedp.Do(p.ctx, chromedp.MouseEvent("mouseMoved", x+w/2, y+h/2)); err != nil {
		p.t.Fatal(err)
	}
}

func frameSel(host, name string) string {
	return fmt.Sprintf(`%s svg.d3-flame-graph g.frame[name=%q] rect`, host, name)
}

func TestBrowserSysom(t *testing.T) {
	bctx := startBrowser(t)
	s := newSysomFake(t)
	srv := httptest.NewServer(s.mux())
	t.Cleanup(srv.Close)
	tab := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}.open
	section := func(p *page) {
		p.t.Helper()
		p.wait(`document.querySelector('#sysom')`, "the SysOM section")
		p.idle()
	}

	t.Run("straggler: diagnosis, flame graph, zoom, search, diff, OS panels", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		section(p)
		// The layered diagnosis: GPU → CPU → OS, concluded at the CPU.
		diag := `.sy-diag[data-rank="2"]`
		p.wait(`document.querySelector('`+diag+`')`, "rank 2's diagnosis")
		if got := p.str(`document.querySelector('` + diag + `').dataset.layer`); got != "cpu" {
			t.Errorf("concluded layer %q, want cpu", got)
		}
		if got := p.text(diag + " .sy-verdict"); !strings.Contains(got, "another process (hog) takes 30% of its CPU") {
			t.Errorf("summary %q", got)
		}
		if got := p.str(`[...document.querySelectorAll('` + diag + ` .sy-layer')].map((l) => l.dataset.layer + ':' + l.dataset.finding).join(' ')`); got != "gpu:matches cpu:differs os:differs" {
			t.Errorf("layers %q, want gpu:matches cpu:differs os:differs in that order", got)
		}
		if got := p.text(diag + ` .sy-layer[data-layer="cpu"]`); !strings.Contains(got, "concluded here") || !strings.Contains(got, "30.0% of rank 2's CPU samples are another process") ||
			!strings.Contains(got, "[other process] hog → hog_spin") || !strings.Contains(got, "next check find what runs on CPU 2") {
			t.Errorf("CPU layer %q lacks its finding, evidence, path or next check", got)
		}
		if got := p.text(diag + ` .sy-layer[data-layer="os"] .sy-next`); !strings.Contains(got, "perf sched latency") {
			t.Errorf("OS next check %q", got)
		}
		if got := p.text(diag + " .sy-conf"); got != "high confidence" {
			t.Errorf("confidence %q", got)
		}
		if p.count(diag+" .sy-inconclusive") != 0 {
			t.Error("a high-confidence diagnosis is marked inconclusive")
		}
		if got := p.text(`table.sy-slow tr[data-rank="2"]`); !strings.Contains(got, "41.7 ms") || !strings.Contains(got, "5.8") {
			t.Errorf("slow rank row %q", got)
		}
		if got := p.text(`table.sy-waterline tr[data-rank="2"]`); !strings.Contains(got, "[other process] hog") || !strings.Contains(got, "30.0%") {
			t.Errorf("waterline row %q", got)
		}

		// The flame graph of the straggler (the default subject): frames
		// named as the tree, widths proportional to their counts.
		fg := "#sy-flame"
		p.wait(`document.querySelector('#sy-flame svg.d3-flame-graph g.frame')`, "the flame graph")
		for name, v := range map[string]float64{"all": 1000, "train_step": 600, "[other process] hog": 300, "forward": 330, "backward": 250,
			"at::native::addmm": 240, "entry_SYSCALL_64": 100, "do_sys_openat2": 100} {
			p.waitShare(fg, name, v/1000)
		}
		if n := p.count(fg + " g.frame"); n != 11 {
			t.Errorf("%d frames, want 11", n)
		}
		// Colors by kind: Python green, kernel orange, native red.
		for name, hue := range map[string][2]int{"train_step": {120, 150}, "entry_SYSCALL_64": {25, 50}, "at::native::addmm": {0, 25}} {
			if h := hueOf(t, p.frame(fg, name).Fill); h < hue[0] || h > hue[1] {
				t.Errorf("%s hue %d, want %d–%d", name, h, hue[0], hue[1])
			}
		}
		p.hover(frameSel(fg, "train_step"))
		p.wait(`!document.getElementById('tooltip').hidden && document.getElementById('tooltip').textContent.startsWith('train_step')`, "the frame tooltip")
		if got := p.text("#tooltip"); !strings.Contains(got, "samples600") || !strings.Contains(got, "of all60.0%") || !strings.Contains(got, "kindPython") {
			t.Errorf("tooltip %q", got)
		}
		// Click to zoom: forward fills the width, its sibling subtree goes.
		p.click(frameSel(fg, "forward"))
		p.waitShare(fg, "forward", 1)
		p.waitShare(fg, "at::native::addmm", 240.0/330)
		p.wait(`(() => { const g = [...document.querySelectorAll('#sy-flame g.frame')].find((g) => g.getAttribute('name') === '[other process] hog'); return !g || +g.querySelector('rect').getAttribute('width') === 0; })()`, "the other process zoomed out of view")
		if got := p.str(`document.querySelector('#sy-flame').dataset.zoom`); got != "forward" {
			t.Errorf("zoomed to %q", got)
		}
		p.click("#sy-fg-reset")
		p.waitShare(fg, "train_step", 0.6)
		p.waitShare(fg, "[other process] hog", 0.3)
		// Search: matches highlighted, the matched share read out; a regex
		// metacharacter is plain text.
		if err := chromedp.Do(p.ctx, chromedp.SendKeys("#sy-fg-search", "addmm")); err != nil {
			t.Fatal(err)
		}
		p.wait(`document.querySelector('#sy-fg-match').textContent.includes('240 samples (24.0%)')`, "the search read-out")
		if f := p.frame(fg, "at::native::addmm").Fill; f != "#e600e6" {
			t.Errorf("search match fill %q", f)
		}
		p.eval(`(() => { const i = document.querySelector('#sy-fg-search'); i.value = '[other'; i.dispatchEvent(new Event('input')); })()`, nil)
		p.wait(`document.querySelector('#sy-fg-match').textContent.includes('300 samples (30.0%)')`, "a search with a regex metacharacter")
		// Enter zooms to the widest match (the keyboard's way to zoom).
		if err := chromedp.Do(p.ctx, chromedp.SendKeys("#sy-fg-search", kb.Enter)); err != nil {
			t.Fatal(err)
		}
		p.waitShare(fg, "[other process] hog", 1)
		p.wait(`document.querySelector('#sy-fg-match').textContent.includes('zoomed to [other process] hog')`, "the zoom read-out")
		p.click("#sy-fg-reset")
		p.waitShare(fg, "train_step", 0.6)

		// The differential graph: rank 2 against peer rank 5 by default.
		df := "#sy-diff"
		p.wait(`document.querySelector('#sy-diff svg.d3-flame-graph g.frame')`, "the differential flame graph")
		if reqs := s.requests("/api/v1/jobs/data-straggler-8/flamegraph/diff"); len(reqs) == 0 || !strings.Contains(reqs[0], "a_rank=2&b_rank=5") {
			t.Errorf("diff requests %q, want a_rank=2&b_rank=5 first", reqs)
		}
		// Width: mean of the two normalized shares. hog: (0.3 + 0)/2.
		p.waitShare(df, "[other process] hog", 0.15)
		if r, g, b := rgbOf(t, p.frame(df, "[other process] hog").Fill); r < 180 || g > 90 || b > 90 {
			t.Errorf("straggler-only frame fill rgb(%d, %d, %d), want red", r, g, b)
		}
		if r, _, b := rgbOf(t, p.frame(df, "backward").Fill); b <= r+40 {
			t.Errorf("backward (25%% on A, 42.5%% on B) fill r=%d b=%d, want blue", r, b)
		}
		if r, g, b := rgbOf(t, p.frame(df, "entry_SYSCALL_64").Fill); r != 236 || g != 236 || b != 232 {
			t.Errorf("same-share frame fill rgb(%d, %d, %d), want the neutral color", r, g, b)
		}
		p.hover(frameSel(df, "[other process] hog"))
		p.wait(`document.getElementById('tooltip').textContent.startsWith('[other process] hog')`, "the diff tooltip")
		if got := p.text("#tooltip"); !strings.Contains(got, "A rank 230.0% (300)") || !strings.Contains(got, "B rank 50.0% (0)") || !strings.Contains(got, "+30.00 pp") {
			t.Errorf("diff tooltip %q", got)
		}
		p.click(`.sy-width button[data-width="a"]`)
		p.waitShare(df, "[other process] hog", 0.3)

		// OS panels: rank 2's run-queue wait and the CPU it ran on are red.
		p.wait(`document.querySelector('svg.sy-os-panel[data-name="runq_wait"]')`, "the OS panels")
		for sel, n := range map[string]int{
			`svg.sy-os-panel[data-name="runq_wait"] path.sy-line.hl[data-key="rank 2"]`: 1,
			`svg.sy-os-panel[data-name="runq_wait"] path.sy-line`:                       8,
			`svg.sy-os-panel[data-name="interrupts"] path.sy-line.hl[data-key="cpu 2"]`: 1,
			`svg.sy-os-panel[data-name="interrupts"] path.sy-line`:                      8, // two IRQs per CPU, summed
			`svg.sy-os-panel[data-name="softirqs"] path.sy-line.hl`:                     1,
			`svg.sy-os-panel[data-name="ctx_switches_inv"] path.sy-line.hl`:             1,
			`svg.sy-os-panel[data-name="cpu_steal"]`:                                    1,
			`svg.sy-os-panel[data-name="rank_on_cpu"]`:                                  0,
		} {
			if got := p.count(sel); got != n {
				t.Errorf("%s: %d, want %d", sel, got, n)
			}
		}
		if got := p.text(`.sy-absent li[data-source="nvml"]`); got != "not collected on node node-000: built without NVML (nvml)" {
			t.Errorf("absent NVML %q", got)
		}
		if got := p.text(`.sy-absent li[data-source="sched_tracepoints"]`); !strings.Contains(got, "node node-001: tracefs not mounted") {
			t.Errorf("absent tracepoints %q", got)
		}
		p.hover(`svg.sy-os-panel[data-name="interrupts"]`)
		p.wait(`document.getElementById('tooltip').textContent.startsWith('Hard interrupts')`, "the OS panel tooltip")
		if got := p.text("#tooltip"); !strings.Contains(got, "cpu 2 ★") || !strings.Contains(got, "most: LOC") {
			t.Errorf("OS tooltip %q", got)
		}
		// Screenshots last: taking one resizes the viewport, and a resize
		// re-renders the page (local state such as zoom resets).
		for sel, name := range map[string]string{".sy-report": "sysom-report.png", ".sy-flame-card": "sysom-flame.png",
			".sy-diff-card": "sysom-diff.png", ".sy-os-card": "sysom-os.png"} {
			shotOf(p, sel, name)
		}
	})

	t.Run("pickers: rank, group, window and baseline go through the URL", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		section(p)
		p.wait(`document.querySelector('#sy-flame svg.d3-flame-graph g.frame')`, "the flame graph")
		p.eval(`(() => { const s = document.querySelector('select[name=fg_subject]'); s.value = 'r5'; s.dispatchEvent(new Event('change')); })()`, nil)
		p.waitParam("fg_rank", "5")
		p.idle()
		p.waitShare("#sy-flame", "train_step", 0.9)
		if n := p.frame("#sy-flame", "[other process] hog").N; n != 0 {
			t.Error("the peer's flame graph shows the other process")
		}
		p.eval(`(() => { const s = document.querySelector('select[name=fg_subject]'); s.value = 'gdp-0'; s.dispatchEvent(new Event('change')); })()`, nil)
		p.waitParam("fg_group", "dp-0")
		p.idle()
		p.waitShare("#sy-flame", "[other process] hog", 300.0/1800)
		p.click(`.sy-flame-card button[data-win="60"]`)
		p.waitParam("fg_win", "60")
		p.idle()
		p.wait(`document.querySelector('.sy-flame-card button[data-win="60"].on')`, "the 1-minute window selected")
		reqs := s.requests("/api/v1/jobs/data-straggler-8/flamegraph?")
		last, err := url.Parse(reqs[len(reqs)-1])
		if err != nil {
			t.Fatal(err)
		}
		q := last.Query()
		from, _ := strconv.ParseInt(q.Get("from_ns"), 10, 64)
		to, _ := strconv.ParseInt(q.Get("to_ns"), 10, 64)
		if q.Get("group") != "dp-0" || to != 1773500300000000000 || to-from != 60e9 {
			t.Errorf("flame graph query %q: want group dp-0 over the last 60 s of the report window", last.RawQuery)
		}
		p.click(`.sy-diff-card button[data-mode="baseline"]`)
		p.waitParam("df_mode", "baseline")
		p.idle()
		p.wait(`document.querySelector('.sy-diff-card .sy-facts').textContent.includes('A = now')`, "the baseline diff")
		reqs = s.requests("/api/v1/jobs/data-straggler-8/flamegraph/diff")
		// The report names no baseline window: the server picks its default.
		if got := reqs[len(reqs)-1]; !strings.Contains(got, "?rank=2&") || strings.Contains(got, "base_from_ns=") {
			t.Errorf("baseline diff query %q, want rank=2 and the server's default baseline", got)
		}
		if got := p.text(".sy-base"); !strings.Contains(got, "the server’s default baseline") {
			t.Errorf("baseline line %q", got)
		}
		if got := p.text(".sy-diff-card .sy-facts"); !strings.Contains(got, "B = baseline: 1,000 samples over 13:53:20–13:58:20 UTC") {
			t.Errorf("baseline facts %q", got)
		}
		p.back()
		p.waitParam("df_mode", "")
		p.wait(`document.querySelector('.sy-diff-card .sy-facts').textContent.includes('A = rank 2')`, "the peer diff back")
	})

	t.Run("inconclusive and low confidence are stated", func(t *testing.T) {
		p := tab(t, "#/jobs/tie")
		section(p)
		d := `.sy-diag[data-rank="1"]`
		p.wait(`document.querySelector('`+d+`')`, "rank 1's diagnosis")
		if got := p.str(`document.querySelector('` + d + `').dataset.layer`); got != "inconclusive" {
			t.Errorf("layer %q", got)
		}
		if got := p.text(d + " .sy-layer-badge"); got != "inconclusive" {
			t.Errorf("badge %q", got)
		}
		if got := p.text(d + " .sy-conf"); got != "low confidence" {
			t.Errorf("confidence %q", got)
		}
		if got := p.text(d + " .sy-inconclusive"); !strings.Contains(got, "Inconclusive: no layer differs clearly") {
			t.Errorf("inconclusive note %q", got)
		}
		if got := p.text(d + ` .sy-layer[data-layer="gpu"] .badge.finding`); got != "not observed" {
			t.Errorf("GPU finding %q", got)
		}
		if got := p.text(d + ` .sy-layer[data-layer="cpu"] .sy-next`); !strings.Contains(got, "212 samples are few") {
			t.Errorf("CPU next check %q", got)
		}
		if p.count(".sy-no-waterline") != 1 {
			t.Error("the empty waterline is not stated")
		}
		shotOf(p, ".sy-report", "sysom-inconclusive.png")
	})

	t.Run("temporal baseline: no straggler, now vs baseline by default", func(t *testing.T) {
		p := tab(t, "#/jobs/baseline-8")
		section(p)
		p.wait(`document.querySelector('.sy-temporal')`, "the temporal baseline")
		if got := p.text(".sy-temporal .sy-verdict"); !strings.Contains(got, "No straggler") || !strings.Contains(got, "133.0 ms → 152.0 ms (+14.3%)") {
			t.Errorf("temporal verdict %q", got)
		}
		if got := p.text(`.sy-temporal .sy-path[data-func="logging.Logger.info"]`); !strings.Contains(got, "10.0% vs 2.0% on the baseline") {
			t.Errorf("candidate %q", got)
		}
		p.wait(`document.querySelector('.sy-diff-card button[data-mode="baseline"].on')`, "baseline mode by default")
		p.wait(`document.querySelector('#sy-diff svg.d3-flame-graph g.frame')`, "the baseline diff")
		if r, g, b := rgbOf(t, p.frame("#sy-diff", "logging.Logger.info").Fill); r < 180 || g > 120 || b > 120 {
			t.Errorf("grown logging frame rgb(%d, %d, %d), want red", r, g, b)
		}
		reqs := s.requests("/api/v1/jobs/baseline-8/flamegraph/diff")
		if len(reqs) == 0 || !strings.Contains(reqs[0], "base_from_ns=1773496400000000000") || !strings.Contains(reqs[0], "base_to_ns=1773496700000000000") {
			t.Errorf("baseline diff query %q: want the report's baseline window", reqs)
		}
		if got := p.text(".sy-base"); !strings.Contains(got, "the job’s first steady window") {
			t.Errorf("baseline line %q", got)
		}
		if got := p.text(".sy-temporal"); !strings.Contains(got, "logging") || !strings.Contains(got, "next check look for a change between the baseline and now") {
			t.Errorf("temporal evidence or next check missing: %q", got)
		}
	})

	t.Run("no profiler data: how to enable it, no banner", func(t *testing.T) {
		p := tab(t, "#/jobs/few-steps")
		section(p)
		if got := p.text(".sy-missing-text"); got != "No CPU profiles or OS signals for this job yet." {
			t.Errorf("missing text %q", got)
		}
		if got := p.text(".sy-enable"); !strings.Contains(got, "laggard agent") || !strings.Contains(got, "LAGGARD_AGENT_SOCKET") {
			t.Errorf("enable hint %q", got)
		}
		if p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Errorf("error banner shown: %s", p.text("#banner"))
		}
		if p.count(".headline-text") != 1 {
			t.Error("the stage report is not shown")
		}
	})

	t.Run("CPU profiles alone make a job page", func(t *testing.T) {
		g := newSysomFake(t)
		g.noGreyhound["nccl-only-4"] = true // no stage vectors, no collective analysis
		only := httptest.NewServer(g.mux())
		t.Cleanup(only.Close)
		p := browser{ctx: bctx, base: only.URL, dir: shotDir(t)}.open(t, "#/jobs/nccl-only-4")
		section(p)
		if p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Errorf("error banner shown: %s", p.text("#banner"))
		}
		if p.count(".no-stage") != 1 || p.count(".gh-missing") != 1 || p.count(`.sy-diag[data-rank="1"]`) != 1 {
			t.Errorf("want the no-stage card, the missing collective analysis and the SysOM diagnosis; main: %.300s", p.text("#main"))
		}
		p.wait(`document.querySelector('#sy-flame svg.d3-flame-graph g.frame')`, "the flame graph")
	})

	t.Run("a failing flame graph is an inline error, the rest stays", func(t *testing.T) {
		p := tab(t, "#/jobs/"+brokenFlame)
		section(p)
		p.wait(`document.querySelector('.sy-flame-card .sy-error')`, "the inline error")
		if got := p.text(".sy-flame-card .sy-error"); !strings.Contains(got, "Cannot load the flame graph: symbol store unavailable") {
			t.Errorf("inline error %q", got)
		}
		if p.count(".sy-diag") != 1 || p.count("svg.sy-os-panel") == 0 {
			t.Error("the report card or OS panels are gone")
		}
		if p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Errorf("error banner shown: %s", p.text("#banner"))
		}
	})
}

// A profile of 20,000 frames (deep and wide) mounts within bounded time:
// only the widest 4,000 frames are drawn, which the card says.
func TestBrowserSysomLargeFlame(t *testing.T) {
	bctx := startBrowser(t)
	s := newSysomFake(t)
	type node struct {
		Name     string  `json:"name"`
		Kind     string  `json:"kind"`
		Value    int64   `json:"value"`
		Self     int64   `json:"self"`
		Children []*node `json:"children"`
	}
	// 200 top-level functions, each a chain of 100 frames; function i has
	// weight i+1, so most are thin and a few are wide.
	root := &node{Name: "all", Kind: "symbol"}
	for i := range 200 {
		w := int64(i+1) * 100
		top := &node{Name: fmt.Sprintf("f%03d", i), Kind: "native", Value: w}
		cur := top
		for d := range 99 {
			c := &node{Name: fmt.Sprintf("f%03d_%02d", i, d), Kind: []string{"native", "python", "kernel"}[d%3], Value: w}
			cur.Children = []*node{c}
			cur = c
		}
		cur.Self = w
		root.Children = append(root.Children, top)
		root.Value += w
	}
	b, err := json.Marshal(map[string]any{"rank": 2, "from_ns": 1773500000000000000, "to_ns": 1773500300000000000, "total": root.Value, "hz": 99, "ratio": 0.1, "root": root})
	if err != nil {
		t.Fatal(err)
	}
	s.files["flame-rank2.json"] = b
	srv := httptest.NewServer(s.mux())
	t.Cleanup(srv.Close)
	p := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}.open(t, "#/jobs/data-straggler-8")
	p.wait(`document.querySelector('#sy-flame svg.d3-flame-graph g.frame')`, "the large flame graph")
	p.idle()
	n := p.count("#sy-flame g.frame")
	total := 1 + 200*100
	if n < 1000 || n > 4000 {
		t.Errorf("%d frames in the DOM of %d: want the widest, at most 4,000 (MAX_FRAMES in flame.js)", n, total)
	}
	if got := p.text(".sy-pruned"); !strings.Contains(got, fmt.Sprintf("%s of 20,001 frames drawn", fmtThousands(n))) || !strings.Contains(got, "click a frame to zoom in") {
		t.Errorf("pruning note %q", got)
	}
	// Zooming into a thin chain brings its frames back.
	p.eval(`document.querySelector('#sy-flame').scrollIntoView()`, nil)
	p.click(frameSel("#sy-flame", "f199"))
	p.waitShare("#sy-flame", "f199_98", 1)
	drawMs, err := strconv.ParseFloat(p.str(`document.querySelector('#sy-flame').dataset.renderMs`), 64)
	if err != nil || drawMs > 3000 {
		t.Errorf("a %d-frame flame graph took %v ms to mount (%v), want < 3000", total, drawMs, err)
	}
	t.Logf("%d-frame profile: %d frames drawn, mounted in %.0f ms", total, n, drawMs)
}

func fmtThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The hand-written fixtures use the read API's own types (internal/analysis,
// contract §6): every field they hold is one the server writes, so a rename
// on either side fails here rather than as a blank card.
func TestSysomFixturesMatchAPITypes(t *testing.T) {
	s := newSysomFake(t)
	strict := func(name string, v any) {
		t.Helper()
		dec := json.NewDecoder(bytes.NewReader(s.files[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Errorf("%s does not decode into %T: %v", name, v, err)
		}
	}
	for name := range s.files {
		switch {
		case strings.HasPrefix(name, "sysom-"):
			strict(name, &analysis.SysomReport{})
		case strings.HasPrefix(name, "flame-"):
			strict(name, &analysis.FlameGraph{})
		case strings.HasPrefix(name, "diff-"):
			strict(name, &analysis.DiffGraph{})
		case strings.HasPrefix(name, "osstats-"):
			// OSPoint is written as [t_ns, value] and has no decoder: the
			// series' other fields are checked against OSSeriesEntry's tags.
			var body struct {
				Series []map[string]json.RawMessage `json:"series"`
				Absent []analysis.OSAbsence         `json:"absent"`
			}
			strict(name, &body)
			tags := jsonTags(reflect.TypeFor[analysis.OSSeriesEntry]())
			for i, se := range body.Series {
				for k := range se {
					if !tags[k] {
						t.Errorf("%s: series[%d] field %q is not in analysis.OSSeriesEntry", name, i, k)
					}
				}
				var pts [][2]float64
				if err := json.Unmarshal(se["points"], &pts); err != nil {
					t.Errorf("%s: series[%d].points: %v", name, i, err)
				}
			}
		default:
			t.Errorf("testdata/sysom/%s: no endpoint serves it", name)
		}
	}
}

func jsonTags(rt reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		out[name] = true
	}
	return out
}
