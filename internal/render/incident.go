package render

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// IncidentOptions say how an incident is written for people.
type IncidentOptions struct {
	// Now is the reader's clock for relative times ("18 min ago"); zero
	// prints absolute times only.
	Now time.Time
	// Verbose (-v) adds every piece of evidence with its kind and reason
	// code, the whole audit log and a glossary of the engines' terms.
	Verbose bool
	// Server is the laggard server's base URL: engine views (API paths)
	// are printed as links on it. Empty leaves them as paths.
	Server string
}

// Text bounds of an incident; --json and -v have everything.
const (
	incWidth        = 100
	incLabel        = 14 // the label column of the summary block
	incMaxAudit     = 5
	incMaxChainIDs  = 3
	incMaxViews     = 3 // per engine
	incMinCauseCols = 30
)

// Incident writes one incident as a diagnosis for someone who has not
// read the papers, top down: the headline, what slowed and since when,
// what it cost, where, why (the cause chain, a line per layer with its
// engine and evidence), the explanations it could not rule out and where
// the engines disagree, what to do, what laggard still waits for, the
// audit log and the engine views on the incident's windows. The incident
// may come from a server's JSON, so nothing is assumed present.
func Incident(w io.Writer, inc *incident.Incident, o IncidentOptions) error {
	if inc == nil {
		_, err := io.WriteString(w, "no incident\n")
		return err
	}
	// Written to a buffer first: the no-break spaces that keep a time
	// on one line while wrapping become plain spaces on the way out.
	var buf bytes.Buffer
	p := &printer{w: &buf}
	d := incDoc{p: p, inc: inc, o: o, ev: map[string]*incident.Evidence{}}
	for i := range inc.Evidence {
		d.ev[inc.Evidence[i].ID] = &inc.Evidence[i]
	}
	d.header()
	d.summary()
	d.why()
	d.others()
	d.todo()
	d.waiting()
	d.audit()
	d.views()
	if o.Verbose {
		d.evidence()
		d.glossary()
	}
	_, err := io.WriteString(w, strings.ReplaceAll(buf.String(), nbsp, " "))
	return err
}

// nbsp joins the parts of a time so that wrapping never splits it.
const nbsp = "\u00a0"

type incDoc struct {
	p   *printer
	inc *incident.Incident
	o   IncidentOptions
	ev  map[string]*incident.Evidence
}

func (d *incDoc) header() {
	inc := d.inc
	head := fmt.Sprintf("incident %s · job %s", orText(inc.ID, "(no id)"), orText(inc.Job, "(no job)"))
	if r := incRanks(inc); r > 0 {
		head += fmt.Sprintf(" · %d ranks", r)
	}
	if len(inc.Incarnations) > 1 {
		head += fmt.Sprintf(" · spans %d launches (the job restarted during it)", len(inc.Incarnations))
	}
	head += " · " + strings.ToUpper(orText(string(inc.State), "state unknown"))
	if inc.Relapses > 0 {
		head += fmt.Sprintf(" (re-opened %s)", times(inc.Relapses))
	}
	d.p.f("%s\n", para(0, head, "  "))
	d.p.f("\n%s\n", para(0, "▶ "+d.headline(), "  "))
}

// headline is the fusion's plain-language summary, or one made from the
// fields when it has none.
func (d *incDoc) headline() string {
	inc := d.inc
	if h := strings.TrimSpace(inc.Headline); h != "" {
		return h
	}
	var s string
	if stated := statedHyps(inc); len(stated) > 0 {
		var parts []string
		for _, h := range stated {
			parts = append(parts, incident.TargetWords(h.Target)+knownCategory(h.Category, " (", ")"))
		}
		s = "Cause: " + strings.Join(parts, "; ") + "."
	} else {
		s = "No cause stated yet."
	}
	if healthy, slow := d.stepTimes(); healthy > 0 && slow > 0 {
		s = fmt.Sprintf("The step time rose from %s to %s (%s). %s", msText(healthy), msText(slow), pctText(slow/healthy-1), s)
	}
	return s
}

// summary is the what / since / cost / where block.
func (d *incDoc) summary() {
	inc := d.inc
	d.p.f("\n")
	// What slowed, and since when.
	slowed := "the step time (by how much is not measured yet)"
	switch healthy, slow := d.stepTimes(); {
	case healthy > 0 && slow > 0:
		slowed = fmt.Sprintf("step time %s → %s per step (%s)", msText(healthy), msText(slow), pctText(slow/healthy-1))
	case slow > 0:
		slowed = fmt.Sprintf("step time %s per step (no healthy step time before it)", msText(slow))
	}
	d.row("what slowed", slowed)
	since := d.point(inc.Opened, true)
	if inc.DetectedNS > 0 && inc.Opened.WallNS > 0 && inc.DetectedNS >= inc.Opened.WallNS {
		since += "; detected " + incident.DurationWords(float64(inc.DetectedNS-inc.Opened.WallNS)/1e9) + " later, at " + d.clock(inc.DetectedNS)
	}
	d.row("since", since)
	switch inc.State {
	case incident.StateRecovering:
		back := "back within the healthy range"
		if r := d.reliefMS(); r > 0 {
			back = "back to " + msText(r) + " per step"
		}
		if pt, ok := d.reliefPoint(); ok {
			back += " since " + d.point(pt, false)
		}
		d.row("now", back+"; it resolves if that holds, and a relapse re-opens this incident")
	case incident.StateResolved:
		if r := inc.Resolved; r != nil && inc.ResolvedBy == incident.ResolvedStopped {
			d.row("ended", "the job stopped reporting "+d.point(*r, false)+" while still slow; the incident closed with it")
		} else if r != nil {
			line := d.point(*r, false)
			if r.WallNS > inc.Opened.WallNS && inc.Opened.WallNS > 0 {
				line += ", after " + incident.DurationWords(float64(r.WallNS-inc.Opened.WallNS)/1e9)
			}
			if ms := d.reliefMS(); ms > 0 {
				line += "; " + msText(ms) + " per step since"
			}
			d.row("recovered", line)
		}
	default:
		if inc.Updated.WallNS > 0 || inc.Updated.Step > 0 {
			d.row("latest", d.point(inc.Updated, false))
		}
	}
	// What it cost.
	d.row("what it cost", lostText(inc.Lost, incRanks(inc)))
	// Where.
	where := scopeLines(inc)
	for i, l := range where {
		label := ""
		if i == 0 {
			label = "where"
		}
		d.row(label, l)
	}
	for _, r := range inc.Related {
		line := fmt.Sprintf("%s was also the cause in job %s", relTarget(r.Target), orText(r.Job, "?"))
		if r.AtNS > 0 {
			line += " " + d.ago(r.AtNS)
		}
		extra := []string{}
		if r.Incident != "" {
			extra = append(extra, "incident "+r.Incident)
		}
		if r.Lost > 0 {
			extra = append(extra, incident.DurationWords(r.Lost)+" lost")
		}
		if len(extra) > 0 {
			line += " (" + strings.Join(extra, ", ") + ")"
		}
		d.row("", line)
	}
}

// row prints a label column and a wrapped value.
func (d *incDoc) row(label, value string) {
	d.p.f("%-*s%s\n", incLabel, label, fill(words(value), incLabel, strings.Repeat(" ", incLabel)))
}

func (d *incDoc) why() {
	inc := d.inc
	stated := statedHyps(inc)
	if len(stated) == 0 {
		why := "no cause stated: no explanation meets the bar yet (one engine naming it with high confidence and none contradicting, or two engines agreeing)"
		if len(inc.Hypotheses) == 0 {
			why = "no cause stated: no engine has named a rank, link, host or operator yet"
		}
		d.p.f("\n%s\n", para(0, "why: "+why+".", "  "))
		return
	}
	for i, h := range stated {
		title := "why"
		if len(stated) > 1 {
			title = fmt.Sprintf("why, cause %d of %d: %s", i+1, len(stated), incident.TargetWords(h.Target))
		}
		d.p.f("\n%s\n", para(0, title+" ("+confWords(h.Confidence, h.Reason)+"):", "  "))
		d.chain(h, 2)
	}
}

// chain prints a hypothesis's cause chain, top layer first, at indent n.
func (d *incDoc) chain(h *incident.Hypothesis, n int) {
	links := slices.Clone(h.Chain)
	slices.SortStableFunc(links, func(a, b incident.ChainLink) int {
		return cmp.Compare(incident.LayerRank(a.Layer), incident.LayerRank(b.Layer))
	})
	if len(links) == 0 {
		d.p.f("%s\n", para(n, "(no chain: "+supportText(h)+")", strings.Repeat(" ", n+2)))
		return
	}
	col := n + 12
	for _, l := range links {
		tag := "[" + engineName(l.Engine)
		if ids := d.idsText(l.Evidence); ids != "" {
			tag += " · " + ids
		}
		tag += "]"
		text := orText(strings.TrimSpace(l.Text), "(no text)")
		if l.Confidence != "" && l.Confidence != h.Confidence {
			text += " (" + confWords(l.Confidence, l.Reason) + ")"
		}
		d.p.f("%s%-11s %s\n", strings.Repeat(" ", n), layerWords(l.Layer), wrapTail(text, tag, col, strings.Repeat(" ", col)))
	}
}

// idsText names the evidence a chain link rests on (all with -v).
func (d *incDoc) idsText(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	if !d.o.Verbose && len(ids) > incMaxChainIDs {
		return strings.Join(ids[:incMaxChainIDs], ", ") + fmt.Sprintf(" +%d", len(ids)-incMaxChainIDs)
	}
	return strings.Join(ids, ", ")
}

// others are the explanations that are not stated: every competing one,
// and where the engines disagree. They are never left out.
func (d *incDoc) others() {
	inc := d.inc
	var rest []*incident.Hypothesis
	for i := range inc.Hypotheses {
		if !isStated(inc, &inc.Hypotheses[i]) {
			rest = append(rest, &inc.Hypotheses[i])
		}
	}
	if len(rest) > 0 {
		title := "other explanations laggard could not rule out (strongest first):"
		if len(statedHyps(inc)) == 0 {
			title = "competing explanations (strongest first):"
		}
		d.p.f("\n%s\n", title)
		for i, h := range rest {
			line := fmt.Sprintf("%d. %s%s (%s)", i+1, incident.TargetWords(h.Target), knownCategory(h.Category, " — ", ""), confWords(h.Confidence, h.Reason))
			d.p.f("%s\n", para(2, line, "     "))
			if len(h.Against) > 0 {
				d.p.f("%s\n", para(5, "against it: "+d.evidenceList(h.Against), "       "))
			}
			d.chain(h, 5)
		}
	}
	if len(inc.Contradictions) > 0 {
		d.p.f("\nwhere the engines disagree:\n")
		for _, c := range inc.Contradictions {
			d.p.f("%s\n", para(2, "! "+c, "    "))
		}
	}
}

// evidenceList is evidence in words (its text, else its id).
func (d *incDoc) evidenceList(ids []string) string {
	var parts []string
	for _, id := range ids {
		if e := d.ev[id]; e != nil && e.Text != "" {
			parts = append(parts, engineName(e.Engine)+": "+e.Text)
		} else {
			parts = append(parts, id)
		}
	}
	return strings.Join(parts, "; ")
}

func (d *incDoc) todo() {
	recs := d.inc.Recommendations
	if len(recs) == 0 {
		return
	}
	d.p.f("\nwhat to do:\n")
	multi := len(statedHyps(d.inc)) > 1 || len(d.inc.Hypotheses) > 1
	for i, r := range recs {
		text := r.Text
		if multi && r.For != "" {
			text = "(" + keyWords(d.inc, r.For) + ") " + text
		}
		d.p.f("%s\n", para(2, fmt.Sprintf("%d. %s", i+1, text), "     "))
	}
}

func (d *incDoc) waiting() {
	ws := d.inc.Waiting
	if len(ws) == 0 {
		return
	}
	d.p.f("\nstill waiting for:\n")
	for _, r := range ws {
		line := requestWords(r.Kind)
		if len(r.Ranks) > 0 {
			line += " of " + rankList(r.Ranks)
		}
		if r.Asked {
			if a := d.askedAction(r); a != nil {
				line += " — asked at " + d.clock(a.AtNS)
				if a.Ref != "" {
					line += " (" + a.Ref + ")"
				}
			} else {
				line += " — asked"
			}
		} else {
			line += " — not asked yet"
		}
		if r.Reason != "" {
			line += ": " + r.Reason
		}
		d.p.f("%s\n", para(2, "· "+line, "    "))
	}
}

// askedAction is the newest audit line that asked for r: the same kind,
// the same ranks when both name them.
func (d *incDoc) askedAction(r incident.Request) *incident.Action {
	var best *incident.Action
	for i := range d.inc.Audit {
		a := &d.inc.Audit[i]
		if a.Kind != r.Kind || a.Result == "skipped" || a.Result == "failed" {
			continue
		}
		if len(a.Ranks) > 0 && len(r.Ranks) > 0 && !slices.Equal(sortedInts(a.Ranks), sortedInts(r.Ranks)) {
			continue
		}
		if best == nil || a.AtNS > best.AtNS {
			best = a
		}
	}
	return best
}

func (d *incDoc) audit() {
	log := slices.Clone(d.inc.Audit)
	if len(log) == 0 {
		return
	}
	slices.SortStableFunc(log, func(a, b incident.Action) int { return cmp.Compare(a.AtNS, b.AtNS) })
	shown := log
	if !d.o.Verbose && len(log) > incMaxAudit {
		shown = log[len(log)-incMaxAudit:]
		d.p.f("\naudit log (latest %d of %d; -v for all):\n", incMaxAudit, len(log))
	} else {
		d.p.f("\naudit log:\n")
	}
	tw := newTable()
	for _, a := range shown {
		what := requestShort(a.Kind)
		if len(a.Ranks) > 0 {
			what += ", " + rankList(a.Ranks)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", d.clock(a.AtNS), orText(a.Result, "—"), clipText(what, 36), orText(a.Ref, "—"))
	}
	// The text goes on its own line: it is free prose.
	tw.Flush()
	rows := strings.Split(strings.TrimRight(tw.buf.String(), "\n"), "\n")
	for i, row := range rows {
		d.p.f("%s\n", strings.TrimRight(row, " "))
		if t := strings.TrimSpace(shown[i].Text); t != "" {
			d.p.f("%s\n", para(4, t, "    "))
		}
	}
}

func (d *incDoc) views() {
	inc := d.inc
	type view struct {
		engine incident.Engine
		links  []string
	}
	var vs []view
	for _, e := range inc.Evidence {
		if e.View == "" {
			continue
		}
		i := slices.IndexFunc(vs, func(v view) bool { return v.engine == e.Engine })
		if i < 0 {
			vs = append(vs, view{engine: e.Engine})
			i = len(vs) - 1
		}
		if !slices.Contains(vs[i].links, e.View) {
			vs[i].links = append(vs[i].links, e.View)
		}
	}
	win := d.windows()
	if len(vs) == 0 && win == "" && d.o.Server == "" {
		return
	}
	title := "engine views"
	if win != "" {
		title += " (" + win + ")"
	}
	d.p.f("\n%s\n", para(0, title+":", "  "))
	tw := newTable()
	for _, v := range vs {
		links := v.links
		more := ""
		if !d.o.Verbose && len(links) > incMaxViews {
			more = fmt.Sprintf(" (+%d more, -v)", len(links)-incMaxViews)
			links = links[:incMaxViews]
		}
		for i, l := range links {
			name := ""
			if i == 0 {
				name = engineName(v.engine)
			}
			if i == len(links)-1 {
				l += more
			}
			fmt.Fprintf(tw, "  %s\t%s\t\n", name, d.link(l))
		}
	}
	if d.o.Server != "" && inc.Job != "" {
		fmt.Fprintf(tw, "  web UI\t%s\t\n", strings.TrimRight(d.o.Server, "/")+"/#/jobs/"+inc.Job)
	}
	d.p.table(tw)
}

// windows describes the before / during / after windows in words.
func (d *incDoc) windows() string {
	w := d.inc.Windows
	var parts []string
	for _, x := range []struct {
		name string
		s    incident.Span
	}{{"before", w.Before}, {"during", w.During}, {"after", w.After}} {
		if t := d.spanText(x.s); t != "" {
			parts = append(parts, x.name+": "+t)
		}
	}
	return strings.Join(parts, " · ")
}

func (d *incDoc) spanText(s incident.Span) string {
	var parts []string
	switch {
	case s.ToStep > s.FromStep:
		parts = append(parts, "steps "+thousands(s.FromStep)+"–"+thousands(s.ToStep))
	case s.FromStep > 0 && s.ToStep == s.FromStep:
		parts = append(parts, "step "+thousands(s.FromStep))
	}
	if s.FromNS > 0 && s.ToNS >= s.FromNS {
		f, t := time.Unix(0, s.FromNS).UTC(), time.Unix(0, s.ToNS).UTC()
		// The date once, and only when it is not the reader's day.
		switch {
		case s.ToNS == s.FromNS:
			parts = append(parts, d.clock(s.FromNS))
		case !d.o.Now.IsZero() && sameDay(f, d.o.Now.UTC()) && sameDay(t, f):
			parts = append(parts, f.Format("15:04:05")+"–"+t.Format("15:04:05"))
		case sameDay(t, f):
			parts = append(parts, f.Format("2006-01-02")+nbsp+f.Format("15:04:05")+"–"+t.Format("15:04:05"))
		default:
			parts = append(parts, f.Format("2006-01-02")+nbsp+f.Format("15:04:05")+"–"+t.Format("2006-01-02")+nbsp+t.Format("15:04:05"))
		}
	}
	return strings.Join(parts, ", ")
}

// link makes an API path a URL on the server.
func (d *incDoc) link(v string) string {
	if d.o.Server != "" && strings.HasPrefix(v, "/") {
		return strings.TrimRight(d.o.Server, "/") + v
	}
	return v
}

// evidence (-v) lists every piece of evidence with its kind, signal,
// confidence, reason code and view.
func (d *incDoc) evidence() {
	evs := d.inc.Evidence
	d.p.f("\nevidence (%d, in time order):\n", len(evs))
	for _, e := range evs {
		head := fmt.Sprintf("%s  %s  %s · %s", d.clock(e.AtNS), orText(e.ID, "(no id)"), orText(string(e.Kind), "?"), orText(string(e.Signal), "?"))
		if e.Confidence != "" {
			head += " · " + string(e.Confidence)
		}
		if e.Withheld != "" {
			head += " (" + e.Withheld + ")"
		}
		d.p.f("%s\n", para(2, head, "      "))
		facts := []string{"from " + incident.SourceOf(&e)}
		if len(e.Targets) > 0 {
			facts = append(facts, "names "+targetsWords(e.Targets))
		}
		if len(e.Against) > 0 {
			facts = append(facts, "clears "+targetsWords(e.Against))
		}
		if e.Layer != "" {
			facts = append(facts, "layer "+string(e.Layer))
		}
		if e.Category != "" {
			facts = append(facts, "category "+string(e.Category))
		}
		if e.Subject != "" {
			subj := "about " + e.Subject
			if e.Exclusive {
				subj += " (exclusive)"
			}
			facts = append(facts, subj)
		}
		if e.BeforeMS > 0 || e.AfterMS > 0 {
			v := msText(e.BeforeMS) + " → " + msText(e.AfterMS)
			if e.Verified {
				v += " verified"
			}
			facts = append(facts, v)
		}
		if n := len(e.Samples); n > 0 {
			facts = append(facts, fmt.Sprintf("%d step samples", n))
		}
		if t := d.spanText(e.Window); t != "" {
			facts = append(facts, "window "+t)
		}
		if len(facts) > 0 {
			d.p.f("%s\n", para(6, strings.Join(facts, " · "), "      "))
		}
		if e.Text != "" {
			d.p.f("%s\n", para(6, e.Text, "      "))
		}
		if e.Reason != "" {
			d.p.f("%s\n", para(6, "why this confidence: "+e.Reason, "      "))
		}
		if e.View != "" {
			d.p.f("      view %s\n", d.link(e.View))
		}
	}
}

// glossary (-v) explains the engines' terms that this incident's
// evidence uses.
func (d *incDoc) glossary() {
	kinds := map[incident.Kind]bool{}
	codes := map[string]bool{}
	for _, e := range d.inc.Evidence {
		kinds[e.Kind] = true
		if e.Withheld != "" {
			codes[e.Withheld] = true
		}
	}
	has := func(prefix string) bool {
		for k := range kinds {
			if strings.HasPrefix(string(k), prefix) {
				return true
			}
		}
		return false
	}
	var lines []string
	add := func(term, text string) { lines = append(lines, term+": "+text) }
	add("change point", "a verified shift in the level of the step time (an onset when it rises, a relief when it falls back); the incident opens on the first onset any engine verifies")
	add("lost time", "the sum over slow steps of (step time − healthy step time); rank-time multiplies it by the ranks that waited")
	add("hold-down", "how long the step time must stay near healthy (within 10% by default) before an incident resolves; a new onset inside it re-opens the incident")
	if has("stagefrontier.") {
		add("frontier (StageFrontier)", "at each stage boundary of a step, the latest rank to get there; a stage's advance of the frontier is the time the whole job spent in it, and the rank that sets the frontier is the one the others wait for")
	}
	if codes["absorbed_in_stage"] {
		add("absorbed_in_stage", "StageFrontier names no rank because a collective or barrier inside the stage makes every rank leave it together; collective-level evidence (Greyhound, SysOM-AI) is needed to see who was waited for")
	}
	if has("greyhound.") {
		add("late rank (Greyhound)", "the rank that enters a collective last, so every other member waits for it")
		add("validation (Greyhound)", "a short pause at a step boundary to benchmark compute (GEMM) per rank and transfers (P2P) per link, to tell a slow rank from a slow link")
	}
	if has("sysom.") {
		add("waterline (SysOM-AI)", "a function's share of a rank's CPU samples against its peers' (μ + kσ); a rank above it spends its CPU differently")
		add("temporal baseline (SysOM-AI)", "the job's own earlier window, compared with now when every rank slowed alike and no healthy peer exists")
	}
	if has("kair.") {
		add("rhythm (KAIR Stage 1)", "the K-S distance S_A of a rank's operator completion times from its peers'; the rank whose rhythm differs most is the straggler")
		add("culprit and victims (KAIR)", "walking the step's dependency graph backwards from the outliers (anomaly score a_i) to the operator, gap or edge that cost the time; the ranks that only waited are victims")
	}
	d.p.f("\nglossary:\n")
	for _, l := range lines {
		d.p.f("%s\n", para(2, l, "    "))
	}
}

// statedHyps are the hypotheses stated as the cause: marked Stated, or
// named by the incident's Cause keys.
func statedHyps(inc *incident.Incident) []*incident.Hypothesis {
	var out []*incident.Hypothesis
	for i := range inc.Hypotheses {
		if isStated(inc, &inc.Hypotheses[i]) {
			out = append(out, &inc.Hypotheses[i])
		}
	}
	return out
}

func isStated(inc *incident.Incident, h *incident.Hypothesis) bool {
	return h.Stated || slices.Contains(inc.Cause, h.Target.Key())
}

// incRanks is the job's rank count as the evidence states it.
func incRanks(inc *incident.Incident) int {
	n := 0
	for _, e := range inc.Evidence {
		n = max(n, e.Ranks)
	}
	if n == 0 && inc.Lost.Seconds > 0 && inc.Lost.RankSeconds > 0 {
		if r := math.Round(inc.Lost.RankSeconds / inc.Lost.Seconds); r >= 1 && r < 1e7 {
			n = int(r)
		}
	}
	return n
}

// stepTimes are the healthy and slow step times: the fusion's, else the
// onset evidence's level change.
func (d *incDoc) stepTimes() (healthy, slow float64) {
	healthy, slow = d.inc.HealthyMS, d.inc.SlowMS
	for _, id := range d.inc.Onset {
		if e := d.ev[id]; e != nil && e.BeforeMS > 0 && e.AfterMS > 0 && (healthy <= 0 || slow <= 0) {
			healthy, slow = e.BeforeMS, e.AfterMS
		}
	}
	return healthy, slow
}

// reliefMS is the step time after the relief, from the relief evidence.
func (d *incDoc) reliefMS() float64 {
	for _, id := range d.inc.Relief {
		if e := d.ev[id]; e != nil && e.AfterMS > 0 {
			return e.AfterMS
		}
	}
	return 0
}

func (d *incDoc) reliefPoint() (incident.Point, bool) {
	for _, id := range d.inc.Relief {
		if e := d.ev[id]; e != nil && (e.Window.FromNS > 0 || e.Window.FromStep > 0) {
			return incident.Point{WallNS: e.Window.FromNS, Step: e.Window.FromStep}, true
		}
	}
	return incident.Point{}, false
}

// point is "step 1,210 at 14:01:37 UTC (18 min ago)".
func (d *incDoc) point(pt incident.Point, ago bool) string {
	var parts []string
	if pt.Step > 0 {
		parts = append(parts, "step "+thousands(pt.Step))
	}
	if pt.WallNS > 0 {
		t := "at " + d.clock(pt.WallNS)
		if ago {
			if a := d.ago(pt.WallNS); a != "" {
				t += " (" + a + ")"
			}
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "an unknown time"
	}
	return strings.Join(parts, " ")
}

// clock is a wall time: the time of day when it is the reader's day,
// else the date too (UTC, like the other renderers).
func (d *incDoc) clock(ns int64) string {
	if ns <= 0 {
		return "—"
	}
	t := time.Unix(0, ns).UTC()
	if !d.o.Now.IsZero() && sameDay(t, d.o.Now.UTC()) {
		return t.Format("15:04:05") + nbsp + "UTC"
	}
	return t.Format("2006-01-02") + nbsp + t.Format("15:04:05") + nbsp + "UTC"
}

func (d *incDoc) ago(ns int64) string {
	if d.o.Now.IsZero() || ns <= 0 {
		return ""
	}
	return agoText(d.o.Now.Sub(time.Unix(0, ns)))
}

// scopeLines is where the incident is, a line per kind of place.
func scopeLines(inc *incident.Incident) []string {
	s := inc.Scope
	hosts := map[int]string{}
	for _, h := range inc.Hypotheses {
		if h.Target.Kind == incident.TargetRank && h.Target.Host != "" {
			hosts[h.Target.Rank] = h.Target.Host
		}
	}
	for _, e := range inc.Evidence {
		for _, t := range e.Targets {
			if t.Kind == incident.TargetRank && t.Host != "" && hosts[t.Rank] == "" {
				hosts[t.Rank] = t.Host
			}
		}
	}
	var lines []string
	if len(s.Ranks) > 0 {
		var parts []string
		for _, r := range sortedInts(s.Ranks) {
			if len(parts) == 8 {
				parts = append(parts, fmt.Sprintf("… %d more", len(s.Ranks)-8))
				break
			}
			if h := hosts[r]; h != "" {
				parts = append(parts, fmt.Sprintf("rank %d on %s", r, h))
			} else {
				parts = append(parts, fmt.Sprintf("rank %d", r))
			}
		}
		lines = append(lines, strings.Join(parts, ", "))
	}
	if len(s.Links) > 0 {
		var parts []string
		for _, l := range s.Links {
			parts = append(parts, incident.TargetWords(l))
		}
		lines = append(lines, strings.Join(parts, ", "))
	}
	// Hosts already named beside their ranks are not repeated.
	named := map[string]bool{}
	for _, r := range s.Ranks {
		named[hosts[r]] = true
	}
	var others []string
	for _, h := range s.Hosts {
		if !named[h] {
			others = append(others, h)
		}
	}
	if len(others) > 0 {
		lines = append(lines, plural(len(others), "host", "hosts")+" "+strings.Join(others, ", "))
	}
	if len(s.Groups) > 0 {
		lines = append(lines, plural(len(s.Groups), "group", "groups")+" "+strings.Join(s.Groups, ", "))
	}
	if len(s.Operators) > 0 {
		lines = append(lines, plural(len(s.Operators), "operator", "operators")+" "+strings.Join(s.Operators, ", "))
	}
	if s.Whole || len(lines) == 0 {
		w := "the whole job"
		if len(statedHyps(inc)) == 0 {
			w += " (nothing narrower is stated yet)"
		}
		lines = append([]string{w}, lines...)
	}
	return lines
}

// keyWords names a hypothesis target key ("rank:3") in words.
func keyWords(inc *incident.Incident, key string) string {
	for _, h := range inc.Hypotheses {
		if h.Target.Key() == key {
			return "for " + TargetShort(h.Target)
		}
	}
	return "for " + key
}
