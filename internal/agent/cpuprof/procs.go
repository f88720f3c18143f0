package cpuprof

import (
	"debug/elf"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/laggard-dev/laggard/internal/agent/cpuprof/ehframe"
	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// tracker keeps, for the processes whose user stacks are unwound with
// tables (registered ranks, or all with AllProcesses), their executable
// mappings in BPF, and for every ELF file seen its Build-ID, load bias
// and (once) its unwind rows (§4 "DWARF pre-processing"). It runs on the
// profiler's goroutine; mu guards only the counters Stats reads.
type tracker struct {
	p       *Profiler
	files   map[fileKey]*fileInfo
	byBuild map[string]*fileInfo // Build-ID → file holding its table
	procs   map[int]*procState
	nextID  uint32
	nextRow uint32
	scanGen int
	// deadline bounds the table compilation of one scan; files past it
	// are compiled by later scans (their processes stay pending).
	deadline time.Time

	mu                                  sync.Mutex
	nFiles, nTables, nSkipped, nRows    int
	nProcs, nPy                         int
	warnedProcs, warnedMaps, warnedRows bool
}

type fileKey struct {
	dev   string
	inode uint64
	path  string
}

// fileInfo is one ELF file as mapped by some process.
type fileInfo struct {
	id      uint32 // index in the BPF files map (0: none)
	path    string
	buildID string
	loads   []*elf.Prog // PT_LOAD headers (elfinfo.Normalize needs only these)
	err     error       // the file could not be opened or parsed
	fails   int         // consecutive failed opens
	retryAt time.Time   // after a failure: when to open it again
	tried   bool        // table compiled (or given up)
	table   bool
	py      *pyFile
}

// procState is a tracked (or, for one drain, looked-up) process.
type procState struct {
	pid        int
	rank       int
	registered bool
	tracked    bool // mapping table in BPF
	sig        uint64
	maps       []resolvedMap // executable mappings, sorted by Start
	py         *pyProc
	seen       int
	pending    bool // some file's table is still to be compiled
}

type resolvedMap struct {
	m    procmaps.Mapping
	f    *fileInfo // nil: anonymous or pseudo mapping ([vdso], JIT)
	bias uint64    // ELF vaddr = runtime address − bias
}

func newTracker(p *Profiler) *tracker {
	return &tracker{p: p, files: map[fileKey]*fileInfo{}, byBuild: map[string]*fileInfo{},
		procs: map[int]*procState{}, nextID: 1}
}

// scan lists /proc, asks RankOf about every process, and loads the
// mapping tables of tracked ones, re-reading /proc/pid/maps so dlopen'ed
// libraries are picked up within one interval (§4).
// Registered ranks go first, so a budget spent on AllProcesses never
// delays their tables.
func (t *tracker) scan(budget time.Duration) {
	t.scanGen++
	t.deadline = time.Now().Add(budget)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.p.cfg.Log.Warn("cpuprof: listing /proc", "err", err)
		return
	}
	type cand struct {
		pid, rank int
		ok        bool
	}
	var cands []cand
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		rank, ok := t.p.cfg.RankOf(pid)
		if !ok && !t.p.cfg.AllProcesses {
			if ps := t.procs[pid]; ps != nil {
				t.forget(ps) // deregistered
			}
			continue
		}
		cands = append(cands, cand{pid, rank, ok})
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].ok && !cands[j].ok })
	for _, c := range cands {
		pid, rank, ok := c.pid, c.rank, c.ok
		ps := t.procs[pid]
		if ps == nil {
			if len(t.procs) >= maxProcs {
				if !t.warnedProcs {
					t.warnedProcs = true
					t.p.cfg.Log.Warn("cpuprof: tracking table full; further processes get FP-only stacks", "max", maxProcs)
				}
				continue
			}
			ps = &procState{pid: pid}
			t.procs[pid] = ps
		}
		ps.rank, ps.registered, ps.seen = rank, ok, t.scanGen
		if !ok {
			ps.rank = -1
		}
		t.refresh(ps)
	}
	for _, ps := range t.procs {
		if ps.seen != t.scanGen {
			t.forget(ps)
		}
	}
	t.mu.Lock()
	t.nProcs, t.nPy = 0, 0
	for _, ps := range t.procs {
		if ps.tracked {
			t.nProcs++
		}
		if ps.py != nil {
			t.nPy++
		}
	}
	t.mu.Unlock()
}

func (t *tracker) forget(ps *procState) {
	pid := uint32(ps.pid)
	_ = t.p.objs.Procs.Delete(pid)
	_ = t.p.objs.Pyprocs.Delete(pid)
	delete(t.procs, ps.pid)
}

// refresh re-reads a tracked process's maps and rewrites its BPF entry
// when the executable mappings changed.
func (t *tracker) refresh(ps *procState) {
	all, err := procmaps.Read(ps.pid)
	if err != nil {
		return // exited, or not readable: its stacks stay FP-only
	}
	sig := mapsSig(all)
	if ps.tracked && sig == ps.sig && !ps.pending {
		return
	}
	ps.sig = sig
	ps.maps, ps.pending = t.resolve(ps.pid, all, true)
	var v cpuprofProc
	for _, rm := range ps.maps {
		if int(v.N) == maxMaps {
			if !t.warnedMaps {
				t.warnedMaps = true
				t.p.cfg.Log.Warn("cpuprof: process has more executable mappings than the BPF table holds", "pid", ps.pid, "max", maxMaps)
			}
			break
		}
		e := &v.M[v.N]
		e.Start, e.End, e.Bias = rm.m.Start, rm.m.Limit, rm.bias
		if rm.f != nil && rm.f.table {
			e.File = rm.f.id
		}
		v.N++
	}
	if err := t.p.objs.Procs.Put(uint32(ps.pid), &v); err != nil {
		t.p.cfg.Log.Warn("cpuprof: writing mapping table", "pid", ps.pid, "err", err)
		return
	}
	ps.tracked = true
	ps.py = nil
	for _, rm := range ps.maps {
		if rm.f != nil && rm.f.py != nil {
			ps.py = newPyProc(ps.pid, rm.f, rm.bias)
			break
		}
	}
	if ps.py != nil {
		if err := t.p.objs.Pyprocs.Put(uint32(ps.pid), ps.py.bpfValue()); err != nil {
			t.p.cfg.Log.Warn("cpuprof: writing python entry", "pid", ps.pid, "err", err)
			ps.py = nil
		}
	} else {
		_ = t.p.objs.Pyprocs.Delete(uint32(ps.pid))
	}
}

// mapsSig hashes the executable mappings (what the BPF table holds).
func mapsSig(ms []procmaps.Mapping) uint64 {
	h := fnv.New64a()
	for _, m := range ms {
		if m.Exec() {
			fmt.Fprintf(h, "%x-%x %x %d %s\n", m.Start, m.Limit, m.Offset, m.Inode, m.Path)
		}
	}
	return h.Sum64()
}

// resolve turns a process's executable mappings into resolvedMaps sorted
// by Start. withTables: compile and load unwind rows for new files;
// pending: some were left for a later scan.
func (t *tracker) resolve(pid int, all []procmaps.Mapping, withTables bool) (out []resolvedMap, pending bool) {
	for _, m := range all {
		if !m.Exec() || m.Limit <= m.Start {
			continue
		}
		rm := resolvedMap{m: m}
		if m.File() {
			f := t.file(pid, m)
			if f.err == nil {
				if bias, err := elfinfo.LoadBias(f.loads, m); err == nil {
					rm.f, rm.bias = f, bias
					if withTables && t.p.cfg.Mode != ModeFPOnly {
						t.loadTable(pid, m, f)
						pending = pending || !f.tried
					}
				}
			}
		}
		out = append(out, rm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].m.Start < out[j].m.Start })
	return out, pending
}

// file returns the cached info of the file behind mapping m, opening it
// through /proc/pid/map_files (the exact mapped inode, in any mount
// namespace) the first time.
func (t *tracker) file(pid int, m procmaps.Mapping) *fileInfo {
	k := fileKey{m.Dev, m.Inode, m.Path}
	f := t.files[k]
	if f != nil && (f.err == nil || time.Now().Before(f.retryAt)) {
		return f
	}
	if f == nil {
		f = &fileInfo{path: m.Path}
		t.files[k] = f
		t.mu.Lock()
		t.nFiles++
		t.mu.Unlock()
	}
	// A failure (the process exited before map_files was read, a
	// transient error) is retried with backoff rather than kept: the
	// same file is mapped by live ranks too (review finding 5).
	ef, closer, err := openMapped(pid, m)
	if err != nil {
		f.err = err
		f.fails++
		f.retryAt = time.Now().Add(openBackoff(f.fails))
		return f
	}
	defer closer.Close()
	f.err, f.fails, f.loads = nil, 0, nil
	for _, pr := range ef.Progs {
		if pr.Type == elf.PT_LOAD {
			pr2 := &elf.Prog{ProgHeader: pr.ProgHeader}
			f.loads = append(f.loads, pr2)
		}
	}
	f.buildID, _ = elfinfo.BuildID(ef)
	f.py = detectPython(ef)
	return f
}

// openBackoff is the wait before opening a file again after n failures:
// 1 s doubling up to 5 minutes.
func openBackoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// openMapped opens the file behind m: the exact mapped inode through
// /proc/pid/map_files, else the path confined to the process's root.
// Either way only a regular file, without blocking: the path is the
// process's to choose, and a FIFO there must not wedge the profiler
// goroutine (review finding 2).
func openMapped(pid int, m procmaps.Mapping) (*elf.File, *os.File, error) {
	fh, err := elfinfo.OpenProc(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.Limit))
	if err != nil {
		if fh, err = elfinfo.OpenInRoot(fmt.Sprintf("/proc/%d/root", pid), m.Path, false); err != nil {
			return nil, nil, err
		}
	}
	ef, err := elf.NewFile(fh)
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	return ef, fh, nil
}

// loadTable compiles f's .eh_frame into rows and appends them to the BPF
// rows array (once per file; a file with a Build-ID already loaded under
// another path shares that table).
func (t *tracker) loadTable(pid int, m procmaps.Mapping, f *fileInfo) {
	if f.tried || time.Now().After(t.deadline) {
		return
	}
	f.tried = true
	if f.buildID != "" {
		if g := t.byBuild[f.buildID]; g != nil && g.table {
			f.id, f.table = g.id, true
			return
		}
	}
	if t.nextID >= maxFiles {
		t.skipped("file table full", f, nil)
		return
	}
	ef, closer, err := openMapped(pid, m)
	if err != nil {
		t.skipped("open", f, err)
		return
	}
	rows, err := ehframe.Compile(ef)
	closer.Close()
	if err != nil {
		if !errors.Is(err, ehframe.ErrNoCFI) {
			t.skipped("compile", f, err)
		} else {
			t.skipped("", f, nil)
		}
		return
	}
	if len(rows) == 0 || int(t.nextRow)+len(rows) > rowCapacity {
		if !t.warnedRows && len(rows) > 0 {
			t.warnedRows = true
			t.p.cfg.Log.Warn("cpuprof: unwind-row capacity reached; further files unwind with frame pointers only",
				"file", f.path, "rows", len(rows), "capacity", rowCapacity)
		}
		t.skipped("", f, nil)
		return
	}
	first := t.nextRow
	if err := putRows(t.p.objs.Rows, first, rows); err != nil {
		t.skipped("load", f, err)
		return
	}
	id := t.nextID
	if err := t.p.objs.Files.Put(id, cpuprofFileIdx{First: first, Count: uint32(len(rows))}); err != nil {
		t.skipped("index", f, err)
		return
	}
	t.nextID++
	t.nextRow += uint32(len(rows))
	f.id, f.table = id, true
	if f.buildID != "" {
		t.byBuild[f.buildID] = f
	}
	t.mu.Lock()
	t.nTables++
	t.nRows += len(rows)
	t.mu.Unlock()
}

func (t *tracker) skipped(what string, f *fileInfo, err error) {
	t.mu.Lock()
	t.nSkipped++
	t.mu.Unlock()
	if err != nil {
		t.p.cfg.Log.Debug("cpuprof: no unwind table", "file", f.path, "step", what, "err", err)
	}
}

// putRows writes rows at [first, first+len) of the BPF array, in batches.
func putRows(m *ebpf.Map, first uint32, rows []ehframe.Row) error {
	const chunk = 1 << 14
	keys := make([]uint32, 0, chunk)
	vals := make([]cpuprofUnwindRow, 0, chunk)
	for i := 0; i < len(rows); i += chunk {
		keys, vals = keys[:0], vals[:0]
		for j := i; j < len(rows) && j < i+chunk; j++ {
			r := rows[j]
			keys = append(keys, first+uint32(j))
			vals = append(vals, cpuprofUnwindRow{Pc: r.PC, CfaOff: r.CFAOff, RbpOff: int16(r.RBPOff), CfaReg: r.CFAReg, Flags: r.Flags})
		}
		if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return err
			}
			for j := range keys {
				if err := m.Put(keys[j], vals[j]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (t *tracker) fillStats(s *Stats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.Files, s.FilesWithTable, s.RowsLoaded, s.TablesSkipped = t.nFiles, t.nTables, t.nRows, t.nSkipped
	s.Procs, s.PyProcs = t.nProcs, t.nPy
}

// lookup returns the mappings of pid for naming a drained sample: the
// tracked state, or (for other processes) a one-off read of its maps.
func (t *tracker) lookup(pid int, cache map[int]*procState) *procState {
	if ps := t.procs[pid]; ps != nil && ps.tracked {
		return ps
	}
	if ps, ok := cache[pid]; ok {
		return ps
	}
	ps := &procState{pid: pid, rank: -1}
	if all, err := procmaps.Read(pid); err == nil {
		ps.maps, _ = t.resolve(pid, all, false)
		for _, rm := range ps.maps {
			if rm.f != nil && rm.f.py != nil {
				ps.py = newPyProc(ps.pid, rm.f, rm.bias)
				break
			}
		}
	}
	cache[pid] = ps
	return ps
}

// find returns the mapping containing addr.
func (ps *procState) find(addr uint64) (resolvedMap, bool) {
	i := sort.Search(len(ps.maps), func(i int) bool { return ps.maps[i].m.Limit > addr })
	if i < len(ps.maps) && ps.maps[i].m.Start <= addr {
		return ps.maps[i], true
	}
	return resolvedMap{}, false
}
