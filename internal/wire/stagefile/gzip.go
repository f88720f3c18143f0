package stagefile

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// CorruptError is a compressed input that could not be decompressed: a
// truncated download, a partial copy, or not gzip after all.
type CorruptError struct{ Err error }

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt or truncated gzip stream: %v", e.Err)
}
func (e *CorruptError) Unwrap() error { return e.Err }

// decompress returns r's content, gunzipped when it starts with the gzip
// magic bytes. The name is not trusted: `cat x.gz | laggard analyze -` has
// none, and x.gz may already have been decompressed by a tool.
func decompress(r io.Reader) (*stickyReader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(2)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(magic) < 2 || magic[0] != 0x1f || magic[1] != 0x8b {
		return &stickyReader{r: br}, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		return nil, &CorruptError{err}
	}
	return &stickyReader{r: zr, gz: true}, nil
}

// stickyReader remembers the first read error, so a decoder can tell a
// line cut short by a truncated stream from a malformed one and report
// the truncation instead.
type stickyReader struct {
	r   io.Reader
	gz  bool
	err error
}

func (s *stickyReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		if s.gz && corrupt(err) {
			err = &CorruptError{err}
		}
		if s.err == nil {
			s.err = err
		}
	}
	return n, err
}

// corrupt reports whether err comes from the compressed data itself rather
// than from reading the file.
func corrupt(err error) bool {
	var fe flate.CorruptInputError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum) ||
		errors.Is(err, gzip.ErrHeader) || errors.As(err, &fe)
}
