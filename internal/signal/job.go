package signal

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Role is a rank's place in the parallelism layout. Group ids are opaque
// integers; -1 means unknown. Two ranks are comparable for a global frontier
// only when their roles agree on everything except the data-parallel index
// (StageFrontier App. A Table 11, "role metadata sufficient").
type Role struct {
	DP int `json:"dp"`
	TP int `json:"tp"`
	PP int `json:"pp"`
	EP int `json:"ep"`
	// Name is a free-form role such as "dense", "expert" or "pp-stage-3".
	Name string `json:"name,omitempty"`
}

// UnknownRole is the role of a rank that reported none.
var UnknownRole = Role{DP: -1, TP: -1, PP: -1, EP: -1}

// DefaultGroup is the role group of ranks that declare neither a pipeline
// stage nor a role name.
const DefaultGroup = "default"

// Group is the rank's comparable role group: ranks whose pipeline stage
// and role name agree do the same ordered work, so one frontier may be
// taken across them; ranks of different groups may not be merged (App. A
// Table 11, "role metadata sufficient for the chosen group"). The data-,
// tensor- and expert-parallel indexes do not split groups.
func (r Role) Group() string {
	g := r.Name
	if r.PP >= 0 {
		if g != "" {
			g += "/"
		}
		g += "pp" + strconv.Itoa(r.PP)
	}
	if g == "" {
		return DefaultGroup
	}
	return g
}

// Rank describes one training process.
type Rank struct {
	Rank      int    `json:"rank"`
	Host      string `json:"host,omitempty"`
	LocalRank int    `json:"local_rank"`
	Role      Role   `json:"role"`
	// Schema is the rank's own ordered stage list, when its role group
	// reports different stages than the job's default schema. It is only
	// read from a rank join; the catalog keeps it once per group
	// (Job.Groups) and stores the rank without it.
	Schema *Schema `json:"schema,omitempty"`
}

// GroupSchema is the ordered stage list one role group declared.
type GroupSchema struct {
	Group  string `json:"group"`
	Schema Schema `json:"schema"`
	// DeclaredBy is the first rank that declared it.
	DeclaredBy int `json:"declared_by"`
}

// Job is a registered training job.
type Job struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	WorldSize int    `json:"world_size"`
	Schema    Schema `json:"schema"`
	// Accumulation is the gradient-accumulation factor (microsteps per
	// optimizer step); 0 or 1 means none.
	Accumulation int `json:"accumulation,omitempty"`
	// Ranks known so far, indexed by rank id; may be shorter than WorldSize
	// while ranks are still joining.
	Ranks []Rank `json:"ranks,omitempty"`
	// Groups are the role groups that declared their own ordered stage
	// list; every other rank reports Schema.
	Groups []GroupSchema     `json:"groups,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// RunID identifies the run of the newest incarnation, e.g. torchrun's
	// TORCHELASTIC_RUN_ID. A registration with another run id opens a new
	// incarnation rather than mixing two runs' vectors.
	RunID   string    `json:"run_id,omitempty"`
	Created time.Time `json:"created"`
	// Incarnations describes the job's launches, oldest first (at most
	// KeepIncarnations); the server keeps them, a registration may not set
	// them. The other fields above describe the newest one; an older one
	// whose layout differed keeps its own (Incarnation.Layout, Job.At).
	Incarnations []Incarnation `json:"incarnations,omitempty"`
}

// RankInfo returns the description of rank r, if it joined.
func (j *Job) RankInfo(r int) (Rank, bool) {
	i, ok := slices.BinarySearchFunc(j.Ranks, r, func(a Rank, r int) int { return a.Rank - r })
	if !ok {
		return Rank{Rank: r, Role: UnknownRole}, false
	}
	return j.Ranks[i], true
}

// GroupOf returns the role group of rank r. A rank that never joined
// (its join was lost, or it reports before joining) is counted in the
// only role group of the joined ranks when that group reports the job's
// default schema — a homogeneous job stays one group — and in
// DefaultGroup otherwise. Use Grouping for many ranks.
func (j *Job) GroupOf(r int) string {
	if rk, ok := j.RankInfo(r); ok {
		return rk.Role.Group()
	}
	return j.unjoinedGroup()
}

func (j *Job) unjoinedGroup() string {
	g := ""
	for _, rk := range j.Ranks {
		switch k := rk.Role.Group(); {
		case g == "":
			g = k
		case k != g:
			return DefaultGroup
		}
	}
	if g == "" || j.GroupSchema(g).OrderHash() != j.Schema.OrderHash() {
		return DefaultGroup
	}
	return g
}

// Grouping returns the role group of every rank 0..WorldSize-1 (GroupOf
// for all ranks at once).
func (j *Job) Grouping() []string {
	out := make([]string, j.WorldSize)
	unjoined := j.unjoinedGroup()
	for i := range out {
		out[i] = unjoined
	}
	for _, rk := range j.Ranks {
		if rk.Rank >= 0 && rk.Rank < len(out) {
			out[rk.Rank] = rk.Role.Group()
		}
	}
	return out
}

// GroupSchema returns the schema role group g reports: its declared one,
// else the job's default.
func (j *Job) GroupSchema(g string) Schema {
	for _, gs := range j.Groups {
		if gs.Group == g {
			return gs.Schema
		}
	}
	return j.Schema
}

// SchemaFor returns the ordered stage list rank r reports: its role
// group's, and the job's default before it joined.
func (j *Job) SchemaFor(r int) Schema {
	if len(j.Groups) == 0 {
		return j.Schema
	}
	rk, ok := j.RankInfo(r)
	if !ok {
		return j.Schema
	}
	return j.GroupSchema(rk.Role.Group())
}

var jobIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks a job registration and names the offending field.
func (j *Job) Validate() error {
	if len(j.ID) > MaxJobIDBytes {
		return FieldErrorf("id", "is %d bytes, the limit is %d", len(j.ID), MaxJobIDBytes)
	}
	if !jobIDRe.MatchString(j.ID) {
		return FieldErrorf("id", "must match %s", jobIDRe)
	}
	if len(j.Name) > MaxNameBytes {
		return FieldErrorf("name", "is %d bytes, the limit is %d", len(j.Name), MaxNameBytes)
	}
	if err := validateLabels(j.Labels); err != nil {
		return err
	}
	if j.WorldSize < 1 || j.WorldSize > MaxWorldSize {
		return FieldErrorf("world_size", "must be in [1, %d], got %d", MaxWorldSize, j.WorldSize)
	}
	if j.Accumulation < 0 || j.Accumulation > MaxAccumulation {
		return FieldErrorf("accumulation", "must be in [0, %d], got %d", MaxAccumulation, j.Accumulation)
	}
	if err := j.Schema.Validate(); err != nil {
		return err
	}
	if len(j.RunID) > 128 {
		return FieldErrorf("run_id", "longer than 128 bytes")
	}
	if len(j.Groups) > MaxGroupSchemas {
		return FieldErrorf("groups", "at most %d role groups with their own stage lists, got %d", MaxGroupSchemas, len(j.Groups))
	}
	if len(j.Ranks) > j.WorldSize {
		return FieldErrorf("ranks", "%d ranks for world_size %d", len(j.Ranks), j.WorldSize)
	}
	for i, g := range j.Groups {
		if err := g.Schema.Validate(); err != nil {
			return fmt.Errorf("groups[%d]: %w", i, err)
		}
	}
	for i, r := range j.Ranks {
		if err := r.Validate(j.WorldSize); err != nil {
			return fmt.Errorf("ranks[%d]: %w", i, err)
		}
	}
	return nil
}

// Validate checks one rank description against the job's world size.
func (r *Rank) Validate(world int) error {
	if r.Rank < 0 || r.Rank >= world {
		return FieldErrorf("rank", "must be in [0, %d), got %d", world, r.Rank)
	}
	if r.LocalRank < 0 {
		return FieldErrorf("local_rank", "must be >= 0, got %d", r.LocalRank)
	}
	if len(r.Host) > 255 {
		return FieldErrorf("host", "longer than 255 bytes")
	}
	if len(r.Role.Name) > 128 {
		return FieldErrorf("role.name", "longer than 128 bytes")
	}
	if r.Schema != nil {
		if err := r.Schema.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// validateLabels bounds a job's labels: they are kept in memory with the
// job and shown in every listing (D9: 1 MiB labels took the server to
// 2.4 GB).
func validateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return FieldErrorf("labels", "at most %d labels, got %d", MaxLabels, len(labels))
	}
	for k, v := range labels {
		if k == "" || len(k) > MaxLabelKeyBytes {
			return FieldErrorf("labels", "label name %q must be 1..%d bytes", Clip(k), MaxLabelKeyBytes)
		}
		if len(v) > MaxLabelValueBytes {
			return FieldErrorf("labels."+Clip(k), "value is %d bytes, the limit is %d", len(v), MaxLabelValueBytes)
		}
	}
	return nil
}

// Limits that protect the server from absurd input. MaxWorldSize bounds
// what a registration may declare (1<<20 ranks, beyond any cluster); what
// it costs is bounded elsewhere: reports by stored cells, the tail index
// by a fixed size, the rank list by the store's per-job size limit.
const (
	MaxWorldSize    = 1 << 20
	MaxAccumulation = 1024
	MaxStages       = 64

	MaxJobIDBytes      = 128
	MaxNameBytes       = 256
	MaxLabels          = 64
	MaxLabelKeyBytes   = 128
	MaxLabelValueBytes = 1024
	MaxGroupSchemas    = 256
)
