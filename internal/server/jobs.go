package server

import (
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

// jobCache keeps decoded jobs in memory: every ingest request needs its
// job to validate against, and the store decodes JSON on each Job call.
// Cached jobs are immutable; updates replace the pointer.
type jobCache struct {
	st Store
	// wmu serializes read-modify-write updates (registration, rank joins)
	// so two ranks joining at once cannot lose one another.
	wmu sync.Mutex
	mu  sync.RWMutex
	m   map[string]*signal.Job
}

func newJobCache(st Store) *jobCache { return &jobCache{st: st, m: map[string]*signal.Job{}} }

func (c *jobCache) get(id string) (*signal.Job, error) {
	c.mu.RLock()
	j := c.m[id]
	c.mu.RUnlock()
	if j != nil {
		return j, nil
	}
	j, err := c.st.Job(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if cur := c.m[id]; cur != nil { // a concurrent update won
		j = cur
	} else {
		c.m[id] = j
	}
	c.mu.Unlock()
	return j, nil
}

// put stores j and caches it; callers hold wmu and never modify j later.
func (c *jobCache) put(j *signal.Job) error {
	if err := c.st.PutJob(j); err != nil {
		return err
	}
	c.mu.Lock()
	c.m[j.ID] = j
	c.mu.Unlock()
	return nil
}

// jobView is a job with its stored-vector summary, as GET /api/v1/jobs
// returns it.
type jobView struct {
	*signal.Job
	FirstStep int64 `json:"first_step"`
	LastStep  int64 `json:"last_step"`
	Vectors   int64 `json:"vectors"`
}

func (s *Server) view(j *signal.Job) (jobView, error) {
	st, err := s.st.Stats(j.ID)
	if err != nil {
		return jobView{}, err
	}
	return jobView{Job: j, FirstStep: st.FirstStep, LastStep: st.LastStep, Vectors: st.Vectors}, nil
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := s.st.Jobs()
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	out := make([]jobView, 0, len(jobs))
	for _, j := range jobs {
		v, err := s.view(j)
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out})
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	j, status, err := s.job(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	v, err := s.view(j)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// handlePutJob registers a job: 201 when new, 200 when the same
// registration arrives again (every rank of a job sends it), 409 when it
// contradicts the stored one in a way that would make stored vectors
// meaningless.
func (s *Server) handlePutJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	nj, err := laggardv1.DecodeJob(r.Body, id, s.cfg.MaxBodyBytes)
	if err != nil {
		s.fail(w, r, decodeStatus(err), err)
		return
	}
	nj.Ranks = mergeRanks(nil, nj.Ranks)
	s.jobs.wmu.Lock()
	defer s.jobs.wmu.Unlock()
	old, err := s.jobs.get(id)
	switch {
	case isNotFound(err):
		nj.Created = time.Now().UTC().Truncate(time.Millisecond)
		if err := s.jobs.put(nj); err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		s.log.Info("job registered", "job", id, "world_size", nj.WorldSize, "stages", len(nj.Schema.Stages), "accumulation", nj.Accumulation)
		writeJSON(w, http.StatusCreated, nj)
		return
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if err := conflict(old, nj); err != nil {
		s.fail(w, r, http.StatusConflict, err)
		return
	}
	merged := mergeJob(old, nj)
	if !reflect.DeepEqual(old, merged) {
		if err := s.jobs.put(merged); err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, merged)
}

// conflict reports a re-registration that changes what stored vectors
// mean: their length (stages), the rank range or the microstep layout.
func conflict(old, nj *signal.Job) error {
	switch {
	case old.WorldSize != nj.WorldSize:
		return &signal.FieldError{Field: "world_size", Msg: fmt.Sprintf("job %q is registered with world_size %d, got %d", old.ID, old.WorldSize, nj.WorldSize)}
	case old.Schema.Version != nj.Schema.Version:
		return &signal.FieldError{Field: "schema.version", Msg: fmt.Sprintf("job %q is registered with schema %q, got %q", old.ID, old.Schema.Version, nj.Schema.Version)}
	case old.Schema.OrderHash() != nj.Schema.OrderHash():
		return &signal.FieldError{Field: "schema.stages", Msg: fmt.Sprintf("job %q is registered with a different ordered stage list %v", old.ID, old.Schema.Stages)}
	case max(old.Accumulation, 1) != max(nj.Accumulation, 1):
		return &signal.FieldError{Field: "accumulation", Msg: fmt.Sprintf("job %q is registered with accumulation %d, got %d", old.ID, old.Accumulation, nj.Accumulation)}
	}
	return nil
}

// mergeJob returns old updated by a compatible re-registration: name and
// labels follow the latest registration, probes and ranks accumulate.
func mergeJob(old, nj *signal.Job) *signal.Job {
	m := cloneJob(old)
	if nj.Name != "" {
		m.Name = nj.Name
	}
	if nj.Labels != nil {
		m.Labels = maps.Clone(nj.Labels)
	}
	for _, p := range nj.Schema.Probes {
		if !slices.Contains(m.Schema.Probes, p) {
			m.Schema.Probes = append(m.Schema.Probes, p)
		}
	}
	m.Ranks = mergeRanks(m.Ranks, nj.Ranks)
	return m
}

func cloneJob(j *signal.Job) *signal.Job {
	c := *j
	c.Schema.Stages = slices.Clone(j.Schema.Stages)
	c.Schema.Probes = slices.Clone(j.Schema.Probes)
	c.Ranks = slices.Clone(j.Ranks)
	c.Labels = maps.Clone(j.Labels)
	return &c
}

// mergeRanks returns ranks updated by add, sorted by rank id with one entry
// per rank, so once every rank has joined Ranks[r].Rank == r (the index
// signal.Job documents). ranks is not modified.
func mergeRanks(ranks, add []signal.Rank) []signal.Rank {
	out := slices.Clone(ranks)
	for _, rk := range add {
		i, found := slices.BinarySearchFunc(out, rk.Rank, func(a signal.Rank, r int) int { return a.Rank - r })
		if found {
			out[i] = rk
		} else {
			out = slices.Insert(out, i, rk)
		}
	}
	return out
}

// handleRank records a rank joining (idempotent; a rank rejoining after a
// restart replaces its description).
func (s *Server) handleRank(w http.ResponseWriter, r *http.Request) {
	job, status, err := s.job(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, status, err)
		return
	}
	rk, err := laggardv1.DecodeRank(r.Body, job, s.cfg.MaxBodyBytes)
	if err != nil {
		s.fail(w, r, decodeStatus(err), err)
		return
	}
	s.jobs.wmu.Lock()
	defer s.jobs.wmu.Unlock()
	cur, err := s.jobs.get(job.ID) // re-read under the lock
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	ranks := mergeRanks(cur.Ranks, []signal.Rank{*rk})
	if !reflect.DeepEqual(ranks, cur.Ranks) {
		nj := cloneJob(cur)
		nj.Ranks = ranks
		if err := s.jobs.put(nj); err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		s.log.Debug("rank joined", "job", job.ID, "rank", rk.Rank, "host", rk.Host)
	}
	writeJSON(w, http.StatusOK, rk)
}
