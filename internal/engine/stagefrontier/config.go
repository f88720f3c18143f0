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
	}
}
