package demo

import (
	"fmt"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/analysis"
)

// Grades of a demo engine's localization against the injected fault
// (issue 16 item 8b: a grade counts wrong and extra ranks, and never says
// ✔ when a rank besides the faulty one was named).
const (
	GradeLocated = "located" // the faulty rank and no other
	GradePartial = "partial" // the faulty rank, and other ranks too
	GradeWrong   = "wrong"   // ranks named, not the faulty one
	GradeNone    = "none"    // no rank named (withheld, inconclusive)
)

// Grade is one engine's self-grade.
type Grade struct {
	Engine string `json:"engine"`
	Kind   string `json:"kind"`
	// Named are the ranks the engine named, ascending; Extra those of
	// them that are not the faulty rank.
	Named []int `json:"named"`
	Extra []int `json:"extra,omitempty"`
	Truth int   `json:"truth"`
	// Why is the engine's own word on its verdict (kind, confidence,
	// why it named no rank).
	Why  string `json:"why,omitempty"`
	Line string `json:"line"`
}

// Mark is the grade's sign: ✔ only for the faulty rank alone.
func (g Grade) Mark() string {
	switch g.Kind {
	case GradeLocated:
		return "✔"
	case GradePartial:
		return "~"
	case GradeWrong:
		return "✘"
	}
	return "–"
}

// GradeRanks grades an engine that named ranks against the faulty rank
// truth; why is the engine's verdict in its own words.
func GradeRanks(engine string, named []int, truth int, why string) Grade {
	ns := slices.Compact(slices.Sorted(slices.Values(named)))
	g := Grade{Engine: engine, Named: ns, Truth: truth, Why: why}
	if g.Named == nil {
		g.Named = []int{}
	}
	for _, r := range ns {
		if r != truth {
			g.Extra = append(g.Extra, r)
		}
	}
	suffix := ""
	if why != "" {
		suffix = " — " + why
	}
	switch {
	case len(ns) == 0:
		g.Kind = GradeNone
		g.Line = fmt.Sprintf("– %s names no rank (injected on %d)%s", engine, truth, suffix)
	case len(g.Extra) == 0:
		g.Kind = GradeLocated
		g.Line = fmt.Sprintf("✔ %s names rank %d (injected on %d)%s", engine, truth, truth, suffix)
	case len(g.Extra) < len(ns):
		g.Kind = GradePartial
		g.Line = fmt.Sprintf("~ %s names rank %d (injected on %d) but also %s, wrongly%s", engine, truth, truth, rankList(g.Extra), suffix)
	default:
		g.Kind = GradeWrong
		g.Line = fmt.Sprintf("✘ %s names %s, not rank %d (injected on %d)%s", engine, rankList(ns), truth, truth, suffix)
	}
	return g
}

func rankList(rs []int) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprint(r)
	}
	if len(rs) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ", ")
}

// GradeStageFrontier grades the job report's headline.
func GradeStageFrontier(rep *analysis.Report, truth int) Grade {
	if rep == nil {
		return GradeRanks("StageFrontier", nil, truth, "no report")
	}
	h := rep.Headline
	if h.Rank < 0 {
		why := "withheld"
		if h.Withheld != "" {
			why = fmt.Sprintf("withheld: %s", h.Withheld)
		}
		if len(h.TieSet) > 0 {
			why += fmt.Sprintf(" (tied: %s)", rankList(h.TieSet))
		}
		return GradeRanks("StageFrontier", nil, truth, why)
	}
	return GradeRanks("StageFrontier", []int{h.Rank}, truth, "")
}

// GradeGreyhound grades the Greyhound verdict: its ranks, and both ends
// of every slow link it names (a link localizes to its two ranks).
func GradeGreyhound(gr *analysis.GreyhoundReport, truth int) Grade {
	if gr == nil {
		return GradeRanks("Greyhound", nil, truth, "no report")
	}
	v := gr.Verdict
	named := slices.Clone(v.Ranks)
	for _, l := range v.Links {
		named = append(named, l.Src, l.Dst)
	}
	why := string(v.Kind)
	if v.Confidence != "" {
		why += fmt.Sprintf(", %s confidence", v.Confidence)
	}
	return GradeRanks("Greyhound", named, truth, why)
}

// GradeKair grades a KAIR answer: the culprit's rank.
func GradeKair(ka *analysis.KairAnswer, why string, truth int) Grade {
	if ka == nil || ka.Report == nil {
		if why == "" {
			why = "no capture was triggered"
		}
		return GradeRanks("KAIR", nil, truth, why)
	}
	r := ka.Report
	// A culprit, or a rank certain with several candidate operators on it
	// (culprit_rank): either names the top cause's rank.
	if (r.Verdict == analysis.KairVerdictCulprit || r.Verdict == analysis.KairVerdictRank) && len(r.Causes) > 0 {
		return GradeRanks("KAIR", []int{r.Causes[0].Rank}, truth, r.Causes[0].Name)
	}
	return GradeRanks("KAIR", nil, truth, string(r.Verdict))
}
