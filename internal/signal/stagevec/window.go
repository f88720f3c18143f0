package stagevec

import "github.com/laggard-dev/laggard/internal/signal"

// Window is the dense rank×step×stage matrix an analysis engine consumes.
// It is built by stagefrontier.Assembler from stored StageVectors after the
// contract checks, accumulation expansion and prefetch reassignment.
//
// Layout is step-major so engines can stream one step at a time:
// D[(t*R+r)*S+s] with T=len(Steps), R=len(Ranks), S=len(Stages).
type Window struct {
	JobID  string        `json:"job_id"`
	Schema signal.Schema `json:"schema"`
	Ranks  []signal.Rank `json:"ranks"`
	// Steps are the logical step ids in the window, ascending.
	Steps []int64 `json:"steps"`
	// Stages is the effective ordered stage list: the schema stages, or for
	// accumulation factor k>1 the schema stages expanded by accumulation
	// index ("data.next_wait#0", ...), StageFrontier §3.
	Stages []string `json:"stages"`
	// Group maps each effective stage to the schema stage index it is
	// reported under once the frontier has been taken.
	Group []int `json:"group"`
	// D holds durations in ms, len T*R*S.
	D []float64 `json:"-"`
	// Wall holds rank-local step wall time, len T*R.
	Wall []float64 `json:"-"`
	// Closure holds the signed closure error W − Σ explicit, len T*R.
	Closure []float64 `json:"-"`
	// Present marks (t,r) cells that were reported, len T*R. Nil means all.
	Present []bool `json:"-"`
	// Probes holds side-channel columns keyed by probe name.
	Probes map[string]*ProbeColumn `json:"-"`
	// Dropped is the client-reported drop count inside the window.
	Dropped int64 `json:"dropped"`
	// Nested is the count of rejected nested ordered spans in the window.
	Nested int64 `json:"nested"`
	// Findings are contract-check results found while assembling (App. A
	// Table 11).
	Findings []Finding `json:"findings,omitempty"`
}

// Finding is one contract-check result: Check names the check (a
// constant of the engine that ran it), Detail says what was found.
type Finding struct {
	Check  string `json:"check"`
	Detail string `json:"detail"`
}

// Has reports whether a finding of check is present.
func (w *Window) Has(check string) bool {
	for _, f := range w.Findings {
		if f.Check == check {
			return true
		}
	}
	return false
}

// ProbeColumn is a sparse side-channel column over the window, len T*R.
type ProbeColumn struct {
	// Value is the ready sample in ms, NaN where none was ready.
	Value []float64
	// Sampled marks cells where a sample was attempted (ready or not).
	Sampled []bool
}

// Dims returns T, R, S.
func (w *Window) Dims() (t, r, s int) { return len(w.Steps), len(w.Ranks), len(w.Stages) }

// At returns d[t,r,s].
func (w *Window) At(t, r, s int) float64 { return w.D[(t*len(w.Ranks)+r)*len(w.Stages)+s] }

// Row returns the S durations of rank r at step t (a view, not a copy).
func (w *Window) Row(t, r int) []float64 {
	S := len(w.Stages)
	i := (t*len(w.Ranks) + r) * S
	return w.D[i : i+S : i+S]
}

// NewWindow allocates a zeroed dense window for the given shape.
func NewWindow(jobID string, schema signal.Schema, ranks []signal.Rank, steps []int64, stages []string, group []int) *Window {
	T, R, S := len(steps), len(ranks), len(stages)
	return &Window{
		JobID: jobID, Schema: schema, Ranks: ranks, Steps: steps, Stages: stages, Group: group,
		D: make([]float64, T*R*S), Wall: make([]float64, T*R), Closure: make([]float64, T*R),
	}
}
