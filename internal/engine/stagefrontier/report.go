package stagefrontier

// Label names (StageFrontier App. B Table 12).
const (
	LabelFrontierAccounting      = "frontier_accounting"
	LabelLikelySyncWait          = "likely_sync_wait"
	LabelSyncWaitDependent       = "sync_wait_dependent"
	LabelDirectExposure          = "direct_exposure"
	LabelForwardDeviceSupported  = "forward_device_supported"
	LabelForwardSpillover        = "forward_spillover_suspected"
	LabelForwardHostOverhead     = "forward_host_overhead_suspected"
	LabelForwardEventScopeLimits = "forward_event_scope_limited"
	LabelCoCritical              = "co_critical"
	LabelGradAccumAmbiguous      = "gradient_accumulation_ambiguous"
	LabelRoleAwareNeeded         = "role_aware_needed"
	LabelTelemetryLimited        = "telemetry_limited"
)

// Label is one emitted evidence label with the reason it fired.
type Label struct {
	Name   string `json:"name"`
	Axis   string `json:"axis"`
	Reason string `json:"reason"`
	// Stage is the stage the label speaks about, when it speaks about one.
	Stage string `json:"stage,omitempty"`
}

// Report is the window report: accounting, shares, routing set, labels and
// per-rank lag. All durations are ms. Slices indexed by stage follow
// Stages; slices indexed by rank follow Ranks.
type Report struct {
	JobID     string   `json:"job_id"`
	FirstStep int64    `json:"first_step"`
	LastStep  int64    `json:"last_step"`
	NumSteps  int      `json:"num_steps"`
	NumRanks  int      `json:"num_ranks"`
	Stages    []string `json:"stages"`
	OrderHash string   `json:"order_hash"`
	Config    Config   `json:"config"`

	// ExposedMS is Σ_t F[t,S], the window's exposed makespan (Theorem 1).
	ExposedMS float64 `json:"exposed_ms"`
	// AdvanceMS[s] = Σ_t a[t,s] (raw advances, always present).
	AdvanceMS []float64 `json:"advance_ms"`
	// Share[s] = AdvanceMS[s]/ExposedMS (§3 eq.2); nil below the
	// denominator floor.
	Share []float64 `json:"share,omitempty"`
	// RawOnly is true when the denominator fell below the floor.
	RawOnly bool `json:"raw_only"`
	// TelescopeErrMS is |Σ_s AdvanceMS − ExposedMS| (should be round-off).
	TelescopeErrMS float64 `json:"telescope_err_ms"`

	// Routing is the candidate set: the smallest leading-share prefix whose
	// cumulative share reaches τ, as stage names, leader first (§4).
	Routing []string `json:"routing"`
	Top1    string   `json:"top1"`
	Top2    []string `json:"top2"`
	// CoCriticalStages is the ambiguity set (App. C), kept apart from
	// Routing.
	CoCriticalStages []string `json:"co_critical_stages"`

	// GainMS[baseline][s] is the clipped direct-exposure gain G_s (§4
	// eq.4) for each baseline ("rank_median", "cohort_median").
	GainMS map[string][]float64 `json:"gain_ms"`

	// Per-rank evidence.
	Ranks []RankStat `json:"ranks"`
	// LeaderRank is the rank that most often leads the frontier at the
	// routed stage's boundary among confident unique leaders; -1 if none.
	LeaderRank       int     `json:"leader_rank"`
	LeaderSwitches   int     `json:"leader_switches"`
	LeaderSwitchRate float64 `json:"leader_switch_rate"`

	// Per-step series for plots.
	StepSeries []StepPoint `json:"step_series"`

	// Quality.
	Quality Quality `json:"quality"`
	Labels  []Label `json:"labels"`
	// Contract lists contract-check findings (App. A Table 11).
	Contract []string `json:"contract,omitempty"`

	// Baselines are the five comparison summaries of §6.2.
	Baselines []BaselineSummary `json:"baselines"`
}

// RankStat is the per-rank lag/slack evidence over the window.
type RankStat struct {
	Rank int    `json:"rank"`
	Host string `json:"host,omitempty"`
	// LagMS[s] = Σ_t (F[t,s] − P[t,r,s]): how far behind the frontier the
	// rank is at each boundary (the slack of §3 eq.3), summed over steps.
	LagMS []float64 `json:"lag_ms"`
	// DeltaLagMS[s] = LagMS[s] − LagMS[s−1]: where the lag grows or shrinks.
	DeltaLagMS []float64 `json:"delta_lag_ms"`
	// LeadCount[s] counts steps where the rank is in the latest-rank tie set
	// (attains F[t,s]).
	LeadCount []int `json:"lead_count"`
	// MeanStageMS[s] is the rank's mean raw stage duration.
	MeanStageMS []float64 `json:"mean_stage_ms"`
	TotalMS     float64   `json:"total_ms"`
}

// StepPoint is one step of the step-time series.
type StepPoint struct {
	Step int64 `json:"step"`
	// ExposedMS = F[t,S].
	ExposedMS float64 `json:"exposed_ms"`
	// AdvanceMS[s] = a[t,s].
	AdvanceMS []float64 `json:"advance_ms"`
	// LeaderRank leads the final boundary; TieSize is its tie-set size.
	LeaderRank int `json:"leader_rank"`
	TieSize    int `json:"tie_size"`
	// GapMS is max-minus-second-max of the final prefix.
	GapMS float64 `json:"gap_ms"`
}

// Quality summarises telemetry health for the window.
type Quality struct {
	MissingRanks    []int   `json:"missing_ranks,omitempty"`
	MissingCells    int     `json:"missing_cells"`
	MaxClosureShare float64 `json:"max_closure_share"`
	MaxOverlapShare float64 `json:"max_overlap_share"`
	Dropped         int64   `json:"dropped"`
	Nested          int64   `json:"nested"`
	EventSamples    int     `json:"event_samples"`
	EventReadyRatio float64 `json:"event_ready_ratio"`
	RoleGroups      int     `json:"role_groups"`
}

// BaselineSummary is one comparison summary's stage ranking on the same
// window (§6.2): per_stage_max, per_stage_avg, rank_spread,
// slowest_rank_breakdown, rank0_local.
type BaselineSummary struct {
	Method  string    `json:"method"`
	Score   []float64 `json:"score"`
	Share   []float64 `json:"share"`
	Routing []string  `json:"routing"`
	Top1    string    `json:"top1"`
	Top2    []string  `json:"top2"`
	// TotalMS is what the summary claims the step costs (e.g. Σ_s max_r d
	// for per-stage max), for the Propositions 1–2 comparison.
	TotalMS float64 `json:"total_ms"`
}
