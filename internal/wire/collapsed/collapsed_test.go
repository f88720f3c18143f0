package collapsed

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stack"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
)

func TestImport(t *testing.T) {
	in := "# py-spy\nmain;train_step;forward 12\n\nmain;operator new(unsigned long) 3\r\nidle 0\n"
	b, err := Import(strings.NewReader(in), 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Samples) != 2 {
		t.Fatalf("samples: %+v", b.Samples)
	}
	s := b.Samples[0]
	if s.Rank != 4 || s.Count != 12 || len(s.Frames) != 3 || s.Frames[0].Func != "forward" || s.Frames[2].Func != "main" || s.Frames[0].Kind != stack.Symbol || s.Frames[0].Mapping != -1 {
		t.Fatalf("sample: %+v", s)
	}
	if f := b.Samples[1].Frames[0].Func; f != "operator new(unsigned long)" {
		t.Fatalf("a name with spaces: %q", f)
	}
	b.StartNS, b.EndNS = 1, 2
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestImportErrorsNameLine(t *testing.T) {
	for _, c := range []struct{ in, field string }{
		{"a;b 1\nab\n", "line 2"},
		{"a;b x\n", "line 1"},
		{"a;;b 1\n", "line 1"},
		{"ok 1\n\n 3\n", "line 3"},
		{"a -1\n", "line 1"},
	} {
		_, err := Import(strings.NewReader(c.in), 0)
		var fe *signal.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Fatalf("%q: got %v, want a FieldError on %q", c.in, err, c.field)
		}
	}
	if _, err := Import(strings.NewReader(strings.Repeat("a", MaxLineBytes+1)+" 1\n"), 0); !errors.Is(err, laggardv1.ErrTooLarge) {
		t.Fatalf("long line: %v", err)
	}
	deep := strings.Repeat("f;", stack.MaxFrames+10) + "leaf 1\n"
	b, err := Import(strings.NewReader(deep), 0)
	if err != nil || !b.Samples[0].Truncated || len(b.Samples[0].Frames) != stack.MaxFrames || b.Samples[0].Frames[0].Func != "leaf" {
		t.Fatalf("deep stack keeps the leaf end: %v", err)
	}
}

func TestExportRoundTrip(t *testing.T) {
	p := &stack.Profile{Funcs: []stack.Func{{Name: "main"}, {Name: "a;b"}, {Name: "c"}},
		Stacks: []stack.Stack{{Frames: []int32{0, 1, 2}, Count: 5}, {Frames: []int32{0}, Count: 1}}, Total: 6}
	var buf bytes.Buffer
	if err := Export(&buf, p); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), "main;a:b;c 5\nmain 1\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	b, err := Import(&buf, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Samples) != 2 || b.Samples[0].Count != 5 || b.Samples[0].Frames[2].Func != "main" {
		t.Fatalf("%+v", b.Samples)
	}
}

func FuzzImport(f *testing.F) {
	f.Add("main;a;b 3\nmain 1\n")
	f.Add("# c\n\nx 0\n")
	f.Add("a b c 9223372036854775807\n")
	f.Fuzz(func(t *testing.T, in string) {
		b, err := Import(strings.NewReader(in), 0)
		if err != nil {
			var fe *signal.FieldError
			if !errors.Is(err, laggardv1.ErrTooLarge) && (!errors.As(err, &fe) || fe.Field == "") {
				t.Fatalf("error is not a FieldError: %T %v", err, err)
			}
			return
		}
		b.StartNS, b.EndNS = 1, 2
		if err := b.Validate(); err != nil {
			t.Fatalf("invalid batch: %v", err)
		}
		// Exporting what was read and reading it back keeps the counts.
		p := &stack.Profile{}
		idx := map[string]int32{}
		for _, s := range b.Samples {
			st := stack.Stack{Count: s.Count}
			for j := len(s.Frames) - 1; j >= 0; j-- {
				n := s.Frames[j].Func
				k, ok := idx[n]
				if !ok {
					k = int32(len(p.Funcs))
					idx[n] = k
					p.Funcs = append(p.Funcs, stack.Func{Name: n})
				}
				st.Frames = append(st.Frames, k)
			}
			p.Stacks = append(p.Stacks, st)
		}
		var buf bytes.Buffer
		if err := Export(&buf, p); err != nil {
			t.Fatal(err)
		}
		back, err := Import(&buf, 0)
		if err != nil {
			t.Fatalf("re-import: %v\n%q", err, buf.String())
		}
		if len(back.Samples) != len(b.Samples) {
			t.Fatalf("%d samples, re-read %d", len(b.Samples), len(back.Samples))
		}
		for i := range back.Samples {
			if back.Samples[i].Count != b.Samples[i].Count || len(back.Samples[i].Frames) != len(b.Samples[i].Frames) {
				t.Fatalf("sample %d changed", i)
			}
		}
	})
}
