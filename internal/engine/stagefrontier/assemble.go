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

// Dense windows above this many cells (128 MiB of durations) fall back to
// per-step slabs whose ranks are placed as they first report, so neither
// an absurd ToStep nor a huge declared world makes the assembler reserve
// memory for cells nobody stored (issue 6 D1, D2b).
const maxBoundedCells = 1 << 24

// maxBoundedRanks: groups above this many declared ranks always place
// ranks lazily, so their windows cost the ranks that report (D2b).
const maxBoundedRanks = 1 << 14

// MaxAbsentRanks bounds how many of a window's ranks that sent nothing in
// it the window still carries (as rows without cells): enough to list
// them and to gate the distributed labels on missing ranks, while a job
// declaring 2^20 ranks of which six report costs six ranks, not a million
// (issue 6 D2b). The others are counted in the missing-ranks finding and
// by Assembler.LeftOut.
const MaxAbsentRanks = 64

// TooLargeError: the window stores more cells than AssembleOptions.MaxCells
// (steps with data × ranks carried × effective stages).
type TooLargeError struct {
	Steps, Ranks, Stages int
	Limit                int64
}

// Cells is the window's size when the limit was crossed.
func (e *TooLargeError) Cells() int64 { return int64(e.Steps) * int64(e.Ranks) * int64(e.Stages) }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("stagefrontier: the window stores at least %d steps × %d ranks × %d stages = %d cells, over the limit of %d",
		e.Steps, e.Ranks, e.Stages, e.Cells(), e.Limit)
}

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
	group   string        // the role group ("" every rank)
	members []signal.Rank // the window's ranks by position: ascending global rank id, or (lazy) first-report order
	pos     []int32       // global rank → window position, −1 outside; nil: identity
	lo, hi  int64

	// Lazy placement (open mode): a rank gets a position when it first
	// reports, so storage follows the ranks that sent data.
	lazy      bool
	lazyPos   map[int]int32 // global rank → position, −1 outside the group
	unjoined  string        // the role group of ranks that never joined
	groupSize int           // ranks of the window's group, placed or not
	seen      []bool        // per position: reported a vector inside the window
	nSeen     int
	usedSteps int
	maxCells  int64
	leftOut   int // silent ranks not carried (MaxAbsentRanks), after finish

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
	a.maxCells = opt.MaxCells
	a.G = len(a.schema.Stages)
	a.K = max(job.Accumulation, 1)
	a.S = a.K * a.G
	a.words = (a.K + 63) / 64
	a.dataIdx = a.schema.Index(stagevec.StageData)
	a.probeV = make([][]float64, len(a.schema.Probes))
	a.probeS = make([][]bool, len(a.schema.Probes))
	if a.hi < a.lo {
		a.err = &signal.FieldError{Field: "to_step", Msg: fmt.Sprintf("%d is before from_step %d", a.hi, a.lo)}
		return
	}
	span := uint64(a.hi - a.lo) // hi >= lo >= 0: no overflow
	if a.hi != math.MaxInt64 && span < maxBoundedCells && a.groupSize <= maxBoundedRanks && (span+1)*uint64(a.groupSize)*uint64(a.S) <= maxBoundedCells {
		a.placeAll()
		a.R = len(a.members)
		a.seen = make([]bool, a.R)
		a.initBounded(int(span + 1))
	} else {
		a.lazy = true
		a.lazyPos = make(map[int]int32)
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
	a.group = g
	a.schema = job.Schema
	if g != "" {
		a.schema = job.GroupSchema(g)
	}
	if err := a.schema.Validate(); err != nil {
		a.err = err
		return
	}
	a.hash = a.schema.OrderHash()
	// The group's size from the joined ranks alone (O(joined), not
	// O(world)): ranks that never joined share one group.
	a.groupSize = job.WorldSize
	if g != "" {
		a.unjoined = unjoinedGroup(job)
		joined, in := 0, 0
		for _, rk := range job.Ranks {
			if rk.Rank >= 0 && rk.Rank < job.WorldSize {
				joined++
				if rk.Role.Group() == g {
					in++
				}
			}
		}
		a.groupSize = in
		if a.unjoined == g {
			a.groupSize += job.WorldSize - joined
		}
	}
	if a.groupSize == 0 {
		a.err = &signal.FieldError{Field: "group", Msg: fmt.Sprintf("role group %q has no ranks", g)}
	}
}

// unjoinedGroup is the role group of the job's ranks that never joined
// ("" when every rank joined): GroupOf the first rank missing from the
// rank-ordered joined list.
func unjoinedGroup(job *signal.Job) string {
	r := 0
	for _, rk := range job.Ranks {
		if rk.Rank > r {
			break
		}
		if rk.Rank == r {
			r++
		}
	}
	if r >= job.WorldSize {
		return ""
	}
	return job.GroupOf(r)
}

// inGroup reports whether global rank r belongs to the window's group.
func (a *asm) inGroup(r int) bool {
	if a.group == "" {
		return true
	}
	if rk, ok := a.job.RankInfo(r); ok {
		return rk.Role.Group() == a.group
	}
	return a.unjoined == a.group
}

// placeAll gives every rank of the group its position up front, in rank
// order (bounded mode: the dense arrays are indexed by it).
func (a *asm) placeAll() {
	job := a.job
	var groups []string
	if a.group != "" {
		groups = job.Grouping()
		a.pos = make([]int32, job.WorldSize)
	}
	for r := 0; r < job.WorldSize; r++ {
		rk, _ := job.RankInfo(r)
		rk.Schema = nil
		if a.group != "" {
			if groups[r] != a.group {
				a.pos[r] = -1
				continue
			}
			a.pos[r] = int32(len(a.members))
		}
		a.members = append(a.members, rk)
	}
}

// position returns rank r's window position: −1 outside the group, −2 a
// member not placed yet (lazy mode).
func (a *asm) position(r int) int {
	if !a.lazy {
		if a.pos == nil {
			return r
		}
		return int(a.pos[r])
	}
	if p, ok := a.lazyPos[r]; ok {
		return int(p)
	}
	if !a.inGroup(r) {
		a.lazyPos[r] = -1
		return -1
	}
	return -2
}

// place gives member r the next position (lazy mode).
func (a *asm) place(r int) int {
	rk, _ := a.job.RankInfo(r)
	rk.Schema = nil
	p := len(a.members)
	a.members = append(a.members, rk)
	a.lazyPos[r] = int32(p)
	a.seen = append(a.seen, false)
	a.R++
	return p
}

// fit grows a lazy-mode slab to the ranks placed so far; rows of ranks
// placed after the slab was made are empty.
func (a *asm) fit(sl *slab) {
	n := a.R - len(sl.present)
	if n <= 0 {
		return
	}
	sl.d = append(sl.d, make([]float64, n*a.S)...)
	sl.wall = append(sl.wall, make([]float64, n)...)
	sl.clos = append(sl.clos, make([]float64, n)...)
	sl.present = append(sl.present, make([]bool, n)...)
	if sl.dataSeen != nil {
		sl.dataSeen = append(sl.dataSeen, make([]bool, n)...)
	}
	if a.K > 1 {
		sl.micro = append(sl.micro, make([]uint64, n*a.words)...)
	}
	for p := range sl.probeV {
		if sl.probeV[p] != nil {
			sl.probeV[p] = append(sl.probeV[p], nanSlice(n)...)
			sl.probeS[p] = append(sl.probeS[p], make([]bool, n)...)
		}
	}
}

// carried is how many ranks the window will hold with nSeen ranks seen:
// those plus at most MaxAbsentRanks silent ones.
func (a *asm) carried() int { return a.nSeen + min(MaxAbsentRanks, a.groupSize-a.nSeen) }

// overLimit checks the stored size against MaxCells.
func (a *asm) overLimit() error {
	if a.maxCells <= 0 {
		return nil
	}
	if e := (&TooLargeError{Steps: a.usedSteps, Ranks: a.carried(), Stages: a.S, Limit: a.maxCells}); e.Cells() > a.maxCells {
		a.err = e
		return e
	}
	return nil
}

func nanSlice(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.NaN()
	}
	return v
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
		a.fit(sl)
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
	r := a.position(v.Rank)
	if r == -1 {
		return nil // another role group's vector
	}
	if len(a.job.Groups) > 0 && a.job.SchemaFor(v.Rank).OrderHash() != a.hash {
		a.otherGroup++ // its durations follow another stage order
		return nil
	}
	lead := 0
	if a.dataIdx >= 0 {
		lead = v.DataLead
	}
	target := v.Step
	if lead > 0 && v.Step <= math.MaxInt64-int64(lead) { // never wraps
		target += int64(lead)
	}
	own := a.inWindow(v.Step)
	landed := lead > 0 && target != v.Step && a.inWindow(target)
	if !own && !landed {
		return nil
	}
	if r == -2 {
		r = a.place(v.Rank)
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
		if !sl.any {
			a.usedSteps++
		}
		if !a.seen[r] {
			a.seen[r] = true
			a.nSeen++
		}
		sl.present[r], sl.any = true, true
		if err := a.overLimit(); err != nil {
			return err
		}
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
	if err := a.overLimit(); err != nil {
		return nil, err
	}
	keep, missing := a.rows()
	T, R, S := len(used), len(keep), a.S
	steps := make([]int64, T)
	for i, sl := range used {
		steps[i] = sl.step
	}
	ranks := make([]signal.Rank, R)
	for i, k := range keep {
		ranks[i] = k.rank
	}
	w := &stagevec.Window{JobID: a.job.ID, Schema: a.schema, Ranks: ranks, Steps: steps}
	w.Stages, w.Group = expandStages(a.schema.Stages, a.K)
	w.Findings = a.findings(used, missing, R)

	if a.bounded && R == a.R {
		// Every rank is carried in position order: compact used steps to
		// the front in place; copy handles overlap.
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
		// Gather the carried rows; a rank without a row (never placed, or
		// placed after the slab was filled) stays empty.
		w.D, w.Wall, w.Closure, w.Present = make([]float64, T*R*S), make([]float64, T*R), make([]float64, T*R), make([]bool, T*R)
		for i, sl := range used {
			for j, k := range keep {
				src := int(k.pos)
				if src < 0 || src >= len(sl.present) {
					continue
				}
				c := i*R + j
				copy(w.D[c*S:(c+1)*S], sl.d[src*S:(src+1)*S])
				w.Wall[c], w.Closure[c], w.Present[c] = sl.wall[src], sl.clos[src], sl.present[src]
			}
			for p, name := range a.schema.Probes {
				if sl.probeV[p] == nil {
					continue
				}
				col := w.Probes[name]
				if col == nil {
					col = &stagevec.ProbeColumn{Value: nanSlice(T * R), Sampled: make([]bool, T*R)}
					w.Probes = setProbe(w.Probes, name, col)
				}
				for j, k := range keep {
					if src := int(k.pos); src >= 0 && src < len(sl.probeV[p]) {
						col.Value[i*R+j], col.Sampled[i*R+j] = sl.probeV[p][src], sl.probeS[p][src]
					}
				}
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

// keptRow is one rank the window carries and its position in the slabs
// (−1: a silent rank never placed, whose row stays empty).
type keptRow struct {
	rank signal.Rank
	pos  int32
}

// rows picks the ranks the window carries, in ascending rank order: every
// rank that reported inside it and at most MaxAbsentRanks silent ones
// (the lowest ids). missing lists the first silent rank ids (enough for
// the finding) and counts them all.
func (a *asm) rows() (keep []keptRow, missing silent) {
	missing.n = a.groupSize - a.nSeen
	keep = make([]keptRow, 0, a.carried())
	absent := 0
	addSilent := func(rk signal.Rank, pos int32) {
		if len(missing.first) < missingListed {
			missing.first = append(missing.first, rk.Rank)
		}
		if absent < MaxAbsentRanks {
			keep = append(keep, keptRow{rk, pos})
			absent++
		}
	}
	if !a.lazy {
		for p, rk := range a.members {
			if a.seen[p] {
				keep = append(keep, keptRow{rk, int32(p)})
			} else {
				addSilent(rk, int32(p))
			}
		}
		a.leftOut = missing.n - absent
		return keep, missing
	}
	// Lazy: the placed ranks in rank order, merged with the silent members
	// never placed, found by walking rank ids only as far as needed.
	placed := make([]int32, len(a.members))
	for i := range placed {
		placed[i] = int32(i)
	}
	slices.SortFunc(placed, func(x, y int32) int { return cmp.Compare(a.members[x].Rank, a.members[y].Rank) })
	for r, i := 0, 0; r < a.job.WorldSize; {
		if i < len(placed) && a.members[placed[i]].Rank == r {
			p := placed[i]
			if a.seen[p] {
				keep = append(keep, keptRow{a.members[p], p})
			} else {
				addSilent(a.members[p], p)
			}
			i, r = i+1, r+1
			continue
		}
		if absent >= MaxAbsentRanks { // the silent ones from here are only counted
			if i == len(placed) {
				break
			}
			r = a.members[placed[i]].Rank
			continue
		}
		if a.inGroup(r) {
			rk, _ := a.job.RankInfo(r)
			rk.Schema = nil
			addSilent(rk, -1)
		}
		r++
	}
	a.leftOut = missing.n - absent
	return keep, missing
}

// silent is the ranks of a window's group that sent nothing in it.
type silent struct {
	n     int
	first []int
}

// missingListed is how many silent rank ids the missing-ranks finding names.
const missingListed = 16

func setProbe(m map[string]*stagevec.ProbeColumn, name string, c *stagevec.ProbeColumn) map[string]*stagevec.ProbeColumn {
	if m == nil {
		m = map[string]*stagevec.ProbeColumn{}
	}
	m[name] = c
	return m
}

// findings runs the assembly-time contract checks of App. A Table 11 over
// the placed ranks; missing are the group's silent ranks, carried the
// ranks the window holds.
func (a *asm) findings(used []*slab, missing silent, carried int) []stagevec.Finding {
	var out []stagevec.Finding
	add := func(check, format string, args ...any) {
		out = append(out, stagevec.Finding{Check: check, Detail: fmt.Sprintf(format, args...)})
	}
	partial, incomplete, fetchedOutside := 0, 0, 0
	var firstOutside int64 = -1
	for _, sl := range used {
		for r := 0; r < a.R; r++ {
			if r >= len(sl.present) || !sl.present[r] {
				if a.seen[r] {
					partial++ // a rank that reported elsewhere in the window
				}
				continue
			}
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
	if missing.n > 0 {
		list := intList(missing.first, missingListed)
		if more := missing.n - len(missing.first); more > 0 {
			list += fmt.Sprintf(", … (%d more)", more)
		}
		d := fmt.Sprintf("%d of %d ranks sent nothing in the window: %s", missing.n, a.groupSize, list)
		if a.leftOut > 0 {
			d += fmt.Sprintf("; the window carries %d of them, the other %d are only counted", missing.n-a.leftOut, a.leftOut)
		}
		add(FindingMissingRanks, "%s", d)
	}
	if partial > 0 {
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
