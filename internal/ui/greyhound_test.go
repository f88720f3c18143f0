package ui

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The fake API serves the Greyhound fixtures, 404 for a known job without
// one (no collective telemetry), and 404 naming an unknown job.
func TestFakeAPIGreyhound(t *testing.T) {
	f := newFakeAPI(t)
	h := f.handler()
	for path, want := range map[string]int{
		"/api/v1/jobs/data-straggler-8/greyhound": 200,
		"/api/v1/jobs/nccl-only-4/greyhound":      200,
		"/api/v1/jobs/few-steps/greyhound":        404,
		"/api/v1/jobs/nope/greyhound":             404,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != want {
			t.Errorf("%s: %d %v, want %d", path, rec.Code, err, want)
			continue
		}
		if want == 404 && !strings.Contains(body["error"].(string), "job") {
			t.Errorf("%s: error %q", path, body["error"])
		}
	}
}

// shotOf keeps a screenshot of the element sel (the Greyhound section is
// easier to review on its own than in the full page).
func shotOf(p *page, sel, name string) {
	p.t.Helper()
	p.shotOf(sel, name)
}

func TestBrowserGreyhound(t *testing.T) {
	bctx := startBrowser(t)
	f := newFakeAPI(t)
	srv := httptest.NewServer(f.mux())
	t.Cleanup(srv.Close)
	tab := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}.open
	section := func(p *page) {
		p.t.Helper()
		p.wait(`document.querySelector('#greyhound')`, "the Greyhound section")
		p.idle()
	}

	t.Run("slow rank after validation", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		section(p)
		p.wait(`document.querySelector('#gh-iter svg.timeline-gh')`, "the iteration chart")
		if got := p.text(".gh-phase-now"); got != "verdict" {
			t.Errorf("phase %q, want verdict", got)
		}
		if got := p.text(".gh-since"); !strings.Contains(got, "since 2026-03-14") || !strings.Contains(got, "before this report") {
			t.Errorf("since line %q", got)
		}
		if n := p.count("li.gh-transition"); n != 3 {
			t.Errorf("%d transitions, want 3", n)
		}
		if got := p.text(`li.gh-transition[data-to="profiling"]`); !strings.Contains(got, "BOCD+V change point at iteration 140") || !strings.Contains(got, "changepoint index: 140") {
			t.Errorf("tracking → profiling transition %q lacks its reason and evidence", got)
		}
		if got := p.text(".gh-verdict"); !strings.Contains(got, "slow rank") || !strings.Contains(got, "high confidence") || !strings.Contains(got, "Rank 2 is slow") {
			t.Errorf("verdict %q", got)
		}
		// Iteration time: the onset mark and the phase bands behind it; the
		// stage time axis keeps its own single onset mark.
		if got := p.text(`svg.timeline-gh g.cp.onset[data-step="140"]`); !strings.Contains(got, "onset @140: 133 ms → 220 ms") {
			t.Errorf("iteration onset label %q", got)
		}
		if n := p.count(`svg.timeline g.cp.onset[data-step="140"]`); n != 1 {
			t.Errorf("%d onset marks on the stage time axis, want 1", n)
		}
		for _, ph := range []string{"tracking", "profiling", "validation", "verdict"} {
			if p.count("svg.timeline-gh .band.phase-"+ph) != 1 {
				t.Errorf("no %s band", ph)
			}
		}
		x, y, w, h := p.box("svg.timeline-gh rect.hit")
		if err := chromedp.Do(p.ctx, chromedp.MouseEvent("mouseMoved", x+w*0.95, y+h/2)); err != nil {
			t.Fatal(err)
		}
		p.wait(`!document.getElementById('tooltip').hidden && document.getElementById('tooltip').textContent.includes('iteration')`, "the iteration tooltip")
		if got := p.text("#tooltip"); !strings.Contains(got, "phaseverdict") || !strings.Contains(got, " ms") {
			t.Errorf("iteration tooltip %q lacks the phase and the time", got)
		}
		// Keyboard: the cursor reads iteration, time and phase; the chart is
		// read-only (no window is brushed).
		if err := chromedp.Do(p.ctx, chromedp.Focus(chromedp.CSS("svg.timeline-gh rect.hit")), chromedp.KeyEvent(kb.End),
			chromedp.KeyEvent(kb.ArrowLeft, chromedp.KeyModifiers(chromedp.ModifierShift)), chromedp.KeyEvent(kb.Enter)); err != nil {
			t.Fatal(err)
		}
		if got := p.str(`document.querySelector('svg.timeline-gh rect.hit').getAttribute('aria-valuetext')`); !strings.HasPrefix(got, "iteration 238: ") || !strings.HasSuffix(got, ", verdict") {
			t.Errorf("iteration cursor reads %q", got)
		}
		if p.params().Has("from") {
			t.Error("the iteration chart brushed a window")
		}
		// Group comparison: the degraded groups are marked.
		if got := p.text(`tr.gh-member.degraded[data-comm="tp-0001"]`); !strings.Contains(got, "degraded") || !strings.Contains(got, "1.64×") || !strings.Contains(got, "2, 3") {
			t.Errorf("degraded group row %q", got)
		}
		if n := p.count(`tr.gh-member.degraded`); n != 2 {
			t.Errorf("%d degraded groups marked, want 2", n)
		}
		// Lateness: 8 × 60, one cell each; rank 2 enters latest.
		if got := p.str(`document.querySelector('canvas.gh-hm').dataset.cells`); got != "480" {
			t.Errorf("%s heatmap cells, want 480", got)
		}
		if got := p.text(".gh-agg-note"); !strings.Contains(got, "one cell each") {
			t.Errorf("aggregation note %q", got)
		}
		if got := p.str(`document.querySelector('.gh-latest .gh-rank').dataset.rank`); got != "2" {
			t.Errorf("latest rank %s, want 2", got)
		}
		// Validation: rank 2's GEMM is the slow bar; no link is slow.
		if got := p.text(`.gh-bar-row.slow[data-rank="2"]`); !strings.Contains(got, "slow") {
			t.Errorf("rank 2 GEMM row %q", got)
		}
		if p.count(".gh-bar-row.slow") != 1 || p.count("tr.gh-link.slow") != 0 || p.count("tr.gh-link") != 8 {
			t.Errorf("validation: %d slow GEMM rows, %d slow links of %d", p.count(".gh-bar-row.slow"), p.count("tr.gh-link.slow"), p.count("tr.gh-link"))
		}
		// Keyboard: the heatmap reads cells aloud; the rank chip opens the
		// stage drill-down.
		// The first key puts the cursor on the verdict's rank, newest column.
		if err := chromedp.Do(p.ctx, chromedp.Focus(chromedp.CSS(".gh-hm-wrap")), chromedp.KeyEvent(kb.End)); err != nil {
			t.Fatal(err)
		}
		p.wait(`document.querySelector('.gh-cell').textContent.startsWith('r2 ')`, "rank 2's newest cell read out")
		if got := p.text(".gh-cell"); !strings.Contains(got, "collective 60 of 60") || !strings.Contains(got, "rank 2") {
			t.Errorf("cell read-out %q", got)
		}
		if err := chromedp.Do(p.ctx, chromedp.KeyEvent(kb.ArrowUp)); err != nil {
			t.Fatal(err)
		}
		p.wait(`document.querySelector('.gh-cell').textContent.startsWith('r1 ')`, "the cell above rank 2 read out")
		shotOf(p, "#greyhound", "greyhound-slow-rank.png")
		p.click(`.gh-latest button.gh-rank[data-rank="2"]`)
		p.waitParam("rank", "2")
		p.wait(`document.querySelector('#rank-view')`, "the rank view")
	})

	t.Run("slow link", func(t *testing.T) {
		p := tab(t, "#/jobs/absorbed-backward")
		section(p)
		p.wait(`document.querySelector('.gh-verdict[data-kind="slow_link"]')`, "the slow-link verdict")
		row := `tr.gh-link.slow[data-src="4"][data-dst="5"]`
		if got := p.text(row); !strings.Contains(got, "4 → 5") || !strings.Contains(got, "slow link") || !strings.Contains(got, "2.59×") {
			t.Errorf("slow link row %q", got)
		}
		if p.count("tr.gh-link.slow") != 1 || p.count("svg.gh-graph line.gh-edge.slow") != 1 {
			t.Errorf("%d slow link rows, %d slow edges; want 1 and 1", p.count("tr.gh-link.slow"), p.count("svg.gh-graph line.gh-edge.slow"))
		}
		if got := p.text(".gh-link-chip"); got != "4 → 5" {
			t.Errorf("verdict link chip %q", got)
		}
		if p.count(".gh-bar-row.slow") != 0 {
			t.Error("a GEMM bar is marked slow in a slow-link verdict")
		}
		shotOf(p, "#greyhound", "greyhound-slow-link.png")
	})

	t.Run("tracking only, no change", func(t *testing.T) {
		p := tab(t, "#/jobs/baseline-8")
		section(p)
		p.wait(`document.querySelector('#gh-iter svg.timeline-gh')`, "the iteration chart")
		if got := p.text(".gh-phase-now"); got != "tracking" {
			t.Errorf("phase %q, want tracking", got)
		}
		if p.count(".gh-no-transition") != 1 || p.count("svg.timeline-gh g.cp") != 0 || p.count(".gh-no-validation") != 1 {
			t.Error("tracking-only job shows transitions, change points or validation")
		}
		if p.count("svg.timeline-gh .band.phase-tracking") != 1 {
			t.Error("no tracking band")
		}
		if got := p.text(".gh-verdict"); !strings.Contains(got, "no fail-slow") {
			t.Errorf("verdict %q", got)
		}
		if n := p.count(`tr.gh-member.degraded`); n != 0 {
			t.Errorf("%d degraded groups in a healthy job", n)
		}
	})

	t.Run("inconclusive", func(t *testing.T) {
		p := tab(t, "#/jobs/tie")
		section(p)
		p.wait(`document.querySelector('.gh-verdict[data-kind="inconclusive"]')`, "the inconclusive verdict")
		if got := p.text(".badge.gh-kind"); got != "inconclusive" {
			t.Errorf("verdict kind %q", got)
		}
		if got := p.text(".badge.gh-conf"); got != "low confidence" {
			t.Errorf("confidence %q", got)
		}
		if got := p.text(".gh-inconclusive"); !strings.Contains(got, "no cause is named") {
			t.Errorf("inconclusive note %q", got)
		}
		if got := p.text(".gh-verdict .gh-facts"); !strings.Contains(got, "suspect ranks") {
			t.Errorf("suspects %q", got)
		}
		shotOf(p, "#greyhound", "greyhound-inconclusive.png")
	})

	t.Run("1,024 ranks: aggregated lateness in bounded time", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-1024")
		section(p)
		p.wait(`document.querySelector('canvas.gh-hm')`, "the lateness heatmap")
		ds := func(k string) string { return p.str(`document.querySelector('canvas.gh-hm').dataset.` + k) }
		if ds("ranks") != "1024" || ds("rows") != "256" || ds("bucketRanks") != "4" || ds("cells") != strconv.Itoa(256*64) {
			t.Errorf("heatmap ranks %s rows %s bucket %s cells %s; want 1024 ranks as 256 rows of 4, 16384 cells", ds("ranks"), ds("rows"), ds("bucketRanks"), ds("cells"))
		}
		if got := p.text(".gh-agg-note"); !strings.Contains(got, "1,024 ranks × 64 collectives drawn as 256 × 64 cells") || !strings.Contains(got, "maximum over 4 consecutive ranks") {
			t.Errorf("aggregation note %q", got)
		}
		ms, err := strconv.ParseFloat(ds("renderMs"), 64)
		if err != nil || ms > 1500 {
			t.Errorf("lateness heatmap took %s ms to draw, want < 1500", ds("renderMs"))
		}
		t.Logf("1,024 × 64 lateness heatmap drawn in %.1f ms", ms)
		if got := p.str(`document.querySelector('.gh-latest .gh-rank').dataset.rank`); got != "641" {
			t.Errorf("latest rank %s, want 641", got)
		}
		if got := p.text(".gh-gemm"); !strings.Contains(got, "The 32 slowest of 1,024 ranks") {
			t.Errorf("GEMM summary %q", got)
		}
		if got := p.str(`document.querySelector('.gh-bar-row').dataset.rank`); got != "641" || p.count(".gh-bar-row.slow") != 1 {
			t.Errorf("first GEMM bar rank %s, %d slow; want 641 alone", got, p.count(".gh-bar-row.slow"))
		}
		if p.count(`tr.gh-member.degraded[data-comm="tp-80"]`) != 1 || !strings.Contains(p.text(".gh-more"), "more groups within 1.1× of the median") {
			t.Error("1,024-rank groups: tp-80 not marked degraded or the rest not summarised")
		}
		shotOf(p, "#greyhound", "greyhound-1024.png")
	})

	t.Run("no collective telemetry is not an error", func(t *testing.T) {
		p := tab(t, "#/jobs/few-steps")
		section(p)
		if got := strings.ToLower(p.text(".gh-missing-text")); !strings.Contains(got, "no collective telemetry for this job: run with the nccl shim / laggard agent or the python client's collective capture") {
			t.Errorf("missing-telemetry text %q", got)
		}
		if p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Errorf("error banner shown: %s", p.text("#banner"))
		}
	})

	t.Run("a broken collective report is an inline error, the page stays", func(t *testing.T) {
		g := newFakeAPI(t)
		g.fixtures[ghFile("baseline-8")] = []byte("<html>proxy error</html>")
		bad := httptest.NewServer(g.mux())
		t.Cleanup(bad.Close)
		p := browser{ctx: bctx, base: bad.URL, dir: shotDir(t)}.open(t, "#/jobs/baseline-8")
		section(p)
		if got := p.text(".gh-error"); !strings.Contains(got, "Cannot load the collective analysis: response is not JSON") || !strings.Contains(got, "/greyhound") {
			t.Errorf("inline error %q", got)
		}
		if p.count(".headline-text") != 1 || p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Error("the stage report is not shown, or a banner is")
		}
	})

	t.Run("pure-NCCL job: no stage vectors, validation pending", func(t *testing.T) {
		p := tab(t, "#/jobs/nccl-only-4")
		section(p)
		if p.str(`document.getElementById('banner').hidden`) != "true" {
			t.Errorf("error banner shown: %s", p.text("#banner"))
		}
		if got := p.text(".no-stage"); !strings.Contains(got, "No stage-vector report") {
			t.Errorf("no-stage card %q", got)
		}
		if got := p.text(".gh-phase-now"); got != "validation" {
			t.Errorf("phase %q, want validation", got)
		}
		if got := p.text(`.gh-plan[data-plan="v-1"]`); !strings.Contains(got, "pending") || !strings.Contains(got, "Waiting for the ranks") {
			t.Errorf("pending plan %q", got)
		}
		if got := p.text(".gh-verdict"); !strings.Contains(got, "No verdict yet") {
			t.Errorf("verdict %q", got)
		}
		if got := p.text(".gh-telemetry-note"); !strings.Contains(got, "37 records dropped") {
			t.Errorf("telemetry note %q", got)
		}
		if p.count("span.gh-rank") == 0 || p.count("button.gh-rank") != 0 {
			t.Error("rank chips link to a stage drill-down the job does not have")
		}
		shotOf(p, "#greyhound", "greyhound-nccl-only.png")
	})
}
