// Package bound holds what bounds every decoder of outside input by bytes
// (issue 16 item 11): the ErrTooLarge sentinel servers answer 413 for, and
// the token bound of streaming JSON decoders.
//
// Every decoder of outside input is bounded in one of two ways. A decoder
// that reads the body whole does so under the request's byte limit
// (laggardv1.ReadBody; one gzip layer inflated under the same limit) and
// tokenizes that buffer in place, so no token can outgrow it. A decoder
// that streams a body larger than it may hold (a KAIR trace: up to 1 GiB
// of JSON) reads through NewTokenLimitReader: a streaming tokenizer keeps
// the previous token, the whitespace after it and the next token
// contiguous in its buffer, and without a bound grows it to the whole run
// (a 4.6 MB gzip of whitespace inside traceEvents cost 2.7 GB).
package bound

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrTooLarge is wrapped by every error caused by input over a byte bound;
// servers map it to 413 (laggardv1.ErrTooLarge is the same value).
var ErrTooLarge = errors.New("body too large")

// DefaultMaxTokenBytes bounds one JSON token (a string, number or
// literal) or whitespace run of a streamed body (NewTokenLimitReader): far
// above any real one (kernel names and with_stack call stacks run to tens
// of KiB), far below what a tokenizer may buffer for an attacker (issue
// 16 item 11: a 4.6 MB gzip of whitespace inside traceEvents made the
// trace decoder hold a GiB-long run).
const DefaultMaxTokenBytes = 4 << 20

// tokenLimitReader fails with ErrTooLarge once a JSON string, number or
// literal, or a whitespace run between tokens, exceeds max bytes. It
// follows the lexical structure only (strings and their escapes), not the
// grammar: the decoder behind it judges validity.
type tokenLimitReader struct {
	r     io.Reader
	max   int64
	off   int64 // bytes scanned before the current Read
	start int64 // offset where the current token or run began
	run   int64 // its length so far
	kind  uint8 // what it is: kNone (a structural byte), kSpace, kString, kScalar
	esc   bool  // in a string, after a backslash
	err   error
}

const (
	kNone = iota
	kSpace
	kString
	kScalar
)

// class of a byte outside strings.
var class = func() (c [256]uint8) {
	for i := range c {
		c[i] = kScalar
	}
	for _, b := range []byte(" \t\n\r") {
		c[b] = kSpace
	}
	for _, b := range []byte("{}[]:,") {
		c[b] = kNone
	}
	c['"'] = kString
	return c
}()

// NewTokenLimitReader returns r bounded so that no JSON token or
// whitespace run is longer than max bytes (DefaultMaxTokenBytes when max
// ≤ 0); past it reads fail with an error wrapping ErrTooLarge that names
// the kind and the byte offset where it began.
func NewTokenLimitReader(r io.Reader, max int64) io.Reader {
	if max <= 0 {
		max = DefaultMaxTokenBytes
	}
	return &tokenLimitReader{r: r, max: max}
}

// Err is the bound's error if r is a token limit reader that refused its
// input, else nil.
func Err(r io.Reader) error {
	if t, ok := r.(*tokenLimitReader); ok {
		return t.err
	}
	return nil
}

func (t *tokenLimitReader) Read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	n, err := t.r.Read(p)
	if e := t.scan(p[:n]); e != nil {
		t.err = e
		return 0, e
	}
	return n, err
}

func (t *tokenLimitReader) scan(b []byte) error {
	base := t.off
	t.off += int64(len(b))
	for i := 0; i < len(b); {
		if t.kind == kString {
			// Most of a trace's bytes are inside strings: jump to the next
			// quote, then look for an escape before it.
			if t.esc {
				t.esc = false
				t.run++
				i++
			} else {
				seg := b[i:]
				// Short strings (keys, most values) end within a few
				// bytes: a plain loop beats two searches there.
				q, e := -1, -1
				for j := 0; j < len(seg) && j < 16; j++ {
					if c := seg[j]; c == '"' || c == '\\' {
						if c == '"' {
							q = j
						} else {
							q, e = len(seg), j
						}
						break
					}
				}
				if q < 0 {
					if q = bytes.IndexByte(seg, '"'); q < 0 {
						q = len(seg)
					}
					e = bytes.IndexByte(seg[:q], '\\')
				}
				switch {
				case e >= 0:
					t.run += int64(e) + 1
					i += e + 1
					t.esc = true
				case q < len(seg):
					t.run += int64(q) + 1
					i += q + 1
					if t.run > t.max {
						return t.tooLong()
					}
					t.kind = kNone
					continue
				default:
					t.run += int64(q)
					i = len(b)
				}
			}
			if t.run > t.max {
				return t.tooLong()
			}
			continue
		}
		// Outside strings: runs of one class (whitespace, a number or
		// literal) are measured a segment at a time; structural bytes end
		// them.
		for i < len(b) {
			c := class[b[i]]
			if c == kString {
				t.kind, t.start, t.run = kString, base+int64(i), 1
				i++
				break
			}
			if c != t.kind || c == kNone {
				t.kind, t.start, t.run = c, base+int64(i), 0
			}
			j := i + 1
			if c != kNone {
				for j < len(b) && class[b[j]] == c {
					j++
				}
			}
			t.run += int64(j - i)
			i = j
			if t.run > t.max {
				return t.tooLong()
			}
		}
	}
	return nil
}

func (t *tokenLimitReader) tooLong() error {
	kind := map[uint8]string{kSpace: "whitespace run", kString: "string", kScalar: "number or literal"}[t.kind]
	return fmt.Errorf("%w: a JSON %s longer than %d bytes at byte offset %d", ErrTooLarge, kind, t.max, t.start)
}
