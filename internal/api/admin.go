package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/laggard-dev/laggard/internal/catalog"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/store"
)

// retryAfterDiskFull is the Retry-After of a 507 for a full disk: space
// comes back on an operator's or the retention's time scale, not in a
// second.
const retryAfterDiskFull = "30"

// deleteJob deletes a job — its registration and every stored vector —
// durably: 204, or 404 for an unknown job. It needs the admin scope
// (internal/server's routeAccess). OnDelete, when set, is told (the
// background diagnosis forgets the job, the compactor reclaims its space).
func (a *API) deleteJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	err := a.d.Catalog.Delete(id)
	if err != nil {
		status := statusOf(err)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = fmt.Errorf("unknown job %q: %w", signal.Clip(id), store.ErrNotFound)
		case errors.Is(err, catalog.ErrNoDelete):
			status = http.StatusNotImplemented
		}
		a.fail(w, r, status, err)
		return
	}
	a.d.Log.Info("job deleted", "job", id, "remote", r.RemoteAddr)
	if a.d.OnDelete != nil {
		a.d.OnDelete(id)
	}
	w.WriteHeader(http.StatusNoContent)
}
