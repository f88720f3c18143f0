package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	pyclient "github.com/laggard-dev/laggard/clients/python"
	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/demo"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/server"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[flags]", stderr)
	var so serveOptions
	so.register(fs, "")
	world := fs.Int("world", 4, "DDP world size (ranks), 2..64")
	steps := fs.Int("steps", 40, "measured steps after warm-up, 5..100000")
	warmup := fs.Int("warmup", 10, "warm-up steps before the fault starts, 1..10000")
	validateSteps := fs.Int("validate-steps", 100, "steps trained after the measured ones (fault still on) so Greyhound's controller can validate while the ranks run; 0 skips, 0..100000")
	fault := fs.String("fault", "data", "fault family: "+strings.Join(faultNames(), ", "))
	delay := fs.Float64("delay-ms", 120, "injected delay per step on the hidden rank, 0..60000")
	rank := fs.Int("rank", -1, "the faulty rank (default -1: a hidden random rank)")
	seed := fs.Int64("seed", 0, "random seed in [1, 2^31) (default 0: time-based)")
	python := fs.String("python", "", "Python interpreter with PyTorch (default: $LAGGARD_PYTHON, /usr/bin/python3, python3)")
	keep := fs.Bool("keep", isTerminal(os.Stdout), "keep the server and web UI running after the diagnosis (until Ctrl-C)")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of text (the job report, schema "+analysis.ReportSchema+", with the Greyhound report under \"greyhound\", the incidents under \"incidents\" and their grades under \"incident_grades\")")
	verbose := fs.Bool("v", false, "also print each engine's own report (StageFrontier, Greyhound, KAIR, SysOM-AI) after the incident")
	level := fs.String("log-level", "warn", "server log level")
	sysomMode := fs.String("sysom", "auto", "SysOM-AI act (node agent's eBPF profiler on a second job with a CPU hog on the hidden rank, ~90 s): auto (run it when the profiler can run here, else say why), on (fail if it cannot), off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	if *sysomMode != "auto" && *sysomMode != "on" && *sysomMode != "off" {
		return fmt.Errorf("-sysom %q: want auto, on or off", *sysomMode)
	}
	if _, ok := demo.Faults[*fault]; !ok {
		return fmt.Errorf("-fault %q: want one of %s", *fault, strings.Join(faultNames(), ", "))
	}
	if err := errors.Join(
		so.validate(),
		checkRange("world", *world, 2, 64),
		checkRange("steps", *steps, 5, 100_000),
		checkRange("warmup", *warmup, 1, 10_000),
		checkRange("validate-steps", *validateSteps, 0, 100_000),
		checkRange("delay-ms", *delay, 0, 60_000),
		checkRange("seed", *seed, 0, 1<<31-1), // torch.Generator seeds with seed*1000+rank
	); err != nil {
		return err
	}
	if *rank != -1 {
		if err := checkRange("rank", *rank, 0, *world-1); err != nil {
			return fmt.Errorf("%w (the world has %d ranks; -1 picks a hidden one)", err, *world)
		}
	}
	if *seed == 0 {
		*seed = 1 + time.Now().UnixNano()%1_000_000
	}
	rng := rand.New(rand.NewPCG(uint64(*seed), 0x1a99a7d))
	if *rank < 0 {
		*rank = rng.IntN(*world)
	}
	log, err := newLogger(stderr, *level, false)
	if err != nil {
		return err
	}
	if so.dataDir == "" {
		dir, err := os.MkdirTemp("", "laggard-demo-data-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		so.dataDir = dir
	}
	// Listen once and serve on that listener: checking an address and
	// listening again later races with other processes.
	ln, err := net.Listen("tcp", so.addr)
	if err != nil {
		if flagWasSet(fs, "addr") {
			return listenError(so.addr, err) // the user chose it: fail rather than serve elsewhere
		}
		why := "is taken"
		if !errors.Is(err, syscall.EADDRINUSE) {
			why = fmt.Sprintf("cannot be used (%v)", err)
		}
		var ferr error
		if ln, ferr = net.Listen("tcp", "127.0.0.1:0"); ferr != nil {
			return fmt.Errorf("cannot listen on %s (%v) nor on a free loopback port: %v", so.addr, err, ferr)
		}
		fmt.Fprintf(stderr, "laggard demo: the default address %s %s; serving on %s instead (pass -addr to choose)\n", so.addr, why, ln.Addr())
	}
	if !server.IsLoopback(ln.Addr()) {
		ln.Close()
		return fmt.Errorf("laggard demo serves without authentication, so it listens on loopback only (-addr %s is not);\n"+
			"  to reach it from elsewhere, forward the port (ssh -L), or run laggard serve -tokens FILE (docs/security.md)", so.addr)
	}

	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	urlc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- serve(sctx, so, ln, log, func(u string) { urlc <- u }) }()
	var url string
	select {
	case url = <-urlc:
	case err := <-errc:
		return fmt.Errorf("starting the server: %w", err)
	}

	job := fmt.Sprintf("demo-%s", time.Now().UTC().Format("20060102-150405"))
	fmt.Fprintf(stderr, "laggard demo: %d-rank PyTorch DDP job (gloo, CPU), %d warm-up + %d measured steps,\n"+
		"  a %.0f ms %s fault injected on a hidden rank. Server: %s\n", *world, *warmup, *steps, *delay, *fault, url)
	res, err := demo.Run(ctx, demo.Options{
		ServerURL: url, Python: *python, Files: pyclient.FS,
		World: *world, Steps: *steps, Warmup: *warmup, ValidateSteps: *validateSteps, GreyhoundWait: 60 * time.Second,
		Fault: *fault, FaultRank: *rank, DelayMS: *delay, Seed: *seed, JobID: job, Stderr: stderr, IncidentWait: demoIncidentWait,
	})
	if err != nil {
		stopServer()
		<-errc // the store is closed before the data directory is removed
		return err
	}
	// The incident of the job is the diagnosis; each engine's own report
	// is behind -v, or shown when the server has no incident layer.
	engines := *verbose || res.IncidentsOff
	if !*asJSON {
		if err := printDiagnosis(stdout, res, url, engines, *fault, *rank, *delay); err != nil {
			return err
		}
	}
	// The SysOM-AI act: a second job, profiled by an in-process node agent.
	sres, serr := demoSysom(ctx, *sysomMode, demo.SysomOptions{
		ServerURL: url, Python: *python, Files: pyclient.FS, World: *world, Rank: *rank, Seed: *seed,
		JobID: job + "-sysom", Stderr: stderr, Log: log})
	res.Sysom = sres
	if serr != nil {
		stopServer()
		<-errc
		return serr
	}
	if s := res.Sysom; s != nil && s.Skipped == "" && s.Err == "" {
		res.Faults = append(res.Faults, demo.Injected{Job: s.Job, Fault: demo.FaultCPUHog, Rank: s.Rank, What: fmt.Sprintf("CPU hog on rank %d's core", s.Rank)})
		if !res.IncidentsOff {
			res.AddIncidents(ctx, url, s.Job, demoIncidentWait)
		}
	}
	if *asJSON {
		if err := writeDemoJSON(stdout, res, *rank); err != nil {
			return err
		}
	} else {
		if s := res.Sysom; s != nil {
			if engines || s.Skipped != "" || s.Err != "" {
				if err := printSysom(stdout, s); err != nil {
					return err
				}
			}
			if s.Skipped == "" && s.Err == "" && !res.IncidentsOff {
				fmt.Fprintf(stdout, "\n── incident of the SysOM-AI act (job %s, a CPU hog on rank %d's core) ──\n", s.Job, s.Rank)
				if err := printIncidents(stdout, res, s.Job, url); err != nil {
					return err
				}
			}
		}
		printIncidentGrades(stdout, res)
		fmt.Fprintf(stdout, "\nweb UI: %s/#/jobs/%s\n", url, job)
		if s := res.Sysom; s != nil && s.Skipped == "" && s.Err == "" {
			fmt.Fprintf(stdout, "SysOM-AI flame graphs: %s/#/jobs/%s\n", url, s.Job)
		}
	}
	if *keep {
		fmt.Fprintf(stderr, "serving until Ctrl-C …\n")
		<-ctx.Done()
	}
	stopServer()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if !res.StageInTop2 {
		return fmt.Errorf("the injected %s fault was not routed", *fault)
	}
	return nil
}

func printVerdict(w io.Writer, res *demo.Result, fault string, rank int, delay float64) {
	mark := func(ok bool) string {
		if ok {
			return "✔"
		}
		return "✘"
	}
	fmt.Fprintf(w, "\nground truth: %.0f ms %s fault on rank %d\n", delay, fault, rank)
	if res.WantStage == "" {
		verb := "correctly left out of"
		if !res.StageRouted {
			verb = "wrongly put in"
		}
		fmt.Fprintf(w, "  %s host-only control: callbacks %s the routing set\n", mark(res.StageRouted), verb)
	} else {
		where := "top-1"
		if !res.StageRouted {
			where = "top-2 only"
			if !res.StageInTop2 {
				where = "missed"
			}
		}
		fmt.Fprintf(w, "  %s stage: %s → %s\n", mark(res.StageInTop2), res.WantStage, where)
	}
	// Withheld is honest, not wrong: the evidence did not single a rank
	// out. The grade counts wrong and extra ranks (issue 16 item 8b).
	fmt.Fprintf(w, "  %s\n", demo.GradeStageFrontier(res.Report, rank).Line)
}

// demoIncidentWait bounds the wait for an act's incidents to settle
// after its training ended (the server fuses on its own loop).
const demoIncidentWait = 30 * time.Second

// printDiagnosis is the first act's text: the incident of the job, then
// (engines: -v, or no incident layer) each engine's own report.
func printDiagnosis(w io.Writer, res *demo.Result, server string, engines bool, fault string, rank int, delay float64) error {
	job := ""
	if len(res.Faults) > 0 {
		job = res.Faults[0].Job
	}
	fmt.Fprintf(w, "\n── incident (%.0f s of training) ──────────────────────────────\n", res.TrainSeconds)
	if err := printIncidents(w, res, job, server); err != nil {
		return err
	}
	if !engines {
		return nil
	}
	fmt.Fprintf(w, "\n── StageFrontier (from stage vectors) ──────────────────────────\n")
	if res.Report != nil {
		if err := render.Text(w, res.Report); err != nil {
			return err
		}
	}
	printVerdict(w, res, fault, rank, delay)
	printGreyhound(w, res, rank)
	printKair(w, res, rank)
	return nil
}

// printIncidents prints the incidents of one act's job as diagnoses, or
// says why there are none.
func printIncidents(w io.Writer, res *demo.Result, job, server string) error {
	if res.IncidentsOff {
		fmt.Fprintf(w, "  %s\n  each engine's own report follows.\n", res.IncidentsErr)
		return nil
	}
	n := 0
	for i := range res.Incidents {
		if res.Incidents[i].Job != job {
			continue
		}
		fmt.Fprintln(w)
		if err := render.Incident(w, &res.Incidents[i], render.IncidentOptions{Now: time.Now(), Server: server}); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		why := ""
		if res.IncidentsErr != "" {
			why = " (" + res.IncidentsErr + ")"
		}
		fmt.Fprintf(w, "  no incident opened for job %s%s; -v shows each engine's own report\n", job, why)
	}
	return nil
}

// printIncidentGrades is the grade: each injected fault against the
// incidents' stated causes, a line each.
func printIncidentGrades(w io.Writer, res *demo.Result) {
	fmt.Fprintf(w, "\n── grade: what was injected against the incident's stated cause ──\n")
	if res.IncidentsOff {
		fmt.Fprintf(w, "  no grade: the server has no incident layer\n")
		return
	}
	for _, g := range res.IncidentGrades() {
		fmt.Fprintf(w, "%s\n", render.Para(2, g.Line))
	}
}

// demoJSON is `laggard demo --json`: the job report's fields at the top
// level as before (readers of its schema keep working), with the
// Greyhound report beside them — null, with greyhound_error saying why,
// when the server made none.
type demoJSON struct {
	*analysis.Report
	Greyhound      *analysis.GreyhoundReport `json:"greyhound"`
	GreyhoundError string                    `json:"greyhound_error,omitempty"`
	// Sysom is the SysOM-AI act (absent with -sysom off): the report, the
	// windows asked and the verdict, or why it was skipped.
	Sysom *demo.SysomResult `json:"sysom,omitempty"`
	// Grades are each engine's self-grade against the injected fault
	// (wrong and extra ranks counted).
	Grades []demo.Grade `json:"grades"`
	// Incidents are the incidents of the demo's jobs as the server states
	// them (docs/format/incident.md); IncidentGrades each injected fault
	// against their stated causes — right, withheld, wrong, missed
	// (eval/incidents reads them); IncidentsError says why there are no
	// incidents to read (the server's incident layer is off).
	Incidents      []incident.Incident  `json:"incidents"`
	IncidentGrades []demo.IncidentGrade `json:"incident_grades"`
	IncidentsError string               `json:"incidents_error,omitempty"`
}

// demoGrades grades every engine of the first act (the SysOM-AI act has
// its own verdict, graded against its hog).
func demoGrades(res *demo.Result, rank int) []demo.Grade {
	return []demo.Grade{demo.GradeStageFrontier(res.Report, rank), demo.GradeGreyhound(res.Greyhound, rank), demo.GradeKair(res.Kair, res.KairErr, rank)}
}

func writeDemoJSON(w io.Writer, res *demo.Result, rank int) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	out := demoJSON{Report: res.Report, Greyhound: res.Greyhound, Sysom: res.Sysom, Grades: demoGrades(res, rank),
		Incidents: res.Incidents, IncidentGrades: res.IncidentGrades(), IncidentsError: res.IncidentsErr}
	if out.Incidents == nil {
		out.Incidents = []incident.Incident{}
	}
	if out.IncidentGrades == nil {
		out.IncidentGrades = []demo.IncidentGrade{}
	}
	if res.Greyhound == nil {
		out.GreyhoundError = res.GreyhoundErr
	}
	return enc.Encode(out)
}

func faultNames() []string {
	var ns []string
	for n := range demo.Faults {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// printKair is the KAIR block: the operator traces the server asked the
// ranks to record once a cheap signal fired, localized and blamed.
func printKair(w io.Writer, res *demo.Result, rank int) {
	fmt.Fprintf(w, "\n── KAIR (from operator traces the server asked for) ───────────\n")
	if res.Kair == nil || res.Kair.Report == nil {
		why := res.KairErr
		if why == "" {
			why = "no capture was triggered"
		}
		fmt.Fprintf(w, "  no KAIR report: %s\n", why)
		return
	}
	if c := res.Kair.Capture; c != nil {
		fmt.Fprintf(w, "capture %s (%s: %s) · steps from %d · ranks uploaded %v of %v\n", c.ID, c.Trigger, c.Reason, c.StartStep, c.Uploaded, c.Ranks)
	}
	if err := render.KAIRBrief(w, res.Kair.Report); err != nil {
		return
	}
	fmt.Fprintf(w, "  %s\n", demo.GradeKair(res.Kair, res.KairErr, rank).Line)
}

// printGreyhound is the Greyhound block beside StageFrontier's headline:
// the iteration time the server derived from the collective calls alone
// (§4.2) and the controller's verdict (§4.1–4.3).
func printGreyhound(w io.Writer, res *demo.Result, rank int) {
	fmt.Fprintf(w, "\n── Greyhound (from collective calls only) ─────────────────────\n")
	if res.Greyhound == nil {
		fmt.Fprintf(w, "  no Greyhound report: %s\n", res.GreyhoundErr)
		return
	}
	if err := renderGreyhound(w, res.Greyhound); err != nil {
		return
	}
	fmt.Fprintf(w, "  %s\n", demo.GradeGreyhound(res.Greyhound, rank).Line)
}

// demoSysom runs the SysOM-AI act per -sysom: off runs nothing; auto
// skips with the reason when the eBPF profiler cannot run here and turns
// a failure into a line of the output (the demo's other acts stand); on
// makes both an error.
func demoSysom(ctx context.Context, mode string, o demo.SysomOptions) (*demo.SysomResult, error) {
	if mode == "off" {
		return nil, nil
	}
	res, err := demo.RunSysom(ctx, o)
	switch {
	case err != nil && mode == "on":
		return nil, fmt.Errorf("SysOM-AI act: %w", err)
	case err != nil:
		return &demo.SysomResult{Rank: o.Rank, Job: o.JobID, Err: err.Error()}, nil
	case res.Skipped != "" && mode == "on":
		return nil, fmt.Errorf("SysOM-AI act cannot run (-sysom on): %s; run it as root: sudo make demo", res.Skipped)
	}
	return res, nil
}

// printSysom is the SysOM-AI act's section: how it sampled, the windows,
// the report, the verdict — or one line saying why it was skipped.
func printSysom(w io.Writer, s *demo.SysomResult) error {
	fmt.Fprintf(w, "\n── SysOM-AI (node agent: eBPF CPU stacks, OS counters, collective entry) ──\n")
	switch {
	case s.Skipped != "":
		fmt.Fprintf(w, "  skipped: %s — to see it, run as root: sudo make demo\n", s.Skipped)
		return nil
	case s.Err != "":
		fmt.Fprintf(w, "  ✘ the SysOM-AI act failed: %s\n", s.Err)
		return nil
	}
	fmt.Fprintf(w, "  sampling at %.0f%% of %d Hz for the demo; production default %.0f%%\n", 100*s.Ratio, s.Hz, 100*demo.SysomProdRatio)
	fmt.Fprintf(w, "  job %s: rank %d alone on the last core (pin map %s), a CPU hog of %d busy processes on it;\n", s.Job, s.Rank, s.PinMap, s.HogProcs)
	fmt.Fprintf(w, "  window: %s of the hog vs the %s before it\n\n", nsDur(s.ToNS-s.FromNS), nsDur(s.BaseToNS-s.BaseFromNS))
	if s.Report != nil {
		if err := render.Sysom(w, s.Report); err != nil {
			return err
		}
	}
	if s.Verdict != nil {
		fmt.Fprintf(w, "\nground truth: CPU hog on rank %d's core\n  %s\n", s.Rank, s.Verdict.Line)
	}
	return nil
}

func nsDur(ns int64) string { return time.Duration(ns).Round(time.Second).String() }
