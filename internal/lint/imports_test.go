package lint

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/laggard-dev/laggard/"

// pkgImports maps each package directory (relative to the repository
// root) to the imports of its non-test files, and of its test files.
func pkgImports(t *testing.T) (prod, test map[string][]string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	prod, test = map[string][]string{}, map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "testdata", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		m := prod
		if strings.HasSuffix(path, "_test.go") {
			m = test
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(m[rel], p) {
				m[rel] = append(m[rel], p)
			}
		}
		if _, ok := m[rel]; !ok {
			m[rel] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return prod, test
}

func internal(p string) (string, bool) {
	return strings.CutPrefix(p, module)
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// stdlib reports whether an import path is the standard library's.
func stdlib(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }

// Engines are pure functions over signals: they import only signal/*,
// stats and the standard library — minus I/O, clocks, logging and
// process-global randomness.
var impure = []string{"os", "os/exec", "net", "net/http", "io/ioutil", "log", "log/slog", "time", "math/rand", "syscall", "unsafe", "plugin"}

func TestEnginesArePure(t *testing.T) {
	prod, _ := pkgImports(t)
	for dir, imps := range prod {
		if !under(dir, "internal/engine") && dir != "internal/stats" {
			continue
		}
		for _, p := range imps {
			in, ok := internal(p)
			switch {
			case ok && (under(in, "internal/signal") || (in == "internal/stats" && dir != "internal/stats")):
			case ok:
				t.Errorf("%s imports %s: engines import only internal/signal/..., internal/stats and the standard library", dir, p)
			case !stdlib(p):
				t.Errorf("%s imports %s: engines take no third-party dependencies", dir, p)
			case slices.Contains(impure, p) || under(p, "net"):
				t.Errorf("%s imports %s: engines do no I/O, keep no clocks, logs or global randomness", dir, p)
			}
		}
	}
}

// Data flows one way: wire → ingest → store → analysis → engines →
// incident → api/render/ui/cli. Each rule lists what a layer must not import.
var flowRules = []struct {
	layer  string
	forbid []string
}{
	{"internal/signal", []string{"internal/wire", "internal/ingest", "internal/store", "internal/catalog", "internal/analysis", "internal/engine", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui", "internal/stats"}},
	{"internal/wire", []string{"internal/ingest", "internal/store", "internal/catalog", "internal/analysis", "internal/engine", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui"}},
	{"internal/ingest", []string{"internal/store", "internal/catalog", "internal/analysis", "internal/engine", "internal/detect", "internal/api", "internal/server", "internal/wire"}},
	{"internal/store", []string{"internal/ingest", "internal/catalog", "internal/analysis", "internal/engine", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui"}},
	{"internal/catalog", []string{"internal/store", "internal/analysis", "internal/engine", "internal/detect", "internal/api", "internal/server"}},
	{"internal/analysis", []string{"internal/ingest", "internal/catalog", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui", "internal/wire"}},
	{"internal/detect", []string{"internal/api", "internal/server", "internal/render", "internal/ui"}},
	{"internal/api", []string{"internal/server", "internal/ui"}},
	{"internal/render", []string{"internal/store", "internal/api", "internal/server", "internal/ingest"}},
	{"internal/sim", []string{"internal/store", "internal/analysis", "internal/engine", "internal/api", "internal/server"}},
	// The node agent ships signals; it never reads storage or runs engines (arch rule 2).
	{"internal/agent", []string{"internal/store", "internal/engine", "internal/analysis", "internal/ingest", "internal/catalog", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui"}},
	// What acts (internal/control: capture and validation life cycles,
	// auto triggers, later mitigation) sits beside the read path and
	// calls it; the read path and the engines never call what acts
	// (docs/design/control.md). Control reaches the engines only
	// through analysis (TestOnlyAnalysisJoinsStoreAndEngines).
	{"internal/analysis", []string{"internal/control"}},
	{"internal/engine", []string{"internal/control"}},
	{"internal/incident", []string{"internal/control"}},
	{"internal/control", []string{"internal/engine", "internal/api", "internal/server", "internal/render", "internal/ui", "internal/wire", "internal/ingest"}},
	// Engines don't know incidents; incidents know no engine (arch rule
	// 5): internal/analysis adapts each engine's report into evidence
	// (only its evidence adapters: TestOnlyEvidenceAdaptersImportIncident),
	// and the incident package stays pure fusion over that evidence.
	{"internal/engine", []string{"internal/incident"}},
	{"internal/incident", []string{"internal/engine", "internal/store", "internal/analysis", "internal/ingest", "internal/catalog", "internal/wire", "internal/detect", "internal/api", "internal/server", "internal/render", "internal/ui"}},
}

func TestDataFlowsOneWay(t *testing.T) {
	prod, _ := pkgImports(t)
	for _, v := range flowViolations(prod) {
		t.Error(v)
	}
}

// flowViolations lists every import of prod that a flow rule forbids.
func flowViolations(prod map[string][]string) []string {
	var out []string
	for dir, imps := range prod {
		for _, r := range flowRules {
			if !under(dir, r.layer) {
				continue
			}
			for _, p := range imps {
				in, ok := internal(p)
				if !ok {
					continue
				}
				for _, f := range r.forbid {
					if under(in, f) {
						out = append(out, fmt.Sprintf("%s imports %s: %s must not depend on %s (data flows one way; docs/design/architecture.md)", dir, p, r.layer, f))
					}
				}
			}
		}
	}
	return out
}

// The read path and the engines must not import what acts: the rules
// catch it (a rule that never fires would pass vacuously).
func TestFlowRulesForbidControl(t *testing.T) {
	for _, dir := range []string{"internal/analysis", "internal/engine/kair", "internal/engine/greyhound", "internal/incident"} {
		prod := map[string][]string{dir: {module + "internal/control"}}
		if v := flowViolations(prod); len(v) != 1 || !strings.Contains(v[0], "must not depend on internal/control") {
			t.Errorf("%s importing internal/control: violations %q", dir, v)
		}
	}
	if v := flowViolations(map[string][]string{"internal/control": {module + "internal/engine/greyhound"}}); len(v) != 1 {
		t.Errorf("control importing an engine: violations %q", v)
	}
	if v := flowViolations(map[string][]string{"internal/control": {module + "internal/analysis", module + "internal/store"}, "internal/server": {module + "internal/control"}, "internal/api": {module + "internal/control"}}); len(v) != 0 {
		t.Errorf("allowed imports flagged: %q", v)
	}
}

// Only internal/analysis joins storage and the engines, so there is one
// store→engine path (window resolution, look-back, role groups).
func TestOnlyAnalysisJoinsStoreAndEngines(t *testing.T) {
	prod, _ := pkgImports(t)
	for dir, imps := range prod {
		var store, engine bool
		for _, p := range imps {
			in, ok := internal(p)
			store = store || (ok && under(in, "internal/store"))
			engine = engine || (ok && under(in, "internal/engine"))
		}
		if store && engine && dir != "internal/analysis" {
			t.Errorf("%s imports both internal/store and internal/engine/...; only internal/analysis may", dir)
		}
	}
}

// The rules above must see the packages they govern; a rename that moved
// them all would otherwise pass vacuously.
func TestLintSeesTheTree(t *testing.T) {
	prod, _ := pkgImports(t)
	for _, dir := range []string{"internal/engine/stagefrontier", "internal/analysis", "internal/store", "internal/signal/stagevec", "internal/api", "internal/control", "internal/incident"} {
		if _, ok := prod[dir]; !ok {
			t.Errorf("package %s not found: update the lint rules", dir)
		}
	}
}
