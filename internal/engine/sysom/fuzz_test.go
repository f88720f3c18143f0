package sysom

import (
	"fmt"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// profileFrom decodes fuzz bytes into a profile that may be invalid:
// frame indices out of range, non-positive counts, a wrong Total, bad
// kinds — what an outside importer could hand the engine.
func profileFrom(b []byte, rank int) (*stack.Profile, []byte) {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		x := b[0]
		b = b[1:]
		return x
	}
	p := &stack.Profile{Rank: rank, StartNS: t0, EndNS: t0 + 1e9}
	nf := int(next() % 12)
	for i := range nf {
		k := stack.Kind(next() % 6) // 0 and 5 are invalid
		p.Funcs = append(p.Funcs, stack.Func{Name: fmt.Sprintf("f%d", i%7), Kind: k, Module: fmt.Sprintf("m%d", i%2)})
	}
	ns := int(next() % 16)
	for range ns {
		d := int(next() % 9)
		var st stack.Stack
		for range d {
			st.Frames = append(st.Frames, int32(int8(next()))%int32(nf+2))
		}
		st.Count = int64(int8(next()))
		p.Stacks = append(p.Stacks, st)
		p.Total += st.Count
	}
	if next()%5 == 0 {
		p.Total++
	}
	return p, b
}

func FuzzProfileBuilder(f *testing.F) {
	f.Add([]byte{3, 1, 1, 2, 2, 3, 0, 1, 2, 10, 1, 2, 5})
	f.Add([]byte{11, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 15, 8, 0, 1, 2, 3, 4, 5, 6, 7, 40, 2, 9, 9, 3, 0xff, 0x80, 1, 7})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, rest := profileFrom(b, 0)
		c, _ := profileFrom(rest, 1)
		errA, errC := ValidateProfile(a), ValidateProfile(c)
		ft := FlameTree(a)
		dt := DiffTree(a, c)
		if errA == nil {
			if ft.A != a.Total || dt.A != a.Total {
				t.Fatalf("valid profile: flame root %d, diff root %d, total %d", ft.A, dt.A, a.Total)
			}
		} else if ft.A != 0 || dt.A != 0 {
			t.Fatalf("invalid profile (%v) counted: %d/%d", errA, ft.A, dt.A)
		}
		if errC == nil && dt.B != c.Total {
			t.Fatalf("valid profile: diff root B %d, total %d", dt.B, c.Total)
		}
		// Analyze either refuses the input naming the field or reports.
		in := &Input{Profiles: map[int]*stack.Profile{0: a, 1: c, 2: c}, Baseline: map[int]*stack.Profile{0: c},
			IterMs: 120, IterBaseMs: 100}
		cfg := DefaultConfig()
		cfg.MinTotal, cfg.MinSamples = 1, 1
		rep, err := Analyze(in, cfg)
		if (errA == nil && errC == nil) != (err == nil) {
			t.Fatalf("validation %v/%v but Analyze %v", errA, errC, err)
		}
		if err == nil && rep.Temporal == nil {
			t.Fatalf("iteration time rose 20%% without stragglers but no temporal comparison")
		}
	})
}

// callsFrom decodes fuzz bytes into calls of ≤ 6 ranks on 2
// communicators, with or without device brackets.
func callsFrom(b []byte) []collective.Call {
	var out []collective.Call
	seq := map[[2]int]int64{}
	for len(b) >= 4 && len(out) < 2000 {
		r, cm := int(b[0]%6), int(b[1]%2)
		k := [2]int{r, cm}
		e := t0 + seq[k]*1e8 + int64(b[2])*1e4
		c := collective.Call{Rank: r, Comm: string(rune('a' + cm)), Seq: seq[k], Op: collective.AllReduce, Bytes: 1 << 20,
			Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1000, Step: -1}
		if b[3]&1 != 0 {
			c.DevStartNS, c.DevEndNS = e+int64(b[3])*100, e+int64(b[3])*1e4+5e5
		}
		if b[3]&2 == 0 {
			seq[k]++
		}
		out = append(out, c)
		b = b[4:]
	}
	return out
}

func FuzzSlowRanks(f *testing.F) {
	var seed []byte
	for i := range 60 {
		for r := range 4 {
			late := byte(0)
			if r == 2 {
				late = 60
			}
			seed = append(seed, byte(r), 0, late+byte(i%3), 1)
		}
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		calls := callsFrom(b)
		cfg := DefaultConfig()
		cfg.MinInstances = 2
		rep, err := Analyze(&Input{Calls: calls}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rep.SlowRanks {
			if s.MeanLateMs < 0 || s.Z < cfg.K || s.MeanLateMs-s.PeerMeanMs < cfg.MinLateMs-1e-3 {
				t.Fatalf("flag breaks the rule: %+v", s)
			}
		}
	})
}
