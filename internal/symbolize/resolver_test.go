package symbolize

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/stack"
)

// storeWith returns a store holding synthetic symbol files.
func storeWith(t testing.TB, files map[string][]sym) *Store {
	t.Helper()
	s, err := OpenStoreWith(t.TempDir(), StoreOptions{DebugDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for id, syms := range files {
		var buf bytes.Buffer
		if err := writeIndex(&buf, id, flagSymtab, syms); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(s.symPath(id), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func names(p *stack.Profile) map[string]int64 {
	out := map[string]int64{}
	for _, st := range p.Stacks {
		var parts []string
		for _, f := range st.Frames {
			fn := p.Funcs[f]
			parts = append(parts, fmt.Sprintf("%s:%s@%s", fn.Kind, fn.Name, fn.Module))
		}
		out[strings.Join(parts, ";")] += st.Count
	}
	return out
}

func TestResolverProfile(t *testing.T) {
	s := storeWith(t, map[string][]sym{
		"aa": {{addr: 0x1000, size: 0x100, name: "main"}, {addr: 0x1100, size: 0x80, name: "ns::work(int)"}},
		"bb": {{addr: 0x500, size: 0x10, name: "memcpy"}},
	})
	r := NewResolver(s, ResolverOptions{})
	defer r.Close()
	maps := []stack.Mapping{
		{Start: 1, Limit: 2, BuildID: "aa", Path: "/opt/app/bin/trainer"},
		{Start: 3, Limit: 4, BuildID: "bb", Path: "/lib/libc.so.6"},
		{Start: 5, Limit: 6, BuildID: "cc", Path: "/lib/libgone.so"}, // not in the store
		{Start: 7, Limit: 8, Path: "/lib/noid.so"},                   // no build-id
	}
	nat := func(m int32, a uint64) stack.Frame { return stack.Frame{Kind: stack.Native, Mapping: m, Addr: a} }
	b1 := &stack.Batch{StartNS: 100, EndNS: 200, Hz: 99, Ratio: 0.1, Mappings: maps, Samples: []stack.Sample{
		// leaf first: memcpy ← work ← main
		{Rank: 0, Count: 3, Frames: []stack.Frame{nat(1, 0x505), nat(0, 0x1110), nat(0, 0x1001)}},
		// same stack, different addresses inside the same functions: merged
		{Rank: 0, Count: 2, Frames: []stack.Frame{nat(1, 0x50f), nat(0, 0x117f), nat(0, 0x10ff)}},
		// an address past work's end (in the gap) stays unnamed, not "work"
		{Rank: 0, Count: 1, Frames: []stack.Frame{nat(0, 0x1190), nat(0, 0x1001)}},
		// unknown build-id, no build-id with an agent-given name, no build-id without
		{Rank: 0, Count: 1, Frames: []stack.Frame{nat(2, 0x42), nat(3, 0x7), {Kind: stack.Native, Mapping: 3, Addr: 9, Func: "exported"}}},
		// kernel and python frames pass through
		{Rank: 0, Count: 4, Frames: []stack.Frame{
			{Kind: stack.Kernel, Mapping: -1, Func: "do_syscall_64", Addr: 0xffffffff81000000},
			{Kind: stack.Python, Mapping: -1, Func: "train_step", File: "train.py", Line: 10},
			nat(0, 0x1001)}},
		// a foreign sample: another process on rank 0's CPU
		{Rank: 0, Foreign: true, Comm: "stress-ng", PID: 77, Count: 5, Frames: []stack.Frame{{Kind: stack.Kernel, Mapping: -1, Func: "clear_page"}}},
		// another rank: filtered out
		{Rank: 1, Count: 100, Frames: []stack.Frame{nat(0, 0x1001)}},
	}}
	b2 := &stack.Batch{StartNS: 200, EndNS: 300, Hz: 99, Ratio: 0.1, Mappings: maps[:1], Samples: []stack.Sample{
		{Rank: 0, Count: 10, Frames: []stack.Frame{nat(0, 0x1001)}},
	}}
	p := r.Profile([]*stack.Batch{b1, b2}, 0)
	want := map[string]int64{
		"native:main@trainer;native:ns::work(int)@trainer;native:memcpy@libc.so.6":             5,
		"native:main@trainer;native:trainer+0x1190@trainer":                                    1,
		"native:exported@noid.so;native:noid.so+0x7@noid.so;native:libgone.so+0x42@libgone.so": 1,
		"native:main@trainer;python:train_step@train.py;kernel:do_syscall_64@kernel":           4,
		"symbol:[other process] stress-ng@;kernel:clear_page@kernel":                           5,
		"native:main@trainer": 10,
	}
	got := names(p)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
	if p.Total != 26 || p.StartNS != 100 || p.EndNS != 300 || p.Hz != 99 || p.Ratio != 0.1 || p.Rank != 0 {
		t.Errorf("profile header %+v", p)
	}
	if len(p.Stacks) != len(want) {
		t.Errorf("%d stacks, want %d (identical stacks merged)", len(p.Stacks), len(want))
	}
	// All ranks.
	if all := r.Profile([]*stack.Batch{b1, b2}, -1); all.Total != 126 {
		t.Errorf("all ranks total %d", all.Total)
	}
	st := r.Stats()
	if st.Lookups == 0 || st.CacheHits == 0 || st.Unknown == 0 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestResolverLRU: with one open file allowed, alternating Build-IDs and
// concurrent Profile calls still resolve (an evicted index in use is
// closed by its last user).
func TestResolverLRU(t *testing.T) {
	files := map[string][]sym{}
	var maps []stack.Mapping
	for i := range 6 {
		id := fmt.Sprintf("%02x", i+1)
		files[id] = []sym{{addr: 0x100, size: 0x100, name: "f" + id}}
		maps = append(maps, stack.Mapping{Start: 1, Limit: 2, BuildID: id, Path: "lib" + id})
	}
	s := storeWith(t, files)
	r := NewResolver(s, ResolverOptions{MaxOpen: 1, CacheEntries: 4})
	defer r.Close()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range 50 {
				var samples []stack.Sample
				for m := range maps {
					samples = append(samples, stack.Sample{Rank: 0, Count: 1, Frames: []stack.Frame{
						{Kind: stack.Native, Mapping: int32(m), Addr: 0x100 + uint64(g*50+it)%0x100}}})
				}
				p := r.Profile([]*stack.Batch{{StartNS: 1, EndNS: 2, Mappings: maps, Samples: samples}}, 0)
				for _, f := range p.Funcs {
					if !strings.HasPrefix(f.Name, "f") || f.Name[1:] != f.Module[3:] {
						t.Errorf("misnamed %+v", f)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	r.mu.Lock()
	open := len(r.open)
	r.mu.Unlock()
	if open > 1 {
		t.Errorf("%d indexes open, bound 1", open)
	}
}

// TestResolverLocalDebug: a Build-ID the store lacks is found in the
// server node's debug directory.
func TestResolverLocalDebug(t *testing.T) {
	l := buildSparseLib(t)
	root := t.TempDir()
	p := filepath.Join(root, ".build-id", l.buildID[:2], l.buildID[2:]+".debug")
	os.MkdirAll(filepath.Dir(p), 0o755)
	raw, _ := os.ReadFile(l.debug)
	os.WriteFile(p, raw, 0o644)
	s, _ := OpenStoreWith(t.TempDir(), StoreOptions{DebugDirs: []string{root}})
	r := NewResolver(s, ResolverOptions{LocalDebug: true})
	defer r.Close()
	var frames []stack.Frame
	for _, rg := range l.statics {
		frames = append(frames, stack.Frame{Kind: stack.Native, Mapping: 0, Addr: rg[0] + 1})
	}
	prof := r.Profile([]*stack.Batch{{StartNS: 1, EndNS: 2, Mappings: []stack.Mapping{{Start: 1, Limit: 2, BuildID: l.buildID, Path: "/x/libt.so"}},
		Samples: []stack.Sample{{Rank: 3, Count: 1, Frames: frames}}}}, 3)
	named := 0
	for _, f := range prof.Funcs {
		if _, ok := l.statics[f.Name]; ok && f.Module == "libt.so" {
			named++
		}
	}
	if named != nStatic {
		t.Errorf("named %d of %d static functions: %+v", named, nStatic, prof.Funcs)
	}
}

// TestOpaqueForeignSampleIsItsFrame: an opaque foreign sample (another
// user's process, laggard's own) is shown as its one frame, with no
// "[other process] pid 0" root above it.
func TestOpaqueForeignSampleIsItsFrame(t *testing.T) {
	r := NewResolver(storeWith(t, nil), ResolverOptions{})
	defer r.Close()
	b := &stack.Batch{StartNS: 1, EndNS: 2, Samples: []stack.Sample{
		{Rank: 0, Foreign: true, Count: 4, Frames: []stack.Frame{{Kind: stack.Symbol, Mapping: -1, Func: stack.HiddenFrame}}},
	}}
	p := r.Profile([]*stack.Batch{b}, 0)
	if len(p.Stacks) != 1 || len(p.Stacks[0].Frames) != 1 || p.Funcs[p.Stacks[0].Frames[0]].Name != stack.HiddenFrame {
		t.Fatalf("profile %+v", p)
	}
}
