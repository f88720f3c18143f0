package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/buildinfo"
)

// fixture returns the absolute path of a stagefile fixture, so tests may
// change directory.
func fixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("../../internal/wire/stagefile/testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// isReport reports whether out is the JSON report of the 3-rank fixture.
func isReport(out string) bool {
	var rep struct {
		JobID  string `json:"job_id"`
		Groups []struct {
			NumRanks int `json:"num_ranks"`
		} `json:"groups"`
	}
	return json.Unmarshal([]byte(out), &rep) == nil && rep.JobID == "fixture" && len(rep.Groups) == 1 && rep.Groups[0].NumRanks == 3
}

// runDone runs the CLI with an already cancelled context, so a server
// that starts shuts down at once instead of blocking the test.
func runDone(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// withStdin points os.Stdin at a file holding b while fn runs.
func withStdin(t *testing.T, b []byte, fn func()) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old := os.Stdin
	os.Stdin = f
	defer func() { os.Stdin = old }()
	fn()
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		args []string
		err  error // nil, flag.ErrHelp or errUsage
		pos  []string
		json bool
		last int
		job  string
	}{
		{args: []string{"f"}, pos: []string{"f"}},
		{args: []string{"f", "--json"}, pos: []string{"f"}, json: true},
		{args: []string{"--json", "f"}, pos: []string{"f"}, json: true},
		{args: []string{"a", "-last", "3", "b", "--job=x"}, pos: []string{"a", "b"}, last: 3, job: "x"},
		{args: []string{"a", "--last", "-5"}, pos: []string{"a"}, last: -5},
		{args: []string{"-last=-5", "a"}, pos: []string{"a"}, last: -5},
		{args: []string{"-", "-json"}, pos: []string{"-"}, json: true},
		{args: []string{"-json", "--", "-weird", "--last"}, pos: []string{"-weird", "--last"}, json: true},
		{args: []string{"-job", "--", "f"}, pos: []string{"f"}, job: "--"}, // a value, not the end of flags
		{args: []string{"-json=false", "f"}, pos: []string{"f"}},
		{args: []string{"f", "-json", "false"}, pos: []string{"f", "false"}, json: true}, // bool flags take no separate value
		{args: []string{}, pos: []string{}},
		{args: []string{"f", "-h"}, err: flag.ErrHelp},
		{args: []string{"--help", "f"}, err: flag.ErrHelp},
		{args: []string{"-help"}, err: flag.ErrHelp},
		{args: []string{"f", "-nope"}, err: errUsage},
		{args: []string{"f", "-last"}, err: errUsage},
		{args: []string{"-last", "x"}, err: errUsage},
		{args: []string{"---json"}, err: errUsage},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			fs := newFlagSet("analyze", "FILE", &out)
			asJSON := fs.Bool("json", false, "")
			last := fs.Int("last", 0, "")
			job := fs.String("job", "", "")
			err := parseFlags(fs, c.args)
			if c.err != nil {
				if !errors.Is(err, c.err) || !strings.Contains(out.String(), "Usage: laggard analyze") {
					t.Fatalf("err = %v, want %v with the usage; output:\n%s", err, c.err, out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v\n%s", err, out.String())
			}
			if !slices.Equal(fs.Args(), c.pos) || *asJSON != c.json || *last != c.last || *job != c.job {
				t.Fatalf("args %q json %v last %d job %q; want %q %v %d %q", fs.Args(), *asJSON, *last, *job, c.pos, c.json, c.last, c.job)
			}
		})
	}
}

// Flags after the file (`analyze FILE --json`) used to leave only usage.
func TestFlagsAnywhere(t *testing.T) {
	file := fixture(t, "sync_wait.jsonl")
	for _, args := range [][]string{
		{"analyze", file, "--json"},
		{"analyze", "--json", file},
		{"analyze", file, "-json", "-tau", "0.8"},
		{"analyze", "-json", "--", file},
		{"analyze", "-tau=0.8", file, "--json=true"},
	} {
		code, out, errs := runCLI(t, args...)
		if code != 0 || !isReport(out) {
			t.Errorf("laggard %q: exit %d, want a JSON report\nstdout: %.200s\nstderr: %s", args, code, out, errs)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	withStdin(t, b, func() {
		code, out, errs := runCLI(t, "analyze", "-", "--json")
		if code != 0 || !isReport(out) {
			t.Errorf("analyze - --json: exit %d\nstdout: %.200s\nstderr: %s", code, out, errs)
		}
	})
}

func TestHelpAndVersion(t *testing.T) {
	version := buildinfo.String() + "\n"
	cases := []struct {
		args     []string
		code     int
		inStdout []string
		inStderr []string
	}{
		{[]string{"help"}, 0, []string{"Commands:", "analyze ", "Examples:", "laggard help <command>"}, nil},
		{[]string{"--help"}, 0, []string{"Commands:"}, nil},
		{[]string{"-h"}, 0, []string{"Commands:"}, nil},
		{[]string{"help", "analyze"}, 0, []string{"Usage: laggard analyze", "-json", "-last", "Examples:", "--json | jq"}, nil},
		{[]string{"help", "serve"}, 0, []string{"Usage: laggard serve", "DATA_DIR", "-addr", "-queue"}, nil},
		{[]string{"help", "demo"}, 0, []string{"Usage: laggard demo", "-fault"}, nil},
		{[]string{"help", "version"}, 0, []string{"Usage: laggard version"}, nil},
		{[]string{"help", "help"}, 0, []string{"Usage: laggard help [COMMAND]"}, nil},
		{[]string{"help", "nope"}, 2, nil, []string{`laggard help: unknown command "nope"`, "Commands:"}},
		{[]string{"help", "analyze", "serve"}, 2, nil, []string{"Usage: laggard help"}},
		{[]string{"analyze", "-h"}, 0, nil, []string{"Usage: laggard analyze", "-json"}},
		{[]string{"analyze", "x.jsonl", "--help"}, 0, nil, []string{"Usage: laggard analyze"}},
		{[]string{"serve", "-h"}, 0, nil, []string{"Usage: laggard serve"}},
		{[]string{"demo", "--help"}, 0, nil, []string{"Usage: laggard demo"}},
		{[]string{"version", "-h"}, 0, nil, []string{"Usage: laggard version"}},
		{[]string{"version", "extra"}, 2, nil, []string{"Usage: laggard version"}},
		{[]string{"frobnicate"}, 2, nil, []string{`unknown command "frobnicate"`, "Commands:"}},
		{[]string{"--frobnicate"}, 2, nil, []string{`unknown flag`, `"--frobnicate"`, "Commands:"}},
		{nil, 2, nil, []string{"Usage:", "Commands:"}},
	}
	for _, c := range cases {
		code, out, errs := runCLI(t, c.args...)
		ok := code == c.code
		for _, w := range c.inStdout {
			ok = ok && strings.Contains(out, w)
		}
		for _, w := range c.inStderr {
			ok = ok && strings.Contains(errs, w)
		}
		if !ok {
			t.Errorf("laggard %q: exit %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errs)
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}, {"-version"}} {
		if code, out, _ := runCLI(t, args...); code != 0 || out != version {
			t.Errorf("laggard %q: exit %d, %q; want %q", args, code, out, version)
		}
	}
}

// Bad numbers and wrong arity are explained, name the flag and the value,
// and never panic.
func TestInputErrors(t *testing.T) {
	file := fixture(t, "sync_wait.jsonl")
	t.Chdir(t.TempDir()) // a server that did start must not litter the package directory
	noPy := []string{"-python", "/nonexistent/python", "-keep=false", "-addr", "127.0.0.1:0"}
	cases := []struct {
		args     []string
		code     int
		inStderr []string
	}{
		{[]string{"analyze", "-last", "-5", file}, 1, []string{"laggard analyze: -last", `"-5"`}},
		{[]string{"analyze", file, "-last"}, 2, []string{"flag needs an argument: -last", "Usage: laggard analyze"}},
		{[]string{"analyze", "-tau", "x", file}, 1, []string{"-tau", `"x"`}},
		{[]string{"analyze", "-json", "x", file}, 1, []string{"laggard analyze: "}}, // "x" is a file: bool flags take no separate value
		{[]string{"analyze"}, 2, []string{"Usage: laggard analyze"}},
		{[]string{"serve", "-queue", "0"}, 1, []string{"-queue must be in [1, 1048576], got 0"}},
		{[]string{"serve", "-queue", "-3"}, 1, []string{"-queue must be in [1, 1048576], got -3"}},
		{[]string{"serve", "-max-body", "-1"}, 1, []string{"-max-body must be in [1024, 4294967296], got -1"}},
		{[]string{"serve", "-addr", ""}, 1, []string{"-addr must not be empty"}},
		{[]string{"serve", "a", "b"}, 2, []string{"Usage: laggard serve"}},
		{[]string{"serve", "-data", ""}, 1, []string{"data directory must not be empty"}},
		{append([]string{"demo", "-world", "1"}, noPy...), 1, []string{"-world must be in [2, 64], got 1"}},
		{append([]string{"demo", "-world", "100"}, noPy...), 1, []string{"-world must be in [2, 64], got 100"}},
		{append([]string{"demo", "-steps", "0", "-warmup", "0"}, noPy...), 1, []string{"-steps must be in [5, 100000], got 0", "-warmup must be in [1, 10000], got 0"}},
		{append([]string{"demo", "-delay-ms", "-1"}, noPy...), 1, []string{"-delay-ms must be in [0, 60000], got -1"}},
		{append([]string{"demo", "-delay-ms", "NaN"}, noPy...), 1, []string{"-delay-ms must be in [0, 60000], got NaN"}},
		{append([]string{"demo", "-rank", "9"}, noPy...), 1, []string{"-rank must be in [0, 3], got 9"}},
		{append([]string{"demo", "-seed", "-1"}, noPy...), 1, []string{"-seed must be in [0, 2147483647], got -1"}},
		{append([]string{"demo", "-queue", "0"}, noPy...), 1, []string{"-queue must be in [1, 1048576], got 0"}},
		{append([]string{"demo", "extra"}, noPy...), 2, []string{"Usage: laggard demo"}},
	}
	for _, c := range cases {
		code, out, errs := runDone(t, c.args...)
		ok := code == c.code && !strings.Contains(errs, "goroutine ")
		for _, w := range c.inStderr {
			ok = ok && strings.Contains(errs, w)
		}
		if !ok {
			t.Errorf("laggard %q: exit %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errs)
		}
	}
}

func TestCheckRange(t *testing.T) {
	cases := []struct {
		err  error
		want string // "" = no error
	}{
		{checkRange("last", int64(5), 0, 10), ""},
		{checkRange("last", int64(-5), 0, 10), "-last must be in [0, 10], got -5"},
		{checkRange("-tau", 1.5, 0, 1), "-tau must be in [0, 1], got 1.5"},
		{checkRange("tau", math.NaN(), 0, 1), "-tau must be in [0, 1], got NaN"},
		{checkRange("queue", 0, 1, 8), "-queue must be in [1, 8], got 0"},
		{checkMin("last", -1, 0), "-last must be >= 0, got -1"},
		{checkMin("delay", math.Inf(1), 0), "-delay must be >= 0, got +Inf"},
		{checkMin("last", 0, 0), ""},
	}
	for i, c := range cases {
		if (c.err == nil) != (c.want == "") || c.err != nil && c.err.Error() != c.want {
			t.Errorf("case %d: %v, want %q", i, c.err, c.want)
		}
	}
}

func TestServeDataDir(t *testing.T) {
	t.Chdir(t.TempDir())
	dir := filepath.Join(t.TempDir(), "store")
	code, _, errs := runDone(t, "serve", "-addr", "127.0.0.1:0", dir)
	if code != 0 || !strings.Contains(errs, "data="+dir) {
		t.Fatalf("serve DIR: exit %d, stderr should name %s:\n%s", code, dir, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) == 0 {
		t.Fatalf("serve DIR stored nothing in %s", dir)
	}
	if _, err := os.Stat("laggard-data"); err == nil {
		t.Fatal("serve DIR used the default directory")
	}
	cases := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"serve", "-addr", "127.0.0.1:0", "-data", dir}, 0, "data=" + dir},
		{[]string{"serve", "-addr", "127.0.0.1:0", "-data", dir, dir + "/"}, 0, "data=" + dir},
		{[]string{"serve", "-addr", "127.0.0.1:0", "-data", dir, dir + "2"}, 1, "two data directories: -data " + dir + " and argument " + dir + "2"},
		{[]string{"serve", "-addr", "127.0.0.1:0", "rel"}, 0, "data=" + filepath.Join(mustGetwd(t), "rel")},
	}
	for _, c := range cases {
		code, _, errs := runDone(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.inStderr) {
			t.Errorf("laggard %q: exit %d (want %d), stderr lacks %q:\n%s", c.args, code, c.code, c.inStderr, errs)
		}
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// An address the user chose that is taken fails with a hint; the default
// one taken moves to a free port and says so.
func TestListenAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	hint := "is another laggard running? use -addr 127.0.0.1:0 for any free port"
	old := defaultAddr
	defaultAddr = addr
	defer func() { defaultAddr = old }()
	noPy := []string{"-python", "/nonexistent/python", "-keep=false"}
	cases := []struct {
		args     []string
		code     int
		inStderr []string
		notIn    string
	}{
		{append([]string{"demo", "-addr", addr}, noPy...), 1, []string{"-addr " + addr, hint}, "no Python"},
		{append([]string{"demo"}, noPy...), 1, []string{"the default address " + addr + " is taken; serving on 127.0.0.1:", "no Python"}, hint},
		{[]string{"serve", "-addr", addr, t.TempDir()}, 1, []string{"-addr " + addr, hint}, ""},
		{[]string{"serve", t.TempDir()}, 1, []string{"-addr " + addr, hint}, ""},
		{[]string{"serve", "-addr", "not-an-address", t.TempDir()}, 1, []string{"cannot listen on -addr not-an-address"}, hint},
	}
	for _, c := range cases {
		code, out, errs := runDone(t, c.args...)
		ok := code == c.code && (c.notIn == "" || !strings.Contains(errs, c.notIn))
		for _, w := range c.inStderr {
			ok = ok && strings.Contains(errs, w)
		}
		if !ok {
			t.Errorf("laggard %q: exit %d (want %d)\nstdout: %s\nstderr: %s", c.args, code, c.code, out, errs)
		}
	}
}

// A gzip-compressed stage matrix, named .gz or not, and piped on stdin.
func TestAnalyzeGzip(t *testing.T) {
	raw, err := os.ReadFile(fixture(t, "sync_wait.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	dir := t.TempDir()
	for _, name := range []string{"run.jsonl.gz", "run.jsonl"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCLI(t, "analyze", p, "--json")
		if code != 0 || !isReport(out) {
			t.Errorf("analyze %s: exit %d\nstdout: %.200s\nstderr: %s", name, code, out, errs)
		}
	}
	withStdin(t, z.Bytes(), func() {
		if code, out, errs := runCLI(t, "analyze", "--json", "-"); code != 0 || !isReport(out) {
			t.Errorf("gzip on stdin: exit %d\nstdout: %.200s\nstderr: %s", code, out, errs)
		}
	})
	cut := filepath.Join(dir, "cut.jsonl.gz")
	if err := os.WriteFile(cut, z.Bytes()[:z.Len()-10], 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI(t, "analyze", cut); code != 1 || !strings.Contains(errs, "corrupt or truncated gzip") {
		t.Errorf("truncated gzip: exit %d, stderr: %s", code, errs)
	}
}
