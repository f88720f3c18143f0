package greyhound

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/collective"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata expectations and golden files")

// Scenario files (one per paper figure): blocks of "> command args"
// followed by the expected output up to a blank line.
//
//	> ring 0 1 2 3            Fig. 10 ring passes
//	> tree 0 1 2 3 4 5        Fig. 10 tree passes
//	> period A B C A B C …    Fig. 8: period of a call sequence (tokens = symbols)
//	> compare g0=10 g1=10 …   Fig. 9: one comparable cluster, exec ms per group
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			blocks := strings.Split(strings.TrimSpace(string(b)), "\n\n")
			for bi, blk := range blocks {
				lines := strings.Split(blk, "\n")
				ci := 0
				for ci < len(lines) && !strings.HasPrefix(lines[ci], "> ") {
					out.WriteString(lines[ci] + "\n") // comments
					ci++
				}
				if ci == len(lines) {
					out.WriteString("\n")
					continue
				}
				cmd := strings.TrimPrefix(lines[ci], "> ")
				want := strings.Join(lines[ci+1:], "\n")
				got := strings.TrimRight(runScenario(t, cmd), "\n")
				if got != want && !*rewrite {
					t.Errorf("%s block %d: %s\ngot:\n%s\nwant:\n%s", f, bi, cmd, got, want)
				}
				out.WriteString(lines[ci] + "\n" + got + "\n")
				if bi < len(blocks)-1 {
					out.WriteString("\n")
				}
			}
			if *rewrite {
				os.WriteFile(f, []byte(out.String()), 0o644)
			}
		})
	}
}

func runScenario(t *testing.T, cmd string) string {
	f := strings.Fields(cmd)
	var b strings.Builder
	ints := func() []int {
		var rs []int
		for _, s := range f[1:] {
			v, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			rs = append(rs, v)
		}
		return rs
	}
	switch f[0] {
	case "ring", "tree":
		passes := RingPasses(ints())
		if f[0] == "tree" {
			passes = TreePasses(ints())
		}
		for i, p := range passes {
			fmt.Fprintf(&b, "pass %d:", i)
			for _, l := range p {
				fmt.Fprintf(&b, " %d→%d", l.Src, l.Dst)
			}
			b.WriteString("\n")
		}
	case "period":
		var calls []collective.Call
		for rep := range 40 {
			for i, tok := range f[1:] {
				e := t0 + int64(rep)*100e6 + int64(i)*1e6
				calls = append(calls, collective.Call{Rank: 0, Comm: tok[:1], Op: collective.AllReduce, Bytes: int64(len(tok)) + int64(tok[0]), Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1000, Step: -1})
			}
		}
		s, err := IterationTimes(calls, DefaultConfig())
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "period %d acf %.3f iterations %d median %.1f ms\n", s.Period, s.ACF, len(s.Iters), s.Iters[len(s.Iters)/2].MS)
	case "compare":
		var calls []collective.Call
		var comms []collective.Comm
		for gi, kv := range f[1:] {
			name, v, _ := strings.Cut(kv, "=")
			ms, _ := strconv.ParseFloat(v, 64)
			comms = append(comms, collective.Comm{ID: name, Size: 2, Ranks: []int{2 * gi, 2*gi + 1}})
			for seq := range 5 {
				for r := range 2 {
					e := t0 + int64(seq)*1e9
					calls = append(calls, collective.Call{Rank: 2*gi + r, Comm: name, Seq: int64(seq), Op: collective.AllReduce, Bytes: 25 << 20,
						Peer: -1, Root: -1, EnterNS: e, ReturnNS: e + 1000, DevStartNS: e, DevEndNS: e + int64(ms*1e6), Step: -1})
				}
			}
		}
		for _, cl := range CompareGroups(calls, comms, DefaultConfig()) {
			fmt.Fprintf(&b, "cluster %s %d bytes size %d median %.2f ms comparable=%v\n", cl.Op, cl.Bytes, cl.Size, cl.MedianMS, cl.Comparable)
			for _, m := range cl.Members {
				fmt.Fprintf(&b, "  %s ranks %v exec %.2f ratio %.3f degraded=%v\n", m.Comm, m.Ranks, m.ExecMS, m.Ratio, m.Degraded)
			}
		}
		for _, g := range Suspects(CompareGroups(calls, comms, DefaultConfig())) {
			fmt.Fprintf(&b, "suspect %s %v\n", g.Comm, g.Ranks)
		}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	return b.String()
}
