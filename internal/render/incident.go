package render

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
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
			parts = append(parts, targetWords(h.Target)+knownCategory(h.Category, " (", ")"))
		}
		s = "Cause: " + strings.Join(parts, "; ") + "."
	} else {
		s = "No cause stated yet."
	}
	if inc.HealthyMS > 0 && inc.SlowMS > 0 {
		s = fmt.Sprintf("The step time rose from %s to %s (%s). %s", msText(inc.HealthyMS), msText(inc.SlowMS), pctText(inc.SlowMS/inc.HealthyMS-1), s)
	}
	return s
}

// summary is the what / since / cost / where block.
func (d *incDoc) summary() {
	inc := d.inc
	d.p.f("\n")
	// What slowed, and since when.
	slowed := "the step time"
	switch {
	case inc.HealthyMS > 0 && inc.SlowMS > 0:
		slowed = fmt.Sprintf("step time %s → %s per step (%s)", msText(inc.HealthyMS), msText(inc.SlowMS), pctText(inc.SlowMS/inc.HealthyMS-1))
	case inc.SlowMS > 0:
		slowed = fmt.Sprintf("step time %s per step (no healthy step time before it)", msText(inc.SlowMS))
	}
	d.row("what slowed", slowed)
	since := d.point(inc.Opened, true)
	if inc.DetectedNS > 0 && inc.Opened.WallNS > 0 && inc.DetectedNS >= inc.Opened.WallNS {
		since += "; detected " + durText(float64(inc.DetectedNS-inc.Opened.WallNS)/1e9) + " later, at " + d.clock(inc.DetectedNS)
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
		if r := inc.Resolved; r != nil {
			line := d.point(*r, false)
			if r.WallNS > inc.Opened.WallNS && inc.Opened.WallNS > 0 {
				line += ", after " + durText(float64(r.WallNS-inc.Opened.WallNS)/1e9)
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
			extra = append(extra, durText(r.Lost)+" lost")
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
			title = fmt.Sprintf("why, cause %d of %d: %s", i+1, len(stated), targetWords(h.Target))
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

// fill breaks words into lines of at most incWidth columns; the first
// line starts at column col (after what is already printed), the others
// after indent. A word longer than a line (a URL) is never broken.
func fill(words []string, col int, indent string) string {
	var b strings.Builder
	line := col
	for i, w := range words {
		n := len([]rune(w))
		if i > 0 {
			if line+1+n > incWidth {
				b.WriteString("\n" + indent)
				line = len(indent)
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(w)
		line += n
	}
	return b.String()
}

// para is s at indent n, wrapped to incWidth, continuation lines after
// cont.
func para(n int, s, cont string) string {
	return strings.Repeat(" ", n) + fill(words(s), n, cont)
}

// words splits s at ASCII white space (a no-break space holds).
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' })
}

// Para is s for people at indent n, wrapped to 100 columns (the
// continuation lines 2 deeper), as the incident text wraps.
func Para(n int, s string) string {
	return para(n, s, strings.Repeat(" ", n+2))
}

// wrapTail is text at column col with tag after it, unbroken: on the
// last line when it fits there, else on a line of its own.
func wrapTail(text, tag string, col int, indent string) string {
	return fill(append(words(text), strings.ReplaceAll(tag, " ", nbsp)), col, indent)
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
			line := fmt.Sprintf("%d. %s%s (%s)", i+1, targetWords(h.Target), knownCategory(h.Category, " — ", ""), confWords(h.Confidence, h.Reason))
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
		var facts []string
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

// Incidents writes the incidents table: id, job, state, since (relative
// and absolute), cause in words, lost time and confidence. The cause is
// the last column; when it does not fit 100 columns it goes on a line of
// its own under each row.
func Incidents(w io.Writer, incs []incident.Incident, o IncidentOptions) error {
	p := &printer{w: w}
	if len(incs) == 0 {
		p.f("no incidents\n")
		return p.err
	}
	rows := [][]string{{"ID", "JOB", "STATE", "SINCE (UTC)", "LOST", "CONFIDENCE"}}
	causes := []string{"CAUSE"}
	for i := range incs {
		inc := &incs[i]
		since := "—"
		if inc.Opened.WallNS > 0 {
			since = tableTime(inc.Opened.WallNS, o.Now)
		}
		rows = append(rows, []string{inc.ID, inc.Job, orText(string(inc.State), "—"), since, lostShort(inc.Lost, incRanks(inc)), orText(string(inc.Confidence), "—")})
		causes = append(causes, causeShort(inc))
	}
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for j, c := range r {
			widths[j] = max(widths[j], len([]rune(c)))
		}
	}
	fixed := 0
	for _, w := range widths {
		fixed += w + 2
	}
	longest := 0
	for _, c := range causes {
		longest = max(longest, len([]rune(c)))
	}
	inline := fixed+longest <= incWidth
	for i, r := range rows {
		var b strings.Builder
		for j, c := range r {
			b.WriteString(c)
			if j < len(r)-1 || inline {
				b.WriteString(strings.Repeat(" ", widths[j]-len([]rune(c))+2))
			}
		}
		switch {
		case inline:
			b.WriteString(causes[i])
		case i > 0:
			b.WriteString("\n" + para(2, "cause: "+causes[i], "         "))
		}
		p.f("%s\n", strings.TrimRight(b.String(), " "))
	}
	return p.err
}

// causeShort is the stated cause in a few words, or why there is none.
func causeShort(inc *incident.Incident) string {
	if stated := statedHyps(inc); len(stated) > 0 {
		var parts []string
		for _, h := range stated {
			parts = append(parts, targetWords(h.Target)+knownCategory(h.Category, ": ", ""))
		}
		return strings.Join(parts, "; ")
	}
	switch n := len(inc.Hypotheses); n {
	case 0:
		return "not stated yet"
	case 1:
		return "not stated (1 candidate: " + targetShort(inc.Hypotheses[0].Target) + ")"
	default:
		var ts []string
		for i := range inc.Hypotheses[:min(n, 3)] {
			ts = append(ts, targetShort(inc.Hypotheses[i].Target))
		}
		if n > 3 {
			ts = append(ts, "…")
		}
		return fmt.Sprintf("not stated (%d competing: %s)", n, strings.Join(ts, ", "))
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

func sameDay(a, b time.Time) bool {
	return a.Year() == b.Year() && a.YearDay() == b.YearDay()
}

// tableTime is "18 min ago (14:01 UTC)" — the date instead of the time
// of day once it is another day.
func tableTime(ns int64, now time.Time) string {
	t := time.Unix(0, ns).UTC()
	if now.IsZero() {
		return t.Format("2006-01-02 15:04") + " UTC"
	}
	abs := t.Format("15:04")
	if !sameDay(t, now.UTC()) {
		abs = t.Format("01-02 15:04")
	}
	return agoText(now.Sub(t)) + " (" + abs + ")"
}

func agoText(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s < 0:
		return "in the future (clock skew)"
	case s < 5:
		return "just now"
	case s < 60:
		return fmt.Sprintf("%d s ago", int(s))
	case s < 3600:
		return fmt.Sprintf("%d min ago", int(s/60))
	case s < 86400:
		h := int(s / 3600)
		if m := int(s/60) % 60; m > 0 && h < 10 {
			return fmt.Sprintf("%d h %d min ago", h, m)
		}
		return fmt.Sprintf("%d h ago", h)
	}
	return fmt.Sprintf("%d d ago", int(s/86400))
}

// durText is a duration for people: "0.4 s", "42 s", "4 min 12 s",
// "1 h 3 min", "2 d 4 h".
func durText(s float64) string {
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0) || s < 0:
		return "—"
	case s < 10:
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + " s"
	}
	n := int64(math.Round(s))
	switch {
	case n < 60:
		return fmt.Sprintf("%d s", n)
	case n < 3600:
		if n%60 == 0 {
			return fmt.Sprintf("%d min", n/60)
		}
		return fmt.Sprintf("%d min %d s", n/60, n%60)
	case n < 86400:
		if m := (n / 60) % 60; m > 0 {
			return fmt.Sprintf("%d h %d min", n/3600, m)
		}
		return fmt.Sprintf("%d h", n/3600)
	}
	if h := (n / 3600) % 24; h > 0 {
		return fmt.Sprintf("%d d %d h", n/86400, h)
	}
	return fmt.Sprintf("%d d", n/86400)
}

// rankTimeText is rank-seconds in the unit that reads best.
func rankTimeText(rs float64) string {
	switch {
	case math.IsNaN(rs) || math.IsInf(rs, 0) || rs < 0:
		return "—"
	case rs < 120:
		return strconv.FormatFloat(math.Round(rs), 'f', 0, 64) + " rank-s"
	case rs < 7200:
		return strconv.FormatFloat(rs/60, 'f', 1, 64) + " rank-min"
	}
	return strconv.FormatFloat(rs/3600, 'f', 1, 64) + " rank-h"
}

// lostText is "4 min 12 s of the job, 33.6 rank-min, over 2,066 slow
// steps (8 ranks)".
func lostText(l incident.Lost, ranks int) string {
	if l.Seconds <= 0 && l.Steps == 0 {
		return "nothing measurable yet"
	}
	s := durText(l.Seconds) + " of the job"
	if l.RankSeconds > 0 {
		s += ", " + rankTimeText(l.RankSeconds)
	}
	if l.Steps > 0 {
		s += ", over " + thousands(l.Steps) + " slow steps"
	}
	if ranks > 0 {
		s += fmt.Sprintf(" (%d ranks)", ranks)
	}
	if l.Partial {
		s = "at least " + s + " — the step samples do not cover the whole incident"
	}
	return s
}

func lostShort(l incident.Lost, _ int) string {
	if l.Seconds <= 0 {
		return "—"
	}
	s := durText(l.Seconds)
	if l.RankSeconds > 0 {
		s += ", " + rankTimeText(l.RankSeconds)
	}
	if l.Partial {
		s = "≥ " + s
	}
	return s
}

// msText is a step time: 412 ms, 48.3 ms, 3.25 ms, 1.84 s.
func msText(ms float64) string {
	switch a := math.Abs(ms); {
	case math.IsNaN(ms) || math.IsInf(ms, 0):
		return "—"
	case a >= 10000:
		return strconv.FormatFloat(ms/1000, 'f', 1, 64) + " s"
	case a >= 1000:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	case a >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
	case a >= 10:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
}

func pctText(rel float64) string {
	if math.IsNaN(rel) || math.IsInf(rel, 0) {
		return "—"
	}
	return fmt.Sprintf("%+.0f%%", 100*rel)
}

func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
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
			parts = append(parts, targetWords(l))
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// targetWords names a target for people.
func targetWords(t incident.Target) string {
	switch t.Kind {
	case incident.TargetRank:
		if t.Host != "" {
			return fmt.Sprintf("rank %d on %s", t.Rank, t.Host)
		}
		return fmt.Sprintf("rank %d", t.Rank)
	case incident.TargetLink:
		return fmt.Sprintf("the link rank %d → rank %d", t.Src, t.Dst)
	case incident.TargetHost:
		return "host " + t.Name
	case incident.TargetGroup:
		return "group " + t.Name
	case incident.TargetOperator:
		if t.Rank < 0 {
			return "operator " + t.Name + " on every rank"
		}
		return fmt.Sprintf("operator %s on rank %d", t.Name, t.Rank)
	case incident.TargetJob:
		return "every rank alike"
	}
	return strings.TrimSpace(string(t.Kind) + " " + t.Name)
}

// targetShort is a target in a table cell.
func targetShort(t incident.Target) string {
	switch t.Kind {
	case incident.TargetRank:
		return fmt.Sprintf("rank %d", t.Rank)
	case incident.TargetLink:
		return fmt.Sprintf("link %d→%d", t.Src, t.Dst)
	case incident.TargetOperator:
		return "op " + clipText(t.Name, 24)
	}
	return targetWords(t)
}

func targetsWords(ts []incident.Target) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = targetShort(t)
	}
	return strings.Join(parts, ", ")
}

// keyWords names a hypothesis target key ("rank:3") in words.
func keyWords(inc *incident.Incident, key string) string {
	for _, h := range inc.Hypotheses {
		if h.Target.Key() == key {
			return "for " + targetShort(h.Target)
		}
	}
	return "for " + key
}

func relTarget(key string) string {
	if k, v, ok := strings.Cut(key, ":"); ok {
		return k + " " + v
	}
	return key
}

func categoryWords(c incident.Category) string {
	switch c {
	case incident.CategoryCompute:
		return "compute"
	case incident.CategoryCommunication:
		return "communication"
	case incident.CategoryData:
		return "data loading"
	case incident.CategoryOS:
		return "OS interference"
	case incident.CategoryNetwork:
		return "network"
	case incident.CategoryUniform:
		return "uniform slowdown"
	case incident.CategoryUnknown, "":
		return "kind not known"
	}
	return string(c)
}

// knownCategory is the category in words between pre and post, or
// nothing when it is not known.
func knownCategory(c incident.Category, pre, post string) string {
	if c == "" || c == incident.CategoryUnknown {
		return ""
	}
	return pre + categoryWords(c) + post
}

func layerWords(l incident.Layer) string {
	switch l {
	case incident.LayerStage:
		return "step stage"
	case incident.LayerGPU:
		return "GPU"
	case incident.LayerCPU:
		return "CPU"
	case incident.LayerOS:
		return "OS"
	case "":
		return "—"
	}
	return string(l)
}

func engineName(e incident.Engine) string {
	switch e {
	case incident.EngineStageFrontier:
		return "StageFrontier"
	case incident.EngineGreyhound:
		return "Greyhound"
	case incident.EngineSysom:
		return "SysOM-AI"
	case incident.EngineKair:
		return "KAIR"
	case "":
		return "?"
	}
	return string(e)
}

// confWords is a confidence with its reason.
func confWords(c incident.Confidence, reason string) string {
	s := orText(string(c), "unknown") + " confidence"
	if c == incident.ConfidenceWithheld {
		s = "withheld"
	}
	if r := strings.TrimSpace(reason); r != "" {
		s += ": " + r
	}
	return s
}

func supportText(h *incident.Hypothesis) string {
	if len(h.Engines) == 0 {
		return "no engine supports it"
	}
	names := make([]string, len(h.Engines))
	for i, e := range h.Engines {
		names[i] = engineName(e)
	}
	return "supported by " + strings.Join(names, ", ")
}

func requestWords(k incident.RequestKind) string {
	switch k {
	case incident.RequestValidation:
		return "a Greyhound validation (compute per rank and transfers per link benchmarked at a step boundary)"
	case incident.RequestCapture:
		return "a KAIR operator capture (a few steps of torch.profiler)"
	case incident.RequestProfile:
		return "a SysOM-AI CPU profile window"
	}
	return string(k)
}

func requestShort(k incident.RequestKind) string {
	switch k {
	case incident.RequestValidation:
		return "validation"
	case incident.RequestCapture:
		return "operator capture"
	case incident.RequestProfile:
		return "CPU profile"
	}
	return orText(string(k), "action")
}

// rankList is "rank 3", "ranks 1, 5", "ranks 0–7".
func rankList(rs []int) string {
	rs = sortedInts(rs)
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	if len(rs) > 2 && rs[len(rs)-1]-rs[0] == len(rs)-1 {
		return fmt.Sprintf("ranks %d–%d", rs[0], rs[len(rs)-1])
	}
	parts := make([]string, 0, len(rs))
	for i, r := range rs {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("… %d more", len(rs)-8))
			break
		}
		parts = append(parts, strconv.Itoa(r))
	}
	return "ranks " + strings.Join(parts, ", ")
}

func sortedInts(xs []int) []int {
	return slices.Compact(slices.Sorted(slices.Values(xs)))
}
