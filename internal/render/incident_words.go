package render

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
)

// Words and numbers of the incident text: durations, times, targets,
// kinds of cause, wrapping.

// fill breaks words into lines of at most incWidth columns; the first
// line starts at column col (after what is already printed), the others
// after indent. A word longer than a line (a URL) is never broken.
func fill(words []string, col int, indent string) string {
	return fillTo(words, col, incWidth, indent)
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

func sameDay(a, b time.Time) bool {
	return a.Year() == b.Year() && a.YearDay() == b.YearDay()
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
	s := incident.DurationWords(l.Seconds) + " of the job"
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// TargetShort is a target in a few words (a table cell, a grade line).
func TargetShort(t incident.Target) string {
	switch t.Kind {
	case incident.TargetRank:
		return fmt.Sprintf("rank %d", t.Rank)
	case incident.TargetLink:
		return fmt.Sprintf("link %d→%d", t.Src, t.Dst)
	case incident.TargetOperator:
		if t.Rank < 0 {
			return clipText(t.Name, 24) + " on every rank"
		}
		return fmt.Sprintf("%s on rank %d", clipText(t.Name, 24), t.Rank)
	}
	return incident.TargetWords(t)
}

func targetsWords(ts []incident.Target) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = TargetShort(t)
	}
	return strings.Join(parts, ", ")
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
	// Reasons come as sentences; here they sit inside parentheses.
	if r := strings.TrimRight(strings.TrimSpace(reason), "."); r != "" {
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
