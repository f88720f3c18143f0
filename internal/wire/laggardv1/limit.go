package laggardv1

import (
	"errors"
	"fmt"
	"io"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/wire/bound"
)

// ErrTooLarge is wrapped by every decoder error caused by a body larger
// than the caller's limit, or a token longer than its bound
// (bound.NewTokenLimitReader); servers map it to 413.
var ErrTooLarge = bound.ErrTooLarge

// DefaultLimit is used when a caller passes limit <= 0.
const DefaultLimit = 64 << 20

// limitReader fails with ErrTooLarge once more than n bytes are read, so
// an oversized body is an error rather than a silently truncated one.
type limitReader struct {
	r     io.Reader
	n     int64 // bytes still allowed
	limit int64
	read  int64
}

func newLimitReader(r io.Reader, limit int64) *limitReader {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &limitReader{r: r, n: limit, limit: limit}
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, l.tooLarge()
	}
	// Read one byte past the limit so an exactly-full body is not an error.
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	l.read += int64(n)
	if l.n < 0 {
		return n, l.tooLarge()
	}
	return n, err
}

func (l *limitReader) tooLarge() error {
	return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, l.limit)
}

// prefix puts path in front of a FieldError's field; other errors become a
// FieldError on path itself.
func prefix(path string, err error) error {
	if err == nil || errors.Is(err, ErrTooLarge) {
		return err
	}
	join := func(f string) string {
		switch {
		case f == "":
			f = path
		case path != "" && f[0] == '[':
			f = path + f
		case path != "":
			f = path + "." + f
		}
		if f == "" {
			f = "body"
		}
		return f
	}
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		return &signal.FieldError{Field: join(fe.Field), Msg: fe.Msg}
	}
	var ce *signal.ConflictError // keeps its kind: the API answers 409
	if errors.As(err, &ce) {
		return &signal.ConflictError{Field: join(ce.Field), Msg: ce.Msg}
	}
	if path == "" {
		path = "body"
	}
	return &signal.FieldError{Field: path, Msg: err.Error()}
}
