package symbolize

import (
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"io"
	"sort"
	"sync"
)

// Symbol is one resolved symbol.
type Symbol struct {
	Name  string
	Start uint64
	Size  uint64
	// Approx: the symbol had no size in the binary (assembly) and was
	// extended to the next symbol, at most MaxApproxSize bytes.
	Approx bool
}

// Index is an open symbol file. Lookups read one page of entries and one
// name through ReadAt; only the header and the fence (8 bytes per
// fenceStride entries) are held in memory. Safe for concurrent use.
type Index struct {
	r       io.ReaderAt
	slice   func(off, n int64) ([]byte, bool) // zero-copy access when r is a mapping
	h       header
	fence   []uint64
	pool    sync.Pool // *[]byte page buffers
	namebuf sync.Pool
}

// OpenIndex validates a symbol file's header and fence and returns an
// Index reading the rest on demand. A corrupt file yields a *FormatError
// naming the field.
func OpenIndex(r io.ReaderAt, size int64) (*Index, error) {
	if size < headerSize {
		return nil, formatErr("header", "file is %d bytes, shorter than the %d-byte header", size, headerSize)
	}
	hb := make([]byte, headerSize)
	if err := readAt(r, hb, 0); err != nil {
		return nil, formatErr("header", "read: %v", err)
	}
	if string(hb[:8]) != fileMagic {
		return nil, formatErr("magic", "%q is not %q", hb[:8], fileMagic)
	}
	le := binary.LittleEndian
	h := header{
		version:     le.Uint16(hb[hVersion:]),
		flags:       le.Uint32(hb[hFlags:]),
		count:       le.Uint32(hb[hCount:]),
		entriesOff:  le.Uint64(hb[hEntriesOff:]),
		stringsOff:  le.Uint64(hb[hStringsOff:]),
		stringsLen:  le.Uint64(hb[hStringsLen:]),
		fenceOff:    le.Uint64(hb[hFenceOff:]),
		fenceCount:  le.Uint32(hb[hFenceCount:]),
		fenceStride: le.Uint32(hb[hFenceStride:]),
		dataCRC:     le.Uint32(hb[hDataCRC:]),
	}
	switch {
	case h.version != fileVersion:
		return nil, formatErr("version", "%d is not supported (want %d)", h.version, fileVersion)
	case le.Uint16(hb[hHeaderLen:]) != headerSize:
		return nil, formatErr("header_len", "%d, want %d", le.Uint16(hb[hHeaderLen:]), headerSize)
	case le.Uint32(hb[hEntrySize:]) != entrySize:
		return nil, formatErr("entry_size", "%d, want %d", le.Uint32(hb[hEntrySize:]), entrySize)
	case h.flags&^flagsKnown != 0:
		return nil, formatErr("flags", "unknown bits %#x", h.flags&^flagsKnown)
	case h.count > maxEntries:
		return nil, formatErr("entry_count", "%d exceeds %d", h.count, maxEntries)
	case h.fenceStride == 0 || h.fenceStride > maxFenceStride || h.fenceStride&(h.fenceStride-1) != 0:
		return nil, formatErr("fence_stride", "%d is not a power of two in [1, %d]", h.fenceStride, maxFenceStride)
	case uint64(h.fenceCount) != (uint64(h.count)+uint64(h.fenceStride)-1)/uint64(h.fenceStride):
		return nil, formatErr("fence_count", "%d does not cover %d entries at stride %d", h.fenceCount, h.count, h.fenceStride)
	case int(hb[hBuildIDLen]) > maxBuildIDRaw:
		return nil, formatErr("build_id_len", "%d exceeds %d", hb[hBuildIDLen], maxBuildIDRaw)
	case h.fenceOff != headerSize:
		return nil, formatErr("fence_off", "%d, want %d (sections are contiguous)", h.fenceOff, headerSize)
	case h.entriesOff != h.fenceOff+8*uint64(h.fenceCount):
		return nil, formatErr("entries_off", "%d does not follow the fence section", h.entriesOff)
	case h.stringsOff != h.entriesOff+entrySize*uint64(h.count):
		return nil, formatErr("strings_off", "%d does not follow the entry section", h.stringsOff)
	case h.stringsLen > uint64(size) || h.stringsOff+h.stringsLen != uint64(size):
		return nil, formatErr("strings_len", "sections end at %d+%d, file is %d bytes", h.stringsOff, h.stringsLen, size)
	case h.stringsLen > 1<<32:
		return nil, formatErr("strings_len", "%d exceeds 4 GiB", h.stringsLen)
	}
	for _, b := range hb[hReserved:hHeaderCRC] {
		if b != 0 {
			return nil, formatErr("reserved", "non-zero")
		}
	}
	h.buildID = append([]byte(nil), hb[hBuildID:hBuildID+int(hb[hBuildIDLen])]...)
	fb := make([]byte, 8*int(h.fenceCount))
	if err := readAt(r, fb, int64(h.fenceOff)); err != nil {
		return nil, formatErr("fence", "read: %v", err)
	}
	crc := crc32.Update(0, castagnoli, hb[:hHeaderCRC])
	crc = crc32.Update(crc, castagnoli, fb)
	if crc != le.Uint32(hb[hHeaderCRC:]) {
		return nil, formatErr("header_crc", "checksum mismatch: header or fence corrupt")
	}
	ix := &Index{r: r, h: h, fence: make([]uint64, h.fenceCount)}
	for i := range ix.fence {
		ix.fence[i] = le.Uint64(fb[8*i:])
		if i > 0 && ix.fence[i] <= ix.fence[i-1] {
			return nil, formatErr("fence", "key %d (%#x) not above key %d", i, ix.fence[i], i-1)
		}
	}
	if s, ok := r.(interface {
		slice(off, n int64) ([]byte, bool)
	}); ok {
		ix.slice = s.slice
	}
	pageBytes := int(h.fenceStride) * entrySize
	ix.pool.New = func() any { b := make([]byte, pageBytes); return &b }
	ix.namebuf.New = func() any { b := make([]byte, 2+MaxName); return &b }
	return ix, nil
}

// Len is the number of symbol entries.
func (ix *Index) Len() int { return int(ix.h.count) }

// BuildID is the Build-ID the file was built for, lowercase hex.
func (ix *Index) BuildID() string { return hex.EncodeToString(ix.h.buildID) }

// HasDWARF reports whether DWARF subprograms contributed entries.
func (ix *Index) HasDWARF() bool { return ix.h.flags&flagDWARF != 0 }

// Lookup names addr; ok is false when addr lies outside every symbol's
// [addr, addr+size) — never the nearest lower symbol (§5.3) — or the file
// turned out corrupt at this page (Find reports that as an error).
func (ix *Index) Lookup(addr uint64) (name string, ok bool) {
	s, ok, err := ix.Find(addr)
	if err != nil || !ok {
		return "", false
	}
	return s.Name, true
}

// Find returns the symbol containing addr. A corrupt page or name yields a
// *FormatError; OpenIndex cannot check every page without reading the file.
func (ix *Index) Find(addr uint64) (Symbol, bool, error) {
	fi := sort.Search(len(ix.fence), func(i int) bool { return ix.fence[i] > addr }) - 1
	if fi < 0 {
		return Symbol{}, false, nil
	}
	first := int64(fi) * int64(ix.h.fenceStride)
	n := min(int64(ix.h.fenceStride), int64(ix.h.count)-first)
	off := int64(ix.h.entriesOff) + first*entrySize
	var page []byte
	if b, ok := ix.sliceAt(off, n*entrySize); ok {
		page = b
	} else {
		bp := ix.pool.Get().(*[]byte)
		defer ix.pool.Put(bp)
		page = (*bp)[:n*entrySize]
		if err := readAt(ix.r, page, off); err != nil {
			return Symbol{}, false, formatErr("entries", "read page %d: %v", fi, err)
		}
	}
	le := binary.LittleEndian
	if le.Uint64(page) != ix.fence[fi] {
		return Symbol{}, false, formatErr("fence", "key %d (%#x) differs from its entry's address %#x", fi, ix.fence[fi], le.Uint64(page))
	}
	j := sort.Search(int(n), func(i int) bool { return le.Uint64(page[i*entrySize:]) > addr }) - 1
	e := decodeEntry(page[j*entrySize:])
	if e.size == 0 {
		return Symbol{}, false, formatErr("entries", "entry %d has size 0", first+int64(j))
	}
	if addr >= e.end() || e.end() < e.addr {
		return Symbol{}, false, nil
	}
	name, err := ix.name(e.nameOff)
	if err != nil {
		return Symbol{}, false, err
	}
	return Symbol{Name: name, Start: e.addr, Size: uint64(e.size), Approx: e.approx}, true, nil
}

// sliceAt returns file bytes without copying when the reader is a memory
// mapping; false sends the caller to ReadAt (which reports a short file).
func (ix *Index) sliceAt(off, n int64) ([]byte, bool) {
	if ix.slice == nil {
		return nil, false
	}
	return ix.slice(off, n)
}

func decodeEntry(b []byte) entry {
	le := binary.LittleEndian
	sz := le.Uint32(b[8:])
	return entry{addr: le.Uint64(b), size: sz & sizeMask, approx: sz&approxBit != 0, nameOff: le.Uint32(b[12:])}
}

func (ix *Index) name(off uint32) (string, error) {
	if uint64(off)+2 > ix.h.stringsLen {
		return "", formatErr("entries", "name offset %d outside the %d-byte string section", off, ix.h.stringsLen)
	}
	n := min(uint64(2+MaxName), ix.h.stringsLen-uint64(off))
	pos := int64(ix.h.stringsOff) + int64(off)
	var b []byte
	if s, ok := ix.sliceAt(pos, int64(n)); ok {
		b = s
	} else {
		bp := ix.namebuf.Get().(*[]byte)
		defer ix.namebuf.Put(bp)
		b = (*bp)[:n]
		if err := readAt(ix.r, b, pos); err != nil {
			return "", formatErr("strings", "read name at %d: %v", off, err)
		}
	}
	l := int(binary.LittleEndian.Uint16(b))
	if l > MaxName || 2+l > len(b) {
		return "", formatErr("strings", "name at %d: length %d overruns the section or exceeds %d", off, l, MaxName)
	}
	return string(b[2 : 2+l]), nil
}

// Verify reads the whole file once and checks what OpenIndex cannot
// without doing so: the data checksum, entry order and disjointness, name
// offsets, and fence keys. The store runs it on every file it accepts.
func (ix *Index) Verify() error {
	crc := uint32(0)
	var prevEnd uint64
	buf := make([]byte, 64<<10)
	for i := int64(0); i < int64(ix.h.count); {
		k := min(int64(len(buf)/entrySize), int64(ix.h.count)-i)
		b := buf[:k*entrySize]
		if err := readAt(ix.r, b, int64(ix.h.entriesOff)+i*entrySize); err != nil {
			return formatErr("entries", "read: %v", err)
		}
		crc = crc32.Update(crc, castagnoli, b)
		for j := int64(0); j < k; j++ {
			e := decodeEntry(b[j*entrySize:])
			idx := i + j
			switch {
			case e.size == 0:
				return formatErr("entries", "entry %d has size 0", idx)
			case e.end() < e.addr:
				return formatErr("entries", "entry %d wraps the address space", idx)
			case idx > 0 && e.addr < prevEnd:
				return formatErr("entries", "entry %d (%#x) overlaps or precedes entry %d", idx, e.addr, idx-1)
			case uint64(e.nameOff)+2 > ix.h.stringsLen:
				return formatErr("entries", "entry %d: name offset %d outside the string section", idx, e.nameOff)
			case idx%int64(ix.h.fenceStride) == 0 && ix.fence[idx/int64(ix.h.fenceStride)] != e.addr:
				return formatErr("fence", "key %d differs from entry %d's address", idx/int64(ix.h.fenceStride), idx)
			}
			if _, err := ix.name(e.nameOff); err != nil {
				return err
			}
			prevEnd = e.end()
		}
		i += k
	}
	for off := uint64(0); off < ix.h.stringsLen; {
		k := min(uint64(len(buf)), ix.h.stringsLen-off)
		if err := readAt(ix.r, buf[:k], int64(ix.h.stringsOff+off)); err != nil {
			return formatErr("strings", "read: %v", err)
		}
		crc = crc32.Update(crc, castagnoli, buf[:k])
		off += k
	}
	if crc != ix.h.dataCRC {
		return formatErr("data_crc", "checksum mismatch: entries or strings corrupt")
	}
	return nil
}

// readAt fills p; io.ReaderAt may report io.EOF with a full read at the
// end of the file.
func readAt(r io.ReaderAt, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}
