// Package render turns an analysis.Report into the human-readable text the
// CLI and the demo print. JSON output is the Report itself.
package render

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
)

// Text writes a readable job report: the headline first, then per role
// group the stage table, the straggler evidence, labels, baselines and
// telemetry, then the time axis.
func Text(w io.Writer, r *analysis.Report) error {
	p := &printer{w: w}
	ranks := 0
	for _, g := range r.Groups {
		ranks += g.NumRanks
	}
	name := r.JobID
	if r.JobName != "" && r.JobName != r.JobID {
		name += " (" + r.JobName + ")"
	}
	steps := 0
	if len(r.Groups) > 0 && r.Groups[0].Report != nil {
		steps = r.Groups[0].Report.NumSteps
	}
	p.f("job %s · steps %d–%d (%d) · %d ranks\nwindow: %s\n\n", name, r.Window.From, r.Window.To, steps, ranks, r.Window.Reason)
	p.f("%s\n", wrap("▶ "+r.Headline.Text, 100, "  "))
	for _, g := range r.Groups {
		if g.Report == nil { // a report read back from JSON may lack one
			p.f("\n── role group %s (%d ranks): no report\n", g.Group, g.NumRanks)
			continue
		}
		if len(r.Groups) > 1 {
			p.f("\n── role group %s (%d ranks) %s\n%s\n", g.Group, g.NumRanks, strings.Repeat("─", 40), wrap("▶ "+g.Report.Headline.Text, 100, "  "))
		}
		group(p, w, g)
	}
	timeline(p, r.Timeline)
	if len(r.Notes) > 0 {
		p.f("\nnotes:\n")
		for _, n := range r.Notes {
			p.f("  - %s\n", n)
		}
	}
	return p.err
}

func group(p *printer, w io.Writer, g analysis.GroupReport) {
	r, c := g.Report, g.Comparison
	p.f("\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "stage\tadvance ms/step\tshare\t\t"
	if c != nil {
		head += "ref ms/step\tΔ ms/step\t"
	}
	fmt.Fprintf(tw, "%sroute\t\n", head)
	for s, name := range r.Stages {
		share := "—"
		bar := ""
		if !r.RawOnly && s < len(r.Share) {
			share = fmt.Sprintf("%.1f%%", 100*r.Share[s])
			bar = shareBar(r.Share[s])
		}
		adv := math.NaN()
		if s < len(r.AdvanceMS) {
			adv = r.AdvanceMS[s]
		}
		row := fmt.Sprintf("%s\t%.2f\t%s\t%s\t", name, perStep(adv, r.NumSteps), share, bar)
		if c != nil && s < len(c.Stages) {
			row += fmt.Sprintf("%.2f\t%+.2f\t", c.Stages[s].RefMS, c.Stages[s].DeltaMS)
		}
		fmt.Fprintf(tw, "%s%s\t\n", row, routeMark(r, c, name))
	}
	tw.Flush()
	if r.RawOnly {
		p.f("(exposed makespan below the %.1f ms floor: raw advances only)\n", r.Config.DenominatorFloorMS)
	}
	p.f("\nrouting set (absolute shares): {%s} (τ=%.2f)", strings.Join(r.Routing, ", "), r.Config.CandidateThreshold)
	if c != nil {
		p.f("\nexcess over the reference:     {%s} (reference steps %d–%d, %s)", strings.Join(c.ExcessRouting, ", "), c.Reference.FirstStep, c.Reference.LastStep, c.Reference.Basis)
	}
	if len(r.CoCriticalStages) > 0 {
		p.f("\nco-critical:                   {%s}", strings.Join(r.CoCriticalStages, ", "))
	}
	p.f("\n")
	h := r.Headline
	if h.Stage != "" {
		ev := evidenceOf(r, h.Stage)
		if h.Rank >= 0 {
			host := ""
			if h.Host != "" {
				host = " on " + h.Host
			}
			p.f("straggler: rank %d%s at %s — leads %d/%d material steps (%.0f%%), margin %.0f%%, sub-windows %s\n",
				h.Rank, host, h.Stage, ev.Leads, ev.MaterialSteps, 100*ev.Fraction, 100*ev.Margin, subText(ev.SubWindowLeaders))
		} else {
			p.f("straggler: none named (%s) — %s\n", h.Withheld, h.WithheldWhy)
		}
	}
	p.f("leader switches at the top-1 boundary: %d (rate %.2f)\n", r.LeaderSwitches, r.LeaderSwitchRate)

	p.f("\nlabels:\n")
	for _, l := range r.Labels {
		stage := ""
		if l.Stage != "" {
			stage = " (" + l.Stage + ")"
		}
		p.f("  %-32s %-15s %s%s\n", l.Name, "["+string(l.Axis)+"]", l.Reason, stage)
	}
	if len(r.Contract) > 0 {
		p.f("\ncontract findings:\n")
		for _, f := range r.Contract {
			p.f("  - %s: %s\n", f.Check, f.Detail)
		}
	}
	focus := h.Stage
	if focus == "" {
		focus = r.Top1
	}
	if top := leadingRanks(r, focus, 5); len(top) > 0 {
		p.f("\nranks setting the frontier at %s (steps leading, mean lag behind the frontier ms/step):\n", focus)
		for _, rs := range top {
			p.f("  rank %-5d %-20s led %4d/%d steps   lag %8.2f\n", rs.rank, rs.host, rs.lead, r.NumSteps, rs.lag)
		}
	}
	if len(r.Baselines) > 0 {
		p.f("\nbaselines on the same window:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  method\ttop-1\ttop-2\trouting set\t\n")
		fmt.Fprintf(tw, "  stagefrontier\t%s\t%s\t{%s}\t\n", r.Top1, strings.Join(r.Top2, ", "), strings.Join(r.Routing, ", "))
		for _, b := range r.Baselines {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t{%s}\t\n", b.Method, b.Top1, strings.Join(b.Top2, ", "), strings.Join(b.Routing, ", "))
		}
		tw.Flush()
	}
	q := r.Quality
	p.f("\ntelemetry: missing cells %d, max closure %.1f%%, max overlap %.1f%%, dropped %d, nested %d, event samples %d (ready %.0f%%)\n",
		q.MissingCells, 100*q.MaxClosureShare, 100*q.MaxOverlapShare, q.Dropped, q.Nested, q.EventSamples, 100*q.EventReadyRatio)
}

func timeline(p *printer, t *analysis.Timeline) {
	if t == nil {
		return
	}
	p.f("\ntime axis (steps %d–%d, %s detector): ", t.From, t.To, t.Detector)
	if t.WarmupEnd > t.From {
		p.f("warm-up until step %d; ", t.WarmupEnd)
	}
	if len(t.ChangePoints) == 0 {
		p.f("no change point in exposed step time\n")
		return
	}
	p.f("%d change point(s)\n", len(t.ChangePoints))
	for _, c := range t.ChangePoints {
		p.f("  %-6s at step %-6d %8.1f → %8.1f ms/step (%+.0f%%)", c.Kind, c.Step, c.BeforeMS, c.AfterMS, 100*c.Rel)
		if len(c.Stages) > 0 {
			s := c.Stages[0]
			p.f("   largest stage shift: %s %+.1f ms/step", s.Stage, s.DeltaMS)
		}
		p.f("\n")
	}
}

func evidenceOf(r *stagefrontier.Report, stage string) stagefrontier.LeaderEvidence {
	for _, e := range r.Evidence {
		if e.Stage == stage {
			return e.Leader
		}
	}
	return stagefrontier.LeaderEvidence{Rank: -1}
}

func subText(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = "—"
		if x >= 0 {
			parts[i] = fmt.Sprint(x)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func routeMark(r *stagefrontier.Report, c *stagefrontier.Comparison, stage string) string {
	var marks []string
	switch {
	case stage == r.Top1:
		marks = append(marks, "top-1")
	case slices.Contains(r.Top2, stage):
		marks = append(marks, "top-2")
	case slices.Contains(r.Routing, stage):
		marks = append(marks, "routed")
	}
	if c != nil && slices.Contains(c.ExcessRouting, stage) {
		marks = append(marks, "excess")
	}
	return strings.Join(marks, " ")
}

type leadRow struct {
	rank int
	host string
	lead int
	lag  float64
}

// leadingRanks returns the n ranks that most often attain the frontier at
// the stage's boundary (the latest-rank tie set, §4): the ranks whose
// progress the rest of the group waits for there.
func leadingRanks(r *stagefrontier.Report, stage string, n int) []leadRow {
	s := slices.Index(r.Stages, stage)
	if s < 0 || r.NumSteps == 0 || len(r.Ranks) < 2 {
		return nil
	}
	rows := make([]leadRow, 0, len(r.Ranks))
	for _, rs := range r.Ranks {
		if s < len(rs.LeadCount) && s < len(rs.LagMS) && rs.LeadCount[s] > 0 {
			rows = append(rows, leadRow{rs.Rank, rs.Host, rs.LeadCount[s], rs.LagMS[s] / float64(r.NumSteps)})
		}
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].lead > rows[j].lead })
	return rows[:min(n, len(rows))]
}

// barWidth is the bar of a 100% share.
const barWidth = 30

// shareBar draws a share in [0, 1] as a bar; a share outside it (or NaN,
// from sums that overflowed) is clamped rather than trusted as a count
// for strings.Repeat, which panics on a negative one (D5).
func shareBar(share float64) string {
	n := 0
	if x := share*barWidth + 0.5; x > 0 { // false for NaN
		n = int(min(x, barWidth))
	}
	return strings.Repeat("█", n)
}

func perStep(total float64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return total / float64(n)
}

// wrap breaks s into lines of at most width runes, indenting continuation
// lines.
func wrap(s string, width int, indent string) string {
	return fillTo(strings.Fields(s), 0, width, indent)
}

// fillTo breaks words into lines of at most width runes: the first line
// starts at column col, the others after indent; a word longer than a
// line is never broken.
func fillTo(words []string, col, width int, indent string) string {
	var b strings.Builder
	line := col
	for i, w := range words {
		n := len([]rune(w))
		if i > 0 {
			if line+1+n > width {
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

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
