package signal

import "fmt"

// FieldError is a validation failure that names the offending field, so
// HTTP handlers and decoders can say exactly what was wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// FieldErrorf returns a *FieldError for field with a formatted message.
func FieldErrorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ConflictError is a request that contradicts what is already registered
// (another run under the same job id, another ordered stage list for a
// role group); the HTTP API answers 409. It names the field like
// FieldError.
type ConflictError struct {
	Field string
	Msg   string
	// Indexes, when set, are every item of the batch refused for the
	// same reason (Field names the first): a client drops them all and
	// re-sends the rest at once instead of learning one per answer.
	Indexes []int
}

func (e *ConflictError) Error() string { return e.Field + ": " + e.Msg }
