package analysis

import (
	"hash/maphash"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// profileBuilder merges symbolized profiles into one: functions interned
// by (name, kind, module), identical stacks summed. It bounds a window's
// memory by its distinct stacks (a rank's chunks, a group's ranks).
type profileBuilder struct {
	p     stack.Profile
	funcs map[stack.Func]int32
	// stacks indexes p.Stacks by a hash of their frames; a hash shared by
	// different stacks (rare) sends the later ones to collide.
	stacks  map[uint64]int
	collide map[string]int
	seed    maphash.Seed
	arena   []int32 // frames of new stacks, allocated in chunks
	frames  []int32
	key     []byte
	remap   []int32
	mixed   bool // inputs with different sampling rates
}

func newProfileBuilder(rank int, from, to int64) *profileBuilder {
	return &profileBuilder{p: stack.Profile{Rank: rank, StartNS: from, EndNS: to, Funcs: []stack.Func{}, Stacks: []stack.Stack{}},
		funcs: map[stack.Func]int32{}, stacks: map[uint64]int{}, seed: maphash.MakeSeed()}
}

func (b *profileBuilder) hash(fr []int32) uint64 {
	b.key = b.key[:0]
	for _, f := range fr {
		u := uint32(f)
		b.key = append(b.key, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return maphash.Bytes(b.seed, b.key)
}

// keep copies fr into the arena.
func (b *profileBuilder) keep(fr []int32) []int32 {
	if len(b.arena)+len(fr) > cap(b.arena) {
		b.arena = make([]int32, 0, max(1<<16, len(fr)))
	}
	n := len(b.arena)
	b.arena = append(b.arena, fr...)
	return b.arena[n:len(b.arena):len(b.arena)]
}

func frameKey(fr []int32) string {
	k := make([]byte, 0, 4*len(fr))
	for _, f := range fr {
		u := uint32(f)
		k = append(k, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return string(k)
}

// add merges q in.
func (b *profileBuilder) add(q *stack.Profile) {
	if q.Hz != 0 {
		if b.p.Hz == 0 {
			b.p.Hz, b.p.Ratio = q.Hz, q.Ratio
		} else if b.p.Hz != q.Hz || b.p.Ratio != q.Ratio {
			b.mixed = true
		}
	}
	b.remap = b.remap[:0]
	for _, f := range q.Funcs {
		id, ok := b.funcs[f]
		if !ok {
			id = int32(len(b.p.Funcs))
			b.funcs[f] = id
			b.p.Funcs = append(b.p.Funcs, f)
		}
		b.remap = append(b.remap, id)
	}
next:
	for _, st := range q.Stacks {
		if st.Count <= 0 {
			continue
		}
		b.frames = b.frames[:0]
		for _, fr := range st.Frames {
			if fr < 0 || int(fr) >= len(b.remap) {
				continue next // malformed: dropped whole, never merged into another stack
			}
			b.frames = append(b.frames, b.remap[fr])
		}
		h := b.hash(b.frames)
		i, ok := b.stacks[h]
		if ok && !slices.Equal(b.p.Stacks[i].Frames, b.frames) {
			k := frameKey(b.frames)
			if i, ok = b.collide[k]; !ok {
				if b.collide == nil {
					b.collide = map[string]int{}
				}
				b.collide[k] = len(b.p.Stacks)
			}
		} else if !ok {
			b.stacks[h] = len(b.p.Stacks)
		}
		if ok {
			b.p.Stacks[i].Count += st.Count
		} else {
			b.p.Stacks = append(b.p.Stacks, stack.Stack{Frames: b.keep(b.frames), Count: st.Count})
		}
		b.p.Total += st.Count
	}
}

// profile returns the merged profile (the builder must not be used
// after).
func (b *profileBuilder) profile() *stack.Profile { return &b.p }

// mergeProfiles merges ps into one profile of rank (-1 for a group) over
// [from, to).
func mergeProfiles(rank int, from, to int64, ps ...*stack.Profile) *stack.Profile {
	b := newProfileBuilder(rank, from, to)
	for _, p := range ps {
		if p != nil {
			b.add(p)
		}
	}
	return b.profile()
}
