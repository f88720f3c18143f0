package bound

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(r io.Reader) ([]byte, error) { return io.ReadAll(r) }

func TestTokenLimit(t *testing.T) {
	const max = 8
	for _, c := range []struct {
		name, in string
		err      string // "" = passes through unchanged
	}{
		{"short tokens", `{"a":[1,true,null,"xyz"]}`, ""},
		{"string at the bound", `["123456"]`, ""}, // 8 bytes with its quotes
		{"string over", `["1234567"]`, "JSON string longer than 8 bytes at byte offset 1"},
		{"escapes count", `["\"\"\""]`, ""},
		{"escaped quote does not end it", `["a\"bcdefgh"]`, "JSON string longer than 8 bytes at byte offset 1"},
		{"number over", `[123456789]`, "JSON number or literal longer than 8 bytes at byte offset 1"},
		{"whitespace at the bound", "[" + strings.Repeat(" ", 8) + "1]", ""},
		{"whitespace over", "[1," + strings.Repeat("\n", 9) + "2]", "JSON whitespace run longer than 8 bytes at byte offset 3"},
		{"structure is not a token", strings.Repeat("[", 100) + strings.Repeat("]", 100), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Chunking must not matter: whole, and one byte per read.
			for _, r := range []io.Reader{strings.NewReader(c.in), iotest.OneByteReader(strings.NewReader(c.in))} {
				out, err := readAll(NewTokenLimitReader(r, max))
				switch {
				case c.err == "" && (err != nil || string(out) != c.in):
					t.Fatalf("got %q, %v; want the input unchanged", out, err)
				case c.err != "" && (err == nil || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), c.err)):
					t.Fatalf("err %v, want ErrTooLarge with %q", err, c.err)
				}
			}
		})
	}
}

// The reader is transparent for any input whose runs fit, and a later
// Read after a failure keeps failing.
func FuzzTokenLimit(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"ph":"X","name":"a\"b","ts":1.5,"dur":2}]}`), uint16(4))
	f.Add([]byte("[\"\\\\\"]   \n"), uint16(1))
	f.Fuzz(func(t *testing.T, in []byte, max uint16) {
		m := int64(max) + 1
		out, err := readAll(NewTokenLimitReader(iotest.HalfReader(bytes.NewReader(in)), m))
		if err == nil {
			if !bytes.Equal(out, in) {
				t.Fatalf("output differs from the input")
			}
			return
		}
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("err %v is not ErrTooLarge", err)
		}
		if int64(len(in)) <= m {
			t.Fatalf("input of %d bytes refused under a %d-byte bound: %v", len(in), m, err)
		}
	})
}

// A whitespace run of any length costs the bound, not the run: the reader
// fails before a tokenizer behind it would have to hold it.
func BenchmarkTokenLimitWhitespace(b *testing.B) {
	in := `{"traceEvents":[` + strings.Repeat(" ", 64<<20) + `]}`
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		_, err := io.Copy(io.Discard, NewTokenLimitReader(strings.NewReader(in), 0))
		if !errors.Is(err, ErrTooLarge) {
			b.Fatal(err)
		}
	}
}

// Throughput on ordinary JSON (the cost the bound adds to a trace import).
func BenchmarkTokenLimitTrace(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"traceEvents":[`)
	for i := range 100_000 {
		if i > 0 {
			sb.WriteString(",\n")
		}
		sb.WriteString(`{"ph":"X","cat":"cpu_op","name":"aten::addmm","pid":100,"tid":100,"ts":1700000000000000.123,"dur":30.5,"args":{"External id": 1, "Sequence number": 7}}`)
	}
	sb.WriteString(`]}`)
	in := sb.String()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, NewTokenLimitReader(strings.NewReader(in), 0)); err != nil {
			b.Fatal(err)
		}
	}
}
