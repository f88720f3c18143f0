package kineto

import (
	"cmp"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/optrace"
)

// The Chrome trace format requires no order of traceEvents, and other
// tools and merges reorder them (issue 16 item 7d): a ProfilerStep# range
// written after its operators, a kernel before its launch, a flow before
// its slice. Decode, streaming, resolves these links in file order with
// fixed-size state; ReadTrace holds every event anyway, so it decodes
// without linking and then links here, over the whole trace, the same way
// whatever the order: memory is proportional to the events it already
// holds (a few index slices), and ties are broken by content, never by
// position, so any permutation of the file gives the same trace.

// flowRef is a flow event ("s"/"f"/"t") kept for link.
type flowRef struct{ pid, tid, ts, id int64 }

// link sets on ev what the streaming decoder derives from other elements:
// FlowID (and Correlation when absent) from flows, Step from the enclosing
// ProfilerStep range (host) or the launching runtime call (device), and a
// device collective's instance (Comm, Seq) from the host collective op
// enclosing its launch. ev's Step must be -1 except on ProfilerStep ranges
// (Decode with Options.deferLinks). It returns how many events were linked
// to an element that comes after them in the file: what a file-order
// reader would have lost.
func link(ev []optrace.Event, flows []flowRef) (reordered int64) {
	isRange := make([]bool, len(ev))
	for i := range ev {
		isRange[i] = ev[i].Step >= 0
	}
	bindFlows(ev, flows)
	// Step ranges, by start (latest start wins: the innermost/newest).
	type rng struct {
		start, end, step int64
		at               int
	}
	var ranges []rng
	for i := range ev {
		if isRange[i] {
			ranges = append(ranges, rng{ev[i].StartNS, ev[i].EndNS(), ev[i].Step, i})
		}
	}
	slices.SortFunc(ranges, func(a, b rng) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end), cmp.Compare(a.step, b.step), cmp.Compare(a.at, b.at))
	})
	// stepAt is the step of the latest-starting range containing ts, as
	// Decode's stepAt over its last maxStepRanges ranges; at is the range's
	// position in the file.
	stepAt := func(ts int64) (step int64, at int) {
		i, _ := slices.BinarySearchFunc(ranges, ts, func(r rng, t int64) int {
			if r.start <= t {
				return -1
			}
			return 1
		})
		for j := i - 1; j >= 0 && j >= i-maxStepRanges; j-- {
			if ts < ranges[j].end {
				return ranges[j].step, ranges[j].at
			}
		}
		return -1, -1
	}
	for i := range ev {
		if e := &ev[i]; e.Device < 0 && !isRange[i] {
			var at int
			if e.Step, at = stepAt(e.StartNS); at > i {
				reordered++
			}
		}
	}
	// Launches: host events with a correlation id, by (id, start).
	var launches []int32
	for i := range ev {
		if ev[i].Device < 0 && ev[i].Correlation > 0 {
			launches = append(launches, int32(i))
		}
	}
	slices.SortFunc(launches, func(a, b int32) int {
		x, y := &ev[a], &ev[b]
		return cmp.Or(cmp.Compare(x.Correlation, y.Correlation), cmp.Compare(x.StartNS, y.StartNS), cmpEvent(x, y), cmp.Compare(a, b))
	})
	// Host collective ops with a known instance, by (thread, start).
	var colls []int32
	for i := range ev {
		if e := &ev[i]; e.Device < 0 && e.Cat == optrace.Collective && e.Comm != "" && e.Seq >= 0 {
			colls = append(colls, int32(i))
		}
	}
	slices.SortFunc(colls, func(a, b int32) int {
		x, y := &ev[a], &ev[b]
		return cmp.Or(cmp.Compare(x.TID, y.TID), cmp.Compare(x.StartNS, y.StartNS), cmpEvent(x, y), cmp.Compare(a, b))
	})
	for i := range ev {
		e := &ev[i]
		if e.Device < 0 {
			continue
		}
		l := -1
		if e.Correlation > 0 {
			l = launchOf(ev, launches, e.Correlation, e.StartNS)
		}
		if l < 0 {
			var at int
			if e.Step, at = stepAt(e.StartNS); at > i {
				reordered++
			}
			continue
		}
		if l > i {
			reordered++
		}
		e.Step = ev[l].Step
		if e.Step < 0 {
			e.Step, _ = stepAt(e.StartNS)
		}
		if e.Cat == optrace.Collective && e.Comm == "" {
			if c := collOf(ev, colls, &ev[l]); c >= 0 {
				e.Comm, e.Seq = ev[c].Comm, ev[c].Seq
			}
		}
	}
	return reordered
}

// cmpEvent orders events by content, for ties.
func cmpEvent(x, y *optrace.Event) int {
	return cmp.Or(cmp.Compare(x.DurNS, y.DurNS), cmp.Compare(x.Cat, y.Cat), cmp.Compare(x.Name, y.Name),
		cmp.Compare(x.PID, y.PID), cmp.Compare(x.TID, y.TID), cmp.Compare(x.ExternalID, y.ExternalID))
}

// launchOf is the launch of device work with correlation id corr starting
// at ts: among the host events with that id, the latest starting at or
// before ts, else the earliest; -1 when none.
func launchOf(ev []optrace.Event, launches []int32, corr, ts int64) int {
	lo, _ := slices.BinarySearchFunc(launches, corr, func(k int32, c int64) int { return cmp.Compare(ev[k].Correlation, c) })
	best := -1
	for j := lo; j < len(launches) && ev[launches[j]].Correlation == corr; j++ {
		k := int(launches[j])
		if best < 0 || ev[k].StartNS <= ts {
			best = k
		}
	}
	return best
}

// collOf is the host collective op that issued launch l: on the same
// thread, sharing its External id, else the latest-starting one enclosing
// the launch; -1 when none.
func collOf(ev []optrace.Event, colls []int32, l *optrace.Event) int {
	lo, _ := slices.BinarySearchFunc(colls, l.TID, func(k int32, t int64) int { return cmp.Compare(ev[k].TID, t) })
	best := -1
	for j := lo; j < len(colls) && ev[colls[j]].TID == l.TID; j++ {
		k := int(colls[j])
		c := &ev[k]
		if l.ExternalID != 0 && c.ExternalID == l.ExternalID {
			return k
		}
		if c.StartNS <= l.StartNS && l.StartNS < c.EndNS() {
			best = k // sorted by start: the last one found starts latest
		}
	}
	return best
}

// bindFlows binds each flow to the complete event on its pid and thread
// (or stream) starting at its ts — Kineto writes a flow right after that
// slice; the streaming decoder binds it to the element just before. Among
// several such events the shortest wins (the launch, not an enclosing op).
func bindFlows(ev []optrace.Event, flows []flowRef) {
	if len(flows) == 0 {
		return
	}
	idx := make([]int32, len(ev))
	for i := range idx {
		idx[i] = int32(i)
	}
	key := func(e *optrace.Event) (int64, int64) { return e.PID, e.StartNS }
	slices.SortFunc(idx, func(a, b int32) int {
		pa, ta := key(&ev[a])
		pb, tb := key(&ev[b])
		return cmp.Or(cmp.Compare(pa, pb), cmp.Compare(ta, tb), cmpEvent(&ev[a], &ev[b]), cmp.Compare(a, b))
	})
	// Bind in a content order so that two flows on one event resolve the
	// same way whatever the file order: the first bound wins, as in Decode.
	slices.SortFunc(flows, func(a, b flowRef) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.ts, b.ts), cmp.Compare(a.tid, b.tid), cmp.Compare(a.id, b.id))
	})
	for _, f := range flows {
		if f.id == 0 {
			continue
		}
		lo, _ := slices.BinarySearchFunc(idx, f, func(k int32, f flowRef) int {
			p, t := key(&ev[k])
			return cmp.Or(cmp.Compare(p, f.pid), cmp.Compare(t, f.ts))
		})
		for j := lo; j < len(idx); j++ {
			e := &ev[idx[j]]
			if e.PID != f.pid || e.StartNS != f.ts {
				break
			}
			if e.TID == f.tid || (e.Device >= 0 && e.Stream == f.tid) {
				if e.FlowID == 0 {
					e.FlowID = f.id
					if e.Correlation == 0 {
						e.Correlation = f.id
					}
				}
				break
			}
		}
	}
}
