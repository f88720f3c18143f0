package analysis

import (
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/laggard-dev/laggard/internal/engine/kair"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/store"
)

// KairEvidence adapts the KAIR report of capture c (§III-B): Stage 1's
// rhythm straggler (or why none), and the culprit the backward blame
// names with the victims whose waiting it explains (or why none). Both
// are anchored on the capture (its id is their identity). The capture's
// steps are the evidence's; wall time is env.Clock's for them, else the
// traces' own step spans when they are on the epoch clock (Kineto's
// are), else the capture's life (created to deadline) as an outer bound.
func KairEvidence(c *store.Capture, rep *KairReport, hosts map[int]string, env EvidenceEnv) []incident.Evidence {
	if c == nil || rep == nil {
		return nil
	}
	a := kairAdapter{c: c, rep: rep, inc: max(c.Incarnation, 0), hosts: hosts, env: &env}
	a.win = a.span()
	var out []incident.Evidence
	if rep.Rhythm != nil {
		out = append(out, a.rank(rep.Rhythm))
	}
	out = append(out, a.culprit())
	return sortEvidence(out)
}

type kairAdapter struct {
	c     *store.Capture
	rep   *KairReport
	inc   int
	hosts map[int]string
	env   *EvidenceEnv
	win   incident.Span
}

// span is the capture's window on both axes: its common steps (else the
// steps it asked for).
func (a *kairAdapter) span() incident.Span {
	from, to := a.c.StartStep, a.c.StartStep+int64(max(a.c.Steps-1, 0)*max(a.c.Every, 1))
	if s := a.rep.Steps; len(s) > 0 && s[0].Step >= 0 {
		from, to = s[0].Step, s[len(s)-1].Step
	}
	sp := a.env.Clock.stepSpan(from, to)
	if sp.FromNS > 0 {
		return sp
	}
	if s := a.rep.Steps; len(s) > 0 {
		lo, hi := int64(0), int64(0)
		for _, t := range s[0].StartNS {
			if lo == 0 || t < lo {
				lo = t
			}
		}
		for _, t := range s[len(s)-1].EndNS {
			hi = max(hi, t)
		}
		if plausibleNS(lo) && plausibleNS(hi) && hi >= lo {
			sp.FromNS, sp.ToNS = lo, hi
			return sp
		}
	}
	if a.c.CreatedNS > 0 && a.c.DeadlineNS >= a.c.CreatedNS {
		sp.FromNS, sp.ToNS = a.c.CreatedNS, a.c.DeadlineNS
	}
	return sp
}

func (a *kairAdapter) base(kind incident.Kind) incident.Evidence {
	q := url.Values{}
	q.Set("capture", a.c.ID)
	return incident.Evidence{ID: evidenceID(kind, a.inc, a.c.ID), Kind: kind, Engine: incident.EngineKair, Job: a.c.Job,
		Incarnation: a.inc, AtNS: a.env.AtNS, Window: a.win, Signal: incident.SignalFinding,
		View: viewPath(a.c.Job, "kair", q)}
}

// kairNotWaitedFor is the reason a Stage 1 straggler is withheld: the
// others' wait for it at collectives was measured and is immaterial
// (kair.TraceReport.HoldsBack). KAIR's verdict says it in words; this is
// the code.
const kairNotWaitedFor = "not_waited_for"

// rhythmDetail is Stage 1's result without its per-window matrices
// (Freq, D: quadratic in the ranks).
type rhythmDetail struct {
	Verdict   kair.RhythmVerdict `json:"verdict"`
	Straggler int                `json:"straggler"`
	Why       string             `json:"why"`
	Frame     kair.RhythmFrame   `json:"frame"`
	Ranks     []int              `json:"ranks"`
	Score     []float64          `json:"score"`
	P         []float64          `json:"p"`
	Holds     bool               `json:"holds_back"`
	Measured  bool               `json:"wait_measured"`
}

// rank is Stage 1's straggler: the rank whose operator rhythm diverges
// from the others' (§III-B Stage 1). It localizes at the operator layer
// and says nothing of why. High confidence when the other ranks also
// waited for it at collectives (kair.TraceReport.HoldsBack); withheld
// when they measurably did not (a rhythm that differs without holding
// anyone back is not a delay of the job); a candidate when the capture
// joined no collective to tell.
func (a *kairAdapter) rank(rh *kair.Rhythm) incident.Evidence {
	e := a.base(incident.KindKairRank)
	e.Layer, e.Category = incident.LayerOperator, incident.CategoryUnknown
	e.Reason = rh.Why
	d := rhythmDetail{Verdict: rh.Verdict, Straggler: rh.Straggler, Why: rh.Why, Frame: rh.Frame, Ranks: rh.Ranks, Score: rh.Score, P: rh.P}
	switch rh.Verdict {
	case kair.RhythmStraggler:
		d.Holds, d.Measured = a.rep.HoldsBack(rh.Straggler)
		e.Targets = []incident.Target{rankTarget(rh.Straggler, a.hosts, "")}
		e.Text = fmt.Sprintf("KAIR: rank %d's operators complete in a rhythm unlike the other ranks'", rh.Straggler)
		switch {
		case d.Measured && d.Holds:
			e.Confidence = incident.ConfidenceHigh
			e.Reason += "; the other ranks wait for it at collectives"
		case d.Measured:
			// The engine's own check says the rank holds no one back: not
			// a candidate for the job's slowdown, so it names no one.
			e.Targets, e.Confidence, e.Withheld = nil, incident.ConfidenceWithheld, kairNotWaitedFor
			e.Text = fmt.Sprintf("KAIR: rank %d's operator rhythm differs, but the other ranks do not wait for it", rh.Straggler)
			e.Reason += "; but the other ranks do not wait for it at collectives: its rhythm differs without holding the job back"
		default:
			e.Confidence = incident.ConfidenceLow
			e.Reason += "; no collective joined the ranks in the capture, so whether it holds the job back is not measured"
		}
	default: // none, inconclusive
		e.Confidence, e.Withheld = incident.ConfidenceWithheld, string(rh.Verdict)
		e.Text = "KAIR: no rank's operator rhythm stands out"
	}
	e.Detail = detail(d)
	return e
}

// culpritDetail is the culprit evidence's Detail: the verdict, what it
// explains, and the causes it judged.
type culpritDetail struct {
	Verdict kair.TraceVerdict `json:"verdict"`
	Impact  *kair.Impact      `json:"impact,omitempty"`
	Causes  []kair.Cause      `json:"causes,omitempty"`
	Victims []int             `json:"victims,omitempty"`
}

// culprit is the backward blame's conclusion (§III-B Stage 3): one
// operator (culprit) or one rank's few candidates (culprit_rank), with
// the engine's own test that the others' wait for it is material. A
// cause on another rank's link (an edge from another rank: the transfer
// or synchronization between two operators) names that link.
//
// Victims are cleared (Against) at the operator layer: the ranks KAIR
// compared that waited for the culprit at the capture's collectives (the
// wait was measured, Impact.Checked) and have no material root cause of
// their own (kair.TraceReport.Material: each costs under MinShare of the
// median step — the noise a busy host makes on any rank). They are slow
// by waiting.
// Against rather than a note because it is a measurement fusion can
// weigh — another engine blaming a victim's operators contradicts it —
// and at the operator layer only, since that is what the walk judged.
// The rank the others waited for besides the culprit (Impact.OtherRank)
// and Stage 1's straggler, when it is another rank, are never cleared.
func (a *kairAdapter) culprit() incident.Evidence {
	rep := a.rep
	e := a.base(incident.KindKairCulprit)
	e.Layer, e.Category = incident.LayerOperator, incident.CategoryUnknown
	e.Reason = rep.Headline
	d := culpritDetail{Verdict: rep.Verdict, Impact: rep.Impact}
	im := rep.Impact
	if (rep.Verdict != kair.VerdictCulprit && rep.Verdict != kair.VerdictRank) || im == nil || len(im.Causes) == 0 {
		e.Confidence, e.Withheld = incident.ConfidenceWithheld, string(rep.Verdict)
		e.Text = "KAIR names no operator or rank for this capture"
		if rep.Verdict == kair.VerdictNone {
			e.Text = "KAIR finds no operator that costs the job material time in this capture"
		}
		e.Detail = detail(d)
		return e
	}
	for _, i := range im.Causes {
		if i >= 0 && i < len(rep.Causes) {
			d.Causes = append(d.Causes, rep.Causes[i])
		}
	}
	top := &d.Causes[0]
	e.Confidence = incident.ConfidenceHigh
	culpritRanks := []int{top.Rank}
	switch {
	case top.Kind == kair.KindEdge && top.FromRank >= 0 && top.FromRank != top.Rank:
		// Two ranks' operators with time between them: a transfer or a
		// synchronization (§III-B rule 2): the link between them.
		e.Targets = []incident.Target{incident.LinkTarget(top.FromRank, top.Rank)}
		e.Layer, e.Category = incident.LayerNetwork, incident.CategoryCommunication
		culpritRanks = append(culpritRanks, top.FromRank)
		e.Text = fmt.Sprintf("KAIR: rank %d's %s starts late after rank %d's %s finished on time — the transfer or synchronization between them", top.Rank, top.Name, top.FromRank, top.From)
	case top.Kind == kair.KindEdge:
		e.Targets = []incident.Target{rankTarget(top.Rank, a.hosts, "")}
		from := top.From
		if from == kair.StepStart {
			from = "the step's start"
		}
		e.Text = fmt.Sprintf("KAIR: rank %d waits between %s and %s — time no operator accounts for (a wait or unprofiled host work)", top.Rank, from, top.Name)
	case rep.Verdict == kair.VerdictRank:
		e.Targets = []incident.Target{rankTarget(top.Rank, a.hosts, "")}
		e.Category = a.opCategory(top)
		e.Text = fmt.Sprintf("KAIR: the culprit is on rank %d, one of %d operators that cost comparable time (%s first)", top.Rank, len(d.Causes), top.Name)
	default:
		e.Targets = []incident.Target{rankTarget(top.Rank, a.hosts, ""), {Kind: incident.TargetOperator, Name: top.Name, Rank: top.Rank}}
		e.Category = a.opCategory(top)
		e.Text = fmt.Sprintf("KAIR: operator %s on rank %d runs %s per step longer than on its peers", top.Name, top.Rank, fmtDur(top.ExcessNS/int64(max(top.Steps, 1))))
	}
	if im.HeldNS > 0 {
		e.Text += fmt.Sprintf("; the other ranks wait %s per step for it", fmtDur(im.HeldNS))
	}
	if im.Checked {
		d.Victims = a.victims(culpritRanks)
		e.Against = rankTargets(d.Victims, a.hosts)
	}
	e.Detail = detail(d)
	return e
}

// victims are the compared ranks the culprit's blame clears (see
// culprit).
func (a *kairAdapter) victims(culprits []int) []int {
	keep := map[int]bool{}
	for _, r := range culprits {
		keep[r] = true
	}
	if im := a.rep.Impact; im.OtherRank >= 0 && im.OtherHeldNS > 0 {
		keep[im.OtherRank] = true
	}
	for i := range a.rep.Causes {
		if c := &a.rep.Causes[i]; a.rep.Material(c) {
			keep[c.Rank] = true
			if c.FromRank >= 0 {
				keep[c.FromRank] = true
			}
		}
	}
	if rh := a.rep.Rhythm; rh != nil && rh.Verdict == kair.RhythmStraggler {
		keep[rh.Straggler] = true
	}
	var out []int
	for _, r := range a.rep.Ranks {
		if !keep[r] {
			out = append(out, r)
		}
	}
	return out
}

// opCategory routes the culprit operator by its event category (the
// instance Stage 2 scored), unknown when the report has none of it.
func (a *kairAdapter) opCategory(c *kair.Cause) incident.Category {
	find := func(ins []kair.Instance) (optrace.Category, bool) {
		i := slices.IndexFunc(ins, func(in kair.Instance) bool { return in.Rank == c.Rank && in.Name == c.Name })
		if i < 0 {
			return 0, false
		}
		return ins[i].Cat, true
	}
	cat, ok := find(a.rep.StragglerOutliers)
	for _, r := range a.rep.StepReports {
		if ok || r == nil {
			break
		}
		cat, ok = find(r.Outliers)
	}
	switch {
	case !ok:
		return incident.CategoryUnknown
	case cat == optrace.Collective:
		return incident.CategoryCommunication
	case cat == optrace.CPUOp || cat == optrace.GPUKernel || cat == optrace.Memcpy || cat == optrace.Memset ||
		cat == optrace.Runtime || cat == optrace.Python:
		return incident.CategoryCompute
	}
	return incident.CategoryUnknown // user ranges and others: what they time is the job's
}

// fmtDur is a duration in words.
func fmtDur(ns int64) string { return time.Duration(ns).Round(100 * time.Microsecond).String() }
