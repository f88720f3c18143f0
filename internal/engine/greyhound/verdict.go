package greyhound

import (
	"fmt"
	"slices"
	"strings"
)

// Explanation says how much of the observed slowdown a verdict's finding
// can account for (issue 16: a verdict must explain the slowdown it is
// attached to).
type Explanation struct {
	// IncreaseMS is the onset's iteration-time increase; 0 when no onset
	// was measured (a manual validation, a straggler from the start).
	IncreaseMS float64 `json:"increase_ms"`
	// AccountedMS is the most the finding can add to an iteration, and
	// Frac = AccountedMS / IncreaseMS.
	AccountedMS float64 `json:"accounted_ms"`
	Frac        float64 `json:"frac"`
	// Explains: Frac ≥ Config.ExplainFrac (or no increase to explain).
	Explains bool `json:"explains"`
	// Basis says in words how AccountedMS was bounded.
	Basis string `json:"basis"`
}

// Episode is what a verdict is about: the verified onset that opened it
// (nil for a manual request), a relief seen while validating, and the
// latest iteration time (lateness without an onset is weighed against it).
type Episode struct {
	Onset  *ChangePointView
	Relief *ChangePointView
	IterMS float64
}

// newVerdict is the one way a verdict is made: settle derives its
// confidence from its caveats.
func newVerdict(kind VerdictKind, ranks []int, links []Link, text string, caveats []string) Verdict {
	v := Verdict{Kind: kind, Ranks: slices.Clone(ranks), Links: slices.Clone(links), Text: text, Caveats: slices.Clone(caveats)}
	if v.Ranks == nil {
		v.Ranks = []int{}
	}
	if v.Links == nil {
		v.Links = []Link{}
	}
	settle(&v)
	return v
}

// settle is the confidence rule (issue 16, item 6), applied once to every
// verdict: high only when nothing limits the evidence shown with it — no
// caveat (missing ranks, a thin comparison, a finding that explains only
// part of the slowdown, a relief during validation, lateness on too few
// instances, nothing validated) and a verdict that concludes something.
// The caveats end the text, so no reader sees "high confidence" beside
// "may have been transient".
func settle(v *Verdict) {
	v.Confidence = ConfidenceHigh
	if len(v.Caveats) > 0 || v.Kind == VerdictInconclusive {
		v.Confidence = ConfidenceLow
	}
	if len(v.Caveats) > 0 {
		v.Text += " (" + strings.Join(v.Caveats, "; ") + ")"
	}
}

// Conclude is the controller's verdict from the validation results, entry
// lateness and the episode they answer (§4.3, issue 16 items 6 and 6a).
// A finding names its component only when it can account for a material
// part (ExplainFrac) of the onset's iteration-time increase: a rank whose
// GEMM runs ×r of the healthy ranks' adds at most (r − 1) × the iteration
// time before the onset (were the whole iteration its compute), a link
// ×r at most (r − 1) × that time (were it all communication on that
// link), a late rank the others' wait for it per iteration. Slow compute
// and links that explain come first; then a late rank (its cause is on
// its host side, which neither benchmark exercises); a finding that does
// not explain the slowdown is reported as seen, never as the cause.
func Conclude(j Judgement, late LateEvidence, lateOK bool, ep Episode, cfg Config) Verdict {
	cfg = cfg.withDefaults()
	before, inc := 0.0, 0.0
	if ep.Onset != nil {
		before, inc = ep.Onset.BeforeMS, max(ep.Onset.AfterMS-ep.Onset.BeforeMS, 0)
	}
	account := func(ratio float64, what string) Explanation {
		e := Explanation{IncreaseMS: inc, Explains: true}
		if before > 0 {
			e.AccountedMS = max(ratio-1, 0) * before
			e.Basis = fmt.Sprintf("%s ×%.2f of the healthy reference adds at most %.2f × the %.1f ms iteration before the onset", what, ratio, max(ratio-1, 0), before)
		}
		if inc > 0 {
			e.Frac = e.AccountedMS / inc
			e.Explains = e.Frac >= cfg.ExplainFrac
		}
		return e
	}
	var caveats []string
	if !j.Complete && j.Planned > 0 {
		caveats = append(caveats, fmt.Sprintf("results from %d of %d ranks", j.Reported, j.Planned))
	}
	partial := func(e *Explanation) {
		if c, ok := partialCaveat(e.IncreaseMS, e.Frac, cfg); ok {
			caveats = append(caveats, c)
		}
	}

	// Validation findings, each weighed against the increase.
	var ranksOK, ranksNot, ranksOffPace []int
	var rankBest, rankWorst *Explanation
	narrow := false // a named component stands out of the noise only narrowly
	for _, g := range j.GEMM {
		if !g.Slow {
			continue
		}
		e := account(g.Ratio, fmt.Sprintf("rank %d's GEMM", g.Rank))
		if e.Explains {
			ranksOK = append(ranksOK, g.Rank)
			if rankBest == nil || e.AccountedMS > rankBest.AccountedMS {
				rankBest = &e
			}
		} else {
			ranksNot = append(ranksNot, g.Rank)
			if rankWorst == nil || e.AccountedMS > rankWorst.AccountedMS {
				rankWorst = &e
			}
		}
	}
	// Consistency with entry lateness: ranks slow at compute would be the
	// ones the others wait for. When lateness singles out another rank,
	// these do not set the pace (their GEMM deficit may be as old as the
	// job: ranks sharing a core) — reported as seen, and the transfers
	// they would have explained are judged as links again.
	if lateOK && len(ranksOK) > 0 && !slices.Contains(ranksOK, late.Rank) {
		ranksOffPace, ranksOK, rankBest = ranksOK, nil, nil
	}
	for _, g := range j.GEMM {
		if slices.Contains(ranksOK, g.Rank) {
			narrow = narrow || !g.Clear
		}
	}
	var linksOK, linksNot []Link
	var linkBest, linkWorst *Explanation
	for _, lv := range j.Links {
		l := Link{lv.Src, lv.Dst}
		if !lv.Slow || slices.Contains(ranksOK, l.Src) || slices.Contains(ranksOK, l.Dst) {
			continue
		}
		e := account(lv.Ratio, fmt.Sprintf("link %d→%d", l.Src, l.Dst))
		if e.Explains {
			if len(ranksOK) == 0 {
				narrow = narrow || !lv.Clear
			}
			linksOK = append(linksOK, l)
			if linkBest == nil || e.AccountedMS > linkBest.AccountedMS {
				linkBest = &e
			}
		} else {
			linksNot = append(linksNot, l)
			if linkWorst == nil || e.AccountedMS > linkWorst.AccountedMS {
				linkWorst = &e
			}
		}
	}
	if narrow && (len(ranksOK) > 0 || len(linksOK) > 0) {
		caveats = append(caveats, "it stands out of the healthy ones' repetitions by less than their own spread")
	}
	seenNot := func() string {
		var parts []string
		if len(ranksOffPace) > 0 {
			parts = append(parts, fmt.Sprintf("rank(s) %s slow at GEMM, but the others wait for rank %d at its collectives, not for them: their compute does not set the pace", joinInts(ranksOffPace), late.Rank))
		}
		if len(ranksNot) > 0 {
			parts = append(parts, fmt.Sprintf("rank(s) %s slow at GEMM (up to %.1f ms per iteration)", joinInts(ranksNot), rankWorst.AccountedMS))
		}
		if len(linksNot) > 0 {
			parts = append(parts, fmt.Sprintf("link(s) %s slow (up to %.1f ms per iteration)", joinLinks(linksNot), linkWorst.AccountedMS))
		}
		if len(parts) == 0 {
			return ""
		}
		if len(ranksNot) > 0 || len(linksNot) > 0 {
			parts[len(parts)-1] += fmt.Sprintf(", too little to explain the +%.1f ms", inc)
		}
		return "validation also saw " + strings.Join(parts, "; and ")
	}
	increase := ""
	if inc > 0 {
		increase = fmt.Sprintf(" of the +%.1f ms per iteration", inc)
	}
	lateText := func() string {
		t := fmt.Sprintf("rank %d enters %s on %s last on %d of %d instances since the onset, a median %.1f ms after the next member; the others wait %.1f ms per iteration for it",
			late.Rank, late.Op, late.Comm, late.Last, late.Instances, late.MarginMS, late.WaitMS)
		if late.IncreaseMS > 0 {
			t += fmt.Sprintf(" (%.0f%% of the +%.1f ms increase)", 100*late.Frac, late.IncreaseMS)
		}
		return t
	}

	var v Verdict
	switch {
	case len(ranksOK) > 0:
		text := fmt.Sprintf("GEMM validation: rank(s) %s slower than the healthy ranks by more than %.0f%%, outside the spread of their repetitions; that can account for up to %.1f ms%s",
			joinInts(ranksOK), 100*(j.Limit-1), rankBest.AccountedMS, increase)
		var mine []Link
		for _, lv := range j.Links {
			if l := (Link{lv.Src, lv.Dst}); lv.Slow && (slices.Contains(ranksOK, l.Src) || slices.Contains(ranksOK, l.Dst)) {
				mine = append(mine, l)
			}
		}
		if len(mine) > 0 {
			text += fmt.Sprintf("; its links %s are slow too, as a slow rank's transfers are", joinLinks(mine))
		}
		if len(linksOK) > 0 {
			text += fmt.Sprintf("; slow link(s) %s too", joinLinks(linksOK))
		}
		if s := seenNot(); s != "" {
			text += "; " + s
		}
		partial(rankBest)
		v = newVerdict(VerdictSlowRank, ranksOK, linksOK, text, addRelief(caveats, ep))
		v.Explanation = rankBest
	case len(linksOK) > 0:
		text := fmt.Sprintf("P2P validation: link(s) %s slower than the expected rate of healthy transfers, outside the spread of their repetitions; that can account for up to %.1f ms%s",
			joinLinks(linksOK), linkBest.AccountedMS, increase)
		if r, ok := commonEnd(linksOK); ok && len(linksOK) >= 2 {
			text += fmt.Sprintf("; every slow link touches rank %d: suspect its network path (NIC, cable, switch port)", r)
		}
		if s := seenNot(); s != "" {
			text += "; " + s
		}
		if j.Thin || len(j.Links) < 3 {
			caveats = append(caveats, "compared within fewer than 3 links of its kind")
		}
		partial(linkBest)
		v = newVerdict(VerdictSlowLink, nil, linksOK, text, addRelief(caveats, ep))
		v.Explanation = linkBest
	case lateOK:
		text := lateText()
		validated := slices.ContainsFunc(j.GEMM, func(g GEMMView) bool { return g.Rank == late.Rank })
		links := 0
		for _, l := range j.Links {
			if l.Src == late.Rank || l.Dst == late.Rank {
				links++
			}
		}
		switch {
		case validated && links > 0:
			text += fmt.Sprintf("; its compute (GEMM) and %d link(s) validated healthy, so the cause is on its host side (data loading, CPU, Python) — not GPU/CPU compute or network", links)
		case validated:
			text += "; its compute (GEMM) validated healthy and no link of it was tested, so the cause is on its host side (data loading, CPU, Python) or its network"
			caveats = append(caveats, "its links were not validated")
		default:
			caveats = append(caveats, "its compute and network were not validated")
		}
		if s := seenNot(); s != "" {
			text += "; " + s
		}
		caveats = append(caveats, late.Caveats(cfg)...)
		e := Explanation{IncreaseMS: late.IncreaseMS, AccountedMS: late.WaitMS, Frac: late.Frac, Explains: true,
			Basis: "the others' wait for it per iteration, over every collective since the onset"}
		v = newVerdict(VerdictLateRank, []int{late.Rank}, nil, text, addRelief(caveats, ep))
		v.Explanation = &e
	case len(ranksNot) > 0 || len(linksNot) > 0:
		// Seen, but no cause of this slowdown: say what it was.
		text := strings.TrimPrefix(seenNot(), "validation also saw ")
		text = "validation saw " + text + ": it does not explain the slowdown"
		if late.Instances > 0 && late.Share >= cfg.LateShare {
			text += "; " + lateText() + ", too little to explain it either"
		}
		v = newVerdict(VerdictInconclusive, nil, nil, text, addRelief(caveats, ep))
	case j.Verdict.Kind == VerdictNone:
		text := "validation found every tested rank's GEMM and every tested link healthy, and no rank enters collectives consistently late"
		if ep.Onset != nil {
			caveats = append(caveats, "the slowdown is not explained: its cause lies outside what validation tests (a job-wide cause such as the input pipeline or a shared network), or it was transient")
		}
		v = newVerdict(VerdictNone, nil, nil, text, addRelief(caveats, ep))
	default:
		v = newVerdict(VerdictInconclusive, nil, nil, j.Verdict.Text, addRelief(caveats, ep))
	}
	if len(j.Errors) > 0 {
		v.Text += "; errors: " + strings.Join(j.Errors, "; ")
	}
	return v
}

// addRelief adds the caveat of a relief seen during validation.
func addRelief(caveats []string, ep Episode) []string {
	if ep.Relief == nil {
		return caveats
	}
	return append(caveats, fmt.Sprintf("iteration time fell back during validation, %.1f → %.1f ms: the slowdown may have been transient", ep.Relief.BeforeMS, ep.Relief.AfterMS))
}

// partialCaveat: a finding that accounts for under twice ExplainFrac of
// the onset's increase explains it only in part.
func partialCaveat(increaseMS, frac float64, cfg Config) (string, bool) {
	if increaseMS > 0 && frac < 2*cfg.ExplainFrac {
		return fmt.Sprintf("it accounts for at most %.0f%% of the +%.1f ms: other causes may add to it", 100*frac, increaseMS), true
	}
	return "", false
}
