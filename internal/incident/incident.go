package incident

// Schema versions the incident JSON (API, CLI --json, stored records).
const Schema = "laggard.incident/v1"

// State of an incident.
type State string

const (
	// StateOpen: the job is slow.
	StateOpen State = "open"
	// StateRecovering: a relief brought the step time back within
	// Config.RecoverRel of healthy; the hold-down has not passed yet (a
	// relapse now re-opens the same incident).
	StateRecovering State = "recovering"
	// StateResolved: healthy for the hold-down window.
	StateResolved State = "resolved"
)

// Resolution says what resolved an incident.
type Resolution string

const (
	// ResolvedRelief: a relief change point brought the step time back.
	ResolvedRelief Resolution = "relief"
	// ResolvedSeries: the step series came back without a change point.
	ResolvedSeries Resolution = "step_series"
	// ResolvedStopped: the job stopped reporting while slow.
	ResolvedStopped Resolution = "job_stopped"
)

// Point is a moment of the job on both axes.
type Point struct {
	WallNS int64 `json:"wall_ns"`
	Step   int64 `json:"step"`
}

// Incident is one slowdown of one job, from its onset to its resolution,
// with every engine's evidence about it fused into hypotheses and a cause
// chain.
type Incident struct {
	Schema string `json:"schema"`
	ID     string `json:"id"`
	Job    string `json:"job"`
	// Incarnation is the launch the onset was seen in; Incarnations
	// every launch the incident spans (a restart during a slowdown).
	Incarnation  int   `json:"incarnation"`
	Incarnations []int `json:"incarnations,omitempty"`
	State        State `json:"state"`
	// Opened is the onset; DetectedNS when laggard first published the
	// incident (Opened is when it began, which may be earlier); Updated
	// the newest evidence; Resolved the relief (zero while not resolved).
	Opened     Point  `json:"opened"`
	DetectedNS int64  `json:"detected_ns,omitempty"`
	Updated    Point  `json:"updated"`
	Resolved   *Point `json:"resolved,omitempty"`
	// ResolvedBy says what resolved it.
	ResolvedBy Resolution `json:"resolved_by,omitempty"`
	// Relapses counts re-openings inside the hold-down window.
	Relapses int `json:"relapses,omitempty"`

	// Onset and Relief are the IDs of the evidence that opened it and
	// that relieved it.
	Onset  []string `json:"onset"`
	Relief []string `json:"relief,omitempty"`
	// HealthyMS is the step time before the onset; SlowMS during it.
	HealthyMS float64 `json:"healthy_ms"`
	SlowMS    float64 `json:"slow_ms"`

	// Scope is what the stated cause covers (whole job when nothing is
	// stated).
	Scope Scope `json:"scope"`
	// Cause is the stated cause: the hypotheses that meet the fusion rule
	// (docs/design/incidents.md); empty while none does. Headline is the
	// plain-language summary.
	Cause      []string   `json:"cause"`
	Category   Category   `json:"category"`
	Confidence Confidence `json:"confidence"`
	Headline   string     `json:"headline"`
	// Hypotheses are every candidate, strongest first, each with its
	// chain, support and contradictions; competing ones are kept side by
	// side.
	Hypotheses []Hypothesis `json:"hypotheses"`
	// Contradictions are the disagreements between engines, in words.
	Contradictions []string `json:"contradictions,omitempty"`

	Lost            Lost             `json:"lost"`
	Recommendations []Recommendation `json:"recommendations"`
	// Waiting is the evidence laggard still asks for (or waits on).
	Waiting []Request `json:"waiting,omitempty"`
	Audit   []Action  `json:"audit"`
	// Windows are the before / during / after windows engine views open
	// on.
	Windows Windows `json:"windows"`
	// Evidence is every piece of evidence joined, in time order.
	Evidence []Evidence `json:"evidence"`
	// Related notes the same host or link as the cause of other jobs'
	// incidents (the fleet view).
	Related []Related `json:"related,omitempty"`
}

// Scope is where the incident is.
type Scope struct {
	Whole     bool     `json:"whole"`
	Ranks     []int    `json:"ranks,omitempty"`
	Hosts     []string `json:"hosts,omitempty"`
	Links     []Target `json:"links,omitempty"`
	Groups    []string `json:"groups,omitempty"`
	Operators []string `json:"operators,omitempty"`
}

// Hypothesis is one candidate cause: a target with the chain of evidence
// that explains it layer by layer.
type Hypothesis struct {
	Target Target `json:"target"`
	// Stated: this hypothesis meets the rule to be stated as the cause.
	Stated     bool       `json:"stated"`
	Confidence Confidence `json:"confidence"`
	// Reason is why it has this confidence, in words.
	Reason   string      `json:"reason"`
	Category Category    `json:"category"`
	Chain    []ChainLink `json:"chain"`
	// Support and Against are evidence IDs; Engines the distinct engines
	// supporting it.
	Support []string `json:"support"`
	Against []string `json:"against,omitempty"`
	Engines []Engine `json:"engines"`
}

// ChainLink is one layer of a cause chain.
type ChainLink struct {
	Layer      Layer      `json:"layer"`
	Engine     Engine     `json:"engine"`
	Evidence   []string   `json:"evidence"`
	Text       string     `json:"text"`
	Confidence Confidence `json:"confidence"`
	Reason     string     `json:"reason,omitempty"`
}

// Lost is the time the slowdown cost: Σ over slow steps of (step time −
// healthy step time) (Greyhound §5.1's accumulated loss), in seconds of
// the job and rank-seconds (× ranks).
type Lost struct {
	Seconds     float64 `json:"seconds"`
	RankSeconds float64 `json:"rank_seconds"`
	Steps       int64   `json:"steps"`
	// Partial: the step samples do not cover the whole incident.
	Partial bool `json:"partial,omitempty"`
}

// Recommendation is one thing to do.
type Recommendation struct {
	Text string `json:"text"`
	// For is the hypothesis target key it follows from ("" for all).
	For string `json:"for,omitempty"`
}

// RequestKind is evidence the incident can ask an engine for.
type RequestKind string

const (
	RequestValidation RequestKind = "greyhound_validation"
	RequestCapture    RequestKind = "kair_capture"
	RequestProfile    RequestKind = "sysom_profile"
)

// Request is one piece of evidence to ask for.
type Request struct {
	Kind RequestKind `json:"kind"`
	// Ranks to involve (suspects, and for a profile a healthy peer).
	Ranks  []int  `json:"ranks,omitempty"`
	Reason string `json:"reason"`
	// Asked: an action for it is in the audit log (it is outstanding).
	Asked bool `json:"asked"`
}

// Action is an audit line: something laggard did (or declined to do) for
// an incident.
type Action struct {
	// Incident is the incident it was taken for.
	Incident string      `json:"incident"`
	AtNS     int64       `json:"at_ns"`
	Kind     RequestKind `json:"kind"`
	Ranks    []int       `json:"ranks,omitempty"`
	// Result: "requested", "started", "done", "skipped", "failed".
	Result string `json:"result"`
	// Ref is the engine's id for it (capture id, validation id, window).
	Ref  string `json:"ref,omitempty"`
	Text string `json:"text"`
}

// Windows are the stretches engine views open on.
type Windows struct {
	Before Span `json:"before"`
	During Span `json:"during"`
	After  Span `json:"after"`
}

// Related is another job's incident that blamed the same machine.
type Related struct {
	Incident string  `json:"incident"`
	Job      string  `json:"job"`
	Target   string  `json:"target"` // "host:h7" or a link
	AtNS     int64   `json:"at_ns"`
	Text     string  `json:"text"`
	Lost     float64 `json:"lost_seconds"`
}

// Query selects incidents (the manager's List, the API's list route).
type Query struct {
	// Job: one job's incidents ("" every job's).
	Job string
	// State: only incidents in this state ("" any).
	State State
	// SinceNS: only incidents unresolved or updated at or after it.
	SinceNS int64
	// Limit: at most this many.
	Limit int
}
