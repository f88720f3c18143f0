package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/render"
)

// The demo's front page is the incident of its job (issue 17 item 7):
// it fetches the job's incidents from its server through the API every
// client reads, and grades the stated cause against what it injected.

// FaultCPUHog is the SysOM-AI act's fault: busy processes on the hidden
// rank's core.
const FaultCPUHog = "cpu_hog"

// FaultCauses are, per fault family, the incident categories true of
// the injected fault — the same sets eval/incidents judges by (score.py
// COMPAT, its README "Compatibility"), so the demo's grade and the
// evaluation's agree. Every family is a host-side delay on the hidden
// rank: its compute, or, where the stage ends in a collective or barrier
// the rank enters late, communication; a delay in the data stage is data
// (or compute, as the stage vectors alone see it). The CPU hog is
// interference from other processes (OS), or compute: the rank computes
// slower. Network and uniform are wrong for all of them.
var FaultCauses = map[string][]incident.Category{
	"data":          {incident.CategoryData, incident.CategoryCompute},
	"forward_host":  {incident.CategoryCompute},
	"backward":      {incident.CategoryCompute, incident.CategoryCommunication},
	"backward_comm": {incident.CategoryCommunication, incident.CategoryCompute},
	"callback_sync": {incident.CategoryCompute, incident.CategoryCommunication},
	"callback_host": {incident.CategoryCompute, incident.CategoryCommunication},
	FaultCPUHog:     {incident.CategoryOS, incident.CategoryCompute},
}

// Injected is one fault the demo injected: what its incident is graded
// against. Rank -1 (or no delay) is a control: nothing was injected.
type Injected struct {
	Job     string  `json:"job"`
	Fault   string  `json:"fault"`
	Rank    int     `json:"rank"`
	DelayMS float64 `json:"delay_ms,omitempty"`
	// What is the fault in words ("120 ms data fault on rank 2").
	What string `json:"what"`
}

func (f Injected) control() bool { return f.Rank < 0 }

// Incident grades: the issue counts a withheld cause apart from a wrong
// one, and a fault nobody opened an incident for apart from both.
const (
	IncidentRight      = "right"       // the stated cause names the injected rank (and a true kind)
	IncidentWithheld   = "withheld"    // an incident, but no cause stated (or none at rank level)
	IncidentWrong      = "wrong"       // a stated cause that is not the injected fault
	IncidentMissed     = "missed"      // no incident opened for the fault
	IncidentQuiet      = "quiet"       // a control, and no incident: right
	IncidentFalseAlarm = "false_alarm" // a control, and an incident opened
)

// IncidentGrade is one injected fault against the incidents of its job
// (`laggard demo --json` "incident_grades", read by eval/incidents).
type IncidentGrade struct {
	Injected
	// Want are the categories true of the fault.
	Want []incident.Category `json:"want_causes"`
	Kind string              `json:"kind"`
	// Incidents are the ids of the job's incidents (want exactly one).
	Incidents []string `json:"incidents"`
	// Stated are the stated causes' targets ("rank:2", "link:1-2", "job")
	// of those incidents; StatedRanks the ranks they name, Extra those of
	// them no fault was injected on.
	Stated      []string `json:"stated"`
	StatedRanks []int    `json:"stated_ranks"`
	Extra       []int    `json:"extra,omitempty"`
	// Category is the stated kind of cause for the injected rank ("" when
	// none is stated); Cause grades it: right, wrong or unstated.
	Category incident.Category `json:"category,omitempty"`
	Cause    string            `json:"cause,omitempty"`
	// Confidence is the incident's (a wrong cause with high confidence is
	// the worst outcome the issue counts).
	Confidence incident.Confidence `json:"confidence,omitempty"`
	Why        string              `json:"why,omitempty"`
	Line       string              `json:"line"`
}

// Mark is the grade's sign.
func (g IncidentGrade) Mark() string {
	switch g.Kind {
	case IncidentRight, IncidentQuiet:
		return "✔"
	case IncidentWithheld:
		return "–"
	}
	return "✘"
}

// GradeIncidents grades every injected fault against the incidents of its
// job (incs may hold several jobs'). Two faults on one job are graded
// against the same incidents: a stated cause naming the other injected
// rank is not an extra.
func GradeIncidents(faults []Injected, incs []incident.Incident) []IncidentGrade {
	out := make([]IncidentGrade, 0, len(faults))
	for _, f := range faults {
		var mine []*incident.Incident
		for i := range incs {
			if incs[i].Job == f.Job {
				mine = append(mine, &incs[i])
			}
		}
		injected := map[int]bool{}
		for _, o := range faults {
			if o.Job == f.Job && !o.control() {
				injected[o.Rank] = true
			}
		}
		out = append(out, gradeOne(f, mine, injected))
	}
	return out
}

func gradeOne(f Injected, incs []*incident.Incident, injected map[int]bool) IncidentGrade {
	g := IncidentGrade{Injected: f, Want: FaultCauses[f.Fault], Incidents: []string{}, Stated: []string{}, StatedRanks: []int{}}
	for _, inc := range incs {
		g.Incidents = append(g.Incidents, inc.ID)
	}
	ids := strings.Join(g.Incidents, ", ")
	if f.control() {
		if len(incs) == 0 {
			g.Kind, g.Line = IncidentQuiet, "✔ quiet: no incident opened, and nothing was injected"
		} else {
			g.Kind, g.Line = IncidentFalseAlarm, fmt.Sprintf("✘ false alarm: incident(s) %s opened though nothing was injected", ids)
		}
		return g
	}
	if len(incs) == 0 {
		g.Kind, g.Line = IncidentMissed, "✘ missed: no incident opened — injected: "+f.What
		return g
	}
	// Each stated cause either names the injected rank (mine), names
	// another injected fault's rank (theirs: graded there), or names no
	// injected rank at all (spurious: a wrong cause).
	type stated struct {
		h     *incident.Hypothesis
		ranks []int
	}
	var mine, spurious []stated
	var words []string
	for _, inc := range incs {
		if g.Confidence == "" || inc.Confidence == incident.ConfidenceHigh {
			g.Confidence = inc.Confidence
		}
		for i := range inc.Hypotheses {
			h := &inc.Hypotheses[i]
			if !h.Stated && !slices.Contains(inc.Cause, h.Target.Key()) {
				continue
			}
			st := stated{h, targetRanks(h.Target, inc)}
			g.Stated = append(g.Stated, h.Target.Key())
			words = append(words, render.TargetShort(h.Target))
			g.StatedRanks = append(g.StatedRanks, st.ranks...)
			switch {
			case slices.Contains(st.ranks, f.Rank):
				mine = append(mine, st)
			case !slices.ContainsFunc(st.ranks, func(r int) bool { return injected[r] }):
				spurious = append(spurious, st)
			}
		}
	}
	g.StatedRanks = slices.Compact(slices.Sorted(slices.Values(g.StatedRanks)))
	var exact []*incident.Hypothesis
	for _, st := range mine {
		if len(slices.Compact(slices.Sorted(slices.Values(st.ranks)))) == 1 {
			exact = append(exact, st.h)
		}
	}
	for _, r := range g.StatedRanks {
		if !injected[r] {
			g.Extra = append(g.Extra, r)
		}
	}
	many := ""
	if len(incs) > 1 {
		many = fmt.Sprintf(" — %d incidents opened for it (want 1): %s", len(incs), ids)
	}
	conf := ""
	if g.Confidence != "" {
		conf = fmt.Sprintf(", %s confidence", g.Confidence)
	}
	states := "states " + strings.Join(words, "; ")
	truth := " — injected: " + f.What + many
	switch {
	case len(g.Stated) == 0:
		g.Kind, g.Why = IncidentWithheld, withheldWhy(incs)
		g.Line = fmt.Sprintf("– withheld: no cause stated (%s)%s", g.Why, truth)
	case len(spurious) > 0:
		g.Kind = IncidentWrong
		g.Line = fmt.Sprintf("✘ wrong: %s%s%s", states, conf, truth)
	case len(mine) == 0:
		// Only another injected fault is stated (or a host or group the
		// ranks cannot be told from): nothing at rank level about this
		// one, so neither right nor wrong.
		g.Kind, g.Why = IncidentWithheld, fmt.Sprintf("rank %d not stated", f.Rank)
		g.Line = fmt.Sprintf("– withheld: %s, not rank %d%s", states, f.Rank, truth)
	case len(exact) == 0:
		g.Kind = IncidentWrong
		g.Line = fmt.Sprintf("✘ wrong: %s, not the rank alone%s%s", states, conf, truth)
	default:
		var cats []incident.Category
		for _, h := range exact {
			cats = append(cats, h.Category)
		}
		g.Category, g.Cause = causeGrade(cats, g.Want)
		switch g.Cause {
		case "wrong":
			g.Kind = IncidentWrong
			g.Line = fmt.Sprintf("✘ wrong: %s, the right rank, as %s (want %s)%s%s", states, g.Category, categoryList(g.Want), conf, truth)
		case "unstated":
			g.Kind = IncidentRight
			g.Line = fmt.Sprintf("✔ right: states %s%s (the kind of cause is not stated)%s%s", render.TargetShort(exact[0].Target), conf, alsoText(words, render.TargetShort(exact[0].Target)), truth)
		default:
			g.Kind = IncidentRight
			g.Line = fmt.Sprintf("✔ right: states %s as %s%s%s%s", render.TargetShort(exact[0].Target), g.Category, conf, alsoText(words, render.TargetShort(exact[0].Target)), truth)
		}
	}
	return g
}

// causeGrade grades the stated kinds of cause of the hypotheses naming
// the injected rank: right when one is true of the fault, unstated when
// none says, wrong otherwise.
func causeGrade(cats []incident.Category, want []incident.Category) (incident.Category, string) {
	var known []incident.Category
	for _, c := range cats {
		if c != "" && c != incident.CategoryUnknown {
			known = append(known, c)
		}
	}
	for _, c := range known {
		if slices.Contains(want, c) {
			return c, "right"
		}
	}
	if len(known) == 0 {
		return "", "unstated"
	}
	return known[0], "wrong"
}

// targetRanks are the ranks a stated target names: a rank, both ends of
// a link, an operator's rank, a host's ranks as the evidence knows them;
// none for the whole job or a group.
func targetRanks(t incident.Target, inc *incident.Incident) []int {
	switch t.Kind {
	case incident.TargetRank:
		return []int{t.Rank}
	case incident.TargetLink:
		return []int{t.Src, t.Dst}
	case incident.TargetOperator:
		if t.Rank >= 0 {
			return []int{t.Rank}
		}
	case incident.TargetHost:
		var rs []int
		for _, e := range inc.Evidence {
			for _, et := range e.Targets {
				if et.Kind == incident.TargetRank && et.Host == t.Name && t.Name != "" {
					rs = append(rs, et.Rank)
				}
			}
		}
		return rs
	}
	return nil
}

// alsoText names the other stated causes (another injected fault's).
func alsoText(words []string, mine string) string {
	var others []string
	for _, w := range words {
		if w != mine && !slices.Contains(others, w) {
			others = append(others, w)
		}
	}
	if len(others) == 0 {
		return ""
	}
	return "; it also states " + strings.Join(others, "; ")
}

func withheldWhy(incs []*incident.Incident) string {
	n := 0
	for _, inc := range incs {
		n += len(inc.Hypotheses)
	}
	switch n {
	case 0:
		return "no engine named a rank"
	case 1:
		return "1 candidate, not enough evidence"
	}
	return fmt.Sprintf("%d competing candidates", n)
}

func categoryList(cs []incident.Category) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return strings.Join(parts, " or ")
}

// ErrIncidentsOff is the answer of a server whose incident layer is off
// (503), or that has no incidents API (404 on the list).
var ErrIncidentsOff = errors.New("the incident layer is off on this server")

// FetchIncidents reads a job's incidents, each in full (with its
// evidence): GET /api/v1/incidents?job=J, then /api/v1/incidents/{id}.
func FetchIncidents(ctx context.Context, base, job string) ([]incident.Incident, error) {
	list, err := getJSON[struct {
		Incidents []incident.Incident `json:"incidents"`
	}](ctx, base+"/api/v1/incidents?job="+url.QueryEscape(job), "the incidents")
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusServiceUnavailable {
		return nil, fmt.Errorf("%w (GET /api/v1/incidents answered %d)", ErrIncidentsOff, se.Code)
	}
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		// The demo's job exists: no such route.
		return nil, fmt.Errorf("%w (GET /api/v1/incidents answered %d: this laggard has no incidents API)", ErrIncidentsOff, se.Code)
	}
	if err != nil {
		return nil, err
	}
	out := make([]incident.Incident, 0, len(list.Incidents))
	for _, li := range list.Incidents {
		inc, err := getJSON[incident.Incident](ctx, base+"/api/v1/incidents/"+url.PathEscape(li.ID), "incident "+li.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, *inc)
	}
	return out, nil
}

// AwaitIncidents fetches a job's incidents once they have settled: the
// same ids, states, stated causes and newest evidence on two reads a
// poll apart (the server fuses on its own loop), bounded by wait. What it
// read last is returned at the deadline, an empty list included; a
// server with the layer off answers at once (ErrIncidentsOff).
func AwaitIncidents(ctx context.Context, base, job string, wait, poll time.Duration) ([]incident.Incident, error) {
	deadline := time.Now().Add(wait)
	var last []incident.Incident
	var lastErr error
	prev := ""
	for {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		incs, err := FetchIncidents(fctx, base, job)
		cancel()
		if errors.Is(err, ErrIncidentsOff) {
			return nil, err
		}
		if err == nil {
			last, lastErr = incs, nil
			if fp := fingerprint(incs); len(incs) > 0 && fp == prev {
				return incs, nil
			} else {
				prev = fp
			}
		} else if last == nil {
			lastErr = err
		}
		if !time.Now().Add(poll).Before(deadline) {
			return last, lastErr
		}
		select {
		case <-ctx.Done():
			return last, lastErr
		case <-time.After(poll):
		}
	}
}

// fingerprint is what must not change between two reads for the
// incidents to have settled.
func fingerprint(incs []incident.Incident) string {
	var b strings.Builder
	for _, inc := range incs {
		asked := 0
		for _, w := range inc.Waiting {
			if w.Asked {
				asked++
			}
		}
		fmt.Fprintf(&b, "%s/%s/%d/%d/%v/%s/%d/%d/%d;", inc.ID, inc.State, inc.Updated.WallNS, inc.Updated.Step, inc.Cause, inc.Confidence, len(inc.Evidence), len(inc.Waiting), asked)
	}
	return b.String()
}
