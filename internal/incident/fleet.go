package incident

import (
	"cmp"
	"fmt"
	"slices"
)

// HostRow is one machine (a host or a link) in the fleet view: how often
// and how expensively it was the stated cause of incidents, across jobs.
type HostRow struct {
	// Target is "host:<name>" or "link:<src>-<dst>@<job>" style key; Host
	// the host name for host rows.
	Target    string   `json:"target"`
	Host      string   `json:"host,omitempty"`
	Incidents int      `json:"incidents"`
	Jobs      []string `json:"jobs"`
	// LostSeconds and LostRankSeconds sum the incidents' lost time.
	LostSeconds     float64    `json:"lost_seconds"`
	LostRankSeconds float64    `json:"lost_rank_seconds"`
	LastNS          int64      `json:"last_ns"`
	Categories      []Category `json:"categories"`
	// IncidentIDs are the incidents, newest first (at most 20).
	IncidentIDs []string `json:"incident_ids"`
}

// machineTargets are the fleet keys an incident's stated cause names:
// hosts (of stated ranks and operators, or named directly). Links are
// job-local rank pairs, so they count under the hosts of their ends when
// known.
func machineTargets(inc *Incident) map[string]string {
	out := map[string]string{}
	for _, h := range inc.Hypotheses {
		if !h.Stated {
			continue
		}
		t := h.Target
		switch {
		case t.Kind == TargetHost && t.Name != "":
			out["host:"+t.Name] = t.Name
		case t.Host != "":
			out["host:"+t.Host] = t.Host
		}
	}
	return out
}

// Fleet ranks machines by how many incidents (opened in [fromNS, toNS])
// stated them as the cause, then by lost time: the same host across jobs
// is evidence about the machine, not the job.
func Fleet(incs []Incident, fromNS, toNS int64) []HostRow {
	rows := map[string]*HostRow{}
	for i := range incs {
		inc := &incs[i]
		if inc.Opened.WallNS < fromNS || (toNS > 0 && inc.Opened.WallNS > toNS) {
			continue
		}
		for key, host := range machineTargets(inc) {
			r := rows[key]
			if r == nil {
				r = &HostRow{Target: key, Host: host}
				rows[key] = r
			}
			r.Incidents++
			if !slices.Contains(r.Jobs, inc.Job) {
				r.Jobs = append(r.Jobs, inc.Job)
			}
			r.LostSeconds += inc.Lost.Seconds
			r.LostRankSeconds += inc.Lost.RankSeconds
			r.LastNS = max(r.LastNS, inc.Opened.WallNS)
			if !slices.Contains(r.Categories, inc.Category) {
				r.Categories = append(r.Categories, inc.Category)
			}
			r.IncidentIDs = append(r.IncidentIDs, inc.ID)
		}
	}
	out := make([]HostRow, 0, len(rows))
	for _, r := range rows {
		slices.Sort(r.Jobs)
		slices.Sort(r.Categories)
		if len(r.IncidentIDs) > 20 {
			r.IncidentIDs = r.IncidentIDs[len(r.IncidentIDs)-20:]
		}
		slices.Reverse(r.IncidentIDs)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b HostRow) int {
		return cmp.Or(-cmp.Compare(a.Incidents, b.Incidents), -cmp.Compare(a.LostSeconds, b.LostSeconds), cmp.Compare(a.Target, b.Target))
	})
	return out
}

// RelatedTo notes other jobs' incidents whose stated cause named the same
// host as inc's, newest first, at most limit.
func RelatedTo(inc *Incident, others []Incident, limit int) []Related {
	mine := machineTargets(inc)
	if len(mine) == 0 || limit <= 0 {
		return nil
	}
	var out []Related
	for i := range others {
		o := &others[i]
		if o.ID == inc.ID || o.Job == inc.Job {
			continue
		}
		for key, host := range machineTargets(o) {
			if _, ok := mine[key]; !ok {
				continue
			}
			ago := ""
			if d := inc.Opened.WallNS - o.Opened.WallNS; d > 0 {
				ago = " " + DurationWords(float64(d)/1e9) + " earlier"
			} else if d < 0 {
				ago = " " + DurationWords(float64(-d)/1e9) + " later"
			}
			out = append(out, Related{Incident: o.ID, Job: o.Job, Target: key, AtNS: o.Opened.WallNS, Lost: o.Lost.Seconds,
				Text: fmt.Sprintf("host %s was also the cause in job %s%s (%s)", host, o.Job, ago, categoryWords(o.Category))})
		}
	}
	slices.SortFunc(out, func(a, b Related) int {
		return cmp.Or(-cmp.Compare(a.AtNS, b.AtNS), cmp.Compare(a.Incident, b.Incident))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}
