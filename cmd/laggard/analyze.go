package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
	"github.com/laggard-dev/laggard/internal/wire/stagefile"
)

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", "[flags] FILE  (JSONL or CSV stage matrix; - for stdin)", stderr)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	format := fs.String("format", "", "input format: jsonl or csv (default: from the file extension)")
	jobID := fs.String("job", "", "job id for CSV input (default: the file name)")
	from := fs.Int64("from", 0, "first step of the window (inclusive; 0 = first in file)")
	to := fs.Int64("to", 0, "last step of the window (inclusive; 0 = last in file)")
	last := fs.Int("last", 0, "analyze only the last N steps in the file")
	cfg := stagefrontier.DefaultConfig()
	fs.Float64Var(&cfg.CandidateThreshold, "tau", cfg.CandidateThreshold, "routing candidate cumulative share threshold τ")
	modelFit := fs.String("model-fit", "", "true/false: whether the synchronization-wait model fits this workload (App. C indicator m; default: from the job's sync_model label)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	fit, err := parseOptionalBool(*modelFit)
	if err != nil {
		return fmt.Errorf("-model-fit: %w", err)
	}
	if cfg.CandidateThreshold <= 0 || cfg.CandidateThreshold > 1 {
		return fmt.Errorf("-tau must be in (0, 1], got %v", cfg.CandidateThreshold)
	}
	path := fs.Arg(0)
	in := io.Reader(os.Stdin)
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	if *format == "" {
		*format = "jsonl"
		if strings.EqualFold(filepath.Ext(path), ".csv") {
			*format = "csv"
		}
	}
	if *jobID == "" {
		*jobID = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if path == "-" {
			*jobID = "stdin"
		}
	}
	rep, err := analyzeMatrix(in, *format, *jobID, *from, *to, *last, cfg, fit)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return render.Text(stdout, rep)
}

// analyzeMatrix decodes a stage matrix and runs the frontier engine on the
// selected window. With last > 0 the vectors are buffered to find the
// window; otherwise they stream straight into the assembler.
// fit overrides the model-fit indicator the job's labels imply.
func analyzeMatrix(in io.Reader, format, jobID string, from, to int64, last int, cfg stagefrontier.Config, fit *bool) (*stagefrontier.Report, error) {
	if to == 0 {
		to = math.MaxInt64
	}
	var asm *stagefrontier.Assembler
	var buf []stagevec.Vector
	sink := stagefile.Sink{
		Job: func(j *signal.Job) error {
			if last == 0 {
				asm = stagefrontier.NewAssembler(j, stagefrontier.AssembleOptions{FromStep: from, ToStep: to})
			}
			return nil
		},
		Vector: func(v *stagevec.Vector) error {
			if asm != nil {
				return asm.Add(v)
			}
			buf = append(buf, *v)
			return nil
		},
	}
	var job *signal.Job
	var err error
	switch format {
	case "jsonl", "json":
		job, err = stagefile.ReadJSONL(in, sink)
	case "csv":
		job, err = stagefile.ReadCSV(in, jobID, sink)
	default:
		return nil, fmt.Errorf("unknown -format %q (want jsonl or csv)", format)
	}
	if err != nil {
		return nil, err
	}
	if asm == nil {
		from, to = lastSteps(buf, last)
		asm = stagefrontier.NewAssembler(job, stagefrontier.AssembleOptions{FromStep: from, ToStep: to})
		for i := range buf {
			if err := asm.Add(&buf[i]); err != nil {
				return nil, err
			}
		}
	}
	w, err := asm.Finish()
	if err != nil {
		return nil, err
	}
	cfg.ModelFit = stagefrontier.ModelFitFromJob(job)
	if fit != nil {
		cfg.ModelFit = *fit
	}
	return stagefrontier.Analyze(w, cfg)
}

// lastSteps returns the inclusive step range covering the last n distinct
// steps present in vs.
func lastSteps(vs []stagevec.Vector, n int) (from, to int64) {
	seen := map[int64]struct{}{}
	for _, v := range vs {
		seen[v.Step] = struct{}{}
	}
	steps := make([]int64, 0, len(seen))
	for s := range seen {
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return 0, 0
	}
	slices.Sort(steps)
	return steps[max(0, len(steps)-n)], steps[len(steps)-1]
}

func parseOptionalBool(s string) (*bool, error) {
	if s == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, fmt.Errorf("want true or false, got %q", s)
	}
	return &b, nil
}
