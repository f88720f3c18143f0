package stagefrontier

// Config holds the labeler gates (StageFrontier App. C Table 13). The gate
// values in our copy of the paper are not legible, so the defaults below
// are chosen to match the behaviour the paper reports: the share tie
// tolerance must exceed the 0.039 worst-case tool disagreement it calls
// "below the default share tie tolerance" (§6.3), the candidate threshold
// is the stated 0.80 (§4, App. E), and the model-fit indicator defaults to
// false, the "safe default" of App. C.
type Config struct {
	// CandidateThreshold is τ: the routing set is the smallest leading-share
	// prefix whose cumulative share reaches it (§4).
	CandidateThreshold float64 `json:"candidate_threshold"`
	// DenominatorFloorMS: below this window denominator Σ_t F[t,S] the
	// report carries raw advances only and percentage labels are withheld
	// (§3 edge cases, App. D).
	DenominatorFloorMS float64 `json:"denominator_floor_ms"`
	// ClosureResidualShare: max |closure error| / step wall share before
	// strong labels are suppressed (telemetry_limited).
	ClosureResidualShare float64 `json:"closure_residual_share"`
	// OverlapErrorShare: max overlap error / step wall share (nested or
	// double-counted ordered stages).
	OverlapErrorShare float64 `json:"overlap_error_share"`
	// MaxMissingRanks: ranks allowed missing before distributed labels are
	// downgraded.
	MaxMissingRanks int `json:"max_missing_ranks"`
	// EventReadyRatio and MinEventSamples gate the forward device-evidence
	// labels.
	EventReadyRatio float64 `json:"event_ready_ratio"`
	MinEventSamples int     `json:"min_event_samples"`
	// DominanceShare: the leading frontier share needed for strong stage
	// labels.
	DominanceShare float64 `json:"dominance_share"`
	// StaticGainThreshold: G_s / A_s at or above which the leading stage is
	// called direct_exposure; below it the frontier share is wait-dependent.
	StaticGainThreshold float64 `json:"static_gain_threshold"`
	// TieTolerance: shares (or gains) within this of the leader are near
	// ties and emit co_critical evidence.
	TieTolerance float64 `json:"tie_tolerance"`
	// Leader-switch tolerance: a step's leader is confident only when it is
	// unique and leads the runner-up by LeaderGapMS and LeaderGapRel of the
	// step's exposed makespan; switches are counted between confident
	// leaders only, and a switch rate above LeaderSwitchRate downgrades.
	LeaderGapMS      float64 `json:"leader_gap_ms"`
	LeaderGapRel     float64 `json:"leader_gap_rel"`
	LeaderSwitchRate float64 `json:"leader_switch_rate"`
	// ModelFit is the caller-supplied sync-wait model-fit indicator m
	// (App. C); false unless workload semantics or side evidence support
	// the synchronization-wait model.
	ModelFit bool `json:"model_fit"`
	// ForwardEventHighRatio / LowRatio: CUDA-event forward time over CPU-wall
	// forward above which device work is supported, below which host
	// overhead is suspected.
	ForwardEventHighRatio float64 `json:"forward_event_high_ratio"`
	ForwardEventLowRatio  float64 `json:"forward_event_low_ratio"`

	// Leader naming gates (the headline names a straggler rank only when
	// the evidence singles it out). On the steps where a stage's frontier
	// advance clears the leader gap tolerances ("material" steps), the
	// candidate must be the confident unique leader on at least
	// LeaderMinFraction of them — most of the exposed time at that
	// boundary waits on it — lead the runner-up by LeaderMinMargin of them
	// — two alternating ranks or per-step noise cannot both reach it — and
	// lead in at least LeaderMinAgreement of LeaderSubWindows consecutive
	// sub-windows (3 of 4) — a persistent straggler, not one burst, which
	// is what the paper's leader-switch evidence guards against. Fewer
	// than LeaderMinSteps material steps are too few to name anyone.
	LeaderMinSteps     int     `json:"leader_min_steps"`
	LeaderMinFraction  float64 `json:"leader_min_fraction"`
	LeaderMinMargin    float64 `json:"leader_min_margin"`
	LeaderMinAgreement float64 `json:"leader_min_agreement"`
	LeaderSubWindows   int     `json:"leader_sub_windows"`
	// AbsorbedLagShare: the ranks "leave a stage together" when at least
	// half of them trail its frontier by at most this share of the
	// stage's mean material advance; then a delay in that stage is
	// absorbed inside it (a collective or barrier) or shared by all ranks,
	// and no rank can be localised from stage vectors. 10% is well above
	// exit jitter after a collective and well below a straggler's lead.
	AbsorbedLagShare float64 `json:"absorbed_lag_share"`
	// DisplacementShare: likely_sync_wait needs per-rank displacement
	// evidence — at least half of the ranks trail the frontier at the top
	// stage's boundary by this share of its advance (then wait
	// downstream). Half: most of the exposed advance is created by ranks
	// running ahead of the typical rank, not by every rank's own work.
	DisplacementShare float64 `json:"displacement_share"`
	// StragglerMinShare: a named straggler's stage leads the headline
	// (over the largest share) only when the tail it creates is at least
	// this share of the exposed step time; a rank that is steadily 1% late
	// is reported, not headlined.
	StragglerMinShare float64 `json:"straggler_min_share"`
	// ExcessMinRel and ExcessMinMS: a window's exposed step time differs
	// materially from its reference when it moved by at least
	// max(ExcessMinRel·reference, ExcessMinMS) per step; 10% matches the
	// change-point verification gate (Greyhound §4.3).
	ExcessMinRel float64 `json:"excess_min_rel"`
	ExcessMinMS  float64 `json:"excess_min_ms"`
	// UniformShare: against a reference, a stage's rise is a uniform
	// slowdown when the typical rank's own time in it rose by at least
	// this share of the frontier's rise.
	UniformShare float64 `json:"uniform_share"`
	// ExplainShare: against a reference, a straggler is named as the cause
	// of a stage's rise only when the tail it creates there grew by at
	// least this share of the rise; a rank that leads a stage every rank
	// slowed down in is reported, not blamed for the slowdown (issue 16
	// item 6a: a localizing verdict must explain the increase it is
	// attached to).
	ExplainShare float64 `json:"explain_share"`
}

// DefaultConfig returns the default gates.
func DefaultConfig() Config {
	return Config{
		CandidateThreshold:    0.80,
		DenominatorFloorMS:    1.0,
		ClosureResidualShare:  0.10,
		OverlapErrorShare:     0.02,
		MaxMissingRanks:       0,
		EventReadyRatio:       0.80,
		MinEventSamples:       3,
		DominanceShare:        0.40,
		StaticGainThreshold:   0.50,
		TieTolerance:          0.05,
		LeaderGapMS:           1.0,
		LeaderGapRel:          0.02,
		LeaderSwitchRate:      0.30,
		ModelFit:              false,
		ForwardEventHighRatio: 0.50,
		ForwardEventLowRatio:  0.20,
		LeaderMinSteps:        5,
		LeaderMinFraction:     0.5,
		LeaderMinMargin:       0.25,
		LeaderMinAgreement:    0.75,
		LeaderSubWindows:      4,
		AbsorbedLagShare:      0.10,
		DisplacementShare:     0.5,
		StragglerMinShare:     0.05,
		ExcessMinRel:          0.10,
		ExcessMinMS:           1.0,
		UniformShare:          0.5,
		ExplainShare:          0.25,
	}
}
