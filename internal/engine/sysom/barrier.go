package sysom

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

// Slow-rank detection (§3.1): per collective instance (comm, seq), each
// member's entry lateness; per rank and training step, its mean over the
// step's instances; per rank, a robust statistic over the latest W
// steps; a rank is slow when that statistic exceeds the other members'
// by more than K σ and it is late in most steps (persistence).
//
// Steps, not calls. DDP issues many bucket all-reduces per step and a
// host delay (GC, a preemption) is shared by a step's buckets, so calls
// are correlated: W = 100 calls can be 4 steps, and a standard error
// over calls treats them as independent. The window is the latest W
// steps (the paper's "W iterations"); when no call carries its Step,
// each instance counts as a step and the report says so.
//
// Robust statistic and persistence. One 20 ms spike would dominate a
// mean; the statistic is the 10%-trimmed mean over steps, and a flag
// also needs the rank above the other members' median in at least
// MinPersist of its steps, and in more steps than a fair coin would give
// (sign test at Alpha over the judged ranks). A rank that beats K σ but not persistence is
// reported as transient in the notes, not as a straggler.
//
// Clock alignment. Members all on one host share a clock, so their
// entries compare directly. Otherwise each rank's clock offset is
// estimated once per window from the exits: a collective completes for everyone
// together, so exit_r − median_j exit_j is the rank's clock offset plus
// its return delay. Return delays are never negative (a CPU hog that
// delays a rank's entry also delays its return, which cancelled the
// delay in per-instance exit alignment), so the offset is the lower
// decile of those residuals over the window, not the per-instance
// value. The spread above the decile (median − decile) bounds the
// offset error and is reported. Without exits on every host, lateness
// assumes synchronized clocks and the report says so.

// lateStats is one communicator's window.
type lateStats struct {
	comm  string
	ranks []int // sorted
	// vals[i][s]: rank i's mean lateness (ms) in window step s, NaN when
	// absent.
	vals      [][]float64
	inst      []int // instances each rank was in
	last      []int // steps each rank entered last
	steps     int
	instances int
	stepKnown bool
	align     Align
	offErrMs  float64 // bound on the per-host offset error (exit alignment)
	hosts     int     // distinct clocks (hosts, or ranks with unknown host)
	p2p       int     // point-to-point calls skipped
	mismatch  int     // instances dropped: members disagree on op/bytes
	// periodMs: the median time from one step's first collective entry
	// to the next step's, per step (0 unknown): the iteration time the
	// calls themselves show.
	periodMs float64
	// js caches judged (cfg is fixed for one Analyze).
	js     []rankSteps
	jsDone bool
}

type member struct {
	rank        int
	ready, exit int64 // exit 0: unknown
}

// lateness builds each communicator's window statistics from the calls;
// hostOf names a rank's host ("" unknown).
func lateness(calls []collective.Call, w int, hostOf func(int) string) []*lateStats {
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
		out = append(out, commLateness(calls, idx[lo:hi], w, hostOf))
		lo = hi
	}
	return out
}

// commLateness handles one communicator's calls sorted by (seq, rank,
// enter).
func commLateness(calls []collective.Call, idx []int32, w int, hostOf func(int) string) *lateStats {
	st := &lateStats{comm: calls[idx[0]].Comm, stepKnown: true}
	type inst struct {
		step    int64
		members []member
	}
	var insts []inst
	buf := make([]member, 0, len(idx)) // every instance's members, one allocation
	for lo := 0; lo < len(idx); {
		hi := lo
		seq := calls[idx[lo]].Seq
		for hi < len(idx) && calls[idx[hi]].Seq == seq {
			hi++
		}
		ms := buf[len(buf):len(buf)]
		step, ok := int64(-1), true
		first := &calls[idx[lo]]
		for k := lo; k < hi; k++ {
			c := &calls[idx[k]]
			if k > lo && c.Rank == calls[idx[k-1]].Rank {
				continue // one call per rank: the earliest
			}
			if c.Op.P2P() {
				st.p2p++
				ok = false
				continue
			}
			if c.Op != first.Op || c.Bytes != first.Bytes {
				ok = false
			}
			m := member{rank: c.Rank, ready: c.EnterNS}
			if c.HasDevice() && c.DevEndNS >= c.EnterNS {
				// Ready when the collective kernel starts, if later: a
				// slow GPU's stream reaches it late (§3.1 host entry
				// plus the GPU-side duration).
				m.ready, m.exit = max(c.EnterNS, c.DevStartNS), c.DevEndNS
			}
			if c.Step >= 0 && (step < 0 || c.Step < step) {
				step = c.Step
			}
			ms = append(ms, m)
		}
		lo = hi
		if !ok {
			if !first.Op.P2P() && len(ms) >= 2 {
				st.mismatch++
			}
			continue
		}
		if len(ms) < 2 {
			continue
		}
		if step < 0 {
			st.stepKnown = false
		}
		buf = buf[:len(buf)+len(ms)]
		insts = append(insts, inst{step, ms})
	}
	if !st.stepKnown {
		for i := range insts {
			insts[i].step = int64(i)
		}
	}
	// The latest W steps.
	var steps []int64
	for _, in := range insts {
		steps = append(steps, in.step)
	}
	slices.Sort(steps)
	steps = slices.Compact(steps)
	if len(steps) > w {
		cut := steps[len(steps)-w]
		steps = steps[len(steps)-w:]
		insts = slices.DeleteFunc(insts, func(in inst) bool { return in.step < cut })
	}
	stepPos := make(map[int64]int, len(steps))
	for i, s := range steps {
		stepPos[s] = i
	}
	pos := map[int]int{}
	for _, in := range insts {
		for _, m := range in.members {
			if _, ok := pos[m.rank]; !ok {
				pos[m.rank] = 0
				st.ranks = append(st.ranks, m.rank)
			}
		}
	}
	slices.Sort(st.ranks)
	for i, r := range st.ranks {
		pos[r] = i
	}
	// Clocks: one host known for every member means one clock;
	// otherwise each rank's offset is estimated on its own (a rank's
	// CUDA-event-to-host translation can carry its own offset too).
	clock := make([]string, len(st.ranks))
	hostSet := map[string]bool{}
	for i, r := range st.ranks {
		clock[i] = fmt.Sprintf("rank %d", r)
		hostSet[hostOf(r)] = true
	}
	keys := map[string]bool{}
	for _, c := range clock {
		keys[c] = true
	}
	st.hosts = len(keys)
	if len(hostSet) == 1 && !hostSet[""] {
		st.hosts = 1
	}
	off := map[string]float64{}
	switch {
	case st.hosts <= 1:
		st.align = AlignHost
	default:
		res := map[string][]float64{}
		var ex []float64
		for _, in := range insts {
			ex = ex[:0]
			for _, m := range in.members {
				if m.exit == 0 {
					ex = nil
					break
				}
				ex = append(ex, float64(m.exit))
			}
			if len(ex) == 0 {
				continue
			}
			ref := stats.Median(ex)
			for _, m := range in.members {
				k := clock[pos[m.rank]]
				res[k] = append(res[k], (float64(m.exit)-ref)/1e6)
			}
		}
		st.align = AlignExit
		for k := range keys {
			if len(res[k]) < 5 {
				st.align = AlignEntry
				off = map[string]float64{}
				break
			}
			off[k] = stats.Quantile(res[k], 0.1)
			st.offErrMs = max(st.offErrMs, stats.Quantile(res[k], 0.5)-off[k])
		}
	}
	nr := len(st.ranks)
	st.steps = len(steps)
	st.instances = len(insts)
	st.inst, st.last = make([]int, nr), make([]int, nr)
	sum := make([][]float64, nr)
	cnt := make([][]int, nr)
	for i := range nr {
		sum[i], cnt[i] = make([]float64, len(steps)), make([]int, len(steps))
	}
	lates := make([]float64, 0, 64)
	stepFirst := make([]float64, len(steps)) // each step's earliest aligned entry (ms)
	for i := range stepFirst {
		stepFirst[i] = math.Inf(1)
	}
	for _, in := range insts {
		lates = lates[:0]
		first := math.Inf(1)
		for _, m := range in.members {
			x := float64(m.ready)/1e6 - off[clock[pos[m.rank]]]
			lates = append(lates, x)
			first = min(first, x)
		}
		s := stepPos[in.step]
		stepFirst[s] = min(stepFirst[s], first)
		for j, m := range in.members {
			p := pos[m.rank]
			sum[p][s] += lates[j] - first
			cnt[p][s]++
			st.inst[p]++
		}
	}
	if st.stepKnown {
		st.periodMs = stepPeriod(steps, stepFirst)
	}
	st.vals = make([][]float64, nr)
	for i := range nr {
		st.vals[i] = make([]float64, len(steps))
		for s := range steps {
			st.vals[i][s] = math.NaN()
			if cnt[i][s] > 0 {
				st.vals[i][s] = sum[i][s] / float64(cnt[i][s])
			}
		}
	}
	for s := range steps {
		top, present := -1, 0
		for i := range nr {
			if v := st.vals[i][s]; !math.IsNaN(v) {
				present++
				if top < 0 || v > st.vals[top][s] {
					top = i
				}
			}
		}
		if present >= 2 {
			st.last[top]++
		}
	}
	return st
}

// rankSteps is one judged rank's window: its per-step lateness.
type rankSteps struct {
	i    int
	xs   []float64 // per-step lateness where present
	stat float64   // trimmed mean over steps
	vr   float64   // variance over steps
	mean float64
}

// judged returns the ranks present in at least MinInstances steps.
func (st *lateStats) judged(cfg Config) []rankSteps {
	if st.jsDone {
		return st.js
	}
	var out []rankSteps
	for i := range st.ranks {
		var xs []float64
		for _, v := range st.vals[i] {
			if !math.IsNaN(v) {
				xs = append(xs, v)
			}
		}
		if len(xs) < cfg.MinInstances {
			continue
		}
		var m stats.Moments
		for _, x := range xs {
			m.Add(x)
		}
		sd := m.SD()
		out = append(out, rankSteps{i: i, xs: xs, stat: stats.TrimmedMean(xs, lateTrim), vr: sd * sd, mean: m.Mean()})
	}
	st.js, st.jsDone = out, true
	return out
}

// lateTrim: the share trimmed from each end of a rank's per-step
// lateness (one spike in ten steps does not move the statistic).
const lateTrim = 0.1

// persistence is the share of steps, of those rank i shares with at
// least one judged peer, in which it entered later than the median of
// the peers present.
func (st *lateStats) persistence(i int, js []rankSteps) (float64, int, int) {
	late, n := 0, 0
	var peers []float64
	for s := 0; s < st.steps; s++ {
		v := st.vals[i][s]
		if math.IsNaN(v) {
			continue
		}
		peers = peers[:0]
		for _, j := range js {
			if j.i != i && !math.IsNaN(st.vals[j.i][s]) {
				peers = append(peers, st.vals[j.i][s])
			}
		}
		if len(peers) == 0 {
			continue
		}
		n++
		if v > stats.Median(peers) {
			late++
		}
	}
	if n == 0 {
		return 0, 0, 0
	}
	return float64(late) / float64(n), late, n
}

// slowRanks flags the communicator's slow ranks, and returns notes for
// ranks that beat K σ only transiently. Rank r's statistic m_r is its
// trimmed mean of per-step lateness; it is flagged when
//
//	m_r − μ₋ ≥ MinLateMs,  (m_r − μ₋)/σ ≥ K,  persistence ≥ MinPersist
//
// with μ₋, σ₋ the mean and population σ of the other judged members'
// statistics (leave-one-out: doc.go), σ = max(σ₋, se, LateNoiseMs) and
// se the standard error of a rank's statistic from the others' spread
// over steps (identical peers would otherwise have σ₋ ≈ 0).
func (st *lateStats) slowRanks(cfg Config) ([]SlowRank, []string) {
	js := st.judged(cfg)
	if len(js) < 2 {
		return nil, nil
	}
	var m, within stats.Moments
	for _, j := range js {
		m.Add(j.stat)
		within.Add(j.vr)
	}
	var out []SlowRank
	var notes []string
	for _, j := range js {
		o, ow := m.Without(j.stat), within.Without(j.vr)
		mu, sd := o.Mean(), o.SD()
		n := float64(len(j.xs))
		// The trimmed mean's variance is about 1/(1−2·trim) the mean's.
		se := math.Sqrt(max(ow.Mean(), 0) / n / (1 - 2*lateTrim))
		sigma := max(sd, se, cfg.LateNoiseMs)
		d := j.stat - mu
		z := d / sigma
		// The plain mean as well: a spike the trim hides is still worth
		// a note.
		dm := j.mean - mu
		if (d < cfg.MinLateMs || z < cfg.K) && (dm < cfg.MinLateMs || dm/sigma < cfg.K) {
			continue
		}
		// Persistence: under "no straggler" a rank is above its peers'
		// median in each step with probability ½ (steps are independent,
		// calls are not), so the count of late steps gets a sign test at
		// Alpha over the judged ranks, besides MinPersist.
		p, k, ns := st.persistence(j.i, js)
		pv := stats.BinomialUpperTail(k, ns, 0.5)
		if d < cfg.MinLateMs || z < cfg.K || p < cfg.MinPersist || pv > cfg.Alpha/float64(len(js)) {
			notes = append(notes, fmt.Sprintf("communicator %s: rank %d was late (mean %.2f ms vs peers %.2f ms, trimmed-mean z %.1f) but above its peers' median in only %d of %d steps (sign test p %.2g; a straggler needs ≥ %.0f%% and p ≤ %.2g): transient, not a straggler",
				st.comm, st.ranks[j.i], j.mean, mu, z, k, ns, pv, 100*cfg.MinPersist, cfg.Alpha/float64(len(js))))
			continue
		}
		out = append(out, SlowRank{
			Group: st.comm, Rank: st.ranks[j.i], MeanLateMs: round(j.stat, 4), PeerMeanMs: round(mu, 4), PeerSigmaMs: round(sigma, 4),
			Z: round(z, 2), Instances: st.inst[j.i], LastShare: round(float64(st.last[j.i])/n, 3), Align: st.align,
			Steps: len(j.xs), Persistence: round(p, 3), OffsetErrMs: round(st.offErrMs, 4),
		})
	}
	return out, notes
}

// stepPeriod is the median of (first entry of step s+1 − first entry of
// step s) / (step gap) over consecutive known steps.
func stepPeriod(steps []int64, first []float64) float64 {
	var ds []float64
	for i := 1; i < len(steps); i++ {
		gap := steps[i] - steps[i-1]
		if gap <= 0 || gap > 4 || math.IsInf(first[i], 0) || math.IsInf(first[i-1], 0) {
			continue
		}
		if d := (first[i] - first[i-1]) / float64(gap); d > 0 {
			ds = append(ds, d)
		}
	}
	if len(ds) < 3 {
		return 0
	}
	return stats.Median(ds)
}

// delayOf is how much later than its typical peer rank r enters the
// communicator's collectives per step: its statistic minus the median of
// the other judged ranks' (robust to one straggler among the others,
// which would make every other rank look early against a mean), and the
// noise of that difference (the standard error of r's statistic, floored
// by LateNoiseMs and MinLateMs). ok=false when r was not judged.
func (st *lateStats) delayOf(r int, cfg Config) (d, noise float64, ok bool) {
	js := st.judged(cfg)
	if len(js) < 2 {
		return 0, 0, false
	}
	var me *rankSteps
	others := make([]float64, 0, len(js))
	for k := range js {
		if st.ranks[js[k].i] == r {
			me = &js[k]
			continue
		}
		others = append(others, js[k].stat)
	}
	if me == nil {
		return 0, 0, false
	}
	se := math.Sqrt(max(me.vr, 0) / float64(len(me.xs)) / (1 - 2*lateTrim))
	return me.stat - stats.Median(others), max(se, cfg.LateNoiseMs, cfg.MinLateMs), true
}

// meanLate returns each judged rank's window statistic.
func (st *lateStats) meanLate(cfg Config) map[int]float64 {
	out := map[int]float64{}
	for _, j := range st.judged(cfg) {
		out[st.ranks[j.i]] = j.stat
	}
	return out
}

// zOf returns rank r's leave-one-out z (as slowRanks computes it) and
// the peers' σ; ok=false when the rank was not judged.
func (st *lateStats) zOf(r int, cfg Config) (z, sigma float64, ok bool) {
	js := st.judged(cfg)
	if len(js) < 2 {
		return 0, 0, false
	}
	var m, within stats.Moments
	var me *rankSteps
	for k := range js {
		m.Add(js[k].stat)
		within.Add(js[k].vr)
		if st.ranks[js[k].i] == r {
			me = &js[k]
		}
	}
	if me == nil {
		return 0, 0, false
	}
	o, ow := m.Without(me.stat), within.Without(me.vr)
	se := math.Sqrt(max(ow.Mean(), 0) / float64(len(me.xs)) / (1 - 2*lateTrim))
	sigma = max(o.SD(), se, cfg.LateNoiseMs)
	return (me.stat - o.Mean()) / sigma, sigma, true
}

// notes explains how the communicator was measured and what it could
// not judge. members: the group's ranks when known (nil otherwise).
func (st *lateStats) notes(members []int, cfg Config) []string {
	var out []string
	switch st.align {
	case AlignEntry:
		out = append(out, fmt.Sprintf("communicator %s: %d instances over %d clocks aligned by entry only (no completion times on every host): lateness assumes synchronized host clocks", st.comm, st.instances, st.hosts))
	case AlignExit:
		if st.offErrMs < cfg.LateNoiseMs {
			break // exits agree to within the noise floor
		}
		out = append(out, fmt.Sprintf("communicator %s: per-rank clock offsets estimated from the common exit over the window (%d clocks); exits spread by up to %.3f ms after removing them (return delays), which bounds the offset error", st.comm, st.hosts, st.offErrMs))
	}
	if !st.stepKnown {
		out = append(out, fmt.Sprintf("communicator %s: calls carry no training step: each of the %d instances counts as a step, so lateness shared by one step's calls is counted several times", st.comm, st.instances))
	}
	if st.p2p > 0 {
		out = append(out, fmt.Sprintf("communicator %s: %d point-to-point calls skipped (a Send/Recv's seq is not a shared instance)", st.comm, st.p2p))
	}
	if st.mismatch > 0 {
		out = append(out, fmt.Sprintf("communicator %s: %d instances dropped: their members disagree on op or bytes (sequence numbers out of step?)", st.comm, st.mismatch))
	}
	js := st.judged(cfg)
	judged := map[int]bool{}
	for _, j := range js {
		judged[st.ranks[j.i]] = true
	}
	var absent, thin []string
	for _, r := range members {
		if !slices.Contains(st.ranks, r) {
			absent = append(absent, fmt.Sprint(r))
		}
	}
	for i, r := range st.ranks {
		if !judged[r] {
			thin = append(thin, fmt.Sprintf("%d (%d instances)", r, st.inst[i]))
		}
	}
	if len(absent) > 0 {
		out = append(out, fmt.Sprintf("communicator %s: rank(s) %s of the group made no call in the window: not judged — a rank missing from the collectives may be the hung one (or its tracing was lost)", st.comm, strings.Join(absent, ", ")))
	}
	if len(thin) > 0 {
		out = append(out, fmt.Sprintf("communicator %s: rank(s) %s present in fewer than %d steps: not judged — a rank that rarely reaches the collectives may be the slow one", st.comm, strings.Join(thin, ", "), cfg.MinInstances))
	}
	switch n := len(js); {
	case n < 2:
		out = append(out, fmt.Sprintf("communicator %s: %d rank(s) present in ≥ %d steps: no slow-rank judgement", st.comm, n, cfg.MinInstances))
	case n <= 4:
		out = append(out, fmt.Sprintf("communicator %s: only %d ranks judged: a slow rank is judged against the other %d, so with 2 or more slow ranks they hide each other (see the temporal per-rank split)", st.comm, n, n-1))
	}
	return out
}

// round keeps reports stable across platforms' last-bit differences.
func round(x float64, digits int) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
