package ui

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/laggard-dev/laggard/internal/api"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal"
)

// incidentFake serves the incident read routes of i17-plan.md (GET
// /api/v1/incidents?job&state&since&limit&evidence, GET
// /api/v1/incidents/{id}, GET /api/v1/hosts?since) from
// testdata/incidents/, in front of the SysOM, KAIR and stage/Greyhound
// fakes so that every view an incident links to answers. Until the real
// routes land (branches i17-api, i17-control) it answers as the plan
// says: newest first, evidence only in the single view or with
// ?evidence=1, errors in the API's shape naming the field.
type incidentFake struct {
	incs  []incident.Incident // newest first
	hosts []incident.HostRow  // all time
	sysom *sysomFake
	kair  *kairFake
}

func newIncidentFake(t testing.TB) *incidentFake {
	t.Helper()
	f := &incidentFake{sysom: newSysomFake(t), kair: &kairFake{f: newFakeAPI(t), w: kairWorld(false)}}
	paths, err := filepath.Glob(filepath.Join("testdata", "incidents", "inc-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	strict := func(p string, v any) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %v (run go test ./internal/ui -run TestIncidentFixtures -update)", p, err)
		}
	}
	for _, p := range paths {
		var inc incident.Incident
		strict(p, &inc)
		f.incs = append(f.incs, inc)
	}
	if len(f.incs) != 6 {
		t.Fatalf("%d incidents in testdata/incidents, want 6", len(f.incs))
	}
	for _, inc := range f.incs {
		if err := inc.Check(); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortStableFunc(f.incs, func(a, b incident.Incident) int { return cmp.Compare(b.Opened.WallNS, a.Opened.WallNS) })
	var hosts struct {
		Hosts []incident.HostRow `json:"hosts"`
	}
	strict(filepath.Join("testdata", "incidents", "hosts.json"), &hosts)
	f.hosts = hosts.Hosts
	return f
}

// sinceQuery reads a time the way the API does (internal/api, i17-api):
// Unix nanoseconds (0: the beginning), an RFC 3339 time, or a duration
// back from now (90m, 24h, 7d) — now being the fixtures' clock; def when
// absent.
func sinceQuery(q url.Values, name string, def int64) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UnixNano(), nil
	}
	d, err := time.ParseDuration(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, e := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, e
	}
	if err != nil || d <= 0 {
		return 0, signal.FieldErrorf(name, "want an RFC 3339 time, a duration back from now (90m, 24h, 7d) or Unix nanoseconds, got %q", signal.Clip(v))
	}
	return incNow.Add(-d).UnixNano(), nil
}

func (f *incidentFake) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/incidents", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		state := incident.State(q.Get("state"))
		switch state {
		case "", incident.StateOpen, incident.StateRecovering, incident.StateResolved:
		default:
			fail(w, signal.FieldErrorf("state", "must be open, recovering or resolved, got %q", signal.Clip(string(state))))
			return
		}
		since, err := sinceQuery(q, "since", 0)
		if err != nil {
			fail(w, err)
			return
		}
		limit := 100
		if v := q.Get("limit"); v != "" {
			if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 5000 {
				fail(w, signal.FieldErrorf("limit", "must be an integer in [1, 5000], got %q", signal.Clip(v)))
				return
			}
		}
		out := []incident.Incident{}
		truncated := false
		for _, inc := range f.incs {
			// since: the incidents updated at or after it.
			if (q.Get("job") != "" && inc.Job != q.Get("job")) || (state != "" && inc.State != state) || inc.Updated.WallNS < since {
				continue
			}
			if len(out) == limit {
				truncated = true
				break
			}
			if ev := q.Get("evidence"); ev != "1" && ev != "true" {
				inc.Evidence = nil
			}
			out = append(out, inc)
		}
		writeJSON(w, http.StatusOK, map[string]any{"incidents": out, "truncated": truncated})
	})
	mux.HandleFunc("GET /api/v1/incidents/{id}", func(w http.ResponseWriter, r *http.Request) {
		for _, inc := range f.incs {
			if inc.ID == r.PathValue("id") {
				writeJSON(w, http.StatusOK, inc)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, api.ErrorBody{Error: fmt.Sprintf("unknown incident %q", signal.Clip(r.PathValue("id")))})
	})
	// The fleet over a period (the API's default: the last 7 days; all
	// time is hosts.json), ranked by internal/incident's Fleet.
	mux.HandleFunc("GET /api/v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		since, err := sinceQuery(r.URL.Query(), "since", incNow.Add(-7*24*time.Hour).UnixNano())
		if err != nil {
			fail(w, err)
			return
		}
		rows := f.hosts
		if since > 0 {
			rows = incident.Fleet(f.incs, since, incNow.UnixNano())
		}
		writeJSON(w, http.StatusOK, map[string]any{"hosts": rows, "from_ns": since, "to_ns": incNow.UnixNano()})
	})
	sy := f.sysom.mux()
	for _, p := range []string{"sysom", "flamegraph", "flamegraph/diff", "osstats"} {
		mux.Handle("GET /api/v1/jobs/{id}/"+p, sy)
	}
	// The KAIR routes, and behind them the stage and Greyhound fake and the UI.
	mux.Handle("/", f.kair.mux())
	return mux
}

// The fake answers the plan's routes and errors, and every view link an
// incident carries is a route the server answers.
func TestIncidentFakeAPI(t *testing.T) {
	f := newIncidentFake(t)
	h := f.mux()
	get := func(path string) (int, []byte) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.Bytes()
	}
	list := func(path string) []incident.Incident {
		t.Helper()
		code, b := get(path)
		var body struct {
			Incidents []incident.Incident `json:"incidents"`
		}
		if err := json.Unmarshal(b, &body); err != nil || code != 200 {
			t.Fatalf("%s: %d %v %s", path, code, err, b)
		}
		return body.Incidents
	}
	if all := list("/api/v1/incidents"); len(all) != 6 || all[0].Opened.WallNS < all[5].Opened.WallNS || all[0].Evidence != nil {
		t.Errorf("list: %d incidents, want 6 newest first without evidence", len(all))
	}
	if open := list("/api/v1/incidents?state=open"); len(open) != 5 {
		t.Errorf("%d open, want 5", len(open))
	}
	if j := list("/api/v1/incidents?job=relief&evidence=1"); len(j) != 1 || j[0].ID != incRelief || len(j[0].Evidence) == 0 {
		t.Errorf("relief's incidents %+v", j)
	}
	hourAgo := incNow.Add(-3600e9).UnixNano()
	if r := list(fmt.Sprintf("/api/v1/incidents?state=resolved&since=%d", hourAgo)); len(r) != 0 {
		t.Errorf("resolved in the last hour: %d, want 0", len(r))
	}
	if r := list("/api/v1/incidents?state=resolved&since=24h"); len(r) != 1 {
		t.Errorf("resolved in the last day: %d, want 1", len(r))
	}
	for path, want := range map[string][2]any{
		"/api/v1/incidents?state=closed":    {400.0, "state"},
		"/api/v1/incidents?since=yesterday": {400.0, "since"},
		"/api/v1/incidents/nope":            {404.0, nil},
		"/api/v1/hosts?since=-1":            {400.0, "since"},
	} {
		code, b := get(path)
		var body map[string]any
		if err := json.Unmarshal(b, &body); err != nil || float64(code) != want[0] || body["field"] != want[1] || body["error"] == "" {
			t.Errorf("%s: %d %s, want %v", path, code, b, want)
		}
	}
	for _, since := range []string{strconv.FormatInt(hourAgo, 10), "1h", incNow.Add(-3600e9).Format(time.RFC3339)} {
		code, b := get("/api/v1/hosts?since=" + since)
		if !bytes.Contains(b, []byte(`"target":"host:node-000","host":"node-000","incidents":2`)) || code != 200 {
			t.Errorf("the last hour's fleet (since=%s): %d %s, want node-000 with two incidents", since, code, b)
		}
	}
	// Every view link is a route that takes its window (the report is
	// analysed on it, the SysOM windows are parsed as the server parses
	// them); a job the fake has no data of for that engine answers 404.
	for _, inc := range f.incs {
		if code, b := get("/api/v1/incidents/" + inc.ID); code != 200 || !bytes.Contains(b, []byte(`"view":`)) {
			t.Errorf("%s: %d", inc.ID, code)
		}
		for _, e := range inc.Evidence {
			code, b := get(e.View)
			if code != 200 && (code != 404 || bytes.Contains(b, []byte("no API route"))) {
				t.Errorf("%s evidence %s: view %s answers %d %.200s", inc.ID, e.ID, e.View, code, b)
			}
		}
	}
	// A link may name the incident's launch; a job launched once has #0.
	if code, b := get("/api/v1/jobs/data-straggler-8/report?from=140&to=239&ref_from=3&ref_to=139&incarnation=0"); code != 200 {
		t.Errorf("report of launch #0: %d %.300s", code, b)
	}
}

// clockAt pins the page's Date.now to ns (the fixtures' server clock),
// running on from there, before any script of the page runs.
func clockAt(ns int64) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const t0 = %d, real = Date.now, start = real(); Date.now = () => t0 + (real() - start); })();`, ns/1e6)
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{Source: js})
		return err
	})
}

// hrefParams is the query of a link's hash route.
func hrefParams(t *testing.T, href string) (string, url.Values) {
	t.Helper()
	path, q, _ := strings.Cut(strings.TrimPrefix(href, "#"), "?")
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatalf("href %q: %v", href, err)
	}
	return path, v
}

// nearNS: a nanosecond time the page read from JSON is a JavaScript
// number (a double: 256 ns apart at today's epoch), so the page's copy is
// within a microsecond of the server's — nothing at the engines' scale.
func nearNS(got string, want int64) bool {
	n, err := strconv.ParseInt(got, 10, 64)
	return err == nil && n-want <= 1000 && want-n <= 1000
}

// resources are the URLs the page fetched whose path contains sub.
func (p *page) resources(sub string) []string {
	p.t.Helper()
	var out []string
	p.eval(fmt.Sprintf(`performance.getEntriesByType('resource').map((e) => e.name).filter((n) => n.includes(%q))`, sub), &out)
	return out
}

func TestBrowserIncidents(t *testing.T) {
	bctx := startBrowser(t)
	f := newIncidentFake(t)
	srv := httptest.NewServer(f.mux())
	t.Cleanup(srv.Close)
	b := browser{ctx: bctx, base: srv.URL, dir: shotDir(t)}
	tab := func(t *testing.T, hash string) *page { return b.openWith(t, hash, clockAt(incNow.UnixNano())) }
	byID := map[string]incident.Incident{}
	for _, inc := range f.incs {
		byID[inc.ID] = inc
	}
	ds8 := byID[incDS8]
	wantSpan := func(t *testing.T, p *page, sel string, from, to int64) {
		t.Helper()
		if got := p.str(`document.querySelector('` + sel + `').dataset.from`); !nearNS(got, from) {
			t.Errorf("%s starts at %s, want %d", sel, got, from)
		}
		if got := p.str(`document.querySelector('` + sel + `').dataset.to`); !nearNS(got, to) {
			t.Errorf("%s ends at %s, want %d", sel, got, to)
		}
	}

	t.Run("open incident with a stated cause: headline, chain, timeline, links", func(t *testing.T) {
		p := tab(t, "#/incidents/"+incDS8)
		p.wait(`document.querySelector('.inc-summary .inc-headline')`, "the incident headline")
		p.idle()
		if got := p.text(".inc-summary .inc-headline"); got != ds8.Headline {
			t.Errorf("headline\n got %q\nwant %q", got, ds8.Headline)
		}
		if got := p.text(".inc-head .inc-state"); got != "open" {
			t.Errorf("state %q", got)
		}
		if got := p.text(".inc-summary .inc-lost"); !strings.Contains(got, "8.7 s of training time") || !strings.Contains(got, "across all ranks") || !strings.Contains(got, "100 slow steps") {
			t.Errorf("lost time %q", got)
		}
		if got := p.text(".inc-summary .inc-since"); !strings.Contains(got, "2026-03-14 14:59:04 UTC") || !strings.Contains(got, "step 140") {
			t.Errorf("since %q", got)
		}
		if got := p.text(".inc-summary .inc-conf"); got != "high confidence" {
			t.Errorf("confidence %q", got)
		}
		if got := p.text(".inc-summary .inc-cause"); got != "rank 2 on node-000" {
			t.Errorf("cause %q", got)
		}
		// No paper notation in the headline card.
		for _, term := range []string{"BOCD", "S_A", "§", "waterline", "frontier"} {
			if strings.Contains(p.text(".inc-summary"), term) {
				t.Errorf("the summary uses the paper term %q", term)
			}
		}
		// The chain, top down: one row per layer, with its engine, text,
		// reason and confidence.
		chain := ds8.Hypotheses[0].Chain
		rows := `.inc-chain-block[data-target="rank:2"] .inc-chain-row`
		if n := p.count(rows); n != len(chain) {
			t.Fatalf("%d chain rows, want %d", n, len(chain))
		}
		var layers, engs []string
		p.eval(`[...document.querySelectorAll('`+rows+`')].map((r) => r.dataset.layer)`, &layers)
		p.eval(`[...document.querySelectorAll('`+rows+`')].map((r) => r.dataset.engine)`, &engs)
		for i, l := range chain {
			if layers[i] != string(l.Layer) || engs[i] != string(l.Engine) {
				t.Errorf("chain row %d: %s by %s, want %s by %s", i, layers[i], engs[i], l.Layer, l.Engine)
			}
			row := p.text(fmt.Sprintf(`%s:nth-child(%d)`, rows, i+1))
			if !strings.Contains(row, l.Text) || !strings.Contains(row, l.Reason) || !strings.Contains(row, "high confidence") {
				t.Errorf("chain row %d %q lacks its text, reason or confidence", i, row)
			}
		}
		// The timeline: every piece of evidence and every action a marker,
		// the onset marked, the windows shaded where they are.
		p.wait(`document.querySelector('svg.inc-timeline')`, "the timeline")
		if n := p.count("svg.inc-timeline g.inc-ev"); n != len(ds8.Evidence) {
			t.Errorf("%d evidence markers, want %d", n, len(ds8.Evidence))
		}
		for _, e := range ds8.Evidence {
			if p.count(fmt.Sprintf(`svg.inc-timeline g.inc-ev[data-evidence=%q][data-engine=%q]`, e.ID, e.Engine)) != 1 {
				t.Errorf("no marker for %s", e.ID)
			}
		}
		if n := p.count("svg.inc-timeline g.inc-act"); n != len(ds8.Audit) {
			t.Errorf("%d action markers, want %d", n, len(ds8.Audit))
		}
		if got := p.text(`svg.inc-timeline g.cp.onset[data-step="140"]`); !strings.Contains(got, "slowed at step 140") || !strings.Contains(got, "133 ms → 220 ms") {
			t.Errorf("onset mark %q", got)
		}
		wantSpan(t, p, "svg.inc-timeline .inc-win.win-before", ds8.Windows.Before.FromNS, ds8.Windows.Before.ToNS)
		wantSpan(t, p, "svg.inc-timeline .inc-win.win-during", ds8.Windows.During.FromNS, ds8.Windows.During.ToNS)
		if n := p.count("svg.inc-timeline .inc-lane"); n != 5 {
			t.Errorf("%d lanes, want 4 engines and the actions", n)
		}
		// Hover: the finding's text.
		kair := ds8.Evidence[len(ds8.Evidence)-1]
		if got := p.hoverAt(fmt.Sprintf(`svg.inc-timeline g.inc-ev[data-evidence=%q]`, kair.ID), 5, 5); !strings.Contains(got, kair.Text) || !strings.Contains(got, "KAIR") {
			t.Errorf("marker tooltip %q lacks %q", got, kair.Text)
		}
		shotOf(p, "svg.inc-timeline", "incident-timeline.png")
		// Hypotheses side by side: the stated one and its weak rival with
		// the evidence against it.
		if n := p.count(".inc-hyp"); n != 2 {
			t.Errorf("%d hypotheses, want 2", n)
		}
		if got := p.text(`.inc-hyp[data-target="rank:3"] .inc-ev-list.against`); !strings.Contains(got, "Rank 2 enters the data-parallel all-reduce last") {
			t.Errorf("rank 3's evidence against %q", got)
		}
		if p.str(`document.querySelector('.inc-hyp[data-target="rank:2"]').dataset.stated`) != "true" {
			t.Error("rank 2 is not marked stated")
		}
		// Recommendations, waiting, audit, related.
		if n := p.count(".inc-recs li"); n != len(ds8.Recommendations) {
			t.Errorf("%d recommendations", n)
		}
		if got := p.text(".inc-waiting-none"); !strings.Contains(got, "every engine that can answer has answered") {
			t.Errorf("waiting %q", got)
		}
		if n := p.count("table.inc-audit tbody tr"); n != len(ds8.Audit) {
			t.Errorf("%d audit rows", n)
		}
		if got := p.text(".inc-related"); !strings.Contains(got, "host node-000 was also the cause in job relief") || p.count(".inc-related li") != len(ds8.Related) {
			t.Errorf("related %q", got)
		}
		// The links into the engine views carry the incident's windows.
		w := ds8.Windows
		links := map[string]url.Values{}
		for _, s := range []string{"stage", "greyhound", "sysom", "kair"} {
			path, q := hrefParams(t, p.str(fmt.Sprintf(`document.querySelector('.inc-views a[data-section=%q]').getAttribute('href')`, s)))
			if path != "/jobs/data-straggler-8" || q.Get("section") != s {
				t.Errorf("%s link goes to %s?%s", s, path, q.Encode())
			}
			links[s] = q
		}
		for s, want := range map[string]map[string]string{
			"stage": {"from": "140", "to": "239", "ref_from": "3", "ref_to": "139", "incarnation": "0"},
			"kair":  {"kair_capture": kairCapDS8},
		} {
			for k, v := range want {
				if got := links[s].Get(k); got != v {
					t.Errorf("%s link %s=%q, want %q", s, k, got, v)
				}
			}
		}
		for s, want := range map[string]map[string]int64{
			"greyhound": {"gh_from_ns": w.Before.FromNS, "gh_to_ns": w.During.ToNS},
			"sysom":     {"sy_from_ns": w.During.FromNS, "sy_to_ns": w.During.ToNS, "sy_base_from_ns": w.Before.FromNS, "sy_base_to_ns": w.Before.ToNS},
		} {
			for k, v := range want {
				if got := links[s].Get(k); !nearNS(got, v) {
					t.Errorf("%s link %s=%q, want %d", s, k, got, v)
				}
			}
		}
		// Each piece of evidence opens its own view with its window.
		if n := p.count("table.inc-evidence tbody tr"); n != len(ds8.Evidence) {
			t.Errorf("%d evidence rows, want %d", n, len(ds8.Evidence))
		}
		for _, e := range ds8.Evidence {
			href := p.str(fmt.Sprintf(`document.querySelector('table.inc-evidence tr[data-evidence=%q] a.inc-ev-view').getAttribute('href')`, e.ID))
			_, q := hrefParams(t, href)
			_, api, _ := strings.Cut(e.View, "?")
			av, _ := url.ParseQuery(api)
			switch {
			case strings.Contains(e.View, "/flamegraph/diff"):
				if q.Get("df_a") != av.Get("a_rank") || q.Get("df_b") != av.Get("b_rank") || q.Get("sy_from_ns") != av.Get("from_ns") || q.Get("df_mode") != "peer" {
					t.Errorf("%s: %s does not carry %s", e.ID, href, e.View)
				}
			case strings.Contains(e.View, "/sysom"):
				if q.Get("sy_from_ns") != av.Get("from_ns") || q.Get("sy_base_to_ns") != av.Get("base_to_ns") {
					t.Errorf("%s: %s does not carry %s", e.ID, href, e.View)
				}
			case strings.Contains(e.View, "/greyhound"):
				if q.Get("gh_from_ns") != av.Get("from_ns") || q.Get("gh_to_ns") != av.Get("to_ns") {
					t.Errorf("%s: %s does not carry %s", e.ID, href, e.View)
				}
			case strings.Contains(e.View, "/kair"):
				if q.Get("kair_capture") != av.Get("capture") {
					t.Errorf("%s: %s does not carry %s", e.ID, href, e.View)
				}
			default:
				if q.Get("from") != av.Get("from") || q.Get("ref_to") != av.Get("ref_to") {
					t.Errorf("%s: %s does not carry %s", e.ID, href, e.View)
				}
			}
		}
		p.shot("incident-open.png")

		// Follow the links: each view reads the window it was given.
		p.click(`.inc-views a[data-section="greyhound"]`)
		p.wait(`document.querySelector('#greyhound .gh-window')`, "the Greyhound section on the incident's window")
		p.idle()
		asked := func(uris []string, want map[string]int64) bool {
			return slices.ContainsFunc(uris, func(u string) bool {
				_, q, _ := strings.Cut(u, "?")
				v, _ := url.ParseQuery(q)
				for k, ns := range want {
					if !nearNS(v.Get(k), ns) {
						return false
					}
				}
				return true
			})
		}
		if !asked(p.resources("/greyhound?"), map[string]int64{"from_ns": w.Before.FromNS, "to_ns": w.During.ToNS}) {
			t.Errorf("the Greyhound report was not asked for the incident's window: %v", p.resources("/greyhound"))
		}
		if p.count(`#incidents[data-incident="`+incDS8+`"]`) != 1 {
			t.Error("the job page does not open on its incident")
		}
		p.click(`#greyhound .gh-window button`)
		p.waitParam("gh_from_ns", "")
		p.back()
		p.back()
		p.wait(`document.querySelector('.inc-views')`, "the incident page again")
		p.click(`.inc-views a[data-section="sysom"]`)
		p.wait(`document.querySelector('#sysom .sy-window')`, "the CPU profiles on the incident's window")
		p.idle()
		if got := f.sysom.requests("/api/v1/jobs/data-straggler-8/sysom"); !asked(got, map[string]int64{"from_ns": w.During.FromNS, "to_ns": w.During.ToNS,
			"base_from_ns": w.Before.FromNS, "base_to_ns": w.Before.ToNS}) {
			t.Errorf("SysOM asked %v, want the incident's window against the one before", got)
		}
		p.back()
		p.wait(`document.querySelector('.inc-views')`, "the incident page again")
		p.click(`.inc-views a[data-section="kair"]`)
		p.wait(`document.querySelector('#kair')`, "the KAIR section")
		p.idle()
		if got := f.kair.requests("kair?capture=" + kairCapDS8); len(got) == 0 {
			t.Errorf("the capture %s was not read", kairCapDS8)
		}
	})

	t.Run("competing hypotheses and a contradiction: no cause stated", func(t *testing.T) {
		tie := byID[incTie]
		p := tab(t, "#/incidents/"+incTie)
		p.wait(`document.querySelector('.inc-hyps')`, "the hypotheses")
		if got := p.text(".inc-summary .inc-headline"); got != tie.Headline {
			t.Errorf("headline %q", got)
		}
		if got := p.text(".inc-summary .inc-cause"); got != "not stated: 2 competing suspects" {
			t.Errorf("cause %q", got)
		}
		if got := p.text(".inc-summary .inc-conf"); got != "low confidence" {
			t.Errorf("confidence %q", got)
		}
		for _, sel := range []string{".inc-summary .inc-contradiction", ".inc-contradictions"} {
			if got := p.text(sel); !strings.Contains(got, tie.Contradictions[0]) {
				t.Errorf("%s %q lacks the contradiction", sel, got)
			}
		}
		for _, h := range tie.Hypotheses {
			sel := fmt.Sprintf(`.inc-hyp[data-target=%q]`, h.Target.Key())
			if p.count(sel+`[data-stated="false"]`) != 1 {
				t.Errorf("hypothesis %s not shown as not stated", h.Target.Key())
			}
			if got := p.text(sel); !strings.Contains(got, h.Reason) || !strings.Contains(got, fmt.Sprintf("Against (%d)", len(h.Against))) {
				t.Errorf("hypothesis %s: %q", h.Target.Key(), got)
			}
		}
		if got := p.text(`.inc-hyp[data-target="rank:1"] .inc-ev-list.against`); !strings.Contains(got, "Greyhound") || !strings.Contains(got, "Rank 3 enters") {
			t.Errorf("against rank 1: %q", got)
		}
		if got := p.text(".inc-chain-title"); !strings.Contains(got, "Not stated") {
			t.Errorf("chain title %q: a suspect shown as the cause", got)
		}
		if n := p.count(`.inc-waiting li[data-asked="false"]`); n != 1 || p.count(".inc-waiting li") != 2 {
			t.Errorf("waiting: %d not asked of %d", n, p.count(".inc-waiting li"))
		}
		if got := p.text(`.inc-waiting li[data-kind="sysom_profile"]`); !strings.Contains(got, "CPU profile window of ranks 3, 0") || !strings.Contains(got, "not asked yet") {
			t.Errorf("waiting row %q", got)
		}
		if p.count("svg.inc-timeline g.inc-ev.conf-withheld") != 2 {
			t.Error("the withheld findings are not drawn as such")
		}
		p.shot("incident-contradiction.png")
	})

	t.Run("resolved, uniform and absorbed incidents", func(t *testing.T) {
		rel := byID[incRelief]
		p := tab(t, "#/incidents/"+incRelief)
		p.wait(`document.querySelector('svg.inc-timeline g.cp.relief[data-step="120"]')`, "the relief mark at step 120")
		if got := p.text(".inc-head .inc-state"); got != "resolved" {
			t.Errorf("state %q", got)
		}
		wantSpan(t, p, "svg.inc-timeline .inc-win.win-after", rel.Windows.After.FromNS, rel.Windows.After.ToNS)
		if got := p.text(".inc-summary"); !strings.Contains(got, "until ") || !strings.Contains(got, "(step 120)") {
			t.Errorf("resolved summary %q", got)
		}
		if got := p.text(".inc-waiting-none"); got != "Nothing: the incident is closed." {
			t.Errorf("waiting %q", got)
		}
		if got := p.text(`table.inc-audit tr[data-result="failed"]`); !strings.Contains(got, "expired") {
			t.Errorf("failed action %q", got)
		}
		p.shot("incident-resolved.png")

		u := byID[incUniform]
		p = tab(t, "#/incidents/"+incUniform)
		p.wait(`document.querySelector('.inc-chain-row')`, "the chain")
		if got := p.text(".inc-summary .inc-cause"); got != "every rank alike" {
			t.Errorf("uniform cause %q", got)
		}
		if got := p.text(".inc-summary .inc-scope"); got != "the whole job" {
			t.Errorf("uniform scope %q", got)
		}
		var layers []string
		p.eval(`[...document.querySelectorAll('.inc-chain-row')].map((r) => r.dataset.layer)`, &layers)
		if !slices.Equal(layers, []string{"stage", "gpu"}) {
			t.Errorf("uniform chain %v", layers)
		}
		if got := p.text(".inc-summary .inc-headline"); got != u.Headline || strings.Contains(got, "rank 2") {
			t.Errorf("uniform headline %q", got)
		}
		p.shot("incident-uniform.png")

		p = tab(t, "#/incidents/"+incAbsorbed)
		p.wait(`document.querySelector('.inc-chain-row')`, "the chain")
		if got := p.text(".inc-summary .inc-cause"); got != "the link from rank 4 to rank 5" {
			t.Errorf("absorbed cause %q", got)
		}
		if got := p.str(`document.querySelector('.inc-chain-row').className`); !strings.Contains(got, "conf-withheld") {
			t.Errorf("the stage row is not the withheld one: %q", got)
		}
		if got := p.text(`.inc-chain-row[data-layer="stage"]`); !strings.Contains(got, "withheld") || !strings.Contains(got, "No rank named in the backward pass") {
			t.Errorf("stage row %q", got)
		}
	})

	t.Run("the job page opens on its incidents", func(t *testing.T) {
		p := tab(t, "#/jobs/data-straggler-8")
		p.wait(`document.querySelector('#incidents .inc-headline')`, "the incident card")
		p.wait(`document.querySelector('#greyhound')`, "the engine sections below")
		if got := p.str(`document.querySelector('main > .jobhead').nextElementSibling.id`); got != "incidents" {
			t.Errorf("the first section after the title is %q, want the incidents", got)
		}
		if got := p.text("#incidents .inc-headline"); got != ds8.Headline {
			t.Errorf("card headline %q", got)
		}
		if n := p.count("#incidents .inc-chain-row"); n != len(ds8.Hypotheses[0].Chain) {
			t.Errorf("%d chain rows on the card", n)
		}
		if got := p.str(`document.querySelector('#incidents a.inc-open').getAttribute('href')`); got != "#/incidents/"+incDS8 {
			t.Errorf("open link %q", got)
		}
		// The engine sections stay, below the card.
		var order []string
		p.eval(`[...document.querySelectorAll('#incidents, #headline, #greyhound, #sysom, #kair')].map((n) => n.id)`, &order)
		if len(order) != 5 || order[0] != "incidents" {
			t.Errorf("sections in order %v", order)
		}
		p.shot("job-incident.png")

		p = tab(t, "#/jobs/relief")
		p.wait(`document.querySelector('#incidents .inc-headline')`, "the incident card")
		if got := p.text("#incidents .inc-current-top"); !strings.Contains(got, "resolved") || !strings.Contains(got, "the latest incident") {
			t.Errorf("relief card %q", got)
		}
		if p.count(`#incidents table.inc-table tr[data-incident="`+incRelief+`"]`) != 1 {
			t.Error("the relief incident is not listed")
		}
		p = tab(t, "#/jobs/baseline-8")
		p.wait(`document.querySelector('#incidents.inc-none')`, "the no-incident card")
		p.click(`.views a[data-view="cluster"]`)
		p.wait(`location.hash === '#/cluster'`, "the cluster page")
	})

	t.Run("cluster: open incidents and the fleet over a period", func(t *testing.T) {
		p := tab(t, "#/cluster")
		p.wait(`document.querySelector('table.inc-open-table')`, "the open incidents")
		p.wait(`document.querySelector('table.fleet')`, "the fleet view")
		var open []string
		p.eval(`[...document.querySelectorAll('table.inc-open-table tbody tr')].map((r) => r.dataset.incident)`, &open)
		want := []string{}
		for _, inc := range f.incs {
			if inc.State == incident.StateOpen {
				want = append(want, inc.ID)
			}
		}
		if !slices.Equal(open, want) {
			t.Errorf("open incidents %v, want %v (newest first)", open, want)
		}
		row := p.text(`table.inc-open-table tr[data-incident="` + incDS8 + `"]`)
		for _, s := range []string{"data-straggler-8", "open", "rank 2 on node-000", "8.7 s", "high confidence", "operating system"} {
			if !strings.Contains(row, s) {
				t.Errorf("ds8 row %q lacks %q", row, s)
			}
		}
		if got := p.text(`table.inc-open-table tr[data-incident="` + incTie + `"]`); !strings.Contains(got, "not stated") || !strings.Contains(got, "low confidence") {
			t.Errorf("tie row %q", got)
		}
		// Last 24 h (default): node-000 in three jobs' incidents, node-080 once.
		if got := p.text(`table.fleet tr[data-target="host:node-000"] .fleet-count`); got != "3" {
			t.Errorf("node-000 in %s incidents over 24 h, want 3", got)
		}
		if got := p.text(`table.fleet tr[data-target="host:node-000"]`); !strings.Contains(got, "absorbed-backward, data-straggler-8, relief") || !strings.Contains(got, "3 jobs") {
			t.Errorf("node-000 row %q", got)
		}
		if got := p.str(`document.querySelector('table.fleet tbody tr:nth-child(2)').dataset.target`); got != "host:node-080" {
			t.Errorf("second fleet row %q, want host:node-080", got)
		}
		if p.count(`table.inc-resolved-table tr[data-incident="`+incRelief+`"]`) != 1 {
			t.Error("the relief incident is not among the resolved")
		}
		p.shot("cluster.png")
		// The last hour: the relief incident falls out.
		p.click(`button[data-period="1h"]`)
		p.waitParam("period", "1h")
		p.wait(`(document.querySelector('table.fleet tr[data-target="host:node-000"] .fleet-count') || {}).textContent === '2'`, "node-000 twice in the last hour")
		if p.count(`table.inc-resolved-table`) != 0 {
			t.Error("resolved incidents listed for the last hour")
		}
		if got := p.resources("/api/v1/hosts?since="); !slices.ContainsFunc(got, func(r string) bool { return strings.HasSuffix(r, "/api/v1/hosts?since=1h") }) {
			t.Errorf("hosts asked %v, want since=1h (the server's clock)", got)
		}
		// By the time lost across all ranks: the 1,024-rank job's host first.
		p.click(`button[data-fsort="ranks"]`)
		p.waitParam("fsort", "ranks")
		p.wait(`(document.querySelector('table.fleet tbody tr') || {dataset: {}}).dataset.target === 'host:node-080'`, "the costliest in rank time first")
		p.shot("cluster-1h.png")
		// The job list shows each job's open incident.
		p = tab(t, "#/")
		p.wait(`document.querySelector('tr[data-job="data-straggler-8"] td.incident .inc-state')`, "the incident column")
		if got := p.text(`tr[data-job="tie"] td.incident`); !strings.Contains(got, "open") || !strings.Contains(got, "not stated") {
			t.Errorf("tie's incident cell %q", got)
		}
		if got := p.text(".inc-banner"); !strings.Contains(got, "5 open incidents in 5 jobs") {
			t.Errorf("banner %q", got)
		}
		p.shot("jobs-incidents.png")
	})

	// Every other incident in the repository renders too: the CLI's
	// fixtures (internal/render, another hand's idea of realistic
	// incidents: two faults, recovering, a withheld rank) through the same
	// fake, with no page error and every piece of evidence on the timeline.
	t.Run("the CLI's incident fixtures render", func(t *testing.T) {
		paths, err := filepath.Glob(filepath.Join("..", "render", "testdata", "incidents", "*.json"))
		if err != nil || len(paths) == 0 {
			t.Fatalf("no incident fixtures under internal/render/testdata/incidents (%v)", err)
		}
		g := &incidentFake{sysom: f.sysom, kair: f.kair}
		for _, path := range paths {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			inc, err := incident.Decode(b)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			g.incs = append(g.incs, *inc)
		}
		other := httptest.NewServer(g.mux())
		t.Cleanup(other.Close)
		ob := browser{ctx: bctx, base: other.URL, dir: b.dir}
		for _, inc := range g.incs {
			p := ob.openWith(t, "#/incidents/"+url.PathEscape(inc.ID), clockAt(inc.Updated.WallNS+60e9))
			p.wait(`document.querySelector('svg.inc-timeline, .inc-timeline-empty')`, inc.ID+"'s timeline")
			if got := p.text(".inc-summary .inc-headline"); got != inc.Headline {
				t.Errorf("%s: headline %q, want %q", inc.ID, got, inc.Headline)
			}
			if n := p.count("svg.inc-timeline g.inc-ev"); n != len(inc.Evidence) {
				t.Errorf("%s: %d evidence markers, want %d", inc.ID, n, len(inc.Evidence))
			}
			if n := p.count(".inc-hyp"); n != len(inc.Hypotheses) {
				t.Errorf("%s: %d hypotheses shown, want %d", inc.ID, n, len(inc.Hypotheses))
			}
			stated := 0
			for _, h := range inc.Hypotheses {
				if h.Stated {
					stated++
				}
			}
			if n := p.count(`.inc-hyp[data-stated="true"]`); n != stated {
				t.Errorf("%s: %d hypotheses shown as stated, want %d", inc.ID, n, stated)
			}
			if len(inc.Contradictions) > 0 && !strings.Contains(p.text(".inc-summary"), inc.Contradictions[0]) {
				t.Errorf("%s: the contradiction is not in the summary", inc.ID)
			}
			if stated > 1 {
				p.shot("incident-two-causes.png")
			}
		}
	})

	t.Run("an unknown incident, and a server without incidents", func(t *testing.T) {
		p := tab(t, "#/incidents/nope")
		p.wait(`!document.getElementById('banner').hidden`, "the error banner")
		if got := p.text("#banner"); !strings.Contains(got, "API error 404") || !strings.Contains(got, `unknown incident "nope"`) {
			t.Errorf("banner %q", got)
		}
		// The stage fake has no incident routes: no card, no banner.
		plain := httptest.NewServer(newFakeAPI(t).mux())
		t.Cleanup(plain.Close)
		q := browser{ctx: bctx, base: plain.URL, dir: b.dir}.open(t, "#/jobs/data-straggler-8")
		q.wait(`document.querySelector('#headline')`, "the job page")
		q.idle()
		if q.count("#incidents") != 0 || q.str(`document.getElementById('banner').hidden`) != "true" {
			t.Error("a server without incident routes shows an incident card or an error")
		}
	})
}
