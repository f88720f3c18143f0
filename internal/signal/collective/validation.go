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
	AtStep     int64     `json:"at_step"`
	DeadlineMS int64     `json:"deadline_ms"`
	GEMM       *GEMMTest `json:"gemm,omitempty"`
	P2P        *P2PTest  `json:"p2p,omitempty"`
	// CreatedNS is the server clock when the plan was published; the
	// deadline runs from it.
	CreatedNS int64 `json:"created_ns,omitempty"`
	// Suspects are the degraded groups' ranks that moved the controller
	// (evidence for the report; clients ignore it).
	Suspects []int `json:"suspects,omitempty"`
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
}

// P2PResult is one send or receive the rank took part in.
type P2PResult struct {
	Pass  int       `json:"pass"`
	Src   int       `json:"src"`
	Dst   int       `json:"dst"`
	Bytes int64     `json:"bytes"`
	MS    []float64 `json:"ms"`
}
