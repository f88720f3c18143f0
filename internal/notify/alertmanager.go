package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/laggard-dev/laggard/internal/incident"
)

// AlertName is every incident alert's alertname label.
const AlertName = "LaggardIncident"

// Alert labels and annotations (docs/format/notify.md).
const (
	severityWarning  = "warning"
	severityCritical = "critical"
	// causeUndetermined is the cause label while no cause is stated.
	causeUndetermined = "undetermined"
	// maxLabelBytes bounds one label value (a scope of a thousand
	// ranks is summarized, not listed).
	maxLabelBytes = 200
	// maxAnnotationBytes bounds the description.
	maxAnnotationBytes = 4096
	// amBatch is the most alerts one post carries (as Prometheus does).
	amBatch = 64
)

// alert is one Alertmanager v2 postable alert. Once queued it is never
// changed (the worker encodes it while Notify builds the next).
type alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
	// ended: EndsAt is set (resolved or superseded); else the worker
	// sets EndsAt to the post time + 4 × Resend.
	ended bool
}

// tracked is an unresolved incident's firing alert, re-sent every Resend.
type tracked struct {
	a       *alert
	changed time.Time
}

// amTarget posts to one Alertmanager.
type amTarget struct {
	n      *Notifier
	url    string
	mu     sync.Mutex
	firing map[string]*tracked // by incident id
}

func (t *amTarget) batchSize() int { return amBatch }

// items is the alert for c. Alertmanager identifies an alert by its
// labels, so when a label changes (state, cause, scope, severity) the
// alert under the old labels is ended and one under the new starts; a
// resolution ends the alert as last fired with the resolution time.
func (t *amTarget) items(c Change, now time.Time) []item {
	inc := &c.Incident
	a := t.n.alertFor(c, now)
	t.mu.Lock()
	defer t.mu.Unlock()
	prev := t.firing[inc.ID]
	var out []*alert
	if c.To == incident.StateResolved {
		delete(t.firing, inc.ID)
		end := a
		if prev != nil {
			end = &alert{Labels: prev.a.Labels, StartsAt: prev.a.StartsAt, GeneratorURL: a.GeneratorURL}
		} else if c.From == incident.StateOpen || c.From == incident.StateRecovering {
			// Not tracked (a restart since it fired): the labels it was
			// last fired with had the state it leaves.
			end.Labels = maps.Clone(a.Labels)
			end.Labels["state"] = string(c.From)
		}
		end.Annotations = a.Annotations
		end.EndsAt, end.ended = resolvedAt(inc, end.StartsAt, now), true
		out = append(out, end)
	} else {
		if prev != nil && prev.a.Labels["severity"] == severityCritical && a.Labels["severity"] != severityCritical {
			a.Labels["severity"] = severityCritical // severity never goes down
		}
		if prev != nil && !maps.Equal(prev.a.Labels, a.Labels) {
			out = append(out, &alert{Labels: prev.a.Labels, Annotations: prev.a.Annotations, StartsAt: prev.a.StartsAt,
				GeneratorURL: prev.a.GeneratorURL, EndsAt: later(now, prev.a.StartsAt), ended: true})
		}
		t.firing[inc.ID] = &tracked{a: a, changed: now}
		out = append(out, a)
		t.evict()
	}
	items := make([]item, len(out))
	for i, a := range out {
		b, _ := json.Marshal(a)
		items[i] = item{incident: inc.ID, alert: a, size: int64(len(b))}
	}
	return items
}

// evict drops the least recently changed incidents beyond MaxTracked from
// re-sends (their alerts expire in Alertmanager after 4 × Resend).
func (t *amTarget) evict() {
	for len(t.firing) > t.n.cfg.MaxTracked {
		var oldest string
		var at time.Time
		for id, tr := range t.firing {
			if oldest == "" || tr.changed.Before(at) {
				oldest, at = id, tr.changed
			}
		}
		delete(t.firing, oldest)
		t.n.log.Warn("too many unresolved incidents to keep re-sending their alerts; the least recently changed one will expire in Alertmanager",
			"incident", oldest, "max", t.n.cfg.MaxTracked)
	}
}

// resend is every firing alert, oldest incident first.
func (t *amTarget) resend(time.Time) []item {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]item, 0, len(t.firing))
	for id, tr := range t.firing {
		out = append(out, item{incident: id, alert: tr.a})
	}
	slices.SortFunc(out, func(a, b item) int { return a.alert.StartsAt.Compare(b.alert.StartsAt) })
	return out
}

func (t *amTarget) post(ctx context.Context, batch []item) (time.Duration, bool, error) {
	now := time.Now()
	valid := 4 * t.n.cfg.Resend
	alerts := make([]alert, len(batch))
	for i, it := range batch {
		alerts[i] = *it.alert
		if !alerts[i].ended {
			alerts[i].EndsAt = now.Add(valid)
		}
		alerts[i].StartsAt, alerts[i].EndsAt = alerts[i].StartsAt.UTC(), alerts[i].EndsAt.UTC()
	}
	body, err := json.Marshal(alerts)
	if err != nil {
		return 0, false, fmt.Errorf("encoding alerts: %w", err)
	}
	return t.n.send(ctx, t.url, body, nil)
}

// resolvedAt is the alert's end: the incident's resolution, never
// before its start nor after now (Alertmanager resolves an alert whose
// end has passed).
func resolvedAt(inc *incident.Incident, start, now time.Time) time.Time {
	end := now
	if inc.Resolved != nil && inc.Resolved.WallNS > 0 {
		end = earlier(time.Unix(0, inc.Resolved.WallNS), now)
	}
	return later(end, start)
}

// alertFor builds c's alert: labels for routing, annotations for people.
func (n *Notifier) alertFor(c Change, now time.Time) *alert {
	inc := &c.Incident
	start := now
	if inc.Opened.WallNS > 0 {
		start = earlier(time.Unix(0, inc.Opened.WallNS), now)
	}
	state := c.To
	if state == "" {
		state = inc.State
	}
	link := IncidentURL(n.cfg.ExternalURL, inc.ID)
	a := &alert{
		Labels: map[string]string{
			"alertname": AlertName,
			"incident":  clipLabel(inc.ID),
			"job":       clipLabel(inc.Job),
			"state":     string(state),
			"scope":     scopeLabel(inc.Scope),
			"cause":     causeLabel(inc),
			"category":  string(orUnknown(inc.Category)),
			"severity":  n.severity(inc),
		},
		Annotations: map[string]string{
			"summary":      summary(c),
			"description":  clip(description(inc), maxAnnotationBytes),
			"state":        string(state),
			"confidence":   string(inc.Confidence),
			"lost_seconds": strconv.FormatFloat(inc.Lost.Seconds, 'f', 1, 64),
		},
		StartsAt:     start,
		GeneratorURL: link,
	}
	if link != "" {
		a.Annotations["incident_url"] = link
	}
	return a
}

func orUnknown(c incident.Category) incident.Category {
	if c == "" {
		return incident.CategoryUnknown
	}
	return c
}

// severity is critical when the job runs CriticalSlowdown or more above
// its healthy step time.
func (n *Notifier) severity(inc *incident.Incident) string {
	if inc.HealthyMS > 0 && inc.SlowMS >= inc.HealthyMS*(1+n.cfg.CriticalSlowdown) {
		return severityCritical
	}
	return severityWarning
}

// summary is the incident's plain-language headline.
func summary(c Change) string {
	inc := &c.Incident
	h := inc.Headline
	if h == "" {
		h = "job " + inc.Job + " is slower than it was"
	}
	switch c.To {
	case incident.StateResolved:
		return "Resolved: " + h
	case incident.StateRecovering:
		return "Recovering: " + h
	}
	return h
}

// description says what, since when, what it cost, why and what next.
func description(inc *incident.Incident) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s", inc.Job)
	if inc.Opened.WallNS > 0 {
		fmt.Fprintf(&b, " slowed at %s (step %d)", time.Unix(0, inc.Opened.WallNS).UTC().Format(time.RFC3339), inc.Opened.Step)
	}
	if inc.HealthyMS > 0 && inc.SlowMS > 0 {
		fmt.Fprintf(&b, ": step time %.0f ms, healthy %.0f ms (+%.0f %%)", inc.SlowMS, inc.HealthyMS, 100*(inc.SlowMS/inc.HealthyMS-1))
	}
	b.WriteString(".\n")
	if inc.Lost.Seconds > 0 {
		fmt.Fprintf(&b, "Time lost: %.1f s (%.0f rank-seconds)", inc.Lost.Seconds, inc.Lost.RankSeconds)
		if inc.Lost.Partial {
			b.WriteString(", at least")
		}
		b.WriteString(".\n")
	}
	if len(inc.Cause) > 0 {
		fmt.Fprintf(&b, "Cause (%s confidence): %s.\n", inc.Confidence, strings.Join(inc.Cause, ", "))
	} else {
		b.WriteString("Cause: not yet stated (the engines' evidence does not settle it).\n")
	}
	if len(inc.Recommendations) > 0 {
		fmt.Fprintf(&b, "Next: %s\n", inc.Recommendations[0].Text)
	}
	if len(inc.Waiting) > 0 {
		fmt.Fprintf(&b, "Waiting for: %s\n", inc.Waiting[0].Reason)
	}
	return strings.TrimSpace(b.String())
}

// causeLabel is the stated cause ("rank:3,link:2-3") or "undetermined".
func causeLabel(inc *incident.Incident) string {
	if len(inc.Cause) == 0 {
		return causeUndetermined
	}
	return clipList(inc.Cause)
}

// scopeLabel summarizes the scope: "job" for the whole job, else
// "ranks:3,5 hosts:h7 links:2-3 …".
func scopeLabel(s incident.Scope) string {
	if s.Whole {
		return "job"
	}
	var parts []string
	add := func(kind string, vs []string) {
		if len(vs) > 0 {
			parts = append(parts, kind+":"+strings.Join(vs, ","))
		}
	}
	ranks := make([]string, len(s.Ranks))
	for i, r := range s.Ranks {
		ranks[i] = strconv.Itoa(r)
	}
	links := make([]string, len(s.Links))
	for i, l := range s.Links {
		links[i] = strconv.Itoa(l.Src) + "-" + strconv.Itoa(l.Dst)
	}
	add("ranks", ranks)
	add("hosts", s.Hosts)
	add("links", links)
	add("groups", s.Groups)
	add("operators", s.Operators)
	if len(parts) == 0 {
		return "job"
	}
	return clipLabel(strings.Join(parts, " "))
}

// clipList joins vs, summarizing the tail that does not fit.
func clipList(vs []string) string {
	out := ""
	for i, v := range vs {
		next := out
		if i > 0 {
			next += ","
		}
		next += v
		if len(next) > maxLabelBytes-16 {
			if i == 0 {
				return clip(v, maxLabelBytes-16) + more(len(vs)-1)
			}
			return out + more(len(vs)-i)
		}
		out = next
	}
	return out
}

func more(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(",+%d more", n)
}

func clipLabel(s string) string { return clip(s, maxLabelBytes) }

// clip shortens s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
