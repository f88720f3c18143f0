package stagefile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// MaxLineBytes bounds one JSONL line so a corrupt file cannot exhaust memory.
const MaxLineBytes = 16 << 20

// LineError names the 1-based line an error was found on.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

type header struct {
	Job *signal.Job `json:"job"`
}

// Sink receives a decoded matrix: Job once, before any vector, then every
// vector (which the callee may keep). Either may be nil.
type Sink struct {
	Job    func(*signal.Job) error
	Vector func(*stagevec.Vector) error
}

func (s Sink) job(j *signal.Job) error {
	if s.Job == nil {
		return nil
	}
	return s.Job(j)
}

func (s Sink) vector(v *stagevec.Vector) error {
	if s.Vector == nil {
		return nil
	}
	return s.Vector(v)
}

// ReadJSONL decodes a JSONL stage matrix into sink and returns the job.
// The header's job is validated and handed to sink.Job before any vector.
// If the header omits world_size, vectors are buffered and the world size
// is inferred from the largest rank seen.
func ReadJSONL(r io.Reader, sink Sink) (*signal.Job, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	line := 0
	var job *signal.Job
	var pending []stagevec.Vector // only when world_size must be inferred
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if job == nil {
			var h header
			if err := strictUnmarshal(b, &h); err != nil {
				return nil, &LineError{line, fmt.Errorf("header: %w", err)}
			}
			if h.Job == nil {
				return nil, &LineError{line, fmt.Errorf(`first line must be {"job": {...}}`)}
			}
			job = h.Job
			if job.Schema.Version == "" && len(job.Schema.Stages) == 0 {
				job.Schema = stagevec.DefaultSchema()
			}
			if job.WorldSize > 0 {
				if err := job.Validate(); err != nil {
					return nil, &LineError{line, err}
				}
				if err := sink.job(job); err != nil {
					return nil, err
				}
			} else if err := job.Schema.Validate(); err != nil {
				return nil, &LineError{line, err}
			}
			continue
		}
		var v stagevec.Vector
		if err := strictUnmarshal(b, &v); err != nil {
			return nil, &LineError{line, err}
		}
		if job.WorldSize == 0 {
			if v.Rank < 0 || v.Rank >= signal.MaxWorldSize {
				return nil, &LineError{line, &signal.FieldError{Field: "rank", Msg: fmt.Sprintf("out of range: %d", v.Rank)}}
			}
			pending = append(pending, v)
			continue
		}
		if err := v.Validate(job); err != nil {
			return nil, &LineError{line, err}
		}
		if err := sink.vector(&v); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &LineError{line + 1, err}
	}
	if job == nil {
		return nil, fmt.Errorf("empty stage matrix: no job header")
	}
	if job.WorldSize == 0 {
		if err := flushInferred(job, pending, sink); err != nil {
			return nil, err
		}
	}
	return job, nil
}

// flushInferred sets the world size from the vectors seen, validates them
// and hands them to fn.
func flushInferred(job *signal.Job, vs []stagevec.Vector, sink Sink) error {
	for _, v := range vs {
		job.WorldSize = max(job.WorldSize, v.Rank+1)
	}
	if job.WorldSize == 0 {
		job.WorldSize = 1
	}
	if err := job.Validate(); err != nil {
		return err
	}
	if err := sink.job(job); err != nil {
		return err
	}
	for i := range vs {
		if err := vs[i].Validate(job); err != nil {
			return fmt.Errorf("vector %d (step %d rank %d): %w", i, vs[i].Step, vs[i].Rank, err)
		}
		if err := sink.vector(&vs[i]); err != nil {
			return err
		}
	}
	return nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after JSON object")
	}
	return nil
}

// Writer writes a JSONL stage matrix: the job header on creation, then
// one line per vector. It buffers; call Flush at the end.
type Writer struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

// NewWriter writes job's header line to w and returns the writer for the
// vectors.
func NewWriter(w io.Writer, job *signal.Job) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	jw := &Writer{bw: bw, enc: json.NewEncoder(bw)}
	if err := jw.enc.Encode(header{Job: job}); err != nil {
		return nil, err
	}
	return jw, nil
}

// Write appends one vector line.
func (w *Writer) Write(v *stagevec.Vector) error { return w.enc.Encode(v) }

// Flush writes any buffered lines.
func (w *Writer) Flush() error { return w.bw.Flush() }
