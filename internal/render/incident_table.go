package render

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

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
			parts = append(parts, incident.TargetWords(h.Target)+knownCategory(h.Category, ": ", ""))
		}
		return strings.Join(parts, "; ")
	}
	switch n := len(inc.Hypotheses); n {
	case 0:
		return "not stated yet"
	case 1:
		return "not stated (1 candidate: " + TargetShort(inc.Hypotheses[0].Target) + ")"
	default:
		var ts []string
		for i := range inc.Hypotheses[:min(n, 3)] {
			ts = append(ts, TargetShort(inc.Hypotheses[i].Target))
		}
		if n > 3 {
			ts = append(ts, "…")
		}
		return fmt.Sprintf("not stated (%d competing: %s)", n, strings.Join(ts, ", "))
	}
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

func lostShort(l incident.Lost, _ int) string {
	if l.Seconds <= 0 {
		return "—"
	}
	s := incident.DurationWords(l.Seconds)
	if l.RankSeconds > 0 {
		s += ", " + rankTimeText(l.RankSeconds)
	}
	if l.Partial {
		s = "≥ " + s
	}
	return s
}
