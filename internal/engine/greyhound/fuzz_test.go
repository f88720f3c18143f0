package greyhound

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

// callsFrom decodes fuzz bytes into at most 512 calls of ≤ 4 ranks: 6
// bytes a call (rank, comm, op, size, gap, duration).
func callsFrom(b []byte) []collective.Call {
	var out []collective.Call
	t := t0
	seq := map[[2]int]int64{}
	for len(b) >= 6 && len(out) < 512 {
		r, cm := int(b[0]%4), int(b[1]%3)
		op := collective.Op(1 + b[2]%9)
		t += int64(binary.LittleEndian.Uint16(b[4:6])) * 1000
		k := [2]int{r, cm}
		c := collective.Call{Rank: r, Comm: string(rune('a' + cm)), Seq: seq[k], Op: op, Bytes: int64(b[3]) << 10,
			Peer: -1, Root: -1, EnterNS: t, ReturnNS: t + int64(b[3])*1000, Step: -1}
		if b[2]&0x80 != 0 {
			c.DevStartNS, c.DevEndNS = t, t+int64(b[5])*1000
		}
		seq[k]++
		out = append(out, c)
		b = b[6:]
	}
	return out
}

func FuzzAnalyze(f *testing.F) {
	j := defaultJob()
	j.iters, j.world = 6, 4
	var seed []byte
	for _, c := range j.calls()[:120] {
		seed = append(seed, byte(c.Rank), c.Comm[len(c.Comm)-1], byte(c.Op-1), byte(c.Bytes>>20), 0x10, 0x27)
	}
	f.Add(seed)
	f.Add([]byte{0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0})
	f.Add([]byte{})
	cfg := DefaultConfig()
	f.Fuzz(func(t *testing.T, b []byte) {
		calls := callsFrom(b)
		rep, err := Analyze(Input{Calls: calls, World: 4}, cfg)
		if err != nil {
			t.Fatal(err) // generated calls are valid
		}
		if _, err := json.Marshal(rep); err != nil {
			t.Fatal(err)
		}
		for r := range 4 {
			s, err := IterationTimes(rankCalls(calls, r), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range s.Iters {
				if it.MS < 0 {
					t.Fatalf("negative iteration %+v", it)
				}
			}
		}
	})
}

// FuzzJudge: arbitrary result values never panic or produce NaN JSON.
func FuzzJudge(f *testing.F) {
	f.Add([]byte(`[{"rank":0,"gemm_ms":[3,3,3]},{"rank":1,"gemm_ms":[9]},{"rank":2,"p2p":[{"src":0,"dst":1,"bytes":16777216,"ms":[1e308,-1]}]}]`))
	f.Add([]byte(`[]`))
	plan := PlanValidation([]Group{{Ranks: []int{0, 1, 2}}}, DefaultConfig())
	f.Fuzz(func(t *testing.T, b []byte) {
		var res []RankResult
		if json.Unmarshal(b, &res) != nil || len(res) > 64 {
			return
		}
		j := JudgeAll(plan, res, DefaultConfig())
		if _, err := json.Marshal(j); err != nil {
			t.Fatal(err)
		}
	})
}
