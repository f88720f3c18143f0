package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/laggard-dev/laggard/internal/stats"
)

// maxSeriesPoints bounds a changepoints input (16 M points, 128 MiB of
// values), so a runaway file fails with a message instead of exhausting
// memory.
const maxSeriesPoints = 1 << 24

// seriesPoint is one step,value row.
type seriesPoint struct {
	Step  float64
	Value float64
	Line  int
}

func runChangepoints(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("changepoints", "[flags] FILE  (step,value CSV with optional header, or JSONL {\"step\":…,\"value\":…}; - for stdin)", stderr)
	method := fs.String("method", "bocdv", "detector: bocdv (BOCD with verification, Greyhound §4.2), bocd (no verification) or window (sliding window vs median)")
	asJSON := fs.Bool("json", false, "print the change points as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	det, err := changepointDetector(*method)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	name := path
	if path == "-" {
		name = "stdin"
	}
	pts, err := readSeries(r, name)
	if err != nil {
		return err
	}
	x := make([]float64, len(pts))
	positive := true
	for i, p := range pts {
		x[i] = p.Value
		positive = positive && p.Value > 0
	}
	if !positive { // BOCD's log scale needs positive values
		switch d := det.(type) {
		case stats.BOCD:
			d.Linear = true
			det = d
		case stats.Verified:
			b := stats.DefaultBOCD()
			b.Linear = true
			d.Inner = b
			det = d
		}
	}
	cps := det.Detect(x)
	type out struct {
		Index  int     `json:"index"`
		Step   float64 `json:"step"`
		Line   int     `json:"line"`
		Kind   string  `json:"kind"`
		Before float64 `json:"before"`
		After  float64 `json:"after"`
		Rel    float64 `json:"rel"`
		Score  float64 `json:"score"`
	}
	res := struct {
		Method       string `json:"method"`
		Points       int    `json:"points"`
		ChangePoints []out  `json:"changepoints"`
	}{Method: det.Name(), Points: len(x), ChangePoints: []out{}}
	for _, c := range cps {
		k := "rise"
		if !c.Rise() {
			k = "fall"
		}
		res.ChangePoints = append(res.ChangePoints, out{Index: c.Index, Step: pts[c.Index].Step, Line: pts[c.Index].Line, Kind: k,
			Before: c.Before, After: c.After, Rel: c.RelChange(), Score: c.Score})
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%s: %d change point(s) in %d points (%s)\n", name, len(cps), len(x), det.Name())
	if len(cps) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tindex\tkind\tbefore\tafter\tchange\tscore\t")
	for _, c := range res.ChangePoints {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.4g\t%.4g\t%+.1f%%\t%.3f\t\n", strconv.FormatFloat(c.Step, 'g', -1, 64), c.Index, c.Kind, c.Before, c.After, 100*c.Rel, c.Score)
	}
	return tw.Flush()
}

func changepointDetector(method string) (stats.Online, error) {
	switch strings.ToLower(method) {
	case "bocdv", "bocd+v":
		return stats.DefaultVerified(), nil
	case "bocd":
		return stats.DefaultBOCD(), nil
	case "window":
		return stats.DefaultSlidingWindow(), nil
	}
	return nil, fmt.Errorf("-method: want bocdv, bocd or window, got %q", method)
}

// readSeries reads a step,value series: JSON lines when the first
// non-blank line starts with '{', otherwise CSV (comma, tab or semicolon
// separated) whose first line may be a header. Blank lines and lines
// starting with '#' are skipped. Steps must increase strictly; errors
// name the line.
func readSeries(r io.Reader, name string) ([]seriesPoint, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var pts []seriesPoint
	line := 0
	jsonl, decided, header := false, false, false
	for sc.Scan() {
		line++
		s := bytes.TrimSpace(sc.Bytes())
		if len(s) == 0 || s[0] == '#' {
			continue
		}
		if !decided {
			jsonl, decided = s[0] == '{', true
		}
		var p seriesPoint
		p.Line = line
		if jsonl {
			var v struct {
				Step  *json.Number `json:"step"`
				Value *json.Number `json:"value"`
			}
			dec := json.NewDecoder(bytes.NewReader(s))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				return nil, fmt.Errorf("%s:%d: not a JSON object: %v", name, line, err)
			}
			if v.Step == nil || v.Value == nil {
				return nil, fmt.Errorf("%s:%d: want {\"step\":…,\"value\":…}", name, line)
			}
			var err error
			if p.Step, err = finiteNumber(string(*v.Step)); err != nil {
				return nil, fmt.Errorf("%s:%d: step: %v", name, line, err)
			}
			if p.Value, err = finiteNumber(string(*v.Value)); err != nil {
				return nil, fmt.Errorf("%s:%d: value: %v", name, line, err)
			}
		} else {
			f := strings.FieldsFunc(string(s), func(r rune) bool { return r == ',' || r == '\t' || r == ';' })
			if len(f) != 2 {
				return nil, fmt.Errorf("%s:%d: want two columns step,value, got %d", name, line, len(f))
			}
			st, err1 := finiteNumber(f[0])
			v, err2 := finiteNumber(f[1])
			if len(pts) == 0 && !header && err1 != nil && err2 != nil {
				header = true // the first row names the columns
				continue
			}
			if err1 != nil {
				return nil, fmt.Errorf("%s:%d: step: %v", name, line, err1)
			}
			if err2 != nil {
				return nil, fmt.Errorf("%s:%d: value: %v", name, line, err2)
			}
			p.Step, p.Value = st, v
		}
		if n := len(pts); n > 0 && !(p.Step > pts[n-1].Step) {
			return nil, fmt.Errorf("%s:%d: step %v does not follow step %v (line %d): steps must increase", name, line, p.Step, pts[n-1].Step, pts[n-1].Line)
		}
		if len(pts) >= maxSeriesPoints {
			return nil, fmt.Errorf("%s:%d: more than %d points", name, line, maxSeriesPoints)
		}
		pts = append(pts, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %v", name, line+1, err)
	}
	if len(pts) == 0 {
		return nil, errors.New(name + ": no data points")
	}
	return pts, nil
}

// finiteNumber parses a finite float.
func finiteNumber(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", strings.TrimSpace(s))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not finite", strings.TrimSpace(s))
	}
	return v, nil
}
