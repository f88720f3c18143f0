package signal

import (
	"fmt"
	"hash/fnv"
	"time"
)

// An incarnation is one launch of a job: the processes started together
// (the first submission, a torchelastic restart, a Slurm requeue, a
// resubmission under the same job id, a re-run of `python train.py`). The
// server numbers a job's incarnations 0, 1, 2, … in the order they appear
// and keeps each one's data apart: a restarted job re-sending steps 0–29
// never overwrites the first incarnation's. The rules are in
// docs/design/roles-and-runs.md; the catalog applies them.

// Process identifies the client process behind a registration or a rank
// join. All fields are optional: a registration without them (an older
// client, a file import) belongs to the job's newest incarnation.
type Process struct {
	// Launch is what every process of one launch shares when its launcher
	// says so (torchelastic run id and restart count, a Slurm job, step
	// and restart count, LAGGARD_INCARNATION); "" when no launcher does.
	Launch string `json:"launch,omitempty"`
	// ID is unique to one process start (host, pid, start time).
	ID string `json:"process,omitempty"`
	// StartNS is the process's start, ns since the Unix epoch, on the
	// client's clock.
	StartNS int64 `json:"started_ns,omitempty"`
}

// MaxProcessBytes bounds Process.Launch and Process.ID.
const MaxProcessBytes = 128

// Validate checks the process fields and names the offending one.
func (p Process) Validate() error {
	switch {
	case len(p.Launch) > MaxProcessBytes:
		return FieldErrorf("launch", "is %d bytes, the limit is %d", len(p.Launch), MaxProcessBytes)
	case len(p.ID) > MaxProcessBytes:
		return FieldErrorf("process", "is %d bytes, the limit is %d", len(p.ID), MaxProcessBytes)
	case p.StartNS < 0:
		return FieldErrorf("started_ns", "must be >= 0, got %d", p.StartNS)
	}
	return nil
}

// Key is the process's 64-bit fingerprint (FNV-1a of its ID), 0 when it
// has no ID. The catalog stores fingerprints, not ids, per rank.
func (p Process) Key() uint64 {
	if p.ID == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(p.ID))
	k := h.Sum64()
	if k == 0 {
		k = 1 // 0 means "no process"
	}
	return k
}

// Why an incarnation was opened.
type IncarnationReason string

const (
	// IncFirst: the job's first incarnation.
	IncFirst IncarnationReason = "first"
	// IncRestart: a rank of the newest incarnation registered from a new
	// process (an elastic or manual restart without a launcher id).
	IncRestart IncarnationReason = "restart"
	// IncLaunch: the launcher announced a new launch (its run id or restart
	// count changed).
	IncLaunch IncarnationReason = "launch"
	// IncRunID: a registration came with another run id (a resubmission).
	IncRunID IncarnationReason = "run_id"
	// IncLayout: a new process registered another world size, stage list
	// or accumulation factor.
	IncLayout IncarnationReason = "layout"
)

// Layout is what an incarnation's stored vectors mean: the shape a job
// registration and its rank joins declare. An incarnation keeps its own
// when a later one changed it (elastic world size, an edited stage list).
type Layout struct {
	WorldSize    int               `json:"world_size"`
	Schema       Schema            `json:"schema"`
	Accumulation int               `json:"accumulation,omitempty"`
	Ranks        []Rank            `json:"ranks,omitempty"`
	Groups       []GroupSchema     `json:"groups,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
}

// Incarnation is one launch of a job.
type Incarnation struct {
	N int `json:"n"`
	// Opened is when the server saw its first registration.
	Opened time.Time `json:"opened"`
	// StartNS is the earliest process start its processes reported (client
	// clocks), 0 when none did; Start falls back to Opened.
	StartNS int64             `json:"start_ns,omitempty"`
	Reason  IncarnationReason `json:"reason"`
	// Detail says what opened it, in words ("rank 3 registered from a new
	// process", "run_id a → b").
	Detail string `json:"detail,omitempty"`
	Launch string `json:"launch,omitempty"`
	RunID  string `json:"run_id,omitempty"`
	// Layout is set once a later incarnation changed the job's layout; nil
	// means the job's current one.
	Layout *Layout `json:"layout,omitempty"`
	// Procs holds, for the newest incarnations only, each rank's process
	// fingerprint (Process.Key) as 8 big-endian bytes per rank: how a
	// restart is told from a re-registration. Never shown by the API.
	Procs []byte `json:"procs,omitempty"`
}

// Start is the incarnation's start on the clients' clock when they sent
// one, else the server's.
func (in *Incarnation) Start() int64 {
	if in.StartNS > 0 {
		return in.StartNS
	}
	return in.Opened.UnixNano()
}

// Incarnation bounds.
const (
	// MaxIncarnation is the highest incarnation number: it takes the top
	// 16 bits of a stored step (stagevec.Ordinal).
	MaxIncarnation = 1<<16 - 1
	// KeepIncarnations is how many incarnations a job's registration
	// describes; older ones keep their stored data (and their number) but
	// lose their description.
	KeepIncarnations = 256
)

// Current returns the job's newest incarnation number (0 for a job
// registered before incarnations existed).
func (j *Job) Current() int {
	if n := len(j.Incarnations); n > 0 {
		return j.Incarnations[n-1].N
	}
	return 0
}

// Incarnation returns incarnation n's description, ok=false when the job
// does not describe it (never opened, or older than KeepIncarnations).
// A job without descriptions has one implicit incarnation 0.
func (j *Job) Incarnation(n int) (Incarnation, bool) {
	if len(j.Incarnations) == 0 {
		if n == 0 {
			return Incarnation{N: 0, Opened: j.Created, Reason: IncFirst, RunID: j.RunID}, true
		}
		return Incarnation{}, false
	}
	lo, hi := 0, len(j.Incarnations)
	for lo < hi {
		m := (lo + hi) / 2
		if j.Incarnations[m].N < n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(j.Incarnations) && j.Incarnations[lo].N == n {
		return j.Incarnations[lo], true
	}
	return Incarnation{}, false
}

// TimeSpan is incarnation n's span on the clients' clock, [from, to) in ns
// since the epoch: from its start to the next described incarnation's
// (to = MaxInt64 for the newest). Time-keyed signals (collective calls,
// CPU stacks, OS counters) belong to the incarnation whose span holds
// them.
func (j *Job) TimeSpan(n int) (from, to int64) {
	const end = int64(^uint64(0) >> 1)
	in, ok := j.Incarnation(n)
	if !ok {
		return 0, end
	}
	from, to = in.Start(), end
	if len(j.Incarnations) == 0 || n == j.Incarnations[0].N {
		from = 0 // the oldest described incarnation holds everything before it
	}
	for _, o := range j.Incarnations {
		if o.N > n {
			to = o.Start()
			break
		}
	}
	return from, to
}

// At returns the job as incarnation n saw it: its layout when a later
// incarnation changed the job's. The result shares memory with j; treat
// it as read-only.
func (j *Job) At(n int) *Job {
	in, ok := j.Incarnation(n)
	if !ok || in.Layout == nil {
		return j
	}
	c := *j
	l := in.Layout
	c.WorldSize, c.Schema, c.Accumulation, c.Ranks, c.Groups = l.WorldSize, l.Schema, l.Accumulation, l.Ranks, l.Groups
	if l.Labels != nil {
		c.Labels = l.Labels
	}
	if in.RunID != "" {
		c.RunID = in.RunID
	}
	return &c
}

// LayoutOf is j's current layout (a snapshot sharing j's slices).
func (j *Job) LayoutOf() *Layout {
	return &Layout{WorldSize: j.WorldSize, Schema: j.Schema, Accumulation: j.Accumulation, Ranks: j.Ranks, Groups: j.Groups, Labels: j.Labels}
}

// Label renders the incarnation for headlines: "incarnation 2 (restart,
// 2026-12-07 14:03:11Z)".
func (in *Incarnation) Label() string {
	return fmt.Sprintf("incarnation %d (%s, %s)", in.N, in.Reason, time.Unix(0, in.Start()).UTC().Format("2006-01-02 15:04:05Z"))
}

// Public is j as the API shows it: without the per-rank process
// fingerprints the catalog keeps. It shares memory with j.
func (j *Job) Public() *Job {
	if len(j.Incarnations) == 0 {
		return j
	}
	c := *j
	c.Incarnations = make([]Incarnation, len(j.Incarnations))
	for i, in := range j.Incarnations {
		in.Procs = nil
		c.Incarnations[i] = in
	}
	return &c
}
