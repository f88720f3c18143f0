package greyhound

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Group is one communication group's traffic of one kind: a communicator
// and the (op, bytes) it moves (§4.3: "each communication group within a
// cluster handles an identical data transfer volume").
type Group struct {
	Comm  string `json:"comm"`
	Ranks []int  `json:"ranks"`
}

// Member is a group inside its comparable cluster.
type Member struct {
	Comm  string `json:"comm"`
	Ranks []int  `json:"ranks"`
	// ExecMS is the median over the window's instances of the instance's
	// execution time (the median over its members of device time, or of
	// host time when no device events were captured).
	ExecMS    float64 `json:"exec_ms"`
	Instances int     `json:"instances"`
	Ratio     float64 `json:"ratio"`
	Degraded  bool    `json:"degraded"`
	// Device is true when ExecMS comes from device (CUDA event) brackets.
	Device bool `json:"device"`
}

// Cluster is a comparable cluster (§4.3): groups with the same op, bytes
// and group size. RefMS is the healthy reference its members are judged
// against: the median of its faster half (MedianMS is the plain median).
type Cluster struct {
	Op       collective.Op `json:"op"`
	Bytes    int64         `json:"bytes"`
	Size     int           `json:"size"`
	MedianMS float64       `json:"median_ms"`
	RefMS    float64       `json:"ref_ms"`
	Members  []Member      `json:"members"`
	// Comparable is false for a cluster of one group: nothing to compare
	// it with (Note says so).
	Comparable bool   `json:"comparable"`
	Note       string `json:"note,omitempty"`
}

type groupKey struct {
	comm  string
	op    collective.Op
	bytes int64
}

type instKey struct {
	comm string
	seq  int64
}

// CompareGroups performs cross-group comparison (§4.3) over calls (any
// ranks, typically the latest profiling window): a group is degraded when
// its execution time exceeds its cluster's healthy reference by more than
// DegradedRel. The paper says the median; the reference is the median of
// the faster half, so degraded groups cannot make themselves the
// reference (of two groups the median is their mean, and one slowed 15 %
// would read 7 % over it). Clusters are sorted by op, bytes, size;
// members by comm.
func CompareGroups(calls []collective.Call, comms []collective.Comm, cfg Config) []Cluster {
	size := map[string]int{}
	ranksOf := map[string][]int{}
	for _, c := range comms {
		if c.Size > 0 {
			size[c.ID] = c.Size
		}
		if len(c.Ranks) > 0 {
			ranksOf[c.ID] = c.Ranks
		}
	}
	// Per instance: members' durations.
	type inst struct {
		dev, host []float64
	}
	insts := map[groupKey]map[int64]*inst{}
	seen := map[string]map[int]bool{}
	for i := range calls {
		c := &calls[i]
		k := groupKey{c.Comm, c.Op, c.Bytes}
		m := insts[k]
		if m == nil {
			m = map[int64]*inst{}
			insts[k] = m
		}
		in := m[c.Seq]
		if in == nil {
			in = &inst{}
			m[c.Seq] = in
		}
		if c.DevEndNS > c.DevStartNS && c.DevStartNS > 0 {
			in.dev = append(in.dev, float64(c.DevEndNS-c.DevStartNS)/1e6)
		}
		if c.ReturnNS >= c.EnterNS {
			in.host = append(in.host, float64(c.ReturnNS-c.EnterNS)/1e6)
		}
		if seen[c.Comm] == nil {
			seen[c.Comm] = map[int]bool{}
		}
		seen[c.Comm][c.Rank] = true
	}
	type ckey struct {
		op    collective.Op
		bytes int64
		size  int
	}
	clusters := map[ckey]*Cluster{}
	for k, m := range insts {
		var dev, host []float64
		for _, in := range m {
			if len(in.dev) > 0 {
				dev = append(dev, medianSigned(in.dev))
			}
			if len(in.host) > 0 {
				host = append(host, medianSigned(in.host))
			}
		}
		mem := Member{Comm: k.comm, Instances: len(m)}
		// Device time when every instance has it; NCCL's host bracket is
		// the enqueue only.
		if len(dev) > 0 && len(dev) >= len(host) {
			mem.ExecMS, mem.Device = medianSigned(dev), true
		} else if len(host) > 0 {
			mem.ExecMS = medianSigned(host)
		}
		mem.Ranks = ranksOf[k.comm]
		if len(mem.Ranks) == 0 {
			for r := range seen[k.comm] {
				mem.Ranks = append(mem.Ranks, r)
			}
			slices.Sort(mem.Ranks)
		}
		sz := size[k.comm]
		if sz == 0 {
			sz = len(mem.Ranks)
		}
		ck := ckey{k.op, k.bytes, sz}
		cl := clusters[ck]
		if cl == nil {
			cl = &Cluster{Op: k.op, Bytes: k.bytes, Size: sz}
			clusters[ck] = cl
		}
		cl.Members = append(cl.Members, mem)
	}
	out := make([]Cluster, 0, len(clusters))
	for _, cl := range clusters {
		slices.SortFunc(cl.Members, func(a, b Member) int { return cmp.Compare(a.Comm, b.Comm) })
		xs := make([]float64, len(cl.Members))
		for i, m := range cl.Members {
			xs[i] = m.ExecMS
		}
		cl.RefMS = fasterHalfMedian(xs)
		cl.MedianMS = medianSigned(xs)
		cl.Comparable = len(cl.Members) >= 2
		if !cl.Comparable {
			cl.Note = fmt.Sprintf("only one %s group of %d bytes and size %d: nothing to compare it with", cl.Op, cl.Bytes, cl.Size)
		}
		for i := range cl.Members {
			m := &cl.Members[i]
			if cl.RefMS > 0 {
				m.Ratio = m.ExecMS / cl.RefMS
			}
			m.Degraded = cl.Comparable && cl.RefMS > 0 && m.ExecMS > cl.RefMS*(1+cfg.DegradedRel)
		}
		out = append(out, *cl)
	}
	slices.SortFunc(out, func(a, b Cluster) int {
		return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(a.Bytes, b.Bytes), cmp.Compare(a.Size, b.Size))
	})
	return out
}

// Suspects returns the degraded groups of clusters (deduplicated by comm).
func Suspects(clusters []Cluster) []Group {
	var out []Group
	seen := map[string]bool{}
	for _, cl := range clusters {
		for _, m := range cl.Members {
			if m.Degraded && !seen[m.Comm] {
				seen[m.Comm] = true
				out = append(out, Group{Comm: m.Comm, Ranks: m.Ranks})
			}
		}
	}
	return out
}

// AllGroups returns every group of clusters (deduplicated by comm, in
// cluster order): the suspects when no comparison is possible.
func AllGroups(clusters []Cluster) []Group {
	var out []Group
	seen := map[string]bool{}
	for _, cl := range clusters {
		for _, m := range cl.Members {
			if !seen[m.Comm] && len(m.Ranks) > 0 {
				seen[m.Comm] = true
				out = append(out, Group{Comm: m.Comm, Ranks: m.Ranks})
			}
		}
	}
	return out
}

// LateInstance is one collective instance's entry lateness: for each rank
// of Lateness.Ranks, its enter time minus the earliest member's (ms); null
// for ranks not in the instance. The rank that enters last is the one the
// others wait for.
type LateInstance struct {
	Comm   string        `json:"comm"`
	Seq    int64         `json:"seq"`
	Op     collective.Op `json:"op"`
	EndNS  int64         `json:"end_ns"`
	LateMS []*float64    `json:"late_ms"`
}

// Lateness is the rank × instance entry-lateness matrix.
type Lateness struct {
	Ranks     []int          `json:"ranks"`
	Instances []LateInstance `json:"instances"`
}

// EntryLateness builds the lateness matrix of the latest maxInst
// instances with at least two members seen.
func EntryLateness(calls []collective.Call, maxInst int) Lateness {
	type inst struct {
		op    collective.Op
		enter map[int]int64
		end   int64
		first int64
	}
	m := map[instKey]*inst{}
	rankSet := map[int]bool{}
	for i := range calls {
		c := &calls[i]
		k := instKey{c.Comm, c.Seq}
		in := m[k]
		if in == nil {
			in = &inst{op: c.Op, enter: map[int]int64{}, first: c.EnterNS}
			m[k] = in
		}
		if old, ok := in.enter[c.Rank]; !ok || c.EnterNS < old {
			in.enter[c.Rank] = c.EnterNS
		}
		in.first = min(in.first, c.EnterNS)
		in.end = max(in.end, c.ReturnNS, c.DevEndNS)
	}
	keys := make([]instKey, 0, len(m))
	for k, in := range m {
		if len(in.enter) >= 2 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b instKey) int {
		return cmp.Or(cmp.Compare(m[a].first, m[b].first), cmp.Compare(a.comm, b.comm), cmp.Compare(a.seq, b.seq))
	})
	if maxInst >= 0 && len(keys) > maxInst {
		keys = keys[len(keys)-maxInst:]
	}
	for _, k := range keys {
		for r := range m[k].enter {
			rankSet[r] = true
		}
	}
	out := Lateness{Ranks: make([]int, 0, len(rankSet)), Instances: make([]LateInstance, 0, len(keys))}
	for r := range rankSet {
		out.Ranks = append(out.Ranks, r)
	}
	slices.Sort(out.Ranks)
	pos := map[int]int{}
	for i, r := range out.Ranks {
		pos[r] = i
	}
	for _, k := range keys {
		in := m[k]
		li := LateInstance{Comm: k.comm, Seq: k.seq, Op: in.op, EndNS: in.end, LateMS: make([]*float64, len(out.Ranks))}
		for r, e := range in.enter {
			v := float64(e-in.first) / 1e6
			li.LateMS[pos[r]] = &v
		}
		out.Instances = append(out.Instances, li)
	}
	return out
}
