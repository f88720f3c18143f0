package analysis

import (
	"fmt"
	"slices"
	"sort"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
)

// Source is what analysis reads. *store.Store implements it; MemSource
// serves files the CLI loaded. A sharded deployment implements it over
// its storage client, so analysis never changes.
type Source interface {
	Job(id string) (*signal.Job, error)
	// Stats returns the first and last stored step and the vector count.
	Stats(job string) (store.JobStats, error)
	// Scan calls fn for every stored vector of job with from <= step <= to
	// in (step, rank, micro) order; v is reused between calls.
	Scan(job string, from, to int64, fn func(v *stagevec.Vector) error) error
	// LastSteps returns the step range covering the job's last n stored
	// steps; ok is false when the job has no vectors.
	LastSteps(job string, n int) (from, to int64, ok bool, err error)
}

var _ Source = (*store.Store)(nil)

// ErrNotFound is returned (wrapped) for an unknown job; it is
// store.ErrNotFound so callers test one sentinel.
var ErrNotFound = store.ErrNotFound

// MemSource holds one job's vectors in memory, in (step, rank, micro)
// order, for the CLI. Durations share one arena so a large file costs
// little more than its floats.
type MemSource struct {
	job   *signal.Job
	vecs  []stagevec.Vector
	offs  [][2]int // arena range of each vector's durations until Seal
	arena []float64
	stats store.JobStats
}

// NewMemSource returns an empty source for job.
func NewMemSource(job *signal.Job) *MemSource {
	return &MemSource{job: job, stats: store.JobStats{FirstStep: -1, LastStep: -1}}
}

// Add copies v in. Call Seal before reading.
func (m *MemSource) Add(v *stagevec.Vector) error {
	c := *v
	start := len(m.arena)
	m.arena = append(m.arena, v.Durations...)
	c.Durations, c.Probes = nil, nil
	if len(v.Probes) > 0 {
		c.Probes = make(map[string]stagevec.Probe, len(v.Probes))
		for k, p := range v.Probes {
			c.Probes[k] = p
		}
	}
	m.vecs = append(m.vecs, c)
	// Durations point into the arena once it stops growing (Seal).
	m.offs = append(m.offs, [2]int{start, len(m.arena)})
	return nil
}

// Seal sorts the vectors; the latest of duplicate keys wins, as in the
// store.
func (m *MemSource) Seal() {
	for i := range m.vecs {
		o := m.offs[i]
		m.vecs[i].Durations = m.arena[o[0]:o[1]:o[1]]
	}
	m.offs = nil
	sort.SliceStable(m.vecs, func(i, j int) bool { return vecLess(&m.vecs[i], &m.vecs[j]) })
	out := m.vecs[:0]
	for i := range m.vecs {
		if len(out) > 0 && sameKey(&out[len(out)-1], &m.vecs[i]) {
			out[len(out)-1] = m.vecs[i]
			continue
		}
		out = append(out, m.vecs[i])
	}
	m.vecs = slices.Clip(out)
	m.stats = store.JobStats{FirstStep: -1, LastStep: -1, Vectors: int64(len(m.vecs))}
	if len(m.vecs) > 0 {
		m.stats.FirstStep, m.stats.LastStep = m.vecs[0].Step, m.vecs[len(m.vecs)-1].Step
	}
}

func vecLess(a, b *stagevec.Vector) bool {
	if a.Step != b.Step {
		return a.Step < b.Step
	}
	if a.Rank != b.Rank {
		return a.Rank < b.Rank
	}
	return a.Micro < b.Micro
}

func sameKey(a, b *stagevec.Vector) bool {
	return a.Step == b.Step && a.Rank == b.Rank && a.Micro == b.Micro
}

func (m *MemSource) check(id string) error {
	if m.job == nil || id != m.job.ID {
		return fmt.Errorf("job %q: %w", id, ErrNotFound)
	}
	return nil
}

// Job implements Source.
func (m *MemSource) Job(id string) (*signal.Job, error) {
	if err := m.check(id); err != nil {
		return nil, err
	}
	return m.job, nil
}

// Stats implements Source.
func (m *MemSource) Stats(id string) (store.JobStats, error) {
	if err := m.check(id); err != nil {
		return store.JobStats{}, err
	}
	return m.stats, nil
}

// Scan implements Source.
func (m *MemSource) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	if err := m.check(id); err != nil {
		return err
	}
	i := sort.Search(len(m.vecs), func(i int) bool { return m.vecs[i].Step >= from })
	var v stagevec.Vector
	for ; i < len(m.vecs) && m.vecs[i].Step <= to; i++ {
		v = m.vecs[i]
		if err := fn(&v); err != nil {
			return err
		}
	}
	return nil
}

// LastSteps implements Source.
func (m *MemSource) LastSteps(id string, n int) (int64, int64, bool, error) {
	if err := m.check(id); err != nil {
		return 0, 0, false, err
	}
	if len(m.vecs) == 0 || n < 1 {
		return 0, 0, false, nil
	}
	to := m.vecs[len(m.vecs)-1].Step
	from, distinct := to, 1
	for i := len(m.vecs) - 1; i >= 0 && distinct <= n; i-- {
		if s := m.vecs[i].Step; s != from {
			if distinct == n {
				break
			}
			from, distinct = s, distinct+1
		}
	}
	return from, to, true, nil
}

// MemSourceOf returns a sealed source holding vs for job.
func MemSourceOf(job *signal.Job, vs []stagevec.Vector) *MemSource {
	m := NewMemSource(job)
	for i := range vs {
		_ = m.Add(&vs[i]) // Add only copies
	}
	m.Seal()
	return m
}
