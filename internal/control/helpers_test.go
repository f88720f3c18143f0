package control

import (
	"errors"
	"io"
	"log/slog"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

func isField(err error, field string) bool {
	var fe *signal.FieldError
	return errors.As(err, &fe) && fe.Field == field
}

// storeJobs lists a store's jobs (Jobs).
type storeJobs struct{ *store.Store }

func (s storeJobs) List() ([]*signal.Job, error) { return s.Jobs() }

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
