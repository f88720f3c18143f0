package stagevec

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Probe is one side-channel sample such as the sampled CUDA-event forward
// time (StageFrontier §5). Ready=false means the sample was taken but its
// events had not completed when polled; such samples count against the
// event-ready ratio gate (App. C).
type Probe struct {
	Value float64 `json:"value_ms"`
	Ready bool    `json:"ready"`
}

// Vector is what one rank reports for one logical step (or one
// accumulation microstep of it).
type Vector struct {
	Step int64 `json:"step"`
	Rank int   `json:"rank"`
	// Micro is the gradient-accumulation index within the step (0-based).
	Micro int `json:"micro,omitempty"`
	// Durations are the ordered stage durations in schema order. The
	// residual (last schema stage) may be omitted, in which case it is
	// derived from WallMS (App. A).
	Durations []float64 `json:"durations_ms"`
	// WallMS is the rank-local step (or microstep) wall time.
	WallMS float64 `json:"wall_ms"`
	// DataLead > 0 says the data wait recorded here fetched the batch that
	// step Step+DataLead consumes (prefetch / run-ahead). The window
	// assembler charges it to the consuming step (App. A).
	DataLead int `json:"data_lead,omitempty"`
	// Probes are side-channel samples keyed by declared probe name.
	Probes map[string]Probe `json:"probes,omitempty"`
	// Dropped counts vectors the client had to drop (full queue, failed
	// ship) since the previous vector it shipped; any drop caps confidence
	// (telemetry_limited).
	Dropped int64 `json:"dropped,omitempty"`
	// Nested counts ordered spans the client rejected because another
	// ordered stage was already active (App. A Table 11, first check).
	Nested int `json:"nested,omitempty"`
	// OrderHash is the signal.Schema.OrderHash of the stage list the rank
	// timed. Optional; when present it must match the schema the server
	// holds for the rank's role group, so a client whose stage list
	// changed cannot have its durations read in another order.
	OrderHash string `json:"order_hash,omitempty"`
}

// Value bounds. Every stored value must stay meaningful to the analysis,
// whose sums (a step's stage total, a window's drop count, a window's
// step span to−from+1) must never overflow or turn into ±Inf.
const (
	// MaxDurationMS bounds a duration (a stage, a step wall time, a probe
	// sample): one day. No optimizer step of a job worth diagnosing takes
	// longer, and sums of even millions of such values stay exact enough
	// and far below float64's range, unlike a client's 1e308 (D5).
	MaxDurationMS = 86_400_000.0
	// MaxStep bounds a step id: 2^48−1 (2.8e14). Steps count optimizer
	// steps; no run gets near this (a million steps a second for eight
	// years), and it even admits a millisecond timestamp used as a step.
	// It is exactly representable as a float64 (the UI and Python read
	// steps as doubles), window arithmetic on it (to−from+1, sums of
	// step counts) stays 2^15 times below int64 overflow (D1, D12), and a
	// stored step keeps the 16 bits above it for the incarnation (Ordinal).
	MaxStep = int64(1)<<48 - 1
	// MaxCount bounds the per-vector counters dropped and nested: 2^40.
	// A window sums them over at most a few million vectors, so the sums
	// stay below int64 overflow.
	MaxCount = int64(1) << 40
)

// Validate checks a vector against its job and names the offending field.
func (v *Vector) Validate(j *signal.Job) error {
	if v.Step < 0 || v.Step > MaxStep {
		return signal.FieldErrorf("step", "must be in [0, %d], got %d", MaxStep, v.Step)
	}
	if v.Rank < 0 || v.Rank >= j.WorldSize {
		return signal.FieldErrorf("rank", "must be in [0, %d), got %d", j.WorldSize, v.Rank)
	}
	acc := max(j.Accumulation, 1)
	if v.Micro < 0 || v.Micro >= acc {
		return signal.FieldErrorf("micro", "must be in [0, %d), got %d", acc, v.Micro)
	}
	schema := j.SchemaFor(v.Rank)
	if v.OrderHash != "" && v.OrderHash != schema.OrderHash() {
		return &signal.ConflictError{Field: "order_hash", Msg: fmt.Sprintf("rank %d sends stage-order hash %s but its role group %q is registered with %s (%s)",
			v.Rank, signal.Clip(v.OrderHash), j.GroupOf(v.Rank), schema.OrderHash(), strings.Join(schema.Stages, ", "))}
	}
	ns := len(schema.Stages)
	if len(v.Durations) != ns && len(v.Durations) != ns-1 {
		return signal.FieldErrorf("durations_ms", "want %d values (or %d without the residual), got %d", ns, ns-1, len(v.Durations))
	}
	for i, d := range v.Durations {
		if !ValidDuration(d) {
			return signal.FieldErrorf("durations_ms", "value %d (%s) must be finite and in [0, %.0f], got %v", i, schema.Stages[i], MaxDurationMS, d)
		}
	}
	if !ValidDuration(v.WallMS) {
		return signal.FieldErrorf("wall_ms", "must be finite and in [0, %.0f], got %v", MaxDurationMS, v.WallMS)
	}
	if v.DataLead < 0 || v.DataLead > 1024 {
		return signal.FieldErrorf("data_lead", "must be in [0, 1024], got %d", v.DataLead)
	}
	if v.Dropped < 0 || v.Dropped > MaxCount {
		return signal.FieldErrorf("dropped", "must be in [0, %d], got %d", MaxCount, v.Dropped)
	}
	if v.Nested < 0 || int64(v.Nested) > MaxCount {
		return signal.FieldErrorf("nested", "must be in [0, %d], got %d", MaxCount, v.Nested)
	}
	for name, p := range v.Probes {
		if !slices.Contains(schema.Probes, name) {
			return signal.FieldErrorf("probes", "probe %q is not declared in the job schema", signal.Clip(name))
		}
		switch {
		case p.Ready && !ValidDuration(p.Value):
			return signal.FieldErrorf("probes", "probe %q value must be finite and in [0, %.0f], got %v", name, MaxDurationMS, p.Value)
		case !p.Ready && !(math.Abs(p.Value) <= MaxDurationMS):
			// A not-ready sample's value is ignored, but it is stored and
			// exported, so it must still be a finite, sane number.
			return signal.FieldErrorf("probes", "probe %q (not ready) value must be finite and in [-%.0f, %.0f], got %v", name, MaxDurationMS, MaxDurationMS, p.Value)
		}
	}
	return nil
}

// ValidDuration reports whether d is a storable duration in ms: finite
// and in [0, MaxDurationMS].
func ValidDuration(d float64) bool { return d >= 0 && d <= MaxDurationMS }

// Closure returns the signed closure error e = W − Σ explicit stages and
// the residual and overlap error derived from it (App. A):
// residual = max(e, 0), overlap = max(−e, 0).
func Closure(explicit []float64, wall float64) (e, residual, overlap float64) {
	sum := 0.0
	for _, d := range explicit {
		sum += d
	}
	e = wall - sum
	return e, math.Max(e, 0), math.Max(-e, 0)
}
