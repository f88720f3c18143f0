package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/detect"
)

var shotsDir = flag.String("shots", "", "keep the browser tests' screenshots in this directory (default: a temp dir)")

// The browser tests load the UI in headless Chromium against the fake API
// and assert on what the page shows and does: the headline's words, the
// rank it names or why it names none, the change-point markers, brushing
// and the URL state it leaves, drill-downs, role groups, the job list's
// diagnoses, the profiler snippet, and the loading and error states.

// findChromium returns the browser binary, skipping the test when none is
// installed unless LAGGARD_REQUIRE_BROWSER=1 (CI) makes that a failure.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LAGGARD_REQUIRE_BROWSER") == "1" {
		t.Fatal("LAGGARD_REQUIRE_BROWSER=1 but no Chromium found (apt-get install -y chromium)")
	}
	t.Skip("no headless Chromium installed (apt-get install -y chromium); set LAGGARD_REQUIRE_BROWSER=1 to fail instead")
	return ""
}

// startBrowser launches one offline headless Chromium for the test.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("launches a browser")
	}
	bin := findChromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", bin, err)
	}
	return bctx
}

func shotDir(t *testing.T) string {
	if *shotsDir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(*shotsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return *shotsDir
}

// page is one browser tab on the UI.
type page struct {
	t    *testing.T
	ctx  context.Context
	dir  string
	mu   sync.Mutex
	errs []string // uncaught exceptions and CSP violations
}

// browser is one Chromium serving tabs on one UI server.
type browser struct {
	ctx  context.Context
	base string // the server's URL
	dir  string // screenshots
}

// open loads base/#hash in a new tab.
func (b browser) open(t *testing.T, hash string) *page {
	t.Helper()
	return b.openWith(t, hash)
}

// openWith runs before (a script for every document, say) in the new tab
// ahead of loading base/#hash.
func (b browser) openWith(t *testing.T, hash string, before ...chromedp.Action[chromedp.Void]) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, dir: b.dir}
	// Subscribe before navigating so nothing is missed.
	exc := chromedp.Events(ctx, runtime.ExceptionThrown)
	logs := chromedp.Events(ctx, log.EntryAdded)
	go func() {
		for ev, err := range exc {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.errs = append(p.errs, "exception: "+ev.ExceptionDetails.Text+" "+exceptionDescription(ev))
			p.mu.Unlock()
		}
	}()
	go func() {
		for ev, err := range logs {
			if err != nil {
				return
			}
			// Failed API requests (the error tests) log as network
			// errors; script and CSP problems log as these.
			if e := ev.Entry; e.Level == log.EntryLevelError && (e.Source == log.EntrySourceSecurity || e.Source == log.EntrySourceJavascript) {
				p.mu.Lock()
				p.errs = append(p.errs, string(e.Source)+": "+e.Text)
				p.mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(ctx, append(before, chromedp.Navigate(b.base+"/"+hash))...); err != nil {
		t.Fatalf("navigate %s: %v", hash, err)
	}
	t.Cleanup(p.checkErrors)
	return p
}

func exceptionDescription(ev runtime.EventExceptionThrown) string {
	if ev.ExceptionDetails.Exception != nil {
		return ev.ExceptionDetails.Exception.Description
	}
	return ""
}

func (p *page) checkErrors() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.errs {
		p.t.Errorf("page error: %s", e)
	}
}

func (p *page) eval(js string, out any) {
	p.t.Helper()
	raw, err := chromedp.Run(p.ctx, chromedp.Evaluate[[]byte](js))
	if err != nil {
		p.t.Fatalf("eval %s: %v", js, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("eval %s: %v (%s)", js, err, raw)
		}
	}
}

func (p *page) str(js string) string {
	p.t.Helper()
	var s string
	p.eval(`String(`+js+`)`, &s)
	return s
}

// wait polls a JavaScript condition; on timeout it fails with what the
// page shows.
func (p *page) wait(cond, what string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`!!(`+cond+`)`, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(25*time.Millisecond)))
	if err != nil {
		p.t.Fatalf("waiting for %s (%s): %v\nURL hash %s\nbanner: %s\nmain: %.600s", what, cond, err,
			p.str(`location.hash`), p.str(`document.getElementById('banner').hidden ? '' : document.getElementById('banner').textContent`),
			p.str(`document.getElementById('main').innerText`))
	}
}

// text returns the text of the first match ("" when none).
func (p *page) text(sel string) string {
	p.t.Helper()
	return p.str(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, sel))
}

func (p *page) count(sel string) int {
	p.t.Helper()
	var n int
	p.eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)
	return n
}

func (p *page) click(sel string) {
	p.t.Helper()
	// A view that re-renders (a list refreshed after sign-in) can replace
	// the node between chromedp's query and its click; the click is then
	// retried on the new node, a few times at most.
	for try := 0; ; try++ {
		p.wait(fmt.Sprintf(`document.querySelector(%q)`, sel), sel)
		err := chromedp.Do(p.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		if err == nil {
			return
		}
		if try == 4 || !strings.Contains(err.Error(), "Could not find node") {
			p.t.Fatalf("click %s: %v", sel, err)
		}
	}
}

// params returns the query of the URL hash.
func (p *page) params() url.Values {
	p.t.Helper()
	h := p.str(`location.hash`)
	_, q, _ := strings.Cut(h, "?")
	v, err := url.ParseQuery(q)
	if err != nil {
		p.t.Fatalf("hash %q: %v", h, err)
	}
	return v
}

func (p *page) waitParam(k, v string) {
	p.t.Helper()
	if v == "" {
		p.wait(fmt.Sprintf(`!new URLSearchParams(location.hash.split('?')[1] || '').has(%q)`, k), "no "+k+" in the URL")
		return
	}
	p.wait(fmt.Sprintf(`new URLSearchParams(location.hash.split('?')[1] || '').get(%q) === %q`, k, v), k+"="+v+" in the URL")
}

func (p *page) back() {
	p.t.Helper()
	before := p.str(`location.hash`)
	p.eval(`history.back()`, nil)
	p.wait(fmt.Sprintf(`location.hash !== %q`, before), "back")
}

// idle waits until no report is loading.
func (p *page) idle() {
	p.t.Helper()
	p.wait(`document.getElementById('main').getAttribute('aria-busy') === 'false'`, "the page to finish loading")
}

// box returns an element's viewport rectangle.
func (p *page) box(sel string) (x, y, w, h float64) {
	p.t.Helper()
	var r [4]float64
	p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`, sel), &r)
	return r[0], r[1], r[2], r[3]
}

// drag presses the left button at x0 and releases it at x1, with real
// input events (the page sees pointerdown/move/up).
func (p *page) drag(x0, x1, y float64, shift bool) {
	p.t.Helper()
	var mods []chromedp.MouseOption
	if shift {
		mods = append(mods, chromedp.ButtonModifiers(chromedp.ModifierShift))
	}
	opts := func(extra ...chromedp.MouseOption) []chromedp.MouseOption {
		return append(append([]chromedp.MouseOption{chromedp.ButtonLeft}, mods...), extra...)
	}
	acts := []chromedp.Action[chromedp.Void]{chromedp.MouseEvent("mouseMoved", x0, y, mods...),
		chromedp.MouseEvent("mousePressed", x0, y, opts(chromedp.ClickCount(1))...)}
	for i := 1; i <= 6; i++ {
		acts = append(acts, chromedp.MouseEvent("mouseMoved", x0+(x1-x0)*float64(i)/6, y, opts()...))
	}
	acts = append(acts, chromedp.MouseEvent("mouseReleased", x1, y, opts(chromedp.ClickCount(1))...))
	if err := chromedp.Do(p.ctx, acts...); err != nil {
		p.t.Fatalf("drag: %v", err)
	}
}

func (p *page) shot(name string) {
	p.t.Helper()
	p.eval(`window.scrollTo(0, 0)`, nil) // the sticky top bar would be captured mid-page
	buf, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(buf) < 5000 {
		p.t.Fatalf("screenshot %s is blank (%d bytes)", name, len(buf))
	}
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
}

// run is the analysis the fake API does for a report query.
func run(t *testing.T, w *world, req analysis.Request) *analysis.Report {
	t.Helper()
	rep, err := w.analyzer.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func stepParam(t *testing.T, v url.Values, k string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(v.Get(k), 10, 64)
	if err != nil {
		t.Fatalf("%s=%q in the URL: %v", k, v.Get(k), err)
	}
	return n
}

func near(a, b int64) bool { return a-b <= 1 && b-a <= 1 }

func TestBrowser(t *testing.T) {
	bctx := startBrowser(t)
	f := newFakeAPI(t)
	srv := httptest.NewServer(f.mux())
	t.Cleanup(srv.Close)
	w := f.w
	dir := shotDir(t)
	tab := browser{ctx: bctx, base: srv.URL, dir: dir}.open

	t.Run("job list shows each job's diagnosis and sorts", func(t *testing.T) {
		p := tab(t, "#/")
		p.wait(`document.querySelectorAll('tr[data-job]').length === 11`, "eleven jobs")
		row := `tr[data-job="data-straggler-8"]`
		if got := p.text(row + " .straggler"); got != "rank 2 · node-000" {
			t.Errorf("data-straggler-8 straggler cell %q, want rank 2 · node-000", got)
		}
		if got := p.text(row + " .stage"); got != "data" {
			t.Errorf("data-straggler-8 stage cell %q, want data", got)
		}
		if got := p.text(row); !strings.Contains(got, "onset @140") || !strings.Contains(got, "220 ms") {
			t.Errorf("data-straggler-8 row %q lacks the onset at 140 and 220 ms/step", got)
		}
		if got := p.text(`tr[data-job="tie"] .straggler`); !strings.Contains(got, "ranks tie for the lead {1, 3}") {
			t.Errorf("tie row says %q", got)
		}
		if got := p.text(`tr[data-job="relief"]`); !strings.Contains(got, "relief @120") {
			t.Errorf("relief row %q lacks the relief", got)
		}
		// Sorting by exposed step time, both ways, in the URL.
		byExposed := slices.Clone(w.list)
		slices.SortStableFunc(byExposed, func(a, b api.JobView) int {
			return cmp.Compare(a.Diagnosis.(*detect.Summary).ExposedMS, b.Diagnosis.(*detect.Summary).ExposedMS)
		})
		p.click(`button.sort[data-sort="exposed"]`)
		p.waitParam("sort", "exposed")
		p.waitParam("dir", "asc")
		p.wait(fmt.Sprintf(`document.querySelector('tr[data-job]').dataset.job === %q`, byExposed[0].ID), "the fastest job first")
		p.click(`button.sort[data-sort="exposed"]`)
		p.waitParam("dir", "desc")
		p.wait(fmt.Sprintf(`document.querySelector('tr[data-job]').dataset.job === %q`, byExposed[len(byExposed)-1].ID), "the slowest job first")
		p.shot("jobs.png")
		p.click(`tr[data-job="tie"] a`)
		p.wait(`location.hash.startsWith('#/jobs/tie')`, "the tie job page")
		p.wait(`document.querySelector('.headline-text')`, "the tie headline")
		p.back()
		p.wait(`document.querySelector('th[aria-sort="descending"] [data-sort="exposed"]')`, "the list sorted as before")
	})

	t.Run("named straggler: headline, change point, bands, profiler", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		rep := w.reports["data-straggler-8"]
		p.wait(`document.querySelector('.headline-text')`, "the headline")
		if got := p.text(".headline-text"); got != rep.Headline.Text {
			t.Errorf("headline text\n got %q\nwant %q", got, rep.Headline.Text)
		}
		if got := p.text("#headline .named"); got != "rank 2 on node-000" {
			t.Errorf("named straggler %q, want rank 2 on node-000", got)
		}
		cp := `svg.timeline g.cp.onset[data-step="140"]`
		if p.count(cp) != 1 {
			t.Fatalf("no onset marker at step 140")
		}
		if got := p.text(cp); !strings.Contains(got, "onset @140: 133 ms → 220 ms") || !strings.Contains(got, "data +89.6 ms") {
			t.Errorf("onset label %q lacks before → after medians and the largest stage shift", got)
		}
		for sel, want := range map[string][2]string{
			"svg.timeline .band.window": {"140", "239"},
			"svg.timeline .band.ref":    {"3", "139"},
		} {
			if from, to := p.str(`document.querySelector('`+sel+`').dataset.from`), p.str(`document.querySelector('`+sel+`').dataset.to`); from != want[0] || to != want[1] {
				t.Errorf("%s spans %s–%s, want %s–%s", sel, from, to, want[0], want[1])
			}
		}
		if p.count("svg.timeline .band.warmup") != 1 {
			t.Error("warm-up not shaded")
		}
		// The stages view: excess routing highlighted on data, backward
		// still the largest share.
		if got := p.text(`tr[data-stage="data.next_wait"] .marks`); !strings.Contains(got, "excess top-1") || !strings.Contains(got, "headline") {
			t.Errorf("data row marks %q", got)
		}
		code := p.str(`document.getElementById('profiler-code').value`)
		for _, want := range []string{"PROFILE_RANKS = {2}", "if dist.get_rank() in PROFILE_RANKS:",
			"schedule=schedule(wait=max(0, 235 - START_STEP), warmup=2, active=3, repeat=1)",
			`on_trace_ready=tensorboard_trace_handler("./laggard-traces/data-straggler-8"`, "steps 237–239", "prof.step()"} {
			if !strings.Contains(code, want) {
				t.Errorf("profiler snippet lacks %q:\n%s", want, code)
			}
		}
		// Lines instead of stacked areas, in the URL.
		p.click(`.legend button[data-mode="line"]`)
		p.waitParam("chart", "line")
		p.wait(`document.querySelectorAll('svg.timeline path.line').length === 6 && !document.querySelector('svg.timeline path.area')`, "one line per stage")
		if p.count("svg.timeline path.scp") == 0 {
			t.Error("no stage change points on the step axis")
		}
		p.back()
		p.wait(`document.querySelectorAll('svg.timeline path.area').length === 6`, "stacked areas again")
		p.click("#copy-profiler")
		p.wait(`document.querySelector('.code-actions [role=status]').textContent.includes('Copied')`, "the copy confirmation")
		// A click on the time axis picks the step the snippet traces from.
		x, y, wd, h := p.box("svg.timeline rect.hit")
		if err := chromedp.Do(p.ctx, chromedp.MouseClickXY(x+180.0/239*wd, y+h/2)); err != nil {
			t.Fatal(err)
		}
		p.wait(`new URLSearchParams(location.hash.split('?')[1]).has('step')`, "step in the URL")
		pick := stepParam(t, p.params(), "step")
		if !near(pick, 180) {
			t.Errorf("picked step %d, want ≈180", pick)
		}
		p.wait(fmt.Sprintf(`document.querySelector('svg.timeline g.pick[data-step="%d"]')`, pick), "the pick marker")
		if code := p.str(`document.getElementById('profiler-code').value`); !strings.Contains(code, fmt.Sprintf("steps %d–%d", pick, pick+2)) {
			t.Errorf("snippet does not trace from the picked step %d:\n%s", pick, code)
		}
		p.shot("job-data-straggler-8.png")
	})

	t.Run("brushing picks the window and the reference; back undoes", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		p.wait(`document.querySelector('svg.timeline rect.hit')`, "the time axis")
		x, y, wd, h := p.box("svg.timeline rect.hit")
		px := func(step float64) float64 { return x + step/239*wd }
		before := f.computed.Load()
		p.drag(px(160), px(200), y+h/2, false)
		p.waitParam("last", "")
		p.wait(`new URLSearchParams(location.hash.split('?')[1]).has('from')`, "from/to in the URL")
		q := p.params()
		from, to := stepParam(t, q, "from"), stepParam(t, q, "to")
		if !near(from, 160) || !near(to, 200) {
			t.Fatalf("brushed %d–%d, want ≈160–200", from, to)
		}
		p.wait(fmt.Sprintf(`document.querySelector('svg.timeline .band.window').dataset.from === '%d'`, from), "the window band to follow")
		p.idle()
		want := run(t, w, analysis.Request{Job: "data-straggler-8", From: &from, To: &to})
		if got := p.text(".headline-text"); got != want.Headline.Text {
			t.Errorf("brushed headline\n got %q\nwant %q (the analysis of steps %d–%d)", got, want.Headline.Text, from, to)
		}
		if f.computed.Load() == before {
			t.Error("the brushed window was not computed by the analysis")
		}
		// Shift-drag: the reference.
		x, y, wd, h = p.box("svg.timeline rect.hit")
		p.drag(px(40), px(100), y+h/2, true)
		p.wait(`new URLSearchParams(location.hash.split('?')[1]).has('ref_from')`, "ref_from in the URL")
		q = p.params()
		rf, rt := stepParam(t, q, "ref_from"), stepParam(t, q, "ref_to")
		if !near(rf, 40) || !near(rt, 100) || stepParam(t, q, "from") != from {
			t.Fatalf("shift-brushed reference %d–%d (window %s), want ≈40–100 and the window kept", rf, rt, q.Get("from"))
		}
		p.wait(fmt.Sprintf(`document.querySelector('svg.timeline .band.ref').dataset.from === '%d'`, rf), "the reference band to follow")
		p.idle()
		want = run(t, w, analysis.Request{Job: "data-straggler-8", From: &from, To: &to, RefFrom: &rf, RefTo: &rt})
		if got := p.text(".headline-text"); got != want.Headline.Text {
			t.Errorf("headline against the brushed reference\n got %q\nwant %q", got, want.Headline.Text)
		}
		p.shot("job-brushed.png")
		p.back()
		p.waitParam("ref_from", "")
		p.wait(`document.querySelector('svg.timeline .band.ref').dataset.from === '3'`, "the automatic reference back")
		p.back()
		p.waitParam("from", "")
		p.wait(`document.querySelector('svg.timeline .band.window').dataset.from === '140'`, "the default window back")

		// The keyboard alternative: End, shift+← ×10, Enter.
		if err := chromedp.Do(p.ctx, chromedp.Focus(chromedp.CSS("svg.timeline rect.hit"))); err != nil {
			t.Fatal(err)
		}
		keys := []chromedp.Action[chromedp.Void]{chromedp.KeyEvent(kb.End)}
		for range 10 {
			keys = append(keys, chromedp.KeyEvent(kb.ArrowLeft, chromedp.KeyModifiers(chromedp.ModifierShift)))
		}
		keys = append(keys, chromedp.KeyEvent(kb.Enter))
		if err := chromedp.Do(p.ctx, keys...); err != nil {
			t.Fatal(err)
		}
		p.waitParam("from", "229")
		p.waitParam("to", "239")
	})

	t.Run("stage then rank drill-down; back closes it", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		p.click(`tr[data-stage="data.next_wait"] button.stage-btn`)
		p.waitParam("stage", "data.next_wait")
		p.wait(`document.querySelector('.hm-col.on[data-stage="data.next_wait"]')`, "the data column focused")
		// Click the heatmap cell of rank 2 (rows in rank order) at data.
		p.wait(`document.querySelector('canvas.hm')`, "the heatmap")
		x, y, wd, _ := p.box("canvas.hm")
		var geo [2]float64
		p.eval(`(() => { const c = document.querySelector('canvas.hm'); return [+c.dataset.rowHeight, +c.dataset.labelWidth]; })()`, &geo)
		cx, cy := x+geo[1]+(wd-geo[1])/12, y+2.5*geo[0]
		if err := chromedp.Do(p.ctx, chromedp.MouseEvent("mouseMoved", cx, cy)); err != nil {
			t.Fatal(err)
		}
		p.wait(`!document.getElementById('tooltip').hidden`, "the heatmap tooltip")
		if got := p.text("#tooltip"); !strings.Contains(got, "rank 2 · node-000 · named straggler") || !strings.Contains(got, "behind typical+90.0 ms/step") {
			t.Errorf("heatmap tooltip %q", got)
		}
		if err := chromedp.Do(p.ctx, chromedp.MouseClickXY(cx, cy)); err != nil {
			t.Fatal(err)
		}
		p.waitParam("rank", "2")
		p.wait(`document.querySelector('#rank-view')`, "the rank view")
		if got := p.text("#rank-view h2"); !strings.Contains(got, "Rank 2 · node-000") {
			t.Errorf("rank view title %q", got)
		}
		if got := p.text(".rank-sentence"); !strings.Contains(got, "Rank 2 reaches the end of data.next_wait") || !strings.Contains(got, "later than the typical rank") {
			t.Errorf("rank sentence %q", got)
		}
		// Per-step durations from single-step reports of the real analysis.
		p.wait(`document.querySelectorAll('.sb-row[data-step]').length === 8`, "eight per-step rows")
		if got := p.text(`.sb-row[data-step="239"]`); !strings.Contains(got, "sets F") {
			t.Errorf("step 239 row %q: rank 2 should set the frontier at data", got)
		}
		p.shot("rank-2.png")
		p.back()
		p.waitParam("rank", "")
		p.wait(`!document.querySelector('#rank-view')`, "the rank view closed")
		p.back()
		p.waitParam("stage", "")
	})

	t.Run("withheld rank: absorbed, tie, few steps", func(t *testing.T) {
		p := tab(t, "#/jobs/absorbed-backward")
		p.wait(`document.querySelector('.withheld-title')`, "the withheld headline")
		if got := p.text(".headline-text"); got != w.reports["absorbed-backward"].Headline.Text {
			t.Errorf("headline %q", got)
		}
		if got := p.text(".withheld-why"); !strings.Contains(got, "every rank leaves the stage together") {
			t.Errorf("withheld reason %q", got)
		}
		if p.count("#headline .named") != 0 {
			t.Error("a rank is named although the engine withheld it")
		}
		p.shot("absorbed.png")

		p = tab(t, "#/jobs/tie")
		p.wait(`document.querySelector('.tieset')`, "the tie set")
		if got := p.text(".tieset"); got != " · tie set {rank 1, rank 3}" {
			t.Errorf("tie set %q", got)
		}
		if code := p.str(`document.getElementById('profiler-code').value`); !strings.Contains(code, "PROFILE_RANKS = {1, 3}") {
			t.Errorf("profiler snippet does not trace the tie set:\n%s", code)
		}
		p.shot("tie.png")

		p = tab(t, "#/jobs/few-steps")
		p.wait(`document.querySelector('.withheld-why')`, "the withheld reason")
		if got := p.text(".withheld-why"); !strings.Contains(got, "too few steps") {
			t.Errorf("few-steps reason %q", got)
		}
	})

	t.Run("relief and telemetry-limited", func(t *testing.T) {
		p := tab(t, "#/jobs/relief")
		p.wait(`document.querySelector('svg.timeline g.cp.relief[data-step="120"]')`, "the relief marker at 120")
		if p.count(`svg.timeline g.cp.onset[data-step="40"]`) != 1 {
			t.Error("no onset marker at step 40")
		}
		if got := p.text(".headline-text"); !strings.Contains(got, "fell") {
			t.Errorf("relief headline %q", got)
		}
		p = tab(t, "#/jobs/telemetry-limited")
		p.wait(`document.querySelector('.caveats')`, "caveats")
		if got := p.text(".caveats"); !strings.Contains(got, "telemetry is incomplete") {
			t.Errorf("caveats %q", got)
		}
		if got := p.text(`li.label[data-label="telemetry_limited"]`); !strings.Contains(got, "closure residual share") {
			t.Errorf("telemetry_limited label %q", got)
		}
		if p.count(".q.bad") < 3 {
			t.Error("telemetry quality does not flag the closure residual, the missing cells and the missing rank")
		}
		if got := p.text(".q.bad .v"); got != "7" {
			t.Errorf("missing ranks %q, want 7", got)
		}
		// The silent rank is no suspect: not "most behind", grey in the heatmap.
		if got := p.text(".hm-top"); strings.Contains(got, "r7 ") || !strings.Contains(got, "r1 node-000 +60.0 ms") {
			t.Errorf("most behind %q", got)
		}
		p.shot("telemetry-limited.png")
	})

	t.Run("role groups: selector, own headline and stages, no global rank", func(t *testing.T) {
		p := tab(t, "#/jobs/role-groups")
		p.wait(`document.querySelectorAll('.group-tab').length === 2`, "two group tabs")
		if p.count("#headline .named") != 0 {
			t.Error("the job-level headline names a rank across role groups")
		}
		if got := p.text(".group-tab.on"); !strings.Contains(got, "pp0") {
			t.Errorf("selected group %q, want the largest (pp0)", got)
		}
		if got := p.text("#group-headline .named"); got != "rank 1 on node-000" {
			t.Errorf("pp0 straggler %q", got)
		}
		p.click(`.group-tab[data-group="pp1"]`)
		p.waitParam("group", "pp1")
		p.wait(`document.querySelector('tr[data-stage="send.wait"]')`, "pp1's own stages")
		p.idle()
		if got := p.text("#group-headline .named"); got != "rank 6 on node-001" {
			t.Errorf("pp1 straggler %q", got)
		}
		if got := p.text(".legend"); !strings.Contains(got, "recv.wait") {
			t.Errorf("time axis legend %q lacks pp1's stages", got)
		}
		if p.count(`tr[data-stage="data.next_wait"]`) != 0 {
			t.Error("pp1 shows the default stages")
		}
		p.shot("role-groups-pp1.png")
		p.back()
		p.waitParam("group", "")
		p.wait(`document.querySelector('.group-tab.on[data-group="pp0"]')`, "pp0 selected again")
	})

	t.Run("1,024 ranks: heatmap by rank and by host", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-1024")
		p.wait(`document.querySelector('canvas.hm')`, "the heatmap")
		if got := p.str(`document.querySelector('canvas.hm').dataset.rows`); got != "1024" {
			t.Errorf("%s heatmap rows, want 1024", got)
		}
		if got := p.text("#headline .named"); got != "rank 641 on node-080" {
			t.Errorf("named straggler %q", got)
		}
		if got := p.str(`document.querySelector('.hm-top .rank-chip').dataset.rank`); got != "641" {
			t.Errorf("most behind at data: rank %s first, want 641", got)
		}
		p.shot("job-1024.png")
		p.click(`button[data-rows="hosts"]`)
		p.waitParam("rows", "hosts")
		p.wait(`document.querySelector('canvas.hm').dataset.rows === '128'`, "one row per host")
		p.click(`button[data-sort="worst"]`)
		p.waitParam("hsort", "worst")
		p.wait(`document.querySelector('canvas.hm').dataset.firstRows.startsWith('node-080,')`, "the straggler's host first")
		p.shot("job-1024-hosts.png")
	})

	t.Run("restarted job: the newest launch by default, each launch and all on request", func(t *testing.T) {
		p := tab(t, "#/jobs/restarted")
		p.wait(`document.querySelector('.headline-text')`, "the headline")
		p.wait(`document.querySelectorAll('.launches button').length === 3`, "a launch selector: #0, #1 (newest), all")
		if got := p.text(`.launches button.on`); got != "#1 (newest)" {
			t.Errorf("selected launch %q, want the newest", got)
		}
		if got := p.text("#headline"); !strings.Contains(got, "restarted once") || !strings.Contains(got, "incarnation 1") {
			t.Errorf("the headline card must say which launch it covers: %q", got)
		}
		if got := p.text(".jobhead .meta"); !strings.Contains(got, "steps 60–159 stored in the newest launch") {
			t.Errorf("job meta %q", got)
		}
		// The first launch had the straggler; the newest does not.
		p.click(`.launches button[data-incarnation="0"]`)
		p.waitParam("incarnation", "0")
		p.wait(`document.querySelector('#headline .named')`, "the first launch's straggler")
		if got := p.text("#headline .named"); !strings.Contains(got, fmt.Sprintf("rank %d", restartRank)) {
			t.Errorf("first launch's straggler %q, want rank %d", got, restartRank)
		}
		// The collective and CPU-profile sections follow the selector too.
		p.wait(`(() => { const u = performance.getEntriesByType('resource').map((e) => e.name);
			return u.some((n) => /\/greyhound\?incarnation=0$/.test(n)) && u.some((n) => /\/sysom\?incarnation=0$/.test(n)); })()`,
			"Greyhound's and SysOM-AI's reports asked for launch #0")
		p.click(`.launches button[data-incarnation="all"]`)
		p.waitParam("incarnation", "all")
		p.wait(`document.querySelector('svg.timeline g.restart')`, "a restart marker on the time axis")
		if got := p.str(`document.querySelector('svg.timeline g.restart').dataset.step`); got != "100" {
			t.Errorf("restart marked at position %s, want 100 (the first launch's 100 steps)", got)
		}
		p.shot("restarted-all.png")
	})

	t.Run("compare with another job", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		p.wait(`document.querySelector('select[name=ref_mode]')`, "the reference control")
		p.eval(`(() => { const m = document.querySelector('select[name=ref_mode]'); m.value = 'job'; m.dispatchEvent(new Event('change')); })()`, nil)
		p.wait(`document.querySelector('select[name=compare] option[value="baseline-8"]')`, "baseline-8 offered")
		p.eval(`document.querySelector('select[name=compare]').value = 'baseline-8'`, nil)
		p.click(`form[aria-label="reference window"] button[type=submit]`)
		p.waitParam("compare", "baseline-8")
		p.idle()
		want := run(t, w, analysis.Request{Job: "data-straggler-8", CompareJob: "baseline-8"})
		p.wait(fmt.Sprintf(`document.querySelector('.headline-text').textContent === %q`, want.Headline.Text), "the headline against baseline-8")
		if got := p.text("#headline"); !strings.Contains(got, "baseline-8 steps 3–119") {
			t.Errorf("reference fact lacks run B: %q", got)
		}
	})

	t.Run("errors name the API's message and field", func(t *testing.T) {
		p := tab(t, "#/jobs/nope")
		p.wait(`!document.getElementById('banner').hidden`, "the error banner")
		if got := p.text("#banner"); !strings.Contains(got, "API error 404") || !strings.Contains(got, `unknown job "nope"`) {
			t.Errorf("banner %q", got)
		}
		p.shot("error-404.png")
		p = tab(t, "#/jobs/data-straggler-8?from=abc")
		p.wait(`!document.getElementById('banner').hidden`, "the error banner")
		if got := p.text("#banner"); !strings.Contains(got, "API error 400") || !strings.Contains(got, "field: from") {
			t.Errorf("banner %q", got)
		}
		if got := p.str(`document.querySelector('input[name=from]').getAttribute('aria-invalid')`); got != "true" {
			t.Errorf("the from input is not marked invalid (%s)", got)
		}
		p.shot("error-400.png")
	})

	t.Run("empty job list", func(t *testing.T) {
		g := newFakeAPI(t)
		g.jobs = []byte(`{"jobs":[]}`)
		empty := httptest.NewServer(g.mux())
		t.Cleanup(empty.Close)
		p := browser{ctx: bctx, base: empty.URL, dir: dir}.open(t, "#/")
		p.wait(`document.querySelector('.card.empty')`, "the empty state")
		if got := p.text(".card.empty"); !strings.Contains(got, "No jobs registered yet") || !strings.Contains(got, "PUT /api/v1/jobs/{id}") {
			t.Errorf("empty state %q", got)
		}
	})

	t.Run("job list follows the API's pages", func(t *testing.T) {
		g := newFakeAPI(t)
		g.page = 4
		paged := httptest.NewServer(g.mux())
		t.Cleanup(paged.Close)
		p := browser{ctx: bctx, base: paged.URL, dir: dir}.open(t, "#/")
		p.wait(`document.querySelectorAll('tr[data-job]').length === 11`, "all eleven jobs from three pages")
	})

	t.Run("loading state", func(t *testing.T) {
		g := newFakeAPI(t)
		g.gate = make(chan struct{})
		slow := httptest.NewServer(g.mux())
		t.Cleanup(slow.Close)
		p := browser{ctx: bctx, base: slow.URL, dir: dir}.open(t, "#/jobs/tie")
		p.wait(`document.querySelector('.loading-msg')`, "the loading message")
		if got := p.text(".loading-msg"); got != "Loading the report for tie…" {
			t.Errorf("loading message %q", got)
		}
		if got := p.str(`document.getElementById('main').getAttribute('aria-busy')`); got != "true" {
			t.Errorf("main aria-busy %q while loading", got)
		}
		close(g.gate)
		p.wait(`document.querySelector('.headline-text')`, "the report after loading")
		p.idle()
	})
}
