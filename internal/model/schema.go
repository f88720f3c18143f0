package model

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Default ordered stages (StageFrontier §3 and App. A Table 10).
const (
	StageData     = "data.next_wait"
	StageForward  = "model.fwd_loss_cpu_wall"
	StageBackward = "model.backward_cpu_wall"
	StageCallback = "callbacks.cpu_wall"
	StageOptim    = "optim.step_cpu_wall"
	StageOther    = "step.other_cpu_wall" // residual, always last

	// ProbeForwardCUDA is the sampled CUDA-event forward side channel (§5);
	// never part of the prefix vector.
	ProbeForwardCUDA = "model.fwd_loss_cuda_event_ms"
)

// DefaultStages is the six-stage default schema, residual last.
var DefaultStages = []string{StageData, StageForward, StageBackward, StageCallback, StageOptim, StageOther}

// DefaultSchemaVersion names the default ordered-stage schema.
const DefaultSchemaVersion = "stagefrontier/v1"

// Schema is an ordered, non-overlapping stage list. The last stage must be
// the residual step.other_cpu_wall, which absorbs closure error (App. A).
type Schema struct {
	Version string   `json:"version"`
	Stages  []string `json:"stages"`
	// Probes are declared side-channel measurements (side_channel=true in
	// App. A Table 11): nested spans that never enter the prefix vector.
	Probes []string `json:"probes,omitempty"`
}

// DefaultSchema returns the six-stage schema with the forward CUDA probe.
func DefaultSchema() Schema {
	return Schema{Version: DefaultSchemaVersion, Stages: append([]string(nil), DefaultStages...), Probes: []string{ProbeForwardCUDA}}
}

// OrderHash identifies version+ordered stage list; ranks whose hashes differ
// may not be merged into one window (App. A Table 11).
func (s Schema) OrderHash() string {
	h := sha256.New()
	h.Write([]byte(s.Version))
	for _, st := range s.Stages {
		h.Write([]byte{0})
		h.Write([]byte(st))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Index returns the position of stage name, or -1.
func (s Schema) Index(name string) int {
	for i, st := range s.Stages {
		if st == name {
			return i
		}
	}
	return -1
}

// Validate checks the schema and names the offending field.
func (s Schema) Validate() error {
	if s.Version == "" {
		return fieldErr("schema.version", "must not be empty")
	}
	if len(s.Stages) < 2 || len(s.Stages) > MaxStages {
		return fieldErr("schema.stages", "need 2..%d ordered stages including the residual, got %d", MaxStages, len(s.Stages))
	}
	seen := map[string]bool{}
	for i, st := range s.Stages {
		if st == "" || len(st) > 128 || strings.ContainsAny(st, ",\n\t\"") {
			return fieldErr("schema.stages", "stage %d has an invalid name %q", i, st)
		}
		if seen[st] {
			return fieldErr("schema.stages", "stage %q appears twice", st)
		}
		seen[st] = true
	}
	if s.Stages[len(s.Stages)-1] != StageOther {
		return fieldErr("schema.stages", "last stage must be the residual %q", StageOther)
	}
	for _, p := range s.Probes {
		if seen[p] {
			return fieldErr("schema.probes", "probe %q is also an ordered stage", p)
		}
	}
	return nil
}
