package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/store"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", "[flags] FILE...  (JSONL or CSV stage matrices, .gz too; several per-rank files are merged; - for stdin)", stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON (schema "+analysis.ReportSchema+")")
	format := fs.String("format", "", "input format: jsonl or csv (default: from the file name)")
	jobID := fs.String("job", "", "job id for CSV input (default: the file name)")
	// Window and reference flags share the API's parser (analysis.ParseRequest),
	// so the CLI and the server accept and reject the same values.
	q := url.Values{}
	for _, f := range []struct{ flag, param, usage string }{
		{"from", analysis.ParamFrom, "first step of the window, inclusive (default: the steady steps since the latest change point)"},
		{"to", analysis.ParamTo, "last step of the window, inclusive (default: the last stored step)"},
		{"last", analysis.ParamLast, "analyze the last N stored steps instead"},
		{"ref-from", analysis.ParamRefFrom, "first step of the reference window to compare with (default: the steady steps before the latest change point)"},
		{"ref-to", analysis.ParamRefTo, "last step of the reference window"},
		{"tau", analysis.ParamTau, "routing candidate cumulative share threshold τ in (0, 1] (default 0.8)"},
		{"model-fit", analysis.ParamModelFit, "true/false: whether the synchronization-wait model fits (App. C indicator m; default: the job's sync_model label)"},
		{"group", analysis.ParamGroup, "analyze only this role group"},
	} {
		fs.Func(f.flag, f.usage, func(v string) error {
			q.Set(f.param, v)
			return nil
		})
	}
	noRef := fs.Bool("no-reference", false, "do not compare with the steady steps before the latest change point")
	compare := fs.String("compare", "", "a second stage matrix (run B) to compare with (its default window)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	if *noRef {
		q.Set(analysis.ParamNoRef, "true")
	}
	paths := fs.Args()
	src, job, err := loadMatrix(paths, *format, *jobID)
	if err != nil {
		return err
	}
	var source analysis.Source = src
	if *compare != "" {
		other, ojob, err := loadMatrix([]string{*compare}, *format, "")
		if err != nil {
			return err
		}
		if ojob.ID == job.ID {
			return fmt.Errorf("-compare %s: both runs are job %q; pass -job to name one, or export them under different ids", *compare, job.ID)
		}
		source = pairSource{src, other}
		q.Set(analysis.ParamCompare, ojob.ID)
	}
	req, err := analysis.ParseRequest(job.ID, q)
	if err != nil {
		return flagError(err)
	}
	rep, err := analysis.New(source, analysis.Limits{}).Run(ctx, req)
	if err != nil {
		return flagError(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return render.Text(stdout, rep)
}

// flagError renames a request parameter in a FieldError to its flag.
func flagError(err error) error {
	var fe *signal.FieldError
	if errors.As(err, &fe) {
		flag := "-" + strings.ReplaceAll(fe.Field, "_", "-")
		return fmt.Errorf("%s: %s", flag, fe.Msg)
	}
	return err
}

// loadMatrix reads one job's stage matrix from one or more files into
// memory (per-rank parts are merged; gzip is read transparently).
func loadMatrix(paths []string, format, jobID string) (*analysis.MemSource, *signal.Job, error) {
	var f stagefile.Format
	if format != "" {
		var err error
		if f, err = stagefile.ParseFormat(format); err != nil {
			return nil, nil, fmt.Errorf("-format: %w", err)
		}
	}
	var src *analysis.MemSource
	job, err := stagefile.ReadFiles(paths, stagefile.Options{Format: f, JobID: jobID}, stagefile.Sink{
		Job: func(j *signal.Job) error {
			src = analysis.NewMemSource(j)
			return nil
		},
		Vector: func(v *stagevec.Vector) error { return src.Add(v) },
	})
	if err != nil {
		return nil, nil, err
	}
	if src == nil {
		src = analysis.NewMemSource(job)
	}
	src.Seal()
	return src, job, nil
}

// pairSource serves two in-memory jobs (run A and run B).
type pairSource struct{ a, b *analysis.MemSource }

func (p pairSource) pick(id string) *analysis.MemSource {
	if j, err := p.b.Job(id); err == nil && j != nil {
		return p.b
	}
	return p.a
}

func (p pairSource) Job(id string) (*signal.Job, error) { return p.pick(id).Job(id) }
func (p pairSource) Stats(id string) (store.JobStats, error) {
	return p.pick(id).Stats(id)
}
func (p pairSource) Scan(id string, from, to int64, fn func(*stagevec.Vector) error) error {
	return p.pick(id).Scan(id, from, to, fn)
}
func (p pairSource) LastSteps(id string, n int) (int64, int64, bool, error) {
	return p.pick(id).LastSteps(id, n)
}
