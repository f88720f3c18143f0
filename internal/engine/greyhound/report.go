package greyhound

// Report is Greyhound-Detect's JSON report (contract §5; API
// GET /api/v1/jobs/{id}/greyhound, `laggard greyhound`, the UI).
type Report struct {
	Job          string            `json:"job"`
	GeneratedNS  int64             `json:"generated_ns"`
	Telemetry    Telemetry         `json:"telemetry"`
	Iteration    Iteration         `json:"iteration"`
	ChangePoints []ChangePointView `json:"changepoints"`
	Detector     string            `json:"detector"`
	Groups       []Cluster         `json:"groups"`
	Lateness     Lateness          `json:"lateness"`
	Controller   ControllerView    `json:"controller"`
	Validation   []ValidationView  `json:"validation"`
	Verdict      Verdict           `json:"verdict"`
	// Incarnation is the launch of a restarted job whose calls the report
	// reads (-2: all of them), and IncarnationNote says so in words when
	// the job restarted. The server sets them (docs/design/roles-and-runs.md);
	// the engine reads whatever calls it is given.
	Incarnation     int    `json:"incarnation,omitempty"`
	IncarnationNote string `json:"incarnation_note,omitempty"`
}

// Telemetry says how much was seen; Limited marks dropped calls or
// missing ranks (conclusions then carry less weight).
type Telemetry struct {
	Calls   int   `json:"calls"`
	Ranks   int   `json:"ranks"`
	Dropped int64 `json:"dropped"`
	Limited bool  `json:"limited"`
}

// RankPeriod is one rank's detected period.
type RankPeriod struct {
	Rank   int     `json:"rank"`
	Period int     `json:"period"`
	ACF    float64 `json:"acf"`
	OK     bool    `json:"ok"`
	Reason string  `json:"reason,omitempty"`
}

// IterationMethod says where the iteration series came from.
type IterationMethod string

const (
	MethodACF  IterationMethod = "acf"
	MethodNone IterationMethod = "none"
)

// Iteration is the job's iteration-time view (the reference rank's series).
type Iteration struct {
	Period        int             `json:"period"`
	ACF           float64         `json:"acf"`
	Method        IterationMethod `json:"method"`
	Rank          int             `json:"rank"`
	Ranks         []RankPeriod    `json:"ranks"`
	Series        []Iter          `json:"series"`
	MedianMS      float64         `json:"median_ms"`
	TruthErrorPct *float64        `json:"truth_error_pct,omitempty"`
	Note          string          `json:"note,omitempty"`
}

// ChangeKind is onset (iteration time rose) or relief (it fell).
type ChangeKind string

const (
	KindOnset  ChangeKind = "onset"
	KindRelief ChangeKind = "relief"
)

// ChangePointView is one change point of the iteration-time series.
type ChangePointView struct {
	Index    int        `json:"index"`
	EndNS    int64      `json:"end_ns"`
	BeforeMS float64    `json:"before_ms"`
	AfterMS  float64    `json:"after_ms"`
	Rel      float64    `json:"rel"`
	Kind     ChangeKind `json:"kind"`
	Prob     float64    `json:"prob"`
	Verified bool       `json:"verified"`
}

// ControllerView is the controller's state as reports show it.
type ControllerView struct {
	Phase   Phase        `json:"phase"`
	SinceNS int64        `json:"since_ns"`
	History []Transition `json:"history"`
	Plan    *Plan        `json:"plan,omitempty"`
}

// ValidationState of a run.
type ValidationState string

const (
	ValidationPending ValidationState = "pending"
	ValidationDone    ValidationState = "done"
	ValidationExpired ValidationState = "expired"
)

// ValidationView is one validation run's judged results.
type ValidationView struct {
	ID    string          `json:"id"`
	State ValidationState `json:"state"`
	// When it ran: the plan's at_step, its publication (0: unknown) and
	// deadline, and the pause the ranks reported (earliest start to latest
	// end on the calls' clock; 0: none reported).
	AtStep       int64      `json:"at_step"`
	CreatedNS    int64      `json:"created_ns,omitempty"`
	DeadlineMS   int64      `json:"deadline_ms,omitempty"`
	PausedFromNS int64      `json:"paused_from_ns,omitempty"`
	PausedToNS   int64      `json:"paused_to_ns,omitempty"`
	GEMM         []GEMMView `json:"gemm"`
	Links        []LinkView `json:"links"`
	Verdict      Verdict    `json:"verdict"`
}
