package stagefile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// ReadCSV decodes a CSV stage matrix with header
// step,rank,micro,<stage...>,wall_ms[,data_lead][,dropped]. Stage columns
// are taken in header order; if the residual step.other_cpu_wall column is
// absent it is derived from wall_ms. The world size is inferred from the
// largest rank, so rows are buffered before sink sees them (ReadFiles
// rescans a file instead). Gzip-compressed input is detected by its magic
// bytes and decompressed.
func ReadCSV(r io.Reader, jobID string, sink Sink) (*signal.Job, error) {
	return read([]source{readerSource(r, CSV)}, jobID, sink)
}

type csvDecoder struct {
	in   *stickyReader
	cr   *csv.Reader
	cols *csvColumns
	last int // line of the last record read
}

func newCSVDecoder(in *stickyReader) *csvDecoder {
	cr := csv.NewReader(in)
	cr.ReuseRecord = true
	cr.Comment = '#'
	return &csvDecoder{in: in, cr: cr}
}

// header reads the column header; the job it returns has only a schema:
// CSV carries no id, world size or accumulation.
func (d *csvDecoder) header() (*signal.Job, int, error) {
	head, err := d.cr.Read()
	if err == io.EOF {
		return nil, 0, errors.New("empty stage matrix: no CSV header row")
	}
	if err != nil {
		return nil, 0, d.fail(1, fmt.Errorf("reading header: %w", err))
	}
	line, _ := d.cr.FieldPos(0)
	d.last = line
	if d.cols, err = parseHeader(head); err != nil {
		return nil, 0, &LineError{line, err}
	}
	job := &signal.Job{Schema: signal.Schema{Version: stagevec.DefaultSchemaVersion, Stages: d.cols.stages}}
	if err := job.Schema.Validate(); err != nil {
		return nil, 0, &LineError{line, err}
	}
	return job, line, nil
}

func (d *csvDecoder) next() (*stagevec.Vector, int, error) {
	rec, err := d.cr.Read()
	if err == io.EOF {
		return nil, 0, io.EOF
	}
	if err != nil {
		// csv.ParseError already names its line; FieldPos is only
		// valid after a successful Read.
		return nil, 0, d.fail(0, err)
	}
	line, _ := d.cr.FieldPos(0)
	d.last = line
	v, err := d.cols.parse(rec)
	if err != nil {
		return nil, 0, d.fail(line, err)
	}
	return &v, line, nil
}

// fail prefers a read error (a truncated gzip stream) over the parse error
// it caused.
func (d *csvDecoder) fail(line int, err error) error {
	if d.in.err != nil {
		err = d.in.err
		if line == 0 {
			line = d.last + 1
		}
	}
	if line == 0 {
		return err
	}
	return &LineError{line, err}
}

type csvColumns struct {
	stages                              []string
	stageCol                            []int // column of each schema stage, -1 for a derived residual
	step, rank, micro, wall, lead, drop int
	width                               int
}

func parseHeader(head []string) (*csvColumns, error) {
	c := &csvColumns{step: -1, rank: -1, micro: -1, wall: -1, lead: -1, drop: -1, width: len(head)}
	for i, h := range head {
		h = strings.TrimSpace(h)
		switch h {
		case "step":
			c.step = i
		case "rank":
			c.rank = i
		case "micro":
			c.micro = i
		case "wall_ms":
			c.wall = i
		case "data_lead":
			c.lead = i
		case "dropped":
			c.drop = i
		default:
			c.stages = append(c.stages, h)
			c.stageCol = append(c.stageCol, i)
		}
	}
	for name, col := range map[string]int{"step": c.step, "rank": c.rank, "wall_ms": c.wall} {
		if col < 0 {
			return nil, &signal.FieldError{Field: name, Msg: "required column missing from header"}
		}
	}
	if len(c.stages) == 0 || c.stages[len(c.stages)-1] != stagevec.StageOther {
		c.stages = append(c.stages, stagevec.StageOther)
		c.stageCol = append(c.stageCol, -1)
	}
	return c, nil
}

func (c *csvColumns) parse(rec []string) (stagevec.Vector, error) {
	var v stagevec.Vector
	if len(rec) != c.width {
		return v, fmt.Errorf("want %d columns, got %d", c.width, len(rec))
	}
	var err error
	geti := func(col int, name string) int64 {
		if col < 0 || err != nil {
			return 0
		}
		x, e := strconv.ParseInt(strings.TrimSpace(rec[col]), 10, 64)
		if e != nil {
			err = &signal.FieldError{Field: name, Msg: fmt.Sprintf("not an integer: %q", signal.Clip(rec[col]))}
		}
		return x
	}
	getf := func(col int, name string) float64 {
		if err != nil {
			return 0
		}
		x, e := strconv.ParseFloat(strings.TrimSpace(rec[col]), 64)
		if e != nil {
			err = &signal.FieldError{Field: name, Msg: fmt.Sprintf("not a number: %q", signal.Clip(rec[col]))}
		}
		return x
	}
	v.Step = geti(c.step, "step")
	v.Rank = int(geti(c.rank, "rank"))
	v.Micro = int(geti(c.micro, "micro"))
	v.DataLead = int(geti(c.lead, "data_lead"))
	v.Dropped = geti(c.drop, "dropped")
	v.WallMS = getf(c.wall, "wall_ms")
	n := len(c.stages)
	if c.stageCol[n-1] < 0 {
		n-- // residual derived from wall_ms
	}
	v.Durations = make([]float64, n)
	for i := 0; i < n; i++ {
		v.Durations[i] = getf(c.stageCol[i], c.stages[i])
	}
	return v, err
}
