package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/store"
)

// capturePoll is how often -wait asks for the capture's state (a package
// variable so tests can shrink it).
var capturePoll = 2 * time.Second

// captureFinished reports whether the capture will change no more (KAIR
// Feature 2: it ends complete, partial, expired or cancelled). A state
// this client does not know counts as finished: the report decides.
func captureFinished(c *store.Capture) bool { return !c.State.Open() }

// runCapture triggers a KAIR capture by hand (Feature 2), lists a job's
// captures, or shows one's report.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("capture", "[flags] JOB", stderr)
	cf := addClientFlags(fs, "ingest (to trigger) or read (-list, -show)")
	asJSON := fs.Bool("json", false, "print the server's JSON (the capture, the list, or {capture, report})")
	steps := fs.Int("steps", 0, "sampled steps to record, 1–64 (default: the server's, 5)")
	every := fs.Int("every", 0, "record every K-th step (default 1: consecutive steps)")
	ranks := fs.String("ranks", "", "ranks to record, comma-separated (default: all ranks up to 16, else suspects and a random set of peers)")
	reason := fs.String("reason", "", "why, shown in the capture list")
	startStep := fs.Int64("start-step", -1, "first training step to record (default: a lead of ≥ 10 steps after the job's newest)")
	wait := fs.Duration("wait", 0, "wait up to this long for the ranks to upload, then print the KAIR report (e.g. 5m); with -show ID, for that capture")
	list := fs.Bool("list", false, "list the job's captures instead of starting one")
	show := fs.String("show", "", "print the KAIR report of this capture id (\"latest\": the newest with uploads) instead of starting one")
	cancel := fs.String("cancel", "", "cancel this capture id")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	job := fs.Arg(0)
	modes := 0
	for _, on := range []bool{*list, *show != "", *cancel != ""} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return usageError(stderr, "capture", errors.New("give at most one of -list, -show and -cancel"))
	}
	req := analysis.CaptureRequest{Reason: strings.TrimSpace(*reason)}
	var err error
	if req.Ranks, err = parseRankList(*ranks); err != nil {
		return usageError(stderr, "capture", err)
	}
	if flagWasSet(fs, "steps") {
		if err := checkRange("steps", *steps, 1, 64); err != nil {
			return usageError(stderr, "capture", err)
		}
		req.Steps = *steps
	}
	if flagWasSet(fs, "every") {
		if err := checkRange("every", *every, 1, 1<<20); err != nil {
			return usageError(stderr, "capture", err)
		}
		req.Every = *every
	}
	if flagWasSet(fs, "start-step") {
		if err := checkRange("start-step", *startStep, 0, 1<<48); err != nil {
			return usageError(stderr, "capture", err)
		}
		req.StartStep = startStep
	}
	if len(req.Reason) > 1024 {
		return usageError(stderr, "capture", fmt.Errorf("-reason: %d bytes, at most 1024", len(req.Reason)))
	}
	if *wait < 0 {
		return usageError(stderr, "capture", fmt.Errorf("-wait must be ≥ 0, got %v", *wait))
	}
	c, err := cf.client(time.Minute)
	if err != nil {
		return err
	}
	c.maxBody = 256 << 20
	base := "/api/v1/jobs/" + url.PathEscape(job)
	switch {
	case *list:
		return listCaptures(ctx, c, base, job, *asJSON, stdout)
	case *cancel != "":
		raw, _, err := c.do(ctx, http.MethodDelete, base+"/captures/"+url.PathEscape(*cancel), "", nil)
		if err != nil {
			return err
		}
		return printCapture(stdout, raw, *asJSON)
	case *show != "":
		id := *show
		if id == "latest" {
			id = ""
		}
		if *wait > 0 && id != "" {
			// Wait for an open capture (one started elsewhere: the UI,
			// the auto trigger, an earlier run) before its report.
			raw, _, err := c.do(ctx, http.MethodGet, base+"/captures/"+url.PathEscape(id), "", nil)
			if err != nil {
				return err
			}
			var cv store.Capture
			if err := json.Unmarshal(raw, &cv); err != nil {
				return fmt.Errorf("decoding capture %s: %w", id, err)
			}
			if cv.ID == "" {
				cv.ID = id
			}
			if cv.Job == "" {
				cv.Job = job
			}
			if _, err := waitCapture(ctx, c, base, &cv, *wait, stderr); err != nil {
				return err
			}
		}
		return showKAIR(ctx, c, base, id, *asJSON, stdout)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	raw, _, err := c.do(ctx, http.MethodPost, base+"/captures", "application/json", bytes.NewReader(body))
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusConflict {
		return fmt.Errorf("%w (laggard capture -list %s shows it; wait for its report with -show ID -wait 5m, or -cancel ID)", err, job)
	}
	if err != nil {
		return err
	}
	var cv store.Capture
	if err := json.Unmarshal(raw, &cv); err != nil || cv.ID == "" {
		return fmt.Errorf("decoding the capture: %v", orErr(err, "no id"))
	}
	if *wait == 0 {
		if err := printCapture(stdout, raw, *asJSON); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "the ranks record when they reach step %d; then: laggard capture -show %s %s\n", cv.StartStep, cv.ID, job)
		}
		return nil
	}
	fmt.Fprintf(stderr, "laggard capture: %s\n", captureLine(&cv))
	final, err := waitCapture(ctx, c, base, &cv, *wait, stderr)
	if err != nil {
		return err
	}
	if len(final.Uploaded) < 2 {
		return fmt.Errorf("capture %s ended %s with %d rank(s) uploaded; KAIR compares ≥ 2 ranks%s", final.ID, final.State, len(final.Uploaded), failedText(final))
	}
	return showKAIR(ctx, c, base, final.ID, *asJSON, stdout)
}

// waitCapture polls the capture until it is finished or wait runs out,
// telling stderr each time its state or upload count changes.
func waitCapture(ctx context.Context, c *sysomClient, base string, cv *store.Capture, wait time.Duration, stderr io.Writer) (*store.Capture, error) {
	deadline := time.Now().Add(wait)
	id, job := cv.ID, cv.Job
	stopped := func(err error) error {
		return fmt.Errorf("stopped waiting (%w); capture %s goes on on the server: laggard capture -show %s %s", err, id, id, job)
	}
	last := captureLine(cv)
	for !captureFinished(cv) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("capture %s is still %s after %v (%d/%d ranks uploaded); it goes on on the server: laggard capture -show %s %s", cv.ID, cv.State, wait, len(cv.Uploaded), len(cv.Ranks), cv.ID, cv.Job)
		}
		t := time.NewTimer(min(capturePoll, time.Until(deadline)+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, stopped(ctx.Err())
		case <-t.C:
		}
		raw, _, err := c.do(ctx, http.MethodGet, base+"/captures/"+url.PathEscape(cv.ID), "", nil)
		if err != nil && ctx.Err() != nil {
			return nil, stopped(ctx.Err())
		}
		if err != nil {
			return nil, err
		}
		next := new(store.Capture)
		if err := json.Unmarshal(raw, next); err != nil {
			return nil, fmt.Errorf("decoding capture %s: %w", cv.ID, err)
		}
		if next.ID == "" {
			next.ID = cv.ID
		}
		cv = next
		if l := captureLine(cv); l != last {
			fmt.Fprintf(stderr, "laggard capture: %s\n", l)
			last = l
		}
	}
	return cv, nil
}

// showKAIR fetches and prints a capture's KAIR report (id "" = the
// server's default: the newest capture with uploads).
func showKAIR(ctx context.Context, c *sysomClient, base, id string, asJSON bool, stdout io.Writer) error {
	q := url.Values{}
	if id != "" {
		q.Set("capture", id)
	}
	path := base + "/kair"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	raw, _, err := c.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return err
	}
	if asJSON {
		return writeIndented(stdout, raw)
	}
	var ans analysis.KairAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("decoding the KAIR report: %w", err)
	}
	if ans.Capture != nil {
		fmt.Fprintf(stdout, "job %s · %s\n\n", ans.Capture.Job, captureLine(ans.Capture))
	}
	return render.KAIR(stdout, ans.Report)
}

func listCaptures(ctx context.Context, c *sysomClient, base, job string, asJSON bool, stdout io.Writer) error {
	raw, _, err := c.do(ctx, http.MethodGet, base+"/captures", "", nil)
	if err != nil {
		return err
	}
	if asJSON {
		return writeIndented(stdout, raw)
	}
	var ans struct {
		Captures []store.Capture `json:"captures"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil {
		return fmt.Errorf("decoding the capture list: %w", err)
	}
	if len(ans.Captures) == 0 {
		_, err := fmt.Fprintf(stdout, "job %s has no captures (start one: laggard capture %s)\n", job, job)
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\tstate\ttrigger\tcreated\tsteps\tuploaded\treason\n")
	for _, cv := range ans.Captures {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", cv.ID, cv.State, cv.Trigger, nsDate(cv.CreatedNS), stepsText(&cv), len(cv.Uploaded), len(cv.Ranks), oneLine(cv.Reason, 60))
	}
	return tw.Flush()
}

// printCapture prints one capture answer: indented JSON, or its line.
func printCapture(w io.Writer, raw []byte, asJSON bool) error {
	if asJSON {
		return writeIndented(w, raw)
	}
	var cv store.Capture
	if err := json.Unmarshal(raw, &cv); err != nil {
		return fmt.Errorf("decoding the capture: %w", err)
	}
	_, err := fmt.Fprintf(w, "%s\n", captureLine(&cv))
	return err
}

// captureLine is one capture in a line: id, state, plan, progress.
func captureLine(cv *store.Capture) string {
	s := fmt.Sprintf("capture %s %s (%s", cv.ID, orDash(string(cv.State)), orDash(cv.Trigger))
	if cv.Reason != "" {
		s += ": " + oneLine(cv.Reason, 80)
	}
	s += fmt.Sprintf(") · %s · ranks %s · %d fetched, %d uploaded", stepsText(cv), rankList(cv.Ranks), len(cv.Fetched), len(cv.Uploaded))
	if len(cv.Failed) > 0 {
		s += fmt.Sprintf(", %d failed", len(cv.Failed))
	}
	if cv.DeadlineNS > 0 && !captureFinished(cv) {
		s += " · deadline " + nsTime(cv.DeadlineNS) + " UTC"
	}
	if cv.Incarnation > 0 {
		s += fmt.Sprintf(" · incarnation %d", cv.Incarnation)
	}
	if cv.Note != "" {
		s += " · " + oneLine(cv.Note, 120)
	}
	return s
}

func stepsText(cv *store.Capture) string {
	every := ""
	if cv.Every > 1 {
		every = fmt.Sprintf(" every %d", cv.Every)
	}
	return fmt.Sprintf("%d steps%s from step %d", cv.Steps, every, cv.StartStep)
}

// failedText lists the ranks' reported errors, if any.
func failedText(cv *store.Capture) string {
	if len(cv.Failed) == 0 {
		return ""
	}
	keys := make([]string, 0, len(cv.Failed))
	for k := range cv.Failed {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("rank %s: %s", k, oneLine(cv.Failed[k], 120)))
	}
	return "; failed: " + strings.Join(parts, "; ")
}

// rankList prints ranks compactly: [0 1 2 3] or [0 … 63] (64 ranks).
func rankList(r []int) string {
	if len(r) <= 8 {
		return fmt.Sprint(r)
	}
	return fmt.Sprintf("[%d %d … %d] (%d ranks)", r[0], r[1], r[len(r)-1], len(r))
}

// parseRankList reads "0,1,5" ("" → nil: the server's default).
func parseRankList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > maxTraceRank {
			return nil, fmt.Errorf("-ranks: %q is not a rank (want e.g. -ranks 0,3)", strings.TrimSpace(f))
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("-ranks: rank %d given twice", n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

func nsDate(ns int64) string {
	if ns <= 0 {
		return "—"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05")
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func orErr(err error, msg string) string {
	if err != nil {
		return err.Error()
	}
	return msg
}
