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
	"text/tabwriter"
	"time"

	"github.com/laggard-dev/laggard/internal/engine/kair"
)

// Text bounds of the KAIR report; --json has everything.
const (
	kairMaxOutliers = 15
	kairMaxCauses   = 10
	kairMaxExplains = 4
	kairMaxSteps    = 16
	kairMaxEvidence = 12
)

// KAIR writes a KAIR trace report for people, in the order of the
// paper's "localize, then pinpoint" workflow (§III-B): the headline,
// Stage 1 (which rank's rhythm differs), the clock alignment it relied
// on, Stage 2 (which operators on that rank are outliers) and Stage 3
// (which root causes the outliers trace back to, with the evidence).
// The report may come from a server's JSON, so every per-rank slice is
// read with bounds checks: a short or missing slice prints "—".
func KAIR(w io.Writer, r *kair.TraceReport) error {
	p := &printer{w: w}
	if r == nil {
		p.f("KAIR · no report\n")
		return p.err
	}
	kairHeader(p, r)
	kairRhythm(p, r.Rhythm)
	kairClock(p, r.Clock)
	kairWaits(p, r)
	kairOutliers(p, r)
	kairCauses(p, r)
	c := r.Config
	p.f("\nconfig: align %s · %d windows · α %s · separation %s · %s · max %d steps\n",
		orText(string(c.Align), "auto"), c.Rhythm.Windows, num(c.Rhythm.Alpha), num(c.Rhythm.Separation), c.Config, c.MaxSteps)
	return p.err
}

// KAIRBrief is the report's first lines: what was analysed, the verdict
// and headline, the steps (for a block beside other engines' verdicts).
func KAIRBrief(w io.Writer, r *kair.TraceReport) error {
	p := &printer{w: w}
	if r == nil {
		p.f("KAIR · no report\n")
		return p.err
	}
	kairHeader(p, r)
	return p.err
}

func kairHeader(p *printer, r *kair.TraceReport) {
	events := 0
	for _, n := range r.Events {
		events += n
	}
	p.f("KAIR · %d ranks %s · %s events", len(r.Ranks), rankSpan(r.Ranks), thousands(int64(events)))
	if n := len(r.LeftOut); n > 0 {
		p.f(" · %d rank(s) left out (no shared step)", n)
	}
	switch n := len(r.Steps); n {
	case 0:
		p.f(" · no step every rank has")
	case 1:
		p.f(" · 1 common step (%d)", r.Steps[0].Step)
	default:
		p.f(" · %d common steps (%d–%d)", n, r.Steps[0].Step, r.Steps[n-1].Step)
	}
	p.f(" · %d analysed\n", len(r.Analysed))
	verdict := orText(string(r.Verdict), "no verdict")
	p.f("\n%s\n", indented(0, "▶ "+verdict+": "+orText(r.Headline, "(no headline)"), "  "))
	if len(r.Steps) == 0 {
		return
	}
	// Step span = last end − first start over the ranks, on the reference
	// clock: the step time the slowest rank imposed.
	analysed := map[int64]bool{}
	for _, s := range r.Analysed {
		analysed[s] = true
	}
	var parts []string
	if len(r.Steps) <= kairMaxSteps {
		for _, s := range r.Steps {
			mark := ""
			if analysed[s.Step] {
				mark = "*"
			}
			parts = append(parts, fmt.Sprintf("%d%s %s", s.Step, mark, compact(stepSpan(s))))
		}
		p.f("%s\n", indented(0, "steps (* analysed): "+strings.Join(parts, " · "), "  "))
		return
	}
	// Many steps: their spread, then the analysed ones.
	var spans []int64
	for _, s := range r.Steps {
		if v, ok := stepSpanNS(s); ok {
			spans = append(spans, v)
		}
		if analysed[s.Step] && len(parts) < kairMaxSteps {
			parts = append(parts, fmt.Sprintf("%d %s", s.Step, compact(stepSpan(s))))
		}
	}
	line := fmt.Sprintf("steps: %d", len(r.Steps))
	if len(spans) > 0 {
		slices.Sort(spans)
		line += fmt.Sprintf(", span median %s, max %s", compact(nsText(spans[len(spans)/2])), compact(nsText(spans[len(spans)-1])))
	}
	if len(parts) > 0 {
		line += "; analysed: " + strings.Join(parts, " · ")
		if n := len(r.Analysed) - len(parts); n > 0 {
			line += fmt.Sprintf(" · … %d more", n)
		}
	}
	p.f("%s\n", indented(0, line, "  "))
}

// compact drops the blank between a number and its unit, so wrapping
// never splits them.
func compact(s string) string { return strings.ReplaceAll(s, " ", "") }

// stepSpan is a step's wall time over the ranks, "—" without data.
func stepSpan(s kair.StepSpan) string {
	v, ok := stepSpanNS(s)
	if !ok {
		return "—"
	}
	return nsText(v)
}

func stepSpanNS(s kair.StepSpan) (int64, bool) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, v := range s.StartNS {
		lo = min(lo, v)
	}
	for _, v := range s.EndNS {
		hi = max(hi, v)
	}
	if len(s.StartNS) == 0 || len(s.EndNS) == 0 || hi < lo || hi-lo < 0 {
		return 0, false
	}
	return hi - lo, true
}

func kairRhythm(p *printer, rh *kair.Rhythm) {
	if rh == nil {
		p.f("\nStage 1 · rhythm localization: not run\n")
		return
	}
	// KAIR §III-B Stage 1: S_A is the mean pairwise K-S D against the peers.
	p.f("\nStage 1 · rhythm localization: K-S over %d windows of %s", rh.Windows, nsText(rh.WindowNS))
	if t := clockText(rh.T0NS); t != "" {
		p.f(" from %s", t)
	}
	p.f("\n")
	idx := map[int]int{}
	for i, rk := range rh.Ranks {
		idx[rk] = i
	}
	// Rows by descending score (Order), then any rank Order left out.
	var rows []int
	seen := map[int]bool{}
	for _, rk := range rh.Order {
		if i, ok := idx[rk]; ok && !seen[i] {
			rows, seen[i] = append(rows, i), true
		}
	}
	for i := range rh.Ranks {
		if !seen[i] {
			rows = append(rows, i)
		}
	}
	if len(rows) > 0 {
		tw := newTable()
		fmt.Fprintf(tw, "  rank\tcompletions\tS_A\tp\tref D\t\n")
		for _, i := range rows {
			rk := rh.Ranks[i]
			mark := ""
			if rh.Verdict == kair.RhythmStraggler && rk == rh.Straggler {
				mark = "← straggler"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", rk, intAt(rh.Totals, i), fixedAt(rh.Score, i), pAt(rh.P, i), fixedAt(rh.RefD, i), mark)
		}
		p.table(tw)
	}
	v := string(rh.Verdict)
	if rh.Verdict == kair.RhythmStraggler {
		v = fmt.Sprintf("straggler rank %d", rh.Straggler)
	}
	p.f("%s\n", indented(2, "verdict: "+orText(v, "none given")+" — "+orText(rh.Why, "no reason given"), "    "))
	a := rh.Agreement
	if !a.Defined {
		p.f("  exact vs reference-ECDF approximation: not comparable (too few ranks or tied scores)\n")
		return
	}
	top1 := "differs"
	if a.Top1 {
		top1 = "agrees"
	}
	p.f("  exact vs reference-ECDF approximation: top-1 %s, top-%d overlap %d/%d, Spearman %s, Kendall %s\n",
		top1, a.K, a.Overlap, a.K, num(a.Spearman), num(a.Kendall))
}

func kairClock(p *printer, cl []kair.ClockEstimate) {
	if len(cl) == 0 {
		p.f("\nclock: no estimates\n")
		return
	}
	p.f("\nclock alignment (offset added to the rank's timestamps; residual = error after alignment):\n")
	tw := newTable()
	fmt.Fprintf(tw, "  rank\tmethod\toffset\tresidual\tsamples\tviolations\t\n")
	for _, c := range cl {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%d\t%d\t\n", c.Rank, c.Method, signedNS(c.OffsetNS), nsText(c.ResidualNS), c.Samples, c.Violations)
	}
	p.table(tw)
}

// kairWaits is who the ranks waited for at collectives (kair.Hold): the
// time a culprit must explain (issue 16 item 6a).
func kairWaits(p *printer, r *kair.TraceReport) {
	n := len(r.StepReports)
	if n == 0 {
		return
	}
	type row struct {
		rank, last          int
		typical, most, late int64
		op                  string
	}
	byRank := map[int]*row{}
	joined := false
	for _, sr := range r.StepReports {
		if sr == nil {
			continue
		}
		joined = joined || sr.Joined
		for _, h := range sr.Held {
			w := byRank[h.Rank]
			if w == nil {
				w = &row{rank: h.Rank}
				byRank[h.Rank] = w
			}
			if h.NS > 0 {
				w.last++
			}
			if h.NS > w.most {
				w.most, w.op = h.NS, h.Op
			}
		}
	}
	if !joined {
		p.f("\nwaits at collectives: no collective joins the ranks in the analysed steps (not measured)\n")
		return
	}
	rows := make([]*row, 0, len(byRank))
	for rk, w := range byRank {
		w.typical, _ = r.TypicalHeld(rk)
		w.late, _ = r.TypicalLate(rk)
		if w.most > 0 || w.late > 0 {
			rows = append(rows, w)
		}
	}
	slices.SortFunc(rows, func(a, b *row) int {
		return cmp.Or(cmp.Compare(b.typical, a.typical), cmp.Compare(b.late, a.late), cmp.Compare(b.most, a.most), cmp.Compare(a.rank, b.rank))
	})
	p.f("\nwaits at collectives (how long the others waited for the last to arrive, per step):")
	if len(rows) == 0 {
		p.f(" none\n")
		return
	}
	p.f("\n")
	tw := newTable()
	fmt.Fprintf(tw, "  rank\tlast in\twaited for*\tmost\tlate vs median*\top\t\n")
	for i, w := range rows {
		if i == 8 {
			fmt.Fprintf(tw, "  … %d more\t\t\t\t\t\t\n", len(rows)-i)
			break
		}
		fmt.Fprintf(tw, "  %d\t%d/%d\t%s\t%s\t%s\t%s\t\n", w.rank, w.last, n, nsText(w.typical), nsText(w.most), nsText(w.late), clipText(w.op, 40))
	}
	p.table(tw)
	p.f("  * reached in more than half the analysed steps; a culprit must explain the wait for its rank\n")
}

func kairOutliers(p *printer, r *kair.TraceReport) {
	thr := r.Config.Config.ZThreshold
	out := r.StragglerOutliers
	title := "within the straggler"
	if rh := r.Rhythm; rh != nil && rh.Verdict == kair.RhythmStraggler {
		title = fmt.Sprintf("within straggler rank %d", rh.Straggler)
	}
	if len(out) == 0 {
		// No Stage-1 straggler (or none of its ops stands out): the
		// cluster-wide outliers of the analysed steps are still evidence.
		for _, sr := range r.StepReports {
			if sr != nil {
				out = append(out, sr.Outliers...)
			}
		}
		slices.SortStableFunc(out, func(a, b kair.Instance) int { return cmp.Compare(b.A, a.A) })
		title = "over all ranks"
	}
	p.f("\nStage 2 · operator outliers %s (a = max |z start|, |z dur| > %s): ", title, num(thr))
	if len(out) == 0 {
		p.f("none\n")
		return
	}
	shown := min(len(out), kairMaxOutliers)
	if shown < len(out) {
		p.f("%d, top %d shown\n", len(out), shown)
	} else {
		p.f("%d\n", len(out))
	}
	tw := newTable()
	fmt.Fprintf(tw, "  a\tz start\tz dur\tclassic / robust\trank\top\tcat\tstart\tdur\twait\t\n")
	for _, in := range out[:shown] {
		wait := ""
		if in.WaitNS > 0 {
			wait = nsText(in.WaitNS)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s / %s\t%d\t%s#%d\t%s\t+%s\t%s\t%s\t\n", num(in.A), num(in.ZStart), num(in.ZDur), num(in.AClassic), num(in.ARobust),
			in.Rank, clipText(in.Name, 48), in.Occurrence, in.Cat, nsText(in.StartNS), nsText(in.DurNS), wait)
	}
	p.table(tw)
}

func kairCauses(p *printer, r *kair.TraceReport) {
	n := len(r.Analysed)
	if len(r.Causes) == 0 {
		p.f("\nStage 3 · root causes: none (no late or slow outlier to walk back from in %d analysed step(s))\n", n)
		return
	}
	p.f("\nStage 3 · root causes (backward blame over %d analysed step(s); most steps first):\n", n)
	for i, c := range r.Causes {
		if i == kairMaxCauses {
			p.f("  … %d more (--json for all)\n", len(r.Causes)-i)
			break
		}
		var what string
		switch c.Kind {
		case kair.KindEdge:
			why := "transfer or synchronization"
			if c.FromRank == c.Rank {
				why = "a gap on the rank: a wait or un-profiled host work"
			}
			what = fmt.Sprintf("edge: rank %d %s → rank %d %s (%s)", c.FromRank, clipText(c.From, 60), c.Rank, clipText(c.Name, 60), why)
		case kair.KindOp:
			what = fmt.Sprintf("op: rank %d %s (abnormal execution time)", c.Rank, clipText(c.Name, 60))
		default:
			what = fmt.Sprintf("%s: rank %d %s", orText(string(c.Kind), "?"), c.Rank, clipText(c.Name, 60))
		}
		p.f("%s\n", indented(2, fmt.Sprintf("%d. %s", i+1, what), "     "))
		p.f("     in %d/%d analysed step(s) (first: step %d) · %s over peers · %d symptom(s) · top a = %s\n", c.Steps, n, c.Step, nsText(c.ExcessNS), c.Symptoms, num(c.Score))
		if len(c.Explains) > 0 {
			ex := c.Explains
			more := ""
			if len(ex) > kairMaxExplains {
				more = fmt.Sprintf(", … (+%d)", max(c.Symptoms, len(ex))-kairMaxExplains)
				ex = ex[:kairMaxExplains]
			}
			p.f("%s\n", indented(5, "explains: "+strings.Join(ex, ", ")+more, "       "))
		}
		if len(c.Evidence) > 0 {
			p.f("     evidence (symptom first):\n")
			ev := c.Evidence
			if len(ev) > kairMaxEvidence { // the ends say the most
				ev = append(append(append([]string{}, ev[:kairMaxEvidence/2]...), fmt.Sprintf("… %d hops …", len(ev)-kairMaxEvidence)), ev[len(ev)-kairMaxEvidence/2:]...)
			}
			for j, e := range ev {
				lead := "← "
				if j == 0 {
					lead = "· "
				}
				p.f("%s\n", indented(7, lead+e, "           "))
			}
		}
	}
}

// table is a tabwriter into a buffer; printer.table writes it without
// the trailing blanks of padded last columns.
type table struct {
	*tabwriter.Writer
	buf *bytes.Buffer
}

func newTable() table {
	b := new(bytes.Buffer)
	return table{tabwriter.NewWriter(b, 0, 0, 2, ' ', 0), b}
}

func (p *printer) table(t table) {
	if err := t.Flush(); err != nil && p.err == nil {
		p.err = err
	}
	for _, l := range strings.SplitAfter(t.buf.String(), "\n") {
		if l != "" {
			p.f("%s\n", strings.TrimRight(l, " \n"))
		}
	}
}

// intAt, fixedAt and pAt read slice i, "—" when the slice is short.
func intAt(xs []int, i int) string {
	if i < 0 || i >= len(xs) {
		return "—"
	}
	return thousands(int64(xs[i]))
}

func fixedAt(xs []float64, i int) string {
	if i < 0 || i >= len(xs) || math.IsNaN(xs[i]) || math.IsInf(xs[i], 0) {
		return "—"
	}
	return strconv.FormatFloat(xs[i], 'f', 3, 64)
}

// pAt prints a p-value; -1 is the engine's "no sample".
func pAt(xs []float64, i int) string {
	if i < 0 || i >= len(xs) {
		return "—"
	}
	v := xs[i]
	switch {
	case math.IsNaN(v) || v < 0 || v > 1:
		return "—"
	case v < 1e-4:
		return "<0.0001"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// num prints a float for people (3 significant digits, finite or "—").
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	if a := math.Abs(v); a >= 1000 || a == math.Trunc(a) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// nsText prints a duration with 3 significant digits (ns, µs, ms, s).
func nsText(ns int64) string {
	a := math.Abs(float64(ns))
	switch {
	case a < 1e3:
		return strconv.FormatInt(ns, 10) + " ns"
	case a < 1e6:
		return strconv.FormatFloat(float64(ns)/1e3, 'g', 3, 64) + " µs"
	case a < 1e9:
		return strconv.FormatFloat(float64(ns)/1e6, 'g', 3, 64) + " ms"
	}
	return strconv.FormatFloat(float64(ns)/1e9, 'f', 2, 64) + " s"
}

func signedNS(ns int64) string {
	if ns > 0 {
		return "+" + nsText(ns)
	}
	return nsText(ns)
}

// clockText prints an epoch time as UTC wall clock; traces on a relative
// time base (before 2001) print nothing.
func clockText(ns int64) string {
	if ns < 1e18 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.000000 UTC")
}

func rankSpan(ranks []int) string {
	if len(ranks) == 0 {
		return ""
	}
	lo, hi := slices.Min(ranks), slices.Max(ranks)
	if hi-lo+1 == len(ranks) {
		if lo == hi {
			return fmt.Sprintf("(%d)", lo)
		}
		return fmt.Sprintf("(%d–%d)", lo, hi)
	}
	if len(ranks) <= 8 {
		return fmt.Sprint(ranks)
	}
	return fmt.Sprintf("(%d–%d, gaps)", lo, hi)
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
