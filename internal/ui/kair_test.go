package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/laggard-dev/laggard/internal/engine/kair"
)

// kairFake serves the KAIR routes (contracts §C) from kairWorld in front
// of the stage/Greyhound fake API: the capture list, POST a capture (409
// while one is open), the report (409 below two uploads) and one step's
// timeline.
type kairFake struct {
	f    *fakeAPI
	mu   sync.Mutex
	w    map[string]*kfJob
	reqs []string // request lines of the KAIR routes, in order
	n    int      // captures created
}

func newKairFake(t testing.TB) *kairFake {
	t.Helper()
	w := kairWorld(true)
	w["role-groups"] = kfEngineJob(t, "role-groups", false)
	w["telemetry-limited"] = kfEngineJob(t, "telemetry-limited", true)
	return &kairFake{f: newFakeAPI(t), w: w}
}

func (k *kairFake) requests(sub string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, r := range k.reqs {
		if strings.Contains(r, sub) {
			out = append(out, r)
		}
	}
	return out
}

func (k *kairFake) mux() *http.ServeMux {
	mux := http.NewServeMux()
	// jobOf logs the request and finds the job's scenario; a known job
	// without one has no captures.
	jobOf := func(w http.ResponseWriter, r *http.Request) *kfJob {
		k.mu.Lock()
		k.reqs = append(k.reqs, r.Method+" "+r.URL.RequestURI())
		k.mu.Unlock()
		id := r.PathValue("id")
		if j, ok := k.w[id]; ok {
			return j
		}
		if _, ok := k.f.job(id); !ok {
			fail(w, unknownJob(id))
			return nil
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		j := &kfJob{Captures: []*kfCapture{}}
		k.w[id] = j
		return j
	}
	capOf := func(w http.ResponseWriter, r *http.Request, j *kfJob) *kfCapture {
		cid := r.URL.Query().Get("capture")
		for _, c := range j.Captures {
			if c.ID == cid {
				return c
			}
		}
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no capture %q for job %q", cid, r.PathValue("id"))})
		return nil
	}
	mux.HandleFunc("GET /api/v1/jobs/{id}/captures", func(w http.ResponseWriter, r *http.Request) {
		if j := jobOf(w, r); j != nil {
			k.mu.Lock()
			defer k.mu.Unlock()
			writeJSON(w, http.StatusOK, map[string]any{"captures": j.Captures})
		}
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/captures", func(w http.ResponseWriter, r *http.Request) {
		j := jobOf(w, r)
		if j == nil {
			return
		}
		var body struct {
			Ranks  []int  `json:"ranks"`
			Steps  int    `json:"steps"`
			Every  int    `json:"every"`
			Reason string `json:"reason"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("bad capture request (%s): %v", r.Header.Get("Content-Type"), err)})
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, c := range j.Captures {
			if c.State == "pending" || c.State == "recording" {
				// The server's wording (internal/analysis ErrCaptureOpen).
				writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf("job %q: capture %s (%s) is open until %d: the job already has an open capture", r.PathValue("id"), c.ID, c.State, c.DeadlineNS)})
				return
			}
		}
		k.n++
		ws := 8
		if v, ok := k.f.job(r.PathValue("id")); ok && v.WorldSize > 0 {
			ws = min(v.WorldSize, 16)
		}
		reason := body.Reason
		if reason == "" {
			reason = "manual"
		}
		c := &kfCapture{ID: fmt.Sprintf("c%012x", 0xfeed00+k.n), Job: r.PathValue("id"), Trigger: "manual", Reason: reason,
			CreatedNS: kfNow, DeadlineNS: kfNow + 300e9, StartStep: 250, Steps: 5, Every: 1,
			Ranks: kfInts(0, ws), Fetched: []int{}, Uploaded: []int{}, State: "pending"}
		j.Captures = append([]*kfCapture{c}, j.Captures...)
		writeJSON(w, http.StatusCreated, c)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/kair", func(w http.ResponseWriter, r *http.Request) {
		j := jobOf(w, r)
		if j == nil {
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		c := capOf(w, r, j)
		if c == nil {
			return
		}
		rep := j.Reports[c.ID]
		if len(c.Uploaded) < 2 || rep == nil {
			// The server's wording (internal/analysis ErrTooFewTraces).
			writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf("job %q, capture %s (%s): %d of %d ranks uploaded a trace; KAIR compares ranks and needs two: too few ranks uploaded a trace",
				r.PathValue("id"), c.ID, c.State, len(c.Uploaded), len(c.Ranks))})
			return
		}
		writeJSON(w, http.StatusOK, kfKair{Capture: c, Report: rep})
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/kair/timeline", func(w http.ResponseWriter, r *http.Request) {
		j := jobOf(w, r)
		if j == nil {
			return
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		c := capOf(w, r, j)
		if c == nil {
			return
		}
		// No step: the capture analysed whole (-1), as the server reads it.
		step, err := int64(-1), error(nil)
		if v := r.URL.Query().Get("step"); v != "" {
			step, err = strconv.ParseInt(v, 10, 64)
			if err == nil && step < 0 {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "step must be a training step ≥ 0", "field": "step"})
				return
			}
		}
		tl := j.Timelines[c.ID][step]
		if err != nil || tl == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("capture %s has no step %q", c.ID, r.URL.Query().Get("step"))})
			return
		}
		writeJSON(w, http.StatusOK, tl)
	})
	mux.Handle("/api/", k.f.handler())
	mux.Handle("/", Handler())
	return mux
}

// The fake answers as the contract says, so the UI's requests are ones
// the server accepts.
func TestKairFakeAPI(t *testing.T) {
	h := newKairFake(t).mux()
	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s %s: %v %s", method, path, err, rec.Body.String())
		}
		return rec.Code, m
	}
	for path, want := range map[string]int{
		"/api/v1/jobs/data-straggler-8/captures":                                     200,
		"/api/v1/jobs/data-straggler-8/kair?capture=c3f1a9e2b4d70":                   200,
		"/api/v1/jobs/data-straggler-8/kair?capture=c00aa11bb22cc":                   409,
		"/api/v1/jobs/data-straggler-8/kair?capture=nope":                            404,
		"/api/v1/jobs/data-straggler-8/kair/timeline?capture=c3f1a9e2b4d70&step=242": 200,
		"/api/v1/jobs/data-straggler-8/kair/timeline?capture=c3f1a9e2b4d70&step=7":   404,
		"/api/v1/jobs/few-steps/kair?capture=c1111aaaa2222":                          409,
		"/api/v1/jobs/nope/captures":                                                 404,
	} {
		if code, body := do("GET", path, ""); code != want {
			t.Errorf("%s: %d %v, want %d", path, code, body, want)
		}
	}
	if code, body := do("GET", "/api/v1/jobs/relief/captures", ""); code != 200 || len(body["captures"].([]any)) != 0 {
		t.Errorf("a job without captures: %d %v", code, body)
	}
	code, c := do("POST", "/api/v1/jobs/relief/captures", `{"reason":"why not"}`)
	if code != 201 || c["state"] != "pending" || c["reason"] != "why not" || len(c["id"].(string)) != 13 {
		t.Errorf("POST: %d %v", code, c)
	}
	if code, e := do("POST", "/api/v1/jobs/relief/captures", `{}`); code != 409 || !strings.Contains(e["error"].(string), "already has an open capture") {
		t.Errorf("second POST: %d %v, want 409", code, e)
	}
}

// kairSection waits for the section and the page to settle.
func kairSection(p *page) {
	p.t.Helper()
	p.wait(`document.querySelector('#kair')`, "the KAIR section")
	p.idle()
}

// hoverAt moves the mouse to a point inside an element (its top left
// plus dx, dy) and returns the tooltip's text.
func (p *page) hoverAt(sel string, dx, dy float64) string {
	p.t.Helper()
	x, y, _, _ := p.box(sel)
	if err := chromedp.Do(p.ctx, chromedp.MouseEvent("mouseMoved", x+dx, y+dy)); err != nil {
		p.t.Fatal(err)
	}
	p.wait(`!document.getElementById('tooltip').hidden`, "the tooltip on "+sel)
	return p.text("#tooltip")
}

// shotOf saves a screenshot of one element. Taking one resizes the
// viewport, and a resize re-renders the page: an element replaced under
// the screenshot is looked up again, a few times at most.
func (p *page) shotOf(sel, name string) {
	p.t.Helper()
	var buf []byte
	for try := 0; ; try++ {
		p.wait(fmt.Sprintf(`document.querySelector(%q)`, sel), sel)
		var err error
		buf, err = chromedp.Run(p.ctx, chromedp.Screenshot(chromedp.CSS(sel), chromedp.NodeVisible))
		if err == nil {
			break
		}
		if try == 4 || !strings.Contains(err.Error(), "No node") && !strings.Contains(err.Error(), "Could not find node") {
			p.t.Fatalf("screenshot %s: %v", name, err)
		}
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

func (p *page) num(js string) float64 {
	p.t.Helper()
	var v float64
	p.eval(js, &v)
	return v
}

func TestBrowserKair(t *testing.T) {
	bctx := startBrowser(t)
	k := newKairFake(t)
	srv := httptest.NewServer(k.mux())
	t.Cleanup(srv.Close)
	tab := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}.open
	w := k.w

	t.Run("straggler: heatmap, scores, Fig. 4, blame chain per step, timeline", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-headline-text')`, "the KAIR headline")
		rep := w["data-straggler-8"].Reports["c3f1a9e2b4d70"]
		if got := p.text("#kair .kr-headline-text"); got != rep.Headline {
			t.Errorf("headline %q, want %q", got, rep.Headline)
		}
		if got := p.str(`document.querySelector('#kair .kr-headline').dataset.verdict`); got != "culprit" {
			t.Errorf("verdict %q", got)
		}
		// Issue 16: what the culprit explains of the wait for its rank, and
		// the rank left out for sharing no step.
		if got := p.text("#kair .kr-impact"); !strings.Contains(got, "The other ranks waited 15.1 ms per step for rank 2; the cause accounts for 14.2 ms of it, 12% of the median step") {
			t.Errorf("impact line %q", got)
		}
		if got := p.text("#kair .kr-left-out"); !strings.Contains(got, "rank 7 (steps 250–254)") {
			t.Errorf("left-out line %q", got)
		}
		// Capture list: both captures, the default (newest with uploads) selected.
		if n := p.count("#kair tr.kr-cap"); n != 2 {
			t.Errorf("%d capture rows, want 2", n)
		}
		if got := p.text(`#kair tr.kr-cap.selected .kr-uploads`); got != "4 / 4" {
			t.Errorf("selected capture uploads %q, want 4 / 4", got)
		}
		if got := p.text(`#kair tr.kr-cap[data-id="c00aa11bb22cc"] .kr-uploads`); got != "0 / 8" {
			t.Errorf("expired capture uploads %q", got)
		}
		// The reason is text, never markup.
		if got := p.text(`#kair tr.kr-cap[data-id="c3f1a9e2b4d70"] .kr-cap-reason`); !strings.Contains(got, kfEvil) {
			t.Errorf("reason %q lacks the literal text %q", got, kfEvil)
		}
		if strings.Contains(p.str(`document.querySelector('#kair').innerText`), "null") {
			t.Error("the section prints a null")
		}
		if p.count("#kair img") != 0 || p.str(`document.body.dataset.pwned || ''`) != "" {
			t.Error("an API string was parsed as HTML")
		}
		// Heatmap: 4 × 4 cells, not aggregated, rank 2's row outlined.
		hm := "#kair canvas.kr-hm"
		p.wait(`document.querySelector('`+hm+`')`, "the K-S heatmap")
		if got := p.str(`document.querySelector('` + hm + `').dataset.cells + '/' + document.querySelector('` + hm + `').dataset.bucket + '/' + document.querySelector('` + hm + `').dataset.stragglerRow`); got != "16/1/2" {
			t.Errorf("heatmap cells/bucket/straggler row %q, want 16/1/2", got)
		}
		if got := p.str(`document.querySelector('#kair .kr-agg-note').dataset.aggregated`); got != "false" {
			t.Errorf("4 ranks aggregated: %q", got)
		}
		// Tooltip of cell (row r2, column r0): D and the pair p.
		cell := p.num(`+document.querySelector('` + hm + `').dataset.cellPx`)
		lw := p.num(`+document.querySelector('` + hm + `').dataset.labelWidth`)
		tip := p.hoverAt(hm, lw+cell*0.5, cell*2.5)
		d := rep.Rhythm.D[2*4+0]
		if !strings.Contains(tip, "rank 2 × rank 0") || !strings.Contains(tip, fmt.Sprintf("D%.3f", d)) || !strings.Contains(tip, "pair p") {
			t.Errorf("cell tooltip %q lacks rank 2 × rank 0, D %.3f and the pair p", tip, d)
		}
		// Scores: four bars, rank 2 marked.
		if n := p.count("#kair .kr-bar-row"); n != 4 {
			t.Errorf("%d score bars, want 4", n)
		}
		if got := p.str(`[...document.querySelectorAll('#kair .kr-bar-row.straggler')].map((r) => r.dataset.rank).join(',')`); got != "2" {
			t.Errorf("straggler bars %q, want 2", got)
		}
		if got := p.text("#kair .kr-why"); got != rep.Rhythm.Why {
			t.Errorf("why %q, want %q", got, rep.Rhythm.Why)
		}
		if got := p.text("#kair .kr-agreement"); !strings.Contains(got, "top-1 agrees") || !strings.Contains(got, "Spearman") {
			t.Errorf("agreement line %q", got)
		}
		// Fig. 4: one line per rank, the straggler's highlighted and last.
		if got := p.str(`[...document.querySelectorAll('#kair svg.kr-freq-svg path.kr-freq-line')].map((l) => l.dataset.rank + (l.classList.contains('straggler') ? '*' : '')).join(',')`); got != "0,1,3,2*" {
			t.Errorf("frequency lines %q, want 0,1,3,2*", got)
		}
		// Blame chain: the default step is the top cause's (241), an
		// operator chain ending at rank 2's index_select.
		p.wait(`document.querySelector('#kair table.kr-causes[data-step="241"]')`, "step 241's causes")
		if got := p.str(`document.querySelector('#kair .kr-steps button.on').dataset.step`); got != "241" {
			t.Errorf("selected step %q, want 241", got)
		}
		chain := func() string {
			return p.str(`[...document.querySelectorAll('#kair .kr-chain-box[data-cause="0"] .kr-link')].map((l) => l.dataset.role + ': ' + l.querySelector('.kr-ev').textContent).join(' | ')`)
		}
		c241 := chain()
		if !strings.HasPrefix(c241, "symptom: rank 0 nccl:all_reduce#0") || !strings.Contains(c241, "rule: waited 17900000ns for rank 2") ||
			!strings.Contains(c241, "via: rank 2 nccl:all_reduce#0") || !strings.Contains(c241, "culprit: rank 2 aten::index_select#3") ||
			!strings.HasSuffix(c241, "rule: predecessor has abnormal execution time: blame propagates to it (rule 2a)") {
			t.Errorf("step 241 chain %q", c241)
		}
		if got := p.text(`#kair tr.kr-cause .kr-excess`); got != "17.9 ms" {
			t.Errorf("cause excess %q, want 17.9 ms", got)
		}
		if got := p.text(`#kair tr.kr-cause .kr-cause-name`); !strings.Contains(got, "r2 aten::index_select") || !strings.Contains(got, "straggler") {
			t.Errorf("cause %q", got)
		}
		// The step timeline of step 241: 4 ranks, 2 lanes each.
		tl := "#kair canvas.kr-tl-canvas"
		p.wait(`document.querySelector('`+tl+`[data-step="241"]')`, "step 241's timeline")
		if got := p.str(`document.querySelector('` + tl + `').dataset.ranks + '/' + document.querySelector('` + tl + `').dataset.lanes`); got != "4/8" {
			t.Errorf("timeline ranks/lanes %q, want 4/8", got)
		}
		// Hover rank 2's index_select (38.6 ms from +20.4 ms) on its t1 lane.
		var keys []string
		var ys []float64
		if err := json.Unmarshal([]byte(p.str(`document.querySelector('`+tl+`').dataset.laneKeys`)), &keys); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(p.str(`document.querySelector('`+tl+`').dataset.laneY`)), &ys); err != nil {
			t.Fatal(err)
		}
		li := slices.Index(keys, "2:t1")
		if li < 0 {
			t.Fatalf("no lane 2:t1 in %v", keys)
		}
		span := p.num(`+document.querySelector('` + tl + `').dataset.spanNs`)
		pw := p.num(`+document.querySelector('` + tl + `').dataset.plotWidth`)
		tlw := p.num(`+document.querySelector('` + tl + `').dataset.labelWidth`)
		tip = p.hoverAt(tl, tlw+(30e6/span)*pw, ys[li]+6)
		if !strings.Contains(tip, "aten::index_select") || !strings.Contains(tip, "r2 (straggler)") || !strings.Contains(tip, "38.6 ms") {
			t.Errorf("timeline tooltip %q lacks rank 2's index_select of 38.6 ms", tip)
		}
		p.shotOf("#kair", "kair-straggler.png")

		// The step picker changes the chain: step 242 is a dependency edge.
		p.click(`#kair .kr-steps button[data-step="242"]`)
		p.waitParam("kair_step", "242")
		p.wait(`document.querySelector('#kair table.kr-causes[data-step="242"]')`, "step 242's causes")
		c242 := chain()
		if c242 == c241 || !strings.HasPrefix(c242, "symptom: rank 1 nccl:all_reduce#0") || !strings.Contains(c242, "edge from: rank 2 cudaStreamSynchronize#1") ||
			!strings.HasSuffix(c242, "rule: predecessor completed on time, op started late: dependency edge (rule 2c)") {
			t.Errorf("step 242 chain %q", c242)
		}
		if got := p.str(`document.querySelector('#kair tr.kr-cause').dataset.kind`); got != "edge" {
			t.Errorf("step 242 cause kind %q, want edge", got)
		}
		p.wait(`document.querySelector('`+tl+`[data-step="242"]')`, "step 242's timeline")
		// Once per selection, not per redraw; the page's 10 s auto-refresh
		// may add one fresh fetch on a slow machine.
		if n := len(k.requests("kair/timeline?capture=c3f1a9e2b4d70&step=242")); n < 1 || n > 2 {
			t.Errorf("step 242's timeline fetched %d times, want 1 (2 with an auto-refresh)", n)
		}

		// Another capture: the expired one has no report; the API's 409 is shown.
		p.click(`#kair tr.kr-cap[data-id="c00aa11bb22cc"]`)
		p.waitParam("kair_capture", "c00aa11bb22cc")
		p.wait(`document.querySelector('#kair .kr-noreport[data-state="expired"]')`, "the expired capture")
		if got := p.text("#kair .kr-api-said"); !strings.Contains(got, "0 of 8 ranks uploaded a trace; KAIR compares ranks and needs two") {
			t.Errorf("409 text %q", got)
		}
		if p.count("#kair canvas.kr-hm") != 0 {
			t.Error("a heatmap is shown for a capture without a report")
		}
	})

	t.Run("healthy run: no straggler marked, nothing to blame", func(t *testing.T) {
		p := tab(t, "#/jobs/baseline-8")
		kairSection(p)
		p.wait(`document.querySelector('#kair canvas.kr-hm')`, "the heatmap")
		if got := p.str(`document.querySelector('#kair canvas.kr-hm').dataset.cells + '/' + document.querySelector('#kair canvas.kr-hm').dataset.stragglerRow`); got != "64/-1" {
			t.Errorf("cells/straggler row %q, want 64/-1", got)
		}
		if n := p.count("#kair .kr-bar-row.straggler, #kair path.kr-freq-line.straggler, #kair .kr-legend .sw.straggler"); n != 0 {
			t.Errorf("%d straggler marks on a healthy run", n)
		}
		if n := p.count("#kair path.kr-freq-line"); n != 8 {
			t.Errorf("%d frequency lines, want 8", n)
		}
		if got := p.str(`document.querySelector('#kair .kr-headline').dataset.verdict`); got != "none" {
			t.Errorf("verdict %q", got)
		}
		if got := p.text("#kair .kr-no-causes"); !strings.Contains(got, "nothing to blame") {
			t.Errorf("no-causes line %q", got)
		}
		p.click(`#kair .kr-steps button[data-step="121"]`)
		p.wait(`document.querySelector('#kair .kr-no-causes[data-step="121"]')`, "step 121")
	})

	t.Run("inconclusive: no rank named, failed uploads listed", func(t *testing.T) {
		p := tab(t, "#/jobs/tie")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-headline')`, "the headline")
		if got := p.str(`document.querySelector('#kair .kr-headline').dataset.verdict`); got != "inconclusive" {
			t.Errorf("verdict %q", got)
		}
		if p.count("#kair .kr-inconclusive") != 1 {
			t.Error("no inconclusive note")
		}
		if n := p.count("#kair .kr-bar-row.straggler"); n != 0 {
			t.Errorf("%d straggler bars on an inconclusive Stage 1", n)
		}
		if got := p.text(`#kair tr.kr-cap .kr-uploads`); got != "6 / 8 · 2 failed" {
			t.Errorf("uploads %q", got)
		}
		if got := p.text("#kair .kr-chain-box"); !strings.Contains(got, "late start with no predecessor in the step DAG") {
			t.Errorf("chain %q", got)
		}
		if got := p.str(`document.querySelector('#kair canvas.kr-hm').dataset.cells`); got != "36" {
			t.Errorf("cells %q, want 36 (6 uploaded ranks)", got)
		}
	})

	t.Run("300 ranks: aggregated heatmap, top scores, straggler line", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-1024")
		kairSection(p)
		hm := "#kair canvas.kr-hm"
		p.wait(`document.querySelector('`+hm+`')`, "the heatmap")
		if got := p.str(`['ranks', 'rows', 'cells', 'bucket'].map((k) => document.querySelector('` + hm + `').dataset[k]).join('/')`); got != "300/150/22500/2" {
			t.Errorf("ranks/rows/cells/bucket %q, want 300/150/22500/2", got)
		}
		if got := p.str(`document.querySelector('#kair .kr-agg-note').dataset.aggregated`); got != "true" {
			t.Errorf("aggregated %q", got)
		}
		// The straggler's bucket row: two ranks per row.
		row := slices.Index(w["data-straggler-1024"].Reports["cabcdefabcdef"].Ranks, straggler1024) / 2
		if got := p.str(`document.querySelector('` + hm + `').dataset.stragglerRow`); got != strconv.Itoa(row) {
			t.Errorf("straggler row %q, want %d", got, row)
		}
		cell := p.num(`+document.querySelector('` + hm + `').dataset.cellPx`)
		lw := p.num(`+document.querySelector('` + hm + `').dataset.labelWidth`)
		tip := p.hoverAt(hm, lw+cell*10.5, cell*(float64(row)+0.5))
		if !strings.Contains(tip, "largest D") || !strings.Contains(tip, "rank 641") || !strings.Contains(tip, "maximum over 2 × 2 ranks") {
			t.Errorf("aggregated cell tooltip %q", tip)
		}
		if n := p.count("#kair .kr-bar-row"); n != 32 {
			t.Errorf("%d score bars, want the 32 highest", n)
		}
		if got := p.str(`document.querySelector('#kair .kr-bar-row').dataset.rank`); got != "641" {
			t.Errorf("top score bar rank %q, want 641", got)
		}
		if n := p.count("#kair path.kr-freq-line"); n != 300 {
			t.Errorf("%d frequency lines, want 300", n)
		}
		if got := p.str(`document.querySelector('#kair path.kr-freq-line.straggler').dataset.rank`); got != "641" {
			t.Errorf("highlighted line %q", got)
		}
		p.wait(`document.querySelector('#kair canvas.kr-tl-canvas')`, "the timeline")
		if got := p.str(`document.querySelector('#kair canvas.kr-tl-canvas').dataset.lanes`); got != "600" {
			t.Errorf("timeline lanes %q, want 600", got)
		}
		if got := p.str(`JSON.parse(document.querySelector('#kair canvas.kr-tl-canvas').dataset.laneKeys).slice(0, 3).join(',')`); got != "641:t1,641:s7,0:t1" {
			t.Errorf("timeline lanes start %q, want the straggler's first", got)
		}
		p.shotOf("#kair", "kair-300.png")
	})

	t.Run("the engine's own report (kair.Run) renders", func(t *testing.T) {
		rep := w["role-groups"].Reports["ce0e0e0e0e0e0"]
		p := tab(t, "#/jobs/role-groups")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-headline-text')`, "the headline")
		if got := p.text("#kair .kr-headline-text"); got != rep.Headline || got == "" {
			t.Errorf("headline %q, want %q", got, rep.Headline)
		}
		if got := p.str(`document.querySelector('#kair .kr-headline').dataset.verdict`); got != rep.Verdict {
			t.Errorf("verdict %q, want %q", got, rep.Verdict)
		}
		if rep.Rhythm == nil {
			t.Fatal("the engine gave no Stage 1 result for 6 ranks")
		}
		n := len(rep.Rhythm.Ranks)
		if got := p.str(`document.querySelector('#kair canvas.kr-hm').dataset.cells`); got != strconv.Itoa(n*n) {
			t.Errorf("heatmap cells %q, want %d", got, n*n)
		}
		if got := p.count("#kair .kr-bar-row"); got != n {
			t.Errorf("%d score bars, want %d", got, n)
		}
		if got := p.count("#kair path.kr-freq-line"); got != n {
			t.Errorf("%d frequency lines, want %d", got, n)
		}
		if got := p.count("#kair .kr-bar-row.straggler"); (rep.Rhythm.Verdict == "straggler") != (got == 1) {
			t.Errorf("%d straggler bars for a Stage 1 verdict %q", got, rep.Rhythm.Verdict)
		}
		if got := p.count("#kair .kr-steps button"); got != len(rep.Analysed) || got == 0 {
			t.Fatalf("%d step buttons, want %d", got, len(rep.Analysed))
		}
		for _, s := range rep.Analysed {
			p.click(fmt.Sprintf(`#kair .kr-steps button[data-step="%d"]`, s))
			p.wait(fmt.Sprintf(`document.querySelector('#kair [data-step="%d"].kr-causes, #kair .kr-no-causes[data-step="%d"]') && document.querySelector('#kair canvas.kr-tl-canvas[data-step="%d"]')`, s, s, s),
				fmt.Sprintf("step %d's causes and timeline", s))
			var causes []kair.RootCause
			found := false
			for _, x := range rep.StepReports {
				if x.Step == s {
					causes, found = x.RootCauses, true
				}
			}
			if !found {
				t.Fatalf("no step report for analysed step %d", s)
			}
			if got := p.count("#kair tr.kr-cause"); got != len(causes) {
				t.Errorf("step %d: %d causes shown, the engine has %d", s, got, len(causes))
			}
			if len(causes) > 0 {
				want := len(causes[0].Evidence)
				if got := p.count(`#kair .kr-chain-box[data-cause="0"] .kr-link`); got != want {
					t.Errorf("step %d: chain of %d links, the engine's evidence has %d", s, got, want)
				}
			}
		}
		p.shotOf("#kair", "kair-engine.png")
	})

	t.Run("a capture without step numbers is analysed whole", func(t *testing.T) {
		rep := w["telemetry-limited"].Reports["ce0e0e0e0e0e0"]
		if !slices.Equal(rep.Analysed, []int64{-1}) {
			t.Fatalf("the engine analysed %v, want the whole capture [-1]", rep.Analysed)
		}
		p := tab(t, "#/jobs/telemetry-limited")
		kairSection(p)
		p.wait(`document.querySelector('#kair canvas.kr-tl-canvas[data-step="-1"]')`, "the whole capture's timeline")
		if got := p.text(`#kair .kr-steps button.on`); got != "whole capture" {
			t.Errorf("step button %q", got)
		}
		reqs := k.requests("GET /api/v1/jobs/telemetry-limited/kair/timeline")
		if len(reqs) == 0 || strings.Contains(reqs[0], "step=") {
			t.Errorf("timeline requests %v: want one without a step", reqs)
		}
	})

	t.Run("empty and waiting states", func(t *testing.T) {
		p := tab(t, "#/jobs/relief")
		kairSection(p)
		if got := p.text("#kair .kr-empty"); got != "No captures yet — Capture now, or the server triggers one when a straggler appears." {
			t.Errorf("empty state %q", got)
		}
		if p.count("#kair .kr-headline, #kair .kr-noreport") != 0 {
			t.Error("a report area without a capture")
		}
		p = tab(t, "#/jobs/few-steps")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-noreport[data-state="recording"]')`, "the recording capture")
		if got := p.text("#kair .kr-wait"); !strings.Contains(got, "recording: 1 of 4 ranks uploaded") {
			t.Errorf("recording line %q", got)
		}
		if got := p.text("#kair .kr-api-said"); !strings.Contains(got, "1 of 4 ranks uploaded a trace") {
			t.Errorf("API text %q", got)
		}
		// The ranks finish uploading: an auto-refresh (here: turning it
		// off and on, which refreshes at once) shows the report.
		k.mu.Lock()
		j, src := w["few-steps"], w["data-straggler-8"]
		c := j.Captures[0]
		c.Fetched, c.Uploaded, c.State = kfInts(0, 4), kfInts(0, 4), "complete"
		j.Reports = map[string]*kfReport{c.ID: src.Reports["c3f1a9e2b4d70"]}
		j.Timelines = map[string]map[int64]*kfTimeline{c.ID: src.Timelines["c3f1a9e2b4d70"]}
		k.mu.Unlock()
		p.eval(`(() => { const a = document.getElementById('autorefresh'); a.checked = false; a.dispatchEvent(new Event('change')); a.checked = true; a.dispatchEvent(new Event('change')); })()`, nil)
		p.wait(`document.querySelector('#kair .kr-headline') && document.querySelector('#kair tr.kr-cap[data-state="complete"]')`, "the finished capture's report after a refresh")
		if got := p.text(`#kair tr.kr-cap .kr-uploads`); got != "4 / 4" {
			t.Errorf("uploads after the refresh %q", got)
		}
		if p.count("#kair .kr-noreport") != 0 {
			t.Error("the waiting card stayed after the report arrived")
		}

		p = tab(t, "#/jobs/absorbed-backward")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-noreport[data-state="pending"]')`, "the pending capture")
		if got := p.text("#kair .kr-wait"); !strings.Contains(got, "pending: 0 of 8 ranks picked the plan up; recording starts at step 230") {
			t.Errorf("pending line %q", got)
		}
	})

	t.Run("Capture now posts, shows the new capture, then the API's refusal", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		kairSection(p)
		p.wait(`document.querySelector('#kair .kr-capture-now')`, "the button")
		p.eval(`document.querySelector('#kair input.kr-reason').value = 'checking <b>rank</b> 2'`, nil)
		before := len(k.requests("POST "))
		p.click("#kair .kr-capture-now")
		p.wait(`document.querySelector('#kair .kr-post-ok')`, "the created capture")
		if n := len(k.requests("POST /api/v1/jobs/data-straggler-8/captures")) - before; n != 1 {
			t.Fatalf("%d POSTs, want 1", n)
		}
		p.wait(`new URLSearchParams(location.hash.split('?')[1] || '').get('kair_capture') === 'c000000feed01'`, "the new capture in the URL")
		p.wait(`document.querySelector('#kair tr.kr-cap.selected[data-id="c000000feed01"]')`, "the new capture listed and selected")
		if got := p.text(`#kair tr.kr-cap.selected .kr-cap-reason`); got != "checking <b>rank</b> 2" {
			t.Errorf("new capture reason %q", got)
		}
		if got := p.text("#kair .kr-post-ok"); !strings.Contains(got, "Created capture c000000feed01: pending, 8 ranks asked, 5 steps from step 250") {
			t.Errorf("post status %q", got)
		}
		p.wait(`document.querySelector('#kair .kr-noreport[data-state="pending"]')`, "the pending capture's state")
		// A second capture while this one is open: the server's 409, shown.
		p.click("#kair .kr-capture-now")
		p.wait(`document.querySelector('#kair .kr-post-error')`, "the refusal")
		if got := p.text("#kair .kr-post-error"); !strings.Contains(got, "capture c000000feed01 (pending) is open until") || !strings.Contains(got, "HTTP 409") {
			t.Errorf("refusal %q", got)
		}
		if n := p.count("#kair tr.kr-cap"); n != 3 {
			t.Errorf("%d captures listed, want 3", n)
		}
	})

	t.Run("a server without KAIR routes leaves the section out", func(t *testing.T) {
		// The plain fake answers 404 for every KAIR route.
		srv2 := httptest.NewServer(k.f.mux())
		t.Cleanup(srv2.Close)
		p := browser{ctx: bctx, base: srv2.URL, dir: shotDir(t)}.open(t, "#/jobs/data-straggler-8")
		p.wait(`document.querySelector('.headline-text')`, "the headline")
		p.idle()
		if p.count("#kair") != 0 {
			t.Error("a KAIR section without KAIR routes")
		}
	})
}
