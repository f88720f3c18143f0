package symbolize

import (
	"cmp"
	"debug/elf"
	"slices"
)

// NaiveSymbol is one (start, name) pair of a node-side symbol table.
type NaiveSymbol struct {
	Addr uint64
	Name string
}

// NaiveNearest is the node-side "nearest lower address" resolver that
// SysOM-AI §3.4/§5.3 shows to be wrong: it ignores symbol sizes, so over
// a sparse table (a stripped binary's .dynsym) every address between two
// exported functions is charged to the lower one — pangu_memcpy_avx512
// absorbing 50% of samples in Fig. 4. It exists only so tests and the
// evaluation can reproduce that bug next to Index; never use it to name
// frames.
type NaiveNearest struct {
	syms []NaiveSymbol
}

// NewNaiveNearest sorts a copy of syms.
func NewNaiveNearest(syms []NaiveSymbol) *NaiveNearest {
	s := slices.Clone(syms)
	slices.SortFunc(s, func(a, b NaiveSymbol) int { return cmp.Compare(a.Addr, b.Addr) })
	return &NaiveNearest{syms: s}
}

// Lookup returns the name of the highest symbol at or below addr.
func (n *NaiveNearest) Lookup(addr uint64) (string, bool) {
	s, ok := n.Find(addr)
	return s.Name, ok
}

// Find returns the highest symbol at or below addr.
func (n *NaiveNearest) Find(addr uint64) (NaiveSymbol, bool) {
	i, found := slices.BinarySearchFunc(n.syms, addr, func(s NaiveSymbol, a uint64) int { return cmp.Compare(s.Addr, a) })
	if found {
		return n.syms[i], true
	}
	if i == 0 {
		return NaiveSymbol{}, false
	}
	return n.syms[i-1], true
}

// NaiveTable is what a node-side resolver sees in a (stripped) binary:
// the start and name of every function symbol in .symtab and .dynsym,
// without sizes.
func NaiveTable(f *elf.File) []NaiveSymbol {
	var out []NaiveSymbol
	memo := map[string]string{}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil {
			continue
		}
		for _, s := range syms {
			t := elf.ST_TYPE(s.Info)
			if (t == elf.STT_FUNC || t == elf.STT_GNU_IFUNC) && s.Section != elf.SHN_UNDEF && s.Value != 0 {
				out = append(out, NaiveSymbol{Addr: s.Value, Name: pretty(memo, s.Name)})
			}
		}
	}
	return out
}
