package incident

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// build turns an assembled incident into its published form.
func (f *fuser) build(b *building, next int64, live []Incident, used map[string]bool) Incident {
	cfg := f.cfg
	opener := b.onsets[0]
	inc := Incident{Schema: Schema, Job: f.in.Job, Incarnation: opener.Incarnation, State: StateOpen, Opened: b.openedAt}
	for _, o := range b.onsets {
		inc.Onset = append(inc.Onset, o.ID)
	}
	for _, r := range b.reliefs {
		inc.Relief = append(inc.Relief, r.ID)
	}
	all := slices.Concat(b.onsets, b.reliefs, b.findings, b.states)
	slices.SortFunc(all, compareEvidence)
	// The newest point the job is known to have reached.
	end := b.openedAt
	incs := map[int]bool{}
	for _, e := range all {
		incs[e.Incarnation] = true
		if t := max(f.wallEnd(e), e.AtNS); t > end.WallNS {
			end.WallNS = t
		}
		end.Step = max(end.Step, e.Window.ToStep)
	}
	if last, ok := f.prog.lastBefore(next); ok && last.WallNS > end.WallNS {
		end = Point{WallNS: last.WallNS, Step: last.Step}
	}
	inc.Updated = end
	if len(incs) > 1 {
		for k := range incs {
			inc.Incarnations = append(inc.Incarnations, k)
		}
		slices.Sort(inc.Incarnations)
	}
	inc.Relapses = b.relapses

	// Resolution: recovered, held for the hold-down in time and steps.
	lostEnd := end
	if b.relief != nil {
		inc.State = StateRecovering
		lostEnd = b.reliefAt
		if b.reliefByRun {
			inc.Relief = append(inc.Relief, "progress")
		}
		heldTime := max(f.in.NowNS, end.WallNS)-b.reliefAt.WallNS >= int64(cfg.HoldDown)
		heldSteps := len(f.prog.s) == 0 || f.prog.stepsAfter(b.reliefAt) >= cfg.HoldDownSteps
		if heldTime && heldSteps {
			inc.State = StateResolved
			r := b.reliefAt
			inc.Resolved = &r
			inc.ResolvedBy = ResolvedRelief
			if b.reliefByRun {
				inc.ResolvedBy = ResolvedSeries
			}
		}
	}
	if st := f.in.Stopped; st != nil && inc.State != StateResolved && next < 0 && st.WallNS >= b.openedAt.WallNS {
		inc.State, inc.ResolvedBy = StateResolved, ResolvedStopped
		r := *st
		inc.Resolved = &r
		lostEnd = r
	}
	// Step times on the series; with too few samples, the opening change
	// point's own levels (both from one engine: a StageFrontier step and a
	// Greyhound iteration are not the same quantity).
	inc.HealthyMS, inc.SlowMS = f.healthy(b), f.slowMS(b, lostEnd)
	if inc.HealthyMS == 0 || inc.SlowMS == 0 {
		for _, o := range b.onsets {
			if o.BeforeMS > 0 && o.AfterMS > 0 {
				inc.HealthyMS, inc.SlowMS = o.BeforeMS, o.AfterMS
				break
			}
		}
	}
	inc.Lost = f.lost(b, lostEnd)
	inc.Windows = f.windows(b, lostEnd, next)

	f.hypotheses(&inc, b)

	// Identity: continue a live prior incident, else a new one.
	if p := matchPrior(&inc, live, used); p != nil {
		inc.ID, inc.DetectedNS = p.ID, p.DetectedNS
		used[p.ID] = true
		inc.Related = p.Related
	} else {
		inc.ID, inc.DetectedNS = newID(f.in.Job, opener), f.in.NowNS
	}
	f.audit(&inc, b)
	inc.Waiting = waiting(&inc, all, f.in.Caps)
	inc.Recommendations = recommend(&inc)
	inc.Headline = headline(&inc)

	kept := make([]Evidence, 0, len(all))
	for _, e := range all {
		kept = append(kept, *e)
	}
	inc.Evidence = trimEvidence(kept, inc.Onset, cfg.MaxEvidence)
	if p := f.progressEvidence(&inc); p != nil {
		inc.Evidence = append(inc.Evidence, *p)
	}
	return inc
}

// maxIncidentSamples bounds the step times an incident carries for its
// timeline (evenly thinned beyond it).
const maxIncidentSamples = 1000

// progressEvidence is the step series over the incident's windows, so a
// stored incident draws its own timeline after the working set moved on.
func (f *fuser) progressEvidence(inc *Incident) *Evidence {
	w := inc.Windows
	lo, hi := w.Before.FromNS, max(w.During.ToNS, w.After.ToNS)
	var xs []Sample
	for i, s := range f.prog.s {
		if f.prog.inc[i] != inc.Incarnation && len(inc.Incarnations) == 0 {
			continue
		}
		if s.WallNS > 0 && lo > 0 {
			if s.WallNS < lo || s.WallNS > hi {
				continue
			}
		} else if s.Step < w.Before.FromStep || s.Step > max(w.During.ToStep, w.After.ToStep) {
			continue
		}
		xs = append(xs, s)
	}
	if len(xs) == 0 {
		return nil
	}
	if n := len(xs); n > maxIncidentSamples {
		thin := make([]Sample, 0, maxIncidentSamples)
		for k := 0; k < maxIncidentSamples; k++ {
			thin = append(thin, xs[k*(n-1)/(maxIncidentSamples-1)])
		}
		xs = thin
	}
	first, last := xs[0], xs[len(xs)-1]
	return &Evidence{ID: "progress/" + inc.ID, Kind: KindProgress, Engine: EngineStageFrontier, Job: inc.Job, Incarnation: inc.Incarnation,
		AtNS: last.WallNS, Window: Span{FromStep: first.Step, ToStep: last.Step, FromNS: first.WallNS, ToNS: last.WallNS},
		Signal: SignalProgress, Samples: xs, Ranks: f.prog.ranks,
		Text: fmt.Sprintf("step times around the incident (%d steps shown)", len(xs))}
}

// slowMS is the median step time during the incident on the series.
func (f *fuser) slowMS(b *building, end Point) float64 {
	var xs []float64
	for i := range f.prog.s {
		if !f.prog.before(i, b.openedAt) && f.prog.before(i, end) {
			xs = append(xs, f.prog.s[i].MS)
		}
	}
	if len(xs) == 0 {
		return 0
	}
	return median(xs)
}

// windows: during is the incident; before is as long before the onset
// (at least 50 steps, at most what the series holds); after is what
// follows the relief.
func (f *fuser) windows(b *building, end Point, next int64) Windows {
	var w Windows
	w.During = Span{FromStep: b.openedAt.Step, ToStep: end.Step, FromNS: b.openedAt.WallNS, ToNS: end.WallNS}
	n := max(end.Step-b.openedAt.Step, 50)
	w.Before = Span{FromStep: max(b.openedAt.Step-n, 0), ToStep: max(b.openedAt.Step-1, 0), ToNS: b.openedAt.WallNS}
	w.Before.FromNS = f.prog.wallOf(b.onsets[0].Incarnation, w.Before.FromStep)
	if b.relief != nil {
		w.After = Span{FromStep: end.Step, FromNS: end.WallNS}
		if last, ok := f.prog.lastBefore(next); ok {
			w.After.ToStep, w.After.ToNS = last.Step, last.WallNS
		}
	}
	return w
}

// trimEvidence keeps at most n pieces, always the onsets, else the newest.
func trimEvidence(evs []Evidence, onsets []string, n int) []Evidence {
	if len(evs) <= n {
		return evs
	}
	keep := make([]bool, len(evs))
	left := n
	for i := range evs {
		if slices.Contains(onsets, evs[i].ID) && left > 0 {
			keep[i] = true
			left--
		}
	}
	for i := len(evs) - 1; i >= 0 && left > 0; i-- {
		if !keep[i] {
			keep[i] = true
			left--
		}
	}
	out := evs[:0:0]
	for i := range evs {
		if keep[i] {
			out = append(out, evs[i])
		}
	}
	return out
}

// hyp is a hypothesis while it is assembled.
type hyp struct {
	target  Target
	support []*Evidence
	against []*Evidence
	why     []string
}

// hypotheses groups the findings by the target they name, weighs support
// against contradiction, and states the ones that meet the rule
// (docs/design/incidents.md "When a cause is stated"):
//   - one engine names it with high confidence and no other contradicts, or
//   - two independent engines name it;
//
// and a high-confidence contradiction (a measurement that clears it, or an
// exclusive finding on the same subject naming another target) always
// keeps it unstated.
func (f *fuser) hypotheses(inc *Incident, b *building) {
	finds := slices.Clone(b.findings)
	for _, o := range b.onsets {
		if o.Signal == SignalFinding {
			finds = append(finds, o)
		}
	}
	slices.SortFunc(finds, compareEvidence)
	finds = current(finds)
	byKey := map[string]*hyp{}
	var keys []string
	for _, e := range finds {
		if e.Signal != SignalFinding || e.Confidence == ConfidenceWithheld {
			continue
		}
		for _, t := range e.Targets {
			k := t.Key()
			h := byKey[k]
			if h == nil {
				h = &hyp{target: t}
				byKey[k] = h
				keys = append(keys, k)
			}
			if h.target.Host == "" {
				h.target.Host = t.Host
			}
			if !slices.Contains(h.support, e) {
				h.support = append(h.support, e)
			}
		}
	}
	// Contradictions: a measurement that clears the target, or an
	// exclusive finding on one of its subjects naming another target.
	for _, k := range keys {
		h := byKey[k]
		for _, e := range finds {
			if slices.Contains(h.support, e) {
				continue
			}
			switch {
			case (e.Signal == SignalHealthy || e.Signal == SignalFinding) && e.clears(k):
				h.against = append(h.against, e)
				h.why = append(h.why, fmt.Sprintf("%s measured %s normal%s", engineWords(e.Engine), TargetWords(h.target), layerSuffix(e.Layer)))
			case e.Signal == SignalFinding && e.Exclusive && e.Confidence != ConfidenceWithheld && len(e.Targets) > 0 && !e.names(k) && h.exclusiveOn(e.Subject):
				h.against = append(h.against, e)
				h.why = append(h.why, fmt.Sprintf("%s names %s instead", engineWords(e.Engine), TargetWords(e.Targets[0])))
			}
		}
	}
	context := stageContext(b)
	for _, k := range keys {
		h := byKey[k]
		inc.Hypotheses = append(inc.Hypotheses, h.publish(context))
	}
	slices.SortFunc(inc.Hypotheses, compareHyp)
	inc.Confidence = ConfidenceWithheld
	if len(inc.Hypotheses) > 0 {
		inc.Confidence = ConfidenceLow
	}
	inc.Category = CategoryUnknown
	for _, h := range inc.Hypotheses {
		if !h.Stated {
			continue
		}
		inc.Cause = append(inc.Cause, h.Target.Key())
		inc.Confidence = ConfidenceHigh
		if inc.Category == CategoryUnknown {
			inc.Category = h.Category
		}
		addScope(&inc.Scope, h.Target)
	}
	if len(inc.Cause) == 0 {
		inc.Scope = Scope{Whole: true}
		if len(inc.Hypotheses) > 0 {
			inc.Category = inc.Hypotheses[0].Category
		}
	}
	for _, h := range inc.Hypotheses {
		if len(h.Against) > 0 {
			inc.Contradictions = append(inc.Contradictions, fmt.Sprintf("%s: %s", TargetWords(h.Target), strings.TrimSuffix(h.Reason, ".")))
		}
	}
}

// exclusiveOn reports whether the hypothesis rests on an exclusive finding
// about subject s.
func (h *hyp) exclusiveOn(s string) bool {
	if s == "" {
		return false
	}
	for _, e := range h.support {
		if e.Exclusive && e.Subject == s {
			return true
		}
	}
	return false
}

// hits reports whether contradicting evidence c weighs against support
// s: a clearance only at its own layer (a benchmark that finds a rank's
// GPU normal says nothing about its data loader or its host), an
// exclusive finding only on its own subject.
func hits(c, s *Evidence) bool {
	if c.Signal == SignalHealthy || len(c.Against) > 0 && !(c.Exclusive && c.Confidence == ConfidenceHigh && s.Exclusive && s.Subject == c.Subject) {
		return c.Layer == "" || c.Layer == s.Layer
	}
	return s.Exclusive && s.Subject == c.Subject
}

// strongAgainst: a high-confidence finding or a measurement.
func strongAgainst(c *Evidence) bool {
	return c.Confidence == ConfidenceHigh || c.Signal == SignalHealthy
}

func (h *hyp) publish(context []*Evidence) Hypothesis {
	out := Hypothesis{Target: h.target, Category: CategoryUnknown}
	engines := map[Engine]bool{}
	for _, e := range h.support {
		out.Support = append(out.Support, e.ID)
		engines[e.Engine] = true
	}
	for e := range engines {
		out.Engines = append(out.Engines, e)
	}
	slices.Sort(out.Engines)
	// Effective support: what no strong contradiction hits.
	var eff []*Evidence
	weakAgainst := false
	for _, s := range h.support {
		cleared := false
		for _, c := range h.against {
			if hits(c, s) {
				if strongAgainst(c) {
					cleared = true
				} else {
					weakAgainst = true
				}
			}
		}
		if !cleared {
			eff = append(eff, s)
		}
	}
	for _, e := range h.against {
		out.Against = append(out.Against, e.ID)
	}
	strong := false
	sources := map[string]bool{}
	for _, e := range eff {
		sources[SourceOf(e)] = true
		if e.Confidence == ConfidenceHigh {
			strong = true
		}
	}
	partly := len(eff) < len(h.support)
	switch {
	case len(eff) == 0:
		out.Stated, out.Confidence = false, ConfidenceLow
		out.Reason = "contradicted: " + strings.Join(uniq(h.why), "; ") + "."
	case strong && !weakAgainst:
		out.Stated, out.Confidence = true, ConfidenceHigh
		out.Reason = fmt.Sprintf("%s %s it with high confidence and no engine contradicts it.", engineList(enginesOf(eff)), verb(len(enginesOf(eff)), "names", "name"))
	case len(sources) >= 2:
		out.Stated, out.Confidence = true, ConfidenceHigh
		out.Reason = fmt.Sprintf("%d independent signals agree (%s).", len(sources), strings.Join(sortedKeys(sources), ", "))
	case strong:
		// One engine is sure, another disagrees with less confidence: the
		// rule needs no contradiction at all for a single engine.
		out.Confidence = ConfidenceLow
		out.Reason = fmt.Sprintf("%s %s it with high confidence, but other evidence disagrees: %s; laggard needs an independent second signal or a validation to state it.",
			engineList(enginesOf(eff)), verb(len(enginesOf(eff)), "names", "name"), strings.Join(uniq(h.why), "; "))
		weakAgainst = false
	default:
		out.Confidence = ConfidenceLow
		out.Reason = fmt.Sprintf("only %s %s it, with low confidence; laggard needs an independent second signal or a validation to state it.", engineList(enginesOf(eff)), verb(len(enginesOf(eff)), "suggests", "suggest"))
	}
	if partly && len(eff) > 0 {
		out.Reason += " Part of the evidence is contradicted: " + strings.Join(uniq(h.why), "; ") + "."
	} else if weakAgainst && out.Stated {
		out.Reason += " Some weaker evidence disagrees: " + strings.Join(uniq(h.why), "; ") + "."
	}
	out.Chain = chain(eff, context)
	out.Category = category(eff)
	return out
}

func enginesOf(evs []*Evidence) []Engine {
	var out []Engine
	for _, e := range evs {
		if !slices.Contains(out, e.Engine) {
			out = append(out, e.Engine)
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func layerSuffix(l Layer) string {
	if l == "" {
		return ""
	}
	return " at the " + string(l) + " layer"
}

// stageContext is the evidence that explains where in the step the time
// went without naming a target: the onset's stage shift and the engines'
// withholdings (e.g. a delay absorbed inside a stage).
func stageContext(b *building) []*Evidence {
	var out []*Evidence
	for _, e := range b.findings {
		if e.Confidence == ConfidenceWithheld && e.Signal == SignalFinding {
			out = append(out, e)
		}
	}
	return out
}

// chain builds the cause chain: one link per (layer, engine), top to
// bottom, with the stage-level context first.
func chain(support, context []*Evidence) []ChainLink {
	type key struct {
		l Layer
		e Engine
	}
	m := map[key]*ChainLink{}
	add := func(e *Evidence) {
		if e.Layer == "" {
			return
		}
		k := key{e.Layer, e.Engine}
		l := m[k]
		if l == nil {
			l = &ChainLink{Layer: e.Layer, Engine: e.Engine}
			m[k] = l
		}
		l.Evidence = append(l.Evidence, e.ID)
		// The strongest, then newest, statement speaks for the link.
		if l.Text == "" || confRank(e.Confidence) >= confRank(l.Confidence) {
			l.Text, l.Confidence, l.Reason = e.Text, e.Confidence, e.Reason
		}
	}
	for _, e := range context {
		add(e)
	}
	for _, e := range support {
		add(e)
	}
	out := make([]ChainLink, 0, len(m))
	for _, l := range m {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b ChainLink) int {
		return cmp.Or(cmp.Compare(LayerRank(a.Layer), LayerRank(b.Layer)), cmp.Compare(a.Engine, b.Engine))
	})
	return out
}

func confRank(c Confidence) int {
	switch c {
	case ConfidenceHigh:
		return 2
	case ConfidenceLow:
		return 1
	}
	return 0
}

// category is the deepest known category among the support, high
// confidence first: the deeper layer says more about why.
func category(support []*Evidence) Category {
	best, bestRank := CategoryUnknown, -1
	for _, e := range support {
		if e.Category == "" || e.Category == CategoryUnknown {
			continue
		}
		r := confRank(e.Confidence)*100 + LayerRank(e.Layer)
		if r > bestRank {
			best, bestRank = e.Category, r
		}
	}
	return best
}

func compareHyp(a, b Hypothesis) int {
	return cmp.Or(
		-cmpBool(a.Stated, b.Stated),
		-cmp.Compare(len(a.Engines), len(b.Engines)),
		-cmp.Compare(confRank(a.Confidence), confRank(b.Confidence)),
		cmp.Compare(len(a.Against), len(b.Against)),
		-cmp.Compare(len(a.Support), len(b.Support)),
		cmp.Compare(a.Target.Key(), b.Target.Key()))
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func addScope(s *Scope, t Target) {
	switch t.Kind {
	case TargetRank:
		if !slices.Contains(s.Ranks, t.Rank) {
			s.Ranks = append(s.Ranks, t.Rank)
			slices.Sort(s.Ranks)
		}
	case TargetLink:
		s.Links = append(s.Links, t)
		sortTargets(s.Links)
	case TargetGroup:
		if !slices.Contains(s.Groups, t.Name) {
			s.Groups = append(s.Groups, t.Name)
			slices.Sort(s.Groups)
		}
	case TargetOperator:
		if !slices.Contains(s.Operators, t.Name) {
			s.Operators = append(s.Operators, t.Name)
			slices.Sort(s.Operators)
		}
		if t.Rank >= 0 && !slices.Contains(s.Ranks, t.Rank) {
			s.Ranks = append(s.Ranks, t.Rank)
			slices.Sort(s.Ranks)
		}
	case TargetJob:
		s.Whole = true
	}
	if t.Kind == TargetHost && t.Name != "" && !slices.Contains(s.Hosts, t.Name) {
		s.Hosts = append(s.Hosts, t.Name)
	}
	if t.Host != "" && !slices.Contains(s.Hosts, t.Host) {
		s.Hosts = append(s.Hosts, t.Host)
	}
	slices.Sort(s.Hosts)
}

func uniq(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// audit attaches control's actions: those taken for this incident (by
// ID), oldest first, at most MaxAudit (the newest kept).
func (f *fuser) audit(inc *Incident, b *building) {
	for _, a := range f.in.Actions {
		if a.Incident == inc.ID {
			inc.Audit = append(inc.Audit, a)
		}
	}
	slices.SortFunc(inc.Audit, func(a, b Action) int {
		return cmp.Or(cmp.Compare(a.AtNS, b.AtNS), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Result, b.Result), cmp.Compare(a.Ref, b.Ref))
	})
	if n := len(inc.Audit); n > f.cfg.MaxAudit {
		inc.Audit = inc.Audit[n-f.cfg.MaxAudit:]
	}
	if inc.Audit == nil {
		inc.Audit = []Action{}
	}
}

// current drops findings an engine has superseded: of the exclusive
// findings one engine made about one subject (the rank the others wait
// for at one stage or collective), only its newest speaks. An engine that
// re-evaluated with more data does not contradict its own earlier view;
// an older view naming another rank (before the fault had taken hold)
// would otherwise argue against the engine's current answer.
func current(finds []*Evidence) []*Evidence {
	type key struct {
		e Engine
		k Kind
		s string
	}
	newest := map[key]*Evidence{}
	for _, e := range finds {
		if !e.Exclusive || e.Subject == "" {
			continue
		}
		k := key{e.Engine, e.Kind, e.Subject}
		if n := newest[k]; n == nil || e.AtNS > n.AtNS || (e.AtNS == n.AtNS && e.ID > n.ID) {
			newest[k] = e
		}
	}
	out := finds[:0:0]
	for _, e := range finds {
		if e.Exclusive && e.Subject != "" && newest[key{e.Engine, e.Kind, e.Subject}] != e {
			continue
		}
		out = append(out, e)
	}
	return out
}
