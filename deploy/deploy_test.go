// Package deploy_test checks the deployment files under deploy/ and
// docs/deploy.md: the Grafana dashboard, the Prometheus rules, the
// Kubernetes manifests, the container and systemd command lines.
//
// The default checks use only the standard library, read only files in the
// repository and finish well under a second. They are not a YAML parser:
// they check structure line by line (indentation, tabs, duplicate keys,
// block scalars), which catches the usual editing mistakes. The full
// validators run when LAGGARD_DEPLOY_TOOLS=1 is set (then promtool and
// kubectl must be on PATH):
//
//	LAGGARD_DEPLOY_TOOLS=1 go test ./deploy/
package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// metrics is every metric laggard exports, by type. Dashboards, rules and
// docs may use only these (histograms also with _bucket, _sum and _count).
var metrics = map[string]string{
	// ingest and HTTP
	"laggard_ingest_vectors_total":  "counter",
	"laggard_ingest_values_total":   "counter",
	"laggard_ingest_bytes_total":    "counter",
	"laggard_ingest_rejected_total": "counter",
	"laggard_ingest_shed_total":     "counter",
	"laggard_ingest_queue_capacity": "gauge",
	"laggard_ingest_queue_depth":    "gauge",
	"laggard_ingest_commit_seconds": "histogram",
	"laggard_ingest_commit_batches": "histogram",
	"laggard_report_seconds":        "histogram",
	"laggard_http_requests_total":   "counter",
	"laggard_http_request_seconds":  "histogram",
	// hardening: queue cost, gate, access, store, retention
	"laggard_ingest_queue_bytes":           "gauge",
	"laggard_ingest_queue_capacity_bytes":  "gauge",
	"laggard_ingest_queue_jobs":            "gauge",
	"laggard_ingest_commit_bytes":          "histogram",
	"laggard_ingest_inflight_bytes":        "gauge",
	"laggard_http_auth_failures_total":     "counter",
	"laggard_http_rejected_total":          "counter",
	"laggard_auth_tokens":                  "gauge",
	"laggard_auth_reloads_total":           "counter",
	"laggard_analysis_panics_total":        "counter",
	"laggard_store_size_bytes":             "gauge",
	"laggard_store_jobs":                   "gauge",
	"laggard_store_free_bytes":             "gauge",
	"laggard_store_disk_full":              "gauge",
	"laggard_retention_deleted_jobs_total": "counter",
	// issue 16: conflicting re-sends refused, job launches opened
	"laggard_ingest_conflicts_total":         "counter",
	"laggard_jobs_incarnations_opened_total": "counter",
	// background evaluation
	"laggard_build_info":                            "gauge",
	"laggard_job_exposed_step_ms":                   "gauge",
	"laggard_job_stage_share":                       "gauge",
	"laggard_job_stage_excess_ms":                   "gauge",
	"laggard_job_straggler_rank":                    "gauge",
	"laggard_job_leader_confidence":                 "gauge",
	"laggard_job_headline_info":                     "gauge",
	"laggard_job_label":                             "gauge",
	"laggard_job_change_points":                     "gauge",
	"laggard_job_last_change_step":                  "gauge",
	"laggard_job_step_time_change_ratio":            "gauge",
	"laggard_job_last_step":                         "gauge",
	"laggard_job_last_evaluation_timestamp_seconds": "gauge",
	"laggard_detect_evaluations_total":              "counter",
	"laggard_detect_evaluation_seconds":             "histogram",
	"laggard_detect_active_jobs":                    "gauge",
	// issue 17: incidents
	"laggard_incidents_open":                  "gauge",
	"laggard_incident_lost_seconds_total":     "counter",
	"laggard_incident_transitions_total":      "counter",
	"laggard_incident_evidence_dropped_total": "counter",
	"laggard_incident_escalations_total":      "counter",
	"laggard_incident_records_skipped_total":  "counter",
	"laggard_incident_index_trimmed_total":    "counter",
	"laggard_incident_pending_bytes":          "gauge",
	"laggard_incident_cache_bytes":            "gauge",
	"laggard_incident_detection_seconds":      "histogram",
	"laggard_incident_localization_seconds":   "histogram",
}

var metricRef = regexp.MustCompile(`\blaggard_[a-z0-9_]+`)

// checkMetricNames reports every laggard_* identifier in text that is not
// a known metric (or a histogram's series).
func checkMetricNames(t *testing.T, where, text string) {
	t.Helper()
	for _, name := range metricRef.FindAllString(text, -1) {
		if _, ok := metrics[name]; ok {
			continue
		}
		base := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suf); ok && metrics[b] == "histogram" {
				base = b
				break
			}
		}
		if metrics[base] != "histogram" || base == name {
			t.Errorf("%s: unknown metric %q", where, name)
		}
	}
}

// repoRoot is the repository root (the test runs in deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ---------------------------------------------------------------- dashboard

type panel struct {
	ID         *int                      `json:"id"`
	Type       string                    `json:"type"`
	Title      string                    `json:"title"`
	GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
	Datasource json.RawMessage           `json:"datasource"`
	Targets    []target                  `json:"targets"`
	Panels     []panel                   `json:"panels"`
	Repeat     string                    `json:"repeat"`
}

type target struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Datasource json.RawMessage `json:"datasource"`
}

type dashboard struct {
	Inputs []struct {
		Name, Type, PluginID string
	} `json:"__inputs"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

const dashboardPath = "deploy/grafana/laggard-dashboard.json"

func loadDashboard(t *testing.T) (dashboard, string) {
	t.Helper()
	raw := read(t, dashboardPath)
	dec := json.NewDecoder(strings.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if dec.More() {
		t.Fatalf("%s: trailing data after the JSON object", dashboardPath)
	}
	return d, raw
}

func TestDashboard(t *testing.T) {
	d, raw := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want >= 39", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are required", d.UID, d.Title)
	}
	if !slices.ContainsFunc(d.Inputs, func(in struct{ Name, Type, PluginID string }) bool {
		return in.Name == "DS_PROMETHEUS" && in.Type == "datasource" && in.PluginID == "prometheus"
	}) {
		t.Errorf("__inputs lacks the DS_PROMETHEUS prometheus datasource input")
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		q := v.Definition
		var s string
		var obj struct{ Query string }
		if json.Unmarshal(v.Query, &s) == nil {
			q = s
		} else if json.Unmarshal(v.Query, &obj) == nil && obj.Query != "" {
			q = obj.Query
		}
		vars[v.Name] = q
	}
	if got, want := vars["job"], "label_values(laggard_job_exposed_step_ms, job)"; got != want {
		t.Errorf("job variable query %q, want %q", got, want)
	}

	const ds = `"${DS_PROMETHEUS}"`
	ids := map[int]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			switch {
			case p.ID == nil:
				t.Errorf("panel %q has no id", p.Title)
			case ids[*p.ID] != "":
				t.Errorf("panel id %d used by %q and %q", *p.ID, ids[*p.ID], p.Title)
			default:
				ids[*p.ID] = p.Title
			}
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: missing or invalid gridPos %+v", p.Title, p.GridPos)
			}
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
				if !bytes.Contains(p.Datasource, []byte(ds)) {
					t.Errorf("panel %q: datasource %s, want uid %s", p.Title, p.Datasource, ds)
				}
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: query %q: empty expr or missing/duplicate refId %q", p.Title, tg.Expr, tg.RefID)
				}
				refs[tg.RefID] = true
				if !bytes.Contains(tg.Datasource, []byte(ds)) {
					t.Errorf("panel %q query %s: datasource %s, want uid %s", p.Title, tg.RefID, tg.Datasource, ds)
				}
			}
			if p.Repeat != "" {
				if _, ok := vars[p.Repeat]; !ok {
					t.Errorf("panel %q repeats over unknown variable %q", p.Title, p.Repeat)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	// Every metric name anywhere in the dashboard (queries, variables,
	// annotations, descriptions) exists.
	checkMetricNames(t, dashboardPath, raw)

	// The dashboard covers what operators need: each of these metrics is
	// queried by some panel, variable or annotation.
	var queries strings.Builder
	for _, q := range vars {
		queries.WriteString(q + "\n")
	}
	for _, a := range d.Annotations.List {
		queries.WriteString(a.Expr + "\n")
	}
	var collect func(ps []panel)
	collect = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				queries.WriteString(tg.Expr + "\n")
			}
			collect(p.Panels)
		}
	}
	collect(d.Panels)
	used := map[string]bool{}
	for _, m := range metricRef.FindAllString(queries.String(), -1) {
		used[m] = true
	}
	for _, m := range []string{
		"laggard_job_exposed_step_ms", "laggard_job_stage_share", "laggard_job_stage_excess_ms",
		"laggard_job_straggler_rank", "laggard_job_leader_confidence", "laggard_job_headline_info",
		"laggard_job_step_time_change_ratio", "laggard_job_last_change_step", "laggard_job_change_points",
		"laggard_job_label", "laggard_ingest_vectors_total", "laggard_ingest_rejected_total",
		"laggard_ingest_shed_total", "laggard_ingest_queue_depth", "laggard_ingest_queue_capacity",
		"laggard_ingest_commit_seconds_bucket", "laggard_report_seconds_bucket",
		"laggard_detect_evaluations_total", "laggard_detect_evaluation_seconds_bucket",
		"laggard_detect_active_jobs", "laggard_build_info",
	} {
		if !used[m] {
			t.Errorf("no dashboard query uses %s", m)
		}
	}
}

// ---------------------------------------------------------------- YAML structure

var (
	yamlKey       = regexp.MustCompile(`^("[^"]*"|'[^']*'|[A-Za-z0-9_./$-]+):(\s|$)`)
	blockScalarRe = regexp.MustCompile(`:\s*[|>][-+]?\s*(#.*)?$`)
)

// yamlProblems does line-based structural checks of a YAML file: no tabs
// in indentation, even indentation, every line a comment, document marker,
// "key: value", "- item" or block-scalar content, balanced quotes and flow
// brackets, and no duplicate keys within one mapping.
func yamlProblems(rel, text string) []string {
	type mapping struct {
		indent int
		keys   map[string]int
	}
	var probs []string
	bad := func(n int, format string, args ...any) {
		probs = append(probs, fmt.Sprintf("%s:%d: ", rel, n)+fmt.Sprintf(format, args...))
	}
	var stack []mapping
	blockIndent := -1 // >= 0 while inside a block scalar owned by a key at this indent
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		trimmed := strings.TrimLeft(line, " ")
		indent := len(line) - len(trimmed)
		if strings.HasPrefix(trimmed, "\t") {
			bad(n, "tab in indentation")
			continue
		}
		if blockIndent >= 0 {
			if strings.TrimSpace(line) == "" || indent > blockIndent {
				continue
			}
			blockIndent = -1
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if trimmed == "---" {
			stack = nil
			continue
		}
		if indent%2 != 0 {
			bad(n, "odd indentation (%d spaces)", indent)
		}
		// Peel list markers: "- - key: v" opens nested items.
		item := false
		for strings.HasPrefix(trimmed, "- ") || trimmed == "-" {
			item = true
			trimmed = strings.TrimPrefix(strings.TrimPrefix(trimmed, "-"), " ")
			indent += 2
		}
		value := trimmed
		if m := yamlKey.FindStringSubmatch(trimmed); m != nil {
			key := strings.Trim(m[1], `"'`)
			value = strings.TrimSpace(trimmed[len(m[1])+1:])
			for len(stack) > 0 && (stack[len(stack)-1].indent > indent || (item && stack[len(stack)-1].indent == indent)) {
				stack = stack[:len(stack)-1]
			}
			if len(stack) == 0 || stack[len(stack)-1].indent < indent {
				stack = append(stack, mapping{indent: indent, keys: map[string]int{}})
			}
			top := stack[len(stack)-1]
			if prev, dup := top.keys[key]; dup {
				bad(n, "duplicate key %q (first at line %d)", key, prev)
			}
			top.keys[key] = n
			if blockScalarRe.MatchString(trimmed) {
				blockIndent = indent
				continue
			}
		} else if !item {
			bad(n, "not a key, list item, comment or block-scalar line: %q", line)
			continue
		}
		if p := scalarProblem(value); p != "" {
			bad(n, "%s", p)
		}
	}
	return probs
}

// scalarProblem checks that quotes and flow brackets in a value balance.
func scalarProblem(v string) string {
	if c := strings.Index(v, " #"); c >= 0 && !strings.ContainsAny(v[:c], `"'`) {
		v = v[:c]
	}
	v = strings.TrimSpace(v)
	switch {
	case v == "":
	case v[0] == '"':
		if len(v) < 2 || !strings.HasSuffix(v, `"`) || strings.HasSuffix(v, `\"`) && !strings.HasSuffix(v, `\\"`) {
			return "unterminated double-quoted string " + v
		}
	case v[0] == '\'':
		if len(v) < 2 || !strings.HasSuffix(v, "'") {
			return "unterminated single-quoted string " + v
		}
	case v[0] == '[' || v[0] == '{':
		depth, quote := 0, rune(0)
		for _, r := range v {
			switch {
			case quote != 0:
				if r == quote {
					quote = 0
				}
			case r == '"' || r == '\'':
				quote = r
			case r == '[' || r == '{':
				depth++
			case r == ']' || r == '}':
				depth--
			}
		}
		if depth != 0 || quote != 0 {
			return "unbalanced flow collection " + v
		}
	}
	return ""
}

func yamlFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var files []string
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no YAML files under deploy/")
	}
	return files
}

func TestYAMLStructure(t *testing.T) {
	for _, f := range yamlFiles(t) {
		for _, p := range yamlProblems(f, read(t, f)) {
			t.Error(p)
		}
	}
}

// TestYAMLChecker makes sure the line checker catches what it claims to.
func TestYAMLChecker(t *testing.T) {
	for name, bad := range map[string]string{
		"duplicate key":  "a: 1\nb:\n  c: 1\n  c: 2\n",
		"duplicate item": "l:\n  - name: x\n    name: y\n",
		"tab":            "a:\n\tb: 1\n",
		"odd indent":     "a:\n   b: 1\n",
		"stray line":     "a: 1\njust text\n",
		"open quote":     "a: \"x\n",
		"open flow":      "a: [x, y\n",
	} {
		if len(yamlProblems(name, bad)) == 0 {
			t.Errorf("%s: checker accepted %q", name, bad)
		}
	}
	for name, good := range map[string]string{
		"list of maps": "l:\n  - name: x\n    v: 1\n  - name: y\n    v: 2\n",
		"block":        "a: |-\n  x: 1\n  x: 1\nb: 2\n",
		"docs":         "a: 1\n---\na: 2\n",
		"nested items": "a:\n  - - x\n    - y\n",
		"comment":      "a: 1 # b: \"\n",
	} {
		if p := yamlProblems(name, good); len(p) > 0 {
			t.Errorf("%s: checker rejected %q: %v", name, good, p)
		}
	}
}

// ---------------------------------------------------------------- Kubernetes

func TestKubernetesManifests(t *testing.T) {
	root := repoRoot(t)
	kdir := "deploy/kubernetes"
	// Every resource, component and patch path a kustomization names exists.
	var kustomizations []string
	filepath.WalkDir(filepath.Join(root, kdir), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "kustomization.yaml" {
			kustomizations = append(kustomizations, p)
		}
		return nil
	})
	if len(kustomizations) == 0 {
		t.Fatal("no kustomization.yaml")
	}
	listItem := regexp.MustCompile(`^\s*#?\s*-\s+(\S+)\s*$`)
	for _, k := range kustomizations {
		b, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		for _, line := range strings.Split(string(b), "\n") {
			if s, ok := strings.CutSuffix(strings.TrimPrefix(strings.TrimSpace(line), "#"), ":"); ok && !strings.ContainsAny(s, " \t") {
				section = s
				continue
			}
			if section != "resources" && section != "components" {
				continue
			}
			m := listItem.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(k), m[1])); err != nil {
				t.Errorf("%s: %s entry %q: %v", k, section, m[1], err)
			}
		}
	}

	// Each manifest document has apiVersion, kind and metadata.name; the
	// server manifest keeps the properties the docs promise.
	docs := map[string]string{}
	for _, f := range yamlFiles(t) {
		if !strings.HasPrefix(f, kdir+"/") || filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for i, doc := range strings.Split(read(t, f), "\n---\n") {
			kind := field(doc, "kind")
			if kind == "" || field(doc, "apiVersion") == "" || !regexp.MustCompile(`(?m)^metadata:\n(\s+.*\n)*?\s+name: \S+`).MatchString(doc) {
				t.Errorf("%s document %d: needs apiVersion, kind and metadata.name", f, i)
			}
			docs[kind] += doc
		}
	}
	for kind, wants := range map[string][]string{
		"StatefulSet": {
			"replicas: 1", "mountPath: /var/lib/laggard", "path: /healthz", "readinessProbe:", "livenessProbe:",
			"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
			"requests:", "limits:", "volumeClaimTemplates:", "containerPort: 7070",
		},
		"Service":        {"type: ClusterIP", "port: 7070"},
		"ServiceMonitor": {"honorLabels: true", "path: /metrics"},
		"Namespace":      {"name: laggard"},
	} {
		for _, w := range wants {
			if !strings.Contains(docs[kind], w) {
				t.Errorf("%s manifest lacks %q", kind, w)
			}
		}
	}
	if !strings.Contains(read(t, kdir+"/components/scrape-annotations/kustomization.yaml"), `prometheus.io/scrape: "true"`) {
		t.Errorf("scrape-annotations component lacks the prometheus.io/scrape annotation")
	}
}

// field returns the value of a top-level "key: value" line.
func field(doc, key string) string {
	m := regexp.MustCompile(`(?m)^` + key + `:\s*(\S+)`).FindStringSubmatch(doc)
	if m == nil {
		return ""
	}
	return m[1]
}

// ---------------------------------------------------------------- alerts

const (
	rulesPath  = "deploy/prometheus/laggard-alerts.yaml"
	rulesTest  = "deploy/prometheus/laggard-alerts.test.yaml"
	docsPath   = "docs/deploy.md"
	runbookURL = "https://github.com/laggard-dev/laggard/blob/main/docs/deploy.md#"
)

type rule struct {
	name, expr, severity, summary, description, runbook string
	line                                                int
}

// parseRules extracts the alerting rules of a rule file line by line.
func parseRules(t *testing.T, text string) []rule {
	t.Helper()
	var rules []rule
	lines := strings.Split(text, "\n")
	alertRe := regexp.MustCompile(`^(\s*)- alert:\s*(\S+)\s*$`)
	kv := regexp.MustCompile(`^\s*(expr|severity|summary|description|runbook_url):\s*(.*)$`)
	for i := 0; i < len(lines); i++ {
		m := alertRe.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		r := rule{name: m[2], line: i + 1}
		indent := len(m[1])
		for i+1 < len(lines) {
			next := lines[i+1]
			if strings.TrimSpace(next) != "" && len(next)-len(strings.TrimLeft(next, " ")) <= indent {
				break
			}
			i++
			f := kv.FindStringSubmatch(next)
			if f == nil {
				continue
			}
			val := strings.TrimSpace(f[2])
			if blockScalarRe.MatchString(next) { // folded or literal block: gather it
				own := len(next) - len(strings.TrimLeft(next, " "))
				var parts []string
				for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > own) {
					i++
					parts = append(parts, strings.TrimSpace(lines[i]))
				}
				val = strings.TrimSpace(strings.Join(parts, "\n"))
			} else if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') {
				val = val[1 : len(val)-1]
			}
			switch f[1] {
			case "expr":
				r.expr = val
			case "severity":
				r.severity = val
			case "summary":
				r.summary = val
			case "description":
				r.description = val
			case "runbook_url":
				r.runbook = val
			}
		}
		rules = append(rules, r)
	}
	return rules
}

// anchors returns the GitHub-style anchors of the Markdown headings in md.
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
			continue
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

func TestAlertRules(t *testing.T) {
	text := read(t, rulesPath)
	rules := parseRules(t, text)
	if len(rules) == 0 {
		t.Fatalf("%s: no alerts", rulesPath)
	}
	docAnchors := anchors(read(t, docsPath))
	seen := map[string]bool{}
	exprs := map[string]string{}
	for _, r := range rules {
		where := fmt.Sprintf("%s:%d %s", rulesPath, r.line, r.name)
		if seen[r.name] {
			t.Errorf("%s: duplicate alert name", where)
		}
		seen[r.name] = true
		exprs[r.name] = r.expr
		if r.expr == "" {
			t.Errorf("%s: no expr", where)
		}
		if !slices.Contains([]string{"info", "warning", "critical"}, r.severity) {
			t.Errorf("%s: severity %q, want info, warning or critical", where, r.severity)
		}
		if r.summary == "" || r.description == "" {
			t.Errorf("%s: needs summary and description annotations", where)
		}
		anchor, ok := strings.CutPrefix(r.runbook, runbookURL)
		if !ok || anchor != strings.ToLower(r.name) {
			t.Errorf("%s: runbook_url %q, want %s%s", where, r.runbook, runbookURL, strings.ToLower(r.name))
		} else if !docAnchors[anchor] {
			t.Errorf("%s: %s has no heading for anchor #%s", where, docsPath, anchor)
		}
	}
	// Every laggard_* name in the rules (expressions and templates) exists.
	checkMetricNames(t, rulesPath, text)

	// The alerts the deployment guide promises, with their conditions.
	for name, frag := range map[string]string{
		"LaggardStepTimeRegression": "laggard_job_step_time_change_ratio > 1.2",
		"LaggardStragglerRank":      "laggard_job_straggler_rank >= 0 and laggard_job_leader_confidence >= 0.5",
		"LaggardTelemetryLimited":   `laggard_job_label{label="telemetry_limited"} == 1`,
		"LaggardIngestShedding":     "rate(laggard_ingest_shed_total[5m]) > 0",
		"LaggardIngestRejected":     "laggard_ingest_rejected_total",
		"LaggardJobStalled":         "changes(laggard_job_last_step[15m]) == 0",
		"LaggardDetectionErrors":    `rate(laggard_detect_evaluations_total{result="error"}[10m]) > 0`,
		"LaggardEvaluationLag":      "time() - laggard_job_last_evaluation_timestamp_seconds > 300",
	} {
		if e, ok := exprs[name]; !ok {
			t.Errorf("alert %s is missing", name)
		} else if !strings.Contains(e, frag) {
			t.Errorf("alert %s: expr %q does not contain %q", name, e, frag)
		}
	}

	// The unit tests load this file and cover at least these alerts.
	tests := read(t, rulesTest)
	checkMetricNames(t, rulesTest, tests)
	if !strings.Contains(tests, "- laggard-alerts.yaml") {
		t.Errorf("%s does not load laggard-alerts.yaml", rulesTest)
	}
	for _, name := range []string{"LaggardStepTimeRegression", "LaggardStragglerRank"} {
		if !strings.Contains(tests, "alertname: "+name+"\n") {
			t.Errorf("%s has no test for %s", rulesTest, name)
		}
	}
}

// ---------------------------------------------------------------- docs

func TestDocs(t *testing.T) {
	md := read(t, docsPath)
	checkMetricNames(t, docsPath, md)
	a := anchors(md)
	// Links within the document resolve.
	for _, m := range regexp.MustCompile(`\]\(#([a-z0-9_-]+)\)`).FindAllStringSubmatch(md, -1) {
		if !a[m[1]] {
			t.Errorf("%s: link to #%s has no heading", docsPath, m[1])
		}
	}
	// Relative links to repository files resolve.
	root := repoRoot(t)
	for _, m := range regexp.MustCompile(`\]\((\.\./[^)#\s]+)\)`).FindAllStringSubmatch(md, -1) {
		if _, err := os.Stat(filepath.Join(root, "docs", m[1])); err != nil {
			t.Errorf("%s: link %s: %v", docsPath, m[1], err)
		}
	}
	for _, section := range []string{"binary-and-systemd", "container", "kubernetes", "data-directory-and-backups",
		"resource-sizing", "prometheus", "grafana-dashboard", "alerts", "runbooks", "upgrades"} {
		if !a[section] {
			t.Errorf("%s: no section #%s", docsPath, section)
		}
	}
}

// ---------------------------------------------------------------- command lines

// serveFlags returns the flag names defined in cmd/laggard's sources (all
// subcommands together: close enough to catch a misspelt or removed flag),
// so that the deployment command lines cannot drift from the binary.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "cmd", "laggard", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("cmd/laggard sources: %v", err)
	}
	flags := map[string]bool{}
	def := regexp.MustCompile(`\.(?:String|Int|Int64|Bool|Duration|Float64|Uint|Uint64|Func|Text)(?:Var)?\((?:&?[\w.]+,\s*)?"([a-z0-9-]+)"`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			flags[m[1]] = true
		}
	}
	for _, want := range []string{"addr", "data"} {
		if !flags[want] {
			t.Fatalf("flag -%s not found in cmd/laggard (found %v): update serveFlags", want, flags)
		}
	}
	return flags
}

func checkServeArgs(t *testing.T, where string, args []string, flags map[string]bool, addr string) {
	t.Helper()
	if len(args) < 2 || filepath.Base(args[0]) != "laggard" || args[1] != "serve" {
		t.Errorf("%s: command %q, want laggard serve ...", where, args)
		return
	}
	got := map[string]string{}
	for i := 2; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "-")
		if !ok {
			t.Errorf("%s: unexpected argument %q", where, args[i])
			continue
		}
		name = strings.TrimPrefix(name, "-")
		name, val, hasVal := strings.Cut(name, "=")
		if !flags[name] {
			t.Errorf("%s: laggard serve has no flag -%s", where, name)
		}
		if !hasVal && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			i++
			val = args[i]
		}
		got[name] = val
	}
	if got["addr"] != addr || got["data"] != "/var/lib/laggard" {
		t.Errorf("%s: -addr %q -data %q, want -addr %s -data /var/lib/laggard", where, got["addr"], got["data"], addr)
	}
}

func TestDockerfile(t *testing.T) {
	df := read(t, "deploy/Dockerfile")
	for _, want := range []string{
		"golang:1.26-bookworm", "gcr.io/distroless/static-debian12:nonroot", "make build", "EXPOSE 7070",
		`VOLUME ["/var/lib/laggard"]`, "USER 65532:65532", "org.opencontainers.image.source",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindStringSubmatch(df)
	if m == nil {
		t.Fatal("deploy/Dockerfile: no exec-form ENTRYPOINT")
	}
	var args []string
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		t.Fatalf("deploy/Dockerfile ENTRYPOINT %s: %v", m[1], err)
	}
	checkServeArgs(t, "deploy/Dockerfile ENTRYPOINT", args, serveFlags(t), "0.0.0.0:7070")
	if !regexp.MustCompile(`(?m)^HEALTHCHECK`).MatchString(df) && !strings.Contains(df, "No HEALTHCHECK") {
		t.Errorf("deploy/Dockerfile: neither a HEALTHCHECK nor the comment explaining its absence")
	}
	ignore := read(t, "deploy/Dockerfile.dockerignore")
	if !regexp.MustCompile(`(?m)^\.git$`).MatchString(ignore) {
		t.Errorf("deploy/Dockerfile.dockerignore does not exclude .git")
	}
}

func TestSystemdUnit(t *testing.T) {
	unit := read(t, "deploy/systemd/laggard.service")
	section := ""
	keys := map[string][]string{}
	for i, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Errorf("laggard.service:%d: not KEY=VALUE in a section: %q", i+1, line)
				continue
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	for k, want := range map[string]string{
		"Service.StateDirectory":  "laggard",
		"Service.ProtectSystem":   "strict",
		"Service.NoNewPrivileges": "yes",
		"Service.PrivateTmp":      "yes",
		"Service.Restart":         "on-failure",
		"Install.WantedBy":        "multi-user.target",
	} {
		if !slices.Contains(keys[k], want) {
			t.Errorf("laggard.service: %s=%v, want %s", k, keys[k], want)
		}
	}
	if len(keys["Service.RestrictAddressFamilies"]) == 0 {
		t.Errorf("laggard.service: no RestrictAddressFamilies")
	}
	if len(keys["Service.DynamicUser"]) == 0 && len(keys["Service.User"]) == 0 {
		t.Errorf("laggard.service: neither DynamicUser nor User")
	}
	exec := keys["Service.ExecStart"]
	if len(exec) != 1 {
		t.Fatalf("laggard.service: ExecStart %q, want exactly one", exec)
	}
	args := strings.Fields(exec[0])
	if args[0] != "/usr/local/bin/laggard" {
		t.Errorf("laggard.service: ExecStart runs %s, want /usr/local/bin/laggard", args[0])
	}
	checkServeArgs(t, "laggard.service ExecStart", args, serveFlags(t), "127.0.0.1:7070")
}

// ---------------------------------------------------------------- external tools

// TestTools runs the real validators when LAGGARD_DEPLOY_TOOLS=1.
func TestTools(t *testing.T) {
	if os.Getenv("LAGGARD_DEPLOY_TOOLS") != "1" {
		t.Skip("set LAGGARD_DEPLOY_TOOLS=1 to run promtool and kubectl (docs/deploy.md)")
	}
	root := repoRoot(t)
	// A copy of deploy/kubernetes with both optional components enabled.
	withComponents := filepath.Join(t.TempDir(), "kubernetes")
	if err := os.CopyFS(withComponents, os.DirFS(filepath.Join(root, "deploy", "kubernetes"))); err != nil {
		t.Fatal(err)
	}
	kpath := filepath.Join(withComponents, "kustomization.yaml")
	k, err := os.ReadFile(kpath)
	if err != nil {
		t.Fatal(err)
	}
	enabled := regexp.MustCompile(`(?m)^#(components:|  - components/\S+)$`).ReplaceAll(k, []byte("$1"))
	if bytes.Count(enabled, []byte("\n  - components/")) != 2 {
		t.Fatalf("%s: expected two commented-out components", kpath)
	}
	if err := os.WriteFile(kpath, enabled, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{"promtool", "check", "rules", rulesPath},
		{"promtool", "test", "rules", rulesTest},
		{"kubectl", "kustomize", "deploy/kubernetes"},
		{"kubectl", "kustomize", withComponents},
	} {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
			continue
		}
		if c[0] == "kubectl" && c[2] == withComponents {
			for _, kind := range []string{"kind: ServiceMonitor", "prometheus.io/scrape", "namespace: laggard"} {
				if !bytes.Contains(out, []byte(kind)) {
					t.Errorf("kustomize with components: output lacks %q", kind)
				}
			}
		}
	}
}
