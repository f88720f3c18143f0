package collective

// The validation protocol's wire types (Greyhound §4.3; docs/format/
// greyhound.md): the plan the server publishes to every rank of a job and
// the result each rank posts back. One definition for the server
// (internal/analysis), the node agent and the tests; the engine keeps its
// own in-memory model and internal/analysis converts.

// ValidationPlan is what GET /api/v1/jobs/{id}/validation answers.
type ValidationPlan struct {
	ID string `json:"id"`
	// AtStep: every rank runs the plan at the end of this step (all ranks
	// reach it: training is synchronous).
	AtStep     int64 `json:"at_step"`
	DeadlineMS int64 `json:"deadline_ms"`
	// BudgetMS caps the benchmarks once every rank agreed to run them
	// (the training pause beyond the agreement); 0: no cap but the
	// deadline. Clients stop where they are when it is spent.
	BudgetMS int64     `json:"budget_ms,omitempty"`
	GEMM     *GEMMTest `json:"gemm,omitempty"`
	P2P      *P2PTest  `json:"p2p,omitempty"`
	// CreatedNS is the server clock when the plan was published; the
	// deadline runs from it.
	CreatedNS int64 `json:"created_ns,omitempty"`
	// Suspects are the degraded groups' ranks that moved the controller
	// (evidence for the report; clients ignore it).
	Suspects []int `json:"suspects,omitempty"`
	// Incarnation is the job launch the plan was made for: only its
	// processes run it and post results (docs/design/roles-and-runs.md).
	Incarnation int `json:"incarnation,omitempty"`
}

// GEMMTest is the computation validation: a GEMM of n×n per rank.
type GEMMTest struct {
	Ranks []int  `json:"ranks"`
	N     int    `json:"n"`
	Dtype string `json:"dtype"`
	Reps  int    `json:"reps"`
}

// P2PTest is the communication validation: O(1) passes of simultaneous
// sends (Fig. 10), each message size Reps times.
type P2PTest struct {
	SizesBytes []int64  `json:"sizes_bytes"`
	Reps       int      `json:"reps"`
	Passes     [][]Link `json:"passes"`
	// PassBudgetMS: a pass that has run this long skips its remaining
	// repetitions and sizes (every rank together); StopRatio: a pass also
	// stops after a size on which its slowest transfer's best repetition
	// took this many times its fastest transfer's worst (that link is
	// proven slow). 0: off.
	PassBudgetMS int64   `json:"pass_budget_ms,omitempty"`
	StopRatio    float64 `json:"stop_ratio,omitempty"`
}

// Link is one directed send of a pass.
type Link struct {
	Src int `json:"src"`
	Dst int `json:"dst"`
}

// ValidationResult is one rank's POST body.
type ValidationResult struct {
	Rank   int         `json:"rank"`
	Missed bool        `json:"missed"`
	GEMMMS []float64   `json:"gemm_ms,omitempty"`
	P2P    []P2PResult `json:"p2p,omitempty"`
	Error  string      `json:"error,omitempty"`
	// PausedFromNS/PausedToNS: when this rank stopped training for the
	// plan and resumed (Unix ns, the clock of its calls' enter_ns); the
	// server leaves the iterations in between out of change-point
	// detection. Optional.
	PausedFromNS int64 `json:"paused_from_ns,omitempty"`
	PausedToNS   int64 `json:"paused_to_ns,omitempty"`
}

// P2PResult is one send or receive the rank took part in.
type P2PResult struct {
	Pass  int       `json:"pass"`
	Src   int       `json:"src"`
	Dst   int       `json:"dst"`
	Bytes int64     `json:"bytes"`
	MS    []float64 `json:"ms"`
}
