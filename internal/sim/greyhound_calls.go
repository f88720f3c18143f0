package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// Parallel is a hybrid-parallel layout, Greyhound Fig. 13's xTyDzP: TP
// size x, DP size y, PP size z. Ranks are numbered TP fastest, then DP,
// then PP (Megatron-LM's order).
type Parallel struct {
	TP, DP, PP int
	// GPUsPerNode places ranks on nodes (0 means 4, the paper's
	// single-node runs). It only names hosts.
	GPUsPerNode int
}

// Name is the paper's notation ("2T2D2P"; a PP of 1 is left out).
func (p Parallel) Name() string {
	s := fmt.Sprintf("%dT%dD", p.TP, p.DP)
	if p.PP > 1 {
		s += fmt.Sprintf("%dP", p.PP)
	}
	return s
}

// World is TP·DP·PP.
func (p Parallel) World() int { return p.TP * p.DP * p.PP }

// TraceOpts tunes a synthetic call trace.
type TraceOpts struct {
	Iters int
	Seed  uint64
	// IterS is the mean iteration time in seconds (0 means 1).
	IterS float64
	// Jitter is the relative sd of every compute segment (0 means 0.05).
	Jitter float64
	// Swap is the chance that a DP gradient bucket is issued one call
	// late (bucket readiness varies between iterations) (0 means 0.02;
	// negative disables).
	Swap float64
	// NoExtras drops the irregular calls (a logging AllReduce every 50
	// iterations, a checkpoint Barrier every 200) that break exact
	// periodicity.
	NoExtras bool
}

// CallTrace is one rank's intercepted calls with the truth: iteration i
// runs from IterStartNS[i] to IterEndNS[i] (after the optimizer step).
type CallTrace struct {
	Rank        int
	Calls       []collective.Call
	Comms       []collective.Comm
	IterStartNS []int64
	IterEndNS   []int64
}

// IterS returns the true iteration times in seconds.
func (t CallTrace) IterS() []float64 {
	out := make([]float64, len(t.IterEndNS))
	for i := range out {
		out[i] = float64(t.IterEndNS[i]-t.IterStartNS[i]) / 1e9
	}
	return out
}

// Trace generates rank's host-side NCCL call sequence for a GPT-style
// Megatron step: per micro-batch, TP AllReduces after attention and MLP
// of every layer and PP Send/Recv between stages; the DP gradient
// ReduceScatter buckets interleaved with the last micro-batch's backward
// (overlap), the embedding AllReduce between first and last stage, a
// grad-norm AllReduce, and the distributed optimizer's parameter
// AllGathers. Several communicators interleave in one rank's order, which
// is what the §4.2 ACF must see through.
func (p Parallel) Trace(rank int, o TraceOpts) CallTrace {
	if o.IterS <= 0 {
		o.IterS = 1
	}
	if o.Jitter == 0 {
		o.Jitter = 0.05
	}
	if o.Swap == 0 {
		o.Swap = 0.02
	}
	rng := rand.New(rand.NewPCG(o.Seed, uint64(rank)<<16|uint64(p.World())))
	tp, dp, pp := rank%p.TP, rank/p.TP%p.DP, rank/(p.TP*p.DP)
	gpn := p.GPUsPerNode
	if gpn <= 0 {
		gpn = 4
	}
	host := fmt.Sprintf("node-%03d", rank/gpn)
	tr := CallTrace{Rank: rank}
	seq := map[string]int64{}
	comm := func(id string, members []int) string {
		for _, c := range tr.Comms {
			if c.ID == id {
				return id
			}
		}
		cr := 0
		for i, m := range members {
			if m == rank {
				cr = i
			}
		}
		tr.Comms = append(tr.Comms, collective.Comm{ID: id, Size: len(members), Rank: rank, CommRank: cr,
			Ranks: members, Backend: "nccl", Host: host})
		return id
	}
	at := func(t, d, pp int) int { return pp*p.TP*p.DP + d*p.TP + t }
	var tpC, dpC, ppC, embC, mpC, worldC string
	if p.TP > 1 {
		var m []int
		for t := range p.TP {
			m = append(m, at(t, dp, pp))
		}
		tpC = comm(fmt.Sprintf("tp-p%d-d%d", pp, dp), m)
	}
	if p.DP > 1 {
		var m []int
		for d := range p.DP {
			m = append(m, at(tp, d, pp))
		}
		dpC = comm(fmt.Sprintf("dp-p%d-t%d", pp, tp), m)
	}
	if p.PP > 1 {
		var m []int
		for s := range p.PP {
			m = append(m, at(tp, dp, s))
		}
		ppC = comm(fmt.Sprintf("pp-d%d-t%d", dp, tp), m)
		if pp == 0 || pp == p.PP-1 {
			embC = comm(fmt.Sprintf("emb-d%d-t%d", dp, tp), []int{at(tp, dp, 0), at(tp, dp, p.PP-1)})
		}
	}
	if p.TP*p.PP > 1 {
		var m []int
		for s := range p.PP {
			for t := range p.TP {
				m = append(m, at(t, dp, s))
			}
		}
		mpC = comm(fmt.Sprintf("mp-d%d", dp), m)
	}
	all := make([]int, p.World())
	for i := range all {
		all[i] = i
	}
	worldC = comm("world", all)

	const (
		layers = 4
		seqLen = 2048
		hidden = 4096
	)
	micro := 1
	if p.PP > 1 {
		micro = 2 * p.PP
	}
	act := int64(seqLen * hidden * 2) // one micro-batch's activations, bf16
	buckets := []int64{40 << 20, 40 << 20, 36 << 20, 12 << 20}
	// Compute budget per iteration: forward a third, backward two thirds
	// of 90%; the optimizer the rest.
	unit := o.IterS * 0.9 / float64(micro*layers*2*3) // one half-layer forward, seconds
	now := int64(1_700_000_000) * 1e9
	var pending *collective.Call // a DP bucket issued late (Swap)
	emit := func(c string, op collective.Op, bytes int64, peer int, step int) {
		cl := collective.Call{Rank: rank, Comm: c, Seq: seq[c], Op: op, Bytes: bytes, Count: bytes / 2, Dtype: "bf16",
			Peer: peer, Root: -1, Step: int64(step)}
		seq[c]++
		hostNS := int64(15_000 + rng.IntN(20_000)) // enqueue cost
		cl.EnterNS, cl.ReturnNS = now, now+hostNS
		now += hostNS
		tr.Calls = append(tr.Calls, cl)
	}
	flush := func() {
		if pending != nil {
			c := *pending
			pending = nil
			hostNS := c.ReturnNS - c.EnterNS
			c.EnterNS, c.ReturnNS = now, now+hostNS
			now += hostNS
			tr.Calls = append(tr.Calls, c)
		}
	}
	// Issue order matters: a swapped bucket keeps its Seq (NCCL numbers
	// per communicator in issue order, and it is still the next DP call).
	emitMaybeLate := func(c string, op collective.Op, bytes int64, step int) {
		if o.Swap > 0 && rng.Float64() < o.Swap && pending == nil {
			cl := collective.Call{Rank: rank, Comm: c, Seq: seq[c], Op: op, Bytes: bytes, Count: bytes / 2, Dtype: "bf16",
				Peer: -1, Root: -1, Step: int64(step)}
			seq[c]++
			h := int64(15_000 + rng.IntN(20_000))
			cl.EnterNS, cl.ReturnNS = 0, h
			pending = &cl
			return
		}
		emit(c, op, bytes, -1, step)
	}
	work := func(level, s float64) {
		d := s * level * math.Max(0.2, 1+o.Jitter*rng.NormFloat64())
		now += int64(d * 1e9)
	}
	wander := 0.0
	for it := 0; it < o.Iters; it++ {
		start := now
		tr.IterStartNS = append(tr.IterStartNS, start)
		// Slow wander of the iteration level (±a few %), a GC pause now
		// and then: the truth is not constant.
		wander += -wander/50 + 0.004*rng.NormFloat64()
		level := 1 + wander
		if rng.Float64() < 0.02 {
			now += int64(0.1 * o.IterS * 1e9)
		}
		for m := range micro {
			if pp > 0 {
				emit(ppC, collective.Recv, act, at(tp, dp, pp-1), it)
			}
			for range layers {
				for range 2 {
					work(level, unit)
					if tpC != "" {
						emit(tpC, collective.AllReduce, act, -1, it)
						flush()
					}
				}
			}
			if pp < p.PP-1 {
				emit(ppC, collective.Send, act, at(tp, dp, pp+1), it)
			}
			_ = m
		}
		for m := range micro {
			if pp < p.PP-1 {
				emit(ppC, collective.Recv, act, at(tp, dp, pp+1), it)
			}
			for l := layers - 1; l >= 0; l-- {
				for range 2 {
					work(level, 2*unit)
					if tpC != "" {
						emit(tpC, collective.AllReduce, act, -1, it)
						flush()
					}
				}
				// Gradient buckets fill during the last micro-batch's backward.
				if m == micro-1 && dpC != "" && l < len(buckets) {
					emitMaybeLate(dpC, collective.ReduceScatter, buckets[layers-1-l], it)
				}
			}
			if pp > 0 {
				emit(ppC, collective.Send, act, at(tp, dp, pp-1), it)
			}
		}
		flush()
		if embC != "" {
			emit(embC, collective.AllReduce, 256<<20, -1, it)
		}
		if mpC != "" {
			emit(mpC, collective.AllReduce, 4, -1, it) // grad norm
		}
		work(level, o.IterS*0.1) // optimizer
		if dpC != "" {
			for _, b := range buckets {
				emit(dpC, collective.AllGather, b/int64(p.DP), -1, it)
			}
			emit(dpC, collective.AllReduce, 8, -1, it) // loss for logging
		}
		if !o.NoExtras {
			if it%50 == 49 {
				emit(worldC, collective.AllReduce, 64, -1, it) // timers
			}
			if it%200 == 199 {
				emit(worldC, collective.Barrier, 0, -1, it) // checkpoint
			}
		}
		tr.IterEndNS = append(tr.IterEndNS, now)
	}
	return tr
}
