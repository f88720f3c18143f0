package stagefrontier

import (
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// AssembleOptions controls window assembly.
type AssembleOptions struct {
	// FromStep/ToStep bound the window (inclusive); vectors outside are
	// ignored except prefetched data waits that land inside. 0/0 means
	// every step; ToStep 0 with FromStep > 0 means no upper bound.
	FromStep, ToStep int64
	// Group restricts the window to one role group's ranks and its
	// declared schema (signal.Role.Group); "" takes every rank with the
	// job's default schema, leaving out ranks whose group declared
	// another ordered stage list.
	Group string
	// MaxCells, when > 0, bounds the window by what it stores: Add and
	// Finish fail with *TooLargeError once its steps with data × ranks
	// carried × effective stages exceed it (the span of steps and the
	// declared world size cost nothing).
	MaxCells int64
}

// Assembler builds a dense stagevec.Window from stage vectors streamed in any
// order (see assemble.go). It is not safe for concurrent use.
type Assembler struct {
	asm
}

// NewAssembler returns an assembler for job. The job is not copied and
// must not change while the assembler is in use.
func NewAssembler(job *signal.Job, opt AssembleOptions) *Assembler {
	a := &Assembler{}
	a.init(job, opt)
	return a
}

// Add validates v against the job and folds it into the window. v is not
// retained. Vectors outside the window are ignored (their prefetched data
// wait is still charged when it lands inside).
func (a *Assembler) Add(v *stagevec.Vector) error { return a.add(v) }

// Finish returns the assembled window with its contract findings. The
// assembler must not be used afterwards.
func (a *Assembler) Finish() (*stagevec.Window, error) { return a.finish() }

// LeftOut is, after Finish, how many ranks of the window's group that sent
// nothing in it the window does not carry (it carries at most
// MaxAbsentRanks of them; the missing-ranks finding counts them all).
func (a *Assembler) LeftOut() int { return a.leftOut }

// Analyze runs frontier accounting, the two gain baselines, the five
// comparison summaries and the labeler on w. w is read only.
func Analyze(w *stagevec.Window, cfg Config) (*Report, error) { return analyze(w, cfg) }
