package greyhound

import (
	"fmt"
	"math/rand/v2"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

const t0 = int64(1_750_000_000) * 1e9

// job simulates a hybrid-parallel job's calls: world ranks in TP groups of
// tp (consecutive ranks) and DP groups across them (rank i, i+tp, …).
// Each iteration a rank issues 2 TP AllReduces (forward), 2 TP
// AllReduces (backward) and 3 DP AllReduces (gradient buckets).
type job struct {
	world, tp, iters int
	baseMS, jitter   float64
	seed             uint64
	// slowdown: iteration-time factor on iterations [slowFrom, slowTo).
	slowFrom, slowTo int
	slowFactor       float64
	// slowRank enters its collectives late by lateMS during the slowdown.
	slowRank int
	// slowComm's instances execute slowFactor longer (a slow link).
	slowComm    string
	warmupCalls int     // extra odd calls on every rank at the start
	drop        float64 // probability of dropping each call
	noDevice    bool
}

func (j job) commsOf(r int) (tp, dp string) {
	return fmt.Sprintf("tp%d", r/j.tp), fmt.Sprintf("dp%d", r%j.tp)
}

func (j job) comms() []collective.Comm {
	var out []collective.Comm
	seen := map[string]bool{}
	for r := range j.world {
		tp, dp := j.commsOf(r)
		if !seen[tp] {
			seen[tp] = true
			var rs []int
			for q := (r / j.tp) * j.tp; q < (r/j.tp+1)*j.tp; q++ {
				rs = append(rs, q)
			}
			out = append(out, collective.Comm{ID: tp, Size: j.tp, Ranks: rs})
		}
		if !seen[dp] {
			seen[dp] = true
			var rs []int
			for q := r % j.tp; q < j.world; q += j.tp {
				rs = append(rs, q)
			}
			out = append(out, collective.Comm{ID: dp, Size: len(rs), Ranks: rs})
		}
	}
	return out
}

// truth returns each iteration's start time and duration.
func (j job) truth() (starts []int64, durs []float64) {
	rng := rand.New(rand.NewPCG(j.seed, 99))
	t := t0
	for i := range j.iters {
		d := j.baseMS * (1 + j.jitter*rng.NormFloat64())
		if i >= j.slowFrom && i < j.slowTo && j.slowFactor > 0 {
			d *= j.slowFactor
		}
		starts = append(starts, t)
		durs = append(durs, d)
		t += int64(d * 1e6)
	}
	return
}

func (j job) calls() []collective.Call {
	starts, durs := j.truth()
	rng := rand.New(rand.NewPCG(j.seed, 7))
	seq := map[[2]any]int64{}
	var out []collective.Call
	type slot struct {
		frac  float64
		tp    bool
		bytes int64
	}
	slots := []slot{{0.05, true, 4 << 20}, {0.25, true, 4 << 20}, {0.55, true, 4 << 20}, {0.65, true, 4 << 20},
		{0.80, false, 25 << 20}, {0.88, false, 25 << 20}, {0.95, false, 7 << 20}}
	for r := range j.world {
		tpc, dpc := j.commsOf(r)
		for w := range j.warmupCalls {
			out = append(out, collective.Call{Rank: r, Comm: "init", Seq: int64(w), Op: collective.Broadcast, Bytes: int64(w+1) * 1000,
				Peer: -1, Root: 0, EnterNS: t0 - int64(j.warmupCalls-w)*1e6, ReturnNS: t0 - int64(j.warmupCalls-w)*1e6 + 1000, Step: -1})
		}
		for i := range j.iters {
			for _, s := range slots {
				comm := dpc
				if s.tp {
					comm = tpc
				}
				k := [2]any{r, comm}
				sq := seq[k]
				seq[k]++
				enter := starts[i] + int64(s.frac*durs[i]*1e6) + int64(rng.NormFloat64()*20e3)
				late := 0.0
				if r == j.slowRank && i >= j.slowFrom && i < j.slowTo && j.slowFactor > 0 {
					late = (j.slowFactor - 1) * j.baseMS * 0.1
				}
				enter += int64(late * 1e6)
				exec := 1.0 + float64(s.bytes)/(8<<20)
				if comm == j.slowComm && i >= j.slowFrom && i < j.slowTo {
					exec *= j.slowFactor
				}
				// Others wait for the late member: the instance ends at the
				// latest entry + exec, for everyone.
				groupLate := 0.0
				if j.slowRank >= 0 && i >= j.slowFrom && i < j.slowTo && j.slowFactor > 0 {
					st, sd := j.commsOf(j.slowRank)
					if comm == st || comm == sd {
						groupLate = (j.slowFactor - 1) * j.baseMS * 0.1
					}
				}
				base := starts[i] + int64(s.frac*durs[i]*1e6)
				end := base + int64((groupLate+exec)*1e6) + 50e3
				c := collective.Call{Rank: r, Comm: comm, Seq: sq, Op: collective.AllReduce, Bytes: s.bytes, Peer: -1, Root: -1,
					EnterNS: enter, ReturnNS: enter + 30e3, Step: int64(i)}
				if !j.noDevice {
					c.DevStartNS, c.DevEndNS = enter+10e3, max(end, enter+20e3)
				} else {
					c.ReturnNS = max(end, enter+30e3)
				}
				if j.drop > 0 && rng.Float64() < j.drop {
					continue
				}
				out = append(out, c)
			}
		}
	}
	return out
}

func rankCalls(calls []collective.Call, r int) []collective.Call {
	var out []collective.Call
	for _, c := range calls {
		if c.Rank == r {
			out = append(out, c)
		}
	}
	return out
}

func defaultJob() job {
	return job{world: 8, tp: 4, iters: 300, baseMS: 75, jitter: 0.01, seed: 1, slowRank: -1}
}
