package stagefile

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Format is the encoding of a stage-matrix file.
type Format string

const (
	JSONL Format = "jsonl"
	CSV   Format = "csv"
)

// ParseFormat parses a user-given format name: jsonl (or json) or csv.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "jsonl", "json":
		return JSONL, nil
	case "csv":
		return CSV, nil
	}
	return "", fmt.Errorf("unknown format %q (want jsonl or csv)", signal.Clip(s))
}

// FormatOf returns the format a file name implies, ignoring a trailing
// .gz: x.csv and x.csv.gz are CSV, anything else (and "-") is JSONL.
func FormatOf(path string) Format {
	if strings.EqualFold(filepath.Ext(trimGz(path)), ".csv") {
		return CSV
	}
	return JSONL
}

// JobIDOf returns the job id a headerless (CSV) file gets by default: its
// base name without .gz and the format extension, made into a valid id;
// "stdin" for "-".
func JobIDOf(path string) string {
	if path == "-" {
		return "stdin"
	}
	base := trimGz(filepath.Base(path))
	base = strings.TrimSuffix(base, filepath.Ext(base))
	id := []byte(base)
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			id[i] = '-'
		}
	}
	s := strings.TrimLeft(string(id), "._-")
	if len(s) > 128 {
		s = s[:128]
	}
	if s == "" {
		return "job"
	}
	return s
}

func trimGz(path string) string {
	if strings.EqualFold(filepath.Ext(path), ".gz") {
		return path[:len(path)-3]
	}
	return path
}

// Options control ReadFiles.
type Options struct {
	// Format forces the format of every file; "" picks it per file with
	// FormatOf.
	Format Format
	// JobID names the job when no file has a JSONL header (CSV input);
	// "" means JobIDOf(paths[0]). A JSONL header's id always wins.
	JobID string
	// Stdin is read for the path "-"; nil means os.Stdin.
	Stdin io.Reader
}

// FileError names the input file an error was found in.
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

var errNoHeader = errors.New("empty stage matrix: no job header")

// ReadFiles reads the stage matrix of one job from one or more files and
// streams it into sink: sink.Job once with the merged job, then every
// vector, file by file in the order given. "-" reads Options.Stdin. Each
// file may be gzip-compressed (detected by its magic bytes, whatever its
// name).
//
// Several files are parts of one job, such as one file per rank: every
// JSONL part has its own {"job": ...} header, and the headers must agree
// on id, world_size, schema stage order, accumulation and run_id (an
// undeclared world_size or run_id agrees with any); otherwise the error
// names both files and the field. Rank descriptions, role-group schemas,
// probes and labels are merged (conflicting descriptions of one rank,
// group or label are errors). CSV parts have no header: their columns
// must give the same stage order, and the world size and accumulation are
// inferred from the largest rank and micro index unless a JSONL part
// declares them.
//
// Memory stays bounded by one line: when the world size or accumulation
// must be inferred, regular files are read twice rather than buffered;
// only a stream that cannot be reopened (stdin, a pipe) is buffered then.
// Every error names the file and, where there is one, the line
// (*FileError wrapping *LineError); an empty part is an error.
func ReadFiles(paths []string, opts Options, sink Sink) (*signal.Job, error) {
	if len(paths) == 0 {
		return nil, errors.New("no input files")
	}
	jobID := opts.JobID
	if jobID == "" {
		jobID = JobIDOf(paths[0])
	}
	stdin := false
	srcs := make([]source, len(paths))
	for i, p := range paths {
		f := FormatOf(p)
		if opts.Format != "" {
			var err error
			if f, err = ParseFormat(string(opts.Format)); err != nil {
				return nil, err
			}
		}
		if p == "-" {
			if stdin {
				return nil, errors.New(`"-" (stdin) given more than once`)
			}
			stdin = true
			in := opts.Stdin
			if in == nil {
				in = os.Stdin
			}
			srcs[i] = readerSource(in, f)
			srcs[i].name = "stdin"
			continue
		}
		srcs[i] = fileSource(p, f)
	}
	return read(srcs, jobID, sink)
}

// source is one input part. open returns its raw (maybe compressed)
// stream and whether it can be opened again for another pass.
type source struct {
	name   string // for errors; "" for a caller's reader, which names itself
	format Format
	open   func() (rc io.ReadCloser, again bool, err error)
}

func readerSource(r io.Reader, f Format) source {
	used := false
	return source{format: f, open: func() (io.ReadCloser, bool, error) {
		if used {
			return nil, false, errors.New("internal: reader opened twice")
		}
		used = true
		return io.NopCloser(r), false, nil
	}}
}

func fileSource(path string, f Format) source {
	return source{name: path, format: f, open: func() (io.ReadCloser, bool, error) {
		fh, err := os.Open(path)
		if err != nil {
			return nil, false, err // *PathError names the file
		}
		st, err := fh.Stat()
		if err != nil {
			fh.Close()
			return nil, false, err
		}
		if st.IsDir() {
			fh.Close()
			return nil, false, fmt.Errorf("%s: is a directory, not a stage-matrix file", path)
		}
		// Only a regular file reads the same twice: /dev/fd/N from
		// `<(zcat …)` is a pipe.
		return fh, st.Mode().IsRegular(), nil
	}}
}

// decoder reads one part: its header, then vectors until io.EOF.
type decoder interface {
	header() (job *signal.Job, line int, err error)
	next() (v *stagevec.Vector, line int, err error)
}

type lineVec struct {
	v    *stagevec.Vector
	line int
}

type part struct {
	src   source
	job   *signal.Job // as its header declares it
	line  int         // of the header
	again bool        // can be reopened
	rc    io.Closer   // open stream, positioned after the header, or nil
	dec   decoder
	buf   []lineVec // vectors of a stream that cannot be reopened, read while inferring
	done  bool      // buf holds every vector
}

func (p *part) wrap(err error) error {
	if err == nil || p.src.name == "" {
		return err
	}
	return &FileError{p.src.name, err}
}

// open opens the part and reads its header.
func (p *part) open() error {
	rc, again, err := p.src.open()
	if err != nil {
		return err
	}
	in, err := decompress(rc)
	if err != nil {
		rc.Close()
		return p.wrap(err)
	}
	var dec decoder
	if p.src.format == CSV {
		dec = newCSVDecoder(in)
	} else {
		dec = newJSONLDecoder(in)
	}
	job, line, err := dec.header()
	if err != nil {
		rc.Close()
		return p.wrap(err)
	}
	p.job, p.line, p.again, p.rc, p.dec = job, line, again, rc, dec
	return nil
}

func (p *part) close() {
	if p.rc != nil {
		p.rc.Close()
		p.rc, p.dec = nil, nil
	}
}

// reopen positions the part at its first vector, reopening it if it was
// closed.
func (p *part) reopen() error {
	if p.dec != nil {
		return nil
	}
	if !p.again {
		return p.wrap(errors.New("internal: stream read twice"))
	}
	return p.open()
}

// each calls fn with every vector of the part, then closes it.
func (p *part) each(fn func(v *stagevec.Vector, line int) error) error {
	if p.done {
		for _, lv := range p.buf {
			if err := fn(lv.v, lv.line); err != nil {
				return p.wrap(err)
			}
		}
		p.buf = nil
		return nil
	}
	if err := p.reopen(); err != nil {
		return err
	}
	defer p.close()
	for {
		v, line, err := p.dec.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return p.wrap(err)
		}
		if err := fn(v, line); err != nil {
			return p.wrap(err)
		}
	}
}

// read merges the parts' headers, infers what they leave open, hands the
// job to sink and streams every part's vectors into it.
func read(srcs []source, jobID string, sink Sink) (*signal.Job, error) {
	parts := make([]*part, len(srcs))
	defer func() {
		for _, p := range parts {
			if p != nil {
				p.close()
			}
		}
	}()
	for i, src := range srcs {
		p := &part{src: src}
		if err := p.open(); err != nil {
			return nil, err
		}
		parts[i] = p
		// Keep few files open at once: a job may have thousands of
		// per-rank parts. The first stays open for a single-file read.
		if p.again && i > 0 {
			p.close()
		}
	}
	job, declared, err := merge(parts, jobID)
	if err != nil {
		return nil, err
	}
	if !declared.world || !declared.acc {
		if err := infer(parts, job, declared); err != nil {
			return nil, err
		}
	}
	if err := job.Validate(); err != nil {
		if len(parts) == 1 {
			return nil, parts[0].wrap(err)
		}
		return nil, fmt.Errorf("merged job header: %w", err)
	}
	if err := sink.job(job); err != nil {
		return nil, err
	}
	for _, p := range parts {
		err := p.each(func(v *stagevec.Vector, line int) error {
			if err := v.Validate(job); err != nil {
				return &LineError{line, err}
			}
			if err := sink.vector(v); err != nil {
				return &LineError{line, err}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return job, nil
}

// infer sets the world size (largest rank + 1) and accumulation (largest
// micro + 1) the headers left open, from a first pass over the vectors.
func infer(parts []*part, job *signal.Job, declared declaredFields) error {
	maxRank, maxMicro := -1, 0
	for _, p := range parts {
		keep := !p.again
		err := p.each(func(v *stagevec.Vector, line int) error {
			if v.Rank < 0 || v.Rank >= signal.MaxWorldSize {
				return &LineError{line, signal.FieldErrorf("rank", "out of range: %d", v.Rank)}
			}
			if !declared.acc && (v.Micro < 0 || v.Micro >= signal.MaxAccumulation) {
				return &LineError{line, signal.FieldErrorf("micro", "must be in [0, %d), got %d", signal.MaxAccumulation, v.Micro)}
			}
			maxRank, maxMicro = max(maxRank, v.Rank), max(maxMicro, v.Micro)
			if keep {
				p.buf = append(p.buf, lineVec{v, line})
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.done = keep
	}
	if !declared.world {
		job.WorldSize = max(maxRank+1, 1)
	}
	if !declared.acc {
		job.Accumulation = maxMicro + 1
		if job.Accumulation == 1 {
			job.Accumulation = 0
		}
	}
	return nil
}

// declaredFields says which job fields some header declared; the rest are
// inferred from the vectors.
type declaredFields struct{ world, acc bool }

// merge combines the parts' headers into one job, checking that they
// describe the same job.
func merge(parts []*part, jobID string) (*signal.Job, declaredFields, error) {
	job := &signal.Job{ID: jobID}
	var d declaredFields
	// from* name the part a field was first taken from, for errors.
	var schemaFrom, idFrom, worldFrom, accFrom, runFrom *part
	rankFrom := map[int]*part{}
	groupFrom := map[string]*part{}
	labelFrom := map[string]*part{}
	ranks := map[int]signal.Rank{}
	for _, p := range parts {
		h := p.job
		conflict := func(field string, got, want any, from *part) error {
			return p.wrap(&LineError{p.line, signal.FieldErrorf(field, "%s here but %s in %s: parts of one job must agree",
				clipLong(fmt.Sprint(got)), clipLong(fmt.Sprint(want)), partName(from))})
		}
		if schemaFrom == nil {
			job.Schema, schemaFrom = h.Schema.Clone(), p
		} else if h.Schema.OrderHash() != job.Schema.OrderHash() {
			return nil, d, conflict("schema", schemaString(h.Schema), schemaString(job.Schema), schemaFrom)
		} else {
			for _, pr := range h.Schema.Probes {
				if !slices.Contains(job.Schema.Probes, pr) {
					job.Schema.Probes = append(job.Schema.Probes, pr)
				}
			}
		}
		if p.src.format == CSV {
			continue // a CSV part declares nothing but its columns
		}
		switch {
		case idFrom == nil:
			job.ID, idFrom = h.ID, p
		case h.ID != job.ID:
			return nil, d, conflict("id", fmt.Sprintf("%q", signal.Clip(h.ID)), fmt.Sprintf("%q", signal.Clip(job.ID)), idFrom)
		}
		if h.WorldSize > 0 {
			switch {
			case worldFrom == nil:
				job.WorldSize, worldFrom, d.world = h.WorldSize, p, true
			case h.WorldSize != job.WorldSize:
				return nil, d, conflict("world_size", h.WorldSize, job.WorldSize, worldFrom)
			}
		}
		switch {
		case accFrom == nil:
			job.Accumulation, accFrom, d.acc = h.Accumulation, p, true
		case max(h.Accumulation, 1) != max(job.Accumulation, 1): // 0 and 1 both mean none
			return nil, d, conflict("accumulation", h.Accumulation, job.Accumulation, accFrom)
		}
		if h.RunID != "" {
			switch {
			case runFrom == nil:
				job.RunID, runFrom = h.RunID, p
			case h.RunID != job.RunID:
				return nil, d, conflict("run_id", fmt.Sprintf("%q", signal.Clip(h.RunID)), fmt.Sprintf("%q", signal.Clip(job.RunID)), runFrom)
			}
		}
		if job.Name == "" {
			job.Name = h.Name
		}
		if job.Created.IsZero() {
			job.Created = h.Created
		}
		for _, r := range h.Ranks {
			if prev, ok := ranks[r.Rank]; !ok {
				ranks[r.Rank], rankFrom[r.Rank] = r, p
			} else if !reflect.DeepEqual(prev, r) {
				return nil, d, conflict(fmt.Sprintf("ranks[rank %d]", r.Rank), rankString(r), rankString(prev), rankFrom[r.Rank])
			}
		}
		for _, g := range h.Groups {
			i := slices.IndexFunc(job.Groups, func(x signal.GroupSchema) bool { return x.Group == g.Group })
			if i < 0 {
				job.Groups, groupFrom[g.Group] = append(job.Groups, g), p
			} else if job.Groups[i].Schema.OrderHash() != g.Schema.OrderHash() {
				return nil, d, conflict(fmt.Sprintf("groups[%s]", signal.Clip(g.Group)), schemaString(g.Schema), schemaString(job.Groups[i].Schema), groupFrom[g.Group])
			}
		}
		for k, v := range h.Labels {
			if job.Labels == nil {
				job.Labels = map[string]string{}
			}
			if prev, ok := job.Labels[k]; !ok {
				job.Labels[k], labelFrom[k] = v, p
			} else if prev != v {
				return nil, d, conflict(fmt.Sprintf("labels[%s]", signal.Clip(k)), fmt.Sprintf("%q", signal.Clip(v)), fmt.Sprintf("%q", signal.Clip(prev)), labelFrom[k])
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ranks)) { // Job.RankInfo searches by rank
		job.Ranks = append(job.Ranks, ranks[k])
	}
	return job, d, nil
}

func partName(p *part) string {
	if p.src.name == "" {
		return "another part"
	}
	return p.src.name
}

func schemaString(s signal.Schema) string {
	return fmt.Sprintf("%s [%s]", s.Version, strings.Join(s.Stages, ", "))
}

func rankString(r signal.Rank) string {
	role := r.Role
	role.Name = signal.Clip(role.Name)
	return fmt.Sprintf("{host %q, local_rank %d, role %+v}", signal.Clip(r.Host), r.LocalRank, role)
}

// clipLong bounds a composite value (a schema's stage list) quoted in a
// conflict error; single values are clipped shorter with signal.Clip.
func clipLong(s string) string {
	const n = 512
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "…"
}
