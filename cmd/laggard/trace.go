package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/optrace"
	"github.com/laggard-dev/laggard/internal/wire/kineto"
)

// Progress on long imports: files above progressMinBytes, a line every
// progressEvery (package variables so tests can shrink them).
var (
	progressMinBytes int64 = 64 << 20
	progressEvery          = time.Second
)

// defaultMaxTraceEvents bounds one rank's events in memory (~150 B per
// optrace.Event, ~370 B per event of peak RSS measured with append slack
// and the engine's work: 2.2 M events, 810 MB): a runaway file fails with
// a message naming the flag instead of exhausting memory. The server's limit is 2,000,000;
// the CLI allows more because the user chose the files.
const defaultMaxTraceEvents = 4_000_000

// maxTraceRank bounds a rank read from a file name or distributedInfo.
const maxTraceRank = 1 << 20

// runTrace runs KAIR (§III-B stages 1–3) on per-rank Kineto traces.
func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace", "[flags] FILE...  (one Kineto/Chrome trace per rank, .json or .json.gz)", stderr)
	def := analysis.DefaultKairRunConfig()
	asJSON := fs.Bool("json", false, "print the report as JSON (kair.TraceReport)")
	steps := fs.String("steps", "", "analyse only these training steps, comma-separated (default: the slowest -max-steps steps every rank has)")
	maxSteps := fs.Int("max-steps", def.MaxSteps, "analyse at most this many steps (the slowest by step span)")
	align := fs.String("align", "auto", "clock alignment: auto (collectives when the traces allow), collectives, or none")
	windows := fs.Int("windows", def.Rhythm.Windows, "Stage 1: completion-count windows over the common span")
	maxEvents := fs.Int("max-events", defaultMaxTraceEvents, "the most events read per rank (memory bound)")
	progress := fs.Bool("progress", false, "report import progress on stderr for files over 64 MiB even when stderr is not a terminal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errUsage
	}
	cfg := def
	var err error
	if cfg.Steps, err = parseStepList(*steps); err != nil {
		return usageError(stderr, "trace", err)
	}
	if cfg.Align, err = parseAlign(*align); err != nil {
		return usageError(stderr, "trace", err)
	}
	if err := checkRange("max-steps", *maxSteps, 1, 1024); err != nil {
		return usageError(stderr, "trace", err)
	}
	if err := checkRange("windows", *windows, 1, 1<<16); err != nil {
		return usageError(stderr, "trace", err)
	}
	if err := checkRange("max-events", *maxEvents, 1, 1<<30); err != nil {
		return usageError(stderr, "trace", err)
	}
	cfg.MaxSteps, cfg.Rhythm.Windows = *maxSteps, *windows
	showProgress := *progress
	if f, ok := stderr.(*os.File); ok && isTerminal(f) {
		showProgress = true
	}
	traces, err := loadTraces(ctx, fs.Args(), traceLoad{maxEvents: *maxEvents, progress: showProgress}, stderr)
	if err != nil {
		var ae *argError
		if errors.As(err, &ae) {
			return usageError(stderr, "trace", err)
		}
		return err
	}
	rep, err := analysis.RunKair(traces, nil, cfg)
	if err != nil {
		return runFlagError(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return render.KAIR(stdout, rep)
}

// runFlagError names the flag behind a kair.Run configuration error
// ("steps[0]: step 99 is not captured by every rank" → "-steps: …").
func runFlagError(err error) error {
	var fe *signal.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	for _, m := range []struct{ field, flag string }{
		{"steps", "-steps"}, {"max_steps", "-max-steps"}, {"align", "-align"}, {"rhythm.windows", "-windows"},
	} {
		if fe.Field == m.field || strings.HasPrefix(fe.Field, m.field+"[") {
			return fmt.Errorf("%s: %s", m.flag, fe.Msg)
		}
	}
	return err
}

// usageError prints err as a command-line mistake and returns errUsage
// (exit status 2).
func usageError(stderr io.Writer, cmd string, err error) error {
	fmt.Fprintf(stderr, "laggard %s: %v (laggard %s -h for the flags)\n", cmd, err, cmd)
	return errUsage
}

// argError is a problem with the FILE arguments themselves (no rank,
// duplicate ranks, too few files): exit status 2, not 1.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func argErrorf(format string, args ...any) error { return &argError{fmt.Sprintf(format, args...)} }

// parseStepList reads "3,4,10" ("" → nil: all steps).
func parseStepList(s string) ([]int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int64
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil || n < 0 || n > optrace.MaxStep {
			return nil, fmt.Errorf("-steps: %q is not a step number (want e.g. -steps 3,4)", strings.TrimSpace(f))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// parseAlign maps -align to the engine's method ("" is auto).
func parseAlign(s string) (analysis.KairClockMethod, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return "", nil
	case "collectives":
		return analysis.KairClockCollectives, nil
	case "none":
		return analysis.KairClockNone, nil
	}
	return "", fmt.Errorf("-align: want auto, collectives or none, got %q", s)
}

// rankInName matches rank<N>, rank-N, rank_N (any case) not preceded by
// a letter, so "crank3" or "ranks3" do not count.
var rankInName = regexp.MustCompile(`(?i)(?:^|[^a-z])rank[-_]?([0-9]+)`)

// rankFromName reads the rank from a trace file's base name; ok is false
// when the name has none. Two different ranks in one name is an error.
func rankFromName(path string) (rank int, ok bool, err error) {
	base := filepath.Base(path)
	rank = -1
	for _, m := range rankInName.FindAllStringSubmatch(base, -1) {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > maxTraceRank {
			return -1, false, argErrorf("%s: rank %s in the file name is out of range [0, %d]", path, m[1], maxTraceRank)
		}
		if rank >= 0 && n != rank {
			return -1, false, argErrorf("%s: the file name names two ranks (%d and %d)", path, rank, n)
		}
		rank = n
	}
	return rank, rank >= 0, nil
}

type traceLoad struct {
	maxEvents int
	progress  bool
}

// loadTraces decodes each file (streaming: kineto.Decode reads a file
// once, holding only the events) into one rank's trace, sorted by rank.
// The rank is distributedInfo's, else the file name's; each rank once.
// Files are decoded in parallel, one per core (at most 8 at a time: each
// decoder holds a ~10 MiB correlation ring); the first error stops the
// rest and is returned.
func loadTraces(ctx context.Context, paths []string, opt traceLoad, stderr io.Writer) ([]optrace.Trace, error) {
	if len(paths) < 2 {
		return nil, argErrorf("give one trace file per rank, at least 2 (got %d): KAIR compares ranks", len(paths))
	}
	// A name that says two ranks is a command-line mistake: say so before
	// reading gigabytes.
	for _, p := range paths {
		if _, _, err := rankFromName(p); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	traces := make([]optrace.Trace, len(paths))
	sem := make(chan struct{}, min(runtime.GOMAXPROCS(0), 8))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards first; serializes stderr lines
		first error      // the error that stopped the others
	)
	lw := &lockedWriter{w: stderr, mu: &mu}
	for i, p := range paths {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			t, err := loadTrace(ctx, p, opt, lw)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
				return
			}
			traces[i] = t
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err() // interrupted between files
	}
	if first != nil {
		return nil, first
	}
	from := map[int]string{}
	for i, t := range traces {
		if prev, dup := from[t.Rank]; dup {
			return nil, argErrorf("%s and %s are both rank %d: give one file per rank", prev, paths[i], t.Rank)
		}
		from[t.Rank] = paths[i]
	}
	slices.SortFunc(traces, func(a, b optrace.Trace) int { return a.Rank - b.Rank })
	return traces, nil
}

// lockedWriter serializes the writes of parallel decoders.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func loadTrace(ctx context.Context, path string, opt traceLoad, stderr io.Writer) (optrace.Trace, error) {
	nameRank, nameOK, err := rankFromName(path)
	if err != nil {
		return optrace.Trace{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return optrace.Trace{}, err
	}
	defer f.Close()
	var r io.Reader = f
	var pr *progressReader
	if fi, err := f.Stat(); err == nil && opt.progress && fi.Size() > progressMinBytes {
		pr = &progressReader{r: r, name: filepath.Base(path), size: fi.Size(), w: stderr, tty: isTerminalWriter(stderr), start: time.Now()}
		pr.last = pr.start
		r = pr
	}
	// Newer Kineto writes relative ts and baseTimeNanoseconds after the
	// events: ReadTrace applies it, as the server does, so ranks share the
	// epoch time base before clock alignment (KAIR Feature 4).
	t, meta, err := kineto.ReadTrace(r, kineto.ReadOptions{Ctx: ctx, MaxEvents: opt.maxEvents})
	if pr != nil {
		n := 0
		if t != nil {
			n = len(t.Events)
		}
		pr.done(n, err)
	}
	if errors.Is(err, kineto.ErrTooManyEvents) {
		return optrace.Trace{}, fmt.Errorf("%s: more than %d events: raise -max-events (each costs a few hundred bytes of memory) or capture fewer steps", path, opt.maxEvents)
	}
	if err != nil {
		return optrace.Trace{}, fmt.Errorf("%s: %w", path, err)
	}
	rank := meta.Rank
	switch {
	case rank > maxTraceRank:
		return optrace.Trace{}, fmt.Errorf("%s: distributedInfo rank %d is out of range [0, %d]", path, rank, maxTraceRank)
	case rank >= 0 && nameOK && nameRank != rank:
		fmt.Fprintf(stderr, "laggard trace: %s: distributedInfo says rank %d, the file name %d; using %d\n", path, rank, nameRank, rank)
	case rank < 0 && nameOK:
		rank = nameRank
	case rank < 0:
		return optrace.Trace{}, argErrorf("%s: no rank: the trace has no distributedInfo.rank and the file name none (name it rank<N>.json, rank-N or rank_N)", path)
	}
	if len(t.Events) == 0 {
		return optrace.Trace{}, fmt.Errorf("%s: no operator or kernel events (%d trace elements read)", path, meta.Elements)
	}
	if meta.Reordered > 0 {
		// The Chrome trace format requires no order; say that the file
		// was not in time order rather than pass it silently.
		fmt.Fprintf(stderr, "laggard trace: %s: %d events come before the ProfilerStep range or the launch they belong to (the file is not in time order); matched after reading the whole file\n", path, meta.Reordered)
	}
	t.Rank = rank
	return *t, nil
}

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// progressReader reports bytes read of a long import on stderr: in place
// on a terminal, one line per report otherwise.
type progressReader struct {
	r     io.Reader
	name  string
	size  int64
	n     int64
	w     io.Writer
	tty   bool
	start time.Time
	last  time.Time
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.line(fmt.Sprintf("%s of %s (%.0f%%)", mib(p.n), mib(p.size), 100*float64(p.n)/float64(max(p.size, 1))))
	}
	return n, err
}

func (p *progressReader) line(s string) {
	if p.tty {
		fmt.Fprintf(p.w, "\rlaggard trace: %s: %s\033[K", p.name, s)
	} else {
		fmt.Fprintf(p.w, "laggard trace: %s: %s\n", p.name, s)
	}
}

func (p *progressReader) done(events int, err error) {
	el := time.Since(p.start)
	s := fmt.Sprintf("%s read, %d events in %s (%.0f MB/s)", mib(p.n), events, el.Round(time.Millisecond), float64(p.n)/1e6/max(el.Seconds(), 1e-9))
	if err != nil {
		s += " — stopped: " + err.Error()
	}
	p.line(s)
	if p.tty {
		fmt.Fprintln(p.w)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
