package incident

// Capabilities say what evidence the job can be asked for (the escalation
// policy asks only for what can arrive).
type Capabilities struct {
	// Validation: the job's clients poll Greyhound validation plans.
	Validation bool `json:"validation"`
	// Capture: the job's clients take KAIR profiler captures.
	Capture bool `json:"capture"`
	// Profile: a node agent ships CPU stacks for the job's ranks (SysOM).
	Profile bool `json:"profile"`
	// Ranks is the job's rank count (a healthy peer for a profile window).
	Ranks int `json:"ranks"`
}

// Input is everything Fuse reads for one job.
type Input struct {
	Job string
	// Evidence is the job's working set, in any order, re-reports included.
	Evidence []Evidence
	// Actions are the audit lines control recorded.
	Actions []Action
	// Prior are the job's incidents as last published: an incident that
	// overlaps one keeps its ID and DetectedNS; a resolved one past its
	// hold-down absorbs evidence inside its window (an engine re-reporting
	// an old onset never opens a second incident for it).
	Prior []Incident
	// NowNS is the server time of this fusion (hold-down, DetectedNS).
	NowNS int64
	Caps  Capabilities
}

// Fuse returns all of the job's incidents, oldest first: the fusion rules
// of docs/design/incidents.md applied to the evidence set. It depends on
// the set only (order and re-sends change nothing), except that incidents
// overlapping Prior ones keep their IDs.
func Fuse(in Input, cfg Config) []Incident {
	return nil // implementation lands next
}
