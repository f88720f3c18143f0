package kair

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json")

// Golden reports of the hand-built scenarios (the JSON the API and CLI
// serve): regenerate with go test -run Golden -update after a deliberate
// change, and review the diff.
func TestGoldenReports(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func([][]op)
	}{
		{"victim_allreduce_4ranks", func(p [][]op) { p[2][2].dur *= 3 }},
		{"late_edge_4ranks", func(p [][]op) { p[1][3].gap = 150_000 }},
		{"uniform_slow_4ranks", func(p [][]op) {
			for r := range p {
				p[r][2].dur *= 5
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			progs := uniform(4)
			c.mod(progs)
			rep := mustAnalyze(t, simulate(progs, true), DefaultConfig())
			got, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", c.name+".golden.json")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("report differs from %s:\n%s", path, got)
			}
		})
	}
}
