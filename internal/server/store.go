package server

import (
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Store is what the server needs from internal/store. *store.Store
// implements it; tests substitute fakes (a blocking writer for
// backpressure, a failing one for error paths).
type Store interface {
	PutJob(*signal.Job) error
	Job(id string) (*signal.Job, error)
	Jobs() ([]*signal.Job, error)
	// AppendMany stores several batches atomically and durably in one
	// write; the ingest writer's group commit.
	AppendMany([]store.Batch) error
	// Scan calls fn for every stored vector of job with from <= step <= to
	// in (step, rank, micro) order; v is reused between calls.
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
	Stats(job string) (store.JobStats, error)
	// LastSteps returns the step range covering the job's last n stored
	// steps; ok is false when the job has no vectors.
	LastSteps(job string, n int) (from, to int64, ok bool, err error)
}

var _ Store = (*store.Store)(nil)
