package symbolize

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func encode(t testing.TB, id string, syms []sym) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeIndex(&buf, id, flagSymtab, syms); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// synthetic returns n disjoint symbols with gaps between some of them.
func synthetic(n int, seed uint64) []sym {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]sym, n)
	a := uint64(0x1000)
	for i := range out {
		size := 1 + rng.Uint64N(300)
		out[i] = sym{addr: a, size: size, name: fmt.Sprintf("f%d", i), approx: i%17 == 0}
		a += size + rng.Uint64N(3)*16 // some gaps
	}
	return out
}

func TestIndexRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 2, fenceStride - 1, fenceStride, fenceStride + 1, 5*fenceStride + 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			syms := synthetic(n, uint64(n))
			data := encode(t, "abcdef0123", syms)
			// Both access paths: plain ReadAt and a memory mapping.
			p := filepath.Join(t.TempDir(), "x.sym")
			os.WriteFile(p, data, 0o644)
			m, size, err := openMapped(p)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, r := range []struct {
				name string
				ix   func() (*Index, error)
			}{
				{"readat", func() (*Index, error) { return OpenIndex(bytes.NewReader(data), int64(len(data))) }},
				{"mmap", func() (*Index, error) { return OpenIndex(m, size) }},
			} {
				ix, err := r.ix()
				if err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				if ix.Len() != n || ix.BuildID() != "abcdef0123" {
					t.Fatalf("%s: len %d id %s", r.name, ix.Len(), ix.BuildID())
				}
				if err := ix.Verify(); err != nil {
					t.Fatalf("%s: %v", r.name, err)
				}
				checkAgainst(t, ix, syms)
			}
		})
	}
}

// checkAgainst compares every boundary of syms with a linear reference.
func checkAgainst(t *testing.T, ix *Index, syms []sym) {
	t.Helper()
	ref := func(a uint64) (sym, bool) {
		for _, s := range syms {
			if a >= s.addr && a < s.addr+s.size {
				return s, true
			}
		}
		return sym{}, false
	}
	var probes []uint64
	probes = append(probes, 0, 1, ^uint64(0))
	for _, s := range syms {
		probes = append(probes, s.addr-1, s.addr, s.addr+s.size/2, s.addr+s.size-1, s.addr+s.size)
	}
	for _, a := range probes {
		want, wok := ref(a)
		got, ok, err := ix.Find(a)
		if err != nil || ok != wok || (ok && (got.Name != want.name || got.Start != want.addr || got.Size != want.size || got.Approx != want.approx)) {
			t.Fatalf("Find(%#x) = %+v %v %v, want %+v %v", a, got, ok, err, want, wok)
		}
	}
}

func TestOpenIndexErrors(t *testing.T) {
	good := encode(t, "ab", synthetic(600, 3))
	le := binary.LittleEndian
	for _, c := range []struct {
		name, field string
		mut         func(b []byte) []byte
	}{
		{"short", "header", func(b []byte) []byte { return b[:100] }},
		{"magic", "magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", "version", func(b []byte) []byte { le.PutUint16(b[hVersion:], 9); return b }},
		{"entry size", "entry_size", func(b []byte) []byte { le.PutUint32(b[hEntrySize:], 24); return b }},
		{"flags", "flags", func(b []byte) []byte { le.PutUint32(b[hFlags:], 1<<20); return b }},
		{"stride", "fence_stride", func(b []byte) []byte { le.PutUint32(b[hFenceStride:], 3); return b }},
		{"fence count", "fence_count", func(b []byte) []byte { le.PutUint32(b[hFenceCount:], 1); return b }},
		{"count", "fence_count", func(b []byte) []byte { le.PutUint32(b[hCount:], 5000); return b }},
		{"truncated", "strings_len", func(b []byte) []byte { return b[:len(b)-1] }},
		{"appended", "strings_len", func(b []byte) []byte { return append(b, 0) }},
		{"build-id len", "build_id_len", func(b []byte) []byte { b[hBuildIDLen] = 65; return b }},
		{"reserved", "reserved", func(b []byte) []byte { b[hReserved+1] = 1; return b }},
		{"header crc", "header_crc", func(b []byte) []byte { b[hBuildID] ^= 1; return b }},
		{"fence crc", "header_crc", func(b []byte) []byte { b[headerSize+9] ^= 1; return b }},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.mut(bytes.Clone(good))
			_, err := OpenIndex(bytes.NewReader(b), int64(len(b)))
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err %v, want a FormatError naming %q", err, c.field)
			}
		})
	}
	// Damage past the header and fence: OpenIndex cannot see it, Verify
	// can, and lookups never panic.
	b := bytes.Clone(good)
	entriesOff := int(le.Uint64(b[hEntriesOff:]))
	le.PutUint32(b[entriesOff+12:], 1<<30) // name offset out of range
	ix, err := OpenIndex(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Verify(); err == nil || !strings.Contains(err.Error(), "name offset") {
		t.Fatalf("Verify: %v", err)
	}
	if _, _, err := ix.Find(0x1000); err == nil {
		t.Fatal("Find on a corrupt entry: no error")
	}
	b = bytes.Clone(good)
	b[len(b)-1] ^= 1 // a name byte: only the data checksum sees it
	ix, _ = OpenIndex(bytes.NewReader(b), int64(len(b)))
	if err := ix.Verify(); err == nil || !strings.Contains(err.Error(), "data_crc") {
		t.Fatalf("Verify: %v", err)
	}
}

func TestWriteIndexRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		id   string
		syms []sym
	}{
		{"overlap", "ab", []sym{{addr: 10, size: 10, name: "a"}, {addr: 15, size: 1, name: "b"}}},
		{"zero size", "ab", []sym{{addr: 10, size: 0, name: "a"}}},
		{"huge", "ab", []sym{{addr: 10, size: 1 << 31, name: "a"}}},
		{"bad id", "xyz", nil},
	} {
		if err := writeIndex(&bytes.Buffer{}, c.id, 0, c.syms); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestFlatten(t *testing.T) {
	c := func(s, e uint64, n string, rank int) cand { return cand{start: s, end: e, name: n, rank: rank} }
	type seg struct {
		a, b uint64
		n    string
	}
	for _, tc := range []struct {
		name string
		in   []cand
		want []seg
	}{
		{"disjoint", []cand{c(10, 20, "a", 0), c(30, 40, "b", 0)}, []seg{{10, 20, "a"}, {30, 40, "b"}}},
		{"adjacent", []cand{c(10, 20, "a", 0), c(20, 40, "b", 0)}, []seg{{10, 20, "a"}, {20, 40, "b"}}},
		{"nested", []cand{c(10, 100, "outer", 0), c(40, 50, "inner", 0)}, []seg{{10, 40, "outer"}, {40, 50, "inner"}, {50, 100, "outer"}}},
		{"partial overlap", []cand{c(10, 30, "a", 0), c(20, 40, "b", 0)}, []seg{{10, 20, "a"}, {20, 40, "b"}}},
		{"aliases: rank", []cand{c(10, 20, "__libc_malloc", 6), c(10, 20, "malloc", 0)}, []seg{{10, 20, "malloc"}}},
		{"aliases: name order", []cand{c(10, 20, "zz", 0), c(10, 20, "aa", 0)}, []seg{{10, 20, "aa"}}},
		{"same start longer outer", []cand{c(10, 20, "short", 0), c(10, 50, "long", 0)}, []seg{{10, 20, "short"}, {20, 50, "long"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := flatten(tc.in)
			var segs []seg
			for _, s := range got {
				segs = append(segs, seg{s.addr, s.addr + s.size, s.name})
			}
			if fmt.Sprint(segs) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", segs, tc.want)
			}
		})
	}
}

func TestSubtractAndExtend(t *testing.T) {
	a := []sym{{addr: 10, size: 10, name: "a"}, {addr: 30, size: 10, name: "b"}}
	b := []sym{{addr: 0, size: 50, name: "dw"}}
	got := subtract(b, a)
	if fmt.Sprint(got) != fmt.Sprint([]sym{{addr: 0, size: 10, name: "dw"}, {addr: 20, size: 10, name: "dw"}, {addr: 40, size: 10, name: "dw"}}) {
		t.Fatalf("subtract: %v", got)
	}
	zero := []cand{
		{start: 20, name: "z1", secEnd: 1 << 20},          // gap [20,30): extended to b
		{start: 15, name: "inside", secEnd: 1 << 20},      // inside a: dropped
		{start: 45, name: "z2", secEnd: 1 << 20},          // up to z3
		{start: 50, name: "z3", secEnd: 60},               // up to the section end
		{start: 1000, name: "far", secEnd: 1 << 30},       // bounded by MaxApproxSize
		{start: 20, name: "z1_alias", rank: 3, secEnd: 1}, // alias with a worse rank
	}
	table, n := extendZero(a, zero)
	var segs []string
	for _, s := range table {
		segs = append(segs, fmt.Sprintf("%s[%d,%d)%v", s.name, s.addr, s.addr+s.size, s.approx))
	}
	want := "[a[10,20)false z1[20,30)true b[30,40)false z2[45,50)true z3[50,60)true far[1000,66536)true]"
	if fmt.Sprint(segs) != want || n != 4 {
		t.Fatalf("extendZero: %v (%d)\nwant %s", segs, n, want)
	}
}

func TestNaiveNearest(t *testing.T) {
	n := NewNaiveNearest([]NaiveSymbol{{30, "b"}, {10, "a"}})
	for _, c := range []struct {
		a    uint64
		want string
		ok   bool
	}{{5, "", false}, {10, "a", true}, {29, "a", true}, {30, "b", true}, {1 << 40, "b", true}} {
		if got, ok := n.Lookup(c.a); got != c.want || ok != c.ok {
			t.Errorf("Lookup(%d) = %q %v", c.a, got, ok)
		}
	}
}

// TestNeverNearestLower is the §5.3 identity as a property: over random
// nested, overlapping and sparse tables, the built index names an address
// iff some symbol contains it, and then with the innermost such symbol.
func TestNeverNearestLower(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 42))
		var cs []cand
		for i := range 1 + rng.IntN(40) {
			s := uint64(rng.IntN(2000))
			cs = append(cs, cand{start: s, end: s + 1 + uint64(rng.IntN(200)), name: fmt.Sprintf("s%d", i), rank: rng.IntN(3)})
		}
		ref := slices.Clone(cs)
		data := encode(t, "ab", flatten(cs))
		ix, err := OpenIndex(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for a := uint64(0); a < 2300; a++ {
			// Reference: the latest-starting containing symbol, then the
			// shortest, then the best rank and name (aliases).
			var best *cand
			for i := range ref {
				c := &ref[i]
				if a < c.start || a >= c.end {
					continue
				}
				if best == nil || c.start > best.start || c.start == best.start && (c.end < best.end ||
					c.end == best.end && (c.rank < best.rank || c.rank == best.rank && c.name < best.name)) {
					best = c
				}
			}
			got, ok := ix.Lookup(a)
			if ok != (best != nil) || ok && got != best.name {
				t.Fatalf("seed %d: Lookup(%d) = %q %v, want %+v", seed, a, got, ok, best)
			}
		}
	}
}
