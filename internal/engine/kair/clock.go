package kair

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// KAIR §III-A Feature 4 (cross-worker time synchronization): cross-rank
// comparisons (collective arrivals in the step DAG, the shared Stage 1
// window grid) need every rank's timestamps on one clock. Two estimators:
// client↔server heartbeats (round trips, the paper's "concise heartbeat
// message") and, for traces alone, the barrier semantics of collective
// instances every member records.

// ClockMethod says how a rank's offset was obtained.
type ClockMethod string

const (
	ClockNone        ClockMethod = "none"        // not aligned (offset 0)
	ClockGiven       ClockMethod = "given"       // Trace.ClockOffsetNS was already set by the caller
	ClockHeartbeat   ClockMethod = "heartbeat"   // round-trip samples (NTP-style, min-RTT filter)
	ClockCollectives ClockMethod = "collectives" // barrier semantics of shared collective instances
)

func (m ClockMethod) valid() bool {
	switch m {
	case "", ClockNone, ClockGiven, ClockHeartbeat, ClockCollectives:
		return true
	}
	return false
}

// Heartbeat is one client↔server exchange, ns; client times on the rank's
// trace clock, server times on the reference clock.
type Heartbeat struct {
	ClientSendNS, ServerRecvNS, ServerSendNS, ClientRecvNS int64
}

// ClockEstimate is one rank's offset to the reference clock.
type ClockEstimate struct {
	Rank   int         `json:"rank"`
	Method ClockMethod `json:"method"`
	// OffsetNS is added to the rank's StartNS to reach the reference clock
	// (it becomes Trace.ClockOffsetNS).
	OffsetNS int64 `json:"offset_ns"`
	// ResidualNS bounds |true offset − OffsetNS| when the method's
	// assumptions hold (heartbeat: no drift between the sample and the
	// trace; collectives: barrier semantics, no drift within the capture;
	// an inconsistent set of instances reports the MAD of the exit
	// differences instead, an estimate, with Violations > 0). 0 for
	// ClockGiven (unknown) and the reference rank.
	ResidualNS int64 `json:"residual_ns"`
	// Samples is the heartbeats (valid ones) or collective instances used.
	Samples int `json:"samples"`
	// Violations counts instances whose barrier constraint still fails
	// after alignment.
	Violations int `json:"violations"`
}

// sub is a − b, ok false on int64 overflow.
func sub(a, b int64) (int64, bool) {
	d := a - b
	return d, (a >= b) == (d >= 0)
}

// subSat is a − b saturated to the int64 range.
func subSat(a, b int64) int64 {
	d, ok := sub(a, b)
	switch {
	case ok:
		return d
	case a > b:
		return math.MaxInt64
	}
	return math.MinInt64
}

// avg2 is ⌊(a+b)/2⌋ without overflow.
func avg2(a, b int64) int64 { return a>>1 + b>>1 + (a & b & 1) }

// OffsetFromHeartbeats estimates rank's offset to the server (reference)
// clock from round trips.
//
// Each exchange gives θ_i = ((s_recv − c_send) + (s_send − c_recv))/2
// (the NTP offset): exact when the two one-way delays are equal, and
// since both are ≥ 0 the true offset lies in [s_send − c_recv, s_recv −
// c_send], an interval of width RTT_i = (c_recv − c_send) − (s_send −
// s_recv) centred on θ_i. The error of θ_i is therefore at most RTT_i/2,
// and the sample with the smallest RTT carries the tightest bound: queueing
// and scheduling delays only ever lengthen a round trip (the min-RTT
// "clock filter" of NTP / Cristian's algorithm). Samples tied at the
// minimum RTT are combined by their median θ, which is still within the
// same bound of the true offset (each of them is). ResidualNS = ⌈min
// RTT/2⌉ — a true bound as long as the clocks do not drift between the
// exchange and the traced events, so heartbeats should be taken during
// the capture.
//
// Samples with a negative RTT, reversed send/receive times or overflowing
// differences are skipped (clock steps, corrupt headers); an error names
// the field when none is left.
func OffsetFromHeartbeats(rank int, hb []Heartbeat) (ClockEstimate, error) {
	if rank < 0 {
		return ClockEstimate{}, signal.FieldErrorf("rank", "%d must be ≥ 0", rank)
	}
	if len(hb) == 0 {
		return ClockEstimate{}, signal.FieldErrorf("heartbeats", "rank %d: no samples", rank)
	}
	type sample struct{ theta, rtt int64 }
	var ok []sample
	for _, h := range hb {
		a, ok1 := sub(h.ServerRecvNS, h.ClientSendNS)
		b, ok2 := sub(h.ServerSendNS, h.ClientRecvNS)
		cl, ok3 := sub(h.ClientRecvNS, h.ClientSendNS)
		sv, ok4 := sub(h.ServerSendNS, h.ServerRecvNS)
		if !ok1 || !ok2 || !ok3 || !ok4 || cl < 0 || sv < 0 || cl < sv {
			continue
		}
		ok = append(ok, sample{theta: avg2(a, b), rtt: cl - sv})
	}
	if len(ok) == 0 {
		return ClockEstimate{}, signal.FieldErrorf("heartbeats",
			"rank %d: none of %d samples is valid (need client_recv ≥ client_send, server_send ≥ server_recv, RTT ≥ 0)", rank, len(hb))
	}
	minRTT := slices.MinFunc(ok, func(x, y sample) int { return cmp.Compare(x.rtt, y.rtt) }).rtt
	var th []int64
	for _, s := range ok {
		if s.rtt == minRTT {
			th = append(th, s.theta)
		}
	}
	slices.Sort(th)
	theta := th[len(th)/2]
	if len(th)%2 == 0 {
		theta = avg2(th[len(th)/2-1], th[len(th)/2])
	}
	return ClockEstimate{Rank: rank, Method: ClockHeartbeat, OffsetNS: theta,
		ResidualNS: minRTT/2 + minRTT%2, Samples: len(ok)}, nil
}

// collInst is one rank's record of one collective instance on its own
// (unaligned) clock: the union of its events with that (Comm, Seq).
type collInst struct{ entry, exit int64 }

type collID struct {
	comm string
	seq  int64
	step int64 // id-less instances: (name, step, occurrence in seq)
}

// collIndex is one rank's collective instances: with (Comm, Seq) ids,
// host-side and device-side apart; without ids (gloo, torch < 2.0), per
// op name and side, keyed by (step, k-th call of the name in the step) —
// the instance rule Stage 2 uses (dag.go collectives).
type collIndex struct {
	host, dev map[collID]collInst
	anon      map[string]map[collID]collInst // name + "\x00h" / "\x00d"
}

// collectiveIndex indexes t's collective instances.
func collectiveIndex(t *optrace.Trace) collIndex {
	ix := collIndex{host: map[collID]collInst{}, dev: map[collID]collInst{}, anon: map[string]map[collID]collInst{}}
	put := func(m map[collID]collInst, k collID, e *optrace.Event) {
		c, seen := m[k]
		if !seen {
			c = collInst{entry: e.StartNS, exit: e.EndNS()}
		} else {
			c.entry, c.exit = min(c.entry, e.StartNS), max(c.exit, e.EndNS())
		}
		m[k] = c
	}
	var anon []int
	for i := range t.Events {
		e := &t.Events[i]
		if e.Cat != optrace.Collective || e.DurNS < 0 {
			continue
		}
		if e.Comm == "" || e.Seq < 0 {
			if e.Step >= 0 {
				anon = append(anon, i)
			}
			continue
		}
		m := ix.host
		if e.Device >= 0 {
			m = ix.dev
		}
		put(m, collID{comm: e.Comm, seq: e.Seq}, e)
	}
	slices.SortStableFunc(anon, func(a, b int) int {
		x, y := &t.Events[a], &t.Events[b]
		return cmp.Or(cmp.Compare(x.Step, y.Step), cmp.Compare(x.StartNS, y.StartNS))
	})
	type occKey struct {
		g    string
		step int64
	}
	occ := map[occKey]int64{}
	for _, i := range anon {
		e := &t.Events[i]
		g := e.Name + "\x00h"
		if e.Device >= 0 {
			g = e.Name + "\x00d"
		}
		m := ix.anon[g]
		if m == nil {
			m = map[collID]collInst{}
			ix.anon[g] = m
		}
		k := occKey{g, e.Step}
		put(m, collID{seq: occ[k], step: e.Step}, e)
		occ[k]++
	}
	return ix
}

// pairEstimate is the offset of r relative to ref from their shared
// instances; n = 0 when they share none.
type pairEstimate struct {
	offset, residual int64
	n, violations    int
}

// alignPair applies barrier semantics to every instance ref and r share
// (KAIR Feature 4, for traces alone). With θ the offset added to r's
// clock: no member can leave a collective before the last member entered,
// so exit_r + θ ≥ entry_ref and exit_ref ≥ entry_r + θ, i.e. θ ∈
// [entry_ref − exit_r, exit_ref − entry_r]. The true θ lies in the
// intersection over instances. The point estimate is the median of
// exit_ref − exit_r (members leave a collective nearly together — the
// last message reaches all of them — while they enter at arbitrary
// skews) clamped into the intersection; ResidualNS is the farther end of
// the intersection from it, a true bound. An empty intersection means
// the assumptions fail (drift over the capture, or events that are not
// barriers, such as asynchronous launches): the estimate is the median
// unclamped, the residual the MAD of the exit differences, and
// violations counts the instances whose interval excludes the estimate.
func alignPair(ref, r map[collID]collInst) pairEstimate {
	var exits []int64
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	type iv struct{ lo, hi int64 }
	var ivs []iv
	for k, a := range ref {
		b, ok := r[k]
		if !ok {
			continue
		}
		l, ok1 := sub(a.entry, b.exit)
		h, ok2 := sub(a.exit, b.entry)
		x, ok3 := sub(a.exit, b.exit)
		if !ok1 || !ok2 || !ok3 {
			continue
		}
		ivs = append(ivs, iv{l, h})
		exits = append(exits, x)
		lo, hi = max(lo, l), min(hi, h)
	}
	if len(exits) == 0 {
		return pairEstimate{}
	}
	slices.Sort(exits)
	est := medianInt(exits)
	pe := pairEstimate{n: len(exits)}
	if lo <= hi {
		est = min(max(est, lo), hi)
		pe.offset, pe.residual = est, max(subSat(est, lo), subSat(hi, est))
		return pe
	}
	dev := make([]int64, len(exits))
	for i, x := range exits {
		dev[i] = absInt(subSat(x, est))
	}
	slices.Sort(dev)
	pe.offset, pe.residual = est, medianInt(dev)
	for _, v := range ivs {
		if est < v.lo || est > v.hi {
			pe.violations++
		}
	}
	return pe
}

func medianInt(sorted []int64) int64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return avg2(sorted[n/2-1], sorted[n/2])
}

func absInt(x int64) int64 {
	if x < 0 {
		if x == math.MinInt64 {
			return math.MaxInt64
		}
		return -x
	}
	return x
}

// alignSource picks the instances one pair is aligned on: host-side
// collective events first; device collectives when the pair shares no
// host instance, or when the host instances are inconsistent and the
// device ones are not (on GPUs a host-side collective op can be an
// asynchronous enqueue that returns before its peers arrive, which
// breaks barrier semantics; its NCCL kernel does not).
func alignSource(ref, r collIndex) pairEstimate {
	ph := alignPair(ref.host, r.host)
	if ph.n > 0 && ph.violations == 0 {
		return ph
	}
	pd := alignPair(ref.dev, r.dev)
	if pd.n > 0 && pd.violations == 0 {
		return pd
	}
	best := ph
	if ph.n == 0 {
		best = pd
	}
	// No instance ids (or inconsistent ones): each id-less collective op
	// on its own, since only some are barriers — gloo's worker-side
	// "gloo:all_reduce" blocks until every member arrived, the caller's
	// asynchronous enqueue "c10d::allreduce_" returns at once, and when
	// ranks arrive with the same skew every step the enqueue's intervals
	// intersect too (tighter, and wrong). So among consistent ops the one
	// that blocks longest (median duration on the reference rank) wins;
	// failing consistency, the fewest violations.
	names := make([]string, 0, len(ref.anon))
	for g := range ref.anon {
		names = append(names, g)
	}
	slices.Sort(names) // deterministic choice among ties
	var bestDur int64 = -1
	for _, g := range names {
		pe := alignPair(ref.anon[g], r.anon[g])
		if pe.n == 0 {
			continue
		}
		dur := medianDuration(ref.anon[g])
		switch {
		case best.n == 0,
			pe.violations < best.violations,
			pe.violations == best.violations && bestDur >= 0 && dur > bestDur:
			best, bestDur = pe, dur
		}
	}
	return best
}

// medianDuration is the median exit − entry of the instances in m.
func medianDuration(m map[collID]collInst) int64 {
	ds := make([]int64, 0, len(m))
	for _, c := range m {
		ds = append(ds, subSat(c.exit, c.entry))
	}
	slices.Sort(ds)
	return medianInt(ds)
}

// AlignByCollectives estimates every rank's offset relative to the lowest
// rank (offset 0) from the collective instances they share (see
// alignPair). Offsets replace any Trace.ClockOffsetNS: events are read on
// their raw clocks. A rank that shares no instance with the reference is
// aligned through an already aligned rank it shares instances with
// (breadth-first; residuals add up); one reachable by no chain gets
// Method ClockNone and offset 0. The result is in ascending rank order.
func AlignByCollectives(traces []optrace.Trace) ([]ClockEstimate, error) {
	if err := checkRanks(traces); err != nil {
		return nil, err
	}
	idx := make([]int, len(traces))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(traces[a].Rank, traces[b].Rank) })
	n := len(idx)
	ix := make([]collIndex, n)
	for j, i := range idx {
		ix[j] = collectiveIndex(&traces[i])
	}
	out := make([]ClockEstimate, n)
	done := make([]bool, n)
	for j, i := range idx {
		out[j] = ClockEstimate{Rank: traces[i].Rank, Method: ClockNone}
	}
	if n == 0 {
		return out, nil
	}
	out[0].Method, done[0] = ClockCollectives, true
	queue := []int{0}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for j := range n {
			if done[j] {
				continue
			}
			pe := alignSource(ix[a], ix[j])
			if pe.n == 0 {
				continue
			}
			off, ok1 := addSat(out[a].OffsetNS, pe.offset)
			res, _ := addSat(out[a].ResidualNS, pe.residual)
			if !ok1 {
				continue
			}
			out[j] = ClockEstimate{Rank: out[j].Rank, Method: ClockCollectives, OffsetNS: off,
				ResidualNS: res, Samples: pe.n, Violations: pe.violations}
			done[j] = true
			queue = append(queue, j)
		}
	}
	return out, nil
}

// addSat is a + b; ok false (and the saturated value) on overflow.
func addSat(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64, false
		}
		return math.MinInt64, false
	}
	return s, true
}

// checkRanks rejects negative and repeated ranks; errors name the element.
func checkRanks(traces []optrace.Trace) error {
	seen := make(map[int]bool, len(traces))
	for i := range traces {
		r := traces[i].Rank
		if r < 0 {
			return signal.FieldErrorf(fmt.Sprintf("traces[%d].rank", i), "%d must be ≥ 0", r)
		}
		if seen[r] {
			return signal.FieldErrorf(fmt.Sprintf("traces[%d].rank", i), "rank %d appears twice", r)
		}
		seen[r] = true
	}
	return nil
}
