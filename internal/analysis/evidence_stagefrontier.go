package analysis

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// progressBlock is how many steps one progress evidence holds. Blocks are
// aligned (steps [k·256, (k+1)·256)), so each step's sample lives in one
// evidence whose identity does not slide with the time axis: a
// re-evaluation re-sends the growing newest block and replaces it.
const progressBlock = 256

// StageFrontierEvidence adapts a job report: one evidence per change
// point of the job's step time (onset or relief), one per role group for
// the stage its headline points at (the rank the others wait for there,
// or why none is named), and the step-time series in aligned blocks
// (progress, for lost time and resolution). Steps are the report's;
// wall time comes from env.Clock (unknown without one). A report over
// every incarnation ("all": positions, not steps) gives none.
func StageFrontierEvidence(rep *Report, hosts map[int]string, env EvidenceEnv) []incident.Evidence {
	if rep == nil {
		return nil
	}
	inc := 0
	if in := rep.Incarnations; in != nil {
		if in.Analysed == IncAll {
			return nil
		}
		inc = in.Analysed
	}
	ranks := 0
	for _, g := range rep.Groups {
		ranks += g.NumRanks
	}
	sf := sfAdapter{rep: rep, inc: inc, ranks: ranks, hosts: hosts, env: &env}
	var out []incident.Evidence
	if tl := rep.Timeline; tl != nil {
		for i := range tl.ChangePoints {
			out = append(out, sf.change(&tl.ChangePoints[i]))
		}
		out = append(out, sf.progress(tl)...)
	}
	for i := range rep.Groups {
		if e, ok := sf.leader(&rep.Groups[i]); ok {
			out = append(out, e)
		}
	}
	return sortEvidence(out)
}

type sfAdapter struct {
	rep   *Report
	inc   int
	ranks int
	hosts map[int]string
	env   *EvidenceEnv
}

func (a *sfAdapter) base(kind incident.Kind, id string) incident.Evidence {
	return incident.Evidence{ID: id, Kind: kind, Engine: incident.EngineStageFrontier, Job: a.rep.JobID,
		Incarnation: a.inc, AtNS: a.env.AtNS, Ranks: a.ranks}
}

// view is the report view over steps [from, to] (of group, when the job
// has several).
func (a *sfAdapter) view(from, to int64, group string) string {
	q := url.Values{}
	q.Set(ParamFrom, strconv.FormatInt(from, 10))
	q.Set(ParamTo, strconv.FormatInt(to, 10))
	if group != "" && len(a.rep.Groups) > 1 {
		q.Set(ParamGroup, group)
	}
	if a.rep.Incarnations != nil {
		q.Set(ParamIncarnation, IncarnationText(a.inc))
	}
	return viewPath(a.rep.JobID, "report", q)
}

// change is one level change of the job's exposed step time. The time
// axis's segment test only reports changes it found significant, so each
// is verified; its view is the regime it starts (to the next change).
func (a *sfAdapter) change(c *ChangePoint) incident.Evidence {
	e := a.base(incident.KindStageChange, evidenceID(incident.KindStageChange, a.inc, stepPart(c.Step), string(c.Kind)))
	e.Window = a.env.Clock.stepSpan(c.Step, c.Step)
	e.Signal = incident.SignalOnset
	verb := "rose"
	if c.Kind == Relief {
		e.Signal, verb = incident.SignalRelief, "fell"
	}
	e.BeforeMS, e.AfterMS, e.Verified = c.BeforeMS, c.AfterMS, true
	e.Text = fmt.Sprintf("Step time %s from %.1f to %.1f ms at step %d (%+.0f%%)", verb, c.BeforeMS, c.AfterMS, c.Step, 100*c.Rel)
	if len(c.Stages) > 0 && c.Stages[0].DeltaMS != 0 {
		s := c.Stages[0]
		e.Text += fmt.Sprintf("; the %s stage moved most (%.1f → %.1f ms)", stagevec.ShortName(s.Stage), s.BeforeMS, s.AfterMS)
	}
	e.Reason = "a level change of the job's step time (the slowest role group's exposed time per step) that the time axis's segment test found significant"
	e.Detail = detail(c)
	to := a.rep.Timeline.To
	for _, n := range a.rep.Timeline.ChangePoints {
		if n.Step > c.Step {
			to = n.Step - 1
			break
		}
	}
	e.View = a.view(c.Step, max(to, c.Step), "")
	return e
}

// progress is the time axis's step times in aligned blocks. When older
// steps exist than the axis holds, the oldest block is cut: it is left
// out, so it never replaces the fuller one sent before.
func (a *sfAdapter) progress(tl *Timeline) []incident.Evidence {
	if len(tl.Series) == 0 {
		return nil
	}
	first := tl.Series[0].Step
	var out []incident.Evidence
	for i := 0; i < len(tl.Series); {
		block := tl.Series[i].Step - tl.Series[i].Step%progressBlock
		j := i
		for j < len(tl.Series) && tl.Series[j].Step < block+progressBlock {
			j++
		}
		pts := tl.Series[i:j]
		i = j
		if tl.Truncated && block < first {
			continue
		}
		var samples []incident.Sample
		for _, p := range pts {
			if math.IsNaN(p.ExposedMS) || math.IsInf(p.ExposedMS, 0) {
				continue
			}
			samples = append(samples, incident.Sample{Step: p.Step, WallNS: a.env.Clock.NS(p.Step), MS: p.ExposedMS})
		}
		if len(samples) == 0 {
			continue
		}
		lo, hi := samples[0].Step, samples[len(samples)-1].Step
		e := a.base(incident.KindProgress, evidenceID(incident.KindProgress, a.inc, stepPart(block)))
		e.Window = a.env.Clock.stepSpan(lo, hi)
		e.Signal = incident.SignalProgress
		e.Samples = samples
		ms := make([]float64, len(samples))
		for k, s := range samples {
			ms[k] = s.MS
		}
		slices.Sort(ms)
		e.Text = fmt.Sprintf("Step time over steps %d–%d: median %.1f ms (%d steps)", lo, hi, ms[len(ms)/2], len(samples))
		e.View = a.view(lo, hi, "")
		out = append(out, e)
	}
	return out
}

// stageCategory routes a stage of the default vocabulary (App. A Table
// 10) to the kind of cause it times; a job's own stage names route to
// unknown. Backward counts as compute: it times the backward pass, and
// the gradient communication it exposes shows as a withheld rank
// (absorbed_in_stage), not as a category.
var stageCategory = map[string]incident.Category{
	stagevec.StageData:     incident.CategoryData,
	stagevec.StageForward:  incident.CategoryCompute,
	stagevec.StageBackward: incident.CategoryCompute,
	stagevec.StageOptim:    incident.CategoryCompute,
}

// withheldWords say each reason a rank is not named in plain words.
var withheldWords = map[stagefrontier.Withheld]string{
	stagefrontier.WithheldSingleRank: "the group has a single rank",
	stagefrontier.WithheldNoExposure: "the stage exposes no time",
	stagefrontier.WithheldFewSteps:   "too few steps expose time there",
	stagefrontier.WithheldAbsorbed:   "every rank leaves the stage together, so the delay is absorbed inside it (a collective or barrier makes all ranks wait) or shared by all of them",
	stagefrontier.WithheldUniform:    "every rank's own time in the stage rose alike",
	stagefrontier.WithheldNotCause:   "the rank that leads it explains too little of the stage's rise",
	stagefrontier.WithheldTie:        "several ranks tie for last",
	stagefrontier.WithheldUnstable:   "the last rank changes over the window",
	stagefrontier.WithheldSpread:     "no rank is last consistently",
	stagefrontier.WithheldRoleGroups: "the job has several role groups, each diagnosed on its own",
}

// leaderDetail is a leader evidence's Detail.
type leaderDetail struct {
	Group    string                       `json:"group"`
	Headline stagefrontier.Headline       `json:"headline"`
	Stage    *stagefrontier.StageEvidence `json:"stage_evidence,omitempty"`
}

// leader is what a role group's headline says about the stage it points
// at: the rank the others wait for there (exclusive on the stage), or
// the reason none is named (withheld, no target — the fusion with
// collective-level lateness names the rank a barrier hides).
func (a *sfAdapter) leader(g *GroupReport) (incident.Evidence, bool) {
	r := g.Report
	if r == nil || r.Headline.Stage == "" || r.Headline.Basis == stagefrontier.BasisNone {
		return incident.Evidence{}, false
	}
	h := r.Headline
	subject := "stage:" + g.Group + "/" + h.Stage
	// The window the headline speaks for: a change point anchors it (its
	// identity holds while the regime lasts); a steady or last-N window
	// slides, so it is the group's standing finding, replaced on each
	// re-evaluation.
	anchor := "latest"
	if b := a.rep.Window.Basis; b == BasisSinceChange || b == BasisExplicit {
		anchor = stepPart(a.rep.Window.From)
	}
	e := a.base(incident.KindStageLeader, evidenceID(incident.KindStageLeader, a.inc, anchor, subject))
	e.Window = a.env.Clock.stepSpan(r.FirstStep, r.LastStep)
	e.Signal = incident.SignalFinding
	e.Subject, e.Layer = subject, incident.LayerStage
	e.Category = stageCategory[h.Stage]
	if e.Category == "" {
		e.Category = incident.CategoryUnknown
	}
	stage := stagevec.ShortName(h.Stage)
	of := ""
	if len(a.rep.Groups) > 1 {
		of = " of role group " + g.Group
	}
	var se *stagefrontier.StageEvidence
	if i := slices.Index(r.Stages, h.Stage); i >= 0 && i < len(r.Evidence) {
		se = &r.Evidence[i]
	}
	if h.Rank >= 0 {
		t := rankTarget(h.Rank, a.hosts, h.Host)
		e.Targets, e.Exclusive = []incident.Target{t}, true
		on := ""
		if t.Host != "" {
			on = " on " + t.Host
		}
		e.Text = fmt.Sprintf("Rank %d%s is the rank the others wait for in the %s stage%s", h.Rank, on, stage, of)
		var why []string
		if se != nil && se.Leader.Why != "" {
			why = append(why, se.Leader.Why)
		}
		// Named at the stage whose time rose against the job's own healthy
		// reference (the leader then explains the rise: Diagnose withholds
		// it otherwise) with no downgrade label: the engine's strongest
		// statement, and one about the slowdown. A straggler the window
		// shows without a reference (it creates the stage's exposed tail,
		// or the stage is the largest share) may be as old as the job: a
		// candidate, as is any rank named with a caveat.
		switch {
		case len(h.Caveats) > 0:
			e.Confidence = incident.ConfidenceLow
			why = append(why, "downgraded: "+strings.Join(h.Caveats, "; "))
		case h.Basis != stagefrontier.BasisExcess:
			e.Confidence = incident.ConfidenceLow
			why = append(why, "not measured against a healthy reference: it may have been the straggler all along")
		default:
			e.Confidence = incident.ConfidenceHigh
		}
		e.Reason = strings.Join(why, "; ")
	} else {
		e.Confidence = incident.ConfidenceWithheld
		e.Withheld = string(h.Withheld)
		if e.Withheld == "" && se != nil {
			e.Withheld = string(se.Leader.Withheld)
		}
		words, ok := withheldWords[h.Withheld]
		if !ok {
			words = "the evidence does not single one out"
		}
		e.Text = fmt.Sprintf("No rank is named for the %s stage%s: %s", stage, of, words)
		e.Reason = h.WithheldWhy
		switch h.Withheld {
		case stagefrontier.WithheldUniform:
			e.Category = incident.CategoryUniform
		case stagefrontier.WithheldAbsorbed:
			// The stage's time is a wait inside it (a collective or
			// barrier): what it waits for is not the stage's kind of work.
			e.Category = incident.CategoryUnknown
		}
	}
	e.Detail = detail(leaderDetail{Group: g.Group, Headline: h, Stage: se})
	e.View = a.view(r.FirstStep, r.LastStep, g.Group)
	return e, true
}
