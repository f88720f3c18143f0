package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/symbolize"
)

var soT0 = time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC).UnixNano()

// sysomJob is a 4-rank job stored like the agent ships it: every 5 s one
// stack batch per rank and one OS batch, one all-reduce per 1 s
// iteration. From hotFrom on, rank 2's training thread also runs a
// logger that walks paths (d_lookup) and enters the all-reduce 30 ms
// late: a CPU-layer straggler (§5.4 case c's shape).
type sysomJob struct {
	minutes int
	hotFrom int64 // ns; 0 none
}

func sym(names ...string) []stack.Frame { // root first in, leaf first out
	fr := make([]stack.Frame, len(names))
	for i, n := range names {
		fr[len(names)-1-i] = stack.Frame{Kind: stack.Symbol, Func: n, Mapping: -1}
	}
	return fr
}

func (j sysomJob) write(t *testing.T, st *store.Store) {
	t.Helper()
	end := soT0 + int64(j.minutes)*60e9
	var calls []collective.Call
	var seq int64
	for it := soT0; it < end; it += 1e9 {
		enter := map[int]int64{}
		last := int64(0)
		for r := range 4 {
			e := it + 50e6 + int64(r)*10e3
			if j.hotFrom > 0 && it >= j.hotFrom && r == 2 {
				e += 30e6
			}
			enter[r] = e
			last = max(last, e)
		}
		for r := range 4 {
			calls = append(calls, collective.Call{Rank: r, Comm: "world", Seq: seq, Op: collective.AllReduce, Bytes: 1 << 20, Peer: -1, Root: -1,
				EnterNS: enter[r], ReturnNS: last + 5e6, DevStartNS: enter[r], DevEndNS: last + 5e6, Step: seq})
		}
		seq++
	}
	var comms []collective.Comm
	for r := range 4 {
		comms = append(comms, collective.Comm{ID: "world", Size: 4, Rank: r, CommRank: r, Ranks: []int{0, 1, 2, 3}, Backend: "gloo"})
	}
	if _, err := st.AppendCollectives("sj", &collective.Batch{Comms: comms, Calls: calls}); err != nil {
		t.Fatal(err)
	}
	for w := soT0; w < end; w += 5e9 {
		b := &stack.Batch{Node: "n1", StartNS: w, EndNS: w + 5e9, Hz: 99, Ratio: 1}
		for r := range 4 {
			add := func(n int64, fr []stack.Frame) {
				b.Samples = append(b.Samples, stack.Sample{Rank: r, PID: 100 + r, TID: 100 + r, Comm: "python", Frames: fr, Count: n})
			}
			add(200, sym("main", "train_step", "forward"))
			add(200, sym("main", "train_step", "backward"))
			add(50, sym("main", "dataloader", "read"))
			if j.hotFrom > 0 && w >= j.hotFrom && r == 2 {
				add(120, sym("main", "train_step", "log_stats", "vfs_statx", "d_lookup"))
			}
		}
		if _, err := st.AppendStacks("sj", b); err != nil {
			t.Fatal(err)
		}
		ob := &osstat.Batch{Node: "n1", StartNS: w, EndNS: w + 5e9, Absent: []osstat.Absence{{Source: osstat.SrcNVML, Reason: "no GPU"}}}
		for c := range 4 {
			ob.Points = append(ob.Points, osstat.Point{Name: osstat.SoftIRQs, Rank: -1, CPU: c, Device: "NET_RX", Value: 100})
		}
		for r := range 4 {
			ob.Points = append(ob.Points, osstat.Point{Name: osstat.RunQueueWait, Rank: r, CPU: -1, Value: 0.001})
		}
		if err := st.AppendOSStats("sj", ob); err != nil {
			t.Fatal(err)
		}
	}
}

func newSysomStore(t *testing.T, j sysomJob, lim SysomLimits) (*store.Store, *Sysom) {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.PutJob(&signal.Job{ID: "sj", Name: "sj", WorldSize: 4, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		t.Fatal(err)
	}
	j.write(t, st)
	syms, err := symbolize.OpenStore(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSysom(st, symbolize.NewResolver(syms, symbolize.ResolverOptions{}), DefaultSysomConfig(), lim)
	if err != nil {
		t.Fatal(err)
	}
	return st, s
}

func TestSysomReportStraggler(t *testing.T) {
	hot := soT0 + 15*60e9
	_, s := newSysomStore(t, sysomJob{minutes: 20, hotFrom: hot}, SysomLimits{})
	rep, err := s.Report(context.Background(), SysomRequest{Job: "sj", Window: WindowRequest{NowNS: soT0 + 21*60e9}})
	if err != nil {
		t.Fatal(err)
	}
	w := rep.Window
	end := soT0 + 20*60e9
	if w.Basis != BasisLatest || w.ToNS != end || w.FromNS != end-300e9 {
		t.Errorf("window %+v: want the latest 5 min ending at %d", w, end)
	}
	if w.BaseBasis != BasisFirstSteady || w.BaseFromNS != soT0+120e9 || w.BaseToNS != soT0+420e9 {
		t.Errorf("baseline %s [%d, %d): want first_steady [T0+2m, T0+7m)", w.BaseBasis, w.BaseFromNS-soT0, w.BaseToNS-soT0)
	}
	if w.Ranks != 4 || w.BaseRanks != 4 || w.Calls != 300*4 || w.OSBatches != 60 {
		t.Errorf("read: %+v", w)
	}
	if len(rep.SlowRanks) == 0 || rep.SlowRanks[0].Rank != 2 {
		t.Errorf("slow ranks %+v: want rank 2", rep.SlowRanks)
	}
	flagged := false
	for _, f := range rep.Waterline {
		if f.Rank == 2 && f.Func == "d_lookup" {
			flagged = true
		}
		if f.Rank != 2 {
			t.Errorf("waterline flags healthy rank %d (%s)", f.Rank, f.Func)
		}
	}
	if !flagged {
		t.Errorf("waterline %+v: want rank 2's d_lookup above the group's waterline", rep.Waterline)
	}
	if len(rep.Diagnoses) == 0 || rep.Diagnoses[0].Rank != 2 || rep.Diagnoses[0].Layer != "cpu" {
		t.Errorf("diagnoses %+v: want rank 2 at the CPU layer", rep.Diagnoses)
	}
}

func TestSysomIterationTime(t *testing.T) {
	_, s := newSysomStore(t, sysomJob{minutes: 8}, SysomLimits{})
	var calls []collective.Call
	_ = s.src.ScanCalls("sj", store.CallQuery{FromNS: soT0, ToNS: soT0 + 60e9, Rank: -1}, func(c *collective.Call) error {
		calls = append(calls, *c)
		return nil
	})
	j, _ := s.src.Job("sj")
	ms, note := s.iterMs(j, IncNewest, calls)
	if math.Abs(ms-1000) > 1 || note != "" {
		t.Errorf("iteration time %.3f ms (%q), want 1000", ms, note)
	}
	if ms, note := s.iterMs(j, IncNewest, nil); ms != 0 || !strings.Contains(note, "no collective calls") {
		t.Errorf("no calls: %v %q", ms, note)
	}
}

func TestSysomBaselineChoice(t *testing.T) {
	for _, tc := range []struct {
		minutes  int
		basis    string
		from, to int64 // offsets from T0
	}{
		{20, BasisFirstSteady, 120e9, 420e9},
		{9, BasisPreceding, 0, 240e9}, // [4m, 9m): too young for warm-up + 5 min before it
		{6, BasisNone, 0, 0},          // [1m, 6m): 1 min before it, under half a window
	} {
		_, s := newSysomStore(t, sysomJob{minutes: tc.minutes}, SysomLimits{})
		j, _ := s.src.Job("sj")
		w, err := s.resolve(j, WindowRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := [2]int64{w.BaseFromNS, w.BaseToNS}
		want := [2]int64{tc.from, tc.to}
		if tc.basis != BasisNone {
			want = [2]int64{soT0 + tc.from, soT0 + tc.to}
		}
		if w.BaseBasis != tc.basis || got != want {
			t.Errorf("%d min: baseline %s %v, want %s %v", tc.minutes, w.BaseBasis, got, tc.basis, want)
		}
	}
}

func TestSysomLimitsAndErrors(t *testing.T) {
	_, s := newSysomStore(t, sysomJob{minutes: 8}, SysomLimits{MaxSamples: 50})
	_, err := s.Report(context.Background(), SysomRequest{Job: "sj"})
	var le *SysomLimitError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), "50 sample records") {
		t.Errorf("over the cap: %v; want a SysomLimitError naming 50", err)
	}
	_, s = newSysomStore(t, sysomJob{minutes: 8}, SysomLimits{})
	if _, err := s.Report(context.Background(), SysomRequest{Job: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	_, err = s.Report(context.Background(), SysomRequest{Job: "sj", Window: WindowRequest{FromNS: soT0 - 600e9, ToNS: soT0 - 300e9}})
	if !errors.Is(err, ErrNoStacks) || !errors.Is(err, ErrNoData) {
		t.Errorf("empty window: %v", err)
	}
	if _, err := s.FlameGraph(context.Background(), FlameRequest{Job: "sj", Sel: Selection{Rank: -1, Group: "dp9"}}); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "dp9") {
		t.Errorf("unknown group: %v", err)
	}
	if _, err := s.FlameGraph(context.Background(), FlameRequest{Job: "sj", Sel: Selection{Rank: 7}}); !errors.Is(err, ErrNoStacks) {
		t.Errorf("rank without stacks: %v", err)
	}
}

func TestSysomFlameAndDiff(t *testing.T) {
	hot := soT0 + 5*60e9
	_, s := newSysomStore(t, sysomJob{minutes: 10, hotFrom: hot}, SysomLimits{})
	ctx := context.Background()
	win := WindowRequest{FromNS: hot, ToNS: hot + 60e9, NoBaseline: true}
	fg, err := s.FlameGraph(ctx, FlameRequest{Job: "sj", Sel: Selection{Rank: 2}, Window: win})
	if err != nil {
		t.Fatal(err)
	}
	// 12 windows × (200+200+50+120) samples.
	if fg.Total != 12*570 || fg.Root == nil || fg.Root.Value != fg.Total || fg.Rank != 2 || fg.Hz != 99 {
		t.Fatalf("flame graph: total %d rank %d hz %d root %+v", fg.Total, fg.Rank, fg.Hz, fg.Root)
	}
	if n := find(fg.Root, "d_lookup"); n == nil || n.Value != 12*120 || n.Self != 12*120 || n.Kind != "symbol" {
		t.Errorf("d_lookup node %+v", n)
	}
	g, err := s.FlameGraph(ctx, FlameRequest{Job: "sj", Sel: Selection{Rank: -1, Group: "world"}, Window: win})
	if err != nil || g.Total != 12*(4*450+120) || g.Group != "world" || g.Rank != -1 {
		t.Fatalf("group flame graph: %v %+v", err, g)
	}
	all, err := s.FlameGraph(ctx, FlameRequest{Job: "sj", Sel: Selection{Rank: -1, Group: GroupAll}, Window: win})
	if err != nil || all.Total != g.Total {
		t.Fatalf("all ranks: %v %+v", err, all)
	}
	// Straggler against a healthy peer over one window.
	d, err := s.DiffGraph(ctx, DiffRequest{Job: "sj", A: Selection{Rank: 2}, B: Selection{Rank: 0}, Window: win})
	if err != nil {
		t.Fatal(err)
	}
	if d.A.Total != 12*570 || d.B.Total != 12*450 || d.A.Label != "rank 2" || d.B.Label != "rank 0" {
		t.Errorf("diff sides %+v %+v", d.A, d.B)
	}
	if n := findDiff(d.Root, "d_lookup"); n == nil || n.A != 12*120 || n.B != 0 {
		t.Errorf("diff d_lookup %+v", n)
	}
	// Rank 2 now against its own baseline (the window before, preceding).
	d, err = s.DiffGraph(ctx, DiffRequest{Job: "sj", A: Selection{Rank: 2}, B: Selection{Rank: 2}, Baseline: true,
		Window: WindowRequest{FromNS: hot, ToNS: hot + 60e9, BaseFromNS: soT0 + 60e9, BaseToNS: soT0 + 120e9}})
	if err != nil {
		t.Fatal(err)
	}
	if d.B.Total != 12*450 || !strings.Contains(d.B.Label, "baseline") || d.B.FromNS != soT0+60e9 {
		t.Errorf("baseline side %+v", d.B)
	}
	// Export is the same profile.
	p, err := s.ExportProfile(ctx, FlameRequest{Job: "sj", Sel: Selection{Rank: 2}, Window: win, Format: "pprof"})
	if err != nil || p.Total != fg.Total || p.StartNS != hot || p.EndNS != hot+60e9 {
		t.Fatalf("export: %v %+v", err, p)
	}
}

func find(n *FlameNode, name string) *FlameNode {
	if n == nil {
		return nil
	}
	if n.Name == name {
		return n
	}
	for _, c := range n.Children {
		if f := find(c, name); f != nil {
			return f
		}
	}
	return nil
}

func findDiff(n *DiffNode, name string) *DiffNode {
	if n == nil {
		return nil
	}
	if n.Name == name {
		return n
	}
	for _, c := range n.Children {
		if f := findDiff(c, name); f != nil {
			return f
		}
	}
	return nil
}

func TestSysomOSStats(t *testing.T) {
	_, s := newSysomStore(t, sysomJob{minutes: 2}, SysomLimits{})
	out, err := s.OSStats(context.Background(), OSRequest{Job: "sj", FromNS: soT0, ToNS: soT0 + 60e9, Names: []string{osstat.RunQueueWait}, Rank: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Series) != 1 || out.Series[0].Rank != 2 || len(out.Series[0].Points) != 12 || out.Series[0].Points[0].TNS != soT0+5e9 {
		t.Fatalf("series %+v", out.Series)
	}
	if len(out.Absent) != 1 || out.Absent[0].Node != "n1" || out.Absent[0].Source != osstat.SrcNVML {
		t.Errorf("absent %+v", out.Absent)
	}
	b, _ := out.Series[0].Points[0].MarshalJSON()
	if string(b) != "[1751371205000000000,0.001]" {
		t.Errorf("point JSON %s", b)
	}
	all, err := s.OSStats(context.Background(), OSRequest{Job: "sj", FromNS: soT0, ToNS: soT0 + 60e9, Rank: -2})
	if err != nil || len(all.Series) != 8 || all.Series[0].Name != osstat.RunQueueWait || all.Series[4].CPU != 0 {
		t.Errorf("all series: %v %d", err, len(all.Series))
	}
}

func TestMergeProfiles(t *testing.T) {
	a := &stack.Profile{Rank: 0, Hz: 99, Ratio: 0.1, Funcs: []stack.Func{{Name: "main", Kind: stack.Symbol}, {Name: "f", Kind: stack.Symbol}},
		Stacks: []stack.Stack{{Frames: []int32{0, 1}, Count: 3}, {Frames: []int32{0}, Count: 1}}, Total: 4}
	b := &stack.Profile{Rank: 1, Hz: 99, Ratio: 0.1, Funcs: []stack.Func{{Name: "f", Kind: stack.Symbol}, {Name: "main", Kind: stack.Symbol}},
		Stacks: []stack.Stack{{Frames: []int32{1, 0}, Count: 2}, {Frames: []int32{1, 7}, Count: 9}}, Total: 11}
	m := mergeProfiles(-1, 1, 2, a, b)
	// b's stack with the out-of-range frame 7 is dropped whole.
	if len(m.Funcs) != 2 || len(m.Stacks) != 2 || m.Total != 6 || m.Stacks[0].Count != 5 || m.Stacks[1].Count != 1 || m.Hz != 99 {
		t.Errorf("merged %+v", m)
	}
}

func TestParseSysomParams(t *testing.T) {
	for _, tc := range []struct {
		q, field string
		parse    func(url.Values) error
	}{
		{"from_ns=x", ParamFromNS, func(q url.Values) error { _, err := ParseSysomRequest("j", q, 0); return err }},
		{"from_ns=10&to_ns=5", ParamToNS, func(q url.Values) error { _, err := ParseSysomRequest("j", q, 0); return err }},
		{"base_from_ns=10&base_to_ns=5", ParamBaseToNS, func(q url.Values) error { _, err := ParseSysomRequest("j", q, 0); return err }},
		{"", ParamRank, func(q url.Values) error { _, err := ParseFlameRequest("j", q, 0, false); return err }},
		{"rank=-5", ParamRank, func(q url.Values) error { _, err := ParseFlameRequest("j", q, 0, false); return err }},
		{"rank=1&group=g", ParamGroup, func(q url.Values) error { _, err := ParseFlameRequest("j", q, 0, false); return err }},
		{"rank=1&format=svg", ParamFormat, func(q url.Values) error { _, err := ParseFlameRequest("j", q, 0, true); return err }},
		{"", ParamARank, func(q url.Values) error { _, err := ParseDiffRequest("j", q, 0); return err }},
		{"a_rank=1", ParamBRank, func(q url.Values) error { _, err := ParseDiffRequest("j", q, 0); return err }},
		{"b_rank=1", ParamARank, func(q url.Values) error { _, err := ParseDiffRequest("j", q, 0); return err }},
		{"a_rank=1&b_rank=2&rank=3", ParamRank, func(q url.Values) error { _, err := ParseDiffRequest("j", q, 0); return err }},
		{"a_rank=1&b_rank=2&base_from_ns=5", ParamBaseFromNS, func(q url.Values) error { _, err := ParseDiffRequest("j", q, 0); return err }},
		{"rank=x", ParamRank, func(q url.Values) error { _, err := ParseOSRequest("j", q, 0); return err }},
		{"to_ns=-1", ParamToNS, func(q url.Values) error { _, err := ParseOSRequest("j", q, 0); return err }},
	} {
		q, _ := url.ParseQuery(tc.q)
		if err := tc.parse(q); !isField(err, tc.field) {
			t.Errorf("%q: %v, want a field error naming %s", tc.q, err, tc.field)
		}
	}
	d, err := ParseDiffRequest("j", url.Values{"rank": {"2"}, "base_from_ns": {"5"}}, 9)
	if err != nil || !d.Baseline || d.A.Rank != 2 || d.Window.BaseFromNS != 5 || d.Window.NowNS != 9 {
		t.Errorf("rank vs baseline: %v %+v", err, d)
	}
	f, err := ParseFlameRequest("j", url.Values{"group": {"all"}}, 0, true)
	if err != nil || f.Sel.Group != GroupAll || f.Format != "pprof" || !f.Window.NoBaseline {
		t.Errorf("group flame: %v %+v", err, f)
	}
}

// FuzzParseSysomParams: any query string either parses or fails with a
// field error naming a parameter; never a panic, never a window that ends
// before it starts.
func FuzzParseSysomParams(f *testing.F) {
	for _, s := range []string{"", "rank=1", "group=all&from_ns=5&to_ns=9", "a_rank=1&b_rank=2", "rank=2&base_from_ns=1&base_to_ns=3",
		"format=collapsed&rank=-1", "name=softirqs,runq_wait&rank=-1", "from_ns=9&to_ns=5", "rank=%zz", "group=" + strings.Repeat("g", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		check := func(err error, w WindowRequest) {
			var fe *signal.FieldError
			if err != nil && !errors.As(err, &fe) {
				t.Fatalf("%q: %v is not a field error", raw, err)
			}
			if err == nil && (w.ToNS != 0 && w.ToNS <= w.FromNS || w.BaseToNS != 0 && w.BaseToNS <= w.BaseFromNS) {
				t.Fatalf("%q: reversed window %+v", raw, w)
			}
		}
		r, err := ParseSysomRequest("j", q, 1)
		check(err, r.Window)
		fr, err := ParseFlameRequest("j", q, 1, true)
		check(err, fr.Window)
		if err == nil && fr.Sel.Group == "" && (fr.Sel.Rank < -1 || fr.Sel.Rank > stack.MaxRank) {
			t.Fatalf("%q: rank %d out of range", raw, fr.Sel.Rank)
		}
		dr, err := ParseDiffRequest("j", q, 1)
		check(err, dr.Window)
		or, err := ParseOSRequest("j", q, 1)
		check(err, WindowRequest{FromNS: or.FromNS, ToNS: or.ToNS})
	})
}

// BenchmarkMergeProfiles merges 1,024 ranks' profiles of 2,000 stacks
// (a group flame graph at §5's scale) into one: "shared" — the ranks run
// the same code (the group's case), "disjoint" — every rank's stacks
// differ (the worst case: 2 M distinct stacks out).
func BenchmarkMergeProfiles(b *testing.B) {
	for _, disjoint := range []bool{false, true} {
		ps := make([]*stack.Profile, 1024)
		for r := range ps {
			p := &stack.Profile{Rank: r, Hz: 99, Ratio: 0.1}
			for i := range 4000 {
				n := i
				if disjoint {
					n = (i*7 + r) % 4000
				}
				p.Funcs = append(p.Funcs, stack.Func{Name: "f" + strconv.Itoa(n), Kind: stack.Symbol})
			}
			for i := range 2000 {
				fr := []int32{0, int32(1 + i%50), int32(100 + i%400), int32(1000 + i)}
				p.Stacks = append(p.Stacks, stack.Stack{Frames: fr, Count: int64(1 + i%5)})
				p.Total += int64(1 + i%5)
			}
			ps[r] = p
		}
		name := "shared"
		if disjoint {
			name = "disjoint"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if m := mergeProfiles(-1, 0, 1, ps...); m.Total == 0 {
					b.Fatal("empty")
				}
			}
		})
	}
}

// Symbolizing in chunks of one record and merging gives the same profile
// as one pass (the memory bound changes nothing).
func TestSysomChunkedEqualsWhole(t *testing.T) {
	st, whole := newSysomStore(t, sysomJob{minutes: 3, hotFrom: soT0 + 60e9}, SysomLimits{})
	chunked, err := NewSysom(st, whole.sym, DefaultSysomConfig(), SysomLimits{ChunkSamples: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := FlameRequest{Job: "sj", Sel: Selection{Rank: -1, Group: GroupAll}, Window: WindowRequest{FromNS: soT0, ToNS: soT0 + 180e9}}
	a, err := whole.FlameGraph(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := chunked.FlameGraph(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("chunked flame graph differs:\n%s\n%s", ja, jb)
	}
}

// BenchmarkSysomReport runs the whole report path (scan, symbolize, merge,
// calls, OS, engine) over a 5-minute window of 128 ranks × 60 agent
// windows × 40 distinct stacks (307,200 sample records) plus an equal
// baseline.
func BenchmarkSysomReport(b *testing.B) {
	const ranks, stacksPer = 128, 40
	st, err := store.Open(b.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync: true, MinFreeBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if err := st.PutJob(&signal.Job{ID: "sj", Name: "sj", WorldSize: ranks, Schema: stagevec.DefaultSchema(), Accumulation: 1}); err != nil {
		b.Fatal(err)
	}
	end := soT0 + 12*60e9
	for w := soT0; w < end; w += 5e9 {
		bt := &stack.Batch{Node: "n", StartNS: w, EndNS: w + 5e9, Hz: 99, Ratio: 0.1}
		for r := range ranks {
			for i := range stacksPer {
				bt.Samples = append(bt.Samples, stack.Sample{Rank: r, PID: 1000 + r, TID: 1000 + r,
					Frames: sym("main", "train_step", "layer"+strconv.Itoa(i%8), "op"+strconv.Itoa(i)), Count: int64(1 + i%7)})
			}
		}
		if _, err := st.AppendStacks("sj", bt); err != nil {
			b.Fatal(err)
		}
	}
	syms, err := symbolize.OpenStore(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	s, err := NewSysom(st, symbolize.NewResolver(syms, symbolize.ResolverOptions{}), DefaultSysomConfig(), SysomLimits{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		rep, err := s.Report(context.Background(), SysomRequest{Job: "sj"})
		if err != nil || rep.Window.Ranks != ranks {
			b.Fatal(err)
		}
	}
}

// Over MaxNodes the lightest subtrees fold into "[pruned]" children and
// every width stays exact.
func TestSysomFlamePruned(t *testing.T) {
	st, full := newSysomStore(t, sysomJob{minutes: 2, hotFrom: soT0}, SysomLimits{})
	small, err := NewSysom(st, full.sym, DefaultSysomConfig(), SysomLimits{MaxNodes: 4})
	if err != nil {
		t.Fatal(err)
	}
	req := FlameRequest{Job: "sj", Sel: Selection{Rank: 2}, Window: WindowRequest{FromNS: soT0, ToNS: soT0 + 120e9}}
	fg, err := small.FlameGraph(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var check func(n *FlameNode) int
	check = func(n *FlameNode) int {
		sum, k := n.Self, 1
		for _, c := range n.Children {
			sum += c.Value
			k += check(c)
		}
		if sum != n.Value {
			t.Errorf("node %s: self + children = %d, value %d", n.Name, sum, n.Value)
		}
		return k
	}
	nodes := check(fg.Root)
	if fg.Pruned == 0 || fg.Root.Value != 24*570 || find(fg.Root, PrunedName) == nil || nodes > 8 {
		t.Errorf("pruned %d, %d nodes left, root %d", fg.Pruned, nodes, fg.Root.Value)
	}
	d, err := small.DiffGraph(context.Background(), DiffRequest{Job: "sj", A: Selection{Rank: 2}, B: Selection{Rank: 1}, Window: req.Window})
	if err != nil || d.Pruned == 0 || d.Root.A != 24*570 || d.Root.B != 24*450 {
		t.Errorf("diff pruned: %v %+v", err, d)
	}
}

// Issue 16 item 1, SysOM-AI: a restarted job's default window and its
// baseline lie inside one launch's span of time: the newest by default
// (the first steady baseline is not taken from the launch before), an
// earlier one on request, every one with incarnation=all.
func TestSysomIncarnationWindows(t *testing.T) {
	st, s := newSysomStore(t, sysomJob{minutes: 20}, SysomLimits{})
	j, _ := st.Job("sj")
	restart := soT0 + 12*60e9
	j.Incarnations = []signal.Incarnation{{N: 0, Reason: signal.IncFirst, StartNS: soT0}, {N: 1, Reason: signal.IncRestart, StartNS: restart}}
	if err := st.PutJob(j); err != nil {
		t.Fatal(err)
	}
	j, _ = st.Job("sj")
	w, err := s.resolve(j, WindowRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if w.FromNS < restart || (w.BaseBasis != BasisNone && w.BaseFromNS < restart) {
		t.Errorf("newest launch: window [%d, %d) baseline %s [%d, %d) reach before the restart at %d", w.FromNS, w.ToNS, w.BaseBasis, w.BaseFromNS, w.BaseToNS, restart)
	}
	zero := 0
	w, err = s.resolve(j, WindowRequest{Incarnation: &zero})
	if err != nil || w.ToNS > restart || w.BaseBasis != BasisFirstSteady {
		t.Errorf("first launch: window [%d, %d) (restart at %d) baseline %s, %v", w.FromNS, w.ToNS, restart, w.BaseBasis, err)
	}
	all := IncAll
	if w, err = s.resolve(j, WindowRequest{Incarnation: &all}); err != nil || w.ToNS != soT0+20*60e9 {
		t.Errorf("all: %+v %v", w, err)
	}
	nine := 9
	if _, err := s.resolve(j, WindowRequest{Incarnation: &nine}); err == nil {
		t.Error("an incarnation the job never had must be refused")
	}
	rep, err := s.Report(context.Background(), SysomRequest{Job: "sj"})
	if err != nil || rep.Incarnation != 1 || len(rep.Notes) == 0 || !strings.Contains(rep.Notes[0], "incarnation 1") {
		t.Fatalf("report: %+v %v", rep, err)
	}
}

// Without a recurring call pattern the iteration time comes from the stage
// vectors of the steps the calls name — of the launch the window reads: a
// restarted job stores its newest launch's steps as ordinals, and launch
// 0's step 3 is not launch 1's.
func TestSysomIterationTimeOfTheLaunch(t *testing.T) {
	st, s := newSysomStore(t, sysomJob{minutes: 8}, SysomLimits{})
	j, _ := st.Job("sj")
	j.Incarnations = []signal.Incarnation{{N: 0, Reason: signal.IncFirst, StartNS: soT0}, {N: 1, Reason: signal.IncRestart, StartNS: soT0 + 60e9}}
	if err := st.PutJob(j); err != nil {
		t.Fatal(err)
	}
	j, _ = st.Job("sj")
	nst := len(j.Schema.Stages)
	vec := func(inc int, step int64, wall float64) stagevec.Vector {
		return stagevec.Vector{Step: stagevec.Ordinal(inc, step), Rank: 0, Durations: make([]float64, nst), WallMS: wall}
	}
	var vs []stagevec.Vector
	for step := int64(0); step < 10; step++ {
		vs = append(vs, vec(0, step, 100))
	}
	for step := int64(0); step < 10; step++ {
		vs = append(vs, vec(1, step, 700))
	}
	if err := st.Append("sj", vs); err != nil {
		t.Fatal(err)
	}
	// Two calls, no pattern: the vectors answer.
	calls := []collective.Call{{Rank: 0, Comm: "w", Seq: 0, Op: collective.AllReduce, Step: 2, EnterNS: soT0 + 61e9, ReturnNS: soT0 + 61e9 + 1e6, Peer: -1, Root: -1},
		{Rank: 0, Comm: "w", Seq: 1, Op: collective.Broadcast, Step: 5, EnterNS: soT0 + 62e9, ReturnNS: soT0 + 62e9 + 1e6, Peer: -1, Root: -1}}
	if ms, note := s.iterMs(j, 1, calls); ms != 700 {
		t.Errorf("launch 1's iteration time %.1f ms (%q), want its own steps' 700", ms, note)
	}
	if ms, note := s.iterMs(j, 0, calls); ms != 100 {
		t.Errorf("launch 0's iteration time %.1f ms (%q), want 100", ms, note)
	}
}
