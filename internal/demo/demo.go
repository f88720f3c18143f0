package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/incident"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Fault families the demo trainer can inject, with the stage each one
// should be routed to (StageFrontier §6.2). The host-only callback is the
// control: it is not exposed as group delay and must not be routed.
var Faults = map[string]string{
	"data":          stagevec.StageData,
	"forward_host":  stagevec.StageForward,
	"backward":      stagevec.StageBackward,
	"backward_comm": stagevec.StageBackward,
	"callback_sync": stagevec.StageCallback,
	"callback_host": "",
}

// Options configures one demo run.
type Options struct {
	ServerURL string // base URL of a running laggard server
	Python    string // interpreter with torch; "" → FindPython
	Files     fs.FS  // the embedded Python client and examples
	World     int
	Steps     int // measured steps after warmup
	Warmup    int
	// ValidateSteps are steps trained after the measured ones so the
	// Greyhound controller can publish a validation plan and the ranks
	// run it at its at_step (they can only while training); the fault
	// stays on. GreyhoundWait bounds the wait after training for the
	// controller to leave profiling/validation.
	ValidateSteps int
	GreyhoundWait time.Duration
	Fault         string
	FaultRank     int // the hidden rank; the caller chooses it
	DelayMS       float64
	Seed          int64
	JobID         string
	Stderr        io.Writer // trainer progress
	// IncidentWait bounds the wait for the job's incidents to settle
	// after training (0: read them once).
	IncidentWait time.Duration
}

// Result is the demo's outcome.
type Result struct {
	Report       *analysis.Report
	WantStage    string // "" for the control
	StageRouted  bool   // want stage is top-1 (or, for the control, callbacks not routed)
	StageInTop2  bool
	RankLocated  bool // the headline names the hidden rank
	RankWithheld bool // the headline names no rank (and says why)
	TrainSeconds float64
	// Greyhound is the collective-derived report (iteration time by ACF,
	// BOCD+V change points, the controller's phase and verdict); nil with
	// GreyhoundErr saying why when the server has none.
	Greyhound    *analysis.GreyhoundReport
	GreyhoundErr string
	// Kair is the KAIR report of the capture the server triggered while
	// the job ran (operator traces of a few steps on every rank); KairErr
	// says why when there is none.
	Kair    *analysis.KairAnswer
	KairErr string
	// Sysom is the SysOM-AI act (RunSysom; the caller sets it), nil when
	// it was not asked for.
	Sysom *SysomResult
	// Faults are what the demo injected (the caller adds the SysOM-AI
	// act's hog once it ran); Incidents every incident of their jobs as
	// the server states them once settled; IncidentsErr says why there
	// are none to read, IncidentsOff when the server has no incident
	// layer (ErrIncidentsOff).
	Faults       []Injected
	Incidents    []incident.Incident
	IncidentsErr string
	IncidentsOff bool
}

// AddIncidents reads the incidents of an act's job into the result
// (AwaitIncidents), noting why when it cannot.
func (r *Result) AddIncidents(ctx context.Context, base, job string, wait time.Duration) {
	incs, err := AwaitIncidents(ctx, base, job, wait, time.Second)
	r.Incidents = append(r.Incidents, incs...)
	if err != nil {
		r.IncidentsErr = err.Error()
		r.IncidentsOff = errors.Is(err, ErrIncidentsOff)
	}
}

// IncidentGrades grades every injected fault against the incidents read
// (nil when the server has no incident layer: nothing to grade).
func (r *Result) IncidentGrades() []IncidentGrade {
	if r.IncidentsOff {
		return nil
	}
	return GradeIncidents(r.Faults, r.Incidents)
}

// FaultWhat is an injected fault in words.
func FaultWhat(fault string, rank int, delayMS float64) string {
	if rank < 0 || delayMS <= 0 {
		return "nothing (a control)"
	}
	return fmt.Sprintf("%.0f ms %s fault on rank %d", delayMS, fault, rank)
}

// Run trains the DDP job against the server and fetches the diagnosis for
// the faulted window.
func Run(ctx context.Context, o Options) (*Result, error) {
	want, ok := Faults[o.Fault]
	if !ok {
		return nil, fmt.Errorf("unknown fault %q", o.Fault)
	}
	py, err := FindPython(ctx, o.Python)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "laggard-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, o.Files); err != nil {
		return nil, fmt.Errorf("unpacking the Python client: %w", err)
	}
	args := []string{filepath.Join(dir, "examples", "ddp_demo.py"),
		"--server", o.ServerURL, "--job", o.JobID,
		"--world", fmt.Sprint(o.World), "--steps", fmt.Sprint(o.Warmup + o.Steps + o.ValidateSteps), "--warmup", fmt.Sprint(o.Warmup),
		"--fault", o.Fault, "--fault-rank", fmt.Sprint(o.FaultRank), "--delay-ms", fmt.Sprint(o.DelayMS),
		"--fault-start", fmt.Sprint(o.Warmup), "--seed", fmt.Sprint(o.Seed),
		// Greyhound: capture the DDP buckets' collectives and take part in
		// validation plans, so the server derives iteration time itself.
		"--collectives", "on", "--validation", "on"}
	cmd := exec.CommandContext(ctx, py, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONUNBUFFERED=1", "OMP_NUM_THREADS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Kill the whole process group (DDP workers too) on cancellation.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", py, err)
	}
	done := make(chan struct{})
	go func() { // progress, marked so it reads apart from ours
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintf(o.Stderr, "  trainer │ %s\n", sc.Text())
		}
	}()
	// The trainer prints one JSON line per finished phase naming its
	// scored window; anything else on stdout is progress too.
	from, to := int64(o.Warmup), int64(o.Warmup+o.Steps-1)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ph struct {
			Job  string `json:"job"`
			From *int64 `json:"from_step"`
			To   *int64 `json:"to_step"`
		}
		if json.Unmarshal(sc.Bytes(), &ph) == nil && ph.Job == o.JobID {
			if ph.From != nil && ph.To != nil {
				from, to = *ph.From, *ph.To
			}
			continue
		}
		fmt.Fprintf(o.Stderr, "  trainer │ %s\n", sc.Text())
	}
	// The validation tail is not part of the scored window: the report
	// covers the measured steps as before.
	to = min(to, from+int64(o.Steps)-1)
	<-done // Wait closes the pipes: drain them first
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("DDP trainer failed: %w", err)
	}
	res := &Result{WantStage: want, TrainSeconds: time.Since(start).Seconds()}
	rep, err := FetchReport(ctx, o.ServerURL, o.JobID, from, to)
	if err != nil {
		return nil, err
	}
	res.Report = rep
	g := rep.Groups[0].Report
	if want == "" {
		res.StageRouted = !slices.Contains(g.Routing, stagevec.StageCallback)
		res.StageInTop2 = res.StageRouted
	} else {
		res.StageRouted = g.Top1 == want
		res.StageInTop2 = slices.Contains(g.Top2, want)
	}
	res.RankLocated = rep.Headline.Rank == o.FaultRank
	res.Greyhound, res.GreyhoundErr = awaitGreyhound(ctx, o)
	res.Kair, res.KairErr = awaitKair(ctx, o)

	res.RankWithheld = rep.Headline.Rank < 0
	f := Injected{Job: o.JobID, Fault: o.Fault, Rank: o.FaultRank, DelayMS: o.DelayMS, What: FaultWhat(o.Fault, o.FaultRank, o.DelayMS)}
	if o.DelayMS <= 0 {
		f.Rank = -1 // nothing was injected: a control
	}
	res.Faults = []Injected{f}
	res.AddIncidents(ctx, o.ServerURL, o.JobID, o.IncidentWait)
	return res, nil
}

// awaitGreyhound fetches the Greyhound report, waiting (bounded by
// o.GreyhoundWait) while the controller is still profiling or validating:
// the last ranks' results arrive as training ends.
func awaitGreyhound(ctx context.Context, o Options) (*analysis.GreyhoundReport, string) {
	wait := o.GreyhoundWait
	if o.ValidateSteps == 0 {
		wait = 0 // nothing can finish once training stopped
	}
	deadline := time.Now().Add(wait)
	var last *analysis.GreyhoundReport
	for {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		gr, err := FetchGreyhound(fctx, o.ServerURL, o.JobID)
		cancel()
		switch {
		case err != nil && last == nil:
			return nil, err.Error()
		case err == nil:
			last = gr
		}
		ph := last.Controller.Phase
		busy := ph == analysis.PhaseProfiling || ph == analysis.PhaseValidation
		if !busy || !time.Now().Before(deadline) {
			return last, ""
		}
		select {
		case <-ctx.Done():
			return last, ""
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// awaitKair fetches the KAIR report of the job's newest capture, waiting
// (up to 30 s) while it is still recording or uploading: the ranks upload
// in the background and the last trace may land as training ends.
func awaitKair(ctx context.Context, o Options) (*analysis.KairAnswer, string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ka, err := getJSON[analysis.KairAnswer](fctx, fmt.Sprintf("%s/api/v1/jobs/%s/kair", o.ServerURL, o.JobID), "the KAIR report")
		cancel()
		settled := err == nil && ka.Capture != nil && !analysis.CaptureOpen(ka.Capture)
		if settled || !time.Now().Before(deadline) {
			if err != nil {
				return nil, err.Error()
			}
			return ka, ""
		}
		select {
		case <-ctx.Done():
			return ka, ""
		case <-time.After(time.Second):
		}
	}
}

// FetchReport asks the server for the job report of steps [from, to].
func FetchReport(ctx context.Context, base, job string, from, to int64) (*analysis.Report, error) {
	rep, err := getJSON[analysis.Report](ctx, fmt.Sprintf("%s/api/v1/jobs/%s/report?from=%d&to=%d", base, job, from, to), "report")
	if err != nil {
		return nil, err
	}
	if len(rep.Groups) == 0 {
		return nil, fmt.Errorf("report of job %s has no role group", job)
	}
	return rep, nil
}

// FetchGreyhound asks the server for the job's Greyhound report.
func FetchGreyhound(ctx context.Context, base, job string) (*analysis.GreyhoundReport, error) {
	return getJSON[analysis.GreyhoundReport](ctx, fmt.Sprintf("%s/api/v1/jobs/%s/greyhound", base, job), "the greyhound report")
}

// StatusError is a server's answer other than 200: its status, and the
// server's last line in the message.
type StatusError struct {
	Code int
	msg  string
}

func (e *StatusError) Error() string { return e.msg }

// getJSON GETs url and decodes its 200 answer; another status is a
// *StatusError quoting the server's last line.
func getJSON[T any](ctx context.Context, url, what string) (*T, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, &StatusError{Code: resp.StatusCode, msg: fmt.Sprintf("GET %s: %s: %s", url, resp.Status, lastLine(string(body)))}
	}
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", what, err)
	}
	return &v, nil
}
