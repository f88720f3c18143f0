package stagefrontier

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/laggard-dev/laggard/internal/signal"
	"github.com/laggard-dev/laggard/internal/signal/stagevec"
)

// Contract checks (App. A Table 11), the Check of each stagevec.Finding the
// assembler records. The labeler keys telemetry gates off them.
const (
	FindingMissingRanks = "missing_ranks"
	FindingMissingCells = "missing_cells"
	FindingDuplicate    = "duplicate"
	FindingPrefetch     = "prefetch"
	FindingAccumulation = "accumulation"
	FindingNested       = "nested"
	FindingSchema       = "schema"
)

// Dense windows above this many cells fall back to per-step slabs so an
// absurd ToStep cannot make the assembler reserve terabytes.
const maxBoundedCells = 1 << 28

// slab is the storage of one step: views into the dense window arrays in
// bounded mode, or its own arrays when the window is open-ended.
type slab struct {
	step     int64
	d        []float64 // R*S
	wall     []float64 // R
	clos     []float64 // R
	present  []bool    // R
	dataSeen []bool    // R; nil until a prefetched vector is seen
	micro    []uint64  // R*words; nil when accumulation is off
	probeV   [][]float64
	probeS   [][]bool
	any      bool
}

type asm struct {
	job     *signal.Job
	schema  signal.Schema // the window's ordered stage list
	hash    string        // its order hash
	members []signal.Rank // the window's ranks, ascending global rank id
	pos     []int32       // global rank → window position, −1 outside; nil: identity
	lo, hi  int64
	R, G, K int // ranks, schema stages, accumulation factor
	S       int // effective stages K*G
	words   int // uint64 words of micro mask per cell
	dataIdx int // schema index of data.next_wait, -1 if absent

	bounded bool
	slabs   []slab          // bounded: index step-lo
	open    map[int64]*slab // unbounded
	// Dense arrays in bounded mode.
	d, wall, clos []float64
	present       []bool
	dataSeen      []bool
	micro         []uint64
	probeV        [][]float64
	probeS        [][]bool

	prefetch bool // a vector with DataLead > 0 was seen
	maxLead  int

	dropped, nested int64
	otherGroup      int64 // vectors of ranks outside the window's group or schema
	dups            int
	conflicts       int // cells whose data wait two vectors claimed
	firstDup        string
	err             error
}

func (a *asm) init(job *signal.Job, opt AssembleOptions) {
	a.job = job
	if job == nil {
		a.err = errors.New("stagefrontier: nil job")
		return
	}
	if err := job.Schema.Validate(); err != nil {
		a.err = err
		return
	}
	a.selectGroup(opt.Group)
	if a.err != nil {
		return
	}
	a.lo, a.hi = opt.FromStep, opt.ToStep
	if a.hi == 0 {
		a.hi = math.MaxInt64
	}
	if a.lo < 0 {
		a.lo = 0
	}
	a.R = len(a.members)
	a.G = len(a.schema.Stages)
	a.K = max(job.Accumulation, 1)
	a.S = a.K * a.G
	a.words = (a.K + 63) / 64
	a.dataIdx = a.schema.Index(stagevec.StageData)
	a.probeV = make([][]float64, len(a.schema.Probes))
	a.probeS = make([][]bool, len(a.schema.Probes))
	if a.R < 1 {
		a.err = &signal.FieldError{Field: "world_size", Msg: "must be >= 1"}
		return
	}
	if a.hi < a.lo {
		a.err = &signal.FieldError{Field: "to_step", Msg: fmt.Sprintf("%d is before from_step %d", a.hi, a.lo)}
		return
	}
	span := uint64(a.hi - a.lo)
	if a.hi != math.MaxInt64 && span < maxBoundedCells && (span+1)*uint64(a.R*a.S) <= maxBoundedCells {
		a.initBounded(int(span + 1))
	} else {
		a.open = make(map[int64]*slab)
	}
}

// selectGroup picks the window's ranks and schema: every rank and the
// job's default schema for "", else the ranks of role group g and the
// schema that group declared (App. A Table 11: a frontier is only taken
// inside one diagnosis group).
func (a *asm) selectGroup(g string) {
	job := a.job
	if job.WorldSize < 1 || job.WorldSize > signal.MaxWorldSize {
		a.err = &signal.FieldError{Field: "world_size", Msg: fmt.Sprintf("must be in [1, %d], got %d", signal.MaxWorldSize, job.WorldSize)}
		return
	}
	a.schema = job.Schema
	if g != "" {
		a.schema = job.GroupSchema(g)
		a.pos = make([]int32, job.WorldSize)
	}
	if err := a.schema.Validate(); err != nil {
		a.err = err
		return
	}
	a.hash = a.schema.OrderHash()
	var groups []string
	if g != "" {
		groups = job.Grouping()
	}
	for r := 0; r < job.WorldSize; r++ {
		rk, _ := job.RankInfo(r)
		rk.Schema = nil
		if g != "" {
			if groups[r] != g {
				a.pos[r] = -1
				continue
			}
			a.pos[r] = int32(len(a.members))
		}
		a.members = append(a.members, rk)
	}
	if len(a.members) == 0 {
		a.err = &signal.FieldError{Field: "group", Msg: fmt.Sprintf("role group %q has no ranks", g)}
	}
}

// initBounded reserves the dense arrays up front: untouched pages of a large
// allocation are never faulted in, so sparse windows stay cheap.
func (a *asm) initBounded(T int) {
	a.bounded = true
	R, S := a.R, a.S
	a.d = make([]float64, T*R*S)
	a.wall = make([]float64, T*R)
	a.clos = make([]float64, T*R)
	a.present = make([]bool, T*R)
	if a.K > 1 {
		a.micro = make([]uint64, T*R*a.words)
	}
	a.slabs = make([]slab, T)
	for i := range a.slabs {
		sl := &a.slabs[i]
		sl.step = a.lo + int64(i)
		sl.d = a.d[i*R*S : (i+1)*R*S]
		sl.wall = a.wall[i*R : (i+1)*R]
		sl.clos = a.clos[i*R : (i+1)*R]
		sl.present = a.present[i*R : (i+1)*R]
		if a.micro != nil {
			sl.micro = a.micro[i*R*a.words : (i+1)*R*a.words]
		}
		sl.probeV = make([][]float64, len(a.probeV))
		sl.probeS = make([][]bool, len(a.probeS))
	}
}

func (a *asm) inWindow(step int64) bool { return step >= a.lo && step <= a.hi }

func (a *asm) slabFor(step int64) *slab {
	if a.bounded {
		return &a.slabs[step-a.lo]
	}
	if sl := a.open[step]; sl != nil {
		return sl
	}
	R := a.R
	sl := &slab{step: step, d: make([]float64, R*a.S), wall: make([]float64, R), clos: make([]float64, R),
		present: make([]bool, R), probeV: make([][]float64, len(a.probeV)), probeS: make([][]bool, len(a.probeS))}
	if a.K > 1 {
		sl.micro = make([]uint64, R*a.words)
	}
	if a.prefetch {
		sl.dataSeen = make([]bool, R)
	}
	a.open[step] = sl
	return sl
}

// enablePrefetch starts tracking which cells received a data wait. Until
// the first prefetched vector every present cell carried its own data wait.
func (a *asm) enablePrefetch() {
	a.prefetch = true
	if a.bounded {
		a.dataSeen = slices.Clone(a.present)
		R := a.R
		for i := range a.slabs {
			a.slabs[i].dataSeen = a.dataSeen[i*R : (i+1)*R]
		}
		return
	}
	for _, sl := range a.open {
		sl.dataSeen = slices.Clone(sl.present)
	}
}

func (a *asm) probeCol(sl *slab, p int) ([]float64, []bool) {
	if sl.probeV[p] != nil {
		return sl.probeV[p], sl.probeS[p]
	}
	if !a.bounded {
		v := make([]float64, a.R)
		for i := range v {
			v[i] = math.NaN()
		}
		sl.probeV[p], sl.probeS[p] = v, make([]bool, a.R)
		return sl.probeV[p], sl.probeS[p]
	}
	R := a.R
	v := make([]float64, len(a.slabs)*R)
	for i := range v {
		v[i] = math.NaN()
	}
	s := make([]bool, len(v))
	a.probeV[p], a.probeS[p] = v, s
	for i := range a.slabs {
		a.slabs[i].probeV[p] = v[i*R : (i+1)*R]
		a.slabs[i].probeS[p] = s[i*R : (i+1)*R]
	}
	return sl.probeV[p], sl.probeS[p]
}

func (a *asm) add(v *stagevec.Vector) error {
	if a.err != nil {
		return a.err
	}
	if v == nil {
		return errors.New("stagefrontier: nil stage vector")
	}
	if err := v.Validate(a.job); err != nil {
		return err
	}
	r := v.Rank
	if a.pos != nil {
		if r = int(a.pos[r]); r < 0 {
			return nil // another role group's vector
		}
	}
	if len(a.job.Groups) > 0 && a.job.SchemaFor(v.Rank).OrderHash() != a.hash {
		a.otherGroup++ // its durations follow another stage order
		return nil
	}
	lead := 0
	if a.dataIdx >= 0 {
		lead = v.DataLead
	}
	target := v.Step + int64(lead)
	own := a.inWindow(v.Step)
	landed := lead > 0 && a.inWindow(target)
	if !own && !landed {
		return nil
	}
	if lead > 0 && !a.prefetch {
		a.enablePrefetch()
	}
	a.maxLead = max(a.maxLead, lead)
	G := a.G
	base := r*a.S + v.Micro*G

	// Closure over the explicit (non-residual) stages, App. A.
	e, residual, _ := stagevec.Closure(v.Durations[:G-1], v.WallMS)
	wall := v.WallMS
	if len(v.Durations) == G {
		residual = v.Durations[G-1]
		if wall == 0 { // client sent the residual but no wall time
			wall = sumOf(v.Durations)
			e = residual
		}
	}
	data := 0.0
	if a.dataIdx >= 0 {
		data = v.Durations[a.dataIdx]
	}

	if own {
		sl := a.slabFor(v.Step)
		if a.isDuplicate(sl, r, v.Micro) {
			a.dups++
			if a.firstDup == "" {
				a.firstDup = fmt.Sprintf("step %d rank %d micro %d", v.Step, v.Rank, v.Micro)
			}
			return nil
		}
		sl.present[r], sl.any = true, true
		row := sl.d[base : base+G]
		for g := 0; g < G-1; g++ {
			if g == a.dataIdx {
				if lead == 0 {
					a.chargeData(sl, r, base, data)
				}
				continue // a prefetched wait is charged to the consuming step below
			}
			row[g] = v.Durations[g]
		}
		row[G-1] = residual
		if lead > 0 {
			sl.wall[r] += wall - data
		} else {
			sl.wall[r] += wall
		}
		sl.clos[r] += e
		a.dropped += v.Dropped
		a.nested += int64(v.Nested)
		for name, p := range v.Probes {
			pi := slices.Index(a.schema.Probes, name)
			vals, sampled := a.probeCol(sl, pi)
			sampled[r] = true
			if p.Ready {
				if math.IsNaN(vals[r]) {
					vals[r] = p.Value
				} else {
					vals[r] += p.Value
				}
			}
		}
	}
	if landed {
		// App. A: a data wait is charged to the step that consumes the batch.
		sl := a.slabFor(target)
		a.chargeData(sl, r, base, data)
		sl.wall[r] += data
	}
	return nil
}

// chargeData stores the data wait consumed by a cell. Two vectors claiming
// the same batch (inconsistent DataLead) is a contract violation; keeping
// the larger wait makes the result independent of arrival order.
func (a *asm) chargeData(sl *slab, r, base int, data float64) {
	i := base + a.dataIdx
	if sl.dataSeen != nil {
		if sl.dataSeen[r] && a.K == 1 {
			a.conflicts++
		}
		sl.dataSeen[r] = true
	}
	sl.d[i] = max(sl.d[i], data)
}

func (a *asm) isDuplicate(sl *slab, r, m int) bool {
	if a.K == 1 {
		return sl.present[r]
	}
	w := &sl.micro[r*a.words+m/64]
	bit := uint64(1) << (m % 64)
	if *w&bit != 0 {
		return true
	}
	*w |= bit
	return false
}

func (a *asm) finish() (*stagevec.Window, error) {
	if a.err != nil {
		return nil, a.err
	}
	var used []*slab
	if a.bounded {
		for i := range a.slabs {
			if a.slabs[i].any {
				used = append(used, &a.slabs[i])
			}
		}
	} else {
		for _, sl := range a.open {
			if sl.any {
				used = append(used, sl)
			}
		}
		slices.SortFunc(used, func(x, y *slab) int { return cmp.Compare(x.step, y.step) })
	}
	if len(used) == 0 {
		return nil, fmt.Errorf("stagefrontier: no stage vectors in window [%d, %s]", a.lo, stepStr(a.hi))
	}
	T, R, S := len(used), a.R, a.S
	steps := make([]int64, T)
	for i, sl := range used {
		steps[i] = sl.step
	}
	w := &stagevec.Window{JobID: a.job.ID, Schema: a.schema, Ranks: a.members, Steps: steps}
	w.Stages, w.Group = expandStages(a.schema.Stages, a.K)
	w.Findings = a.findings(used)

	if a.bounded {
		// Compact used steps to the front in place; copy handles overlap.
		for i, sl := range used {
			j := int(sl.step - a.lo)
			if i != j {
				copy(a.d[i*R*S:(i+1)*R*S], sl.d)
				copy(a.wall[i*R:(i+1)*R], sl.wall)
				copy(a.clos[i*R:(i+1)*R], sl.clos)
				copy(a.present[i*R:(i+1)*R], sl.present)
				for p := range a.probeV {
					if a.probeV[p] != nil {
						copy(a.probeV[p][i*R:(i+1)*R], sl.probeV[p])
						copy(a.probeS[p][i*R:(i+1)*R], sl.probeS[p])
					}
				}
			}
		}
		w.D, w.Wall, w.Closure, w.Present = a.d[:T*R*S:T*R*S], a.wall[:T*R:T*R], a.clos[:T*R:T*R], a.present[:T*R:T*R]
		for p, name := range a.schema.Probes {
			if a.probeV[p] != nil {
				w.Probes = setProbe(w.Probes, name, &stagevec.ProbeColumn{Value: a.probeV[p][:T*R], Sampled: a.probeS[p][:T*R]})
			}
		}
	} else {
		w.D, w.Wall, w.Closure, w.Present = make([]float64, T*R*S), make([]float64, T*R), make([]float64, T*R), make([]bool, T*R)
		for i, sl := range used {
			copy(w.D[i*R*S:], sl.d)
			copy(w.Wall[i*R:], sl.wall)
			copy(w.Closure[i*R:], sl.clos)
			copy(w.Present[i*R:], sl.present)
			for p, name := range a.schema.Probes {
				if sl.probeV[p] == nil {
					continue
				}
				col := w.Probes[name]
				if col == nil {
					col = &stagevec.ProbeColumn{Value: make([]float64, T*R), Sampled: make([]bool, T*R)}
					for k := range col.Value {
						col.Value[k] = math.NaN()
					}
					w.Probes = setProbe(w.Probes, name, col)
				}
				copy(col.Value[i*R:], sl.probeV[p])
				copy(col.Sampled[i*R:], sl.probeS[p])
			}
		}
	}
	if !slices.Contains(w.Present, false) {
		w.Present = nil // nil means every cell was reported
	}
	w.Dropped, w.Nested = a.dropped, a.nested
	a.slabs, a.open = nil, nil
	a.err = errors.New("stagefrontier: assembler already finished")
	return w, nil
}

func setProbe(m map[string]*stagevec.ProbeColumn, name string, c *stagevec.ProbeColumn) map[string]*stagevec.ProbeColumn {
	if m == nil {
		m = map[string]*stagevec.ProbeColumn{}
	}
	m[name] = c
	return m
}

// findings runs the assembly-time contract checks of App. A Table 11.
func (a *asm) findings(used []*slab) []stagevec.Finding {
	var out []stagevec.Finding
	add := func(check, format string, args ...any) {
		out = append(out, stagevec.Finding{Check: check, Detail: fmt.Sprintf(format, args...)})
	}
	R := a.R
	seen := make([]bool, R)
	missingCells, incomplete, fetchedOutside := 0, 0, 0
	var firstOutside int64 = -1
	for _, sl := range used {
		for r := 0; r < R; r++ {
			if !sl.present[r] {
				missingCells++
				continue
			}
			seen[r] = true
			if a.K > 1 && !fullMask(sl.micro[r*a.words:(r+1)*a.words], a.K) {
				incomplete++
			}
			if sl.dataSeen != nil && !sl.dataSeen[r] {
				fetchedOutside++
				if firstOutside < 0 {
					firstOutside = sl.step
				}
			}
		}
	}
	var missing []int
	for r, ok := range seen {
		if !ok {
			missing = append(missing, a.members[r].Rank)
		}
	}
	if len(missing) > 0 {
		add(FindingMissingRanks, "%d of %d ranks sent nothing in the window: %s", len(missing), R, intList(missing, 16))
	}
	if partial := missingCells - len(missing)*len(used); partial > 0 {
		add(FindingMissingCells, "%d (step,rank) cells of present ranks are missing", partial)
	}
	if a.dups > 0 {
		add(FindingDuplicate, "%d repeated (step,rank,micro) vectors ignored, kept the first (first at %s)", a.dups, a.firstDup)
	}
	if fetchedOutside > 0 {
		add(FindingPrefetch, "%d cells (first at step %d) consume a batch fetched before the window (data_lead up to %d); data.next_wait left 0", fetchedOutside, firstOutside, a.maxLead)
	}
	if a.conflicts > 0 {
		add(FindingPrefetch, "%d cells had their data wait claimed by two vectors (inconsistent data_lead); kept the larger", a.conflicts)
	}
	if incomplete > 0 {
		add(FindingAccumulation, "%d (step,rank) cells miss some of the %d accumulation microsteps", incomplete, a.K)
	}
	if a.nested > 0 {
		add(FindingNested, "clients rejected %d nested ordered spans", a.nested)
	}
	if a.otherGroup > 0 {
		add(FindingSchema, "%d vectors follow another role group's ordered stage list and were left out of this window", a.otherGroup)
	}
	return out
}

func fullMask(ws []uint64, k int) bool {
	for i, w := range ws {
		n := min(64, k-64*i)
		want := ^uint64(0)
		if n < 64 {
			want = uint64(1)<<n - 1
		}
		if w&want != want {
			return false
		}
	}
	return true
}

// expandStages expands the ordered list micro-major for accumulation
// factor k (StageFrontier §3, last paragraph): stage#m, Group maps back.
func expandStages(stages []string, k int) ([]string, []int) {
	G := len(stages)
	names, group := make([]string, 0, k*G), make([]int, 0, k*G)
	for m := 0; m < k; m++ {
		for g, st := range stages {
			if k > 1 {
				st += "#" + strconv.Itoa(m)
			}
			names = append(names, st)
			group = append(group, g)
		}
	}
	return names, group
}

func sumOf(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func stepStr(s int64) string {
	if s == math.MaxInt64 {
		return "end"
	}
	return strconv.FormatInt(s, 10)
}

func intList(xs []int, limit int) string {
	s := ""
	for i, x := range xs {
		if i == limit {
			return s + fmt.Sprintf(", … (%d more)", len(xs)-limit)
		}
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(x)
	}
	return s
}
