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
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/analysis"
)

// runGreyhound prints a job's Greyhound report from a running server.
func runGreyhound(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("greyhound", "[flags] JOB", stderr)
	cf := addClientFlags(fs, "read")
	asJSON := fs.Bool("json", false, "print the report as JSON (docs/format/greyhound.md)")
	last := fs.Duration("last", 0, "analyse the calls of this last span (default: the server's window, 10m)")
	validate := fs.Bool("validate", false, "ask the controller to validate the job now (needs the ingest scope for the job)")
	inc := fs.String("incarnation", "", "which launch of a restarted job to read: a number, or all (default: the newest)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	job := fs.Arg(0)
	c, err := cf.client(time.Minute)
	if err != nil {
		return err
	}
	c.maxBody = 256 << 20
	if *validate {
		var out struct {
			Phase analysis.GreyhoundPhase `json:"phase"`
		}
		b, _, err := c.do(ctx, http.MethodPost, "/api/v1/jobs/"+url.PathEscape(job)+"/greyhound/validate", "", nil)
		if err != nil {
			return greyhoundHint(err)
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "laggard greyhound: validation requested (the controller was in %s)\n", out.Phase)
	}
	q := url.Values{}
	if *last > 0 {
		q.Set("last_s", strconv.FormatFloat(last.Seconds(), 'f', -1, 64))
	}
	if err := setIncarnation(q, *inc); err != nil {
		return err
	}
	raw, _, err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(job)+"/greyhound?"+q.Encode(), "", nil)
	if err != nil {
		return greyhoundHint(err)
	}
	if *asJSON {
		return writeIndented(stdout, raw)
	}
	var rep analysis.GreyhoundReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("decoding the report: %w", err)
	}
	return renderGreyhound(stdout, &rep)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// setIncarnation puts the -incarnation flag's value (a launch of a
// restarted job: N or all; "" the newest) on a report query, refusing a
// bad one before any request.
func setIncarnation(q url.Values, v string) error {
	if v == "" {
		return nil
	}
	q.Set(analysis.ParamIncarnation, v)
	if _, err := analysis.ParseIncarnation(q); err != nil {
		return fmt.Errorf("-incarnation: %w", err)
	}
	return nil
}

// greyhoundHint adds what a 404 from the Greyhound routes usually means.
func greyhoundHint(err error) error {
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusNotFound {
		return fmt.Errorf("%w (does the job send collective calls? laggard.init(collectives=True) or the NCCL shim)", err)
	}
	return err
}

// renderGreyhound prints the report for people: the verdict first, then
// the evidence in the order the controller used it (§4.1–4.3).
func renderGreyhound(w io.Writer, rep *analysis.GreyhoundReport) error {
	ew := &errWriter{w: w}
	p := ew.printf
	v := rep.Verdict
	p("Greyhound-Detect · job %s\n", rep.Job)
	if rep.IncarnationNote != "" {
		p("launch:     %s\n", rep.IncarnationNote)
	}
	p("verdict:    %s (%s confidence)%s — %s\n", v.Kind, v.Confidence, verdictWho(v), v.Text)
	if e := v.Explanation; e != nil && e.IncreaseMS > 0 {
		p("explains:   up to %.1f ms of the +%.1f ms per iteration (%.0f%%): %s\n", e.AccountedMS, e.IncreaseMS, 100*e.Frac, e.Basis)
	}
	it := rep.Iteration
	if it.Method == analysis.MethodACF {
		p("iteration:  %.1f ms median over %d iterations (ACF period %d calls on rank %d, ACF %.3f)", it.MedianMS, len(it.Series), it.Period, it.Rank, it.ACF)
		if it.TruthErrorPct != nil {
			p("; %.2f%% from the client's step times", *it.TruthErrorPct)
		}
		p("\n")
		if n := len(it.Series); n > 0 {
			k := max(0, n-5)
			var xs []string
			for _, s := range it.Series[k:] {
				xs = append(xs, fmt.Sprintf("%.1f", s.MS))
			}
			p("            latest: %s ms\n", strings.Join(xs, ", "))
		}
		if it.Note != "" {
			p("            %s\n", it.Note)
		}
	} else {
		p("iteration:  unknown (%s)\n", ghOrDash(it.Note))
	}
	t := rep.Telemetry
	p("telemetry:  %d calls from %d ranks, %d dropped", t.Calls, t.Ranks, t.Dropped)
	if t.Limited {
		p(" — limited: conclusions carry less weight")
	}
	p("\n")
	p("change points (%s):", rep.Detector)
	n := 0
	for _, c := range rep.ChangePoints {
		if c.Verified || rep.Detector != analysis.DetectorBOCDV {
			n++
			p("\n  %-6s iteration %d at %s: %.1f → %.1f ms (%+.0f%%, p=%.2f)", c.Kind, c.Index, nsTime(c.EndNS), c.BeforeMS, c.AfterMS, 100*c.Rel, c.Prob)
		}
	}
	if n == 0 {
		p(" none verified")
	}
	if d := len(rep.ChangePoints) - n; d > 0 {
		p("\n  (%d BOCD candidate(s) dropped by verification: < %.0f%% change)", d, 10.0)
	}
	p("\n")
	deg := 0
	for _, cl := range rep.Groups {
		if !cl.Comparable {
			continue
		}
		for _, m := range cl.Members {
			mark := " "
			if m.Degraded {
				mark, deg = "!", deg+1
			}
			p("  %s group %-20s %s %s ×%d ranks %v: %.2f ms (×%.2f of the cluster's healthy reference %.2f)\n", mark, m.Comm, cl.Op, ghBytes(cl.Bytes), cl.Size, m.Ranks, m.ExecMS, m.Ratio, cl.RefMS)
		}
	}
	if deg == 0 {
		p("groups:     no degraded group in %d cluster(s)\n", len(rep.Groups))
	}
	c := rep.Controller
	p("controller: %s since %s\n", c.Phase, nsTime(c.SinceNS))
	for _, tr := range c.History {
		p("  %s  %s → %s: %s\n", nsTime(tr.AtNS), tr.From, tr.To, tr.Reason)
	}
	for _, vr := range rep.Validation {
		p("validation %s (%s): %s\n", vr.ID, vr.State, vr.Verdict.Text)
		for _, g := range vr.GEMM {
			p("  GEMM rank %d: %.2f ms (×%.2f)%s\n", g.Rank, g.MS, g.Ratio, slowMark(g.Slow, g.Separated))
		}
		for _, l := range vr.Links {
			p("  link %d→%d: %.2f ms (×%.2f)%s\n", l.Src, l.Dst, l.MS, l.Ratio, slowMark(l.Slow, l.Separated))
		}
	}
	return ew.err
}

func verdictWho(v analysis.GreyhoundVerdict) string {
	var parts []string
	if len(v.Ranks) > 0 {
		parts = append(parts, fmt.Sprintf("rank(s) %v", v.Ranks))
	}
	for _, l := range v.Links {
		parts = append(parts, fmt.Sprintf("link %d→%d", l.Src, l.Dst))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

// slowMark marks a measurement judged slow, or one beyond the healthy
// ones only within their repetitions' noise.
func slowMark(slow, separated bool) string {
	switch {
	case slow:
		return "  ← slow"
	case !separated:
		return ""
	}
	return "  (stands out of the noise, but within the limit)"
}

func ghOrDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func nsTime(ns int64) string {
	if ns <= 0 {
		return "—"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}

func ghBytes(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// errWriter keeps the first write error so the renderer reads straight.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// writeIndented prints a server's JSON answer indented, for --json.
func writeIndented(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(w)
	return err
}
