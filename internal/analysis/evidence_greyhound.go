package analysis

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/incident"
)

// ghViewHalfNS is half the width of the Greyhound view a point in time
// opens on (the engine's default window is 10 minutes).
const ghViewHalfNS = int64(300e9)

// GreyhoundEvidence adapts a Greyhound-Detect report: every change point
// the controller acts on (onset or relief), every controller phase
// change (state), and for the controller's latest episode (from its
// entering profiling) the degraded groups of the cross-group comparison,
// the verdict once concluded; each validation run's GEMM and P2P results
// (slow ones named, healthy ones cleared at their layer); and entry
// lateness — the rank the others wait for at one collective — judged by
// the engine's own rule (greyhound.ReportLate, LateEvidence.Caveats).
// Times are the engine's (wall clock, and a validation's plan step);
// steps come from env.Clock. A report over every incarnation gives none.
func GreyhoundEvidence(rep *greyhound.Report, hosts map[int]string, env EvidenceEnv) []incident.Evidence {
	if rep == nil || rep.Incarnation == IncAll {
		return nil
	}
	a := ghAdapter{rep: rep, inc: max(rep.Incarnation, 0), hosts: hosts, env: &env, cfg: env.greyhoundConfig(), at: env.AtNS}
	if a.at == 0 {
		a.at = rep.GeneratedNS
	}
	a.ep, a.inEpisode = lastEpisode(rep.Controller.History)
	a.onset = a.episodeOnset()
	var out []incident.Evidence
	for i := range rep.ChangePoints {
		if c := &rep.ChangePoints[i]; a.decisive(c) {
			out = append(out, a.change(c))
		}
	}
	for i := range rep.Controller.History {
		out = append(out, a.phase(&rep.Controller.History[i]))
	}
	if a.inEpisode && rep.Controller.Phase != greyhound.PhaseTracking {
		out = append(out, a.crossGroup()...)
	}
	for i := range rep.Validation {
		out = append(out, a.validation(&rep.Validation[i])...)
	}
	if e, ok := a.verdict(); ok {
		out = append(out, e)
	}
	if e, ok := a.late(); ok {
		out = append(out, e)
	}
	return sortEvidence(out)
}

type ghAdapter struct {
	rep   *greyhound.Report
	inc   int
	hosts map[int]string
	env   *EvidenceEnv
	cfg   greyhound.Config
	at    int64
	// ep is the controller's latest episode (inEpisode: it has one);
	// onset the verified onset that opened it (nil: none in the window,
	// or a manual episode).
	ep        ghEpisode
	inEpisode bool
	onset     *greyhound.ChangePointView
}

// ghEpisode is one episode of the controller (§4.1): from entering
// profiling to returning to tracking.
type ghEpisode struct {
	StartNS   int64 // the transition into profiling
	VerdictNS int64 // the transition into verdict, 0 while none
	EndNS     int64 // the transition back to tracking, 0 while open
	PrevEndNS int64 // the previous return to tracking, 0 when none
}

// lastEpisode finds the latest episode in the controller's history.
func lastEpisode(h []greyhound.Transition) (ghEpisode, bool) {
	i := -1
	for k := len(h) - 1; k >= 0; k-- {
		if h[k].To == greyhound.PhaseProfiling {
			i = k
			break
		}
	}
	if i < 0 {
		return ghEpisode{}, false
	}
	ep := ghEpisode{StartNS: h[i].AtNS}
	for k := i - 1; k >= 0; k-- {
		if h[k].To == greyhound.PhaseTracking {
			ep.PrevEndNS = h[k].AtNS
			break
		}
	}
	for _, t := range h[i+1:] {
		switch {
		case t.To == greyhound.PhaseVerdict && ep.VerdictNS == 0:
			ep.VerdictNS = t.AtNS
		case t.To == greyhound.PhaseTracking && ep.EndNS == 0:
			ep.EndNS = t.AtNS
		}
	}
	return ep, true
}

func (a *ghAdapter) episodePart() string { return "e" + strconv.FormatInt(a.ep.StartNS, 10) }

// decisive: the change points the controller acts on (the verified ones
// under BOCD+V, every one under the baseline detectors).
func (a *ghAdapter) decisive(c *greyhound.ChangePointView) bool {
	return c.Verified || (a.rep.Detector != "" && a.rep.Detector != greyhound.DetectorBOCDV)
}

// episodeOnset is the onset that opened the latest episode: the newest
// decisive onset ending by the episode's start and after the previous
// episode ended (the controller consumed it then).
func (a *ghAdapter) episodeOnset() *greyhound.ChangePointView {
	if !a.inEpisode {
		return nil
	}
	var best *greyhound.ChangePointView
	for i := range a.rep.ChangePoints {
		c := &a.rep.ChangePoints[i]
		if c.Kind == greyhound.KindOnset && a.decisive(c) && c.EndNS <= a.ep.StartNS && c.EndNS > a.ep.PrevEndNS &&
			(best == nil || c.EndNS > best.EndNS) {
			best = c
		}
	}
	return best
}

func (a *ghAdapter) base(kind incident.Kind, id string) incident.Evidence {
	return incident.Evidence{ID: id, Kind: kind, Engine: incident.EngineGreyhound, Job: a.rep.Job,
		Incarnation: a.inc, AtNS: a.at, Ranks: a.rep.Telemetry.Ranks}
}

// view is the Greyhound view over [from, to] (the launch read).
func (a *ghAdapter) view(from, to int64) string {
	q := nsQuery(from, to)
	q.Set(ParamIncarnation, strconv.Itoa(a.inc))
	return viewPath(a.rep.Job, "greyhound", q)
}

func (a *ghAdapter) viewAround(ns int64) string { return a.view(ns-ghViewHalfNS, ns+ghViewHalfNS) }

// change is a change point of the iteration time: the first slow (or
// fast) iteration ends at EndNS.
func (a *ghAdapter) change(c *greyhound.ChangePointView) incident.Evidence {
	e := a.base(incident.KindGreyhoundChange, evidenceID(incident.KindGreyhoundChange, a.inc, timePart(c.EndNS), string(c.Kind)))
	e.Window = a.env.Clock.nsSpan(c.EndNS-int64(max(c.AfterMS, 0)*1e6), c.EndNS)
	e.Signal = incident.SignalOnset
	verb := "rose"
	if c.Kind == greyhound.KindRelief {
		e.Signal, verb = incident.SignalRelief, "fell"
	}
	// The controller acts on it: verified under BOCD+V; the baseline
	// detectors have no verification, and the controller acts on every
	// change they report.
	e.BeforeMS, e.AfterMS, e.Verified = c.BeforeMS, c.AfterMS, true
	e.Text = fmt.Sprintf("Iteration time %s from %.1f to %.1f ms (%+.0f%%)", verb, c.BeforeMS, c.AfterMS, 100*c.Rel)
	e.Reason = "a change of the iteration time read from the collective-call pattern"
	if c.Verified {
		e.Reason += ", confirmed by the verification window"
	} else {
		e.Reason += " that the " + a.rep.Detector + " detector reports"
	}
	e.Detail = detail(c)
	e.View = a.viewAround(c.EndNS)
	return e
}

// phase is a controller phase change: a timeline marker, no statement.
func (a *ghAdapter) phase(t *greyhound.Transition) incident.Evidence {
	e := a.base(incident.KindGreyhoundPhase, evidenceID(incident.KindGreyhoundPhase, a.inc, timePart(t.AtNS), string(t.From)+"-"+string(t.To)))
	e.Window = a.env.Clock.nsSpan(t.AtNS, t.AtNS)
	e.Signal = incident.SignalState
	e.Text = fmt.Sprintf("Greyhound moved from %s to %s", t.From, t.To)
	e.Reason = t.Reason
	e.Detail = detail(t)
	e.View = a.viewAround(t.AtNS)
	return e
}

// profileSpan is the cross-group comparison's window: the latest
// ProfileIters iterations of the report (the episode's start to the
// report's time when the report has no iteration series).
func (a *ghAdapter) profileSpan() (int64, int64) {
	s := a.rep.Iteration.Series
	if len(s) == 0 {
		return a.ep.StartNS, a.at
	}
	k := max(0, len(s)-a.cfg.ProfileIters)
	return s[k].EndNS - int64(s[k].MS*1e6), s[len(s)-1].EndNS
}

// crossGroupDetail is a degraded group's Detail: the member and the
// cluster it was compared in.
type crossGroupDetail struct {
	Cluster greyhound.Cluster `json:"cluster"`
	Member  greyhound.Member  `json:"member"`
}

// crossGroup names each degraded communication group of the comparison
// (§4.3), a candidate (low). It names the group, not its members: the
// comparison cannot tell which member slows the group (validation does),
// and naming every member would make each a candidate that any other
// engine's weak hint could turn into a stated cause.
func (a *ghAdapter) crossGroup() []incident.Evidence {
	from, to := a.profileSpan()
	var out []incident.Evidence
	for _, cl := range a.rep.Groups {
		for _, m := range cl.Members {
			if !m.Degraded {
				continue
			}
			e := a.base(incident.KindGreyhoundCrossGroup, evidenceID(incident.KindGreyhoundCrossGroup, a.inc, a.episodePart(), "comm:"+m.Comm, cl.Op.String(), strconv.FormatInt(cl.Bytes, 10)))
			e.Window = a.env.Clock.nsSpan(from, to)
			e.Signal = incident.SignalFinding
			e.Targets = []incident.Target{{Kind: incident.TargetGroup, Name: m.Comm}}
			e.Layer, e.Category, e.Confidence = incident.LayerCollective, incident.CategoryCommunication, incident.ConfidenceLow
			e.Text = fmt.Sprintf("Communication group %s (ranks %s) runs its %s of %d bytes %.2f× slower than comparable groups", m.Comm, joinRanks(sortedUnique(m.Ranks)), cl.Op, cl.Bytes, m.Ratio)
			e.Reason = fmt.Sprintf("cross-group comparison: %.1f ms against a healthy reference of %.1f ms over %d instances; it cannot tell which member slows the group",
				m.ExecMS, cl.RefMS, m.Instances)
			e.Detail = detail(crossGroupDetail{Cluster: greyhound.Cluster{Op: cl.Op, Bytes: cl.Bytes, Size: cl.Size, MedianMS: cl.MedianMS, RefMS: cl.RefMS, Comparable: cl.Comparable, Note: cl.Note}, Member: m})
			e.View = a.view(from, to)
			out = append(out, e)
		}
	}
	return out
}

// validationSpan places a validation run: at its plan's at_step, over
// the ranks' reported pause, else from the step's start (or the plan's
// publication) to its deadline. A run the report cannot place on the
// wall clock has its step only.
func (a *ghAdapter) validationSpan(v *greyhound.ValidationView) incident.Span {
	from, to := v.PausedFromNS, v.PausedToNS
	if from == 0 {
		if from = a.env.Clock.NS(v.AtStep); from == 0 {
			from = v.CreatedNS
		}
		to = from
		if v.CreatedNS > 0 {
			to = max(from, v.CreatedNS+v.DeadlineMS*1e6)
		}
	}
	sp := incident.Span{FromStep: v.AtStep, ToStep: v.AtStep}
	if from > 0 && to >= from {
		sp.FromNS, sp.ToNS = from, to
	}
	return sp
}

// validation is one run's results as two findings, each at the layer
// its benchmark tests: the GEMM (gpu: compute) and the P2P transfers
// (network). A benchmark that measured a rank or link normal clears it
// (Against) — except a rank Greyhound itself finds the others waiting
// for (its lateness, or a late_rank verdict): a healthy GEMM does not
// clear a rank that is late for a host-side reason, it tells where the
// cause is not (Conclude: "its compute validated healthy, so the cause
// is on its host side"). A slow one is named with low confidence: it is
// a measurement, and whether it explains the slowdown is the verdict's
// call (Conclude weighs it).
func (a *ghAdapter) validation(v *greyhound.ValidationView) []incident.Evidence {
	sp := a.validationSpan(v)
	// Clearing is high confidence once every planned rank answered.
	clear := incident.ConfidenceLow
	if v.State == greyhound.ValidationDone && v.Verdict.Kind != greyhound.VerdictInconclusive {
		clear = incident.ConfidenceHigh
	}
	q := a.view(sp.FromNS-ghViewHalfNS, sp.ToNS+ghViewHalfNS)
	if sp.FromNS == 0 {
		q = a.view(0, 0)
	}
	var out []incident.Evidence
	slowRank := map[int]bool{}
	if len(v.GEMM) > 0 {
		late := a.lateRanks()
		var slow, ok []int
		for _, g := range v.GEMM {
			switch {
			case g.Slow:
				slow = append(slow, g.Rank)
				slowRank[g.Rank] = true
			case !late[g.Rank]:
				ok = append(ok, g.Rank)
			}
		}
		out = append(out, a.bench(v, sp, q, clear, benchPart{name: "gemm", layer: incident.LayerGPU, category: incident.CategoryCompute,
			slow: rankTargets(slow, a.hosts), ok: rankTargets(ok, a.hosts), detail: v.GEMM,
			slowText: fmt.Sprintf("GEMM validation %s: rank(s) %s compute slower than the healthy ranks", v.ID, joinRanks(slow)),
			okText:   fmt.Sprintf("GEMM validation %s: every tested rank computes at the healthy rate (%d ranks)", v.ID, len(ok)),
			okReason: "the benchmark clears these ranks' GPU compute, not what else they do"}))
	}
	if len(v.Links) > 0 {
		var slow, ok []incident.Target
		for _, l := range v.Links {
			switch {
			case l.Slow && (slowRank[l.Src] || slowRank[l.Dst]):
				// A rank slow at GEMM explains its slow transfers
				// (JudgeAll): the link is neither named nor cleared.
			case l.Slow:
				slow = append(slow, incident.LinkTarget(l.Src, l.Dst))
			default:
				ok = append(ok, incident.LinkTarget(l.Src, l.Dst))
			}
		}
		out = append(out, a.bench(v, sp, q, clear, benchPart{name: "p2p", layer: incident.LayerNetwork, category: incident.CategoryNetwork,
			slow: slow, ok: ok, detail: v.Links,
			slowText: fmt.Sprintf("P2P validation %s: link(s) %s transfer slower than the healthy links", v.ID, joinLinkTargets(slow)),
			okText:   fmt.Sprintf("P2P validation %s: every tested link transfers at the healthy rate (%d links)", v.ID, len(ok)),
			okReason: "the benchmark clears these links, not the ranks at their ends"}))
	}
	return out
}

// lateRanks are the ranks Greyhound finds the others waiting for: its
// verdict's when it is late_rank, and entry lateness's.
func (a *ghAdapter) lateRanks() map[int]bool {
	out := map[int]bool{}
	if v := a.rep.Verdict; v.Kind == greyhound.VerdictLateRank {
		for _, r := range v.Ranks {
			out[r] = true
		}
	}
	if le, ok := a.lateEvidence(); ok {
		out[le.Rank] = true
	}
	return out
}

// benchPart is one benchmark of a validation run (GEMM or P2P): what it
// found slow and healthy, in words.
type benchPart struct {
	name                       string
	layer                      incident.Layer
	category                   incident.Category
	slow, ok                   []incident.Target
	slowText, okText, okReason string
	detail                     any
}

// bench is one benchmark's evidence: the slow ones named as candidates
// (and the healthy ones cleared beside them), or, with none slow, the
// healthy ones cleared.
func (a *ghAdapter) bench(v *greyhound.ValidationView, sp incident.Span, view string, clear incident.Confidence, p benchPart) incident.Evidence {
	e := a.base(incident.KindGreyhoundValidation, evidenceID(incident.KindGreyhoundValidation, a.inc, v.ID, p.name))
	e.Window, e.Layer, e.Category, e.View = sp, p.layer, p.category, view
	e.Targets, e.Against = p.slow, p.ok
	if len(p.slow) > 0 {
		e.Signal, e.Confidence, e.Text = incident.SignalFinding, incident.ConfidenceLow, p.slowText
		e.Reason = "a benchmark measurement; whether it explains the slowdown is the verdict's to say"
	} else {
		e.Signal, e.Confidence, e.Text, e.Reason = incident.SignalHealthy, clear, p.okText, p.okReason
	}
	e.Detail = detail(p.detail)
	return e
}

// verdict is the controller's conclusion of its latest episode, once it
// has one (a report in profiling or validation shows an interim verdict:
// entry lateness is adapted on its own, late). Confidence is the
// engine's; a verdict that names nothing is a withholding with the
// verdict's kind as reason.
func (a *ghAdapter) verdict() (incident.Evidence, bool) {
	if !a.inEpisode || a.ep.VerdictNS == 0 {
		return incident.Evidence{}, false
	}
	v := &a.rep.Verdict
	e := a.base(incident.KindGreyhoundVerdict, evidenceID(incident.KindGreyhoundVerdict, a.inc, a.episodePart()))
	from := a.ep.StartNS
	if o := a.onset; o != nil {
		from = min(from, o.EndNS-int64(max(o.AfterMS, 0)*1e6))
	}
	e.Window = a.env.Clock.nsSpan(from, max(a.ep.VerdictNS, from))
	e.Signal = incident.SignalFinding
	e.Confidence = incident.ConfidenceLow
	if v.Confidence == greyhound.ConfidenceHigh {
		e.Confidence = incident.ConfidenceHigh
	}
	switch v.Kind {
	case greyhound.VerdictSlowRank:
		e.Targets, e.Layer, e.Category = rankTargets(v.Ranks, a.hosts), incident.LayerGPU, incident.CategoryCompute
		e.Text = fmt.Sprintf("Greyhound: rank(s) %s compute slower than the healthy ranks and that explains the slowdown", joinRanks(v.Ranks))
	case greyhound.VerdictSlowLink:
		for _, l := range v.Links {
			e.Targets = append(e.Targets, incident.LinkTarget(l.Src, l.Dst))
		}
		e.Layer, e.Category = incident.LayerNetwork, incident.CategoryNetwork
		e.Text = fmt.Sprintf("Greyhound: link(s) %s transfer slower than the healthy links and that explains the slowdown", joinLinkTargets(e.Targets))
	case greyhound.VerdictLateRank:
		e.Targets, e.Layer, e.Category = rankTargets(v.Ranks, a.hosts), incident.LayerCollective, incident.CategoryUnknown
		e.Text = fmt.Sprintf("Greyhound: the others wait for rank %s at its collectives; its cause is on its host side", joinRanks(v.Ranks))
	case greyhound.VerdictUniform:
		e.Targets, e.Layer, e.Category = []incident.Target{incident.JobTarget()}, incident.LayerCollective, incident.CategoryUniform
		e.Text = "Greyhound: every communication group slowed alike — a job-wide cause rather than one rank or link"
	default: // none, inconclusive: names nothing
		e.Confidence, e.Withheld = incident.ConfidenceWithheld, string(v.Kind)
		e.Text = "Greyhound names no rank or link for this slowdown"
	}
	e.Reason = v.Text
	e.Detail = detail(v)
	e.View = a.view(from-ghViewHalfNS, a.ep.VerdictNS+ghViewHalfNS)
	return e, true
}

// lateDetail is a lateness evidence's Detail.
type lateDetail struct {
	Late     greyhound.LateEvidence `json:"late"`
	Caveats  []string               `json:"caveats,omitempty"`
	OnsetNS  int64                  `json:"onset_end_ns,omitempty"`
	Episodic bool                   `json:"episodic"`
}

// late is entry lateness (contract §5): the rank the others wait for at
// one collective, when the engine's rule singles one out (LateRank:
// last on ≥ LateShare of ≥ LateMinInstances instances, by ≥ 1 ms, whose
// wait explains ≥ ExplainFrac of the increase). It is exclusive on its
// communicator — one rank enters last there — and high confidence only
// without any of the engine's caveats (LateEvidence.Caveats). Inside an
// episode it is judged since the episode's onset and anchored on the
// episode; outside one it is the job's standing straggler (judged against
// the iteration time), replaced on each re-evaluation.
func (a *ghAdapter) late() (incident.Evidence, bool) {
	le, ok := a.lateEvidence()
	if !ok {
		return incident.Evidence{}, false
	}
	onset, episodic := a.lateOnset()
	anchor := "standing"
	if episodic {
		anchor = a.episodePart()
	}
	subject := "comm:" + le.Comm
	e := a.base(incident.KindGreyhoundLate, evidenceID(incident.KindGreyhoundLate, a.inc, anchor, subject, rankPart(le.Rank)))
	var from, first, last int64
	if onset != nil {
		from = onset.EndNS - int64(max(onset.AfterMS, 0)*1e6)
	}
	for _, in := range a.rep.Lateness.Instances {
		if in.EndNS < from {
			continue
		}
		if first == 0 || in.EndNS < first {
			first = in.EndNS
		}
		last = max(last, in.EndNS)
	}
	// The window is the instances the lateness was judged on (the
	// matrix holds the latest profiling window's), not the whole episode.
	e.Window = a.env.Clock.nsSpan(first, last)
	e.Signal = incident.SignalFinding
	t := rankTarget(le.Rank, a.hosts, "")
	e.Targets, e.Subject, e.Exclusive = []incident.Target{t}, subject, true
	e.Layer, e.Category = incident.LayerCollective, incident.CategoryUnknown
	caveats := le.Caveats(a.cfg)
	e.Confidence = incident.ConfidenceHigh
	if len(caveats) > 0 {
		e.Confidence = incident.ConfidenceLow
	}
	e.Text = fmt.Sprintf("Rank %d enters %s on %s last; the others wait %.1f ms per iteration for it", le.Rank, le.Op, le.Comm, le.WaitMS)
	why := fmt.Sprintf("last on %d of %d instances, a median %.1f ms after the next member", le.Last, le.Instances, le.MarginMS)
	if le.IncreaseMS > 0 {
		why += fmt.Sprintf("; its wait is %s of the +%.1f ms increase", percent(le.Frac), le.IncreaseMS)
	} else {
		why += fmt.Sprintf("; its wait is %s of the iteration time (no onset)", percent(le.Frac))
	}
	if len(caveats) > 0 {
		why += "; " + strings.Join(caveats, "; ")
	}
	e.Reason = why
	d := lateDetail{Late: le, Caveats: caveats, Episodic: episodic}
	if onset != nil {
		d.OnsetNS = onset.EndNS
	}
	e.Detail = detail(d)
	e.View = a.view(first, last)
	return e, true
}

// lateOnset is what lateness is judged since: the episode's onset while
// the controller is in an episode (episodic), none outside one.
func (a *ghAdapter) lateOnset() (*greyhound.ChangePointView, bool) {
	if a.inEpisode && a.rep.Controller.Phase != greyhound.PhaseTracking {
		return a.onset, true
	}
	return nil, false
}

// lateEvidence is the engine's lateness finding for the report (ok: its
// rule singles out a rank).
func (a *ghAdapter) lateEvidence() (greyhound.LateEvidence, bool) {
	onset, _ := a.lateOnset()
	return greyhound.ReportLate(a.rep, onset, a.cfg)
}

// joinRanks writes ranks as "1,4,7".
func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}

// joinLinkTargets writes links as "0→1, 2→3".
func joinLinkTargets(ts []incident.Target) string {
	s := make([]string, 0, len(ts))
	for _, t := range ts {
		s = append(s, fmt.Sprintf("%d→%d", t.Src, t.Dst))
	}
	return strings.Join(s, ", ")
}
