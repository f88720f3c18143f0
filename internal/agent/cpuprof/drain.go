package cpuprof

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// ustack.flags (bpf/cpuprof.c).
const (
	ufTruncated = 1
	ufComplex   = 2
)

// settle is how long a swapped-out generation is left alone before it is
// read: a program that read the old generation number finishes in
// microseconds (it runs in the timer interrupt, not preemptible).
const settle = 2 * time.Millisecond

type genMaps struct{ counts, ustacks, kstacks *ebpf.Map }

func (p *Profiler) gens(g uint32) genMaps {
	if g == 0 {
		return genMaps{p.objs.Counts0, p.objs.Ustacks0, p.objs.Kstacks0}
	}
	return genMaps{p.objs.Counts1, p.objs.Ustacks1, p.objs.Kstacks1}
}

// swap makes the program write the other generation and returns the one
// to drain (§4: drained every interval, no sample lost while reading).
func (p *Profiler) swap() (uint32, error) {
	var c cpuprofConfig
	if err := p.objs.Cfg.Lookup(uint32(0), &c); err != nil {
		return 0, err
	}
	old := c.Gen
	c.Gen = old ^ 1
	if err := p.objs.Cfg.Put(uint32(0), c); err != nil {
		return 0, err
	}
	p.gen = c.Gen
	time.Sleep(settle)
	return old, nil
}

type rawEntry struct {
	k cpuprofCountKey
	n uint64
}

// readGen reads a drained generation and clears it.
func (p *Profiler) readGen(g uint32) (entries []rawEntry, ustacks map[uint64]*cpuprofUstack, kstacks map[int32][]uint64, err error) {
	m := p.gens(g)
	var ck []cpuprofCountKey
	var cv []uint64
	if ck, cv, err = readAll[cpuprofCountKey, uint64](m.counts); err != nil {
		return nil, nil, nil, fmt.Errorf("reading counts: %w", err)
	}
	entries = make([]rawEntry, len(ck))
	for i := range ck {
		entries[i] = rawEntry{ck[i], cv[i]}
	}
	uk, uv, err := readAll[uint64, cpuprofUstack](m.ustacks)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading user stacks: %w", err)
	}
	ustacks = make(map[uint64]*cpuprofUstack, len(uk))
	for i := range uk {
		ustacks[uk[i]] = &uv[i]
	}
	kstacks = map[int32][]uint64{}
	for _, e := range entries {
		id := e.k.Kstack
		if id < 0 {
			continue
		}
		if _, ok := kstacks[id]; ok {
			continue
		}
		var ips [kstackDepth]uint64
		if err := m.kstacks.Lookup(uint32(id), &ips); err == nil {
			kstacks[id] = trimZeros(ips[:])
		}
	}
	// Clear: everything read above, plus kernel stacks of dropped samples.
	deleteKeys(m.counts, ck)
	deleteKeys(m.ustacks, uk)
	var ids []uint32
	var prev any
	for {
		var id uint32
		if m.kstacks.NextKey(prev, &id) != nil {
			break
		}
		ids = append(ids, id)
		prev = id
	}
	for _, id := range ids {
		_ = m.kstacks.Delete(id)
	}
	return entries, ustacks, kstacks, nil
}

// readAll reads a hash map with batch lookups (one syscall per chunk),
// falling back to iteration on kernels without them.
func readAll[K, V any](m *ebpf.Map) ([]K, []V, error) {
	const chunk = 4096
	var keys []K
	var vals []V
	kb := make([]K, chunk)
	vb := make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, kb, vb, nil)
		keys = append(keys, kb[:n]...)
		vals = append(vals, vb[:n]...)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return keys, vals, nil
		}
		if errors.Is(err, ebpf.ErrNotSupported) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
	}
	keys, vals = keys[:0], vals[:0]
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
		vals = append(vals, v)
	}
	return keys, vals, it.Err()
}

func deleteKeys[K any](m *ebpf.Map, keys []K) {
	if len(keys) == 0 {
		return
	}
	if _, err := m.BatchDelete(keys, nil); err == nil {
		return
	}
	for _, k := range keys {
		_ = m.Delete(k)
	}
}

func trimZeros(ips []uint64) []uint64 {
	n := len(ips)
	for n > 0 && ips[n-1] == 0 {
		n--
	}
	return append([]uint64(nil), ips[:n]...)
}

// drain swaps generations, reads the old one and builds the window's
// batch. It returns nil if the maps could not be read.
func (p *Profiler) drain(now time.Time) *stack.Batch {
	start := p.winStart
	p.winStart = now
	old, err := p.swap()
	if err != nil {
		p.cfg.Log.Warn("cpuprof: swapping generations", "err", err)
		return nil
	}
	entries, ustacks, kstacks, err := p.readGen(old)
	if err != nil {
		p.cfg.Log.Warn("cpuprof: draining", "err", err)
		return nil
	}
	p.mu.Lock()
	cur := p.readBPFStats()
	delta := cur
	for i := range delta {
		delta[i] -= p.base[i]
	}
	p.base = cur
	p.stats.Windows++
	p.mu.Unlock()
	b := p.build(entries, ustacks, kstacks)
	b.StartNS, b.EndNS = start.UnixNano(), now.UnixNano()
	if b.EndNS <= b.StartNS {
		b.EndNS = b.StartNS + 1
	}
	b.Dropped = int64(delta[stDropCount])
	b.Unwind.FPFrames = int64(delta[stFPFrames])
	b.Unwind.DWARFFrames = int64(delta[stDWARFFrames])
	b.Unwind.FallbackFrames = int64(delta[stFallbackFrames])
	b.Unwind.Truncated = int64(delta[stTruncated])
	return b
}

// builder assembles one window's batch.
type builder struct {
	p        *Profiler
	b        *stack.Batch
	mapIdx   map[mapKey]int32
	shared   map[frameKey][]stack.Frame // frames of (pid, kstack, ustack), shared read-only
	sharedTr map[frameKey]bool
	procs    map[int]*procState // untracked processes looked up this window
	mems     map[int]*procMem
	pyNames  map[[2]uint64]pyName // (pid, code) → name
	comms    map[int]string
	threads  map[[2]int]string
	samples  map[sampleKey]int
	rankOf   map[int]rankAns
	revealed map[[2]int]bool
	laggard  map[int]bool
	ustacks  map[uint64]*cpuprofUstack
	kstacks  map[int32][]uint64
	pyFrames int64
}

type rankAns struct {
	rank int
	ok   bool
}

type sampleKey struct {
	rank, pid, tid int
	foreign        bool
	kstack         int32
	uhash          uint64
	opaque         string // the frame of an opaque sample
}

// share deals one CPU's foreign samples to the ranks that ran on it in
// proportion to their own samples there: each entry's count is split by
// floor, and the remainders go round by smooth weighted round robin, so
// the split is deterministic and exact to ±1 per rank over the window.
type share struct {
	ranks []int // ascending
	w     []uint64
	cur   []int64
	total uint64
}

type rankCount struct {
	rank int
	n    int64
}

func newShare(rs map[int]uint64) *share {
	s := &share{}
	for r := range rs {
		s.ranks = append(s.ranks, r)
	}
	slices.Sort(s.ranks)
	for _, r := range s.ranks {
		s.w = append(s.w, rs[r])
		s.total += rs[r]
	}
	s.cur = make([]int64, len(s.ranks))
	return s
}

func (s *share) take(n uint64) []rankCount {
	out := make([]rankCount, len(s.ranks))
	var given uint64
	for i, r := range s.ranks {
		q := n * s.w[i] / s.total // w ≤ total, n small: no overflow in practice
		out[i] = rankCount{r, int64(q)}
		given += q
	}
	for ; given < n; given++ {
		best := 0
		for i := range s.cur {
			s.cur[i] += int64(s.w[i])
			if s.cur[i] > s.cur[best] {
				best = i
			}
		}
		s.cur[best] -= int64(s.total)
		out[best].n++
	}
	return slices.DeleteFunc(out, func(c rankCount) bool { return c.n == 0 })
}

func (p *Profiler) build(entries []rawEntry, ustacks map[uint64]*cpuprofUstack, kstacks map[int32][]uint64) *stack.Batch {
	bd := &builder{p: p, b: &stack.Batch{Hz: p.cfg.Hz, Ratio: p.cfg.Ratio, Samples: []stack.Sample{}},
		mapIdx: map[mapKey]int32{}, shared: map[frameKey][]stack.Frame{}, sharedTr: map[frameKey]bool{}, procs: map[int]*procState{}, mems: map[int]*procMem{},
		pyNames: map[[2]uint64]pyName{}, comms: map[int]string{}, threads: map[[2]int]string{},
		samples: map[sampleKey]int{}, rankOf: map[int]rankAns{}, revealed: map[[2]int]bool{}, laggard: map[int]bool{}, ustacks: ustacks, kstacks: kstacks}
	defer func() {
		for _, m := range bd.mems {
			if m != nil {
				m.close()
			}
		}
	}()
	// Which ranks ran on which CPU this window, and how much: another
	// process's samples on that CPU are dealt to them in proportion
	// (Foreign attribution). Every rank sharing the core then sees the
	// same share of interference; giving it all to the busiest rank made
	// one of the ranks sharing a core look hit and the others not (issue
	// 16 item 8b).
	perCPU := map[uint32]map[int]uint64{}
	for _, e := range entries {
		if a := bd.rank(int(e.k.Pid)); a.ok {
			if perCPU[e.k.Cpu] == nil {
				perCPU[e.k.Cpu] = map[int]uint64{}
			}
			perCPU[e.k.Cpu][a.rank] += e.n
		}
	}
	shares := make(map[uint32]*share, len(perCPU))
	for cpu, rs := range perCPU {
		shares[cpu] = newShare(rs)
	}
	for _, e := range entries {
		pid := int(e.k.Pid)
		if a := bd.rank(pid); a.ok {
			bd.sample(e, a.rank, false, int64(e.n))
			continue
		}
		sh := shares[e.k.Cpu]
		if sh == nil {
			if p.cfg.AllProcesses {
				bd.sample(e, -1, false, int64(e.n))
			}
			continue
		}
		for _, part := range sh.take(e.n) {
			switch {
			case bd.isLaggard(pid):
				bd.opaque(part.rank, stack.SelfFrame, part.n)
			case bd.reveal(part.rank, pid):
				bd.sample(e, part.rank, true, part.n)
			default:
				bd.opaque(part.rank, stack.HiddenFrame, part.n)
			}
		}
	}
	bd.b.Unwind.PythonFrames = bd.pyFrames
	return bd.b
}

// sample adds n of entry e's samples as rank's (foreign: another
// process's on rank's CPU, shown with its name and stacks).
func (bd *builder) sample(e rawEntry, rank int, foreign bool, n int64) {
	pid := int(e.k.Pid)
	sk := sampleKey{rank: rank, pid: pid, tid: int(e.k.Tid), foreign: foreign, kstack: e.k.Kstack, uhash: e.k.Uhash}
	if i, ok := bd.samples[sk]; ok {
		bd.b.Samples[i].Count += n
		return
	}
	s := stack.Sample{Rank: rank, PID: pid, TID: int(e.k.Tid), Foreign: foreign, Count: n}
	s.Thread = cstr(e.k.Comm[:])
	s.Comm = bd.comm(pid, s.Thread)
	// Threads of a process share identical stacks' frames (read-only).
	fk := frameKey{pid, e.k.Kstack, e.k.Uhash}
	if fr, ok := bd.shared[fk]; ok {
		s.Frames, s.Truncated = fr, bd.sharedTr[fk]
	} else {
		bd.frames(&s, e.k)
		if len(s.Frames) == 0 {
			s.Frames = []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: "[unknown]"}}
		}
		bd.shared[fk], bd.sharedTr[fk] = s.Frames, s.Truncated
	}
	bd.samples[sk] = len(bd.b.Samples)
	bd.b.Samples = append(bd.b.Samples, s)
}

// opaque adds n samples of another process to rank's one opaque sample
// named frame (stack.HiddenFrame, stack.SelfFrame): no pid, name or
// stack of the process leaves the agent, nothing of it is read.
func (bd *builder) opaque(rank int, frame string, n int64) {
	sk := sampleKey{rank: rank, foreign: true, opaque: frame}
	if i, ok := bd.samples[sk]; ok {
		bd.b.Samples[i].Count += n
		return
	}
	bd.samples[sk] = len(bd.b.Samples)
	bd.b.Samples = append(bd.b.Samples, stack.Sample{Rank: rank, Foreign: true, Count: n,
		Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: frame}}})
}

// reveal asks Config.Reveal once per (rank, pid) and window; without it
// nothing of another process is revealed.
func (bd *builder) reveal(rank, pid int) bool {
	k := [2]int{rank, pid}
	if v, ok := bd.revealed[k]; ok {
		return v
	}
	v := bd.p.cfg.Reveal != nil && bd.p.cfg.Reveal(rank, pid)
	bd.revealed[k] = v
	return v
}

// isLaggard: pid is the agent itself, or runs the agent's executable (a
// laggard server or second agent on this node).
func (bd *builder) isLaggard(pid int) bool {
	if v, ok := bd.laggard[pid]; ok {
		return v
	}
	v := pid == bd.p.self
	if !v && bd.p.selfExe != nil {
		if fi, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid)); err == nil {
			v = os.SameFile(fi, bd.p.selfExe)
		}
	}
	bd.laggard[pid] = v
	return v
}

func (bd *builder) rank(pid int) rankAns {
	if a, ok := bd.rankOf[pid]; ok {
		return a
	}
	r, ok := bd.p.cfg.RankOf(pid)
	a := rankAns{r, ok}
	bd.rankOf[pid] = a
	return a
}

func cstr(b []int8) string {
	var buf [16]byte
	n := 0
	for ; n < len(b) && n < len(buf) && b[n] != 0; n++ {
		buf[n] = byte(b[n])
	}
	return string(buf[:n])
}

func (bd *builder) comm(pid int, fallback string) string {
	if c, ok := bd.comms[pid]; ok {
		return c
	}
	c := fallback
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		c = strings.TrimSpace(string(b))
	}
	bd.comms[pid] = c
	return c
}

// frames fills s.Frames leaf first: kernel frames, then user frames with
// the Python frames stitched in place of each native eval-loop frame.
func (bd *builder) frames(s *stack.Sample, k cpuprofCountKey) {
	ips := bd.kstacks[k.Kstack]
	switch {
	case k.Kstack == -14: // -EFAULT: sampled in user mode, no kernel stack
		ips = nil
	case k.Kstack < 0 || len(ips) == 0:
		// The kernel stack was lost (stack map full, bucket collision):
		// what is left is not the whole stack.
		ips = nil
		s.Truncated = true
	}
	us := bd.ustacks[k.Uhash]
	if us != nil {
		s.Frames = make([]stack.Frame, 0, len(ips)+int(min(us.N, maxUserFrames))+int(min(us.Npy, maxPyFrames)))
	}
	if len(ips) > 0 {
		for i, ip := range ips {
			look := ip
			if i > 0 {
				look-- // a return address: name the call, not what follows it
			}
			s.Frames = append(s.Frames, stack.Frame{Kind: stack.Kernel, Addr: ip, Mapping: -1, Func: bd.p.ksyms.name(look)})
		}
	}
	if k.Uhash == 0 {
		return
	}
	if us == nil { // uhashDropped, or lost with its map
		s.Truncated = true
		return
	}
	s.Truncated = s.Truncated || us.Flags&ufTruncated != 0
	ps := bd.p.state.lookup(s.PID, bd.procs)
	n := min(int(us.N), len(us.Pcs))
	npy := min(int(us.Npy), len(us.Py))
	py := us.Py[:npy]
	for i := 0; i < n && len(s.Frames) < stack.MaxFrames; i++ {
		pc := us.Pcs[i]
		look := pc
		if i > 0 {
			look-- // a return address: name the call instruction
		}
		rm, ok := ps.find(look)
		if !ok {
			s.Frames = append(s.Frames, stack.Frame{Kind: stack.Symbol, Mapping: -1, Func: "[unknown]"})
			continue
		}
		vaddr := look - rm.bias
		if rm.f != nil && rm.f.py != nil && vaddr >= rm.f.py.evalLo && vaddr < rm.f.py.evalHi && len(py) > 0 {
			// One native _PyEval_EvalFrameDefault call runs the Python
			// frames up to and including the next entry frame (§4
			// stitching at the thread's native stack position).
			py = bd.stitch(s, py, true)
			continue
		}
		s.Frames = append(s.Frames, stack.Frame{Kind: stack.Native, Addr: vaddr, Mapping: bd.mapping(rm)})
	}
	if len(py) > 0 {
		bd.stitch(s, py, false)
	}
	if len(s.Frames) > stack.MaxFrames {
		s.Frames = s.Frames[:stack.MaxFrames]
		s.Truncated = true
	}
}

// stitch appends Python frames; one==true stops after the first entry
// frame. It returns the frames left.
func (bd *builder) stitch(s *stack.Sample, py []uint64, one bool) []uint64 {
	for len(py) > 0 {
		v := py[0]
		py = py[1:]
		code, entry := v&^1, v&1 == 1
		name, err := bd.pyName(s.PID, code)
		if err == nil {
			s.Frames = append(s.Frames, stack.Frame{Kind: stack.Python, Mapping: -1, Func: name.fn, File: name.file, Line: name.line})
			bd.pyFrames++
		} else {
			s.Frames = append(s.Frames, stack.Frame{Kind: stack.Python, Mapping: -1, Func: "[python]"})
		}
		if one && entry {
			break
		}
	}
	return py
}

func (bd *builder) pyName(pid int, code uint64) (pyName, error) {
	key := [2]uint64{uint64(pid), code}
	if n, ok := bd.pyNames[key]; ok {
		return n, nil
	}
	m, ok := bd.mems[pid]
	if !ok {
		var err error
		if m, err = openMem(pid); err != nil {
			bd.mems[pid] = nil
			return pyName{}, err
		}
		bd.mems[pid] = m
	}
	if m == nil {
		return pyName{}, errors.New("process memory unreadable")
	}
	n, err := readCode(m, code)
	if err != nil {
		return pyName{}, err
	}
	bd.pyNames[key] = n
	return n, nil
}

type mapKey struct {
	start, limit, offset, inode uint64
	f                           *fileInfo
}

type frameKey struct {
	pid    int
	kstack int32
	uhash  uint64
}

func (bd *builder) mapping(rm resolvedMap) int32 {
	mk := mapKey{rm.m.Start, rm.m.Limit, rm.m.Offset, rm.m.Inode, rm.f}
	if i, ok := bd.mapIdx[mk]; ok {
		return i
	}
	sm := stack.Mapping{Start: rm.m.Start, Limit: rm.m.Limit, Offset: rm.m.Offset, Path: rm.m.Path}
	if rm.f != nil {
		sm.BuildID = rm.f.buildID
	}
	i := int32(len(bd.b.Mappings))
	bd.mapIdx[mk] = i
	bd.b.Mappings = append(bd.b.Mappings, sm)
	return i
}
