package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// BuildStats describes one built symbol file.
type BuildStats struct {
	BuildID string
	// Symtab, Dynsym, DWARF: candidate function symbols each source
	// offered; Entries: disjoint ranges written; FromDWARF: entries only
	// DWARF knew (gaps in the symbol tables); Approx: zero-size symbols
	// extended; DWARFErr: why DWARF was skipped, if it was.
	Symtab, Dynsym, DWARF int
	Entries, FromDWARF    int
	Approx                int
	DWARFErr              string
}

// BuildIndex writes the symbol file of the ELF at elfPath: the full table
// from .symtab, .dynsym and DWARF subprograms (§3.4 "complete symbol
// table"). The file must carry a GNU Build-ID.
func BuildIndex(elfPath string, w io.Writer) error {
	f, err := elf.Open(elfPath)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = Build(w, f)
	return err
}

// Build writes the symbol file of one binary from one or more ELF views of
// it — typically the stripped binary and its separate debug file. The
// first file's Build-ID names the result; every other must match it.
func Build(w io.Writer, files ...*elf.File) (st BuildStats, err error) {
	return BuildWith(w, BuildOptions{}, files...)
}

// DefaultMaxSectionBytes bounds the inflated bytes Build reads from one
// ELF's compressed sections: a 64 MiB zlib part can declare (and inflate
// to) ~64 GiB, so the declared sizes are checked before any read.
const DefaultMaxSectionBytes = 2 << 30

// BuildOptions bounds the memory one build may take; zero fields take
// defaults.
type BuildOptions struct {
	// MaxSectionBytes caps the summed uncompressed size of the debug
	// sections (DWARF is skipped above it, noted in DWARFErr) and of any
	// one compressed non-debug section (the file is refused above it).
	MaxSectionBytes int64
}

// BuildWith is Build with explicit bounds.
func BuildWith(w io.Writer, opts BuildOptions, files ...*elf.File) (st BuildStats, err error) {
	if opts.MaxSectionBytes <= 0 {
		opts.MaxSectionBytes = DefaultMaxSectionBytes
	}
	if len(files) == 0 {
		return st, errors.New("no ELF file")
	}
	defer func() {
		// debug/elf and debug/dwarf are hardened but not guaranteed against
		// every malformed input; an upload must never take the server down.
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed ELF: %v", r)
		}
	}()
	st.BuildID, err = ELFBuildID(files[0])
	if err != nil {
		return st, err
	}
	if st.BuildID == "" {
		return st, errors.New("ELF has no GNU build-id note")
	}
	var sized, zero []cand
	var flags uint32
	for i, f := range files {
		if i > 0 {
			id, err := ELFBuildID(f)
			if err != nil {
				return st, err
			}
			if id != st.BuildID {
				return st, fmt.Errorf("file %d: build-id %s differs from %s", i, id, st.BuildID)
			}
		}
		if err := checkCompressed(f, opts.MaxSectionBytes); err != nil {
			return st, fmt.Errorf("file %d: %w", i, err)
		}
		secs := execSections(f)
		if syms, err := f.Symbols(); err == nil {
			n := collect(syms, secs, &sized, &zero)
			st.Symtab += n
			if n > 0 {
				flags |= flagSymtab
			}
		} else if !errors.Is(err, elf.ErrNoSymbols) {
			return st, fmt.Errorf(".symtab: %w", err)
		}
		if syms, err := f.DynamicSymbols(); err == nil {
			n := collect(syms, secs, &sized, &zero)
			st.Dynsym += n
			if n > 0 {
				flags |= flagDynsym
			}
		} else if !errors.Is(err, elf.ErrNoSymbols) {
			return st, fmt.Errorf(".dynsym: %w", err)
		}
	}
	table := flatten(sized)
	var dw []cand
	for _, f := range files {
		if !hasDWARF(f) {
			continue
		}
		if n, err := debugBytes(f); err != nil || n > uint64(opts.MaxSectionBytes) {
			// Inflating them would take n bytes of memory at once.
			if err == nil {
				err = fmt.Errorf("DWARF skipped: debug sections declare %d uncompressed bytes > cap %d", n, opts.MaxSectionBytes)
			}
			st.DWARFErr = err.Error()
			continue
		}
		d, err := f.DWARF()
		if err != nil {
			st.DWARFErr = err.Error()
			continue
		}
		got, err := subprograms(d, dwarfEntryBound(f))
		if err != nil {
			st.DWARFErr = err.Error()
		}
		dw = append(dw, got...)
	}
	st.DWARF = len(dw)
	if len(dw) > 0 {
		var gaps []sym
		gaps = subtract(flatten(dw), table)
		st.FromDWARF = len(gaps)
		if len(gaps) > 0 {
			flags |= flagDWARF
			table = mergeSorted(table, gaps)
		}
	}
	table, st.Approx = extendZero(table, zero)
	st.Entries = len(table)
	return st, writeIndex(w, st.BuildID, flags, table)
}

// cand is a candidate symbol range with its name-choice priority.
type cand struct {
	start, end uint64
	name       string
	rank       int // lower wins among aliases of one range
	secEnd     uint64
}

type section struct{ start, end uint64 }

func execSections(f *elf.File) []section {
	var out []section
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			out = append(out, section{s.Addr, s.Addr + s.Size})
		}
	}
	return out
}

// collect keeps function symbols: FUNC, GNU IFUNC, and NOTYPE labels in
// executable sections (assembly). Data objects never name code.
func collect(syms []elf.Symbol, secs []section, sized, zero *[]cand) int {
	n := 0
	for i := range syms {
		s := &syms[i]
		typ := elf.ST_TYPE(s.Info)
		if typ != elf.STT_FUNC && typ != elf.STT_GNU_IFUNC && typ != elf.STT_NOTYPE {
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || s.Value == 0 || s.Name == "" {
			continue
		}
		if typ == elf.STT_NOTYPE && (strings.HasPrefix(s.Name, ".L") || strings.HasPrefix(s.Name, "$")) {
			continue
		}
		sec, ok := sectionOf(secs, s.Value)
		if !ok {
			continue
		}
		c := cand{start: s.Value, name: s.Name, secEnd: sec.end}
		switch elf.ST_BIND(s.Info) {
		case elf.STB_GLOBAL:
			c.rank = 0
		case elf.STB_WEAK:
			c.rank = 1
		default:
			c.rank = 2
		}
		if typ == elf.STT_NOTYPE {
			c.rank += 3
		}
		if strings.HasPrefix(s.Name, "_") && !strings.HasPrefix(s.Name, "_Z") && !strings.HasPrefix(s.Name, "_R") {
			c.rank += 6 // prefer "malloc" over its alias "__libc_malloc"
		}
		n++
		if s.Size == 0 {
			c.end = s.Value
			*zero = append(*zero, c)
			continue
		}
		if s.Size > sizeMask || s.Value+s.Size < s.Value {
			continue // no function is 2 GiB: a corrupt table
		}
		c.end = min(s.Value+s.Size, sec.end)
		if c.end <= c.start {
			continue
		}
		*sized = append(*sized, c)
	}
	return n
}

func sectionOf(secs []section, a uint64) (section, bool) {
	for _, s := range secs {
		if a >= s.start && a < s.end {
			return s, true
		}
	}
	return section{}, false
}

// dwarfEntryBound bounds the entries .debug_info can hold (≥ 1 byte each;
// a .zdebug section's Size is compressed, hence the factor).
func dwarfEntryBound(f *elf.File) int64 {
	var n uint64
	if s := f.Section(".debug_info"); s != nil {
		n = max(s.Size, s.FileSize)
	}
	if s := f.Section(".zdebug_info"); s != nil {
		n = max(n, 64*s.Size)
	}
	return int64(min(n, 1<<40)) + 1<<10
}

// inflatedSize is the size a section's data takes once read: ch_size for
// SHF_COMPRESSED (debug/elf puts it in Size), the "ZLIB" header's size
// for GNU .zdebug_* (debug/dwarf allocates it up front), else Size.
func inflatedSize(s *elf.Section) (uint64, error) {
	if s.Type == elf.SHT_NOBITS {
		return 0, nil
	}
	if strings.HasPrefix(s.Name, ".zdebug_") {
		var h [12]byte
		if _, err := s.ReadAt(h[:], 0); err == nil && string(h[:4]) == "ZLIB" {
			return binary.BigEndian.Uint64(h[4:]), nil
		}
	}
	return s.Size, nil
}

// debugBytes sums the inflated sizes of the sections f.DWARF() reads.
func debugBytes(f *elf.File) (uint64, error) {
	var total uint64
	for _, s := range f.Sections {
		if !strings.HasPrefix(s.Name, ".debug_") && !strings.HasPrefix(s.Name, ".zdebug_") {
			continue
		}
		n, err := inflatedSize(s)
		if err != nil {
			return 0, err
		}
		if total+n < total {
			return 0, fmt.Errorf("DWARF skipped: debug section sizes overflow")
		}
		total += n
	}
	return total, nil
}

// checkCompressed refuses a compressed non-debug section (.symtab,
// .strtab, .dynsym …) that declares more than limit inflated bytes.
func checkCompressed(f *elf.File, limit int64) error {
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_COMPRESSED == 0 || strings.HasPrefix(s.Name, ".debug_") {
			continue
		}
		if n, _ := inflatedSize(s); n > uint64(limit) {
			return fmt.Errorf("section %s declares %d uncompressed bytes > cap %d", s.Name, n, limit)
		}
	}
	return nil
}

func hasDWARF(f *elf.File) bool {
	return f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil
}

// subprograms lists DW_TAG_subprogram ranges. Inlined instances are not
// separate functions and are skipped with their parent's children.
func subprograms(d *dwarf.Data, bound int64) ([]cand, error) {
	var out []cand
	r := d.Reader()
	spec := d.Reader()
	for n := int64(0); ; n++ {
		if n > bound {
			// debug/dwarf can return null entries forever on a corrupt
			// unit (found by FuzzBuildIndex); every entry takes ≥ 1 byte.
			return out, fmt.Errorf("DWARF: more than %d entries in .debug_info: corrupt", bound)
		}
		e, err := r.Next()
		if err != nil {
			return out, err
		}
		if e == nil {
			return out, nil
		}
		switch e.Tag {
		case dwarf.TagCompileUnit, dwarf.TagPartialUnit, dwarf.TagNamespace, dwarf.TagModule,
			dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
			continue // functions are defined inside these
		case dwarf.TagSubprogram:
			name := dwarfName(e, spec, 0)
			if name != "" {
				ranges, err := d.Ranges(e)
				if err == nil {
					for _, rg := range ranges {
						if rg[1] > rg[0] && rg[0] != 0 && rg[1]-rg[0] <= sizeMask {
							out = append(out, cand{start: rg[0], end: rg[1], name: name})
						}
					}
				}
			}
		}
		if e.Children {
			r.SkipChildren()
		}
	}
}

// dwarfName prefers the linkage (mangled) name, then the plain name, then
// follows DW_AT_specification / DW_AT_abstract_origin (C++ out-of-line
// member definitions, out-of-line copies of inlined functions).
func dwarfName(e *dwarf.Entry, r *dwarf.Reader, depth int) string {
	if s, ok := e.Val(dwarf.AttrLinkageName).(string); ok && s != "" {
		return s
	}
	if s, ok := e.Val(dwarf.AttrName).(string); ok && s != "" {
		return s
	}
	if depth >= 2 {
		return ""
	}
	for _, a := range []dwarf.Attr{dwarf.AttrSpecification, dwarf.AttrAbstractOrigin} {
		off, ok := e.Val(a).(dwarf.Offset)
		if !ok {
			continue
		}
		r.Seek(off)
		o, err := r.Next()
		if err != nil || o == nil {
			continue
		}
		if s := dwarfName(o, r, depth+1); s != "" {
			return s
		}
	}
	return ""
}

// flatten turns possibly nested or overlapping ranges into disjoint ones:
// at every address the innermost (latest-starting) range names it, so a
// local label symbol inside a function wins only over its own bytes.
func flatten(cs []cand) []sym {
	if len(cs) == 0 {
		return nil
	}
	// Exact aliases: keep the best name.
	slices.SortFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end), cmp.Compare(a.rank, b.rank), cmp.Compare(a.name, b.name))
	})
	uniq := cs[:0:0]
	for i, c := range cs {
		if i > 0 && c.start == cs[i-1].start && c.end == cs[i-1].end {
			continue
		}
		uniq = append(uniq, c)
	}
	points := make([]uint64, 0, 2*len(uniq))
	for _, c := range uniq {
		points = append(points, c.start, c.end)
	}
	slices.Sort(points)
	points = slices.Compact(points)
	names := make(map[string]string, len(uniq)) // demangle each distinct name once
	var out []sym
	var stack []int
	next := 0
	for pi, p := range points[:len(points)-1] {
		for next < len(uniq) && uniq[next].start == p {
			stack = append(stack, next) // sorted outer (longer) first, so inner ends on top
			next++
		}
		for len(stack) > 0 && uniq[stack[len(stack)-1]].end <= p {
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			continue
		}
		c := uniq[stack[len(stack)-1]]
		end := points[pi+1]
		if n := len(out); n > 0 && out[n-1].addr+out[n-1].size == p && out[n-1].name == pretty(names, c.name) {
			out[n-1].size += end - p
			continue
		}
		out = append(out, sym{addr: p, size: end - p, name: pretty(names, c.name)})
	}
	return splitLarge(out)
}

// splitLarge keeps every entry's size within 31 bits.
func splitLarge(in []sym) []sym {
	var out []sym
	for _, s := range in {
		for s.size > sizeMask {
			out = append(out, sym{addr: s.addr, size: sizeMask, name: s.name, approx: s.approx})
			s.addr += sizeMask
			s.size -= sizeMask
		}
		out = append(out, s)
	}
	return out
}

// subtract returns the parts of b (disjoint, sorted) not covered by a.
func subtract(b, a []sym) []sym {
	var out []sym
	j := 0
	for _, s := range b {
		lo, hi := s.addr, s.addr+s.size
		for j < len(a) && a[j].addr+a[j].size <= lo {
			j++
		}
		for k := j; k < len(a) && a[k].addr < hi && lo < hi; k++ {
			if a[k].addr > lo {
				out = append(out, sym{addr: lo, size: a[k].addr - lo, name: s.name})
			}
			lo = max(lo, a[k].addr+a[k].size)
		}
		if lo < hi {
			out = append(out, sym{addr: lo, size: hi - lo, name: s.name})
		}
	}
	return out
}

func mergeSorted(a, b []sym) []sym {
	out := make([]sym, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.SortFunc(out, func(x, y sym) int { return cmp.Compare(x.addr, y.addr) })
	return out
}

// extendZero gives zero-size symbols (assembly) the bytes up to the next
// symbol, the end of their section, or MaxApproxSize, whichever is first,
// and marks them approximate. One inside a sized symbol adds nothing.
func extendZero(table []sym, zero []cand) ([]sym, int) {
	if len(zero) == 0 {
		return table, 0
	}
	slices.SortFunc(zero, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.rank, b.rank), cmp.Compare(a.name, b.name))
	})
	names := map[string]string{}
	var add []sym
	for i, z := range zero {
		if i > 0 && z.start == zero[i-1].start {
			continue // alias: the first has the best rank
		}
		k, _ := slices.BinarySearchFunc(table, z.start, func(s sym, a uint64) int { return cmp.Compare(s.addr, a) })
		if k > 0 && table[k-1].addr+table[k-1].size > z.start {
			continue // inside a sized symbol
		}
		end := min(z.secEnd, z.start+MaxApproxSize)
		if k < len(table) {
			end = min(end, table[k].addr)
		}
		for n := i + 1; n < len(zero); n++ {
			if zero[n].start > z.start {
				end = min(end, zero[n].start)
				break
			}
		}
		if end > z.start {
			add = append(add, sym{addr: z.start, size: end - z.start, name: pretty(names, z.name), approx: true})
		}
	}
	if len(add) == 0 {
		return table, 0
	}
	return mergeSorted(table, add), len(add)
}

// pretty demangles C++ and Rust names at build time so lookups are cheap,
// memoized per distinct raw name.
func pretty(memo map[string]string, raw string) string {
	if p, ok := memo[raw]; ok {
		return p
	}
	p := raw
	// Versioned names ("memcpy@@GLIBC_2.14", "_ZSt4cout@@GLIBCXX_3.4"):
	// '@' never occurs in a mangled or C name otherwise.
	if i := strings.IndexByte(p, '@'); i > 0 {
		p = p[:i]
	}
	if strings.HasPrefix(p, "_Z") || strings.HasPrefix(p, "_R") {
		if s, err := demangle.ToString(p, demangle.MaxLength(16)); err == nil {
			p = s
		}
	}
	p = clipName(p)
	memo[raw] = p
	return p
}

// ELFBuildID returns the GNU build-id note of f as lowercase hex, "" when
// it has none.
func ELFBuildID(f *elf.File) (string, error) {
	var notes [][]byte
	if s := f.Section(".note.gnu.build-id"); s != nil && s.Type == elf.SHT_NOTE {
		if s.Size >= 1<<20 { // a note is bytes; a huge one is a (compressed) bomb
			return "", fmt.Errorf(".note.gnu.build-id: %d bytes", s.Size)
		}
		b, err := s.Data()
		if err != nil {
			return "", fmt.Errorf(".note.gnu.build-id: %w", err)
		}
		notes = append(notes, b)
	} else {
		for _, s := range f.Sections {
			if s.Type == elf.SHT_NOTE && s.Size < 1<<20 {
				if b, err := s.Data(); err == nil {
					notes = append(notes, b)
				}
			}
		}
	}
	order := f.ByteOrder
	if order == nil {
		order = binary.LittleEndian
	}
	for _, b := range notes {
		for len(b) >= 12 {
			namesz, descsz, typ := order.Uint32(b), order.Uint32(b[4:]), order.Uint32(b[8:])
			b = b[12:]
			nlen, dlen := align4(uint64(namesz)), align4(uint64(descsz))
			if nlen+dlen > uint64(len(b)) {
				break
			}
			name, desc := b[:namesz], b[nlen:nlen+uint64(descsz)]
			b = b[nlen+dlen:]
			if typ == 3 && string(name) == "GNU\x00" && len(desc) > 0 {
				if len(desc) > maxBuildIDRaw {
					return "", fmt.Errorf("build-id note: %d bytes exceed %d", len(desc), maxBuildIDRaw)
				}
				return hex.EncodeToString(desc), nil
			}
		}
	}
	return "", nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }
