package ehframe

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// Tables caches compiled tables by file path (and the file's identity:
// path + inode), so a library shared by many processes is compiled once
// (§4: pre-processing at attach, ~200 ms per binary).
type Tables struct {
	mu sync.Mutex
	m  map[tableKey]*fileTable
}

type tableKey struct {
	path  string
	inode uint64
}

type fileTable struct {
	buildID string
	rows    []Row
	loads   []elf.ProgHeader
	err     error
}

// NewTables returns an empty cache.
func NewTables() *Tables { return &Tables{m: map[tableKey]*fileTable{}} }

// open compiles (once) the file of mapping m. root prefixes the path
// (e.g. "/proc/<pid>/root" to see a container's files).
func (t *Tables) open(root string, m procmaps.Mapping) *fileTable {
	k := tableKey{m.Path, m.Inode}
	t.mu.Lock()
	ft, ok := t.m[k]
	t.mu.Unlock()
	if ok {
		return ft
	}
	ft = &fileTable{}
	if f, err := elf.Open(root + m.Path); err != nil {
		ft.err = err
	} else {
		ft.buildID, _ = elfinfo.BuildID(f)
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				ft.loads = append(ft.loads, p.ProgHeader)
			}
		}
		ft.rows, ft.err = Compile(f)
		f.Close()
	}
	t.mu.Lock()
	t.m[k] = ft
	t.mu.Unlock()
	return ft
}

// Space builds the address space of a process from its maps: every
// executable mapping is a Module (file-backed ones with their table and
// Build-ID; [vdso] and anonymous code without), reads go to mem (e.g.
// /proc/<pid>/mem). root prefixes file paths ("" for the host).
func (t *Tables) Space(maps []procmaps.Mapping, mem io.ReaderAt, root string) Space {
	type entry struct {
		m   procmaps.Mapping
		mod *Module
	}
	var ex []entry
	for _, m := range maps {
		if !m.Exec() {
			continue
		}
		mod := &Module{}
		if m.File() {
			ft := t.open(root, m)
			if ft.err == nil {
				mod.BuildID, mod.Rows = ft.buildID, ft.rows
				for _, p := range ft.loads {
					if m.Offset >= p.Off && m.Offset < p.Off+p.Filesz {
						mod.Bias = m.Start - m.Offset + p.Off - p.Vaddr
						break
					}
				}
			}
		}
		ex = append(ex, entry{m, mod})
	}
	sort.Slice(ex, func(i, j int) bool { return ex[i].m.Start < ex[j].m.Start })
	return Space{
		Read: func(addr uint64) (uint64, bool) {
			var buf [8]byte
			if _, err := mem.ReadAt(buf[:], int64(addr)); err != nil {
				return 0, false
			}
			return binary.LittleEndian.Uint64(buf[:]), true
		},
		Module: func(pc uint64) (*Module, bool) {
			i := sort.Search(len(ex), func(i int) bool { return ex[i].m.Limit > pc })
			if i < len(ex) && ex[i].m.Contains(pc) {
				return ex[i].mod, true
			}
			return nil, false
		},
	}
}

// Err reports why the table of path could not be built (nil if it was,
// or was never asked for).
func (t *Tables) Err(path string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, ft := range t.m {
		if k.path == path && ft.err != nil {
			return fmt.Errorf("%s: %w", path, ft.err)
		}
	}
	return nil
}
