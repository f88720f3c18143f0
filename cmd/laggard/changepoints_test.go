package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stepSeries writes a step,value CSV: 75 ms for 80 steps, then 112 ms.
func stepSeries(t *testing.T, header bool, jsonl bool) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	if header && !jsonl {
		b.WriteString("step,value\n")
	}
	for i := range 160 {
		v := 75.0
		if i >= 80 {
			v = 112
		}
		v *= 1 + 0.02*rng.NormFloat64()
		if jsonl {
			fmt.Fprintf(&b, "{\"step\": %d, \"value\": %.3f}\n", 1000+i, v)
		} else {
			fmt.Fprintf(&b, "%d,%.3f\n", 1000+i, v)
		}
	}
	name := "s.csv"
	if jsonl {
		name = "s.jsonl"
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestChangepointsCLI(t *testing.T) {
	for _, c := range []struct {
		name          string
		header, jsonl bool
		method        string
	}{
		{"csv", false, false, "bocdv"}, {"csv header", true, false, "bocdv"}, {"jsonl", false, true, "bocdv"},
		{"bocd", true, false, "bocd"}, {"window", true, false, "window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := stepSeries(t, c.header, c.jsonl)
			code, out, errs := runDone(t, "changepoints", "-method", c.method, p, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var res struct {
				Method       string
				Points       int
				ChangePoints []struct {
					Step  float64
					Kind  string
					Rel   float64
					Line  int
					Index int
				}
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err, out)
			}
			if res.Points != 160 || len(res.ChangePoints) == 0 {
				t.Fatalf("%+v", res)
			}
			first := res.ChangePoints[0]
			if first.Step < 1079 || first.Step > 1081 || first.Kind != "rise" || first.Rel < 0.3 {
				t.Errorf("first change %+v", first)
			}
			if c.method == "bocdv" && len(res.ChangePoints) != 1 {
				t.Errorf("bocd+v: %+v", res.ChangePoints)
			}
			// Human table.
			code, out, _ = runDone(t, "changepoints", p, "-method", c.method)
			if code != 0 || !strings.Contains(out, "change point(s) in 160 points") || !strings.Contains(out, "1080") {
				t.Errorf("table: %s", out)
			}
		})
	}
}

func TestChangepointsStdinAndErrors(t *testing.T) {
	p := stepSeries(t, true, false)
	b, _ := os.ReadFile(p)
	withStdin(t, b, func() {
		code, out, errs := runDone(t, "changepoints", "-")
		if code != 0 || !strings.Contains(out, "stdin: 1 change point(s)") {
			t.Errorf("stdin: %d %s %s", code, out, errs)
		}
	})
	dir := t.TempDir()
	for _, c := range []struct{ body, want string }{
		{"step,value\n1,2\n2,x\n", "f:3: value: \"x\" is not a number"},
		{"1,2\n1,3\n", "f:2: step 1 does not follow step 1"},
		{"1,2,3\n", "f:1: want two columns"},
		{"{\"step\":1}\n", "f:1: want {\"step\""},
		{"{\"step\":1,\"value\":2}\nnope\n", "f:2: not a JSON object"},
		{"# only a comment\n\n", "f: no data points"},
		{"1,NaN\n", "f:1: value: \"NaN\" is not finite"},
		{"a,b\nc,d\n", "f:2: step"},
	} {
		fp := filepath.Join(dir, "f")
		os.WriteFile(fp, []byte(c.body), 0o644)
		pts, err := readSeries(strings.NewReader(c.body), "f")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v (%v), want %q", c.body, err, pts, c.want)
		}
	}
	if code, _, errs := runDone(t, "changepoints", "-method", "nope", p); code == 0 || !strings.Contains(errs, "-method") {
		t.Errorf("bad method: %d %s", code, errs)
	}
	if code, _, _ := runDone(t, "changepoints"); code == 0 {
		t.Error("no file accepted")
	}
	if code, _, errs := runDone(t, "changepoints", filepath.Join(dir, "missing")); code == 0 || !strings.Contains(errs, "missing") {
		t.Errorf("missing file: %s", errs)
	}
	// Non-positive values switch BOCD to its linear scale instead of failing.
	neg := filepath.Join(dir, "neg.csv")
	var sb strings.Builder
	for i := range 100 {
		v := -5.0
		if i >= 50 {
			v = 5
		}
		fmt.Fprintf(&sb, "%d,%v\n", i, v+0.01*float64(i%3))
	}
	os.WriteFile(neg, []byte(sb.String()), 0o644)
	if code, out, errs := runDone(t, "changepoints", neg); code != 0 || !strings.Contains(out, "1 change point") {
		t.Errorf("negative values: %d %s %s", code, out, errs)
	}
}

func FuzzChangepointsReadSeries(f *testing.F) {
	f.Add([]byte("step,value\n1,2\n2,3\n"))
	f.Add([]byte("{\"step\":1,\"value\":2}\n{\"step\":2,\"value\":2.5}\n"))
	f.Add([]byte("# c\n1\t2\n2;3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		pts, err := readSeries(strings.NewReader(string(b)), "f")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		x := make([]float64, len(pts))
		for i, p := range pts {
			x[i] = p.Value
			if i > 0 && !(p.Step > pts[i-1].Step) {
				t.Fatal("steps not increasing")
			}
		}
		det, _ := changepointDetector("bocdv")
		det.Detect(x)
	})
}
