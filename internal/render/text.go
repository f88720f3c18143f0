// Package render turns a stagefrontier.Report into the human-readable text the
// CLI and the demo print. JSON output is the Report itself.
package render

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
)

// Text writes a readable window report.
func Text(w io.Writer, r *stagefrontier.Report) error {
	p := &printer{w: w}
	perStep := 0.0
	if r.NumSteps > 0 {
		perStep = r.ExposedMS / float64(r.NumSteps)
	}
	p.f("job %s · steps %d–%d (%d) · %d ranks · exposed %.1f ms/step (%.0f ms total)\n\n",
		r.JobID, r.FirstStep, r.LastStep, r.NumSteps, r.NumRanks, perStep, r.ExposedMS)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "stage\tadvance ms/step\tshare\t\troute\t\n")
	for s, name := range r.Stages {
		share := "—"
		if !r.RawOnly && s < len(r.Share) {
			share = fmt.Sprintf("%.1f%%", 100*r.Share[s])
		}
		adv := 0.0
		if r.NumSteps > 0 && s < len(r.AdvanceMS) {
			adv = r.AdvanceMS[s] / float64(r.NumSteps)
		}
		bar := ""
		if !r.RawOnly && s < len(r.Share) {
			bar = strings.Repeat("█", int(r.Share[s]*30+0.5))
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\t%s\t%s\t\n", name, adv, share, bar, routeMark(r, name))
	}
	tw.Flush()
	if r.RawOnly {
		p.f("(exposed makespan below the %.1f ms floor: raw advances only)\n", r.Config.DenominatorFloorMS)
	}
	p.f("\nrouting set: {%s} (τ=%.2f)", strings.Join(r.Routing, ", "), r.Config.CandidateThreshold)
	if len(r.CoCriticalStages) > 0 {
		p.f("   co-critical: {%s}", strings.Join(r.CoCriticalStages, ", "))
	}
	p.f("\n")
	if r.LeaderRank >= 0 {
		host := ""
		for _, rs := range r.Ranks {
			if rs.Rank == r.LeaderRank && rs.Host != "" {
				host = " on " + rs.Host
			}
		}
		p.f("leader rank: %d%s   leader switches: %d (rate %.2f)\n", r.LeaderRank, host, r.LeaderSwitches, r.LeaderSwitchRate)
	} else {
		p.f("leader rank: none confident   leader switches: %d\n", r.LeaderSwitches)
	}

	p.f("\nlabels:\n")
	for _, l := range r.Labels {
		stage := ""
		if l.Stage != "" {
			stage = " (" + l.Stage + ")"
		}
		p.f("  %-32s %-15s %s%s\n", l.Name, "["+l.Axis+"]", l.Reason, stage)
	}
	if len(r.Contract) > 0 {
		p.f("\ncontract findings:\n")
		for _, c := range r.Contract {
			p.f("  - %s\n", c)
		}
	}

	if top := leadingRanks(r, 5); len(top) > 0 {
		p.f("\nranks setting the frontier at %s (steps leading, mean lag behind the frontier ms/step):\n", r.Top1)
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
	return p.err
}

func routeMark(r *stagefrontier.Report, stage string) string {
	switch {
	case stage == r.Top1:
		return "top-1"
	case slices.Contains(r.Top2, stage):
		return "top-2"
	case slices.Contains(r.Routing, stage):
		return "routed"
	}
	return ""
}

type leadRow struct {
	rank int
	host string
	lead int
	lag  float64
}

// leadingRanks returns the n ranks that most often attain the frontier at
// the top-1 stage boundary (the latest-rank tie set, §4): the ranks whose
// progress the rest of the group waits for there.
func leadingRanks(r *stagefrontier.Report, n int) []leadRow {
	s := slices.Index(r.Stages, r.Top1)
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

type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
