package lint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The import rules of incident fusion (arch rule 5) catch what they
// exist for: an engine that learns of incidents, and an incident package
// that reaches into an engine, the store or the analysis layer.
func TestIncidentRulesCatchViolations(t *testing.T) {
	prod := map[string][]string{
		"internal/incident":             {"encoding/json", module + "internal/engine/greyhound", module + "internal/store", module + "internal/analysis", module + "internal/signal"},
		"internal/engine/kair":          {module + "internal/incident", module + "internal/signal/optrace"},
		"internal/analysis":             {module + "internal/incident", module + "internal/engine/kair"},
		"internal/engine/stagefrontier": {module + "internal/stats"},
	}
	got := flowViolations(prod)
	slices.Sort(got)
	want := []string{
		"internal/engine/kair imports " + module + "internal/incident",
		"internal/incident imports " + module + "internal/analysis",
		"internal/incident imports " + module + "internal/engine/greyhound",
		"internal/incident imports " + module + "internal/store",
	}
	if len(got) != len(want) {
		t.Fatalf("violations %q, want %d", got, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+":") {
			t.Errorf("violation %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// adapterFile: the files of internal/analysis that adapt engine reports
// into incident evidence (evidence.go, evidence_<engine>.go).
func adapterFile(name string) bool {
	return name == "evidence.go" || (strings.HasPrefix(name, "evidence_") && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go"))
}

// incidentImporters are the non-test files of dir that import
// internal/incident.
func incidentImporters(t *testing.T, dir string) []string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == module+"internal/incident" {
				out = append(out, filepath.Base(path))
			}
		}
	}
	slices.Sort(out)
	return out
}

// Inside internal/analysis only the evidence adapters know incidents:
// the rest of the package resolves windows and runs engines, and must not
// grow a second path from engines to incidents.
func TestOnlyEvidenceAdaptersImportIncident(t *testing.T) {
	got := incidentImporters(t, "internal/analysis")
	if !slices.Contains(got, "evidence.go") {
		t.Fatalf("internal/analysis/evidence.go does not import internal/incident (found %v): update the rule", got)
	}
	for _, f := range got {
		if !adapterFile(f) {
			t.Errorf("internal/analysis/%s imports internal/incident: only the evidence adapters (evidence*.go) may", f)
		}
	}
	if _, err := os.Stat("../../internal/analysis/evidence.go"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"run.go", "evidence_test.go", "evidencex.go.orig"} {
		if adapterFile(f) {
			t.Errorf("adapterFile(%q) is true", f)
		}
	}
}
