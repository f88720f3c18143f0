package analysis

import "github.com/laggard-dev/laggard/internal/engine/greyhound"

// Aliases so layers above analysis (detect, api, the CLI, the demo) name
// the Greyhound engine's types without importing it: only analysis joins
// the store and the engines (docs/design/architecture.md rule 2).
type (
	// GreyhoundReport is Greyhound-Detect's report (contract §5).
	GreyhoundReport = greyhound.Report
	// GreyhoundConfig holds the engine's thresholds.
	GreyhoundConfig = greyhound.Config
	// GreyhoundPhase is the controller's phase (§4.1).
	GreyhoundPhase = greyhound.Phase
	// GreyhoundPlan is a validation plan as the engine makes it (§4.3).
	GreyhoundPlan = greyhound.Plan
	// GreyhoundVerdict is the controller's conclusion.
	GreyhoundVerdict = greyhound.Verdict
	// GreyhoundVerdictKind classifies a verdict.
	GreyhoundVerdictKind = greyhound.VerdictKind
	// GreyhoundChangePoint is one change point of the iteration series.
	GreyhoundChangePoint = greyhound.ChangePointView
	// ControllerState is one job's controller state.
	ControllerState = greyhound.ControllerState
	// Transition is one timestamped phase change.
	Transition = greyhound.Transition
	// IterationMethod says where the iteration series came from.
	IterationMethod = greyhound.IterationMethod
	// ValidationState is a validation run's state in a report.
	ValidationState = greyhound.ValidationState
	// GreyhoundObservation is what one controller step sees (§4.1).
	GreyhoundObservation = greyhound.Observation
	// GreyhoundCluster is one comparable group of the cross-group
	// comparison (§4.3).
	GreyhoundCluster = greyhound.Cluster
	// GreyhoundRankResult is one rank's validation result as the engine
	// reads it.
	GreyhoundRankResult = greyhound.RankResult
)

// Controller phases (§4.1).
const (
	PhaseTracking   = greyhound.PhaseTracking
	PhaseProfiling  = greyhound.PhaseProfiling
	PhaseValidation = greyhound.PhaseValidation
	PhaseVerdict    = greyhound.PhaseVerdict
)

// Verdict kinds.
const (
	VerdictSlowRank     = greyhound.VerdictSlowRank
	VerdictSlowLink     = greyhound.VerdictSlowLink
	VerdictUniform      = greyhound.VerdictUniform
	VerdictNone         = greyhound.VerdictNone
	VerdictInconclusive = greyhound.VerdictInconclusive
)

// Iteration methods, validation run states and the default detector's
// name as reports carry them.
const (
	MethodACF         = greyhound.MethodACF
	MethodNone        = greyhound.MethodNone
	ValidationPending = greyhound.ValidationPending
	ValidationDone    = greyhound.ValidationDone
	ValidationExpired = greyhound.ValidationExpired
	DetectorBOCDV     = greyhound.DetectorBOCDV
	// GreyhoundOnset is the kind of an onset change point.
	GreyhoundOnset = greyhound.KindOnset
)

// DefaultGreyhoundConfig returns the engine's documented defaults.
func DefaultGreyhoundConfig() GreyhoundConfig { return greyhound.DefaultConfig() }

// NewGreyhoundController is a fresh controller state in tracking at
// nowNS (greyhound.NewController).
func NewGreyhoundController(nowNS int64) ControllerState { return greyhound.NewController(nowNS) }

// StepGreyhound runs the engine's pure controller step (greyhound.Step,
// §4.1): the next state, and the validation plan to publish (nil when
// none). internal/control drives it; analysis only runs it.
func StepGreyhound(cs ControllerState, obs GreyhoundObservation, cfg GreyhoundConfig) (ControllerState, *GreyhoundPlan) {
	return greyhound.Step(cs, obs, cfg)
}

// Analyze runs Greyhound-Detect (greyhound.Analyze) over the loaded
// window with the controller state st (nil: none) under cfg, and says
// on the report which launch it reads.
func (gi *GreyhoundInput) Analyze(st *ControllerState, cfg GreyhoundConfig) (*GreyhoundReport, error) {
	gi.In.State = st
	rep, err := greyhound.Analyze(gi.In, cfg)
	if err != nil {
		return nil, err
	}
	gi.label(rep)
	return rep, nil
}
