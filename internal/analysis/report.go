package analysis

import (
	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// ReportSchema versions the JSON of Report; the CLI's --json, the API and
// the UI all carry it. Bump it on any incompatible change.
const ReportSchema = "laggard.report/v2"

// Report is the job report: the resolved window, the time axis, one
// StageFrontier report per comparable role group, and a headline for the
// job.
type Report struct {
	SchemaVersion string `json:"schema_version"`
	JobID         string `json:"job_id"`
	JobName       string `json:"job_name,omitempty"`
	Window        Window `json:"window"`
	// Headline is the job's plain-language diagnosis: the group's
	// headline with one role group, a per-group summary with several.
	Headline stagefrontier.Headline `json:"headline"`
	Timeline *Timeline              `json:"timeline,omitempty"`
	Groups   []GroupReport          `json:"groups"`
	// RoleAwareNeeded: ranks fall into several role groups, each diagnosed
	// on its own; no global routing call or rank is made (App. A Table 11).
	RoleAwareNeeded bool `json:"role_aware_needed"`
	// Notes are limits of this report in words (history truncated, no
	// reference window, ...).
	Notes []string `json:"notes,omitempty"`
	// Incarnations accounts for the job's launches when it has had more
	// than one (or "all" was asked): which one this report reads, each
	// one's steps, restarts and what ended without being shipped.
	Incarnations *Incarnations `json:"incarnations,omitempty"`
}

// WindowBasis says how a window was chosen.
type WindowBasis string

// Window bases.
const (
	BasisExplicit    WindowBasis = "explicit"     // from/to given
	BasisLast        WindowBasis = "last"         // last=N given
	BasisSinceChange WindowBasis = "since_change" // default: since the latest change point
	BasisSteady      WindowBasis = "steady"       // default: the steady part after warm-up
)

// Window is a resolved inclusive step range.
type Window struct {
	From  int64       `json:"from"`
	To    int64       `json:"to"`
	Basis WindowBasis `json:"basis"`
	// Reason says in words why these steps.
	Reason string `json:"reason"`
}

// GroupReport is one role group's diagnosis.
type GroupReport struct {
	// Group is the role group key (signal.Role.Group).
	Group string `json:"group"`
	// NumRanks is the number of ranks in the group.
	NumRanks int                   `json:"num_ranks"`
	Report   *stagefrontier.Report `json:"report"`
	// Comparison sets the window against the reference (before the
	// change point, an explicit baseline, or run B), when there is one.
	Comparison *stagefrontier.Comparison `json:"comparison,omitempty"`
}

// Timeline is the time axis over the job's recent history.
type Timeline struct {
	// Detector names the change-point detector (stats.Detector).
	Detector string `json:"detector"`
	// From/To bound the history read; Truncated when older steps exist.
	From      int64 `json:"from"`
	To        int64 `json:"to"`
	Truncated bool  `json:"truncated"`
	// Group is the role group whose stages Series carries (the largest);
	// ExposedMS is the job's: the slowest group's exposed time per step.
	Group  string          `json:"group"`
	Stages []string        `json:"stages"`
	Series []TimelinePoint `json:"series"`
	// WarmupEnd is the first step after warm-up (From when none).
	WarmupEnd    int64         `json:"warmup_end"`
	ChangePoints []ChangePoint `json:"change_points"`
	// StageChangePoints are change points of each stage's advance series.
	StageChangePoints []StageChangePoint `json:"stage_change_points"`
	// Restarts mark where a new incarnation begins on an axis across
	// incarnations (incarnation=all).
	Restarts []Restart `json:"restarts,omitempty"`
}

// Restart is where an incarnation begins on the time axis.
type Restart struct {
	At          int64                    `json:"at"`
	Incarnation int                      `json:"incarnation"`
	Reason      signal.IncarnationReason `json:"reason"`
	// Step is the incarnation's first training step.
	Step int64 `json:"step"`
}

// TimelinePoint is one step of the time axis.
type TimelinePoint struct {
	Step      int64     `json:"step"`
	ExposedMS float64   `json:"exposed_ms"`
	AdvanceMS []float64 `json:"advance_ms"`
}

// ChangeKind is onset (step time rose) or relief (it fell).
type ChangeKind string

// Change kinds.
const (
	Onset  ChangeKind = "onset"
	Relief ChangeKind = "relief"
)

// ChangePoint is a level change of the job's exposed step time.
type ChangePoint struct {
	Step     int64      `json:"step"`
	Kind     ChangeKind `json:"kind"`
	BeforeMS float64    `json:"before_ms"` // median of the segment before
	AfterMS  float64    `json:"after_ms"`  // median of the segment after
	DeltaMS  float64    `json:"delta_ms"`
	Rel      float64    `json:"rel"`
	Score    float64    `json:"score"`
	// Stages are the primary group's per-stage advance medians over the
	// same two segments, largest shift first.
	Stages []StageShift `json:"stages"`
}

// StageShift is one stage's advance before and after a change point.
type StageShift struct {
	Stage    string  `json:"stage"`
	BeforeMS float64 `json:"before_ms"`
	AfterMS  float64 `json:"after_ms"`
	DeltaMS  float64 `json:"delta_ms"`
}

// StageChangePoint is a level change of one stage's frontier advance.
type StageChangePoint struct {
	Stage    string     `json:"stage"`
	Step     int64      `json:"step"`
	Kind     ChangeKind `json:"kind"`
	BeforeMS float64    `json:"before_ms"`
	AfterMS  float64    `json:"after_ms"`
}

// Aliases so layers above analysis (detect, api) name these types without
// importing the store or the engines themselves.
type (
	// JobStats is a job's stored-step summary.
	JobStats = store.JobStats
	// Headline is a plain-language diagnosis.
	Headline = stagefrontier.Headline
)
