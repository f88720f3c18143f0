package kair

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

func mustAnalyze(t *testing.T, tr []optrace.Trace, cfg Config) *Report {
	t.Helper()
	rep, err := Analyze(tr, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatalf("report does not marshal: %v", err)
	}
	return rep
}

func dump(rep *Report) string {
	var b strings.Builder
	for _, o := range rep.Outliers {
		fmt.Fprintf(&b, "outlier %+v\n", o)
	}
	for _, c := range rep.RootCauses {
		fmt.Fprintf(&b, "cause %s rank %d %s from %d %s ×%d\n  %s\n", c.Kind, c.Rank, c.Name, c.FromRank, c.From, c.Symptoms, strings.Join(c.Evidence, "\n  "))
	}
	return b.String()
}

func methods() map[string]Config {
	robust := DefaultConfig()
	loo := DefaultConfig()
	loo.Robust = false
	return map[string]Config{"robust": robust, "loo": loo}
}

// §III-B Stage 3's own example: the AllReduce that waited for a slow
// backward op is the victim; the backward op on the slow rank is the
// culprit.
func TestVictimAllReduceNotBlamed(t *testing.T) {
	for _, n := range []int{3, 4, 8} {
		for mname, cfg := range methods() {
			for _, jitter := range []bool{false, true} {
				for _, ids := range []bool{true, false} {
					t.Run(fmt.Sprintf("n%d/%s/jitter=%v/ids=%v", n, mname, jitter, ids), func(t *testing.T) {
						progs := uniform(n)
						progs[2][2].dur *= 3 // rank 2's aten::bwd_b
						tr := simulate(progs, jitter)
						if !ids {
							// gloo / torch < 2.0: no (comm, seq) in the trace;
							// the k-th AllReduce of the step joins the ranks.
							for i := range tr {
								for j := range tr[i].Events {
									tr[i].Events[j].Comm, tr[i].Events[j].Seq = "", -1
								}
							}
						}
						// The scenario is meaningful: healthy ranks' AllReduces
						// record a long duration (the wait) and would look slow
						// to a rule that read raw durations.
						if ar := tr[0].Events[4]; ar.Name != arName || ar.DurNS < 5*30_000 {
							t.Fatalf("scenario: rank 0 AllReduce %+v", ar)
						}
						rep := mustAnalyze(t, tr, cfg)
						if len(rep.RootCauses) == 0 {
							t.Fatalf("no root cause\n%s", dump(rep))
						}
						top := rep.RootCauses[0]
						if top.Kind != KindOp || top.Rank != 2 || top.Name != "aten::bwd_b" {
							t.Fatalf("top cause %+v, want op aten::bwd_b on rank 2\n%s", top, dump(rep))
						}
						for _, c := range rep.RootCauses {
							if c.Name == arName || c.From == arName {
								t.Errorf("victim AllReduce blamed: %+v\n%s", c, dump(rep))
							}
							if c.Kind == KindOp && c.Rank != 2 {
								t.Errorf("op on healthy rank blamed: %+v", c)
							}
						}
						// Stage 2 ranks the culprit first within the straggler.
						if o := rep.OutliersOf(2); len(o) == 0 || o[0].Name != "aten::bwd_b" {
							t.Errorf("outliers of rank 2 = %+v, want aten::bwd_b first", o)
						}
						for _, o := range rep.Outliers {
							if o.Rank != 2 {
								t.Errorf("outlier on healthy rank: %+v", o)
							}
						}
					})
				}
			}
		}
	}
}

// Every duration normal, one rank's AllReduce starts late after an
// on-time predecessor: the dependency edge is the cause (rule 2c).
func TestLateStartBlamesEdge(t *testing.T) {
	for mname, cfg := range methods() {
		t.Run(mname, func(t *testing.T) {
			progs := uniform(4)
			progs[1][3].gap = 150_000
			rep := mustAnalyze(t, simulate(progs, true), cfg)
			if len(rep.RootCauses) == 0 {
				t.Fatalf("no root cause\n%s", dump(rep))
			}
			top := rep.RootCauses[0]
			if top.Kind != KindEdge || top.Rank != 1 || top.Name != arName || top.From != "aten::bwd_b" || top.FromRank != 1 {
				t.Fatalf("top cause %+v, want edge aten::bwd_b → AllReduce on rank 1\n%s", top, dump(rep))
			}
			for _, c := range rep.RootCauses {
				if c.Kind == KindOp {
					t.Errorf("op blamed though every duration is normal: %+v\n%s", c, dump(rep))
				}
			}
		})
	}
}

// An op slow on every rank is no outlier: Stage 2 compares ranks.
func TestUniformSlownessNoOutlier(t *testing.T) {
	for mname, cfg := range methods() {
		t.Run(mname, func(t *testing.T) {
			progs := uniform(4)
			for r := range progs {
				progs[r][2].dur *= 5
			}
			rep := mustAnalyze(t, simulate(progs, true), cfg)
			if len(rep.Outliers) != 0 || len(rep.RootCauses) != 0 {
				t.Fatalf("uniform slowness flagged\n%s", dump(rep))
			}
		})
	}
}

// The paper's population z is capped at sqrt(N−1) (stats.PopulationZ):
// at N = 4 the slow op scores at most sqrt(3) < 3 and nothing is flagged.
// That is why the defaults are robust / leave-one-out.
func TestPopulationZCappedAtSmallN(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Robust, cfg.LeaveOneOut = false, false
	progs := uniform(4)
	progs[2][2].dur *= 3
	rep := mustAnalyze(t, simulate(progs, true), cfg)
	if len(rep.Outliers) != 0 {
		t.Fatalf("population z flagged at N=4\n%s", dump(rep))
	}
	// At N = 16 it can.
	progs = uniform(16)
	progs[2][2].dur *= 3
	rep = mustAnalyze(t, simulate(progs, true), cfg)
	if len(rep.RootCauses) == 0 || rep.RootCauses[0].Rank != 2 || rep.RootCauses[0].Name != "aten::bwd_b" {
		t.Fatalf("population z at N=16 missed the culprit\n%s", dump(rep))
	}
}

// Property: blame does not depend on rank ids or trace order.
func TestBlameInvariantUnderRankRenaming(t *testing.T) {
	ids := []int{17, 3, 42, 0, 9}
	for _, c := range []struct {
		name string
		mod  func([][]op)
	}{
		{"slow_op", func(p [][]op) { p[2][2].dur *= 3 }},
		{"late_edge", func(p [][]op) { p[1][3].gap = 150_000 }},
		{"two_slow", func(p [][]op) { p[0][1].dur *= 4; p[3][2].dur *= 2 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			progs := uniform(5)
			c.mod(progs)
			base := simulate(progs, true)
			want := mustAnalyze(t, base, DefaultConfig())
			ren := simulate(progs, true)
			for i := range ren {
				ren[i].Rank = ids[i]
			}
			slices.Reverse(ren)
			got := mustAnalyze(t, ren, DefaultConfig())
			key := func(rc RootCause, m func(int) int) string {
				from := -1
				if rc.Kind == KindEdge {
					from = m(rc.FromRank)
				}
				return fmt.Sprintf("%s/%d/%s/%d/%s/%d", rc.Kind, m(rc.Rank), rc.Name, from, rc.From, rc.Symptoms)
			}
			var a, b []string
			for _, rc := range want.RootCauses {
				a = append(a, key(rc, func(r int) int { return ids[r] }))
			}
			for _, rc := range got.RootCauses {
				b = append(b, key(rc, func(r int) int { return r }))
			}
			slices.Sort(a)
			slices.Sort(b)
			if !slices.Equal(a, b) || len(a) == 0 {
				t.Fatalf("renamed ranks changed blame:\n%v\n%v", a, b)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		field string
		mod   func(*Config)
	}{
		{"z_threshold", func(c *Config) { c.ZThreshold = 0 }},
		{"min_ranks", func(c *Config) { c.MinRanks = 2 }},
		{"min_sigma_ns", func(c *Config) { c.MinSigmaNS = 0 }},
		{"min_sigma_rel", func(c *Config) { c.MinSigmaRel = 2 }},
		{"max_walk", func(c *Config) { c.MaxWalk = 0 }},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err %v", c.field, err)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDuplicateRankRejected(t *testing.T) {
	tr := simulate(uniform(3), false)
	tr[1].Rank = 0
	if _, err := Analyze(tr, 0, DefaultConfig()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("err %v", err)
	}
}

// A joined collective's scored duration (end − latest arrival) is measured
// across ranks, so a spread within the clock alignment error is not an
// outlier; beyond it, it is.
func TestCollectiveDurationFlooredByClockError(t *testing.T) {
	mk := func(extra int64) []optrace.Trace {
		tr := make([]optrace.Trace, 4)
		for r := range tr {
			d := int64(30_000)
			if r == 3 {
				d += extra
			}
			tr[r] = optrace.Trace{Rank: r, Events: []optrace.Event{
				{Name: "aten::mm", Cat: optrace.CPUOp, TID: 1, Device: -1, StartNS: 0, DurNS: 100_000, Step: 0, Seq: -1},
				{Name: "gloo:all_reduce", Cat: optrace.Collective, TID: 1, Device: -1, StartNS: 100_000, DurNS: d, Step: 0, Comm: "c", Seq: 0},
			}}
		}
		return tr
	}
	flagged := func(rep *Report) bool {
		for _, o := range rep.Outliers {
			if o.Name == "gloo:all_reduce" {
				return true
			}
		}
		return false
	}
	cfg := DefaultConfig()
	if !flagged(mustAnalyze(t, mk(20_000), cfg)) {
		t.Fatal("exact clocks: a 20 µs longer collective should be flagged")
	}
	cfg.ClockErrorNS = 25_000
	if rep := mustAnalyze(t, mk(20_000), cfg); flagged(rep) {
		t.Errorf("20 µs inside a 25 µs clock error flagged\n%s", dump(rep))
	}
	if !flagged(mustAnalyze(t, mk(200_000), cfg)) {
		t.Error("200 µs beyond a 25 µs clock error not flagged")
	}
	cfg.ClockErrorNS = -1
	if err := cfg.Validate(); err == nil {
		t.Error("negative clock_error_ns accepted")
	}
}
