package analysis

import (
	"hash/maphash"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// profileBuilder merges symbolized profiles into one: functions interned
// by (name, kind, module), identical stacks summed. It bounds a window's
// memory by its distinct stacks (a rank's chunks, a group's ranks).
type profileBuilder struct {
	p   stack.Profile
	tab *funcTable
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

// funcTable interns functions; builders of one request share it so every
// rank's profile carries the very same Funcs slice, which the engine
// recognizes by identity and maps once for all ranks (3–4× faster at
// 1,024 ranks than a table per rank; engine/sysom BenchmarkWaterline*).
type funcTable struct {
	ids   map[stack.Func]int32
	funcs []stack.Func
}

func newFuncTable() *funcTable {
	return &funcTable{ids: map[stack.Func]int32{}, funcs: []stack.Func{}}
}

func newProfileBuilder(rank int, from, to int64) *profileBuilder {
	return newSharedProfileBuilder(rank, from, to, newFuncTable())
}

// newSharedProfileBuilder builds over tab, shared with other builders.
func newSharedProfileBuilder(rank int, from, to int64, tab *funcTable) *profileBuilder {
	return &profileBuilder{p: stack.Profile{Rank: rank, StartNS: from, EndNS: to, Stacks: []stack.Stack{}},
		tab: tab, stacks: map[uint64]int{}, seed: maphash.MakeSeed()}
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
		id, ok := b.tab.ids[f]
		if !ok {
			id = int32(len(b.tab.funcs))
			b.tab.ids[f] = id
			b.tab.funcs = append(b.tab.funcs, f)
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
			b.p.Stacks[i].Count = satAdd(b.p.Stacks[i].Count, st.Count)
		} else {
			b.p.Stacks = append(b.p.Stacks, stack.Stack{Frames: b.keep(b.frames), Count: st.Count})
		}
		b.p.Total = satAdd(b.p.Total, st.Count)
	}
}

// profile returns the merged profile (the builder must not be used
// after). With a shared table, call it only once every builder sharing
// it is done adding, so all profiles get the final, identical slice.
func (b *profileBuilder) profile() *stack.Profile {
	b.p.Funcs = b.tab.funcs
	return &b.p
}

// satAdd adds non-negative counts, saturating at MaxInt64: imported
// profiles may each carry counts up to stack.MaxCount, and a wrapped sum
// would turn into negative CPU fractions.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

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
