package sysom

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// Group is a communication group (a communicator's members).
type Group struct {
	ID    string `json:"id"`
	Ranks []int  `json:"ranks"`
}

// GPUKernel is one rank's GPU time in one kernel over the window
// (§3.2 CUDA-event timings).
type GPUKernel struct {
	Rank    int     `json:"rank"`
	Name    string  `json:"name"`
	Count   int64   `json:"count"`
	TotalMs float64 `json:"total_ms"`
}

// Input is one analysis window (contract §5).
type Input struct {
	// Groups: communication groups (from collective.Comm); none → one
	// group of all ranks with a profile.
	Groups []Group
	// Calls: the window's collective calls, any order (slow ranks, §3.1).
	Calls []collective.Call
	// Profiles: per rank, the current window; Baseline: per rank, a
	// historical window (temporal baseline), may be nil.
	Profiles map[int]*stack.Profile
	Baseline map[int]*stack.Profile
	// OS, OSBase: the current and baseline windows' OS points.
	OS, OSBase []osstat.Batch
	// GPU, GPUBase: per-rank GPU kernel time; empty = not observed.
	GPU, GPUBase []GPUKernel
	// IterMs, IterBaseMs: median iteration time now and at baseline
	// (0: unknown).
	IterMs, IterBaseMs float64
	// Hosts (optional): each rank's host (collective.Comm.Host). Ranks on
	// one host share a clock; when absent, the node of the rank's OS
	// points is used, else each rank counts as its own clock.
	Hosts map[int]string
}

// AllGroup is the ID of the group Analyze makes when Input.Groups is
// empty.
const AllGroup = "all"

// validate checks what the engine relies on and names the field.
func (in *Input) validate() error {
	for i, g := range in.Groups {
		if g.ID == "" {
			return signal.FieldErrorf(fmt.Sprintf("groups[%d].id", i), "is required")
		}
		seen := map[int]bool{}
		for _, r := range g.Ranks {
			if r < 0 || r > stack.MaxRank {
				return signal.FieldErrorf(fmt.Sprintf("groups[%d].ranks", i), "rank %d outside [0, %d]", r, stack.MaxRank)
			}
			if seen[r] {
				return signal.FieldErrorf(fmt.Sprintf("groups[%d].ranks", i), "rank %d listed twice", r)
			}
			seen[r] = true
		}
	}
	for i := range in.Calls {
		if err := in.Calls[i].Validate(0); err != nil {
			return prefix(fmt.Sprintf("calls[%d]", i), err)
		}
	}
	for _, m := range []struct {
		name string
		ps   map[int]*stack.Profile
	}{{"profiles", in.Profiles}, {"baseline", in.Baseline}} {
		for r, p := range m.ps {
			if err := ValidateProfile(p); err != nil {
				return prefix(fmt.Sprintf("%s[%d]", m.name, r), err)
			}
		}
	}
	for _, m := range []struct {
		name string
		bs   []osstat.Batch
	}{{"os", in.OS}, {"os_base", in.OSBase}} {
		for i := range m.bs {
			if err := m.bs[i].Validate(); err != nil {
				return prefix(fmt.Sprintf("%s[%d]", m.name, i), err)
			}
		}
	}
	for _, m := range []struct {
		name string
		ks   []GPUKernel
	}{{"gpu", in.GPU}, {"gpu_base", in.GPUBase}} {
		for i, k := range m.ks {
			f := func(s string) string { return fmt.Sprintf("%s[%d].%s", m.name, i, s) }
			switch {
			case k.Rank < 0 || k.Rank > stack.MaxRank:
				return signal.FieldErrorf(f("rank"), "%d outside [0, %d]", k.Rank, stack.MaxRank)
			case k.Name == "" || len(k.Name) > stack.MaxNameLen:
				return signal.FieldErrorf(f("name"), "empty or longer than %d bytes", stack.MaxNameLen)
			case k.Count < 0:
				return signal.FieldErrorf(f("count"), "negative")
			case math.IsNaN(k.TotalMs) || k.TotalMs < 0 || k.TotalMs > 1e12:
				return signal.FieldErrorf(f("total_ms"), "not a finite number in [0, 1e12]")
			}
		}
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"iter_ms", in.IterMs}, {"iter_base_ms", in.IterBaseMs}} {
		if math.IsNaN(v.x) || v.x < 0 || v.x > 1e9 {
			return signal.FieldErrorf(v.name, "not a finite number in [0, 1e9]")
		}
	}
	return nil
}

// ValidateProfile checks a symbolized profile: function kinds, frame
// indices in range, positive counts that sum to Total. It is the builder
// of the engine's outside input (profiles may come from pprof or
// collapsed-stack imports).
func ValidateProfile(p *stack.Profile) error {
	if p == nil {
		return signal.FieldErrorf("profile", "is nil")
	}
	for i, f := range p.Funcs {
		if !f.Kind.Valid() {
			return signal.FieldErrorf(fmt.Sprintf("funcs[%d].kind", i), "invalid kind %d", uint8(f.Kind))
		}
		if len(f.Name) > stack.MaxNameLen || len(f.Module) > stack.MaxNameLen {
			return signal.FieldErrorf(fmt.Sprintf("funcs[%d].name", i), "longer than %d bytes", stack.MaxNameLen)
		}
	}
	var sum int64
	n := int32(len(p.Funcs))
	for i := range p.Stacks {
		s := &p.Stacks[i]
		if s.Count <= 0 || s.Count > stack.MaxCount {
			return signal.FieldErrorf(fmt.Sprintf("stacks[%d].count", i), "%d outside [1, %d]", s.Count, stack.MaxCount)
		}
		if len(s.Frames) > stack.MaxFrames*2 {
			return signal.FieldErrorf(fmt.Sprintf("stacks[%d].frames", i), "%d frames exceed %d", len(s.Frames), stack.MaxFrames*2)
		}
		for j, f := range s.Frames {
			if f < 0 || f >= n {
				return signal.FieldErrorf(fmt.Sprintf("stacks[%d].frames[%d]", i, j), "%d does not index the %d funcs", f, n)
			}
		}
		sum += s.Count
		if sum > math.MaxInt64/4 {
			return signal.FieldErrorf(fmt.Sprintf("stacks[%d].count", i), "counts overflow")
		}
	}
	if sum != p.Total {
		return signal.FieldErrorf("total", "%d is not the sum of the stacks' counts (%d)", p.Total, sum)
	}
	return nil
}

func prefix(where string, err error) error {
	if fe, ok := err.(*signal.FieldError); ok {
		return &signal.FieldError{Field: where + "." + fe.Field, Msg: fe.Msg}
	}
	return fmt.Errorf("%s: %w", where, err)
}

// interner gives every distinct function (name, kind, module) of the
// window one dense id, so profiles with their own function tables
// compare by id. Ranks running the same binaries often carry identical
// tables; the last few tables are remembered and a repeated one costs
// one comparison per entry instead of one hash-map lookup.
type interner struct {
	// byName holds the first function of each name: string-keyed maps
	// hash faster than struct keys, and a name rarely has two (kind,
	// module) variants; those go to ids.
	byName map[string]int32
	ids    map[stack.Func]int32
	funcs  []stack.Func
	cache  []tableMap
}

type tableMap struct {
	funcs []stack.Func
	ids   []int32
}

func newInterner() *interner {
	return &interner{byName: map[string]int32{}, ids: map[stack.Func]int32{}}
}

func (in *interner) id(f stack.Func) int32 {
	first, ok := in.byName[f.Name]
	if ok && in.funcs[first] == f {
		return first
	}
	if ok {
		if id, ok := in.ids[f]; ok {
			return id
		}
	}
	id := int32(len(in.funcs))
	if ok {
		in.ids[f] = id
	} else {
		in.byName[f.Name] = id
	}
	in.funcs = append(in.funcs, f)
	return id
}

// lookup is id without inserting (safe for concurrent readers while no
// one inserts).
func (in *interner) lookup(f stack.Func) (int32, bool) {
	first, ok := in.byName[f.Name]
	if !ok {
		return 0, false
	}
	if in.funcs[first] == f {
		return first, true
	}
	id, ok := in.ids[f]
	return id, ok
}

// tables maps many profiles' function tables to global ids. Ranks of
// one job share most functions but list them in their own order, so
// after the first table seeds the vocabulary, the others are mostly
// hits: they are looked up concurrently (read-only) and the few misses
// interned serially afterwards, in table order (deterministic ids).
func (in *interner) tables(fs [][]stack.Func) [][]int32 {
	out := make([][]int32, len(fs))
	if len(fs) == 0 {
		return out
	}
	out[0] = in.table(fs[0])
	rest := len(fs) - 1
	workers := min(runtime.GOMAXPROCS(0), 8, max(rest/16, 1))
	missed := make([]bool, len(fs))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 1 + w; i < len(fs); i += workers {
				if len(fs[i]) == len(fs[0]) && len(fs[i]) > 0 && &fs[i][0] == &fs[0][0] {
					out[i] = out[0]
					continue
				}
				ids := make([]int32, len(fs[i]))
				for j, f := range fs[i] {
					id, ok := in.lookup(f)
					if !ok {
						id, missed[i] = -1, true
					}
					ids[j] = id
				}
				out[i] = ids
			}
		})
	}
	wg.Wait()
	for i := range fs {
		if !missed[i] {
			continue
		}
		for j, id := range out[i] {
			if id < 0 {
				out[i][j] = in.id(fs[i][j])
			}
		}
	}
	return out
}

// table maps a profile's function table to global ids.
func (in *interner) table(fs []stack.Func) []int32 {
	for _, c := range in.cache {
		if len(c.funcs) == len(fs) && (len(fs) == 0 || &c.funcs[0] == &fs[0] || slices.Equal(c.funcs, fs)) {
			return c.ids
		}
	}
	ids := make([]int32, len(fs))
	for i, f := range fs {
		ids[i] = in.id(f)
	}
	if len(in.cache) == 4 {
		in.cache = in.cache[1:]
	}
	in.cache = append(in.cache, tableMap{fs, ids})
	return ids
}

// incCount is one function's inclusive sample count on one rank.
type incCount struct {
	fn int32
	n  int64
}

// incScratch is reusable scratch for inclusive, indexed by global id.
type incScratch struct {
	stamp   []int64
	acc     []int64
	touched []int32
	gen     int64
}

func (sc *incScratch) grow(n int) {
	for len(sc.stamp) < n {
		sc.stamp = append(sc.stamp, 0)
		sc.acc = append(sc.acc, 0)
	}
}

// foreignRoots marks the functions that are another process's root
// frame ("[other process] name").
func (in *interner) foreignRoots() []bool {
	out := make([]bool, len(in.funcs))
	for i, f := range in.funcs {
		out[i] = strings.HasPrefix(f.Name, ForeignPrefix)
	}
	return out
}

// inclusive returns each function's inclusive count in p (samples with
// the function anywhere on the stack, recursion counted once), by global
// id, in first-seen order, and the rank's own samples. A stack under
// another process's root frame (foreign) counts for that root only.
func inclusive(p *stack.Profile, gid []int32, foreign []bool, sc *incScratch) ([]incCount, int64) {
	sc.touched = sc.touched[:0]
	var own int64
	for si := range p.Stacks {
		s := &p.Stacks[si]
		sc.gen++
		frames := s.Frames
		if len(frames) > 0 && foreign[gid[frames[0]]] {
			frames = frames[:1]
		} else {
			own += s.Count
		}
		for _, f := range frames {
			g := gid[f]
			if sc.stamp[g] != sc.gen {
				if sc.acc[g] == 0 {
					sc.touched = append(sc.touched, g)
				}
				sc.stamp[g] = sc.gen
				sc.acc[g] += s.Count
			}
		}
	}
	out := make([]incCount, len(sc.touched))
	for i, g := range sc.touched {
		out[i] = incCount{g, sc.acc[g]}
		sc.acc[g] = 0
	}
	return out, own
}
