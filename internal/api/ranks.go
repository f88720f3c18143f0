package api

import (
	"net/http"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// joinRank records a rank joining (idempotent; a rank rejoining after a
// restart replaces its description). A rank may declare its own ordered
// stage list for its role group; another list for the same group is 409
// naming the rank and both order hashes.
func (a *API) joinRank(w http.ResponseWriter, r *http.Request) {
	job, ok := a.job(w, r)
	if !ok {
		return
	}
	if !a.requireJSON(w, r) {
		return
	}
	rk, p, err := laggardv1.DecodeRank(r.Body, job, a.d.MaxBodyBytes)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	declared := rk.Schema != nil
	j, inc, err := a.d.Catalog.Join(job.ID, *rk, p)
	if err != nil {
		a.fail(w, r, statusOf(err), err)
		return
	}
	a.noteIncarnation(j, job.Current())
	a.d.Log.Debug("rank joined", "job", job.ID, "rank", rk.Rank, "host", rk.Host, "group", rk.Role.Group(), "declared_schema", declared, "incarnation", inc)
	writeJSON(w, http.StatusOK, struct {
		*signal.Rank
		Incarnation int `json:"incarnation"`
	}{rk, inc})
}
