package symbolize

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unicode/utf8"
)

// Symbol file layout (docs/format/symbols.md). All integers little-endian.
const (
	fileMagic   = "LGDSYMS\x00"
	fileVersion = 1
	headerSize  = 144
	entrySize   = 16
	// fenceStride entries share one fence key: a lookup binary-searches the
	// in-memory fence, then reads one page of fenceStride·16 = 4 KiB.
	fenceStride    = 256
	maxFenceStride = 1 << 16
	maxBuildIDRaw  = 64 // bytes; stack.MaxBuildIDLen hex digits
	// MaxName bounds a stored (demangled) name in bytes; longer names are
	// cut at a UTF-8 boundary and end in "…". Template-heavy C++ names
	// run to tens of KiB and are useless in a flame graph past this.
	MaxName = 1024
	// MaxApproxSize bounds how far a zero-size symbol (hand-written
	// assembly) is extended towards the next symbol: extending without a
	// bound is exactly the §5.3 misattribution.
	MaxApproxSize = 64 << 10
	maxEntries    = 1 << 28
	sizeMask      = 1<<31 - 1
	approxBit     = 1 << 31
)

// Header flags.
const (
	flagSymtab = 1 << iota // .symtab contributed entries
	flagDynsym             // .dynsym contributed entries
	flagDWARF              // DWARF subprograms contributed entries
	flagsKnown = flagSymtab | flagDynsym | flagDWARF
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the decoded fixed header.
type header struct {
	version     uint16
	flags       uint32
	count       uint32
	entriesOff  uint64
	stringsOff  uint64
	stringsLen  uint64
	fenceOff    uint64
	fenceCount  uint32
	fenceStride uint32
	dataCRC     uint32
	buildID     []byte
}

// Header byte offsets.
const (
	hVersion     = 8
	hHeaderLen   = 10
	hFlags       = 12
	hCount       = 16
	hEntrySize   = 20
	hEntriesOff  = 24
	hStringsOff  = 32
	hStringsLen  = 40
	hFenceOff    = 48
	hFenceCount  = 56
	hFenceStride = 60
	hDataCRC     = 64
	hBuildIDLen  = 68
	hBuildID     = 69
	hReserved    = hBuildID + maxBuildIDRaw // 133..139 zero
	hHeaderCRC   = 140
)

// entry is one symbol: the half-open range [addr, addr+size) named by the
// string at nameOff. approx marks a zero-size symbol extended to the next.
type entry struct {
	addr    uint64
	size    uint32
	approx  bool
	nameOff uint32
}

func (e entry) end() uint64 { return e.addr + uint64(e.size) }

// sym is a symbol before encoding.
type sym struct {
	addr, size uint64
	name       string
	approx     bool
}

// FormatError reports a corrupt or unsupported symbol file; Field names
// the offending header field or section.
type FormatError struct {
	Field string
	Msg   string
}

func (e *FormatError) Error() string { return "symbol file: " + e.Field + ": " + e.Msg }

func formatErr(field, format string, args ...any) error {
	return &FormatError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// clipName bounds a name to MaxName bytes at a rune boundary.
func clipName(s string) string {
	if len(s) <= MaxName {
		return s
	}
	const ell = "…"
	cut := MaxName - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}

// writeIndex encodes sorted, disjoint symbols. syms must be sorted by addr
// with sym[i].addr+size <= sym[i+1].addr and sizes in (0, 2^31).
func writeIndex(w io.Writer, buildID string, flags uint32, syms []sym) error {
	bid, err := hex.DecodeString(buildID)
	if err != nil || len(bid) > maxBuildIDRaw {
		return fmt.Errorf("build-id %q: not hex of at most %d bytes", buildID, maxBuildIDRaw)
	}
	if len(syms) > maxEntries {
		return fmt.Errorf("%d symbols exceed %d", len(syms), maxEntries)
	}
	// Strings: deduplicated, each a u16 length then bytes.
	var strs []byte
	offs := make(map[string]uint32)
	ents := make([]byte, 0, len(syms)*entrySize)
	var prevEnd uint64
	for i, s := range syms {
		if s.size == 0 || s.size > sizeMask {
			return fmt.Errorf("symbol %d (%s): size %d outside [1, %d]", i, s.name, s.size, sizeMask)
		}
		if i > 0 && s.addr < prevEnd {
			return fmt.Errorf("symbol %d (%s): address %#x overlaps the previous symbol", i, s.name, s.addr)
		}
		if s.addr+s.size < s.addr {
			return fmt.Errorf("symbol %d (%s): range wraps", i, s.name)
		}
		prevEnd = s.addr + s.size
		name := clipName(s.name)
		off, ok := offs[name]
		if !ok {
			if uint64(len(strs)) > 1<<32-1-2-MaxName {
				return errors.New("string section exceeds 4 GiB")
			}
			off = uint32(len(strs))
			offs[name] = off
			strs = binary.LittleEndian.AppendUint16(strs, uint16(len(name)))
			strs = append(strs, name...)
		}
		size := uint32(s.size)
		if s.approx {
			size |= approxBit
		}
		ents = binary.LittleEndian.AppendUint64(ents, s.addr)
		ents = binary.LittleEndian.AppendUint32(ents, size)
		ents = binary.LittleEndian.AppendUint32(ents, off)
	}
	fenceCount := (len(syms) + fenceStride - 1) / fenceStride
	fence := make([]byte, 0, fenceCount*8)
	for i := 0; i < len(syms); i += fenceStride {
		fence = binary.LittleEndian.AppendUint64(fence, syms[i].addr)
	}
	fenceOff := uint64(headerSize)
	entriesOff := fenceOff + uint64(len(fence))
	stringsOff := entriesOff + uint64(len(ents))

	crc := crc32.Update(0, castagnoli, ents)
	crc = crc32.Update(crc, castagnoli, strs)

	h := make([]byte, headerSize)
	copy(h, fileMagic)
	le := binary.LittleEndian
	le.PutUint16(h[hVersion:], fileVersion)
	le.PutUint16(h[hHeaderLen:], headerSize)
	le.PutUint32(h[hFlags:], flags)
	le.PutUint32(h[hCount:], uint32(len(syms)))
	le.PutUint32(h[hEntrySize:], entrySize)
	le.PutUint64(h[hEntriesOff:], entriesOff)
	le.PutUint64(h[hStringsOff:], stringsOff)
	le.PutUint64(h[hStringsLen:], uint64(len(strs)))
	le.PutUint64(h[hFenceOff:], fenceOff)
	le.PutUint32(h[hFenceCount:], uint32(fenceCount))
	le.PutUint32(h[hFenceStride:], fenceStride)
	le.PutUint32(h[hDataCRC:], crc)
	h[hBuildIDLen] = byte(len(bid))
	copy(h[hBuildID:], bid)
	hc := crc32.Update(0, castagnoli, h[:hHeaderCRC])
	hc = crc32.Update(hc, castagnoli, fence)
	le.PutUint32(h[hHeaderCRC:], hc)

	for _, b := range [][]byte{h, fence, ents, strs} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}
