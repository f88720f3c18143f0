package analysis

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/laggard-dev/laggard/internal/engine/stagefrontier"
	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/stats"
)

// group is one comparable role group of a job.
type group struct {
	key    string
	ranks  int
	schema signal.Schema
	// cells is the group's dense cells per step (ranks × effective stages).
	cells int64
}

// groupsOf partitions the job's ranks into role groups, largest first. It
// counts from the joined ranks (ranks that never joined share one group),
// so a job declaring 2^20 ranks costs its joined ranks, not 2^20 (D2b).
func groupsOf(job *signal.Job) []group {
	count := map[string]int{}
	// next is the lowest rank that never joined (job.Ranks is rank-ordered).
	joined, next := 0, 0
	for _, rk := range job.Ranks {
		if rk.Rank < 0 || rk.Rank >= job.WorldSize {
			continue
		}
		count[rk.Role.Group()]++
		joined++
		if rk.Rank == next {
			next++
		}
	}
	if n := job.WorldSize - joined; n > 0 {
		count[job.GroupOf(next)] += n
	}
	out := make([]group, 0, len(count))
	k := int64(max(job.Accumulation, 1))
	for key, n := range count {
		s := job.GroupSchema(key)
		out = append(out, group{key: key, ranks: n, schema: s, cells: int64(n) * int64(len(s.Stages)) * k})
	}
	slices.SortFunc(out, func(a, b group) int {
		if a.ranks != b.ranks {
			return b.ranks - a.ranks
		}
		if a.key < b.key {
			return -1
		}
		return 1
	})
	return out
}

func cellsPerStep(gs []group) int64 {
	n := int64(0)
	for _, g := range gs {
		n += g.cells
	}
	return max(n, 1)
}

// history is the per-step frontier series of every group over the job's
// recent steps, and what the time axis found in it.
type history struct {
	from, to  int64
	truncated bool
	steps     []int64   // distinct steps with data in any group, ascending
	exposed   []float64 // the job's exposed time per step: the slowest group's
	// primary is the largest group's series, aligned with steps (NaN
	// advances where it has no data).
	primary   []stagefrontier.StepPoint
	stages    []string
	warmup    int // index into steps of the first steady step
	cps       []stats.ChangePoint
	stageCPs  []StageChangePoint
	detector  string
	cpsReport []ChangePoint
}

// readHistory computes the per-step series over the last steps of the job,
// bounded by HistorySteps and HistoryCells, reading ChunkCells at a time.
func (a *Analyzer) readHistory(ctx context.Context, job *signal.Job, gs []group, st JobStats) (*history, error) {
	per := cellsPerStep(gs)
	H := int(min(int64(a.lim.HistorySteps), max(a.lim.HistoryCells/per, 1)))
	from, to, ok, err := a.src.LastSteps(job.ID, H)
	if err != nil || !ok {
		return nil, err
	}
	h := &history{from: from, to: to, stages: gs[0].schema.Stages}
	h.truncated = st.FirstStep < from
	chunk := int(max(a.lim.ChunkCells/per, 1))
	exposed := map[int64]float64{}
	primary := map[int64]stagefrontier.StepPoint{}
	// Chunks hold at most `chunk` distinct steps; their bounds come from
	// the stored steps themselves, so sparse step numbers cost nothing.
	hi := to
	for k := 1; ; k++ {
		lo := from
		if k*chunk < H {
			f, _, ok, err := a.src.LastSteps(job.ID, k*chunk)
			if err != nil {
				return nil, err
			}
			if ok && f > from {
				lo = f
			}
		}
		series, err := a.chunkSeries(ctx, job, gs, lo, hi)
		if err != nil {
			return nil, err
		}
		for gi, ss := range series {
			for _, pt := range ss {
				if cur, seen := exposed[pt.Step]; !seen || pt.ExposedMS > cur {
					exposed[pt.Step] = pt.ExposedMS
				}
				if gi == 0 {
					primary[pt.Step] = pt
				}
			}
		}
		if lo <= from {
			break
		}
		hi = lo - 1
	}
	for s := range exposed {
		h.steps = append(h.steps, s)
	}
	slices.Sort(h.steps)
	h.exposed = make([]float64, len(h.steps))
	h.primary = make([]stagefrontier.StepPoint, len(h.steps))
	for i, s := range h.steps {
		h.exposed[i] = exposed[s]
		pt, ok := primary[s]
		if !ok {
			pt = stagefrontier.StepPoint{Step: s, ExposedMS: math.NaN(), LeaderRank: -1, AdvanceMS: nanSlice(len(h.stages))}
		}
		h.primary[i] = pt
	}
	a.detect(h)
	return h, nil
}

// chunkSeries assembles steps [lo, hi] once per group from one scan (plus
// the prefetch look-back) and returns each group's step series.
func (a *Analyzer) chunkSeries(ctx context.Context, job *signal.Job, gs []group, lo, hi int64) ([][]stagefrontier.StepPoint, error) {
	asms := make([]*stagefrontier.Assembler, len(gs))
	for i, g := range gs {
		asms[i] = stagefrontier.NewAssembler(job, stagefrontier.AssembleOptions{FromStep: lo, ToStep: hi, Group: g.key})
	}
	var bad skipped // reported by the window itself; the time axis just leaves them out
	if err := a.scan(ctx, job.ID, lo, hi, bad.adder(asms...)); err != nil {
		return nil, err
	}
	out := make([][]stagefrontier.StepPoint, len(gs))
	for i, as := range asms {
		w, err := as.Finish()
		if err != nil {
			continue // the group has no vectors in this chunk
		}
		if out[i], err = stagefrontier.Series(w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func nanSlice(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// detect finds warm-up and change points of the exposed series, and the
// change points of each primary-group stage's advance series.
func (a *Analyzer) detect(h *history) {
	det := a.detector
	h.detector = det.Name()
	cps := det.Detect(h.exposed)
	h.warmup = stats.Warmup(h.exposed, cps, a.lim.MaxWarmup, 0.10)
	for _, c := range cps {
		if c.Index > h.warmup { // the warm-up's own drop is not a change
			h.cps = append(h.cps, c)
		}
	}
	for i, c := range h.cps {
		lo, hi := h.warmup, len(h.steps)
		if i > 0 {
			lo = h.cps[i-1].Index
		}
		if i+1 < len(h.cps) {
			hi = h.cps[i+1].Index
		}
		cp := ChangePoint{Step: h.steps[c.Index], Kind: Onset, BeforeMS: c.Before, AfterMS: c.After, DeltaMS: c.Delta(), Rel: c.RelChange(), Score: c.Score}
		if !c.Rise() {
			cp.Kind = Relief
		}
		for s, name := range h.stages {
			b, af := h.stageMedian(s, lo, c.Index), h.stageMedian(s, c.Index, hi)
			cp.Stages = append(cp.Stages, StageShift{Stage: name, BeforeMS: b, AfterMS: af, DeltaMS: af - b})
		}
		slices.SortStableFunc(cp.Stages, func(x, y StageShift) int { return cmp.Compare(math.Abs(y.DeltaMS), math.Abs(x.DeltaMS)) })
		h.cpsReport = append(h.cpsReport, cp)
	}
	col := make([]float64, 0, len(h.steps))
	for s, name := range h.stages {
		col = col[:0]
		idx := make([]int, 0, len(h.steps))
		for i := h.warmup; i < len(h.primary); i++ {
			if v := h.primary[i].AdvanceMS[s]; !math.IsNaN(v) {
				col = append(col, v)
				idx = append(idx, i)
			}
		}
		for _, c := range det.Detect(col) {
			k := ChangePoint{Kind: Onset}
			if !c.Rise() {
				k.Kind = Relief
			}
			h.stageCPs = append(h.stageCPs, StageChangePoint{Stage: name, Step: h.steps[idx[c.Index]], Kind: k.Kind, BeforeMS: c.Before, AfterMS: c.After})
		}
	}
}

// stageMedian is the median advance of primary-group stage s over steps
// [lo, hi) of the history (NaN cells skipped).
func (h *history) stageMedian(s, lo, hi int) float64 {
	xs := make([]float64, 0, hi-lo)
	for i := lo; i < hi; i++ {
		if v := h.primary[i].AdvanceMS[s]; !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	return stats.Median(xs)
}

// timeline renders the history for the report.
func (h *history) timeline(group string) *Timeline {
	t := &Timeline{Detector: h.detector, From: h.from, To: h.to, Truncated: h.truncated, Group: group,
		Stages: h.stages, ChangePoints: h.cpsReport, StageChangePoints: h.stageCPs}
	if t.ChangePoints == nil {
		t.ChangePoints = []ChangePoint{}
	}
	if t.StageChangePoints == nil {
		t.StageChangePoints = []StageChangePoint{}
	}
	t.WarmupEnd = h.from
	if h.warmup < len(h.steps) {
		t.WarmupEnd = h.steps[h.warmup]
	}
	t.Series = make([]TimelinePoint, len(h.steps))
	for i, s := range h.steps {
		adv := make([]float64, len(h.stages))
		for k, v := range h.primary[i].AdvanceMS {
			adv[k] = v
			if math.IsNaN(v) {
				adv[k] = 0
			}
		}
		t.Series[i] = TimelinePoint{Step: s, ExposedMS: h.exposed[i], AdvanceMS: adv}
	}
	return t
}
