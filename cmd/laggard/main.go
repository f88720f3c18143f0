// Command laggard finds and explains stragglers in distributed ML training.
//
//	laggard serve     run the ingest server, API, metrics and web UI
//	laggard incidents list a server's incidents (one per slowdown, every engine fused)
//	laggard incident  one incident as a diagnosis: what slowed, cost, where, why, what to do
//	laggard analyze   analyze an exported stage matrix (JSONL or CSV)
//	laggard token     make an API token for serve -tokens
//	laggard agent     node agent: ship NCCL shim records to the server
//	laggard changepoints  change points in a step,value series (BOCD+V)
//	laggard greyhound show a job's Greyhound report
//	laggard sysom     show a job's SysOM-AI report
//	laggard trace     run KAIR (rhythm, outliers, blame) on per-rank Kineto traces
//	laggard capture   ask a job's ranks for a profiler capture and show its KAIR report
//	laggard symbols   add ELF files to the central symbol store
//	laggard profile   import or export CPU profiles (pprof, collapsed)
//	laggard demo      train a real PyTorch DDP job with an injected straggler and diagnose it
//	laggard version   print the version
//	laggard help      show help for laggard or one command
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/laggard-dev/laggard/internal/buildinfo"
)

type command struct {
	name, summary string
	examples      []string // shell lines, with an optional "# comment"
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{name: "serve", summary: "run the ingest server, HTTP API, Prometheus metrics and web UI", run: runServe, examples: []string{
			"laggard serve                               # data in ./laggard-data, UI on http://127.0.0.1:7070",
			"laggard serve /var/lib/laggard -addr 0.0.0.0:7070 -tokens /etc/laggard/tokens   # non-loopback needs -tokens",
		}},
		{name: "incidents", summary: "list the incidents (one per slowdown, every engine's evidence fused): id, job, state, since, cause, lost time, confidence", run: runIncidents, examples: []string{
			"laggard incidents                           # every job's, newest first",
			"laggard incidents -state open -since 24h run42",
			"laggard incidents --json | jq '.incidents[].headline'",
		}},
		{name: "incident", summary: "show one incident as a diagnosis: what slowed, since when, what it cost, where, why, what to do next", run: runIncident, examples: []string{
			"laggard incident inc-7d1c0a                 # -v adds every piece of evidence and a glossary",
			"laggard incident --json inc-7d1c0a | jq .hypotheses",
		}},
		{name: "analyze", summary: "analyze a stage-matrix file (JSONL or CSV, may be gzipped) and print the window report", run: runAnalyze, examples: []string{
			"laggard analyze run42.jsonl                 # a readable table; --json for automation",
			"laggard analyze run42.jsonl.gz --json | jq .routing",
			"laggard analyze -last 200 run42.csv",
			"zcat run42.jsonl.gz | laggard analyze -",
		}},
		{name: "demo", summary: "train a real PyTorch DDP job with an injected straggler and show the diagnosis", run: runDemo, examples: []string{
			"laggard demo                                # a hidden 120 ms data-loader fault on 4 ranks",
			"laggard demo -fault backward -world 8 -keep=false",
		}},
		{name: "agent", summary: "node agent: drain the NCCL shim's shared-memory rings and ship collective calls to the server", run: runAgent, examples: []string{
			"laggard agent -server http://laggard:7070 -token-file /etc/laggard/agent-token",
		}},
		{name: "changepoints", summary: "find change points in a step,value series (CSV or JSONL) with BOCD+V, BOCD or a sliding window", run: runChangepoints, examples: []string{
			"laggard changepoints steps.csv              # BOCD with verification (Greyhound §4.2)",
			"laggard changepoints -method window --json steps.jsonl",
		}},
		{name: "greyhound", summary: "show a job's Greyhound report: iteration time, change points, group comparison, controller phase, verdict", run: runGreyhound, examples: []string{
			"laggard greyhound -server http://127.0.0.1:7070 run42",
			"laggard greyhound --json run42 | jq .verdict",
		}},
		{name: "sysom", summary: "show a job's SysOM-AI report: slow ranks, CPU waterline, layered GPU/CPU/OS diagnosis, temporal baseline", run: runSysom, examples: []string{
			"laggard sysom -job run42                    # the latest 5 minutes against the job's first steady window",
			"laggard sysom -job run42 -last 10m --json | jq .diagnoses",
		}},
		{name: "trace", summary: "run KAIR on per-rank PyTorch profiler (Kineto) traces: the straggler rank, its outlier operators, their root causes", run: runTrace, examples: []string{
			"laggard trace rank0.json.gz rank1.json.gz rank2.json.gz rank3.json.gz",
			"laggard trace -steps 120,121 -align collectives --json traces/*.json | jq .causes",
		}},
		{name: "capture", summary: "ask a job's ranks to record a torch.profiler window (KAIR triggered capture) and show its KAIR report", run: runCapture, examples: []string{
			"laggard capture -wait 5m run42                # record 5 steps on every rank, then print the KAIR report",
			"laggard capture -ranks 0,3 -steps 8 -every 2 -reason 'slow since 12:00' run42",
			"laggard capture -list run42",
		}},
		{name: "symbols", summary: "add ELF files to the central symbol store (uploaded by Build-ID, or into a local data directory)", run: runSymbols, examples: []string{
			"laggard symbols add -server http://laggard:7070 ./trainer /usr/lib/libfoo.so",
			"laggard symbols add -data /var/lib/laggard /usr/lib/debug/.build-id/ab/cdef.debug",
		}},
		{name: "profile", summary: "import an outside profile (pprof, collapsed stacks) as a rank's stacks, or export a window's profile", run: runProfile, examples: []string{
			"laggard profile import -job run42 -rank 3 cpu.pb.gz",
			"laggard profile import -job run42 -rank 3 -from 2025-07-01T12:00:00Z -to 2025-07-01T12:01:00Z pyspy.txt",
			"laggard profile export -job run42 -rank 3 -o rank3.pb.gz   # go tool pprof rank3.pb.gz",
		}},
		{name: "token", summary: "make an API token and its line for serve -tokens", run: runToken, examples: []string{
			"laggard token -scopes read grafana >> tokens   # a read token for dashboards (token on stderr, file line on stdout)",
			"laggard token -scopes 'ingest:team-a-*' team-a trainers",
		}},
		{name: "version", summary: "print the version (also laggard --version, -v)", run: runVersion},
		{name: "help", summary: "show help for laggard or one command", run: runHelp, examples: []string{
			"laggard help analyze",
		}},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// errUsage marks an error already explained by a usage message.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit status: 0 ok, 1 the
// command failed, 2 the command line was wrong.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-v", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.String())
		return 0
	}
	c, ok := lookup(args[0])
	if !ok {
		what := "command"
		if strings.HasPrefix(args[0], "-") {
			what = "flag (flags go after the command)"
		}
		fmt.Fprintf(stderr, "laggard: unknown %s %q\n\n", what, args[0])
		usage(stderr)
		return 2
	}
	return runCommand(ctx, c, args[1:], stdout, stderr)
}

func runCommand(ctx context.Context, c command, args []string, stdout, stderr io.Writer) (code int) {
	// A bug must not greet the user with a goroutine dump; say where it
	// happened so it can be reported.
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "laggard %s: internal error: %v (at %s)\nthis is a bug in laggard; please report it with the command line\n", c.name, p, panicSite())
			code = 1
		}
	}()
	err := c.run(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "laggard %s: %v\n", c.name, err)
	return 1
}

// panicSite names the function and line a recovered panic came from.
func panicSite() string {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs)])
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, "runtime.") {
			return fmt.Sprintf("%s %s:%d", f.Function, baseName(f.File), f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}

func baseName(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

func usage(w io.Writer) {
	fmt.Fprintf(w, "laggard finds and explains stragglers in distributed ML training.\n\nUsage:\n  laggard <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExamples:\n")
	for _, c := range commands() {
		if len(c.examples) > 0 {
			fmt.Fprintf(w, "  %s\n", c.examples[0])
		}
	}
	fmt.Fprintf(w, "\nRun 'laggard help <command>' (or 'laggard <command> -h') for a command's flags.\n")
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	_, err := fmt.Fprintln(stdout, buildinfo.String())
	return err
}

// runHelp prints help to stdout: it was asked for.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("help", "[COMMAND]", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch fs.NArg() {
	case 0:
		usage(stdout)
		return nil
	case 1:
		c, ok := lookup(fs.Arg(0))
		if !ok {
			fmt.Fprintf(stderr, "laggard help: unknown command %q\n\n", fs.Arg(0))
			usage(stderr)
			return errUsage
		}
		// Each command builds its flag set when it runs; asking it for -h
		// prints exactly the flags it accepts.
		if err := c.run(ctx, []string{"-h"}, stdout, stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
			return err
		}
		return nil
	}
	fs.Usage()
	return errUsage
}

// newFlagSet returns a flag set that reports errors instead of exiting.
// Its usage names the command, its synopsis, flags and examples.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		c, _ := lookup(name)
		fmt.Fprintf(w, "Usage: laggard %s %s\n", name, synopsis)
		if c.summary != "" {
			fmt.Fprintf(w, "\n%s.\n", strings.ToUpper(c.summary[:1])+c.summary[1:])
		}
		nflags := 0
		fs.VisitAll(func(*flag.Flag) { nflags++ })
		if nflags > 0 {
			fmt.Fprintf(w, "\nFlags (as -name or --name, before or after the arguments; -- ends the flags):\n")
			fs.PrintDefaults()
		}
		if len(c.examples) > 0 {
			fmt.Fprintf(w, "\nExamples:\n")
			for _, e := range c.examples {
				fmt.Fprintf(w, "  %s\n", e)
			}
		}
	}
	return fs
}

// parseFlags parses args GNU style: flags may come before, between and
// after the positional arguments (`analyze FILE --json`), as -name or
// --name; "--" ends the flags and a lone "-" (stdin) is a positional.
// -h/--help prints the usage and returns flag.ErrHelp; any other error has
// been printed with the usage and is returned as errUsage. The positionals
// are then fs.Args(), in order.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if a == "-" || !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		// A flag that takes a value consumes the next argument unless
		// written -name=value, even when it looks like a flag (-last -5).
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && i+1 < len(args) {
			if f := fs.Lookup(name); f != nil && !isBoolFlag(f) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	err := fs.Parse(flags)
	if err == nil {
		// Parsing stops at "--", leaving the positionals as fs.Args().
		err = fs.Parse(append([]string{"--"}, pos...))
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return errUsage
	}
	return err
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagWasSet reports whether name was given on the command line (rather
// than left at its default).
func flagWasSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

type number interface {
	~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64 | ~float64
}

// checkRange returns an error naming the flag and its value unless v is a
// finite number in [lo, hi]. name may be given with or without the dash.
func checkRange[T number](name string, v, lo, hi T) error {
	if !finite(v) || v < lo || v > hi {
		return fmt.Errorf("%s must be in [%v, %v], got %v", flagName(name), lo, hi, v)
	}
	return nil
}

// checkMin is checkRange without an upper bound.
func checkMin[T number](name string, v, lo T) error {
	if !finite(v) || v < lo {
		return fmt.Errorf("%s must be >= %v, got %v", flagName(name), lo, v)
	}
	return nil
}

func finite[T number](v T) bool {
	f := float64(v)
	return !math.IsNaN(f) && !math.IsInf(f, 0)
}

func flagName(name string) string { return "-" + strings.TrimLeft(name, "-") }

func newLogger(w io.Writer, level string, json bool) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}
