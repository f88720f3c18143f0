package stagefile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/laggardv1"
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
// is inferred from the largest rank seen. Gzip-compressed input is
// detected by its magic bytes and decompressed.
func ReadJSONL(r io.Reader, sink Sink) (*signal.Job, error) {
	return read([]source{readerSource(r, JSONL)}, "", sink)
}

// jsonlDecoder reads a {"job": ...} header line, then one vector per line.
type jsonlDecoder struct {
	in      *stickyReader
	sc      *bufio.Scanner
	line    int
	partial bool // the last token had no newline: maybe cut by a read error
}

func newJSONLDecoder(in *stickyReader) *jsonlDecoder {
	d := &jsonlDecoder{in: in, sc: bufio.NewScanner(in)}
	d.sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	d.sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		d.partial = tok != nil && atEOF && bytes.IndexByte(data[:adv], '\n') < 0
		return adv, tok, err
	})
	return d
}

// nextLine returns the next non-blank line, or io.EOF.
func (d *jsonlDecoder) nextLine() ([]byte, error) {
	for d.sc.Scan() {
		d.line++
		if b := bytes.TrimSpace(d.sc.Bytes()); len(b) > 0 {
			return b, nil
		}
	}
	if err := d.sc.Err(); err != nil {
		return nil, &LineError{d.line + 1, err}
	}
	return nil, io.EOF
}

// fail reports err for the current line, unless the line is the tail a
// read error cut short: then the read error is the real cause.
func (d *jsonlDecoder) fail(err error) error {
	if d.partial && d.in.err != nil {
		err = d.in.err
	}
	return &LineError{d.line, err}
}

func (d *jsonlDecoder) header() (*signal.Job, int, error) {
	b, err := d.nextLine()
	if err == io.EOF {
		return nil, 0, errNoHeader
	}
	if err != nil {
		return nil, 0, err
	}
	var h header
	if err := strictUnmarshal(b, &h); err != nil {
		return nil, 0, d.fail(fmt.Errorf("header: %w", err))
	}
	if h.Job == nil {
		return nil, 0, d.fail(fmt.Errorf(`first line must be {"job": {...}}`))
	}
	job := h.Job
	if job.Schema.Version == "" && len(job.Schema.Stages) == 0 {
		job.Schema = stagevec.DefaultSchema()
	}
	// Validate all a header can settle on its own; without world_size the
	// rank descriptions are checked once it is inferred.
	chk := *job
	if chk.WorldSize == 0 {
		chk.WorldSize = signal.MaxWorldSize
	}
	if err := chk.Validate(); err != nil {
		return nil, 0, &LineError{d.line, err}
	}
	return job, d.line, nil
}

func (d *jsonlDecoder) next() (*stagevec.Vector, int, error) {
	b, err := d.nextLine()
	if err != nil {
		return nil, 0, err
	}
	v := new(stagevec.Vector)
	if err := strictUnmarshal(b, v); err != nil {
		return nil, 0, d.fail(err)
	}
	return v, d.line, nil
}

// strictUnmarshal decodes one line with the HTTP API's JSON rules
// (unknown fields, duplicate keys and trailing data are errors that name
// the field and quote no more than a short prefix of the input).
func strictUnmarshal(b []byte, v any) error { return laggardv1.UnmarshalStrict(b, v) }

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
