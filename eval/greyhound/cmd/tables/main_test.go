package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/sim"
)

// The quick corpus runs end to end and prints both tables in the paper's
// layout, every detector row, and the ACF table for every layout.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the detectors on a small corpus")
	}
	var b bytes.Buffer
	if err := run(t.TempDir(), sim.GreyhoundSeed, 20, true, 120, 0, "", &b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"Table 3:", "Table 4:", "| SlideWindow |", "| BOCD |", "| BOCD+V |", "| S | 1T4D |", "| M | 2T2D2P |"} {
		if !strings.Contains(md, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// Real-run scoring reads step,value CSVs with their labels, and a step in
// the middle is found by the window baseline.
func TestScoreReal(t *testing.T) {
	dir := t.TempDir()
	var csv strings.Builder
	csv.WriteString("step,value\n")
	for i := range 120 {
		v := 100.0 + float64(i%3)
		if i >= 40 && i < 80 {
			v *= 2
		}
		csv.WriteString(strings.Join([]string{strconv.Itoa(i), strconv.Itoa(int(v))}, ",") + "\n")
	}
	os.WriteFile(filepath.Join(dir, "x.csv"), []byte(csv.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "x.labels.json"), []byte(`{"scenario":"x","labels":{"onset":40,"relief":80}}`), 0o644)
	rows, err := scoreReal(dir, detectors(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(detectors()) {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if !r.Hit || r.Outside != 0 || r.ReactSteps < 0 {
			t.Errorf("%s: %+v", r.Detector, r)
		}
	}
	os.WriteFile(filepath.Join(dir, "y.csv"), []byte("step,value\n0,abc\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "y.labels.json"), []byte(`{"scenario":"y","labels":{"onset":1,"relief":2}}`), 0o644)
	if _, err := scoreReal(dir, detectors(), 5); err == nil || !strings.Contains(err.Error(), "y.csv:2") {
		t.Fatalf("bad value: err %v, want it to name y.csv:2", err)
	}
}
