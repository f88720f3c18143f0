package pprof

import (
	"bytes"
	"compress/gzip"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

const t0 = int64(1_700_000_000) * 1e9

// goCPUProfile is shaped like runtime/pprof's: samples/count and
// cpu/nanoseconds at a 10 ms period, one location with an inlined call,
// one unsymbolized address in a Build-ID'd mapping.
func goCPUProfile() *profile.Profile {
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/usr/bin/app", BuildID: "ABCDEF12"}
	fMain := &profile.Function{ID: 1, Name: "main.main", Filename: "main.go"}
	fWork := &profile.Function{ID: 2, Name: "main.work", Filename: "work.go"}
	fInl := &profile.Function{ID: 3, Name: "main.add", Filename: "work.go"}
	lMain := &profile.Location{ID: 1, Mapping: m, Address: 0x401000, Line: []profile.Line{{Function: fMain, Line: 10}}}
	// Line[0] is the inlined callee, Line[1] the function it was inlined into.
	lWork := &profile.Location{ID: 2, Mapping: m, Address: 0x402000, Line: []profile.Line{{Function: fInl, Line: 5}, {Function: fWork, Line: 20}}}
	lRaw := &profile.Location{ID: 3, Mapping: m, Address: 0x403010}
	return &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10_000_000,
		TimeNanos: t0, DurationNanos: 5e9,
		Mapping: []*profile.Mapping{m}, Function: []*profile.Function{fMain, fWork, fInl}, Location: []*profile.Location{lMain, lWork, lRaw},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lWork, lMain}, Value: []int64{7, 70_000_000}, NumLabel: map[string][]int64{"rank": {3}}},
			{Location: []*profile.Location{lRaw, lMain}, Value: []int64{2, 20_000_000}, Label: map[string][]string{"thread": {"worker"}}},
			{Location: []*profile.Location{lMain}, Value: []int64{0, 0}},
		},
	}
}

func encode(t testing.TB, p *profile.Profile, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	if gz {
		err = p.Write(&buf) // Write gzips
	} else {
		err = p.WriteUncompressed(&buf)
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestImport(t *testing.T) {
	for _, gz := range []bool{true, false} {
		b, err := ImportWith(bytes.NewReader(encode(t, goCPUProfile(), gz)), Options{Rank: 1})
		if err != nil {
			t.Fatalf("gz=%v: %v", gz, err)
		}
		if b.StartNS != t0 || b.EndNS != t0+5e9 || b.Hz != 100 || b.Ratio != 1 {
			t.Fatalf("window/rate: %+v", b)
		}
		if len(b.Samples) != 2 { // the zero-count sample is dropped
			t.Fatalf("samples: %+v", b.Samples)
		}
		s := b.Samples[0]
		if s.Rank != 3 || s.Count != 7 {
			t.Fatalf("rank label or count: %+v", s)
		}
		names := []string{}
		for _, f := range s.Frames {
			names = append(names, f.Func)
		}
		if want := []string{"main.add", "main.work", "main.main"}; !reflect.DeepEqual(names, want) {
			t.Fatalf("inline expansion leaf first: %v, want %v", names, want)
		}
		if f := s.Frames[0]; f.Kind != stack.Symbol || f.File != "work.go" || f.Line != 5 {
			t.Fatalf("frame: %+v", f)
		}
		raw := b.Samples[1]
		if raw.Rank != 1 || raw.Thread != "worker" {
			t.Fatalf("request rank / thread label: %+v", raw)
		}
		if f := raw.Frames[0]; f.Kind != stack.Native || f.Addr != 0x403010-0x400000+0x1000 || b.Mappings[f.Mapping].BuildID != "abcdef12" {
			t.Fatalf("unsymbolized frame: %+v %+v", f, b.Mappings)
		}
	}
}

func TestImportCPUOnly(t *testing.T) {
	p := goCPUProfile()
	p.SampleType = p.SampleType[1:]
	for _, s := range p.Sample {
		s.Value = s.Value[1:]
	}
	b, err := ImportWith(bytes.NewReader(encode(t, p, true)), Options{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	if b.Samples[0].Count != 7 || b.Samples[1].Count != 2 {
		t.Fatalf("cpu / period: %+v", b.Samples)
	}
}

func TestImportErrors(t *testing.T) {
	heap := goCPUProfile()
	heap.SampleType = []*profile.ValueType{{Type: "alloc_space", Unit: "bytes"}, {Type: "inuse_space", Unit: "bytes"}}
	notime := goCPUProfile()
	notime.TimeNanos = 0
	badRank := goCPUProfile()
	badRank.Sample[1].Label = map[string][]string{"rank": {"x"}}
	for _, c := range []struct {
		name  string
		body  []byte
		field string
	}{
		{"heap", encode(t, heap, true), "sample_type"},
		{"no time", encode(t, notime, true), "start_ns"},
		{"rank label", encode(t, badRank, true), "samples[1].label.rank"},
		{"garbage", []byte("not a profile"), "body"},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0}, "body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ImportWith(bytes.NewReader(c.body), Options{Rank: -1})
			var fe *signal.FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("got %v, want a FieldError on %q", err, c.field)
			}
		})
	}
	// A gzip bomb stops at the bound.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(make([]byte, 4<<20))
	zw.Close()
	if _, err := ImportWith(&buf, Options{MaxBytes: 1 << 20}); !errors.Is(err, laggardv1.ErrTooLarge) {
		t.Fatalf("bomb: %v", err)
	}
	// The window from the request wins.
	b, err := ImportWith(bytes.NewReader(encode(t, notime, false)), Options{Rank: 0, StartNS: t0, EndNS: t0 + 1})
	if err != nil || b.StartNS != t0 || b.EndNS != t0+1 {
		t.Fatalf("request window: %v %+v", err, b)
	}
}

func sampleProfile() *stack.Profile {
	return &stack.Profile{Rank: 2, StartNS: t0, EndNS: t0 + 5e9, Hz: 99, Ratio: 0.1,
		Funcs: []stack.Func{{Name: "main", Kind: stack.Native, Module: "app"}, {Name: "train_step", Kind: stack.Python, Module: "train.py"},
			{Name: "do_syscall_64", Kind: stack.Kernel, Module: "kernel"}, {Name: "std::vector<int>::push_back", Kind: stack.Native, Module: "libfoo.so"}},
		Stacks: []stack.Stack{{Frames: []int32{0, 1, 2}, Count: 5}, {Frames: []int32{0, 3}, Count: 2}}, Total: 7}
}

// Export is valid pprof, and importing it back gives the same stacks and
// rate.
func TestExportRoundTrip(t *testing.T) {
	p := sampleProfile()
	out := Export(p)
	if err := out.CheckValid(); err != nil {
		t.Fatal(err)
	}
	b, err := Import(bytes.NewReader(encode(t, out, true)))
	if err != nil {
		t.Fatal(err)
	}
	if b.StartNS != p.StartNS || b.EndNS != p.EndNS {
		t.Fatalf("window %d..%d", b.StartNS, b.EndNS)
	}
	// Period 1e9/(99·0.1) ns is ~9.9 Hz: outside [10, 999], so no rate.
	var total int64
	for i, s := range b.Samples {
		total += s.Count
		if s.Rank != 2 {
			t.Fatalf("rank label: %+v", s)
		}
		want := p.Stacks[i]
		if len(s.Frames) != len(want.Frames) {
			t.Fatalf("stack %d: %+v", i, s.Frames)
		}
		for j, f := range s.Frames { // leaf first vs root first
			if f.Func != p.Funcs[want.Frames[len(want.Frames)-1-j]].Name {
				t.Fatalf("stack %d frame %d: %q", i, j, f.Func)
			}
		}
	}
	if total != p.Total {
		t.Fatalf("total %d, want %d", total, p.Total)
	}
	p.Hz, p.Ratio = 0, 0
	if err := Export(p).CheckValid(); err != nil {
		t.Fatalf("without a rate: %v", err)
	}
}

func FuzzImport(f *testing.F) {
	f.Add(encode(f, goCPUProfile(), false))
	f.Add(encode(f, goCPUProfile(), true))
	f.Add(encode(f, Export(sampleProfile()), false))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := ImportWith(bytes.NewReader(in), Options{Rank: 0, MaxBytes: 1 << 20})
		if err != nil {
			var fe *signal.FieldError
			if !errors.Is(err, laggardv1.ErrTooLarge) && (!errors.As(err, &fe) || fe.Field == "") {
				t.Fatalf("error is not a FieldError: %T %v", err, err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("invalid batch: %v", err)
		}
		if strings.Contains(b.Node, "\x00") {
			t.Fatal("node")
		}
	})
}
