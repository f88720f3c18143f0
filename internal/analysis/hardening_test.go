package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/store"
)

// Issue 6 read side: whatever the store holds — steps far apart, a huge
// declared world, absurd values, steps near the int64 limit — a report is
// a report or a clear error, sized by what was stored.

// storedJob opens a real store holding job and vs (the store keeps what
// older versions accepted; only the codec limits what it can hold).
func storedJob(t testing.TB, job *signal.Job, vs ...[]stagevec.Vector) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutJob(job); err != nil {
		t.Fatal(err)
	}
	for _, b := range vs {
		if err := st.Append(job.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// encodes fails unless rep is a report that JSON-encodes (an encode
// error used to become an empty 200).
func encodes(t testing.TB, rep *Report) []byte {
	t.Helper()
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("report does not encode: %v", err)
	}
	return b
}

func hasNote(rep *Report, sub string) bool {
	for _, n := range rep.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// D1: one vector at the largest step ingest takes (2^48−1; 2^62 before
// incarnations took the bits above it) after steps 1..100. Windows are counted in
// stored steps, and an explicit window costs what it stores, not its
// arithmetic span: every report below is a report (the explicit ones were
// 413 "window of 4611686018427387904 steps").
func TestD1_FarStepKeepsReportsWorking(t *testing.T) {
	d := sim.DDP{Ranks: 4, Steps: 101, Seed: 1}
	vs := d.Vectors()[4:] // steps 1..100
	far := vs[0]
	far.Step = stagevec.MaxStep
	st := storedJob(t, d.Job("j"), vs, []stagevec.Vector{far})
	a := New(st, Limits{})
	for _, c := range []struct {
		name     string
		req      Request
		from, to int64
	}{
		{"last=50", Request{Last: 50}, 52, stagevec.MaxStep},
		{"last=2", Request{Last: 2}, 100, stagevec.MaxStep},
		{"last=200", Request{Last: 200}, 1, stagevec.MaxStep},
		{"from=0", Request{From: ptr(0)}, 1, stagevec.MaxStep},
		{"from=0&to=2^62", Request{From: ptr(0), To: ptr(1 << 62)}, 1, stagevec.MaxStep},
		{"from=90&to=max", Request{From: ptr(90), To: ptr(math.MaxInt64)}, 90, stagevec.MaxStep},
		{"default", Request{}, -1, -1}, // ends at MaxStep, or at 100 where the far vector is refused
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.Job = "j"
			rep, err := a.Run(context.Background(), c.req)
			if err != nil {
				t.Fatalf("%v", err)
			}
			encodes(t, rep)
			if (c.to >= 0 && rep.Window.To != c.to) || (c.from >= 0 && rep.Window.From != c.from) {
				t.Fatalf("window %+v, want %d–%d", rep.Window, c.from, c.to)
			}
			// The far vector is in the window: it is analyzed (a sparse
			// step is one step, not 2^48) or, where the ingest bound on
			// steps rejects it, left out with a note.
			g := rep.Groups[0].Report
			stored := int64(0)
			for s := int64(1); s <= 100; s++ {
				if s >= rep.Window.From && s <= rep.Window.To {
					stored++
				}
			}
			far := int64(0)
			if rep.Window.To == stagevec.MaxStep {
				far = 1
			}
			if n := int64(g.NumSteps); n != stored+far && !(n == stored && hasNote(rep, "left out")) {
				t.Fatalf("%d steps analyzed of %d stored in %+v (notes %q)", n, stored+1, rep.Window, rep.Notes)
			}
		})
	}
}

// D1/D12: an explicit window is refused when what it STORES exceeds the
// cell limit, whatever its span.
func TestD1_ExplicitWindowCostIsStoredCells(t *testing.T) {
	d := sim.DDP{Ranks: 4, Steps: 100, Seed: 1}
	vs := d.Vectors()
	// 4 ranks × 6 stages = 24 cells per stored step: 50 steps fit.
	a := New(storedJob(t, d.Job("j"), vs), Limits{MaxCells: 24 * 50})
	if _, err := a.Run(context.Background(), Request{Job: "j", From: ptr(0), To: ptr(49)}); err != nil {
		t.Fatalf("50 stored steps: %v", err)
	}
	var tl *TooLargeError
	_, err := a.Run(context.Background(), Request{Job: "j", From: ptr(0), To: ptr(50)})
	if !errors.As(err, &tl) {
		t.Fatalf("51 stored steps: %v, want TooLargeError", err)
	}
	if tl.Steps <= 0 || tl.Cells <= tl.Limit || !strings.Contains(err.Error(), "stores") {
		t.Fatalf("error %+v %q does not state the stored size", tl, err)
	}
}

// D12: with more stored cells than the limit, from=0 is 413 — before and
// after a vector at step 2^63−1 is stored (its span overflowed int64 and
// let the window through).
func TestD12_MaxStepDoesNotOpenTheWindow(t *testing.T) {
	d := sim.DDP{Ranks: 4, Steps: 100, Seed: 1}
	vs := d.Vectors()
	st := storedJob(t, d.Job("j"), vs)
	lim := Limits{MaxCells: 24 * 50}
	check := func(when string) {
		t.Helper()
		for _, req := range []Request{{From: ptr(0)}, {From: ptr(0), To: ptr(math.MaxInt64)}, {To: ptr(math.MaxInt64)}} {
			req.Job = "j"
			var tl *TooLargeError
			if _, err := New(st, lim).Run(context.Background(), req); !errors.As(err, &tl) {
				t.Errorf("%s: from=%v to=%v: %v, want TooLargeError", when, req.From, req.To, err)
			}
		}
		// last=N is counted in stored steps and the default window shrinks.
		for _, req := range []Request{{Last: 10}, {}} {
			req.Job = "j"
			rep, err := New(st, lim).Run(context.Background(), req)
			if err != nil {
				t.Fatalf("%s: %+v: %v", when, req, err)
			}
			encodes(t, rep)
		}
	}
	check("before")
	top := vs[0]
	top.Step = math.MaxInt64
	if err := st.Append("j", []stagevec.Vector{top}); err != nil {
		t.Fatal(err)
	}
	check("after a step 2^63-1 is stored")
}

// D12: window arithmetic saturates instead of wrapping.
func TestD12_SaturatingWindowArithmetic(t *testing.T) {
	for _, c := range []struct{ a, b, sum int64 }{
		{math.MaxInt64, 2, math.MaxInt64},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{0, -8, -8},
		{math.MinInt64 + 3, -8, math.MinInt64},
		{-5, 3, -2},
	} {
		if got := addSat(c.a, c.b); got != c.sum {
			t.Errorf("addSat(%d, %d) = %d, want %d", c.a, c.b, got, c.sum)
		}
	}
}

// D2b: a job declaring 2^20 ranks with 6 stored vectors gives a small
// report: the window holds the ranks that sent data (and a bounded sample
// of the silent ones), and the report says the rest were left out. It was
// a 152 MB report listing 2^20 ranks.
func TestD2b_HugeDeclaredWorldSmallReport(t *testing.T) {
	job := &signal.Job{ID: "big", WorldSize: 1 << 20, Schema: stagevec.DefaultSchema()}
	var vs []stagevec.Vector
	for i := range 6 {
		vs = append(vs, stagevec.Vector{Step: int64(i), Rank: i * 1000, Durations: []float64{1, 10, 20, 2, 3, 0.5}, WallMS: 36.5})
	}
	st := storedJob(t, job, vs)
	for _, req := range []Request{{}, {Last: 200}, {From: ptr(0)}} {
		req.Job = "big"
		rep, err := New(st, Limits{}).Run(context.Background(), req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		b := encodes(t, rep)
		g := rep.Groups[0]
		if len(b) > 256<<10 || len(g.Report.Ranks) > 6+stagefrontier.MaxAbsentRanks {
			t.Fatalf("%+v: %d-byte report with %d ranks", req, len(b), len(g.Report.Ranks))
		}
		if g.NumRanks != 1<<20 {
			t.Errorf("group size %d, want the declared 2^20", g.NumRanks)
		}
		if !hasNote(rep, "sent nothing") {
			t.Errorf("no note on the left-out silent ranks: %q", rep.Notes)
		}
		if n := len(g.Report.Quality.MissingRanks); n == 0 || n > stagefrontier.MaxAbsentRanks {
			t.Errorf("%d missing ranks listed", n)
		}
	}
}

// D5 (read side): vectors stored with huge finite values (1e308, accepted
// by older versions) are left out with a note; the report is a report and
// encodes. Before, stage sums overflowed to ±Inf: the engine refused the
// window (500), or the JSON encoder failed on an infinite total.
func TestD5_HugeStoredValuesLeftOut(t *testing.T) {
	d := sim.DDP{Ranks: 4, Steps: 60, Seed: 1}
	vs := d.Vectors()
	huge := []stagevec.Vector{vs[len(vs)-1], vs[len(vs)-2], vs[len(vs)-3]}
	for i := range huge {
		huge[i].Durations = append([]float64(nil), huge[i].Durations...)
	}
	huge[0].Durations[2] = 1e308 // one stage: sums of two such overflow
	huge[1].Durations[1], huge[1].Durations[2] = 1e308, 1e308
	huge[1].WallMS = math.MaxFloat64
	huge[2].WallMS = 1e308
	st := storedJob(t, d.Job("j"), vs, huge)
	for _, req := range []Request{{}, {Last: 5}, {From: ptr(0)}, {Last: 1}} {
		req.Job = "j"
		rep, err := New(st, Limits{}).Run(context.Background(), req)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		encodes(t, rep)
		if !hasNote(rep, "left out") {
			t.Errorf("%+v: no note on the vectors left out: %q", req, rep.Notes)
		}
		for _, g := range rep.Groups {
			if x := g.Report.ExposedMS; math.IsInf(x, 0) || math.IsNaN(x) || x > 1e12 {
				t.Errorf("%+v: exposed %v", req, x)
			}
		}
	}
}

// D5: a panic inside analysis is an error (and counted), never a crash.
func TestD5_PanicIsAnError(t *testing.T) {
	a := New(panicSource{}, Limits{})
	var logs strings.Builder
	a.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	_, err := a.Run(context.Background(), Request{Job: "j"})
	if err == nil || !strings.Contains(err.Error(), "internal error") {
		t.Fatalf("err = %v", err)
	}
	if a.Panics() != 1 {
		t.Fatalf("panics = %d", a.Panics())
	}
	if !strings.Contains(logs.String(), "analysis panicked") || !strings.Contains(logs.String(), "hardening_test.go") {
		t.Fatalf("panic not logged with its stack: %q", logs.String())
	}
}

type panicSource struct{ Source }

func (panicSource) Job(string) (*signal.Job, error) { panic("boom") }

// D2b: groupsOf counts role groups from the joined ranks only; it must
// agree with Job.Grouping, which walks every declared rank.
func TestD2b_GroupsOfMatchesGrouping(t *testing.T) {
	pp := func(r, stage int) signal.Rank { return signal.Rank{Rank: r, Role: signal.Role{PP: stage}} }
	for _, ranks := range [][]signal.Rank{
		nil,
		{pp(0, 0), pp(1, 0)},
		{pp(0, 0), pp(1, 1), pp(3, 0)},
		{pp(1, 1), pp(2, 1)},
		{pp(0, 0), pp(1, 1), pp(2, 0), pp(3, 1), pp(4, 0), pp(5, 1), pp(6, 0), pp(7, 1)},
	} {
		job := &signal.Job{ID: "g", WorldSize: 8, Schema: stagevec.DefaultSchema(), Ranks: ranks}
		want := map[string]int{}
		for _, g := range job.Grouping() {
			want[g]++
		}
		got := map[string]int{}
		for _, g := range groupsOf(job) {
			got[g.key] = g.ranks
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ranks %v: groupsOf %v, Grouping %v", ranks, got, want)
		}
	}
}

// BenchmarkD2b_HugeDeclaredWorld: the default report of a job declaring
// 2^20 ranks with 6 stored vectors (was 3.1 s and 152 MB).
func BenchmarkD2b_HugeDeclaredWorld(b *testing.B) {
	job := &signal.Job{ID: "big", WorldSize: 1 << 20, Schema: stagevec.DefaultSchema()}
	var vs []stagevec.Vector
	for i := range 6 {
		vs = append(vs, stagevec.Vector{Step: int64(i), Rank: i * 1000, Durations: []float64{1, 10, 20, 2, 3, 0.5}, WallMS: 36.5})
	}
	src := MemSourceOf(job, vs)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		rep, err := New(src, Limits{}).Run(context.Background(), Request{Job: "big"})
		if err != nil {
			b.Fatal(err)
		}
		out, _ := json.Marshal(rep)
		size = len(out)
	}
	b.ReportMetric(float64(size), "report-bytes")
}
