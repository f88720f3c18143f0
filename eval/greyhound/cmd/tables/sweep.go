package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/stats"
)

// SweepPoint is one verification setting: the confirmation window W
// (stats.Verified.After), the hold test on or off, and a wall-time floor
// (MinSpan, seconds; 0 off).
type SweepPoint struct {
	W     int
	Hold  bool
	SpanS float64
	// Alpha: the noise-aware test's α (stats.Verified.Alpha); 0 the
	// default, < 0 off (the fixed 10 % gate).
	Alpha float64
}

func (p SweepPoint) String() string {
	s := strconv.Itoa(p.W)
	if !p.Hold {
		s += " no-hold"
	}
	if p.SpanS > 0 {
		s += fmt.Sprintf(" ≥%gs", p.SpanS)
	}
	switch {
	case p.Alpha > 0:
		s += fmt.Sprintf(" α=%g", p.Alpha)
	case p.Alpha < 0:
		s += " noise-blind"
	}
	return s
}

// SweepRow is BOCD+V scored with one setting: the persistence /
// reaction-time trade-off of §4.2's verification.
type SweepRow struct {
	SweepPoint
	Cells []*Counts // computation, communication
}

// parseWs reads "5,7,10,10n,10@30,10~1e-5,10~0": W, "n" for no hold test,
// "@S" for a wall-time floor of S seconds (empty: none), "~α" for the
// noise-aware test's α (~0: off, the fixed 10 % gate).
func parseWs(s string) ([]SweepPoint, error) {
	var out []SweepPoint
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p := SweepPoint{Hold: true}
		f, alpha, hasAlpha := strings.Cut(f, "~")
		if hasAlpha {
			v, err := strconv.ParseFloat(alpha, 64)
			if err != nil || !(v >= 0 && v < 1) {
				return nil, fmt.Errorf("-sweep: %q: α after ~ must be in [0, 1) (0: off)", alpha)
			}
			p.Alpha = v
			if v == 0 {
				p.Alpha = -1
			}
		}
		ws, span, hasSpan := strings.Cut(f, "@")
		if hasSpan {
			v, err := strconv.ParseFloat(span, 64)
			if err != nil || !(v > 0) || v > 3600 {
				return nil, fmt.Errorf("-sweep: %q: the span after @ must be seconds in (0, 3600]", f)
			}
			p.SpanS = v
		}
		if t, ok := strings.CutSuffix(ws, "n"); ok {
			ws, p.Hold = t, false
		}
		w, err := strconv.Atoi(ws)
		if err != nil || w < 1 || w > 64 {
			return nil, fmt.Errorf("-sweep: %q is not a window in [1, 64]", f)
		}
		p.W = w
		out = append(out, p)
	}
	return out, nil
}

func sweep(series []sim.GreyhoundSeries, ps []SweepPoint, tol int) []SweepRow {
	var rows []SweepRow
	for _, p := range ps {
		v := stats.DefaultVerified()
		v.After, v.NoHold, v.MinSpan = p.W, !p.Hold, p.SpanS*1e3 // the series is in ms
		if p.Alpha != 0 {
			v.Alpha = max(p.Alpha, 0)
		}
		d := named{v, "bocd+v W=" + p.String()}
		r := SweepRow{SweepPoint: p}
		for _, class := range []string{sim.ClassComputation, sim.ClassCommunication} {
			c, _, _ := scoreClass(series, class, d, tol)
			r.Cells = append(r.Cells, c)
		}
		rows = append(rows, r)
	}
	return rows
}

func sweepMarkdown(rows []SweepRow) string {
	var b strings.Builder
	b.WriteString("\n## BOCD+V confirmation window W (persistence vs reaction)\n\n")
	b.WriteString("BOCD+V with the after-level the median of W iterations from the candidate (stats.Verified.After; default 10), " +
		"with the hold test (the change also ≥ 10% over the window's last half; \"no-hold\": without) and optionally a wall-time floor " +
		"(\"≥30s\": the window stretched to 30 s of training), with the noise-aware test at its default α = 1e-6 unless the row says " +
		"(\"noise-blind\": the fixed 10% gate of the first versions: a window that the series' own jitter explains is not rejected). " +
		"Per class: FPR, FNR, event recall, online reaction p50 / p90 in iterations and p50 in seconds.\n\n")
	b.WriteString("| W | T3 FPR | T3 FNR | T3 recall | T3 react p50/p90 (it.) | T3 react p50 (s) | T4 FPR | T4 FNR | T4 recall | T4 react p50/p90 (it.) | T4 react p50 (s) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", r.SweepPoint)
		for _, c := range r.Cells {
			fmt.Fprintf(&b, " %s | %s | %s | %s / %s | %s |", cell(c.FP, c.Negatives()), cell(c.FN, c.Positives()), cell(c.EventsHit, c.Events),
				ff(quantile(c.ReactIters, 0.5)), ff(quantile(c.ReactIters, 0.9)), ff(quantile(c.ReactS, 0.5)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func writeSweep(w io.Writer, rows []SweepRow) error {
	var out [][]string
	for _, r := range rows {
		for _, c := range r.Cells {
			out = append(out, []string{fmt.Sprint(r.W), fmt.Sprint(r.Hold), fmt.Sprint(r.SpanS), fmt.Sprint(r.Alpha), c.Class, fmt.Sprint(c.FP), fmt.Sprint(c.Negatives()), fmt.Sprint(c.FN), fmt.Sprint(c.Positives()),
				fmt.Sprint(c.EventsHit), fmt.Sprint(c.Events), ff(quantile(c.ReactIters, 0.5)), ff(quantile(c.ReactIters, 0.9)), ff(quantile(c.ReactS, 0.5))})
		}
	}
	return writeRows(w, []string{"w", "hold", "min_span_s", "alpha", "class", "fp", "negatives", "fn", "positives", "events_hit", "events", "react_iters_p50", "react_iters_p90", "react_s_p50"}, out)
}
