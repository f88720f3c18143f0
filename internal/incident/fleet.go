package incident

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
