package frontier

import (
	"errors"

	"github.com/laggard-dev/laggard/internal/model"
)

// AssembleOptions controls window assembly.
type AssembleOptions struct {
	// FromStep/ToStep bound the window (inclusive); vectors outside are
	// ignored except prefetched data waits that land inside.
	FromStep, ToStep int64
}

// Assembler builds a dense model.Window from stage vectors streamed in any
// order. STUB: replaced by the real implementation.
type Assembler struct {
	job *model.Job
	opt AssembleOptions
}

// NewAssembler returns an assembler for job.
func NewAssembler(job *model.Job, opt AssembleOptions) *Assembler {
	return &Assembler{job: job, opt: opt}
}

// Add folds one vector into the window.
func (a *Assembler) Add(v *model.StageVector) error { return nil }

// Finish returns the assembled window.
func (a *Assembler) Finish() (*model.Window, error) { return nil, errors.New("not implemented") }

// Analyze runs frontier accounting, baselines and the labeler on w.
func Analyze(w *model.Window, cfg Config) (*Report, error) { return nil, errors.New("not implemented") }
