package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/stats"
)

// AblationRow is the false-positive count of each detector on negatives
// carrying one nuisance only, all but one, all, or none: which nuisance
// trips which detector (a diagnostic of the fixed corpus, not a knob). The series are the corpus's own (same per-series streams), with
// the other terms switched off.
type AblationRow struct {
	Nuisance  string
	Class     string
	Negatives int
	FP        map[string]int
}

func ablation(seed uint64, comp, comm int, dets []stats.Detector) []AblationRow {
	var rows []AblationRow
	variants := append([]string{"all", "none"}, sim.Nuisances...)
	for _, n := range sim.Nuisances {
		variants = append(variants, "all-but-"+n)
	}
	for _, v := range variants {
		c := sim.DefaultGreyhoundCorpus()
		c.Seed, c.Comp, c.CompPos, c.Comm, c.CommPos = seed, comp, 0, comm, 0
		but, isBut := strings.CutPrefix(v, "all-but-")
		switch {
		case v == "all":
		case v == "none":
			c.Disable = sim.Nuisances
		case isBut:
			c.Disable = []string{but}
		default:
			for _, n := range sim.Nuisances {
				if n != v {
					c.Disable = append(c.Disable, n)
				}
			}
		}
		series := c.Generate()
		for _, class := range []string{sim.ClassComputation, sim.ClassCommunication} {
			row := AblationRow{Nuisance: v, Class: class, FP: map[string]int{}}
			var xs [][]float64
			for _, s := range series {
				if s.Class == class {
					xs = append(xs, scored(s))
				}
			}
			row.Negatives = len(xs)
			for _, d := range dets {
				flags := parallel(len(xs), func(i int) bool { return len(d.Detect(xs[i])) > 0 })
				for _, f := range flags {
					if f {
						row.FP[d.Name()]++
					}
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func writeAblation(w io.Writer, rows []AblationRow, dets []stats.Detector) error {
	head := []string{"nuisance", "class", "negatives"}
	for _, d := range dets {
		head = append(head, "fp_"+d.Name())
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = []string{r.Nuisance, r.Class, fmt.Sprint(r.Negatives)}
		for _, d := range dets {
			out[i] = append(out[i], fmt.Sprint(r.FP[d.Name()]))
		}
	}
	return writeRows(w, head, out)
}

func ablationMarkdown(rows []AblationRow, dets []stats.Detector) string {
	s := "## Nuisance ablation (false positives on negatives: one nuisance only / all but one)\n\n" +
		"The first series of each class regenerated as negatives with every other nuisance term off (same random streams).\n\n| Nuisance | Class |"
	for _, d := range dets {
		s += " " + label(d.Name()) + " FP |"
	}
	s += "\n|---|---|" + string(slices.Repeat([]byte("---|"), len(dets))) + "\n"
	for _, r := range rows {
		s += fmt.Sprintf("| %s | %s |", r.Nuisance, r.Class)
		for _, d := range dets {
			s += fmt.Sprintf(" %d/%d |", r.FP[d.Name()], r.Negatives)
		}
		s += "\n"
	}
	return s + "\n"
}
