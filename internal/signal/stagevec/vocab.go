// Package stagevec is the stage-vector signal (StageFrontier §3, App. A):
// the ordered stage vocabulary, one rank's per-step StageVector, and the
// dense rank×step×stage Window the engine consumes.
package stagevec

import "github.com/laggard-dev/laggard/internal/signal"

// Default ordered stages (StageFrontier §3 and App. A Table 10). This file
// is the single source of the stage vocabulary: the Python client's
// laggard/_vocab.py and the UI's static/js/vocab.js are generated from
// Vocabulary by `go generate ./internal/signal/stagevec`, and a test fails
// when they drift.
const (
	StageData     = "data.next_wait"
	StageForward  = "model.fwd_loss_cpu_wall"
	StageBackward = "model.backward_cpu_wall"
	StageCallback = "callbacks.cpu_wall"
	StageOptim    = "optim.step_cpu_wall"
	StageOther    = signal.ResidualStage // residual, always last

	// ProbeForwardCUDA is the sampled CUDA-event forward side channel (§5);
	// never part of the prefix vector.
	ProbeForwardCUDA = "model.fwd_loss_cuda_event_ms"
)

// DefaultStages is the six-stage default schema, residual last.
var DefaultStages = []string{StageData, StageForward, StageBackward, StageCallback, StageOptim, StageOther}

// DefaultSchemaVersion names the default ordered-stage schema.
const DefaultSchemaVersion = "stagefrontier/v1"

// ShortNames are the legend names of the default stages (UI, text report)
// and the aliases the clients accept for them, so perf.stage("data") means
// data.next_wait instead of being dropped.
var ShortNames = map[string]string{
	StageData:     "data",
	StageForward:  "forward",
	StageBackward: "backward",
	StageCallback: "callbacks",
	StageOptim:    "optimizer",
	StageOther:    "other",
}

// Descriptions say what each default stage covers (App. A Table 10).
var Descriptions = map[string]string{
	StageData:     "main-process wait for the batch this step consumes",
	StageForward:  "forward pass and loss as exposed to the host",
	StageBackward: "backward pass and exposed gradient communication",
	StageCallback: "callbacks, logging, checkpoint and hook work",
	StageOptim:    "optimizer step and related host work",
	StageOther:    "step wall time not covered by explicit stages",
}

// DefaultSchema returns the six-stage schema with the forward CUDA probe.
func DefaultSchema() signal.Schema {
	return signal.Schema{Version: DefaultSchemaVersion, Stages: append([]string(nil), DefaultStages...), Probes: []string{ProbeForwardCUDA}}
}

// Resolve maps a stage name or its short alias to the schema's stage
// name; ok is false when the schema has no such stage.
func Resolve(s signal.Schema, name string) (string, bool) {
	if s.Index(name) >= 0 {
		return name, true
	}
	for long, short := range ShortNames {
		if short == name && s.Index(long) >= 0 {
			return long, true
		}
	}
	return "", false
}

// ShortName is the legend name of a stage: its alias for a default stage,
// the name itself otherwise.
func ShortName(stage string) string {
	if s, ok := ShortNames[stage]; ok {
		return s
	}
	return stage
}

// VocabularyDoc is the machine-readable vocabulary the generated client
// and UI copies are written from.
type VocabularyDoc struct {
	SchemaVersion string            `json:"schema_version"`
	Stages        []string          `json:"stages"`
	Residual      string            `json:"residual"`
	Probes        []string          `json:"probes"`
	ShortNames    map[string]string `json:"short_names"`
	Descriptions  map[string]string `json:"descriptions"`
	MaxStages     int               `json:"max_stages"`
}

// Vocabulary returns the stage vocabulary.
func Vocabulary() VocabularyDoc {
	return VocabularyDoc{SchemaVersion: DefaultSchemaVersion, Stages: append([]string(nil), DefaultStages...),
		Residual: StageOther, Probes: []string{ProbeForwardCUDA}, ShortNames: ShortNames,
		Descriptions: Descriptions, MaxStages: signal.MaxStages}
}
