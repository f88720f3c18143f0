package symbolize

import (
	"container/list"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// ResolverOptions bounds a Resolver's memory and open files.
type ResolverOptions struct {
	// MaxOpen bounds open symbol files (descriptors, mappings); default 256.
	MaxOpen int
	// CacheEntries bounds the (Build-ID, address) → name cache; default 1<<20.
	CacheEntries int
	// LocalDebug: on a Build-ID the store lacks, try the server node's own
	// debug directories once (Store.FromDebugDirs).
	LocalDebug bool
	// MissTTL: how long a Build-ID found absent is not looked for again
	// (uploads arrive later); default 30 s.
	MissTTL time.Duration
	Now     func() time.Time
}

// ResolverStats counts a Resolver's work since it was made.
type ResolverStats struct {
	Lookups   int64 // index lookups (cache misses)
	CacheHits int64
	Unknown   int64 // addresses outside every symbol, or unknown Build-ID
	Errors    int64 // corrupt symbol pages or files
}

// Resolver names raw Native frames from a Store (§3.4). Safe for
// concurrent use.
type Resolver struct {
	s    *Store
	opts ResolverOptions

	mu      sync.Mutex
	open    map[string]*openIx
	lru     *list.List // of *openIx, most recent first
	missing map[string]time.Time
	cache   map[addrKey]hit
	prev    map[addrKey]hit
	stats   ResolverStats
}

type openIx struct {
	id      string
	ix      *Index
	c       io.Closer
	elem    *list.Element
	refs    int
	evicted bool
}

type addrKey struct {
	id   string
	addr uint64
}

// hit is a cached lookup: the containing symbol's name and start, or
// ok=false for an address no symbol contains.
type hit struct {
	name  string
	start uint64
	ok    bool
}

// NewResolver returns a Resolver over s.
func NewResolver(s *Store, opts ResolverOptions) *Resolver {
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = 256
	}
	if opts.CacheEntries <= 0 {
		opts.CacheEntries = 1 << 20
	}
	if opts.MissTTL <= 0 {
		opts.MissTTL = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Resolver{s: s, opts: opts, open: map[string]*openIx{}, lru: list.New(),
		missing: map[string]time.Time{}, cache: map[addrKey]hit{}, prev: map[addrKey]hit{}}
	s.onRemove(r.forget)
	return r
}

// forget drops what the Resolver knows of id after Store.Remove, so a
// removed (e.g. poisoned) file stops naming frames at once.
func (r *Resolver) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o := r.open[id]; o != nil {
		delete(r.open, id)
		r.lru.Remove(o.elem)
		o.evicted = true
		if o.refs == 0 {
			o.c.Close()
		}
	}
	delete(r.missing, id)
	// The address cache is keyed by (id, addr); dropping it all is rare
	// (an admin action) and cheaper than indexing it by id.
	clear(r.cache)
	clear(r.prev)
}

// Stats returns counters since the Resolver was made.
func (r *Resolver) Stats() ResolverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close closes every open symbol file not in use.
func (r *Resolver) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, o := range r.open {
		delete(r.open, id)
		r.lru.Remove(o.elem)
		o.evicted = true
		if o.refs == 0 {
			o.c.Close()
		}
	}
	return nil
}

// acquire returns buildID's open index (nil when the store lacks it);
// release it when done.
func (r *Resolver) acquire(id string) *openIx {
	r.mu.Lock()
	if o := r.open[id]; o != nil {
		o.refs++
		r.lru.MoveToFront(o.elem)
		r.mu.Unlock()
		return o
	}
	if t, ok := r.missing[id]; ok && r.opts.Now().Sub(t) < r.opts.MissTTL {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()

	ix, c, err := r.s.Open(id)
	if errors.Is(err, ErrNotFound) && r.opts.LocalDebug {
		if ok, _ := r.s.FromDebugDirs(id); ok {
			ix, c, err = r.s.Open(id)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			r.stats.Errors++
		}
		r.missing[id] = r.opts.Now()
		if len(r.missing) > 4*r.opts.MaxOpen+1024 {
			clear(r.missing) // bounded; a forgotten miss only costs one stat
		}
		return nil
	}
	delete(r.missing, id)
	if o := r.open[id]; o != nil { // opened concurrently
		c.Close()
		o.refs++
		return o
	}
	o := &openIx{id: id, ix: ix, c: c, refs: 1}
	o.elem = r.lru.PushFront(o)
	r.open[id] = o
	for r.lru.Len() > r.opts.MaxOpen {
		old := r.lru.Back().Value.(*openIx)
		r.lru.Remove(old.elem)
		delete(r.open, old.id)
		old.evicted = true
		if old.refs == 0 {
			old.c.Close()
		}
	}
	return o
}

func (r *Resolver) release(o *openIx) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.refs--; o.refs == 0 && o.evicted {
		o.c.Close() // evicted while in use: the last user unmaps it
	}
}

// cached returns a cached lookup.
func (r *Resolver) cached(k addrKey) (hit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.cache[k]; ok {
		r.stats.CacheHits++
		return n, true
	}
	if n, ok := r.prev[k]; ok {
		r.stats.CacheHits++
		r.put(k, n)
		return n, true
	}
	return hit{}, false
}

// put inserts into the two-generation cache: when the young map is full
// it becomes the old one, so memory stays within CacheEntries while hot
// addresses survive.
func (r *Resolver) put(k addrKey, h hit) {
	if len(r.cache) >= r.opts.CacheEntries/2+1 {
		r.prev = r.cache
		r.cache = make(map[addrKey]hit, len(r.prev))
	}
	r.cache[k] = h
}

// session holds the indexes one Profile call acquired.
type session struct {
	r    *Resolver
	held map[string]*openIx
}

func (ss *session) lookup(id string, addr uint64) hit {
	k := addrKey{id, addr}
	if h, ok := ss.r.cached(k); ok {
		return h
	}
	o, seen := ss.held[id]
	if !seen {
		o = ss.r.acquire(id)
		ss.held[id] = o
	}
	r := ss.r
	if o == nil {
		r.mu.Lock()
		r.stats.Unknown++
		r.mu.Unlock()
		return hit{} // store lacks it: not cached, an upload may come
	}
	s, ok, err := o.ix.Find(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Lookups++
	switch {
	case err != nil:
		r.stats.Errors++
		return hit{}
	case !ok:
		r.stats.Unknown++
		r.put(k, hit{})
		return hit{}
	}
	h := hit{name: s.Name, start: s.Start, ok: true}
	r.put(k, h)
	return h
}

func (ss *session) close() {
	for _, o := range ss.held {
		if o != nil {
			ss.r.release(o)
		}
	}
}

// Profile symbolizes the samples of rank (every sample when rank < 0)
// from batches into one Profile: Native frames named from the store by
// Build-ID and demangled; Kernel, Python and Symbol frames kept as named;
// an address no symbol contains named "<module>+0x<addr>" (never the
// nearest lower symbol, §5.3); a Foreign sample gets a root frame
// "[other process] <comm>" (an opaque one is its own frame alone:
// stack.HiddenFrame, stack.SelfFrame). Identical stacks are merged, frames root first.
func (r *Resolver) Profile(batches []*stack.Batch, rank int) *stack.Profile {
	p := &stack.Profile{Rank: rank, Funcs: []stack.Func{}, Stacks: []stack.Stack{}}
	ss := &session{r: r, held: map[string]*openIx{}}
	defer ss.close()
	funcs := map[stack.Func]int32{}
	stacks := map[string]int{}
	type memoKey struct {
		mod  int32
		addr uint64
	}
	memo := map[memoKey]int32{}    // per call: no lock, no hashing of Build-IDs
	byStart := map[memoKey]int32{} // (module, symbol start): names hashed once per function
	// A direct-mapped front for the memo: profiles repeat a few hot
	// return addresses (Zipf-like), which then skip the map.
	type slot struct {
		k   memoKey
		idx int32
	}
	var front [1 << 12]slot
	for i := range front {
		front[i].idx = -1
	}
	type module struct{ id, name string }
	mods := map[module]int32{}
	var modList []module
	intern := func(f stack.Func) int32 {
		if i, ok := funcs[f]; ok {
			return i
		}
		i := int32(len(p.Funcs))
		p.Funcs = append(p.Funcs, f)
		funcs[f] = i
		return i
	}
	var frames []int32
	var key []byte
	var mapMod []int32
	for _, b := range batches {
		if b == nil {
			continue
		}
		used := false
		mapMod = mapMod[:0]
		for _, m := range b.Mappings {
			mk := module{m.BuildID, moduleName(m.Path)}
			id, ok := mods[mk]
			if !ok {
				id = int32(len(modList))
				mods[mk] = id
				modList = append(modList, mk)
			}
			mapMod = append(mapMod, id)
		}
		for si := range b.Samples {
			s := &b.Samples[si]
			if rank >= 0 && s.Rank != rank {
				continue
			}
			used = true
			frames = frames[:0]
			if s.Foreign && !s.Opaque() { // an opaque sample's one frame names it
				comm := s.Comm
				if comm == "" {
					comm = "pid " + strconv.Itoa(s.PID)
				}
				frames = append(frames, intern(stack.Func{Name: "[other process] " + comm, Kind: stack.Symbol}))
			}
			for j := len(s.Frames) - 1; j >= 0; j-- {
				fr := &s.Frames[j]
				valid := fr.Mapping >= 0 && int(fr.Mapping) < len(mapMod)
				var f stack.Func
				switch fr.Kind {
				case stack.Native:
					if !valid {
						f = stack.Func{Name: orUnknown(fr.Func, "[unknown]", fr.Addr), Kind: stack.Native}
						break
					}
					mk := memoKey{mapMod[fr.Mapping], fr.Addr}
					h := (fr.Addr*0x9E3779B97F4A7C15 + uint64(mk.mod)) >> 52
					if sl := &front[h]; sl.idx >= 0 && sl.k == mk {
						frames = append(frames, sl.idx)
						continue
					}
					if i, ok := memo[mk]; ok {
						front[h] = slot{mk, i}
						frames = append(frames, i)
						continue
					}
					mod := modList[mk.mod]
					var sy hit
					if mod.id != "" {
						sy = ss.lookup(mod.id, fr.Addr)
					}
					var i int32
					if sy.ok {
						sk := memoKey{mk.mod, sy.start}
						var seen bool
						if i, seen = byStart[sk]; !seen {
							i = intern(stack.Func{Name: sy.name, Kind: stack.Native, Module: mod.name})
							byStart[sk] = i
						}
					} else {
						i = intern(stack.Func{Name: orUnknown(fr.Func, mod.name, fr.Addr), Kind: stack.Native, Module: mod.name})
					}
					memo[mk] = i
					front[h] = slot{mk, i}
					frames = append(frames, i)
					continue
				case stack.Kernel:
					f = stack.Func{Name: fr.Func, Kind: stack.Kernel, Module: "kernel"}
				case stack.Python:
					f = stack.Func{Name: fr.Func, Kind: stack.Python, Module: fr.File}
				default:
					f = stack.Func{Name: fr.Func, Kind: fr.Kind}
					if valid {
						f.Module = modList[mapMod[fr.Mapping]].name
					}
				}
				frames = append(frames, intern(f))
			}
			key = key[:0]
			for _, fi := range frames {
				key = binary.LittleEndian.AppendUint32(key, uint32(fi))
			}
			if i, ok := stacks[string(key)]; ok {
				p.Stacks[i].Count = satAdd(p.Stacks[i].Count, s.Count)
			} else {
				stacks[string(key)] = len(p.Stacks)
				p.Stacks = append(p.Stacks, stack.Stack{Frames: append([]int32(nil), frames...), Count: s.Count})
			}
			p.Total = satAdd(p.Total, s.Count)
		}
		if used || len(b.Samples) == 0 {
			if p.StartNS == 0 || b.StartNS < p.StartNS {
				p.StartNS = b.StartNS
			}
			p.EndNS = max(p.EndNS, b.EndNS)
			if p.Hz == 0 && b.Hz != 0 {
				p.Hz, p.Ratio = b.Hz, b.Ratio
			}
		}
	}
	return p
}

// orUnknown keeps a name the agent already gave, else the honest
// "<module>+0x<addr>".
func orUnknown(given, module string, addr uint64) string {
	if given != "" {
		return given
	}
	return module + "+0x" + strconv.FormatUint(addr, 16)
}

// moduleName is a mapping's file base name ("[unknown]" without a path).
func moduleName(p string) string {
	if p == "" {
		return "[unknown]"
	}
	return path.Base(p)
}

// satAdd adds non-negative counts, saturating at MaxInt64: many batches
// of imported profiles (each count ≤ stack.MaxCount) must never wrap into
// a negative total.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
