package signal

import (
	"fmt"
	"regexp"
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

// Rank describes one training process.
type Rank struct {
	Rank      int    `json:"rank"`
	Host      string `json:"host,omitempty"`
	LocalRank int    `json:"local_rank"`
	Role      Role   `json:"role"`
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
	Ranks   []Rank            `json:"ranks,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Created time.Time         `json:"created"`
}

var jobIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks a job registration and names the offending field.
func (j *Job) Validate() error {
	if !jobIDRe.MatchString(j.ID) {
		return FieldErrorf("id", "must match %s", jobIDRe)
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
	return nil
}

// Limits that protect the server from absurd input.
const (
	MaxWorldSize    = 1 << 20
	MaxAccumulation = 1024
	MaxStages       = 64
)
