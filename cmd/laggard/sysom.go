package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/laggard-dev/laggard/internal/agent/elfinfo"
	"github.com/laggard-dev/laggard/internal/analysis"
	"github.com/laggard-dev/laggard/internal/render"
	"github.com/laggard-dev/laggard/internal/symbolize"
)

// sysomClient is the API calls of the greyhound, sysom, symbols and profile
// commands.
type sysomClient struct {
	base, token string
	hc          *http.Client
	maxBody     int64 // the largest answer read (default 1 GiB)
}

// clientFlags are -server and -token-file, shared by the commands here.
type clientFlags struct{ server, tokenFile *string }

func addClientFlags(fs *flag.FlagSet, scope string) clientFlags {
	return clientFlags{
		server:    fs.String("server", envOr("LAGGARD_SERVER", "http://127.0.0.1:7070"), "laggard server URL (default $LAGGARD_SERVER or http://127.0.0.1:7070)"),
		tokenFile: fs.String("token-file", "", "`FILE` holding a bearer token with the "+scope+" scope (default $LAGGARD_TOKEN)"),
	}
}

func (f clientFlags) client(timeout time.Duration) (*sysomClient, error) {
	base, err := url.Parse(strings.TrimRight(*f.server, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("-server %q: want an http(s) URL", *f.server)
	}
	tok := os.Getenv("LAGGARD_TOKEN")
	if *f.tokenFile != "" {
		b, err := os.ReadFile(*f.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("-token-file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	return &sysomClient{base: base.String(), token: tok, hc: &http.Client{Timeout: timeout}}, nil
}

// httpError is a non-2xx answer, with the server's message.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// do sends one request; a non-2xx answer is an error with the server's
// message. It returns the body and the status.
func (c *sysomClient) do(ctx context.Context, method, path, ctype string, body io.Reader) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, err
		}
		// Every client command: say which server could not be reached
		// and how to name another, not only the dial error.
		var ue *url.Error
		if errors.As(err, &ue) {
			if ue.Timeout() {
				return nil, 0, fmt.Errorf("the laggard server at %s did not answer %s %s in %v: %w", c.base, method, path, c.hc.Timeout, ue.Err)
			}
			err = ue.Err
		}
		return nil, 0, fmt.Errorf("cannot reach the laggard server at %s: %w (is laggard serve running there? -server or $LAGGARD_SERVER names another)", c.base, err)
	}
	defer resp.Body.Close()
	limit := c.maxBody
	if limit <= 0 {
		limit = 1 << 30
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		hint := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			hint = " (give a token: -token-file or $LAGGARD_TOKEN)"
		}
		return b, resp.StatusCode, &httpError{status: resp.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s%s", method, path, resp.Status, msg, hint)}
	}
	return b, resp.StatusCode, nil
}

// parseTimeFlag reads a time as Unix nanoseconds or RFC 3339 ("" → 0).
func parseTimeFlag(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("-%s %q: want Unix nanoseconds or an RFC 3339 time (2025-07-01T12:00:00Z)", name, v)
	}
	return t.UnixNano(), nil
}

// windowQuery turns -from/-to/-last into from_ns/to_ns.
func windowQuery(q url.Values, from, to string, last time.Duration, now time.Time) error {
	f, err := parseTimeFlag("from", from)
	if err != nil {
		return err
	}
	t, err := parseTimeFlag("to", to)
	if err != nil {
		return err
	}
	if last > 0 {
		if f != 0 || t != 0 {
			return errors.New("use either -last or -from/-to")
		}
		t = now.UnixNano()
		f = t - int64(last)
	}
	if f != 0 {
		q.Set(analysis.ParamFromNS, strconv.FormatInt(f, 10))
	}
	if t != 0 {
		q.Set(analysis.ParamToNS, strconv.FormatInt(t, 10))
	}
	return nil
}

// jobArg is -job, or the one positional argument.
func jobArg(fs *flag.FlagSet, job string) (string, error) {
	switch {
	case job != "" && fs.NArg() == 0:
		return job, nil
	case job == "" && fs.NArg() == 1:
		return fs.Arg(0), nil
	}
	fs.Usage()
	return "", errUsage
}

// runSysom prints a job's SysOM-AI report from a running server.
func runSysom(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sysom", "[flags] -job JOB", stderr)
	cf := addClientFlags(fs, "read")
	job := fs.String("job", "", "the job id (or give it as the argument)")
	asJSON := fs.Bool("json", false, "print the report as JSON (the API's GET /api/v1/jobs/{id}/sysom)")
	from := fs.String("from", "", "window start: Unix ns or RFC 3339 (default: the server's latest 5 minutes)")
	to := fs.String("to", "", "window end (exclusive)")
	last := fs.Duration("last", 0, "analyse this last span before now (instead of -from/-to)")
	baseFrom := fs.String("base-from", "", "baseline window start (default: the job's first steady window)")
	baseTo := fs.String("base-to", "", "baseline window end")
	inc := fs.String("incarnation", "", "a restarted job's launch to read: N, or \"all\" (default: the newest)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := jobArg(fs, *job)
	if err != nil {
		return err
	}
	c, err := cf.client(2 * time.Minute)
	if err != nil {
		return err
	}
	q := url.Values{}
	if err := windowQuery(q, *from, *to, *last, time.Now()); err != nil {
		return err
	}
	for _, p := range []struct{ flag, param, v string }{{"base-from", analysis.ParamBaseFromNS, *baseFrom}, {"base-to", analysis.ParamBaseToNS, *baseTo}} {
		n, err := parseTimeFlag(p.flag, p.v)
		if err != nil {
			return err
		}
		if n != 0 {
			q.Set(p.param, strconv.FormatInt(n, 10))
		}
	}
	if err := setIncarnation(q, *inc); err != nil {
		return err
	}
	raw, _, err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+url.PathEscape(id)+"/sysom?"+q.Encode(), "", nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeIndented(stdout, raw)
	}
	var rep analysis.SysomReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		return fmt.Errorf("decoding the report: %w", err)
	}
	fmt.Fprintf(stdout, "job %s · ", id)
	return render.Sysom(stdout, &rep)
}

// runSymbols manages the central symbol store (§3.4): `add` uploads ELF
// files the server lacks, or adds them to a local data directory.
func runSymbols(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("symbols", "add [flags] FILE...", stderr)
	cf := addClientFlags(fs, "ingest")
	dataDir := fs.String("data", "", "add to this server data directory's symbol store (DATA/symbols) instead of uploading")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 2 || fs.Arg(0) != "add" {
		fs.Usage()
		return errUsage
	}
	files := fs.Args()[1:]
	if *dataDir != "" {
		st, err := symbolize.OpenStore(strings.TrimRight(*dataDir, "/")+"/symbols", 0)
		if err != nil {
			return err
		}
		for _, f := range files {
			id, err := st.AddFile(f)
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			fmt.Fprintf(stdout, "%s  %s  added\n", id, f)
		}
		return nil
	}
	c, err := cf.client(10 * time.Minute)
	if err != nil {
		return err
	}
	for _, f := range files {
		id, status, err := uploadSymbols(ctx, c, f)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		fmt.Fprintf(stdout, "%s  %s  %s\n", id, f, status)
	}
	return nil
}

// symbolChunk is one upload part (the server takes at most 64 MiB).
const symbolChunk = 64 << 20

// uploadSymbols sends an ELF file the server does not have, in parts.
func uploadSymbols(ctx context.Context, c *sysomClient, path string) (id, status string, err error) {
	ef, err := elf.Open(path)
	if err != nil {
		return "", "", err
	}
	id, err = elfinfo.BuildID(ef)
	ef.Close()
	if err != nil {
		return "", "", err
	}
	if id == "" {
		return "", "", errors.New("no GNU Build-ID note (.note.gnu.build-id): the server keys symbols by it; link with --build-id")
	}
	base := "/api/v1/symbols/" + url.PathEscape(id)
	if _, code, err := c.do(ctx, http.MethodHead, base, "", nil); err == nil {
		return id, "already on the server", nil
	} else if code != http.StatusNotFound {
		return id, "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return id, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return id, "", err
	}
	parts := (fi.Size() + symbolChunk - 1) / symbolChunk
	for i := int64(0); i < parts; i++ {
		n := min(symbolChunk, fi.Size()-i*symbolChunk)
		q := fmt.Sprintf("%s?part=%d&parts=%d", base, i, parts)
		if _, _, err := c.do(ctx, http.MethodPost, q, "application/octet-stream", io.NewSectionReader(f, i*symbolChunk, n)); err != nil {
			return id, "", err
		}
	}
	return id, fmt.Sprintf("uploaded (%d bytes, %d part(s))", fi.Size(), parts), nil
}

// runProfile imports outside profiles (pprof, collapsed stacks: perf,
// py-spy, Parca) and exports a window's profile.
func runProfile(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("profile", "import|export [flags] [FILE]", stderr)
	cf := addClientFlags(fs, "ingest (import) or read (export)")
	job := fs.String("job", "", "the job id (required)")
	rank := fs.Int("rank", -2, "the rank (import: samples without a rank label; export: whose profile)")
	group := fs.String("group", "", "export: a communicator id, or \"all\", instead of -rank")
	format := fs.String("format", "", "pprof or collapsed (import default: from the file; export default: pprof)")
	from := fs.String("from", "", "import: the profile's start (needed for collapsed); export: window start (Unix ns or RFC 3339)")
	to := fs.String("to", "", "import: the profile's end; export: window end")
	last := fs.Duration("last", 0, "export: the last span before now (instead of -from/-to)")
	out := fs.String("o", "", "export: write to this file (default stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() < 1 || *job == "" {
		fs.Usage()
		return errUsage
	}
	c, err := cf.client(5 * time.Minute)
	if err != nil {
		return err
	}
	f, err := parseTimeFlag("from", *from)
	if err != nil {
		return err
	}
	t, err := parseTimeFlag("to", *to)
	if err != nil {
		return err
	}
	jobPath := "/api/v1/jobs/" + url.PathEscape(*job)
	q := url.Values{}
	if *format != "" {
		if *format != "pprof" && *format != "collapsed" {
			return fmt.Errorf("-format must be pprof or collapsed, got %q", *format)
		}
		q.Set("format", *format)
	}
	switch fs.Arg(0) {
	case "import":
		if fs.NArg() != 2 || *group != "" {
			fs.Usage()
			return errUsage
		}
		if *rank >= -1 {
			q.Set("rank", strconv.Itoa(*rank))
		}
		if (f == 0) != (t == 0) {
			return errors.New("give both -from and -to, or neither")
		}
		if f != 0 {
			q.Set("start_ns", strconv.FormatInt(f, 10))
			q.Set("end_ns", strconv.FormatInt(t, 10))
		}
		body, err := os.ReadFile(fs.Arg(1))
		if err != nil {
			return err
		}
		// The body's type says its format when -format does not: gzip or
		// protobuf is pprof, anything else collapsed text (folded stacks).
		ctype := "text/x-collapsed"
		if fm := q.Get("format"); fm == "pprof" || fm == "" && len(body) >= 2 && (body[0] == 0x1f && body[1] == 0x8b || body[0] == 0x0a) {
			ctype = "application/octet-stream"
			q.Set("format", "pprof")
		} else {
			q.Set("format", "collapsed")
		}
		raw, _, err := c.do(ctx, http.MethodPost, jobPath+"/profiles?"+q.Encode(), ctype, bytes.NewReader(body))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "imported %s: %s\n", fs.Arg(1), bytes.TrimSpace(raw))
		return nil
	case "export":
		if fs.NArg() != 1 {
			fs.Usage()
			return errUsage
		}
		switch {
		case *group != "" && *rank >= -1:
			return errors.New("give -rank or -group, not both")
		case *group != "":
			q.Set("group", *group)
		case *rank >= -1:
			q.Set("rank", strconv.Itoa(*rank))
		default:
			return errors.New("export needs -rank R or -group G")
		}
		if err := windowQuery(q, *from, *to, *last, time.Now()); err != nil {
			return err
		}
		raw, _, err := c.do(ctx, http.MethodGet, jobPath+"/profile?"+q.Encode(), "", nil)
		if err != nil {
			return err
		}
		if *out == "" {
			_, err = stdout.Write(raw)
			return err
		}
		if err := os.WriteFile(*out, raw, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "laggard profile: wrote %s (%d bytes)\n", *out, len(raw))
		return nil
	}
	fs.Usage()
	return errUsage
}
