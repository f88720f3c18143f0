package render

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/engine/sysom"
)

// Sysom writes a SysOM-AI report for people: the window, then the
// diagnoses (the answer), then the evidence that flagged the ranks (slow
// ranks, waterline), the temporal comparison and the notes (§3.1).
func Sysom(w io.Writer, r *analysis.SysomReport) error {
	p := &printer{w: w}
	win := r.Window
	p.f("SysOM-AI · window %s (%s, %s)\n", span(win.FromNS, win.ToNS), dur(win.ToNS-win.FromNS), win.Basis)
	if win.BaseBasis != "" && win.BaseBasis != analysis.BasisNone {
		p.f("baseline  %s (%s)\n", span(win.BaseFromNS, win.BaseToNS), win.BaseBasis)
	} else {
		p.f("baseline  none\n")
	}
	p.f("read: %d ranks with stacks (%d sample records), %d baseline ranks, %d collective calls, %d OS batches\n",
		win.Ranks, win.Samples, win.BaseRanks, win.Calls, win.OSBatches)
	if r.Report == nil {
		p.f("\nno report\n")
		return p.err
	}
	rep := r.Report
	switch {
	case len(rep.Diagnoses) > 0:
		p.f("\n▶ %d rank(s) diagnosed\n", len(rep.Diagnoses))
	case rep.Temporal != nil:
		p.f("\n▶ no straggler; the iteration time rose %+.1f%% against the baseline\n", 100*rep.Temporal.Rise)
	default:
		p.f("\n▶ no straggler and no CPU outlier in this window\n")
	}
	for _, d := range rep.Diagnoses {
		diagnosis(p, &d)
	}
	if len(rep.SlowRanks) > 0 {
		p.f("\nslow ranks (entry lateness vs the group, k σ):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  group\trank\tlate ms\tpeers ms (σ)\tz\tinstances\tlast\talign\n")
		for _, s := range rep.SlowRanks {
			fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f (%.2f)\t%.1f\t%d\t%.0f%%\t%s\n", s.Group, s.Rank, s.MeanLateMs, s.PeerMeanMs, s.PeerSigmaMs, s.Z, s.Instances, 100*s.LastShare, s.Align)
		}
		p.flush(tw)
	}
	if len(rep.Waterline) > 0 {
		p.f("\nCPU waterline flags (a function's share of the rank's own samples, another process's share of all of them, above the group's μ + k σ):\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  group\trank\tfunction\tfraction\tgroup μ (σ)\tz\tsamples\t\n")
		for _, f := range rep.Waterline {
			name := f.Func
			if f.New {
				name += " (new)"
			}
			note := ""
			if f.OnTime {
				note = "on time in collectives: does not delay the group"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%.2f%%\t%.2f%% (%.2f%%)\t%s\t%d\t%s\n", f.Group, f.Rank, clipText(name, 60), 100*f.Fraction, 100*f.Mean, 100*f.Sigma, zText(f.Z), f.Samples, note)
		}
		p.flush(tw)
	}
	if t := rep.Temporal; t != nil {
		p.f("\ntemporal baseline: iteration %.1f ms now vs %.1f ms (%+.1f%%), %d ranks now, %d at baseline\n", t.IterMs, t.IterBaseMs, 100*t.Rise, t.Ranks, t.BaseRanks)
		for _, e := range t.Evidence {
			p.f("%s\n", indented(2, "· "+e, "    "))
		}
		for _, c := range t.Candidates {
			hotPath(p, &c, "baseline")
		}
		if t.Next != "" {
			p.f("%s\n", indented(2, "next: "+t.Next, "    "))
		}
	}
	if len(rep.Notes) > 0 {
		p.f("\nnotes:\n")
		for _, n := range rep.Notes {
			p.f("%s\n", indented(2, "- "+n, "    "))
		}
	}
	return p.err
}

func diagnosis(p *printer, d *sysom.Diagnosis) {
	peer := "no healthy peer"
	if d.Peer >= 0 {
		peer = fmt.Sprintf("peer rank %d", d.Peer)
	}
	cause := ""
	if d.Cause != "" {
		cause = " · " + string(d.Cause)
	}
	p.f("\nrank %d (group %s, %s; flagged by %s): layer %s%s · confidence %s\n", d.Rank, d.Group, peer, strings.Join(d.Flagged, ", "), d.Layer, cause, d.Confidence)
	if d.Summary != "" {
		p.f("%s\n", indented(2, d.Summary, "  "))
	}
	for _, l := range d.Layers {
		p.f("  %-4s %s", l.Layer, l.Finding)
		if l.Cause != "" {
			p.f(" (%s)", l.Cause)
		}
		p.f("\n")
		for _, e := range l.Evidence {
			p.f("%s\n", indented(7, "· "+e, "         "))
		}
		for _, h := range l.Paths {
			hotPath(p, &h, "peer")
		}
		if l.Next != "" {
			p.f("%s\n", indented(7, "next: "+l.Next, "         "))
		}
	}
}

func hotPath(p *printer, h *sysom.HotPath, other string) {
	p.f("       %s %.2f%% vs %s %.2f%% (%d samples)", clipText(h.Func, 60), 100*h.Fraction, other, 100*h.PeerFraction, h.Samples)
	if h.Cause != "" {
		p.f(" [%s]", h.Cause)
	}
	p.f("\n")
	if len(h.Stack) > 0 {
		st := h.Stack
		if len(st) > 8 { // root … leaf: the ends say the most
			st = append(append(append([]string{}, st[:3]...), "…"), st[len(st)-4:]...)
		}
		p.f("%s\n", indented(9, strings.Join(st, " → "), "           "))
	}
}

func zText(z float64) string {
	if z >= 1e6 {
		return "new"
	}
	return fmt.Sprintf("%.1f", z)
}

func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func span(from, to int64) string {
	if from <= 0 {
		return "–"
	}
	f := time.Unix(0, from).UTC()
	t := time.Unix(0, to).UTC()
	layout := "2006-01-02 15:04:05"
	if f.Format("2006-01-02") == t.Format("2006-01-02") {
		return f.Format(layout) + " → " + t.Format("15:04:05") + " UTC"
	}
	return f.Format(layout) + " → " + t.Format(layout) + " UTC"
}

func dur(ns int64) string { return time.Duration(ns).Round(time.Second).String() }

func (p *printer) flush(tw *tabwriter.Writer) {
	if err := tw.Flush(); err != nil && p.err == nil {
		p.err = err
	}
}

// indented wraps s at 100 columns after n spaces, continuation lines
// indented by cont.
func indented(n int, s, cont string) string {
	return strings.Repeat(" ", n) + wrap(s, 100-n, cont)
}
