package stagefrontier

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
)

// D2b: a window holds the ranks that reported in it plus at most
// MaxAbsentRanks silent ones, whatever the declared world size and in
// both storage modes; the missing-ranks finding still counts them all.
func TestD2b_WindowCarriesReportingRanks(t *testing.T) {
	for _, c := range []struct {
		name  string
		world int
		opt   AssembleOptions
	}{
		{"lazy, 2^20 ranks", 1 << 20, AssembleOptions{FromStep: 0, ToStep: 5}},
		{"bounded, 5000 ranks", 5000, AssembleOptions{FromStep: 0, ToStep: 5}},
		{"open, 5000 ranks", 5000, AssembleOptions{FromStep: 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			job := testJob(c.world, 1)
			a := NewAssembler(job, c.opt)
			reporting := []int{7, 1000, 2000, 3000, 4000, 4999}
			for i, r := range reporting {
				if err := a.Add(vec(int64(i), r, 1, 10, 20, 2, 3)); err != nil {
					t.Fatal(err)
				}
			}
			w, err := a.Finish()
			if err != nil {
				t.Fatal(err)
			}
			_, R, _ := w.Dims()
			if R != len(reporting)+MaxAbsentRanks {
				t.Fatalf("window carries %d ranks, want %d", R, len(reporting)+MaxAbsentRanks)
			}
			for i := 1; i < R; i++ {
				if w.Ranks[i].Rank <= w.Ranks[i-1].Rank {
					t.Fatalf("ranks not ascending at %d: %d, %d", i, w.Ranks[i-1].Rank, w.Ranks[i].Rank)
				}
			}
			if w.Ranks[0].Rank != 0 || w.Ranks[7].Rank != 7 {
				t.Fatalf("silent ranks carried are not the lowest ids: %v", w.Ranks[:8])
			}
			silent := c.world - len(reporting)
			if got := a.LeftOut(); got != silent-MaxAbsentRanks {
				t.Fatalf("LeftOut = %d, want %d", got, silent-MaxAbsentRanks)
			}
			want := fmt.Sprintf("%d of %d ranks sent nothing in the window: 0, 1, 2", silent, c.world)
			if !w.Has(FindingMissingRanks) || !strings.Contains(w.Findings[0].Detail, want) || !strings.Contains(w.Findings[0].Detail, "only counted") {
				t.Fatalf("findings %+v, want %q", w.Findings, want)
			}
			rep := analyzeOK(t, w, DefaultConfig())
			b, err := json.Marshal(rep)
			if err != nil || len(b) > 200<<10 {
				t.Fatalf("report: %d bytes, %v", len(b), err)
			}
			if len(rep.Quality.MissingRanks) != MaxAbsentRanks || !hasLabel(rep, LabelTelemetryLimited) {
				t.Fatalf("missing ranks %d, labels %+v", len(rep.Quality.MissingRanks), rep.Labels)
			}
		})
	}
}

// D2b: with role groups, lazy placement keeps other groups' ranks out.
func TestD2b_LazyRespectsRoleGroups(t *testing.T) {
	job := testJob(1<<20, 1)
	job.Ranks = []signal.Rank{{Rank: 0, Role: signal.Role{PP: 0}}, {Rank: 1, Role: signal.Role{PP: 1}}, {Rank: 2, Role: signal.Role{PP: 0}}}
	g := job.GroupOf(1)
	a := NewAssembler(job, AssembleOptions{Group: g})
	for _, r := range []int{0, 1, 2} {
		if err := a.Add(vec(3, r, 1, 2, 3)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := a.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if w.Ranks[0].Rank != 1 || len(w.Ranks) != 1 && job.GroupOf(5) != g {
		t.Fatalf("group %q window ranks %v", g, w.Ranks)
	}
	for _, rk := range w.Ranks {
		if job.GroupOf(rk.Rank) != g {
			t.Fatalf("rank %d of group %q in group %q's window", rk.Rank, job.GroupOf(rk.Rank), g)
		}
	}
}

// D1/D12: MaxCells bounds what a window stores — sparse steps cost what
// they hold, and the limit trips on stored cells only.
func TestD1_MaxCellsCountsStoredCells(t *testing.T) {
	job := testJob(4, 1)
	steps := []int64{0, 1, 1 << 30, 1 << 40, 1<<48 - 1} // far apart; 2^48−1 is the largest step ingest takes
	a := NewAssembler(job, AssembleOptions{FromStep: 0, ToStep: math.MaxInt64 - 1, MaxCells: int64(len(steps)) * (4 + MaxAbsentRanks) * 6})
	for _, s := range steps {
		if err := a.Add(vec(s, 0, 1, 2, 3)); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
	w, err := a.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Steps) != len(steps) {
		t.Fatalf("steps %v", w.Steps)
	}
	a = NewAssembler(job, AssembleOptions{FromStep: 0, MaxCells: 2 * 4 * 6})
	var err2 error
	for s := int64(0); s < 3 && err2 == nil; s++ {
		for r := range 4 {
			if err2 = a.Add(vec(s*1000, r, 1)); err2 != nil {
				break
			}
		}
	}
	var tl *TooLargeError
	if !errors.As(err2, &tl) || tl.Steps != 3 || tl.Cells() <= tl.Limit {
		t.Fatalf("third step: %v, want TooLargeError at 3 steps", err2)
	}
	if _, err := a.Finish(); !errors.As(err, &tl) {
		t.Fatalf("Finish after the limit: %v", err)
	}
}

// D5 (found by FuzzRunAnyValues): a rank whose wall time is a valid but
// vanishing 5e-324 ms made its overlap share +Inf, which a report cannot
// encode (an empty 200 from the API).
func TestD5_VanishingWallKeepsSharesFinite(t *testing.T) {
	v := vec(0, 0, 1, 2, 3)
	v.WallMS = 5e-324
	w := assemble(t, testJob(2, 1), AssembleOptions{}, v, vec(0, 1, 1, 2, 3))
	rep := analyzeOK(t, w, DefaultConfig())
	if q := rep.Quality; math.IsInf(q.MaxOverlapShare, 0) || math.IsNaN(q.MaxOverlapShare) || q.MaxOverlapShare < 1 {
		t.Fatalf("overlap share %v", q.MaxOverlapShare)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

// D5: a window built without the assembler holding 1e308 cells is refused
// with the field named, instead of overflowing into infinite totals.
func TestD5_HugeCellsRefused(t *testing.T) {
	w := denseWindow(2, 2)
	for i := range w.D {
		w.D[i] = 1
	}
	w.D[3] = 1e308
	var fe *signal.FieldError
	if _, err := Analyze(w, DefaultConfig()); !errors.As(err, &fe) || fe.Field != "d" {
		t.Fatalf("err = %v, want a d field error", err)
	}
}
