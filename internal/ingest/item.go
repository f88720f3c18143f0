package ingest

import (
	"errors"
	"sync/atomic"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Item is the payload of one ingest request: one signal kind's decoded,
// validated records. Every kind goes through one Queue, so the byte
// budget, each job's FIFO and share, and the group commits are shared: a
// job's collective flood waits behind its own share like a vector flood,
// and does not get a second budget beside it.
type Item struct {
	// Exactly one is set.
	Vectors     []stagevec.Vector
	Collectives *collective.Batch
	Stacks      *stack.Batch  // one node window's CPU stacks (SysOM-AI)
	OSStats     *osstat.Batch // one node window's OS points (SysOM-AI)

	// Stored is what the commit reported for this request; the commit
	// sets it before the request is acknowledged, so read it only after
	// the request's done channel delivered nil.
	Stored Stored

	// Parts, if set, is shared by the parts of one posted batch (a large
	// batch is queued in parts): once one part is refused, the later
	// ones are not stored (ErrPartRefused), so a refused batch stores at
	// most the parts before the one refused.
	Parts *Parts
}

// Parts is the shared state of one batch's parts (Item.Parts).
type Parts struct{ refused atomic.Bool }

// Refuse marks the batch refused.
func (p *Parts) Refuse() {
	if p != nil {
		p.refused.Store(true)
	}
}

// Refused reports whether a part of the batch was refused.
func (p *Parts) Refused() bool { return p != nil && p.refused.Load() }

// ErrPartRefused is the error of a part not stored because an earlier
// part of its batch was refused.
var ErrPartRefused = errors.New("not stored: an earlier part of this batch was refused")

// Stored is a commit's report on one request: records new to the store,
// communicator reports merged, and records that were already stored (a
// resent batch).
type Stored struct {
	Records, Comms, Duplicates int
	// Samples are the stack samples (or OS points) in the new records of
	// a stack (OS) request; Records counts its records.
	Samples int
}

// Records is the number of records the item holds (the queue's Items).
func (it *Item) Records() int {
	if it.Collectives != nil {
		return len(it.Collectives.Calls) + len(it.Collectives.Comms)
	}
	if it.Stacks != nil {
		return len(it.Stacks.Samples)
	}
	if it.OSStats != nil {
		return len(it.OSStats.Points)
	}
	return len(it.Vectors)
}
