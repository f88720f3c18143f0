// Package procmaps reads a process's memory map (/proc/<pid>/maps): the
// agent uses it to attribute sampled PCs to ELF files and Build-IDs, to
// validate frame-pointer results (SysOM-AI §3.3 ValidateCallerPC: the
// caller PC must lie in an executable mapping) and, polled, to pick up
// dlopen'ed libraries (§4).
package procmaps

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, Limit uint64 // [Start, Limit)
	Offset       uint64 // file offset mapped at Start
	Perms        string // e.g. "r-xp"
	Dev          string // "major:minor" (hex), as the kernel prints it
	Inode        uint64
	Path         string // file path, "[stack]", "[vdso]", … or "" for anonymous memory
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) >= 3 && m.Perms[2] == 'x' }

// File reports whether the mapping is backed by a file (not anonymous,
// not a kernel pseudo-mapping such as [vdso], not a deleted file).
func (m Mapping) File() bool {
	return m.Inode != 0 && strings.HasPrefix(m.Path, "/") && !strings.HasSuffix(m.Path, " (deleted)")
}

// Contains reports whether addr lies inside [Start, Limit).
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.Limit }

// maxLine bounds one maps line: paths are at most PATH_MAX (4096) plus
// the fixed columns.
const maxLine = 8192

// Parse reads the maps format. Errors name the 1-based line.
func Parse(r io.Reader) ([]Mapping, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var out []Mapping
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if strings.TrimSpace(s) == "" {
			continue
		}
		m, err := parseLine(s)
		if err != nil {
			return nil, fmt.Errorf("maps line %d: %w", line, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("maps line %d: %w", line+1, err)
	}
	return out, nil
}

// parseLine parses "start-limit perms offset dev inode [path]"; the path
// is everything after the inode column (it may contain spaces).
func parseLine(s string) (Mapping, error) {
	var m Mapping
	rest := s
	field := func(name string) (string, error) {
		rest = strings.TrimLeft(rest, " \t")
		i := strings.IndexAny(rest, " \t")
		var f string
		if i < 0 {
			f, rest = rest, ""
		} else {
			f, rest = rest[:i], rest[i:]
		}
		if f == "" {
			return "", fmt.Errorf("missing %s", name)
		}
		return f, nil
	}
	rng, err := field("address range")
	if err != nil {
		return m, err
	}
	lo, hi, ok := strings.Cut(rng, "-")
	if !ok {
		return m, fmt.Errorf("address range %q: want start-limit", clip(rng))
	}
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("start %q: not hex", clip(lo))
	}
	if m.Limit, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("limit %q: not hex", clip(hi))
	}
	if m.Limit < m.Start {
		return m, fmt.Errorf("limit %#x below start %#x", m.Limit, m.Start)
	}
	if m.Perms, err = field("perms"); err != nil {
		return m, err
	}
	if len(m.Perms) != 4 {
		return m, fmt.Errorf("perms %q: want 4 characters", clip(m.Perms))
	}
	off, err := field("offset")
	if err != nil {
		return m, err
	}
	if m.Offset, err = strconv.ParseUint(off, 16, 64); err != nil {
		return m, fmt.Errorf("offset %q: not hex", clip(off))
	}
	if m.Dev, err = field("dev"); err != nil {
		return m, err
	}
	if !strings.Contains(m.Dev, ":") {
		return m, fmt.Errorf("dev %q: want major:minor", clip(m.Dev))
	}
	ino, err := field("inode")
	if err != nil {
		return m, err
	}
	if m.Inode, err = strconv.ParseUint(ino, 10, 64); err != nil {
		return m, fmt.Errorf("inode %q: not decimal", clip(ino))
	}
	m.Path = strings.TrimLeft(rest, " \t")
	return m, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Read parses /proc/<pid>/maps. Callers filter the executable mappings
// they need (Exec).
func Read(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ms, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ms, nil
}

// Find returns the mapping containing addr in ms (sorted by Start, as the
// kernel prints them) and whether there is one.
func Find(ms []Mapping, addr uint64) (Mapping, bool) {
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Limit > addr })
	if i < len(ms) && ms[i].Contains(addr) {
		return ms[i], true
	}
	return Mapping{}, false
}
