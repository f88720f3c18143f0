package demo

import (
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
)

// TestGradeCountsWrongAndExtraRanks (issue 16 item 8b): a grade is ✔
// only when the faulty rank alone is named; extra ranks make it partial,
// only wrong ones ✘, and the engine's own words come along.
func TestGradeCountsWrongAndExtraRanks(t *testing.T) {
	for _, c := range []struct {
		named []int
		kind  string
		mark  string
		extra []int
		line  string
	}{
		{[]int{2}, GradeLocated, "✔", nil, "✔ E names rank 2 (injected on 2)"},
		{[]int{2, 0, 3}, GradePartial, "~", []int{0, 3}, "but also ranks 0, 3, wrongly"},
		{[]int{3}, GradeWrong, "✘", []int{3}, "✘ E names rank 3, not rank 2"},
		{[]int{0, 1}, GradeWrong, "✘", []int{0, 1}, "names ranks 0, 1, not rank 2"},
		{nil, GradeNone, "–", nil, "– E names no rank"},
		{[]int{2, 2}, GradeLocated, "✔", nil, "✔"},
	} {
		g := GradeRanks("E", c.named, 2, "why")
		if g.Kind != c.kind || g.Mark() != c.mark || !slices.Equal(g.Extra, c.extra) || !strings.Contains(g.Line, c.line) || !strings.HasSuffix(g.Line, "— why") {
			t.Errorf("named %v: %+v (mark %s); want %s %s extra %v line with %q", c.named, g, g.Mark(), c.kind, c.mark, c.extra, c.line)
		}
	}
}

// TestGradeGreyhoundNamesTheWrongRank: the backward_comm seed-12 run
// (fault on rank 0) where Greyhound said "slow_rank (high confidence):
// rank 3" is ✘ with its verdict in the line.
func TestGradeGreyhoundNamesTheWrongRank(t *testing.T) {
	gr := &analysis.GreyhoundReport{}
	gr.Verdict = greyhound.Verdict{Kind: "slow_rank", Ranks: []int{3}, Confidence: "high"}
	g := GradeGreyhound(gr, 0)
	if g.Mark() != "✘" || !strings.Contains(g.Line, "slow_rank, high confidence") {
		t.Fatalf("%+v", g)
	}
	gr.Verdict = greyhound.Verdict{Kind: "slow_link", Links: []greyhound.Link{{Src: 0, Dst: 1}}}
	if g := GradeGreyhound(gr, 0); g.Mark() != "~" || !slices.Equal(g.Extra, []int{1}) {
		t.Fatalf("a slow link 0→1 for a fault on rank 0: %+v", g)
	}
}

func TestGradeStageFrontierWithheld(t *testing.T) {
	rep := &analysis.Report{Headline: stagefrontier.Headline{Rank: -1, Withheld: "tie", TieSet: []int{1, 2}}}
	if g := GradeStageFrontier(rep, 2); g.Mark() != "–" || !strings.Contains(g.Line, "tied: ranks 1, 2") {
		t.Fatalf("%+v", g)
	}
}
