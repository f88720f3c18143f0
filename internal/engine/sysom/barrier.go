package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

// Slow-rank detection (§3.1): per collective instance (comm, seq), each
// member's entry lateness; per rank, its mean over the latest W
// instances; a rank is slow when its mean exceeds the other members' by
// more than K σ.
//
// Alignment by barrier semantics. A collective completes for everyone
// only after its last member enters, so (up to the algorithm's own
// latency, µs) all members exit together in true time T. A member's
// wait exit_r − ready_r is measured on its own host clock, so a host's
// clock offset cancels in it. Putting every member's exit at the common
// latest exit and measuring its entry back by its wait gives aligned
// entries; the earliest aligned entry is the reference:
//
//	late_r = max_j(exit_j − ready_j) − (exit_r − ready_r)
//
// which equals true_ready_r − min_j true_ready_j whatever the hosts'
// clock offsets (constant over one instance). The exit is the device end
// (DevEndNS, already on the host clock) or, for synchronous backends, the
// host return the client reports there too; ready is the host entry, or
// the collective kernel's start when later (§3.1: host entry plus the
// GPU-side duration). When a member lacks them
// (NCCL without CUDA events returns at enqueue), lateness falls back to
// enter_r − min_j enter_j, which assumes synchronized clocks; the report
// says which alignment each communicator got.

// lateStats is one communicator's window.
type lateStats struct {
	comm      string
	ranks     []int // sorted
	n         []int // instances each rank was in
	last      []int // instances each rank entered last
	sum, sum2 []float64
	exit      int // instances aligned by exit
	instances int
}

// lateness builds each communicator's window statistics from the calls.
func lateness(calls []collective.Call, w int) []*lateStats {
	idx := make([]int32, len(calls))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		x, y := &calls[a], &calls[b]
		return cmp.Or(cmp.Compare(x.Comm, y.Comm), cmp.Compare(x.Seq, y.Seq), cmp.Compare(x.Rank, y.Rank), cmp.Compare(x.EnterNS, y.EnterNS))
	})
	var out []*lateStats
	for lo := 0; lo < len(idx); {
		hi := lo
		comm := calls[idx[lo]].Comm
		for hi < len(idx) && calls[idx[hi]].Comm == comm {
			hi++
		}
		out = append(out, commLateness(calls, idx[lo:hi], w))
		lo = hi
	}
	return out
}

// commLateness handles one communicator's calls sorted by (seq, rank,
// enter).
func commLateness(calls []collective.Call, idx []int32, w int) *lateStats {
	// Instances with at least two members, latest W.
	type span struct{ lo, hi int }
	var insts []span
	for lo := 0; lo < len(idx); {
		hi := lo
		seq := calls[idx[lo]].Seq
		members := 0
		for hi < len(idx) && calls[idx[hi]].Seq == seq {
			if hi == lo || calls[idx[hi]].Rank != calls[idx[hi-1]].Rank {
				members++
			}
			hi++
		}
		if members >= 2 {
			insts = append(insts, span{lo, hi})
		}
		lo = hi
	}
	if len(insts) > w {
		insts = insts[len(insts)-w:]
	}
	st := &lateStats{comm: calls[idx[0]].Comm}
	pos := map[int]int{}
	for _, s := range insts {
		for _, i := range idx[s.lo:s.hi] {
			if _, ok := pos[calls[i].Rank]; !ok {
				pos[calls[i].Rank] = 0
				st.ranks = append(st.ranks, calls[i].Rank)
			}
		}
	}
	slices.Sort(st.ranks)
	for i, r := range st.ranks {
		pos[r] = i
	}
	nr := len(st.ranks)
	st.n, st.last = make([]int, nr), make([]int, nr)
	st.sum, st.sum2 = make([]float64, nr), make([]float64, nr)
	members := make([]int32, 0, 64)
	lates := make([]float64, 0, 64)
	for _, s := range insts {
		// One call per rank: the first (earliest enter) of duplicates.
		members = members[:0]
		for k := s.lo; k < s.hi; k++ {
			if k == s.lo || calls[idx[k]].Rank != calls[idx[k-1]].Rank {
				members = append(members, idx[k])
			}
		}
		byExit := true
		for _, i := range members {
			c := &calls[i]
			if !c.HasDevice() || c.DevEndNS < c.EnterNS {
				byExit = false
				break
			}
		}
		lates = lates[:0]
		if byExit {
			var maxWait int64
			for _, i := range members {
				maxWait = max(maxWait, wait(&calls[i]))
			}
			for _, i := range members {
				lates = append(lates, float64(maxWait-wait(&calls[i]))/1e6)
			}
			st.exit++
		} else {
			first := int64(math.MaxInt64)
			for _, i := range members {
				first = min(first, calls[i].EnterNS)
			}
			for _, i := range members {
				lates = append(lates, float64(calls[i].EnterNS-first)/1e6)
			}
		}
		top := 0
		for j, l := range lates {
			if l > lates[top] {
				top = j
			}
		}
		for j, i := range members {
			p := pos[calls[i].Rank]
			st.n[p]++
			st.sum[p] += lates[j]
			st.sum2[p] += lates[j] * lates[j]
		}
		st.last[pos[calls[members[top]].Rank]]++
		st.instances++
	}
	return st
}

// wait is how long a member waited inside the collective on its own
// clock: from when it was ready — host entry, or the collective kernel's
// start when that is later (the stream was still busy: a slow GPU enters
// late on the device even though its host ran ahead) — to its exit.
func wait(c *collective.Call) int64 {
	return c.DevEndNS - max(c.EnterNS, c.DevStartNS)
}

func (st *lateStats) align() Align {
	switch st.exit {
	case st.instances:
		return AlignExit
	case 0:
		return AlignEntry
	}
	return AlignMixed
}

// slowRanks flags the communicator's slow ranks. A rank's statistic is
// its window mean lateness m_r; it is flagged when
//
//	m_r − μ₋ ≥ MinLateMs  and  (m_r − μ₋)/σ ≥ K,  σ = max(σ₋, se, LateNoiseMs)
//
// with μ₋, σ₋ the mean and population σ of the other judged members'
// means (leave-one-out: doc.go explains why not the paper's all-member
// σ for small groups), and se the standard error of a window mean from
// the others' per-instance spread (identical peers would otherwise have
// σ₋ ≈ 0 and flag µs of jitter).
func (st *lateStats) slowRanks(cfg Config) []SlowRank {
	var judged []int
	var m stats.Moments
	var within stats.Moments // per-instance variance of the judged ranks
	means := make([]float64, len(st.ranks))
	vars := make([]float64, len(st.ranks))
	for i := range st.ranks {
		if st.n[i] < cfg.MinInstances {
			continue
		}
		n := float64(st.n[i])
		means[i] = st.sum[i] / n
		vars[i] = max(st.sum2[i]/n-means[i]*means[i], 0)
		judged = append(judged, i)
		m.Add(means[i])
		within.Add(vars[i])
	}
	if len(judged) < 2 {
		return nil
	}
	var out []SlowRank
	for _, i := range judged {
		o := m.Without(means[i])
		ow := within.Without(vars[i])
		mu, sd := o.Mean(), o.SD()
		se := math.Sqrt(max(ow.Mean(), 0) / float64(st.n[i]))
		sigma := max(sd, se, cfg.LateNoiseMs)
		d := means[i] - mu
		z := d / sigma
		if d < cfg.MinLateMs || z < cfg.K {
			continue
		}
		out = append(out, SlowRank{
			Group: st.comm, Rank: st.ranks[i], MeanLateMs: round(means[i], 4), PeerMeanMs: round(mu, 4), PeerSigmaMs: round(sigma, 4),
			Z: round(z, 2), Instances: st.n[i], LastShare: round(float64(st.last[i])/float64(st.n[i]), 3), Align: st.align(),
		})
	}
	return out
}

// meanLate returns each judged rank's window mean lateness.
func (st *lateStats) meanLate(cfg Config) map[int]float64 {
	out := map[int]float64{}
	for i, r := range st.ranks {
		if st.n[i] >= cfg.MinInstances {
			out[r] = st.sum[i] / float64(st.n[i])
		}
	}
	return out
}

func (st *lateStats) note() string {
	switch st.align() {
	case AlignEntry:
		return fmt.Sprintf("communicator %s: %d instances aligned by entry only (no completion times): lateness assumes synchronized host clocks", st.comm, st.instances)
	case AlignMixed:
		return fmt.Sprintf("communicator %s: %d of %d instances aligned by exit, the rest by entry (synchronized clocks assumed there)", st.comm, st.exit, st.instances)
	}
	return ""
}

// round keeps reports stable across platforms' last-bit differences.
func round(x float64, digits int) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
