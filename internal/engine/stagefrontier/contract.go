package stagefrontier

import (
	"errors"
	"fmt"
	"math"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Validate checks the gates and names the offending field. The server, the
// CLI and the background evaluation all validate overrides through it.
func (c Config) Validate() error {
	bad := func(field, msg string, v any) error {
		return &signal.FieldError{Field: field, Msg: fmt.Sprintf("%s, got %v", msg, v)}
	}
	if !(c.CandidateThreshold > 0 && c.CandidateThreshold <= 1) {
		return bad("candidate_threshold", "must be in (0, 1]", c.CandidateThreshold)
	}
	for _, g := range []struct {
		name string
		v    float64
	}{
		{"denominator_floor_ms", c.DenominatorFloorMS}, {"closure_residual_share", c.ClosureResidualShare},
		{"overlap_error_share", c.OverlapErrorShare}, {"event_ready_ratio", c.EventReadyRatio},
		{"dominance_share", c.DominanceShare}, {"static_gain_threshold", c.StaticGainThreshold},
		{"tie_tolerance", c.TieTolerance}, {"leader_gap_ms", c.LeaderGapMS}, {"leader_gap_rel", c.LeaderGapRel},
		{"leader_switch_rate", c.LeaderSwitchRate}, {"forward_event_high_ratio", c.ForwardEventHighRatio},
		{"forward_event_low_ratio", c.ForwardEventLowRatio}, {"absorbed_lag_share", c.AbsorbedLagShare},
		{"displacement_share", c.DisplacementShare}, {"straggler_min_share", c.StragglerMinShare},
		{"excess_min_rel", c.ExcessMinRel}, {"excess_min_ms", c.ExcessMinMS}, {"uniform_share", c.UniformShare}, {"explain_share", c.ExplainShare},
	} {
		if !(g.v >= 0) || math.IsInf(g.v, 1) {
			return bad(g.name, "must be finite and >= 0", g.v)
		}
	}
	if c.MaxMissingRanks < 0 {
		return bad("max_missing_ranks", "must be >= 0", c.MaxMissingRanks)
	}
	if c.MinEventSamples < 0 {
		return bad("min_event_samples", "must be >= 0", c.MinEventSamples)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"leader_min_fraction", c.LeaderMinFraction}, {"leader_min_margin", c.LeaderMinMargin}, {"leader_min_agreement", c.LeaderMinAgreement}} {
		if !(f.v >= 0 && f.v <= 1) {
			return bad(f.name, "must be in [0, 1]", f.v)
		}
	}
	if c.LeaderMinSteps < 1 {
		return bad("leader_min_steps", "must be >= 1", c.LeaderMinSteps)
	}
	if c.LeaderSubWindows < 1 || c.LeaderSubWindows > 64 {
		return bad("leader_sub_windows", "must be in [1, 64]", c.LeaderSubWindows)
	}
	return nil
}

// checkWindow verifies the structural contract of a window: the dense
// shapes and the ordered stage list against the schema (App. A Table 11,
// "common schema version, ordered stage list and stage-order hash").
// Violations are errors: a mismatched window must not be merged.
func checkWindow(w *stagevec.Window) (k int, err error) {
	if w == nil {
		return 0, errors.New("stagefrontier: nil window")
	}
	if err := w.Schema.Validate(); err != nil {
		return 0, err
	}
	T, R, S := w.Dims()
	G := len(w.Schema.Stages)
	if T == 0 {
		return 0, &signal.FieldError{Field: "steps", Msg: "window has no steps"}
	}
	if R == 0 {
		return 0, &signal.FieldError{Field: "ranks", Msg: "window has no ranks"}
	}
	if S == 0 || S%G != 0 {
		return 0, &signal.FieldError{Field: "stages", Msg: fmt.Sprintf("%s: %d effective stages is not a multiple of the %d schema stages", FindingSchema, S, G)}
	}
	k = S / G
	names, group := expandStages(w.Schema.Stages, k)
	if len(w.Group) != S {
		return 0, &signal.FieldError{Field: "group", Msg: fmt.Sprintf("want %d entries, got %d", S, len(w.Group))}
	}
	for s := range names {
		if w.Stages[s] != names[s] || w.Group[s] != group[s] {
			return 0, &signal.FieldError{Field: "stages", Msg: fmt.Sprintf("%s: stage %d is %q (group %d), want %q (group %d) for schema order hash %s",
				FindingSchema, s, w.Stages[s], w.Group[s], names[s], group[s], w.Schema.OrderHash())}
		}
	}
	for i := 1; i < T; i++ {
		if w.Steps[i] <= w.Steps[i-1] {
			return 0, &signal.FieldError{Field: "steps", Msg: fmt.Sprintf("steps must be strictly ascending: %d after %d", w.Steps[i], w.Steps[i-1])}
		}
	}
	if len(w.D) != T*R*S {
		return 0, &signal.FieldError{Field: "d", Msg: fmt.Sprintf("want %d values (T=%d R=%d S=%d), got %d", T*R*S, T, R, S, len(w.D))}
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"wall", len(w.Wall)}, {"closure", len(w.Closure)}} {
		if c.n != T*R {
			return 0, &signal.FieldError{Field: c.name, Msg: fmt.Sprintf("want %d values, got %d", T*R, c.n)}
		}
	}
	if w.Present != nil && len(w.Present) != T*R {
		return 0, &signal.FieldError{Field: "present", Msg: fmt.Sprintf("want %d values or nil, got %d", T*R, len(w.Present))}
	}
	for name, col := range w.Probes {
		if col == nil || len(col.Value) != T*R || len(col.Sampled) != T*R {
			return 0, &signal.FieldError{Field: "probes", Msg: fmt.Sprintf("probe %q column must have %d cells", name, T*R)}
		}
	}
	// Sums over a window (steps × ranks × stages) and ratios of them must
	// stay finite: a cell beyond ±MaxCellMS (1e308 stored by an older
	// version, or a window built without the assembler) is refused here
	// rather than overflowing into an infinite total (issue 6 D5).
	for _, c := range []struct {
		name string
		xs   []float64
	}{{"d", w.D}, {"wall", w.Wall}, {"closure", w.Closure}} {
		if i := outOfRange(c.xs); i >= 0 {
			return 0, &signal.FieldError{Field: c.name, Msg: fmt.Sprintf("value %d is %v: must be finite and within ±%g ms", i, c.xs[i], MaxCellMS)}
		}
	}
	return k, nil
}

// MaxCellMS bounds a window's cell durations, wall and closure times: 1e12
// ms (31 years), far above any real step (ingest takes at most a day per
// value) and far enough below float64's range that sums over any window
// stay finite.
const MaxCellMS = 1e12

// outOfRange returns the index of the first value that is not finite or
// beyond ±MaxCellMS, or −1.
func outOfRange(xs []float64) int {
	for i, x := range xs {
		if !(x >= -MaxCellMS && x <= MaxCellMS) { // also NaN
			return i
		}
	}
	return -1
}

// roleGroups counts the role groups (signal.Role.Group) among reporting
// ranks (App. A Table 11, "role metadata sufficient for the chosen
// group"). Ranks with no role metadata at all are not counted: they
// neither split nor join a group.
func roleGroups(w *stagevec.Window, seen []bool) int {
	// Keyed like Role.Group (role name, pipeline stage) without building
	// its string for every rank.
	type key struct {
		pp   int
		name string
	}
	groups := map[key]bool{}
	for r, rk := range w.Ranks {
		if seen[r] && rk.Role != signal.UnknownRole {
			groups[key{max(rk.Role.PP, -1), rk.Role.Name}] = true
		}
	}
	return max(len(groups), 1)
}
