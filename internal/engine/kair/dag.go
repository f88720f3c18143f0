package kair

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// node is one event instance of the step (§III-B Stage 3: the step DAG's
// vertices). Times are ns since the rank's step start on the aligned clock.
type node struct {
	ev    *optrace.Event
	rank  int // Trace.Rank
	order int32
	start int64
	end   int64
	abs   int64 // start on the aligned clock (Trace.ClockOffsetNS), for arrivals
	// dur is what Stage 2 scores: the duration, or for a joined collective
	// the work part end − max(start, latest arrival); wait is the rest.
	dur  int64
	wait int64
	occ  int32 // occurrence index of (cat, name) on this rank in the step
	grp  int32 // instance group (cat, name, occ) across ranks

	lanePred   int32 // program order on the thread/stream, -1 none
	launchPred int32 // runtime launch → device work (Correlation), -1 none
	coll       int32 // collective instance, -1 none

	scored     bool
	mstart     float64 // group medians of start and scored duration:
	mdur       float64 // the expected values excess time is measured from
	zs, zd, ze float64 // primary method: start, duration, end
	cs, cd     float64 // classic
	rs, rd     float64 // robust
}

// dag is the step DAG of one step over all ranks.
type dag struct {
	step  int64
	nodes []node
	// collLast[c] is the member of collective instance c that arrived last.
	collLast []int32
	groups   int
	// mainTID is, per rank, the host thread of the step's first event
	// (the ProfilerStep range's): the thread the step runs on.
	mainTID map[int]int64
}

type laneKey struct {
	rank int
	dev  bool
	a, b int64
}

type grpKey struct {
	cat  optrace.Category
	name string
}

// collKey names a collective instance: (Comm, Seq), or with comm "" the
// Stage 2 instance group in seq (traces without instance ids).
type collKey struct {
	comm string
	seq  int64
	dev  bool
}

// inDAG: user ranges (ProfilerStep#, record_function) and Python frames
// enclose the ops they time; as DAG nodes they would be their own
// children's predecessors. They still set the step start.
func inDAG(c optrace.Category) bool { return c != optrace.UserRange && c != optrace.Python }

// buildDAG builds the step DAG of step from traces (§III-B Stage 3):
// program order per thread/stream, launch → kernel by correlation id and
// collective instances (Comm, Seq) joining ranks.
func buildDAG(traces []optrace.Trace, step int64) (*dag, error) {
	seen := make(map[int]bool, len(traces))
	n := 0
	for i := range traces {
		t := &traces[i]
		if t.Rank < 0 {
			return nil, signal.FieldErrorf(fmt.Sprintf("traces[%d].rank", i), "%d must be ≥ 0", t.Rank)
		}
		if seen[t.Rank] {
			return nil, signal.FieldErrorf(fmt.Sprintf("traces[%d].rank", i), "rank %d appears twice", t.Rank)
		}
		seen[t.Rank] = true
		for j := range t.Events {
			if t.Events[j].Step == step && inDAG(t.Events[j].Cat) {
				n++
			}
		}
	}
	d := &dag{step: step, nodes: make([]node, 0, n), mainTID: make(map[int]int64, len(traces))}
	for i := range traces {
		t := &traces[i]
		first := len(d.nodes)
		s0, tid0 := int64(0), int64(0)
		have := false
		for j := range t.Events {
			e := &t.Events[j]
			if e.Step != step {
				continue
			}
			if e.DurNS < 0 {
				return nil, signal.FieldErrorf(fmt.Sprintf("traces[%d].events[%d].dur_ns", i, j), "%d must be ≥ 0", e.DurNS)
			}
			if !have || e.StartNS < s0 {
				s0, have = e.StartNS, true
				if e.Device < 0 {
					tid0 = e.TID
				}
			}
			if inDAG(e.Cat) {
				d.nodes = append(d.nodes, node{ev: e, rank: t.Rank, abs: e.StartNS + t.ClockOffsetNS})
			}
		}
		d.mainTID[t.Rank] = tid0
		// Times relative to this rank's step start: the clock offset
		// cancels within a rank, so unaligned traces still compare (§III-B
		// Stage 2 compares instances, not wall times).
		rn := d.nodes[first:]
		for k := range rn {
			rn[k].start = rn[k].ev.StartNS - s0
			rn[k].end = rn[k].start + rn[k].ev.DurNS
			rn[k].dur = rn[k].ev.DurNS
		}
		slices.SortStableFunc(rn, func(a, b node) int { return cmp.Compare(a.start, b.start) })
	}
	for k := range d.nodes {
		d.nodes[k].order = int32(k)
		d.nodes[k].lanePred, d.nodes[k].launchPred, d.nodes[k].coll = -1, -1, -1
	}
	d.groupInstances()
	d.lanes()
	d.launches()
	d.collectives()
	return d, nil
}

// before is the DAG's total order: every edge goes from an earlier to a
// later node on the same rank, which keeps the graph acyclic.
func (d *dag) before(a, b int32) bool {
	x, y := &d.nodes[a], &d.nodes[b]
	return x.start < y.start || (x.start == y.start && x.order < y.order)
}

func (d *dag) groupInstances() {
	// One string hash per event: (cat, name) → id; the group of the k-th
	// occurrence of id is grpOf[id][k], the same on every rank.
	ids := make(map[grpKey]int32)
	var grpOf [][]int32
	var occ []int32 // per id, on the current rank
	rank := -1
	for k := range d.nodes {
		nd := &d.nodes[k]
		if nd.rank != rank {
			clear(occ)
			rank = nd.rank
		}
		key := grpKey{cat: nd.ev.Cat, name: nd.ev.Name}
		id, ok := ids[key]
		if !ok {
			id = int32(len(grpOf))
			ids[key] = id
			grpOf = append(grpOf, nil)
			occ = append(occ, 0)
		}
		nd.occ = occ[id]
		occ[id]++
		if int(nd.occ) == len(grpOf[id]) {
			grpOf[id] = append(grpOf[id], int32(d.groups))
			d.groups++
		}
		nd.grp = grpOf[id][nd.occ]
	}
}

// lanes sets program-order predecessors: on each host thread or device
// stream, the node that ends last at or before this one starts (nested
// CPU ops — aten::linear around aten::mm — are not each other's
// predecessors; the enclosed op's predecessor is its previous sibling).
func (d *dag) lanes() {
	lanes := make(map[laneKey][]int32)
	for k := range d.nodes {
		e := d.nodes[k].ev
		key := laneKey{rank: d.nodes[k].rank, a: e.PID, b: e.TID}
		if e.Device >= 0 {
			key = laneKey{rank: d.nodes[k].rank, dev: true, a: int64(e.Device), b: e.Stream}
		}
		lanes[key] = append(lanes[key], int32(k))
	}
	for _, l := range lanes {
		byEnd := slices.Clone(l)
		slices.SortFunc(byEnd, func(a, b int32) int {
			return cmp.Or(cmp.Compare(d.nodes[a].end, d.nodes[b].end), cmp.Compare(a, b))
		})
		for _, k := range l {
			s := d.nodes[k].start
			i, _ := slices.BinarySearchFunc(byEnd, s, func(x int32, t int64) int {
				if d.nodes[x].end <= t {
					return -1
				}
				return 1
			})
			for i--; i >= 0; i-- {
				if c := byEnd[i]; c != k && d.before(c, k) {
					d.nodes[k].lanePred = c
					break
				}
			}
		}
	}
}

// launches links a runtime launch to the device work with its
// correlation id on the same rank.
func (d *dag) launches() {
	type ck struct {
		rank int
		corr int64
	}
	rt := make(map[ck]int32)
	for k := range d.nodes {
		if e := d.nodes[k].ev; e.Cat == optrace.Runtime && e.Correlation != 0 {
			rt[ck{d.nodes[k].rank, e.Correlation}] = int32(k)
		}
	}
	if len(rt) == 0 {
		return
	}
	for k := range d.nodes {
		e := d.nodes[k].ev
		if e.Device < 0 || e.Correlation == 0 {
			continue
		}
		if r, ok := rt[ck{d.nodes[k].rank, e.Correlation}]; ok && d.before(r, int32(k)) {
			d.nodes[k].launchPred = r
		}
	}
}

// collectives joins the members of each (Comm, Seq) instance across ranks
// and splits each member's duration into the wait for the latest arrival
// and the work after it.
func (d *dag) collectives() {
	idx := make(map[collKey]int32)
	for k := range d.nodes {
		nd := &d.nodes[k]
		e := nd.ev
		if e.Cat != optrace.Collective {
			continue
		}
		key := collKey{e.Comm, e.Seq, e.Device >= 0}
		if e.Seq < 0 || e.Comm == "" {
			// No instance id in the trace (gloo, and torch before 2.0, do
			// not record one): the k-th call of the same collective op in
			// the step is the same instance on every rank — data-parallel
			// ranks issue their collectives in one program order, which
			// is what the instance groups of Stage 2 already assume.
			key = collKey{"", int64(nd.grp), e.Device >= 0}
		}
		c, ok := idx[key]
		if !ok {
			c = int32(len(d.collLast))
			idx[key] = c
			d.collLast = append(d.collLast, int32(k))
		}
		nd.coll = c
		// Latest arrival on the aligned clock (Feature 4: arrivals of
		// different ranks compare only after alignment); ties go to the
		// lower rank so the choice does not depend on trace order.
		if l := &d.nodes[d.collLast[c]]; nd.abs > l.abs || (nd.abs == l.abs && nd.rank < l.rank) {
			d.collLast[c] = int32(k)
		}
	}
	for k := range d.nodes {
		nd := &d.nodes[k]
		if nd.coll < 0 {
			continue
		}
		last := d.nodes[d.collLast[nd.coll]].abs
		if w := last - nd.abs; w > 0 {
			nd.wait = min(w, nd.ev.DurNS)
			nd.dur = nd.ev.DurNS - nd.wait
		}
	}
}

// holds is Report.Held and Report.Joined: for every collective instance
// joining ≥ 2 ranks, the member with the shortest recorded duration
// arrived last (every member leaves together, so the others' extra time
// is their wait for it) and held the group by the gap to the second
// shortest; every member arrived later than the median member by the gap
// between its duration and the median's (LateNS: seen even when a later
// rank masks it). Per rank, the sums over one op's instances, for the op
// where the hold (then the lateness) is largest — the blocking one: an
// asynchronous enqueue such as c10d::allreduce_ holds nobody, and its
// worker's gloo:all_reduce is the same collective, so the two are not
// added.
func (d *dag) holds() ([]Hold, bool) {
	members := make([][]int32, len(d.collLast))
	for k := range d.nodes {
		if c := d.nodes[k].coll; c >= 0 {
			members[c] = append(members[c], int32(k))
		}
	}
	type rk struct {
		rank int
		op   string
	}
	sum := map[rk]*Hold{}
	joined := false
	type member struct {
		rank int
		dur  int64
	}
	var ms []member
	for _, m := range members {
		// One duration per rank, its shortest (a malformed trace may put
		// one rank twice in an instance).
		ms = ms[:0]
		for _, k := range m {
			nd := &d.nodes[k]
			if j := slices.IndexFunc(ms, func(x member) bool { return x.rank == nd.rank }); j >= 0 {
				ms[j].dur = min(ms[j].dur, nd.ev.DurNS)
				continue
			}
			ms = append(ms, member{nd.rank, nd.ev.DurNS})
		}
		if len(ms) < 2 {
			continue
		}
		joined = true
		slices.SortFunc(ms, func(a, b member) int { return cmp.Or(cmp.Compare(a.dur, b.dur), cmp.Compare(a.rank, b.rank)) })
		med := ms[len(ms)/2].dur
		if len(ms)%2 == 0 {
			med = (ms[len(ms)/2-1].dur + med) / 2
		}
		name := d.nodes[m[0]].ev.Name
		for i, x := range ms {
			late := med - x.dur
			gap := int64(0)
			if i == 0 {
				gap = ms[1].dur - x.dur
			}
			if late <= 0 && gap <= 0 {
				continue
			}
			key := rk{x.rank, name}
			h := sum[key]
			if h == nil {
				h = &Hold{Rank: x.rank, Op: name}
				sum[key] = h
			}
			if gap > 0 {
				h.NS = min(h.NS+gap, optrace.MaxDurNS)
				h.Instances++
			}
			h.LateNS = min(h.LateNS+max(late, 0), optrace.MaxDurNS)
		}
	}
	best := map[int]Hold{}
	for _, h := range sum {
		b, ok := best[h.Rank]
		if !ok || cmp.Or(cmp.Compare(h.NS, b.NS), cmp.Compare(h.LateNS, b.LateNS), cmp.Compare(b.Op, h.Op)) > 0 {
			best[h.Rank] = *h
		}
	}
	out := make([]Hold, 0, len(best))
	for _, h := range best {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Hold) int {
		return cmp.Or(cmp.Compare(b.NS, a.NS), cmp.Compare(b.LateNS, a.LateNS), cmp.Compare(a.Rank, b.Rank))
	})
	return out, joined
}
