// Package catalog is the registry of jobs and their ranks and the rules
// for changing it: a job registers once and every rank may register it
// again (idempotent merge), a registration that would change what stored
// vectors mean is a conflict, a restart, resubmission or new launch opens
// a new incarnation (incarnation.go), and ranks with another role declare
// their own ordered stage list for their role group. It keeps decoded jobs in memory; the store persists
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

// Register records a job registration by process p and returns the job
// after it, the incarnation p belongs to (see incarnation.go), and
// whether the job is new. A repeated compatible registration merges into
// its incarnation (name and labels follow the latest, probes and ranks
// accumulate); a registration from a new launch, another run id, or a new
// process declaring another layout opens a new incarnation; one that
// contradicts its incarnation otherwise is a *signal.ConflictError;
// isNotFound tells the store's not-found error apart from failures.
//
// The label ImplicitLabel is reserved for RegisterImplicit: an explicit
// registration carrying it is a *signal.FieldError (it would otherwise be
// taken for an implicit one and its schema silently ignored).
func (c *Catalog) Register(nj *signal.Job, p signal.Process, isNotFound func(error) bool) (job *signal.Job, inc int, created bool, err error) {
	if _, ok := nj.Labels[ImplicitLabel]; ok {
		return nil, 0, false, signal.FieldErrorf("labels."+ImplicitLabel, "is reserved for jobs the server registers from collective ingest")
	}
	return c.register(nj, p, isNotFound)
}

// RegisterImplicit is Register for a job collective ingest registers
// (ImplicitJob): it only has to agree with a known job on the world size,
// and changes nothing of it.
func (c *Catalog) RegisterImplicit(id string, world int, schema signal.Schema, isNotFound func(error) bool) (job *signal.Job, created bool, err error) {
	job, _, created, err = c.register(ImplicitJob(id, world, schema), signal.Process{}, isNotFound)
	return job, created, err
}

func (c *Catalog) register(nj *signal.Job, p signal.Process, isNotFound func(error) bool) (job *signal.Job, inc int, created bool, err error) {
	nj = cloneJob(nj)
	nj.Ranks = mergeRanks(nil, nj.Ranks)
	nj.Incarnations = nil // the server's to keep
	c.wmu.Lock()
	defer c.wmu.Unlock()
	old, err := c.Get(nj.ID)
	switch {
	case err != nil && isNotFound(err):
		nj.Created = c.now().UTC().Truncate(time.Millisecond)
		nj.Incarnations = []signal.Incarnation{{N: 0, Opened: nj.Created, StartNS: p.StartNS, Reason: signal.IncFirst, Launch: p.Launch, RunID: nj.RunID}}
		if err := c.put(nj); err != nil {
			return nil, 0, false, err
		}
		return nj, 0, true, nil
	case err != nil:
		return nil, 0, false, err
	}
	if isImplicit(nj) {
		// Collective ingest of a known job changes nothing; it only has to
		// agree on the world size.
		if err := conflict(old, nj); err != nil {
			return nil, 0, false, err
		}
		return old, old.Current(), false, nil
	}
	j := cloneJob(old)
	ensureIncarnations(j)
	i, why, err := place(j, nj, -1, p)
	if err != nil {
		return nil, 0, false, err
	}
	var merged *signal.Job
	if why != nil {
		if i, err = open(j, nj, p, why, c.now().UTC().Truncate(time.Millisecond)); err != nil {
			return nil, 0, false, err
		}
		j.Ranks = mergeRanks(nil, nj.Ranks)
		merged = j
	} else if i == len(j.Incarnations)-1 {
		merged = mergeJob(j, nj)
		if isImplicit(old) {
			merged = adopt(j, nj)
		}
		if in := &merged.Incarnations[i]; in.RunID == "" {
			in.RunID = merged.RunID
		}
	} else {
		merged = j // a late registration of an older incarnation's process
	}
	in := &merged.Incarnations[i]
	if p.Launch != "" && adoptable(in) {
		in.Launch = p.Launch
	}
	noteStart(in, p)
	if !reflect.DeepEqual(old, merged) {
		if err := c.put(merged); err != nil {
			return nil, 0, false, err
		}
	}
	return merged, in.N, false, nil
}

// Join records rank rk of job id joining from process p (idempotent; a
// rank rejoining from the same process replaces its description, one
// rejoining from a new process opens a new incarnation — a restart) and
// returns the job after it and the incarnation p belongs to. A rank that
// declares its own ordered stage list sets its role group's schema;
// another list for the same group is a *signal.ConflictError naming the
// rank and both order hashes.
func (c *Catalog) Join(id string, rk signal.Rank, p signal.Process) (*signal.Job, int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	cur, err := c.Get(id) // re-read under the lock
	if err != nil {
		return nil, 0, err
	}
	nj := cloneJob(cur)
	ensureIncarnations(nj)
	i, why, err := place(nj, nil, rk.Rank, p)
	if err != nil {
		return nil, 0, err
	}
	if why != nil {
		if i, err = open(nj, nil, p, why, c.now().UTC().Truncate(time.Millisecond)); err != nil {
			return nil, 0, err
		}
	}
	in := &nj.Incarnations[i]
	world := nj.WorldSize
	if i == len(nj.Incarnations)-1 {
		if rk.Schema != nil {
			if err := declare(nj, rk); err != nil {
				return nil, 0, err
			}
		}
		nj.Ranks = mergeRanks(nj.Ranks, []signal.Rank{rk})
	} else if in.Layout != nil {
		// A late join of an older incarnation's process: its own rank list.
		l := *in.Layout
		world = l.WorldSize
		if l.Ranks != nil && rk.Rank < world {
			l.Ranks = mergeRanks(l.Ranks, []signal.Rank{rk})
		}
		in.Layout = &l
	}
	bindProc(in, rk.Rank, world, p.Key())
	if p.Launch != "" && adoptable(in) {
		in.Launch = p.Launch
	}
	noteStart(in, p)
	if reflect.DeepEqual(nj, cur) {
		return cur, in.N, nil
	}
	if err := c.put(nj); err != nil {
		return nil, 0, err
	}
	return nj, in.N, nil
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
// nj's declaration wins, what old accumulated (ranks, creation,
// incarnations) stays.
// Stage vectors are not expected before the explicit registration (the
// client registers before it ships), so no stored vector changes meaning.
func adopt(old, nj *signal.Job) *signal.Job {
	m := cloneJob(nj)
	m.Created = old.Created
	m.Incarnations = cloneIncarnations(old.Incarnations)
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
// mean: their length (stages), the rank range, the microstep layout. An
// implicit registration (ImplicitJob) on either side only has to agree on
// the world size. (Another run id is not a conflict: it opens a new
// incarnation, see place.)
func conflict(old, nj *signal.Job) error {
	if (isImplicit(old) || isImplicit(nj)) && old.WorldSize != nj.WorldSize {
		return &signal.ConflictError{Field: "world_size", Msg: fmt.Sprintf("job %q is registered with world_size %d, got %d", old.ID, old.WorldSize, nj.WorldSize)}
	}
	if isImplicit(old) || isImplicit(nj) {
		return nil
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
	c.Incarnations = cloneIncarnations(j.Incarnations)
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
