// Package catalog is the registry of jobs and their ranks and the rules
// for changing it: a job registers once and every rank may register it
// again (idempotent merge), a registration that would change what stored
// vectors mean is a conflict, a new run under an old job id is refused,
// and ranks with another role declare their own ordered stage list for
// their role group. It keeps decoded jobs in memory; the store persists
// them.
package catalog

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal"
)

// Store persists jobs; *store.Store implements it.
type Store interface {
	PutJob(*signal.Job) error
	Job(id string) (*signal.Job, error)
	Jobs() ([]*signal.Job, error)
}

// Catalog caches jobs in memory over a Store: every ingest request needs
// its job to validate against, and the store decodes JSON on each read.
// Cached jobs are immutable; updates replace the pointer. Safe for
// concurrent use.
type Catalog struct {
	st  Store
	now func() time.Time
	// wmu serializes read-modify-write updates (registration, rank joins)
	// so two ranks joining at once cannot lose one another.
	wmu sync.Mutex
	mu  sync.RWMutex
	m   map[string]*signal.Job
	// deletes counts Delete calls, so a Get that read the store before a
	// delete does not cache the deleted job afterwards.
	deletes uint64
}

// Deleter is the optional Store method behind Delete; *store.Store
// implements it.
type Deleter interface {
	DeleteJob(id string) error
}

// Pager is the optional Store method behind Page; *store.Store implements
// it, decoding only the page.
type Pager interface {
	JobsPage(after string, limit int) ([]*signal.Job, string, error)
}

// New returns a catalog over st.
func New(st Store) *Catalog {
	return &Catalog{st: st, now: time.Now, m: map[string]*signal.Job{}}
}

// Get returns the job (wrapping the store's not-found error when unknown).
func (c *Catalog) Get(id string) (*signal.Job, error) {
	c.mu.RLock()
	j := c.m[id]
	c.mu.RUnlock()
	if j != nil {
		return j, nil
	}
	c.mu.RLock()
	gen := c.deletes
	c.mu.RUnlock()
	j, err := c.st.Job(id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if cur := c.m[id]; cur != nil { // a concurrent update won
		j = cur
	} else if c.deletes == gen {
		c.m[id] = j
	}
	c.mu.Unlock()
	return j, nil
}

// List returns every job the store holds.
func (c *Catalog) List() ([]*signal.Job, error) { return c.st.Jobs() }

// Page returns up to limit jobs with ids after the cursor after, in id
// order, and the cursor of the next page ("" on the last).
func (c *Catalog) Page(after string, limit int) ([]*signal.Job, string, error) {
	limit = max(limit, 1)
	if p, ok := c.st.(Pager); ok {
		return p.JobsPage(after, limit)
	}
	all, err := c.st.Jobs()
	if err != nil {
		return nil, "", err
	}
	slices.SortFunc(all, func(a, b *signal.Job) int { return strings.Compare(a.ID, b.ID) })
	i, _ := slices.BinarySearchFunc(all, after, func(j *signal.Job, id string) int {
		if j.ID <= id {
			return -1
		}
		return 1
	})
	all = all[i:]
	next := ""
	if len(all) > limit {
		next, all = all[limit-1].ID, all[:limit]
	}
	return all, next, nil
}

// ErrNoDelete: the store cannot delete jobs.
var ErrNoDelete = errors.New("catalog: this store cannot delete jobs")

// Delete removes job id — registration and stored vectors — from the
// store and the cache. Unknown ids return the store's not-found error.
func (c *Catalog) Delete(id string) error {
	d, ok := c.st.(Deleter)
	if !ok {
		if _, err := c.Get(id); err != nil {
			return err // unknown: not-found, as with a store that deletes
		}
		return ErrNoDelete
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := d.DeleteJob(id)
	c.mu.Lock()
	c.deletes++
	delete(c.m, id)
	c.mu.Unlock()
	return err
}

// IdleDeleter is the optional Store method behind DeleteIdle;
// *store.Store implements it.
type IdleDeleter interface {
	DeleteIdleJob(id string, idleSince time.Time) (bool, error)
}

// DeleteIdle deletes job id only if nothing was written to it after
// idleSince (retention: a job that resumed since its age was read stays).
// It reports whether the job was deleted.
func (c *Catalog) DeleteIdle(id string, idleSince time.Time) (bool, error) {
	d, ok := c.st.(IdleDeleter)
	if !ok {
		return false, ErrNoDelete
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	deleted, err := d.DeleteIdleJob(id, idleSince)
	if deleted {
		c.mu.Lock()
		c.deletes++
		delete(c.m, id)
		c.mu.Unlock()
	}
	return deleted, err
}

// put stores j and caches it; callers hold wmu and never modify j later.
func (c *Catalog) put(j *signal.Job) error {
	if err := c.st.PutJob(j); err != nil {
		return err
	}
	c.mu.Lock()
	c.m[j.ID] = j
	c.mu.Unlock()
	return nil
}

// Register records a job registration. created is true for a new job. A
// repeated compatible registration merges into the stored job (name and
// labels follow the latest, probes and ranks accumulate); one that
// contradicts it is a *signal.ConflictError; isNotFound tells the store's
// not-found error apart from failures.
//
// The label ImplicitLabel is reserved for RegisterImplicit: an explicit
// registration carrying it is a *signal.FieldError (it would otherwise be
// taken for an implicit one and its schema silently ignored).
func (c *Catalog) Register(nj *signal.Job, isNotFound func(error) bool) (job *signal.Job, created bool, err error) {
	if _, ok := nj.Labels[ImplicitLabel]; ok {
		return nil, false, signal.FieldErrorf("labels."+ImplicitLabel, "is reserved for jobs the server registers from collective ingest")
	}
	return c.register(nj, isNotFound)
}

// RegisterImplicit is Register for a job collective ingest registers
// (ImplicitJob): it only has to agree with a known job on the world size,
// and changes nothing of it.
func (c *Catalog) RegisterImplicit(id string, world int, schema signal.Schema, isNotFound func(error) bool) (job *signal.Job, created bool, err error) {
	return c.register(ImplicitJob(id, world, schema), isNotFound)
}

func (c *Catalog) register(nj *signal.Job, isNotFound func(error) bool) (job *signal.Job, created bool, err error) {
	nj = cloneJob(nj)
	nj.Ranks = mergeRanks(nil, nj.Ranks)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	old, err := c.Get(nj.ID)
	switch {
	case err != nil && isNotFound(err):
		nj.Created = c.now().UTC().Truncate(time.Millisecond)
		if err := c.put(nj); err != nil {
			return nil, false, err
		}
		return nj, true, nil
	case err != nil:
		return nil, false, err
	}
	if err := conflict(old, nj); err != nil {
		return nil, false, err
	}
	merged := mergeJob(old, nj)
	switch {
	case isImplicit(nj):
		return old, false, nil // collective ingest of a known job changes nothing
	case isImplicit(old):
		merged = adopt(old, nj)
	}
	if !reflect.DeepEqual(old, merged) {
		if err := c.put(merged); err != nil {
			return nil, false, err
		}
	}
	return merged, false, nil
}

// Join records a rank joining job id (idempotent; a rank rejoining after a
// restart replaces its description). A rank that declares its own ordered
// stage list sets its role group's schema; another list for the same
// group is a *signal.ConflictError naming the rank and both order hashes.
func (c *Catalog) Join(id string, rk signal.Rank) (*signal.Job, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	cur, err := c.Get(id) // re-read under the lock
	if err != nil {
		return nil, err
	}
	nj := cloneJob(cur)
	if rk.Schema != nil {
		if err := declare(nj, rk); err != nil {
			return nil, err
		}
		rk.Schema = nil
	}
	nj.Ranks = mergeRanks(nj.Ranks, []signal.Rank{rk})
	if reflect.DeepEqual(nj, cur) {
		return cur, nil
	}
	if err := c.put(nj); err != nil {
		return nil, err
	}
	return nj, nil
}

// declare applies rank rk's own stage list to its role group in j. The
// job's default schema needs no declaration; the first different list a
// group declares becomes the group's.
func declare(j *signal.Job, rk signal.Rank) error {
	g := rk.Role.Group()
	want := rk.Schema.OrderHash()
	i := slices.IndexFunc(j.Groups, func(gs signal.GroupSchema) bool { return gs.Group == g })
	if i >= 0 {
		if have := j.Groups[i].Schema.OrderHash(); have != want {
			return &signal.ConflictError{Field: "schema", Msg: fmt.Sprintf("rank %d declares stage-order hash %s (%s) but its role group %q is registered with %s (%s) by rank %d",
				rk.Rank, want, strings.Join(rk.Schema.Stages, ", "), g, have, strings.Join(j.Groups[i].Schema.Stages, ", "), j.Groups[i].DeclaredBy)}
		}
		j.Groups[i].Schema.Probes = unionProbes(j.Groups[i].Schema.Probes, rk.Schema.Probes)
		return nil
	}
	if want == j.Schema.OrderHash() {
		return nil // the default schema
	}
	// The group's ranks that joined before reported the default schema;
	// their stored vectors would now be read in another order.
	for _, other := range j.Ranks {
		if other.Rank != rk.Rank && other.Role.Group() == g {
			return &signal.ConflictError{Field: "schema", Msg: fmt.Sprintf("rank %d declares stage-order hash %s (%s) for role group %q, whose rank %d already reports the job's default %s",
				rk.Rank, want, strings.Join(rk.Schema.Stages, ", "), g, other.Rank, j.Schema.OrderHash())}
		}
	}
	if len(j.Groups) >= MaxGroups {
		return signal.FieldErrorf("schema", "job %q already has %d role groups with their own stage lists (the limit)", j.ID, MaxGroups)
	}
	s := rk.Schema.Clone()
	j.Groups = append(j.Groups, signal.GroupSchema{Group: g, Schema: s, DeclaredBy: rk.Rank})
	return nil
}

// MaxGroups bounds the role groups with their own stage lists per job.
const MaxGroups = 256

// ImplicitLabel marks a job that collective ingest registered because it
// was unknown: a pure-NCCL job's agent posts calls with the world size
// alone and has no stage schema to declare.
const ImplicitLabel = "laggard.implicit"

// ImplicitJob is the registration collective ingest makes for unknown job
// id: its world size, the default stage schema and ImplicitLabel. An
// explicit registration (the Python client's PUT) later replaces its
// schema, accumulation, name and labels instead of conflicting with them.
func ImplicitJob(id string, world int, schema signal.Schema) *signal.Job {
	return &signal.Job{ID: id, WorldSize: world, Schema: schema, Labels: map[string]string{ImplicitLabel: "collectives"}}
}

func isImplicit(j *signal.Job) bool { return j.Labels[ImplicitLabel] != "" }

// adopt is an explicit registration nj of implicitly registered job old:
// nj's declaration wins, what old accumulated (ranks, creation) stays.
// Stage vectors are not expected before the explicit registration (the
// client registers before it ships), so no stored vector changes meaning.
func adopt(old, nj *signal.Job) *signal.Job {
	m := cloneJob(nj)
	m.Created = old.Created
	m.Ranks = mergeRanks(old.Ranks, nj.Ranks)
	if m.RunID == "" {
		m.RunID = old.RunID
	}
	delete(m.Labels, ImplicitLabel)
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	return m
}

// conflict reports a re-registration that changes what stored vectors
// mean: their length (stages), the rank range, the microstep layout — or
// that comes from another run of the job. An implicit registration
// (ImplicitJob) on either side only has to agree on the world size.
func conflict(old, nj *signal.Job) error {
	if (isImplicit(old) || isImplicit(nj)) && old.WorldSize != nj.WorldSize {
		return &signal.ConflictError{Field: "world_size", Msg: fmt.Sprintf("job %q is registered with world_size %d, got %d", old.ID, old.WorldSize, nj.WorldSize)}
	}
	if isImplicit(old) || isImplicit(nj) {
		return conflictRun(old, nj)
	}
	if err := conflictRun(old, nj); err != nil {
		return err
	}
	switch {
	case old.WorldSize != nj.WorldSize:
		return &signal.ConflictError{Field: "world_size", Msg: fmt.Sprintf("job %q is registered with world_size %d, got %d", old.ID, old.WorldSize, nj.WorldSize)}
	case old.Schema.Version != nj.Schema.Version:
		return &signal.ConflictError{Field: "schema.version", Msg: fmt.Sprintf("job %q is registered with schema %q, got %q", old.ID, old.Schema.Version, signal.Clip(nj.Schema.Version))}
	case old.Schema.OrderHash() != nj.Schema.OrderHash():
		return &signal.ConflictError{Field: "schema.stages", Msg: fmt.Sprintf("job %q is registered with a different ordered stage list %v (order hash %s, got %s)", old.ID, old.Schema.Stages, old.Schema.OrderHash(), nj.Schema.OrderHash())}
	case max(old.Accumulation, 1) != max(nj.Accumulation, 1):
		return &signal.ConflictError{Field: "accumulation", Msg: fmt.Sprintf("job %q is registered with accumulation %d, got %d", old.ID, old.Accumulation, nj.Accumulation)}
	}
	return nil
}

// conflictRun refuses a registration from another run of the job.
func conflictRun(old, nj *signal.Job) error {
	if old.RunID != "" && nj.RunID != "" && old.RunID != nj.RunID {
		return &signal.ConflictError{Field: "run_id", Msg: fmt.Sprintf("job %q belongs to run %q (registered %s); this is run %q. A job id names one run: use a new job id (LAGGARD_JOB) for a new run",
			old.ID, signal.Clip(old.RunID), old.Created.Format(time.RFC3339), signal.Clip(nj.RunID))}
	}
	return nil
}

// mergeJob returns old updated by a compatible re-registration: name and
// labels follow the latest registration, probes and ranks accumulate, and
// the run id is set once.
func mergeJob(old, nj *signal.Job) *signal.Job {
	m := cloneJob(old)
	if nj.Name != "" {
		m.Name = nj.Name
	}
	if nj.Labels != nil {
		m.Labels = maps.Clone(nj.Labels)
	}
	if m.RunID == "" {
		m.RunID = nj.RunID
	}
	m.Schema.Probes = unionProbes(m.Schema.Probes, nj.Schema.Probes)
	m.Ranks = mergeRanks(m.Ranks, nj.Ranks)
	return m
}

func unionProbes(have, add []string) []string {
	for _, p := range add {
		if !slices.Contains(have, p) {
			have = append(have, p)
		}
	}
	return have
}

func cloneJob(j *signal.Job) *signal.Job {
	c := *j
	c.Schema = j.Schema.Clone()
	c.Ranks = slices.Clone(j.Ranks)
	c.Labels = maps.Clone(j.Labels)
	c.Groups = slices.Clone(j.Groups)
	for i := range c.Groups {
		c.Groups[i].Schema = c.Groups[i].Schema.Clone()
	}
	return &c
}

// mergeRanks returns ranks updated by add, sorted by rank id with one entry
// per rank, so once every rank has joined Ranks[r].Rank == r (the index
// signal.Job documents). ranks is not modified; declared schemas are not
// kept on ranks (they live in Job.Groups).
func mergeRanks(ranks, add []signal.Rank) []signal.Rank {
	out := slices.Clone(ranks)
	for _, rk := range add {
		rk.Schema = nil
		i, found := slices.BinarySearchFunc(out, rk.Rank, func(a signal.Rank, r int) int { return a.Rank - r })
		if found {
			out[i] = rk
		} else {
			out = slices.Insert(out, i, rk)
		}
	}
	return out
}
