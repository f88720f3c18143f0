package sysom

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/laggard-dev/laggard/internal/signal/osstat"
	"github.com/laggard-dev/laggard/internal/signal/stack"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata expectations and golden files")

// Scenario files (one per §5.4 case, plus negative controls). Lines
// without "> " build the input, in order; "> cmd" lines run a command
// and are followed by its expected output up to a blank line.
//
//	group ID RANKS                         a communication group ("0-7", "0,2,4")
//	calls COMM ranks=R n=N [late=r:ms,…] [gpulate=r:ms,…] [offset=r:ms,…]
//	      [jitter=MS] [iter=MS] [mode=exit|entry] [seed=S]
//	                                       N instances; late: host-side lateness, gpulate: the
//	                                       collective kernel starts late (a slow GPU), offset:
//	                                       the host clock's offset; exit: device brackets
//	clear calls                            drop the calls so far
//	stack RANKS COUNT f1;f2;…              a current stack, root first (k: kernel, py: python,
//	                                       sym: symbol, @module)
//	base RANKS COUNT f1;f2;…               a baseline stack
//	jitter SEED FRAC                       scale every current stack count by 1 ± FRAC
//	sample SEED                            redraw every current profile multinomially (sampling noise)
//	gpu RANKS KERNEL COUNT MS / gpubase …  GPU kernel time per rank
//	os NODE NAME [rank=RANKS] [cpu=C] [dev=D] V / osbase …   OS points on NODE
//	iter NOW_MS BASE_MS                    median iteration times
//	config KEY=VALUE …                     override Config fields (json names)
//
//	> analyze                              the report, rendered
//	> golden FILE                          the report as JSON, compared with testdata/FILE
//	> flame RANK / > diff RANK_A RANK_B    a flame / differential tree
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
			sc := newScenario()
			var out strings.Builder
			blocks := strings.Split(strings.TrimSpace(string(b)), "\n\n")
			for bi, blk := range blocks {
				lines := strings.Split(blk, "\n")
				ci := 0
				for ci < len(lines) && !strings.HasPrefix(lines[ci], "> ") {
					out.WriteString(lines[ci] + "\n")
					if l := strings.TrimSpace(lines[ci]); l != "" && !strings.HasPrefix(l, "#") {
						if err := sc.setup(l); err != nil {
							t.Fatalf("%s block %d: %q: %v", f, bi, l, err)
						}
					}
					ci++
				}
				if ci < len(lines) {
					cmd := strings.TrimPrefix(lines[ci], "> ")
					want := strings.Join(lines[ci+1:], "\n")
					got := strings.TrimRight(sc.run(t, cmd), "\n")
					if got != want && !*rewrite {
						t.Errorf("%s block %d: %s\ngot:\n%s\nwant:\n%s", f, bi, cmd, got, want)
					}
					out.WriteString(lines[ci] + "\n" + got + "\n")
				}
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

func (sc *scenario) setup(line string) error {
	f := strings.Fields(line)
	switch f[0] {
	case "group":
		rs, err := ranksSpec(f[2])
		if err != nil {
			return err
		}
		sc.in.Groups = append(sc.in.Groups, Group{ID: f[1], Ranks: rs})
	case "calls":
		a := kv(f[2:])
		rs, err := ranksSpec(a["ranks"])
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(a["n"])
		late, err1 := rankMS(a["late"])
		gl, err2 := rankMS(a["gpulate"])
		off, err3 := rankMS(a["offset"])
		if err := firstErr(err1, err2, err3); err != nil {
			return err
		}
		jit, _ := strconv.ParseFloat(a["jitter"], 64)
		iter := 100.0
		if v, ok := a["iter"]; ok {
			iter, _ = strconv.ParseFloat(v, 64)
		}
		seed, _ := strconv.ParseUint(a["seed"], 10, 64)
		sc.in.Calls = append(sc.in.Calls, genCalls(f[1], rs, n, late, gl, off, jit, iter, a["mode"] != "entry", seed)...)
	case "clear":
		sc.in.Calls = nil
	case "stack", "base":
		rs, err := ranksSpec(f[1])
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return err
		}
		rest := strings.TrimSpace(strings.SplitN(line, " ", 4)[3])
		var frames []stack.Func
		for _, s := range strings.Split(rest, ";") {
			frames = append(frames, frame(s))
		}
		m := sc.cur
		if f[0] == "base" {
			m = sc.base
		}
		for _, r := range rs {
			sc.prof(m, r).add(frames, n)
		}
	case "jitter":
		seed, _ := strconv.ParseUint(f[1], 10, 64)
		frac, _ := strconv.ParseFloat(f[2], 64)
		sc.jitterProfiles(seed, frac)
	case "sample":
		seed, _ := strconv.ParseUint(f[1], 10, 64)
		sc.resample(seed)
	case "gpu", "gpubase":
		rs, err := ranksSpec(f[1])
		if err != nil {
			return err
		}
		cnt, _ := strconv.ParseInt(f[3], 10, 64)
		ms, _ := strconv.ParseFloat(f[4], 64)
		for _, r := range rs {
			k := GPUKernel{Rank: r, Name: f[2], Count: cnt, TotalMs: ms}
			if f[0] == "gpu" {
				sc.in.GPU = append(sc.in.GPU, k)
			} else {
				sc.in.GPUBase = append(sc.in.GPUBase, k)
			}
		}
	case "os", "osbase":
		p := osstat.Point{Name: f[2], Rank: -1, CPU: -1}
		a := kv(f[3 : len(f)-1])
		ranks := []int{-1}
		if v, ok := a["rank"]; ok {
			var err error
			if ranks, err = ranksSpec(v); err != nil {
				return err
			}
		}
		if v, ok := a["cpu"]; ok {
			p.CPU, _ = strconv.Atoi(v)
		}
		p.Device = a["dev"]
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return err
		}
		p.Value = v
		for _, r := range ranks {
			p.Rank = r
			if f[0] == "os" {
				sc.os[f[1]] = append(sc.os[f[1]], p)
			} else {
				sc.osb[f[1]] = append(sc.osb[f[1]], p)
			}
		}
	case "iter":
		sc.in.IterMs, _ = strconv.ParseFloat(f[1], 64)
		sc.in.IterBaseMs, _ = strconv.ParseFloat(f[2], 64)
	case "config":
		b, _ := json.Marshal(sc.cfg)
		m := map[string]any{}
		json.Unmarshal(b, &m)
		for k, v := range kv(f[1:]) {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return err
			}
			m[k] = x
		}
		b, _ = json.Marshal(m)
		if err := json.Unmarshal(b, &sc.cfg); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown setup command %q", f[0])
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (sc *scenario) run(t *testing.T, cmd string) string {
	f := strings.Fields(cmd)
	in := sc.input()
	switch f[0] {
	case "analyze":
		rep, err := Analyze(in, sc.cfg)
		if err != nil {
			return "error: " + err.Error()
		}
		return render(rep)
	case "golden":
		rep, err := Analyze(in, sc.cfg)
		if err != nil {
			return "error: " + err.Error()
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		path := filepath.Join("testdata", f[1])
		if *rewrite {
			os.WriteFile(path, b, 0o644)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error()
		}
		if !bytes.Equal(b, want) {
			return "report differs from " + path + " (run with -rewrite after checking the change)"
		}
		return "ok"
	case "flame":
		r, _ := strconv.Atoi(f[1])
		return renderTree(FlameTree(in.Profiles[r]), false)
	case "diff":
		a, _ := strconv.Atoi(f[1])
		b, _ := strconv.Atoi(f[2])
		return renderTree(DiffTree(in.Profiles[a], in.Profiles[b]), true)
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}
