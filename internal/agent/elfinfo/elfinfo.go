// Package elfinfo extracts what the agent needs from a mapped ELF file:
// its GNU Build-ID (the key of the central symbol store, SysOM-AI §3.4,
// §4 "Build IDs are extracted from the ELF .note.gnu.build-id section"),
// the runtime-address → ELF-virtual-address normalization that makes
// shipped addresses independent of ASLR, and the lookups of separate
// debug files (/usr/lib/debug/.build-id, .gnu_debuglink) the agent
// uploads instead of a stripped binary.
package elfinfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/laggard-dev/laggard/internal/agent/procmaps"
)

// noteGNUBuildID is NT_GNU_BUILD_ID.
const noteGNUBuildID = 3

// maxNote bounds a note section or segment read; a build-id note is ~36 bytes.
const maxNote = 1 << 20

// BuildID returns the lowercase hex GNU Build-ID of f from its
// .note.gnu.build-id section, else from any SHT_NOTE section or PT_NOTE
// segment (stripped files may keep only program headers); "" if none.
func BuildID(f *elf.File) (string, error) {
	var firstErr error
	try := func(r io.ReaderAt, size uint64, what string) (string, bool) {
		if size > maxNote {
			return "", false
		}
		b := make([]byte, size)
		if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", what, err)
			}
			return "", false
		}
		id, err := parseNotes(b, f.ByteOrder)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", what, err)
			}
			return "", false
		}
		return id, id != ""
	}
	if s := f.Section(".note.gnu.build-id"); s != nil && s.Type != elf.SHT_NOBITS {
		if id, ok := try(s.Open().(io.ReaderAt), s.Size, s.Name); ok {
			return id, nil
		}
	}
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			if id, ok := try(s.Open().(io.ReaderAt), s.Size, s.Name); ok {
				return id, nil
			}
		}
	}
	for i, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			if id, ok := try(p.Open().(io.ReaderAt), p.Filesz, fmt.Sprintf("PT_NOTE[%d]", i)); ok {
				return id, nil
			}
		}
	}
	return "", firstErr
}

// parseNotes walks ELF notes (namesz, descsz, type, name, desc; 4-byte
// aligned) and returns the GNU build-id descriptor as hex.
func parseNotes(b []byte, bo binary.ByteOrder) (string, error) {
	for off := 0; off+12 <= len(b); {
		namesz := uint64(bo.Uint32(b[off:]))
		descsz := uint64(bo.Uint32(b[off+4:]))
		typ := bo.Uint32(b[off+8:])
		nameOff := uint64(off + 12)
		descOff := nameOff + align4(namesz)
		end := descOff + align4(descsz)
		if descOff+descsz > uint64(len(b)) {
			return "", fmt.Errorf("note at %#x: sizes %d/%d overrun %d bytes", off, namesz, descsz, len(b))
		}
		name := b[nameOff : nameOff+namesz]
		if typ == noteGNUBuildID && bytes.Equal(bytes.TrimRight(name, "\x00"), []byte("GNU")) && descsz > 0 {
			return hex.EncodeToString(b[descOff : descOff+descsz]), nil
		}
		if end > uint64(len(b)) {
			break
		}
		off = int(end)
	}
	return "", nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// Normalize maps a runtime address inside mapping m of file f to the
// ELF virtual address the file's symbol tables use: the file offset
// (addr − m.Start + m.Offset) located in the PT_LOAD segment that
// contains it. This is what stack.Frame.Addr carries (contracts: ASLR
// and load bias removed, so one Build-ID's addresses agree across nodes).
func Normalize(f *elf.File, m procmaps.Mapping, addr uint64) (uint64, error) {
	if !m.Contains(addr) {
		return 0, fmt.Errorf("address %#x outside mapping [%#x,%#x)", addr, m.Start, m.Limit)
	}
	off := addr - m.Start + m.Offset
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr, nil
		}
	}
	return 0, fmt.Errorf("file offset %#x (address %#x) in no PT_LOAD segment of %s", off, addr, m.Path)
}

// BuildIDPath is where a distribution installs the separate debug file of
// build-id id under root ("/usr/lib/debug" normally):
// root/.build-id/xx/rest.debug.
func BuildIDPath(root, id string) (string, error) {
	if len(id) < 4 || len(id)%2 != 0 {
		return "", fmt.Errorf("build-id %q: want ≥ 2 hex bytes", id)
	}
	if _, err := hex.DecodeString(id); err != nil {
		return "", fmt.Errorf("build-id %q: not hex", id)
	}
	return filepath.Join(root, ".build-id", id[:2], id[2:]+".debug"), nil
}

// DebugLink reads .gnu_debuglink: the debug file's base name and the
// CRC-32 of its contents. ok=false when f has none.
func DebugLink(f *elf.File) (name string, crc uint32, ok bool, err error) {
	s := f.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", 0, false, nil
	}
	if s.Size > 4096 {
		return "", 0, false, fmt.Errorf(".gnu_debuglink: %d bytes, too large", s.Size)
	}
	b, err := s.Data()
	if err != nil {
		return "", 0, false, fmt.Errorf(".gnu_debuglink: %w", err)
	}
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false, errors.New(".gnu_debuglink: no NUL-terminated name")
	}
	// The CRC follows the name, padded to a 4-byte boundary.
	c := int(align4(uint64(i + 1)))
	if c+4 > len(b) {
		return "", 0, false, errors.New(".gnu_debuglink: CRC missing")
	}
	name = string(b[:i])
	if name != filepath.Base(name) || name == "." || name == ".." {
		return "", 0, false, fmt.Errorf(".gnu_debuglink: name %q is not a base name", name)
	}
	return name, f.ByteOrder.Uint32(b[c:]), true, nil
}

// LoadBias returns the load bias of mapping m of a file with program
// headers progs (ELF vaddr = runtime address − bias). It comes from the
// executable PT_LOAD that overlaps the mapping's file range, not from
// the mapping's first byte: with a read-only first segment (lld's
// default, GNU ld's -z separate-code) an executable mapping starts at a
// file offset that lies in the R segment, whose vaddr−offset differs.
// Falls back to any PT_LOAD overlapping the range.
func LoadBias(progs []*elf.Prog, m procmaps.Mapping) (uint64, error) {
	if m.Limit <= m.Start {
		return 0, fmt.Errorf("empty mapping [%#x,%#x)", m.Start, m.Limit)
	}
	lo, hi := m.Offset, m.Offset+(m.Limit-m.Start)
	var fallback *elf.Prog
	for _, p := range progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 || p.Off >= hi || p.Off+p.Filesz <= lo {
			continue
		}
		if p.Flags&elf.PF_X != 0 {
			return (m.Start - m.Offset) - (p.Vaddr - p.Off), nil
		}
		if fallback == nil {
			fallback = p
		}
	}
	if fallback != nil {
		return (m.Start - m.Offset) - (fallback.Vaddr - fallback.Off), nil
	}
	return 0, fmt.Errorf("file range [%#x,%#x) of %s in no PT_LOAD segment", lo, hi, m.Path)
}
