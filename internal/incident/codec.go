package incident

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Bounds of a decoded incident: stored records and uploads are outside
// input (a corrupt record must be skipped, never crash the server).
const (
	maxIDLen       = 256
	maxDecodedSize = 64 << 20
)

// Decode parses one incident's JSON and checks it: the schema, the ID,
// the state, every evidence's ID, signal and kind, and the bounds. The
// error names the field.
func Decode(b []byte) (*Incident, error) {
	if len(b) > maxDecodedSize {
		return nil, fmt.Errorf("incident: %d bytes exceeds the %d-byte limit", len(b), maxDecodedSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var inc Incident
	if err := dec.Decode(&inc); err != nil {
		return nil, fmt.Errorf("incident: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("incident: trailing data after the object")
	}
	if err := inc.Check(); err != nil {
		return nil, err
	}
	return &inc, nil
}

// Check validates a decoded incident.
func (inc *Incident) Check() error {
	switch {
	case inc.Schema != Schema:
		return fmt.Errorf("incident: schema %q, want %q", inc.Schema, Schema)
	case inc.ID == "" || len(inc.ID) > maxIDLen:
		return fmt.Errorf("incident: id: want 1..%d bytes", maxIDLen)
	case inc.Job == "" || len(inc.Job) > maxIDLen:
		return fmt.Errorf("incident %s: job: want 1..%d bytes", inc.ID, maxIDLen)
	}
	switch inc.State {
	case StateOpen, StateRecovering, StateResolved:
	default:
		return fmt.Errorf("incident %s: state %q: want open, recovering or resolved", inc.ID, inc.State)
	}
	if (inc.State == StateResolved) != (inc.Resolved != nil) {
		return fmt.Errorf("incident %s: resolved: set exactly when the state is resolved", inc.ID)
	}
	for i, e := range inc.Evidence {
		if e.ID == "" || len(e.ID) > maxIDLen {
			return fmt.Errorf("incident %s: evidence[%d].id: want 1..%d bytes", inc.ID, i, maxIDLen)
		}
		if e.Kind == "" {
			return fmt.Errorf("incident %s: evidence[%d].kind: empty", inc.ID, i)
		}
		switch e.Signal {
		case SignalOnset, SignalRelief, SignalFinding, SignalHealthy, SignalProgress, SignalState:
		default:
			return fmt.Errorf("incident %s: evidence[%d].signal %q unknown", inc.ID, i, e.Signal)
		}
	}
	for i, h := range inc.Hypotheses {
		if h.Target.Kind == "" {
			return fmt.Errorf("incident %s: hypotheses[%d].target.kind: empty", inc.ID, i)
		}
	}
	return nil
}
