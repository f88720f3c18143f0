// Command tables scores the change-point detectors of Greyhound §7.2 on the
// labelled corpus of internal/sim (Tables 3 and 4: accuracy, FPR, FNR with
// counts), measures event recall and online reaction time, and the ACF
// iteration-time error per parallel layout (Fig. 13).
//
//	go run ./eval/greyhound/cmd/tables -out eval/greyhound/results
//
// See eval/greyhound/README.md for the definitions.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/laggard-dev/laggard/internal/sim"
	"github.com/laggard-dev/laggard/internal/stats"
)

func main() {
	out := flag.String("out", "eval/greyhound/results", "output directory")
	seed := flag.Uint64("seed", sim.GreyhoundSeed, "corpus seed (the committed tables use the default)")
	tol := flag.Int("tol", 20, "event matching tolerance before the onset, iterations")
	quick := flag.Bool("quick", false, "a small corpus (smoke test; does not write table files)")
	acfIters := flag.Int("acf-iters", 400, "iterations per rank in the ACF evaluation")
	abl := flag.Int("ablation", 60, "series per class in the nuisance ablation (0: skip)")
	real := flag.String("real", "eval/greyhound/results/real", "directory of recorded runs (realrun.py) to score; empty: skip")
	sw := flag.String("sweep", "3,5,7,10,12,15,20,10n,10@30,10~1e-4,10~1e-5,10~1e-7,5~0,10~0,12~0,15~0,20~0,10n~0,10@30~0", "BOCD+V verification settings to sweep: W, Wn (no hold test), W@S (wall floor S seconds), W~α (the noise-aware test's α; ~0 off); empty: skip")
	flag.Parse()
	ws, err := parseWs(*sw)
	if err == nil {
		err = run(*out, *seed, *tol, *quick, *acfIters, *abl, *real, os.Stdout, ws...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tables:", err)
		os.Exit(1)
	}
}

// Counts is one (class, detector) cell of Tables 3–4.
type Counts struct {
	Class, Detector         string
	TP, FP, TN, FN          int
	Events, EventsHit, Near int // event recall: hit anywhere in [onset−tol, relief); Near: within ±tol of the onset
	ReactIters, ReactS      []float64
	Elapsed                 time.Duration
	FPNuisances             map[string]int
}

func (c *Counts) Total() int     { return c.TP + c.FP + c.TN + c.FN }
func (c *Counts) Positives() int { return c.TP + c.FN }
func (c *Counts) Negatives() int { return c.TN + c.FP }

func pct(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return 100 * float64(a) / float64(b)
}

// EventResult is one positive event scored by one detector.
type EventResult struct {
	Series, Class, Detector, Shape, Cause string
	Index                                 int
	Loss, DurationS                       float64
	Onset, Relief                         int // in scored coordinates (warm-up removed)
	Hit                                   bool
	CPIndex                               int     // first change point in [onset−tol, relief), −1 if none
	ReactIters                            int     // online: iterations after the onset until a prefix run reports it, −1 if never
	ReactS                                float64 // wall seconds from the onset to the end of that iteration
}

// run writes the tables; sweepWs are the BOCD+V verification settings to
// sweep (none: skip).
func run(outDir string, seed uint64, tol int, quick bool, acfIters, abl int, realDir string, stdout io.Writer, sweepWs ...SweepPoint) error {
	t0 := time.Now()
	corpus := sim.DefaultGreyhoundCorpus()
	corpus.Seed = seed
	if quick {
		corpus.Comp, corpus.CompPos, corpus.Comm, corpus.CommPos = 40, 6, 20, 10
	}
	series := corpus.Generate()
	tGen := time.Since(t0)
	dets := detectors()
	var cells []*Counts
	var events []EventResult
	var perSeries [][]string
	for _, class := range []string{sim.ClassComputation, sim.ClassCommunication} {
		for _, d := range dets {
			c, ev, rows := scoreClass(series, class, d, tol)
			cells, events, perSeries = append(cells, c), append(events, ev...), append(perSeries, rows...)
		}
	}
	tDet := time.Since(t0) - tGen
	acf, acfErr := acfEval(acfIters, seed)
	if acfErr != nil {
		return acfErr
	}
	var ab []AblationRow
	ablDets := dets[:3] // the paper's three rows
	if abl > 0 {
		ab = ablation(seed, abl, abl, ablDets)
	}
	md := renderMarkdown(corpus, series, cells, acf, tol, time.Since(t0), tGen, tDet)
	if abl > 0 {
		md += ablationMarkdown(ab, ablDets)
	}
	sw := sweep(series, sweepWs, tol)
	if len(sw) > 0 {
		md += sweepMarkdown(sw)
	}
	var realRows []RealRow
	if realDir != "" {
		var err error
		if realRows, err = scoreReal(realDir, dets, 5); err != nil {
			return err
		}
		if len(realRows) > 0 {
			md += realMarkdown(realRows, 5)
		}
		ra, err := realACF(realDir)
		if err != nil {
			return err
		}
		if len(ra) > 0 {
			md += realACFMarkdown(ra)
		}
	}
	fmt.Fprint(stdout, md)
	if quick {
		return nil
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	files := map[string]func(io.Writer) error{
		"table3.tsv":   func(w io.Writer) error { return writeTable(w, cells, sim.ClassComputation) },
		"table4.tsv":   func(w io.Writer) error { return writeTable(w, cells, sim.ClassCommunication) },
		"tables.md":    func(w io.Writer) error { _, err := io.WriteString(w, md); return err },
		"reaction.tsv": func(w io.Writer) error { return writeEvents(w, events) },
		"series.tsv": func(w io.Writer) error {
			return writeRows(w, []string{"series", "class", "detector", "positive", "flagged", "changepoints", "indexes"}, perSeries)
		},
		"corpus.jsonl":  func(w io.Writer) error { return writeCorpus(w, series) },
		"acf_error.tsv": func(w io.Writer) error { return writeACF(w, acf) },
		"ablation.tsv":  func(w io.Writer) error { return writeAblation(w, ab, ablDets) },
		"real.tsv":      func(w io.Writer) error { return writeReal(w, realRows) },
		"sweep.tsv":     func(w io.Writer) error { return writeSweep(w, sw) },
	}
	for name, fn := range files {
		if err := writeFile(filepath.Join(outDir, name), fn); err != nil {
			return err
		}
	}
	return nil
}

// scoreClass scores detector d on the series of one class: the cell of
// Tables 3–4, the per-event results and the per-series rows.
func scoreClass(series []sim.GreyhoundSeries, class string, d stats.Detector, tol int) (*Counts, []EventResult, [][]string) {
	c := &Counts{Class: class, Detector: d.Name(), FPNuisances: map[string]int{}}
	var events []EventResult
	var perSeries [][]string
	start := time.Now()
	var idx []int
	for i, s := range series {
		if s.Class == class {
			idx = append(idx, i)
		}
	}
	res := parallel(len(idx), func(j int) seriesResult {
		s := series[idx[j]]
		x := scored(s)
		r := seriesResult{cps: d.Detect(x)}
		for k, e := range s.Events {
			r.events = append(r.events, scoreEvent(d, s, k, e, x, r.cps, tol))
		}
		return r
	})
	for j, r := range res {
		s := series[idx[j]]
		flagged := len(r.cps) > 0 // §7.2: any reported change point flags the series
		switch {
		case s.Positive && flagged:
			c.TP++
		case s.Positive:
			c.FN++
		case flagged:
			c.FP++
			for _, n := range s.Nuisances {
				c.FPNuisances[n]++
			}
		default:
			c.TN++
		}
		cpIdx := make([]string, len(r.cps))
		for i, cp := range r.cps {
			cpIdx[i] = fmt.Sprint(cp.Index)
		}
		perSeries = append(perSeries, []string{s.ID, class, d.Name(), fmt.Sprint(s.Positive), fmt.Sprint(flagged),
			fmt.Sprint(len(r.cps)), strings.Join(cpIdx, " ")})
		for _, e := range r.events {
			c.Events++
			if e.Hit {
				c.EventsHit++
				if abs(e.CPIndex-e.Onset) <= tol {
					c.Near++
				}
			}
			if e.ReactIters >= 0 {
				c.ReactIters = append(c.ReactIters, float64(e.ReactIters))
				c.ReactS = append(c.ReactS, e.ReactS)
			}
			events = append(events, e)
		}
	}
	c.Elapsed = time.Since(start)
	return c, events, perSeries
}

// scored is what a tracker sees: the iteration times in milliseconds after
// the job's warm-up (Greyhound tracks a running job; the first iterations
// of allocation and graph capture are not a fail-slow).
func scored(s sim.GreyhoundSeries) []float64 {
	x := make([]float64, len(s.Iters)-s.Warmup)
	for i := range x {
		x[i] = s.Iters[s.Warmup+i] * 1e3
	}
	return x
}

func scoreEvent(d stats.Detector, s sim.GreyhoundSeries, k int, e sim.FailSlow, x []float64, cps []stats.ChangePoint, tol int) EventResult {
	on, rel := e.Onset-s.Warmup, e.Relief-s.Warmup
	r := EventResult{Series: s.ID, Class: s.Class, Detector: d.Name(), Shape: e.Shape, Cause: e.Cause, Index: k,
		Loss: e.Loss, DurationS: e.DurationS, Onset: on, Relief: rel, CPIndex: -1, ReactIters: -1}
	for _, cp := range cps {
		if cp.Index >= on-tol && cp.Index < rel && cp.Rise() {
			r.Hit, r.CPIndex = true, cp.Index
			break
		}
	}
	if !r.Hit {
		return r
	}
	// Online reaction: the smallest k such that the detector, having seen
	// iterations up to onset+k, has reported a change point at or after
	// onset−tol. The run starts 1000 iterations before the onset (the
	// detectors' memory is far shorter). An Online detector is fed point
	// by point and the decision time read off directly; any other is run
	// on growing prefixes.
	lo := max(0, on-1000)
	maxK := rel - on - 1
	k0 := -1
	if od, ok := d.(stats.Online); ok {
		st := od.NewStream()
		for i := lo; i < len(x) && k0 < 0; i++ {
			for _, cp := range st.Push(x[i]) {
				if cp.Index+lo >= on-tol && cp.Index+lo < rel && cp.Rise() {
					k0 = max(i-on, 0) // 0: decided inside the tolerance before the onset
					break
				}
			}
			if i-on > maxK {
				break
			}
		}
	} else {
		k0 = prefixReaction(d, x, lo, on, maxK, tol)
	}
	if k0 >= 0 {
		r.ReactIters = k0
		for i := on; i <= on+k0; i++ {
			r.ReactS += x[i] / 1e3
		}
	}
	return r
}

// prefixReaction runs d on x[lo:on+k+1] for growing k: linear for the
// first 16, then exponential + binary search (detection is monotone in k
// up to rare flips, which can only make the reported k later).
func prefixReaction(d stats.Detector, x []float64, lo, on, maxK, tol int) int {
	seen := func(k int) bool {
		for _, cp := range d.Detect(x[lo : on+k+1]) {
			if cp.Index+lo >= on-tol && cp.Index+lo < on+maxK+1 && cp.Rise() {
				return true
			}
		}
		return false
	}
	for k := 0; k <= min(15, maxK); k++ {
		if seen(k) {
			return k
		}
	}
	if maxK <= 15 {
		return -1
	}
	a, b := 15, 32
	for b < maxK && !seen(b) {
		a, b = b, b*2
	}
	b = min(b, maxK)
	if !seen(b) {
		return -1
	}
	for b-a > 1 {
		m := (a + b) / 2
		if seen(m) {
			b = m
		} else {
			a = m
		}
	}
	return b
}

type seriesResult struct {
	cps    []stats.ChangePoint
	events []EventResult
}

// parallel runs fn(0..n−1) on GOMAXPROCS workers and returns the results
// in index order (the tables do not depend on scheduling).
func parallel[T any](n int, fn func(int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Round(q*float64(len(s)-1))))]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

var paperName = map[string]string{"window": "SlideWindow", "bocd": "BOCD", "bocd+v": "BOCD+V", "bocd+v-mean": "BOCD+V (means)"}

func label(d string) string {
	if n, ok := paperName[d]; ok {
		return n
	}
	return d
}

func cell(a, b int) string {
	if b == 0 {
		return "n/a (0/0)"
	}
	return fmt.Sprintf("%.1f (%d/%d)", pct(a, b), a, b)
}

func writeTable(w io.Writer, cells []*Counts, class string) error {
	rows := [][]string{}
	for _, c := range cells {
		if c.Class != class {
			continue
		}
		rows = append(rows, []string{label(c.Detector), cell(c.TP+c.TN, c.Total()), cell(c.FP, c.Negatives()), cell(c.FN, c.Positives()),
			fmt.Sprint(c.TP + c.TN), fmt.Sprint(c.Total()), fmt.Sprint(c.FP), fmt.Sprint(c.Negatives()), fmt.Sprint(c.FN), fmt.Sprint(c.Positives()),
			fmt.Sprint(c.EventsHit), fmt.Sprint(c.Near), fmt.Sprint(c.Events),
			ff(quantile(c.ReactIters, 0.5)), ff(mean(c.ReactIters)), ff(quantile(c.ReactS, 0.5)), ff(mean(c.ReactS))})
	}
	return writeRows(w, []string{"algorithm", "accuracy", "fpr", "fnr", "correct", "series", "fp", "negatives", "fn", "positives",
		"events_hit", "events_near_onset", "events", "react_iters_p50", "react_iters_mean", "react_s_p50", "react_s_mean"}, rows)
}

func ff(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func writeEvents(w io.Writer, ev []EventResult) error {
	rows := make([][]string, len(ev))
	for i, e := range ev {
		rows[i] = []string{e.Series, e.Class, label(e.Detector), fmt.Sprint(e.Index), e.Cause, e.Shape, fmt.Sprintf("%.3f", e.Loss),
			fmt.Sprintf("%.0f", e.DurationS), fmt.Sprint(e.Onset), fmt.Sprint(e.Relief), fmt.Sprint(e.Hit), fmt.Sprint(e.CPIndex),
			fmt.Sprint(e.ReactIters), fmt.Sprintf("%.2f", e.ReactS)}
	}
	return writeRows(w, []string{"series", "class", "detector", "event", "cause", "shape", "loss", "duration_s", "onset", "relief",
		"hit", "cp_index", "react_iters", "react_s"}, rows)
}

func writeCorpus(w io.Writer, series []sim.GreyhoundSeries) error {
	enc := json.NewEncoder(w)
	for _, s := range series {
		type line struct {
			sim.GreyhoundSeries
			N int `json:"iterations"`
		}
		if err := enc.Encode(line{s, len(s.Iters)}); err != nil {
			return err
		}
	}
	return nil
}

func writeRows(w io.Writer, head []string, rows [][]string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, strings.Join(head, "\t"))
	for _, r := range rows {
		fmt.Fprintln(bw, strings.Join(r, "\t"))
	}
	return bw.Flush()
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
