package main

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/laggard-dev/laggard/internal/engine/greyhound"
	"github.com/laggard-dev/laggard/internal/signal/collective"
	"github.com/laggard-dev/laggard/internal/stats"
)

// RealRow is one recorded run (eval/greyhound/realrun.py) scored by one
// detector: the series is positive by construction (one injection), so
// the questions are whether the detector finds the injection, how soon,
// and whether it also reports change points outside it (false alarms on a
// real, noisy machine).
type RealRow struct {
	Scenario, Detector   string
	Steps, Onset, Relief int
	Hit                  bool
	CPIndex, ReactSteps  int
	ReactS               float64
	Outside              int // change points before onset−tol or after relief+tol
	CPs                  []int
}

type realLabels struct {
	Scenario string `json:"scenario"`
	Labels   *struct {
		Onset  int `json:"onset"`
		Relief int `json:"relief"`
	} `json:"labels"`
	Collectives string `json:"collectives"`
}

func scoreReal(dir string, dets []stats.Detector, tol int) ([]RealRow, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.labels.json"))
	slices.Sort(files)
	var rows []RealRow
	for _, lf := range files {
		var lab realLabels
		b, err := os.ReadFile(lf)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &lab); err != nil {
			return nil, fmt.Errorf("%s: %w", lf, err)
		}
		if lab.Labels == nil {
			continue
		}
		x, err := readSeries(strings.TrimSuffix(lf, ".labels.json") + ".csv")
		if err != nil {
			return nil, err
		}
		on, rel := lab.Labels.Onset, lab.Labels.Relief
		for _, d := range dets {
			cps := d.Detect(x)
			r := RealRow{Scenario: lab.Scenario, Detector: d.Name(), Steps: len(x), Onset: on, Relief: rel, CPIndex: -1, ReactSteps: -1}
			for _, cp := range cps {
				r.CPs = append(r.CPs, cp.Index)
				switch {
				case cp.Index >= on-tol && cp.Index < rel && cp.Rise() && !r.Hit:
					r.Hit, r.CPIndex = true, cp.Index
				case cp.Index >= on-tol && cp.Index <= rel+tol:
				default:
					r.Outside++
				}
			}
			if od, ok := d.(stats.Online); ok && r.Hit {
				st := od.NewStream()
				for i := 0; i < len(x) && r.ReactSteps < 0; i++ {
					for _, cp := range st.Push(x[i]) {
						if cp.Index >= on-tol && cp.Index < rel && cp.Rise() {
							r.ReactSteps = max(i-on, 0)
							break
						}
					}
				}
				for i := on; r.ReactSteps >= 0 && i <= on+r.ReactSteps && i < len(x); i++ {
					r.ReactS += x[i] / 1e3
				}
			}
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// readSeries reads a step,value CSV (value in ms), in step order.
func readSeries(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd := csv.NewReader(f)
	var x []float64
	for line := 1; ; line++ {
		rec, err := rd.Read()
		if err == io.EOF {
			return x, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if line == 1 && rec[0] == "step" {
			continue
		}
		if len(rec) != 2 {
			return nil, fmt.Errorf("%s:%d: want step,value", path, line)
		}
		v, err := strconv.ParseFloat(rec[1], 64)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: value: %w", path, line, err)
		}
		x = append(x, v)
	}
}

func realMarkdown(rows []RealRow, tol int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Real runs (DDP demo in network namespaces; eval/greyhound/realrun.py)\n\n"+
		"Hit: a rising change point in [onset−%d, relief); outside: change points elsewhere (false alarms; the relief itself, within ±%d of it, is not counted). "+
		"Reaction: steps after the onset until the online detector reports it, and the training seconds they took.\n\n"+
		"| Scenario | Algorithm | Steps | Injected | Hit | First CP | Reaction (steps) | Reaction (s) | Outside CPs | All CPs |\n|---|---|---|---|---|---|---|---|---|---|\n", tol, tol)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | [%d, %d) | %v | %d | %d | %.2f | %d | %v |\n", r.Scenario, label(r.Detector), r.Steps, r.Onset, r.Relief,
			r.Hit, r.CPIndex, r.ReactSteps, r.ReactS, r.Outside, r.CPs)
	}
	return b.String() + "\n"
}

func writeReal(w io.Writer, rows []RealRow) error {
	out := make([][]string, len(rows))
	for i, r := range rows {
		cps := make([]string, len(r.CPs))
		for j, c := range r.CPs {
			cps[j] = fmt.Sprint(c)
		}
		out[i] = []string{r.Scenario, label(r.Detector), fmt.Sprint(r.Steps), fmt.Sprint(r.Onset), fmt.Sprint(r.Relief), fmt.Sprint(r.Hit),
			fmt.Sprint(r.CPIndex), fmt.Sprint(r.ReactSteps), fmt.Sprintf("%.2f", r.ReactS), fmt.Sprint(r.Outside), strings.Join(cps, " ")}
	}
	return writeRows(w, []string{"scenario", "algorithm", "steps", "onset", "relief", "hit", "cp_index", "react_steps", "react_s", "outside_cps", "cps"}, out)
}

// RealACF is the ACF iteration time of one recorded run's rank against the
// client's own step times over the same steps (§7.2's error measure).
type RealACF struct {
	Scenario          string
	Rank, Calls       int
	Period            int
	Iters             int
	EstMS, TruthMS    float64
	ErrPct            float64
	FirstStep, ToStep int64
}

// realACF runs greyhound.IterationTimes on each rank's captured calls
// (<scenario>.collectives.jsonl) and compares the mean iteration time with
// the mean step time of the steps its anchors span.
func realACF(dir string) ([]RealACF, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.collectives.jsonl"))
	slices.Sort(files)
	var out []RealACF
	for _, f := range files {
		scen := strings.TrimSuffix(filepath.Base(f), ".collectives.jsonl")
		x, err := readSeries(strings.TrimSuffix(f, ".collectives.jsonl") + ".csv")
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		byRank := map[int][]collective.Call{}
		for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var c collective.Call
			if err := json.Unmarshal([]byte(line), &c); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", f, i+1, err)
			}
			byRank[c.Rank] = append(byRank[c.Rank], c)
		}
		for _, r := range slices.Sorted(maps.Keys(byRank)) {
			calls := byRank[r]
			slices.SortStableFunc(calls, func(a, b collective.Call) int { return cmp.Compare(a.EnterNS, b.EnterNS) })
			s, err := greyhound.IterationTimes(calls, greyhound.DefaultConfig())
			if err != nil {
				return nil, fmt.Errorf("%s rank %d: %w", f, r, err)
			}
			row := RealACF{Scenario: scen, Rank: r, Calls: len(calls), Period: s.Period, Iters: len(s.Iters), ErrPct: math.NaN()}
			if s.OK && len(s.Iters) > 0 {
				// The steps the estimate spans: those of the calls nearest
				// its first start and last end.
				first := s.Iters[0].EndNS - int64(s.Iters[0].MS*1e6)
				from, okF := nearestStep(calls, first)
				to, okT := nearestStep(calls, s.Iters[len(s.Iters)-1].EndNS)
				if okF && okT && to > from && to <= int64(len(x)) {
					row.FirstStep, row.ToStep = from, to
					est := 0.0
					for _, it := range s.Iters {
						est += it.MS
					}
					row.EstMS = est / float64(len(s.Iters))
					row.TruthMS = mean(x[from+1 : to+1])
					row.ErrPct = 100 * math.Abs(row.EstMS-row.TruthMS) / row.TruthMS
				}
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// nearestStep is the Step of the call entering closest to ns.
func nearestStep(calls []collective.Call, ns int64) (int64, bool) {
	best, bd := int64(-1), int64(math.MaxInt64)
	for _, c := range calls {
		d := c.EnterNS - ns
		if d < 0 {
			d = -d
		}
		if d < bd && c.Step >= 0 {
			best, bd = c.Step, d
		}
	}
	return best, best >= 0
}

func realACFMarkdown(rows []RealACF) string {
	var b strings.Builder
	b.WriteString("### ACF iteration time on the recorded runs' captured collectives\n\n" +
		"Per rank: `greyhound.IterationTimes` on the calls the Python client captured; truth = the mean step time " +
		"(slowest rank's step-end interval) over the steps the estimate spans.\n\n" +
		"| Scenario | Rank | Calls | Period | Iterations | Steps | Estimated (ms) | Steps' mean (ms) | Error (%) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | (%d, %d] | %.1f | %.1f | %s |\n", r.Scenario, r.Rank, r.Calls, r.Period, r.Iters,
			r.FirstStep, r.ToStep, r.EstMS, r.TruthMS, ff(r.ErrPct))
	}
	return b.String() + "\n"
}
