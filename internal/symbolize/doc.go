// Package symbolize is laggard's central, deferred symbolization (SysOM-AI
// §3.4, §4 "Data pipeline and symbol management"): agents ship raw
// addresses and Build-IDs; the server keeps one compact symbol file per
// Build-ID, built from the binary's complete symbol table (.symtab,
// .dynsym, DWARF subprograms), and names frames with O(log n) lookups that
// read a page of the file instead of loading it (§2.3 C4: full tables of
// 600 MB–1 GB per library would not fit on every node).
//
// Symbols carry their sizes, so an address outside every symbol is named
// "<module>+0x<addr>" rather than after the nearest lower symbol — the
// node-side misattribution §5.3 measured (one function absorbing 50% of
// samples). NaiveNearest reproduces that bug for tests and evaluation.
//
// Byte layout of the symbol file: docs/format/symbols.md.
package symbolize
