package render

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

var updateIncident = flag.Bool("update-incident", false, "rewrite testdata/incident-*.txt, testdata/incidents-table.txt and testdata/incidents/*.json from the fixtures")

// golden compares got with testdata/name, or rewrites it with
// -update-incident.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *updateIncident {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -run Incident -update-incident ./internal/render to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (-update-incident rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func renderIncident(t *testing.T, inc *incident.Incident, o IncidentOptions) string {
	t.Helper()
	var b bytes.Buffer
	if err := Incident(&b, inc, o); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// checkWidth: every line fits 100 columns, but for a link that cannot be
// broken (the line's last word is a URL or an API path).
func checkWidth(t *testing.T, name, out string) {
	t.Helper()
	for i, l := range strings.Split(out, "\n") {
		if n := len([]rune(l)); n > incWidth {
			f := strings.Fields(l)
			last := f[len(f)-1]
			if strings.HasPrefix(last, "http://") || strings.HasPrefix(last, "/api/") {
				continue
			}
			t.Errorf("%s line %d is %d columns wide:\n%s", name, i+1, n, l)
		}
	}
}

// TestIncidentGolden renders every fixture (plain and -v) against its
// golden file, through the JSON the API serves (what the CLI reads), and
// keeps the JSON as the fixture the CLI's and the demo's tests serve.
func TestIncidentGolden(t *testing.T) {
	opts := IncidentOptions{Now: fixtureNow, Server: "http://127.0.0.1:7070"}
	for _, fx := range incidentFixtures() {
		raw, err := json.MarshalIndent(fx.inc, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "incidents/"+fx.name+".json", append(raw, '\n'))
		var back incident.Incident
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		out := renderIncident(t, &back, opts)
		if direct := renderIncident(t, &fx.inc, opts); direct != out {
			t.Errorf("%s: the JSON round trip changes the text", fx.name)
		}
		golden(t, "incident-"+fx.name+".txt", []byte(out))
		checkWidth(t, fx.name, out)
		v := opts
		v.Verbose = true
		vout := renderIncident(t, &back, v)
		checkWidth(t, fx.name+" -v", vout)
		if fx.name == "open" || fx.name == "withheld" {
			golden(t, "incident-"+fx.name+"-v.txt", []byte(vout))
		}
		// Paper notation and engine jargon stay out of the main text; the
		// glossary (-v) explains them.
		for _, word := range []string{"S_A", "τ", "a_i", "frontier", "glossary"} {
			if strings.Contains(out, word) {
				t.Errorf("%s: the plain text says %q:\n%s", fx.name, word, out)
			}
		}
		if !strings.Contains(vout, "glossary:") || !strings.Contains(vout, "evidence (") {
			t.Errorf("%s: -v lacks the evidence list or the glossary", fx.name)
		}
	}
}

// The text is laid out top-down and says what each situation needs:
// nothing competing is hidden, both causes of two faults are stated,
// outstanding requests say when they were asked.
func TestIncidentTextSaysWhatMatters(t *testing.T) {
	opts := IncidentOptions{Now: fixtureNow, Server: "http://127.0.0.1:7070"}
	for _, tc := range []struct {
		inc   incident.Incident
		want  []string
		order []string // sections that must appear in this order
	}{
		{fixtureOpen(), []string{
			"incident inc-7d1c0a · job gpt-ft-7b · 8 ranks · OPEN",
			"▶ Rank 5 on gpu-node-02 has been slow to load its data",
			"step time 412 ms → 534 ms per step (+30%)",
			"since step 1,210 at 14:01:37 UTC (18 min ago); detected 12 s later, at 14:01:49 UTC",
			"4 min 12 s of the job, 33.6 rank-min, over 2,066 slow steps (8 ranks)",
			"rank 5 on gpu-node-02",
			"host gpu-node-02 was also the cause in job bert-large-eval 2 h 14 min ago (incident inc-51aa90, 1 min 35 s lost)",
			"why (high confidence: StageFrontier and Greyhound name rank 5 independently",
			"[StageFrontier · sf/cp/0/1210, sf/lead/0/1210]",
			"(low confidence: one 30 s profile window) [SysOM-AI · sysom/diag/0/5]",
			"asked at 14:19:41 UTC (cap-0043)",
			"audit log (latest 5 of 6; -v for all)",
			"http://127.0.0.1:7070/api/v1/jobs/gpt-ft-7b/report?from=1210",
			"web UI        http://127.0.0.1:7070/#/jobs/gpt-ft-7b",
		}, []string{"▶", "what slowed", "since", "latest", "what it cost", "where", "why (", "step stage the data-loading", "collective rank 5 enters", "CPU rank 5's main thread", "what to do:", "still waiting for:", "audit log", "engine views"}},
		{fixtureRecovering(), []string{
			"RECOVERING",
			"back to 296 ms per step since step 17,050 at 14:18:05 UTC; it resolves if that holds",
			"the link rank 7 → rank 8",
			"(withheld: every rank leaves the stage together)",
			"after: steps 17,050–17,110",
		}, []string{"now back to 296 ms", "why (", "step stage the backward", "collective group dp1", "network transfers from rank 7"}},
		{fixtureResolved(), []string{
			"RESOLVED",
			"recovered step 90,670 at 2026-03-09 22:51:15 UTC, after 11 min 3 s; 183 ms per step since",
			"since step 88,120 at 2026-03-09 22:40:12 UTC (15 h ago); detected 13 s later",
			"operator aten::convolution_backward",
		}, []string{"step stage the backward", "operator aten::convolution_backward on rank 2", "GPU rank 2's matrix-multiply"}},
		{fixtureWithheld(), []string{
			"OPEN",
			"why: no cause stated: no explanation meets the bar yet",
			"competing explanations (strongest first):",
			"1. rank 3 on node-01 (low confidence: Greyhound alone names it",
			"2. rank 6 on node-02 (low confidence: KAIR alone names it",
			"against it: KAIR: a 240 ms gap on rank 6",
			"where the engines disagree:",
			"! Greyhound says rank 3 is the last into the all-to-all",
			"the whole job (nothing narrower is stated yet)",
			"a SysOM-AI CPU profile window of ranks 0, 3, 6 — asked at 14:12:40 UTC (window 14:12:40+60s)",
			"a Greyhound validation (compute per rank and transfers per link benchmarked at a step boundary) of ranks 0–7 — not asked yet",
		}, []string{"why: no cause", "competing explanations", "where the engines disagree", "what to do", "still waiting for"}},
		{fixtureUniform(), []string{
			"▶ Every rank slowed alike at 11:58:30 UTC",
			"21 min 32 s of the job, 23.0 rank-h, over 2,533 slow steps (64 ranks)",
			"where         the whole job",
			"why (low confidence:",
			"Python's garbage collector grew from 2% to 19%",
		}, []string{"step stage every stage grew", "collective all 64 ranks", "CPU Python's garbage collector"}},
		{fixtureTwoFaults(), []string{
			"why, cause 1 of 2: rank 4 on node-01 (high confidence",
			"why, cause 2 of 2: the link rank 11 → rank 12 (high confidence",
			"1. (for rank 4) Look at rank 4's input pipeline",
			"2. (for link 11→12) Check the path from rank 11 to rank 12",
			"rank 4 on node-01",
			"the link rank 11 → rank 12",
		}, []string{"cause 1 of 2", "cause 2 of 2", "what to do"}},
	} {
		out := oneLine(renderIncident(t, &tc.inc, opts))
		for _, w := range tc.want {
			if !strings.Contains(out, oneLine(w)) {
				t.Errorf("%s lacks %q:\n%s", tc.inc.ID, w, out)
			}
		}
		at := 0
		for _, s := range tc.order {
			i := strings.Index(out[at:], s)
			if i < 0 {
				t.Errorf("%s: %q missing or out of order:\n%s", tc.inc.ID, s, out)
				break
			}
			at += i + len(s)
		}
	}
}

// oneLine collapses white space, so a check reads across wrapped lines.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestIncidentsTableGolden: the table of every fixture, newest first as
// the API lists them, and its layout when the cause does not fit.
func TestIncidentsTableGolden(t *testing.T) {
	var incs []incident.Incident
	for _, fx := range incidentFixtures() {
		inc := fx.inc
		inc.Evidence = nil // the list route omits evidence
		incs = append(incs, inc)
	}
	slices.SortFunc(incs, func(a, b incident.Incident) int { return cmp.Compare(b.Opened.WallNS, a.Opened.WallNS) })
	var b bytes.Buffer
	if err := Incidents(&b, incs, IncidentOptions{Now: fixtureNow}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	golden(t, "incidents-table.txt", b.Bytes())
	checkWidth(t, "table", out)
	for _, w := range []string{
		"inc-7d1c0a", "18 min ago (14:01)", "4 min 12 s, 33.6 rank-min", "rank 5 on gpu-node-02: data loading",
		"15 h ago (03-09 22:40)", "resolved",
		"not stated (2 competing: rank 3, rank 6)", "withheld",
		"every rank alike: uniform slowdown",
		"rank 4 on node-01: data loading; the link rank 11 → rank 12: network",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	// A row fits on one line with its cause when there is room.
	b.Reset()
	short := []incident.Incident{{ID: "inc-1", Job: "j", State: incident.StateOpen, Opened: incident.Point{WallNS: at(14, 19, 0)},
		Hypotheses: []incident.Hypothesis{{Target: incident.RankTarget(3, ""), Stated: true, Category: incident.CategoryData}}, Confidence: incident.ConfidenceHigh}}
	if err := Incidents(&b, short, IncidentOptions{Now: fixtureNow}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(b.String()), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], "CAUSE") || !strings.HasSuffix(lines[1], "rank 3: data loading") {
		t.Errorf("one short row: want a header and one line with the cause:\n%s", b.String())
	}
	b.Reset()
	if err := Incidents(&b, nil, IncidentOptions{}); err != nil || b.String() != "no incidents\n" {
		t.Errorf("empty: %q %v", b.String(), err)
	}
}

func TestIncidentHumanUnits(t *testing.T) {
	for _, c := range []struct {
		s    float64
		want string
	}{{0, "0 s"}, {0.43, "0.4 s"}, {4.25, "4.3 s"}, {42, "42 s"}, {60, "1 min"}, {252, "4 min 12 s"}, {3780, "1 h 3 min"}, {7200, "2 h"}, {187200, "2 d 4 h"}, {-1, "—"}} {
		if got := incident.DurationWords(c.s); got != c.want {
			t.Errorf("incident.DurationWords(%v) = %q, want %q", c.s, got, c.want)
		}
	}
	for _, c := range []struct {
		rs   float64
		want string
	}{{45, "45 rank-s"}, {2016, "33.6 rank-min"}, {82675.2, "23.0 rank-h"}} {
		if got := rankTimeText(c.rs); got != c.want {
			t.Errorf("rankTimeText(%v) = %q, want %q", c.rs, got, c.want)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{-time.Second, "in the future (clock skew)"}, {2 * time.Second, "just now"}, {42 * time.Second, "42 s ago"}, {18 * time.Minute, "18 min ago"},
		{134 * time.Minute, "2 h 14 min ago"}, {15 * time.Hour, "15 h ago"}, {50 * time.Hour, "2 d ago"}} {
		if got := agoText(c.d); got != c.want {
			t.Errorf("agoText(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := lostText(incident.Lost{Seconds: 30, RankSeconds: 240, Steps: 300, Partial: true}, 8); got != "at least 30 s of the job, 4.0 rank-min, over 300 slow steps (8 ranks) — the step samples do not cover the whole incident" {
		t.Errorf("partial lost time: %q", got)
	}
}

// An incident without the fusion's headline still opens with one
// sentence made from its fields; one with nothing known still renders.
func TestIncidentHeadlineFallback(t *testing.T) {
	inc := fixtureTwoFaults()
	inc.Headline = ""
	out := oneLine(renderIncident(t, &inc, IncidentOptions{}))
	if !strings.Contains(out, "▶ The step time rose from 560 ms to 810 ms (+45%). Cause: rank 4 on node-01 (data loading); the link rank 11 → rank 12 (network).") {
		t.Errorf("fallback headline:\n%s", out)
	}
	// Without a clock, absolute dates only.
	if !strings.Contains(out, "at 2026-03-10 14:05:10 UTC;") || strings.Contains(out, "ago") {
		t.Errorf("no Now: want absolute times only:\n%s", out)
	}
	out = oneLine(renderIncident(t, &incident.Incident{}, IncidentOptions{Verbose: true}))
	for _, w := range []string{"incident (no id) · job (no job) · STATE UNKNOWN", "▶ No cause stated yet.", "nothing measurable yet", "the whole job", "no engine has named"} {
		if !strings.Contains(out, w) {
			t.Errorf("empty incident lacks %q:\n%s", w, out)
		}
	}
	if out := renderIncident(t, nil, IncidentOptions{}); out != "no incident\n" {
		t.Errorf("nil: %q", out)
	}
}

// What the fusion leaves out is read from the evidence (the step times
// of the onset); a job that stopped while slow says so; a reason given
// as a sentence reads inside the parentheses.
func TestIncidentFallbacksAndStoppedJob(t *testing.T) {
	inc := fixtureOpen()
	inc.HealthyMS, inc.SlowMS = 0, 0
	inc.Hypotheses[0].Reason = "two engines agree."
	out := oneLine(renderIncident(t, &inc, IncidentOptions{Now: fixtureNow}))
	for _, w := range []string{"what slowed step time 412 ms → 534 ms per step (+30%)", "why (high confidence: two engines agree):"} {
		if !strings.Contains(out, w) {
			t.Errorf("lacks %q:\n%s", w, out)
		}
	}
	inc.Onset = nil
	if out := oneLine(renderIncident(t, &inc, IncidentOptions{})); !strings.Contains(out, "what slowed the step time (by how much is not measured yet)") {
		t.Errorf("no step times:\n%s", out)
	}
	inc = fixtureOpen()
	inc.State, inc.ResolvedBy, inc.Resolved = incident.StateResolved, incident.ResolvedStopped, &incident.Point{WallNS: at(14, 19, 58), Step: 3276}
	if out := oneLine(renderIncident(t, &inc, IncidentOptions{Now: fixtureNow})); !strings.Contains(out, "ended the job stopped reporting step 3,276 at 14:19:58 UTC while still slow; the incident closed with it") {
		t.Errorf("stopped job:\n%s", out)
	}
}

func TestIncidentReportsWriteErrors(t *testing.T) {
	inc := fixtureOpen()
	if err := Incident(&failWriter{n: 0}, &inc, IncidentOptions{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("want the write error, got %v", err)
	}
	if err := Incidents(&failWriter{n: 1}, []incident.Incident{inc}, IncidentOptions{}); err == nil {
		t.Fatal("table: want the write error")
	}
}

// FuzzIncidentText: any incident JSON a server (or a hand edit) gives
// renders, plain and -v, table too, without panicking.
func FuzzIncidentText(f *testing.F) {
	for _, fx := range incidentFixtures() {
		raw, _ := json.Marshal(fx.inc)
		f.Add(raw)
	}
	f.Add([]byte(`{"hypotheses":[{"target":{"kind":"operator","rank":-1}}],"lost":{"seconds":1e308,"rank_seconds":-5},"healthy_ms":-1,"slow_ms":1e309}`))
	f.Add([]byte(`{"scope":{"ranks":[3,3,-1]},"waiting":[{"kind":"x","ranks":[]}],"audit":[{"at_ns":-9}],"windows":{"during":{"from_step":9,"to_step":2,"from_ns":5,"to_ns":1}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var inc incident.Incident
		if json.Unmarshal(b, &inc) != nil {
			return
		}
		var out bytes.Buffer
		for _, v := range []bool{false, true} {
			if err := Incident(&out, &inc, IncidentOptions{Now: fixtureNow, Verbose: v, Server: "http://x"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := Incidents(&out, []incident.Incident{inc}, IncidentOptions{Now: fixtureNow}); err != nil {
			t.Fatal(err)
		}
	})
}
