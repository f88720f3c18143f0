package stagefrontier

import "github.com/laggard-dev/laggard/internal/signal/stagevec"

// Label names (StageFrontier App. B Table 12).
const (
	LabelFrontierAccounting      LabelName = "frontier_accounting"
	LabelLikelySyncWait          LabelName = "likely_sync_wait"
	LabelSyncWaitDependent       LabelName = "sync_wait_dependent"
	LabelDirectExposure          LabelName = "direct_exposure"
	LabelForwardDeviceSupported  LabelName = "forward_device_supported"
	LabelForwardSpillover        LabelName = "forward_spillover_suspected"
	LabelForwardHostOverhead     LabelName = "forward_host_overhead_suspected"
	LabelForwardEventScopeLimits LabelName = "forward_event_scope_limited"
	LabelCoCritical              LabelName = "co_critical"
	LabelGradAccumAmbiguous      LabelName = "gradient_accumulation_ambiguous"
	LabelRoleAwareNeeded         LabelName = "role_aware_needed"
	LabelTelemetryLimited        LabelName = "telemetry_limited"
)

// LabelName names an App. B label; Axis names its evidence axis.
type (
	LabelName string
	Axis      string
)

// Label is one emitted evidence label with the reason it fired.
type Label struct {
	Name   LabelName `json:"name"`
	Axis   Axis      `json:"axis"`
	Reason string    `json:"reason"`
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

	// Headline is the plain-language diagnosis: the stage to look at, the
	// straggler rank when the evidence singles one out, or why none is
	// named (Diagnose).
	Headline Headline `json:"headline"`

	// Per-rank evidence.
	Ranks []RankStat `json:"ranks"`
	// Evidence is the per-stage localisation evidence at each schema
	// stage's boundary: the exposed tail and the leader gates.
	Evidence []StageEvidence `json:"stage_evidence"`
	// LeaderRank is the straggler rank the headline names, or -1 when the
	// evidence does not single one out (Headline.Withheld says why).
	LeaderRank int `json:"leader_rank"`
	// LeaderSwitches counts switches between confident unique leaders at
	// the top-1 stage's boundary (App. C leader-switch tolerance).
	LeaderSwitches   int     `json:"leader_switches"`
	LeaderSwitchRate float64 `json:"leader_switch_rate"`

	// Per-step series for plots.
	StepSeries []StepPoint `json:"step_series"`

	// Quality.
	Quality Quality `json:"quality"`
	Labels  []Label `json:"labels"`
	// Contract lists contract-check findings (App. A Table 11).
	Contract []stagevec.Finding `json:"contract,omitempty"`

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
	// Steps is how many of the window's steps the rank reported.
	Steps int `json:"steps"`
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

// StageEvidence is the localisation evidence at one schema stage's
// boundary (the last accumulation microstep's, with accumulation).
type StageEvidence struct {
	Stage string `json:"stage"`
	// TypicalLagMS: at least half of the ranks trail the frontier at this
	// boundary by at least this much per step (the upper median over ranks
	// of each rank's mean slack, §3 eq.3). Large when one or a few ranks
	// run ahead of the rest; near zero when the ranks leave the stage
	// together.
	TypicalLagMS float64 `json:"typical_lag_ms"`
	// TailMS is TypicalLagMS minus the previous boundary's: the exposed
	// tail created inside this stage (positive), or absorbed in it
	// (negative: the trailing ranks waited here and caught up).
	TailMS float64 `json:"tail_ms"`
	// TypicalStageMS is the median over ranks of the rank's own mean
	// duration of the stage (wait included).
	TypicalStageMS float64 `json:"typical_stage_ms"`
	// AdvanceMS is the mean frontier advance per step of the stage.
	AdvanceMS float64        `json:"advance_ms"`
	Leader    LeaderEvidence `json:"leader"`
}

// Withheld says why no straggler rank is named.
type Withheld string

// Reasons a rank is not named (the honest headline).
const (
	WithheldNone       Withheld = ""
	WithheldSingleRank Withheld = "single_rank"
	WithheldNoExposure Withheld = "no_exposure"
	WithheldFewSteps   Withheld = "few_steps"
	// WithheldAbsorbed: every rank leaves the stage together, so its delay
	// is absorbed inside it (a collective or barrier) or shared by all
	// ranks; stage vectors cannot tell which rank, if any, caused it.
	WithheldAbsorbed Withheld = "absorbed_in_stage"
	// WithheldUniform: against the reference, every rank's own time in the
	// stage rose about as much as the frontier did.
	WithheldUniform Withheld = "uniform_slowdown"
	// WithheldNotCause: a rank leads the stage, but the tail it creates
	// there explains too little of the stage's rise against the reference
	// (Config.ExplainShare): the slowdown is elsewhere or shared.
	WithheldNotCause Withheld = "does_not_explain_rise"
	WithheldTie      Withheld = "tie"
	WithheldUnstable Withheld = "unstable_leader"
	WithheldSpread   Withheld = "no_consistent_leader"
	// WithheldRoleGroups: the job has several role groups; each group is
	// diagnosed separately and no global rank is named.
	WithheldRoleGroups Withheld = "role_groups"
)

// LeaderEvidence is the leader gate of one boundary: which rank leads the
// frontier there on the steps where the boundary exposes time, by how
// much, and whether that holds over the window.
type LeaderEvidence struct {
	// Rank is the named straggler at this boundary, -1 when withheld.
	Rank int `json:"rank"`
	// Candidate is the rank with the most confident leads, -1 if none.
	Candidate int    `json:"candidate"`
	Host      string `json:"host,omitempty"`
	// MaterialSteps are the steps whose advance at this stage clears the
	// leader gap tolerances; ConfidentSteps those of them with a confident
	// unique leader (App. C).
	MaterialSteps  int `json:"material_steps"`
	ConfidentSteps int `json:"confident_steps"`
	// Leads and RunnerUpLeads are the confident leads of the candidate and
	// of the runner-up rank.
	Leads         int `json:"leads"`
	RunnerUp      int `json:"runner_up"`
	RunnerUpLeads int `json:"runner_up_leads"`
	// Fraction = Leads/MaterialSteps; Margin = (Leads−RunnerUpLeads)/
	// MaterialSteps; Agreement is the share of consecutive sub-windows
	// whose own top leader is the candidate.
	Fraction         float64 `json:"fraction"`
	Margin           float64 `json:"margin"`
	Agreement        float64 `json:"agreement"`
	SubWindowLeaders []int   `json:"sub_window_leaders"`
	// TieSteps are material steps whose latest ranks tie exactly.
	TieSteps int `json:"tie_steps"`
	// TieSet lists the ranks that jointly lead, when Withheld is tie.
	TieSet   []int    `json:"tie_set,omitempty"`
	Withheld Withheld `json:"withheld,omitempty"`
	// Why explains the decision in plain language.
	Why string `json:"why"`
}

// Basis says what the headline's stage rests on.
type Basis string

// Headline bases, strongest first.
const (
	// BasisExcess: the stage whose exposed time rose most against the
	// reference window (the job's own healthy baseline, or run B).
	BasisExcess Basis = "excess"
	// BasisStraggler: a named straggler rank creates exposed time there.
	BasisStraggler Basis = "straggler"
	// BasisShare: the largest share of exposed time (§3 eq.2).
	BasisShare Basis = "share"
	BasisNone  Basis = "none"
)

// Headline is the plain-language diagnosis of a window.
type Headline struct {
	Text  string `json:"text"`
	Stage string `json:"stage,omitempty"`
	Basis Basis  `json:"basis"`
	// Rank is the named straggler, -1 when withheld.
	Rank int    `json:"rank"`
	Host string `json:"host,omitempty"`
	// Confidence is the candidate's lead fraction at the stage (0..1).
	Confidence  float64  `json:"confidence"`
	Withheld    Withheld `json:"withheld,omitempty"`
	WithheldWhy string   `json:"withheld_why,omitempty"`
	TieSet      []int    `json:"tie_set,omitempty"`
	// Caveats are the downgrade labels in plain words.
	Caveats []string `json:"caveats,omitempty"`
}
