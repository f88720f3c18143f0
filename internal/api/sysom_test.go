package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// fakeSysom answers from fixed values and records the requests.
type fakeSysom struct {
	err  error
	reqs []any
}

var fakeProfile = &stack.Profile{Rank: 1, StartNS: 1e18, EndNS: 1e18 + 60e9, Hz: 99, Ratio: 0.1,
	Funcs:  []stack.Func{{Name: "main", Kind: stack.Symbol}, {Name: "d_lookup", Kind: stack.Kernel, Module: "kernel"}},
	Stacks: []stack.Stack{{Frames: []int32{0, 1}, Count: 7}, {Frames: []int32{0}, Count: 3}}, Total: 10}

func (f *fakeSysom) Report(_ context.Context, req analysis.SysomRequest) (*analysis.SysomReport, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	return &analysis.SysomReport{Report: &sysom.Report{SlowRanks: []sysom.SlowRank{{Group: "world", Rank: 1, Z: 9}}, Waterline: []sysom.WaterlineFlag{},
		Diagnoses: []sysom.Diagnosis{}, Notes: []string{}}, Window: analysis.SysomWindow{FromNS: 1, ToNS: 2, Basis: analysis.BasisRequested}}, nil
}

func (f *fakeSysom) FlameGraph(_ context.Context, req analysis.FlameRequest) (*analysis.FlameGraph, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	return &analysis.FlameGraph{Rank: req.Sel.Rank, Total: 10, Root: &analysis.FlameNode{Name: "root", Value: 10,
		Children: []*analysis.FlameNode{{Name: "main", Kind: "symbol", Value: 10, Self: 3}}}}, nil
}

func (f *fakeSysom) DiffGraph(_ context.Context, req analysis.DiffRequest) (*analysis.DiffGraph, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	return &analysis.DiffGraph{A: analysis.DiffSide{Label: "rank 1", Total: 10}, B: analysis.DiffSide{Label: "rank 0", Total: 8},
		Root: &analysis.DiffNode{Name: "root", A: 10, B: 8}}, nil
}

func (f *fakeSysom) ExportProfile(_ context.Context, req analysis.FlameRequest) (*stack.Profile, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	return fakeProfile, nil
}

func (f *fakeSysom) OSStats(_ context.Context, req analysis.OSRequest) (*analysis.OSSeries, error) {
	f.reqs = append(f.reqs, req)
	if f.err != nil {
		return nil, f.err
	}
	return &analysis.OSSeries{Series: []analysis.OSSeriesEntry{{Name: "softirqs", Rank: -1, CPU: 2, Device: "NET_RX",
		Points: []analysis.OSPoint{{TNS: 1751371205000000001, Value: 1.5}}}}, Absent: []analysis.OSAbsence{}}, nil
}

func sysomServer(t *testing.T, sy Sysom) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutJob(&signal.Job{ID: "sj", Name: "sj", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	New(Deps{Catalog: catalog.New(st), Reader: st, Log: quiet, Sysom: sy}).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(func() { ts.Close(); st.Close() })
	return ts.URL + "/api/v1/jobs/"
}

func TestSysomRoutes(t *testing.T) {
	f := &fakeSysom{}
	base := sysomServer(t, f)
	for _, tc := range []struct {
		path   string
		status int
		field  string
		has    string
	}{
		{"sj/sysom", 200, "", `"slow_ranks":[{"group":"world","rank":1`},
		{"sj/sysom", 200, "", `"window":{"from_ns":1,"to_ns":2`},
		{"sj/sysom?from_ns=abc", 400, "from_ns", ""},
		{"sj/sysom?base_from_ns=9&base_to_ns=3", 400, "base_to_ns", ""},
		{"nope/sysom", 404, "", "unknown job"},
		{"sj/flamegraph?rank=1", 200, "", `"root":{"name":"root","value":10,"self":0,"children":[{"name":"main","kind":"symbol","value":10,"self":3}]}`},
		{"sj/flamegraph?group=world&from_ns=5&to_ns=9", 200, "", `"total":10`},
		{"sj/flamegraph", 400, "rank", "group=G"},
		{"sj/flamegraph?rank=1&group=x", 400, "group", ""},
		{"nope/flamegraph?rank=1", 404, "", ""},
		{"sj/flamegraph/diff?a_rank=1&b_rank=0", 200, "", `"a":{"label":"rank 1","total":10`},
		{"sj/flamegraph/diff?rank=1&base_from_ns=5&base_to_ns=9", 200, "", `"b":{"label":"rank 0"`},
		{"sj/flamegraph/diff?a_rank=1", 400, "b_rank", ""},
		{"sj/flamegraph/diff", 400, "a_rank", ""},
		{"sj/profile?format=json&rank=1", 400, "format", ""},
		{"sj/profile", 400, "rank", ""},
		{"sj/osstats?rank=zz", 400, "rank", ""},
		{"sj/osstats?name=softirqs&rank=-1", 200, "", `"points":[[1751371205000000001,1.5]]`},
		{"nope/osstats", 404, "", ""},
	} {
		res, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var eb ErrorBody
		_ = json.Unmarshal(raw, &eb)
		if res.StatusCode != tc.status || eb.Field != tc.field || !strings.Contains(string(raw), tc.has) {
			t.Errorf("GET %s: %d field %q %s; want %d field %q containing %s", tc.path, res.StatusCode, eb.Field, raw, tc.status, tc.field, tc.has)
		}
	}
	// Requests reach the adapter parsed.
	var sawGroup, sawBase bool
	for _, r := range f.reqs {
		switch r := r.(type) {
		case analysis.FlameRequest:
			sawGroup = sawGroup || (r.Sel.Group == "world" && r.Window.FromNS == 5 && r.Window.ToNS == 9)
		case analysis.DiffRequest:
			sawBase = sawBase || (r.Baseline && r.Window.BaseFromNS == 5)
		}
	}
	if !sawGroup || !sawBase {
		t.Errorf("requests not parsed as expected: %+v", f.reqs)
	}
}

func TestSysomProfileExport(t *testing.T) {
	base := sysomServer(t, &fakeSysom{})
	res, err := http.Get(base + "sj/profile?rank=1")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Content-Disposition"), "sj-rank1-") {
		t.Fatalf("pprof export: %d %q %s", res.StatusCode, res.Header.Get("Content-Disposition"), raw)
	}
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("exported pprof does not parse: %v", err)
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[0]
	}
	if total != 10 {
		t.Errorf("pprof samples %d, first values %v", len(p.Sample), p.Sample[0].Value)
	}
	res, err = http.Get(base + "sj/profile?rank=1&format=collapsed")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(raw), "main;d_lookup 7") {
		t.Errorf("collapsed export: %d %s", res.StatusCode, raw)
	}
}

func TestSysomErrorsAndOff(t *testing.T) {
	f := &fakeSysom{err: &analysis.SysomLimitError{What: "sample records", Limit: 5}}
	base := sysomServer(t, f)
	for _, p := range []string{"sj/sysom", "sj/flamegraph?rank=1", "sj/flamegraph/diff?rank=1", "sj/profile?rank=1", "sj/osstats"} {
		res, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), "5 sample records") {
			t.Errorf("GET %s over the cap: %d %s", p, res.StatusCode, raw)
		}
	}
	f.err = fmt.Errorf("job %q: %w", "sj", analysis.ErrNoStacks)
	if res, _ := http.Get(base + "sj/sysom"); res.StatusCode != 404 {
		t.Errorf("no stacks: %d, want 404", res.StatusCode)
	}
	off := sysomServer(t, nil)
	res, err := http.Get(off + "sj/flamegraph?rank=1")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 404 || !strings.Contains(string(raw), "not enabled") {
		t.Errorf("SysOM-AI off: %d %s", res.StatusCode, raw)
	}
}
