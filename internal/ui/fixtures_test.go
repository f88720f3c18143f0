package ui

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/detect"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// testdata/ holds what the API answers for the scenarios: jobs.json (GET
// /api/v1/jobs, with background diagnoses) and report-<id>.json (GET
// /api/v1/jobs/<id>/report, the default window). Regenerate with
//
//	go test ./internal/ui -run TestFixtures -update

var update = flag.Bool("update", false, "rewrite testdata/ from the scenarios")

func reportFile(id string) string { return "report-" + id + ".json" }

// fixtureFiles renders the world as the API would, compact (the 1,024-rank
// report is half a megabyte); read them with jq.
func fixtureFiles(t testing.TB, w *world) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	list, err := json.Marshal(map[string]any{"jobs": w.list})
	if err != nil {
		t.Fatal(err)
	}
	files["jobs.json"] = append(list, '\n')
	for id, rep := range w.reports {
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		files[reportFile(id)] = append(b, '\n')
	}
	return files
}

func TestFixtures(t *testing.T) {
	w := loadWorld(t)
	syncGolden(t, "*.json", fixtureFiles(t, w),
		func(name string) bool { return strings.HasPrefix(name, "greyhound-") }, // TestGreyhoundFixtures'
		"scenario", "TestFixtures", ": the engine or a scenario changed")
}

// syncGolden keeps testdata/<glob> equal to files: with -update it writes
// them and removes the strays; otherwise it reports stale, missing and
// stray files, naming the test (run) whose -update regenerates them. The
// glob and the names of files are relative to testdata/. skip
// names files of the glob another test owns; what says whose a file
// should be; why is added to the stale message.
func syncGolden(t *testing.T, glob string, files map[string][]byte, skip func(name string) bool, what, run, why string) {
	t.Helper()
	onDisk, err := filepath.Glob(filepath.Join("testdata", glob))
	if err != nil {
		t.Fatal(err)
	}
	// Names are relative to testdata/ ("incidents/hosts.json").
	rel := func(p string) string {
		return filepath.ToSlash(strings.TrimPrefix(p, "testdata"+string(filepath.Separator)))
	}
	for _, p := range onDisk {
		if _, ok := files[rel(p)]; ok || (skip != nil && skip(rel(p))) {
			continue
		}
		if *update {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Errorf("%s is no %s's; run go test ./internal/ui -run %s -update", p, what, run)
		}
	}
	for name, want := range files {
		p := filepath.Join("testdata", filepath.FromSlash(name))
		if *update {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("%v (run go test ./internal/ui -run %s -update)", err, run)
		} else if !bytes.Equal(got, want) {
			t.Errorf("%s is stale%s; run go test ./internal/ui -run %s -update", p, why, run)
		}
	}
}

// Each scenario must still show what it was built to show, or the UI
// tests built on it test nothing.
func TestScenariosShowWhatTheyAreFor(t *testing.T) {
	w := loadWorld(t)
	rep := func(id string) *analysis.Report { return w.reports[id] }
	only := func(id string) *stagefrontier.Report {
		r := rep(id)
		if len(r.Groups) != 1 {
			t.Fatalf("%s: %d role groups, want 1", id, len(r.Groups))
		}
		return r.Groups[0].Report
	}
	named := func(id string, rank int, host, stage string, basis stagefrontier.Basis) {
		h := rep(id).Headline
		if h.Rank != rank || h.Host != host || h.Stage != stage || h.Basis != basis {
			t.Errorf("%s: headline rank %d host %q stage %q basis %q, want rank %d on %q at %q (%s)\n%s",
				id, h.Rank, h.Host, h.Stage, h.Basis, rank, host, stage, basis, h.Text)
		}
	}
	withheld := func(id string, why stagefrontier.Withheld, stage string) {
		h := rep(id).Headline
		if h.Rank != -1 || h.Withheld != why || h.Stage != stage || h.WithheldWhy == "" {
			t.Errorf("%s: headline rank %d withheld %q at %q, want %q at %q\n%s", id, h.Rank, h.Withheld, h.Stage, why, stage, h.Text)
		}
	}
	onset := func(id string, step int64) {
		tl := rep(id).Timeline
		if tl == nil || tl.WarmupEnd != 3 || !slices.ContainsFunc(tl.ChangePoints, func(c analysis.ChangePoint) bool {
			return c.Kind == analysis.Onset && c.Step >= step-1 && c.Step <= step+1
		}) {
			t.Errorf("%s: want warm-up to step 3 and an onset at step %d, got %+v", id, step, tl)
		}
	}

	named("data-straggler-8", straggler8, "node-000", stagevec.StageData, stagefrontier.BasisExcess)
	onset("data-straggler-8", onset8)
	if c := rep("data-straggler-8").Groups[0].Comparison; c == nil || c.ExcessTop1 != stagevec.StageData {
		t.Errorf("data-straggler-8: no comparison with the steps before the onset: %+v", c)
	}
	named("data-straggler-1024", straggler1024, "node-080", stagevec.StageData, stagefrontier.BasisExcess)
	onset("data-straggler-1024", onset1024)
	if r := only("data-straggler-1024"); r.NumRanks != 1024 || r.Top1 != stagevec.StageBackward {
		t.Errorf("data-straggler-1024: %d ranks, absolute top-1 %q; want 1,024 ranks and a steady large backward", r.NumRanks, r.Top1)
	}
	withheld("absorbed-backward", stagefrontier.WithheldAbsorbed, stagevec.StageBackward)
	withheld("tie", stagefrontier.WithheldTie, stagevec.StageData)
	if ts := rep("tie").Headline.TieSet; !slices.Equal(ts, []int{1, 3}) {
		t.Errorf("tie: tie set %v, want [1 3]", ts)
	}
	withheld("few-steps", stagefrontier.WithheldFewSteps, stagevec.StageData)
	// Every rank alike: the stage withholds a rank and says the rise is
	// every rank's own.
	withheld("uniform-8", stagefrontier.WithheldAbsorbed, stagevec.StageBackward)
	onset("uniform-8", uniformOnset)
	if h := rep("uniform-8").Headline; !strings.Contains(h.Text, "rose alike") {
		t.Errorf("uniform-8: the headline does not say every rank rose alike: %s", h.Text)
	}
	if r := rep("relief"); r.Timeline == nil || len(r.Timeline.ChangePoints) != 2 || r.Timeline.ChangePoints[1].Kind != analysis.Relief ||
		r.Headline.Rank != -1 || !strings.Contains(r.Headline.Text, "fell") {
		t.Errorf("relief: want onset then relief and a healthy window, got %+v", r.Headline)
	}
	rg := rep("role-groups")
	if !rg.RoleAwareNeeded || len(rg.Groups) != 2 || rg.Headline.Withheld != stagefrontier.WithheldRoleGroups ||
		slices.Equal(rg.Groups[0].Report.Stages, rg.Groups[1].Report.Stages) {
		t.Errorf("role-groups: want two role groups with their own stage lists and no global rank, got %+v", rg.Headline)
	}
	for _, g := range rg.Groups {
		if g.Group == "pp1" && (g.Report.Headline.Rank != pp1Late || g.Report.Headline.Stage != "send.wait") {
			t.Errorf("role-groups pp1: %+v", g.Report.Headline)
		}
	}
	tl := only("telemetry-limited")
	if !slices.ContainsFunc(tl.Labels, func(l stagefrontier.Label) bool { return l.Name == stagefrontier.LabelTelemetryLimited }) ||
		len(tl.Headline.Caveats) == 0 || tl.Quality.MissingCells == 0 || tl.Quality.MaxClosureShare <= tl.Config.ClosureResidualShare ||
		!slices.Equal(tl.Quality.MissingRanks, []int{limitedSilent}) {
		t.Errorf("telemetry-limited: labels %v caveats %v quality %+v", tl.Labels, tl.Headline.Caveats, tl.Quality)
	}
	// The list carries every job's background diagnosis, equal to its
	// default report's headline.
	if len(w.list) != len(scenarios) {
		t.Fatalf("%d jobs listed, want %d", len(w.list), len(scenarios))
	}
	for _, v := range w.list {
		s, ok := v.Diagnosis.(*detect.Summary)
		if !ok || s.Error != "" || s.Headline.Text != w.reports[v.ID].Headline.Text {
			t.Errorf("%s: diagnosis %+v does not match its report", v.ID, v.Diagnosis)
		}
	}
}
