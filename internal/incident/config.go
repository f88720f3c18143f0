package incident

import (
	"fmt"
	"time"
)

// Config holds the fusion thresholds. DefaultConfig gives the values
// docs/design/incidents.md argues for.
type Config struct {
	// RecoverRel: a relief recovers the job when its step time is within
	// this fraction of the healthy step time (0.10: the issue's "back
	// within 10 % of healthy").
	RecoverRel float64
	// HoldDown: the job must stay recovered this long (wall time) and
	// HoldDownSteps steps before the incident resolves; a new onset inside
	// it re-opens the same incident.
	HoldDown      time.Duration
	HoldDownSteps int64
	// Slack widens an incident's window when joining findings: engines
	// see an onset a little before or after one another (Greyhound on
	// collective end times, StageFrontier on step boundaries).
	Slack time.Duration
	// MaxEvidence bounds the evidence kept in one incident (the newest
	// re-reports replace older ones; beyond it the oldest non-onset
	// findings are dropped and the incident says so).
	MaxEvidence int
	// MaxAudit bounds the audit log.
	MaxAudit int
	// MinDuration and MinSteps: a slowdown that recovered sooner (in wall
	// time or in steps) before laggard published it is a transient, not
	// an incident — the fail-slow definition of Greyhound §7.2 (a loss
	// of ≥ 10 % lasting ≥ max(10 iterations, 30 s)).
	MinDuration time.Duration
	MinSteps    int64
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{RecoverRel: 0.10, HoldDown: 2 * time.Minute, HoldDownSteps: 20, Slack: 30 * time.Second, MaxEvidence: 512, MaxAudit: 256, MinDuration: 30 * time.Second, MinSteps: 10}
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case !(c.RecoverRel > 0 && c.RecoverRel < 1):
		return fmt.Errorf("incident config: recover_rel %v: want 0 < x < 1", c.RecoverRel)
	case c.HoldDown < 0 || c.HoldDownSteps < 0:
		return fmt.Errorf("incident config: hold-down must not be negative")
	case c.Slack < 0:
		return fmt.Errorf("incident config: slack must not be negative")
	case c.MinDuration < 0 || c.MinSteps < 0:
		return fmt.Errorf("incident config: min_duration and min_steps must not be negative")
	case c.MaxEvidence < 8 || c.MaxAudit < 8:
		return fmt.Errorf("incident config: max_evidence and max_audit must be at least 8")
	}
	return nil
}
