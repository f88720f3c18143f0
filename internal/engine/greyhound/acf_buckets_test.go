package greyhound

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// The issue-16 case: a 2-rank DDP job with two gradient buckets on one
// communicator, one warm-up call (DDP's initial broadcast), then 1 2 1 2 …
// The period is 2 whatever values the symbols would hash to.
func TestIterationTimesTwoBucketsAfterOneWarmup(t *testing.T) {
	var calls []collective.Call
	e := t0
	add := func(bytes int64, comm string) {
		calls = append(calls, collective.Call{Rank: 0, Comm: comm, Seq: int64(len(calls)), Op: collective.AllReduce, Bytes: bytes,
			Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1e5, Step: -1})
	}
	add(4<<20, "w") // broadcast-sized warm-up call
	e += 5e6
	for range 1000 {
		add(25<<20, "w")
		e += 20e6
		add(3<<20, "w")
		e += 30e6
	}
	s, err := IterationTimes(calls, DefaultConfig())
	if err != nil || !s.OK || s.Period != 2 {
		t.Fatalf("err %v ok %v period %d acf %.3f: %s", err, s.OK, s.Period, s.ACF, s.Reason)
	}
	if math.Abs(s.Iters[len(s.Iters)/2].MS-50) > 1e-6 {
		t.Fatalf("iteration %v ms, want 50", s.Iters[len(s.Iters)/2].MS)
	}
}

// bucketMotif is one iteration of a DDP job: nb gradient buckets of
// uneven sizes (drawn from a few values, so equal sizes recur inside an
// iteration, as DDP's 25 MB cap makes them), optionally interleaved with
// calls on a second communicator (a TP group's AllReduces).
//
// ddp makes the layout PyTorch DDP gives a large model instead: a 1 MiB
// first bucket, full 25 MiB buckets, a remainder — one size dominating the
// iteration, the case where a raw repeat fraction finds a false period 1.
func bucketMotif(rng *rand.Rand, nb int, interleave, ddp bool) []collective.Call {
	sizes := []int64{1 << 20, 25 << 20, 25 << 20, 25 << 20, 13 << 20, 7 << 20}
	var m []collective.Call
	for b := range nb {
		if interleave && b%3 == 0 {
			m = append(m, collective.Call{Op: collective.AllReduce, Bytes: 8 << 20, Comm: "tp0"})
		}
		size := sizes[rng.IntN(len(sizes))]
		if ddp {
			switch b {
			case 0:
				size = 1 << 20
			case nb - 1:
				size = 3 << 20
			default:
				size = 25 << 20
			}
		}
		m = append(m, collective.Call{Op: collective.AllReduce, Bytes: size, Comm: "dp0"})
	}
	if interleave {
		m = append(m, collective.Call{Op: collective.AllGather, Bytes: 4096, Comm: "tp0"})
	}
	return m
}

// primitivePeriod is the smallest d dividing len(m) with m[i] = m[i+d]
// (cyclically): a motif that is itself a repeat has that shorter period.
func primitivePeriod(m []collective.Call) int {
	p := len(m)
	for d := 1; d < p; d++ {
		if p%d != 0 {
			continue
		}
		ok := true
		for i := range p {
			if symbolOf(&m[i]) != symbolOf(&m[(i+d)%p]) {
				ok = false
				break
			}
		}
		if ok {
			return d
		}
	}
	return p
}

// Property (issue 16, item 4): for 1–64 buckets of uneven sizes, with and
// without warm-up calls and an interleaved second communicator, the period
// is the motif's primitive period and the iteration time is exact — the
// symbol-exact ACF cannot depend on how symbols are numbered or hashed.
func TestIterationTimesBucketsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 4))
	cfg := DefaultConfig()
	for trial := range 400 {
		nb := 1 + rng.IntN(64)
		if trial < 64 {
			nb = trial + 1 // every bucket count at least once
		}
		interleave := rng.IntN(2) == 0
		warm := []int{0, 1, 3, 17}[rng.IntN(4)]
		ddp := rng.IntN(3) == 0
		motif := bucketMotif(rng, nb, interleave, ddp)
		p := primitivePeriod(motif)
		// enough iterations for M = 0.95 (L ≥ 20 periods, and the warm-up
		// at most 1% of the window: it mismatches like any other call)
		iters := max(25*p/len(motif)+5, 100*warm/len(motif)+5, 30)
		const iterNS = int64(100e6)
		var calls []collective.Call
		seq := map[string]int64{} // per communicator, as clients number them
		e := t0
		add := func(c collective.Call) {
			c.Rank, c.Seq, c.Peer, c.Root, c.Step = 0, seq[c.Comm], -1, -1, -1
			seq[c.Comm]++
			c.EnterNS, c.ReturnNS = e, e+1e5
			calls = append(calls, c)
		}
		for w := range warm {
			// warm-up: a broadcast of parameters, then bucket-sized calls
			// out of order (DDP's first iteration rebuilds buckets)
			if w == 0 {
				add(collective.Call{Op: collective.Broadcast, Bytes: 1 << 30, Comm: "dp0"})
			} else {
				add(motif[rng.IntN(len(motif))])
			}
			e += 1e6
		}
		starts := []int64{}
		for range iters {
			starts = append(starts, e)
			step := iterNS / int64(len(motif))
			for _, c := range motif {
				add(c)
				e += step
			}
			e += iterNS - step*int64(len(motif))
		}
		name := fmt.Sprintf("trial %d: %d buckets (DDP sizes %v), interleave %v, %d warm-up calls, period %d", trial, nb, ddp, interleave, warm, p)
		s, err := IterationTimes(calls, cfg)
		if err != nil || !s.OK {
			t.Fatalf("%s: err %v: %s", name, err, s.Reason)
		}
		if s.Period != p {
			t.Fatalf("%s: got period %d (acf %.3f, match %.3f)", name, s.Period, s.ACF, s.Match)
		}
		wantMS := float64(iterNS) / 1e6 * float64(p) / float64(len(motif))
		for _, it := range s.Iters {
			// A warm-up call equal to a steady one is an iteration by its
			// symbols: only iterations in the steady part are exact.
			if it.EndNS-int64(math.Round(it.MS*1e6)) < starts[0] {
				continue
			}
			if math.Abs(it.MS-wantMS) > 1e-6 {
				t.Fatalf("%s: iteration %d is %v ms, want %v", name, it.Iter, it.MS, wantMS)
			}
		}
		if want := iters*len(motif)/p - 2; len(s.Iters) < want {
			t.Fatalf("%s: %d iterations, want ≥ %d", name, len(s.Iters), want)
		}
	}
}
