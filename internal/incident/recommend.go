package incident

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// engineWords names an engine for people.
func engineWords(e Engine) string {
	switch e {
	case EngineStageFrontier:
		return "step-stage analysis"
	case EngineGreyhound:
		return "collective analysis"
	case EngineSysom:
		return "CPU/OS profiling"
	case EngineKair:
		return "operator tracing"
	}
	return string(e)
}

func engineList(es []Engine) string {
	w := make([]string, len(es))
	for i, e := range es {
		w[i] = engineWords(e)
	}
	switch len(w) {
	case 0:
		return "no engine"
	case 1:
		return w[0]
	}
	return strings.Join(w[:len(w)-1], ", ") + " and " + w[len(w)-1]
}

// verb picks the singular or plural form.
func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// TargetWords names a target for people (the CLI, the UI and headlines
// share it).
func TargetWords(t Target) string {
	switch t.Kind {
	case TargetRank:
		if t.Host != "" {
			return fmt.Sprintf("rank %d on %s", t.Rank, t.Host)
		}
		return fmt.Sprintf("rank %d", t.Rank)
	case TargetLink:
		return fmt.Sprintf("the link rank %d → rank %d", t.Src, t.Dst)
	case TargetHost:
		return "host " + t.Name
	case TargetGroup:
		return "group " + t.Name
	case TargetOperator:
		if t.Rank < 0 {
			return "operator " + t.Name + " on every rank"
		}
		return fmt.Sprintf("operator %s on rank %d", t.Name, t.Rank)
	case TargetJob:
		return "every rank alike"
	}
	return strings.TrimSpace(string(t.Kind) + " " + t.Name)
}

func ranksWords(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	w := make([]string, len(rs))
	for i, r := range rs {
		w[i] = strconv.Itoa(r)
	}
	return "ranks " + strings.Join(w, ", ")
}

// categoryWords says what kind of cause it is.
func categoryWords(c Category) string {
	switch c {
	case CategoryCompute:
		return "slow computation"
	case CategoryCommunication:
		return "slow communication"
	case CategoryData:
		return "slow data loading"
	case CategoryOS:
		return "interference from the OS or another process"
	case CategoryNetwork:
		return "a network problem"
	case CategoryUniform:
		return "a slowdown of every rank alike"
	}
	return "the kind of cause is not known yet"
}

// DurationWords renders seconds for people ("4 min 12 s", "2 h 5 min").
func DurationWords(s float64) string {
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

// headline is the incident in one plain sentence.
func headline(inc *Incident) string {
	var b strings.Builder
	slow := ""
	if inc.HealthyMS > 0 && inc.SlowMS > 0 {
		pct := 100 * (inc.SlowMS/inc.HealthyMS - 1)
		slow = fmt.Sprintf(" (step time %.0f → %.0f ms, %+.0f%%)", inc.HealthyMS, inc.SlowMS, pct)
	}
	var stated []Hypothesis
	for _, h := range inc.Hypotheses {
		if h.Stated {
			stated = append(stated, h)
		}
	}
	switch {
	case len(stated) == 1 && stated[0].Target.Kind == TargetJob:
		fmt.Fprintf(&b, "Every rank slowed alike%s: %s", slow, categoryWords(stated[0].Category))
	case len(stated) == 1:
		fmt.Fprintf(&b, "%s is slowing the job%s: %s", capitalize(TargetWords(stated[0].Target)), slow, categoryWords(stated[0].Category))
	case len(stated) > 1:
		w := make([]string, len(stated))
		for i, h := range stated {
			w[i] = TargetWords(h.Target) + " (" + categoryWords(h.Category) + ")"
		}
		fmt.Fprintf(&b, "Two or more causes slow the job%s: %s", slow, strings.Join(w, "; "))
	case len(inc.Hypotheses) > 0:
		fmt.Fprintf(&b, "The job slowed%s; suspected: %s, not confirmed", slow, TargetWords(inc.Hypotheses[0].Target))
	default:
		fmt.Fprintf(&b, "The job slowed%s; no rank, link or operator is localized yet", slow)
	}
	switch inc.State {
	case StateRecovering:
		b.WriteString("; it has recovered, waiting for the hold-down")
	case StateResolved:
		b.WriteString("; resolved")
	}
	if inc.Lost.Seconds > 0 && !math.IsInf(inc.Lost.Seconds, 0) {
		fmt.Fprintf(&b, " — %s lost", DurationWords(inc.Lost.Seconds))
		if inc.State != StateResolved {
			b.WriteString(" so far")
		}
	}
	b.WriteString(".")
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// recommend says what to do, per stated (else leading) hypothesis, by its
// category and the deepest layer of its chain.
func recommend(inc *Incident) []Recommendation {
	var out []Recommendation
	add := func(h *Hypothesis, text string) { out = append(out, Recommendation{Text: text, For: h.Target.Key()}) }
	hs := inc.Hypotheses
	stated := false
	for i := range hs {
		h := &hs[i]
		if !h.Stated {
			continue
		}
		stated = true
		where := TargetWords(h.Target)
		switch h.Category {
		case CategoryCompute:
			add(h, fmt.Sprintf("Check the GPU of %s: clocks, temperature, ECC/XID errors (nvidia-smi -q); if it stays slow, drain that node and restart the job without it.", where))
		case CategoryOS:
			add(h, fmt.Sprintf("Find what else runs on %s (the CPU/OS profile names it) and move it off the training cores, or pin the job's threads (taskset/cgroups).", where))
		case CategoryData:
			add(h, fmt.Sprintf("Check the input pipeline of %s: storage latency, data-loader workers, prefetch depth.", where))
		case CategoryNetwork, CategoryCommunication:
			if h.Target.Kind == TargetLink {
				add(h, fmt.Sprintf("Check %s: NIC counters, cable/port errors, switch congestion; move the job off that link if it persists.", where))
			} else {
				add(h, fmt.Sprintf("Check the NIC and network path of %s (retransmits, link speed, PFC pauses).", where))
			}
		case CategoryUniform:
			add(h, "Compare with a healthy earlier window of the same job: a code, data or configuration change, or a shared resource (storage, network) slowing every rank.")
		default:
			add(h, fmt.Sprintf("Look at %s first: it is where the job waits.", where))
		}
	}
	if !stated {
		out = append(out, Recommendation{Text: "No cause is confirmed yet: let laggard finish gathering evidence (see \"waiting for\"), or run a validation (laggard greyhound -validate)."})
	}
	if len(inc.Contradictions) > 0 {
		out = append(out, Recommendation{Text: "Engines disagree: read the competing hypotheses before acting."})
	}
	return out
}
