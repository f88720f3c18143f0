package signal

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// ResidualStage is the residual ordered stage that absorbs closure error;
// every schema ends with it (StageFrontier App. A).
const ResidualStage = "step.other_cpu_wall"

// Schema is an ordered, non-overlapping stage list. The last stage must be
// the residual, which absorbs closure error (App. A). A job has a default
// schema, and each role group may declare its own (Job.Groups).
type Schema struct {
	Version string   `json:"version"`
	Stages  []string `json:"stages"`
	// Probes are declared side-channel measurements (side_channel=true in
	// App. A Table 11): nested spans that never enter the prefix vector.
	Probes []string `json:"probes,omitempty"`
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

// Clone returns a deep copy.
func (s Schema) Clone() Schema {
	s.Stages = append([]string(nil), s.Stages...)
	if s.Probes != nil {
		s.Probes = append([]string(nil), s.Probes...)
	}
	return s
}

// Validate checks the schema and names the offending field.
func (s Schema) Validate() error {
	if s.Version == "" {
		return FieldErrorf("schema.version", "must not be empty")
	}
	if len(s.Version) > 128 {
		return FieldErrorf("schema.version", "longer than 128 bytes")
	}
	if len(s.Stages) < 2 || len(s.Stages) > MaxStages {
		return FieldErrorf("schema.stages", "need 2..%d ordered stages including the residual, got %d", MaxStages, len(s.Stages))
	}
	seen := map[string]bool{}
	for i, st := range s.Stages {
		if !validName(st) {
			return FieldErrorf("schema.stages", "stage %d has an invalid name %q", i, Clip(st))
		}
		if seen[st] {
			return FieldErrorf("schema.stages", "stage %q appears twice", st)
		}
		seen[st] = true
	}
	if s.Stages[len(s.Stages)-1] != ResidualStage {
		return FieldErrorf("schema.stages", "last stage must be the residual %q", ResidualStage)
	}
	if len(s.Probes) > MaxStages {
		return FieldErrorf("schema.probes", "at most %d probes, got %d", MaxStages, len(s.Probes))
	}
	for i, p := range s.Probes {
		if !validName(p) {
			return FieldErrorf("schema.probes", "probe %d has an invalid name %q", i, Clip(p))
		}
		if seen[p] {
			return FieldErrorf("schema.probes", "probe %q is also an ordered stage", p)
		}
	}
	return nil
}

// validName: stage and probe names travel in CSV headers and JSON keys.
func validName(s string) bool {
	return s != "" && len(s) <= 128 && !strings.ContainsAny(s, ",\n\r\t\"")
}

// Clip shortens a value quoted back in an error message so a huge bad
// input is not echoed whole.
func Clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "…"
}
